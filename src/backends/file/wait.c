/*
 * Waiting for a lock in the kernel: a helper thread blocks in F_OFD_SETLKW
 * (flock(2) for a path lock) so the kernel queues the waiter, and giving up
 * interrupts it with a signal and joins it.
 */
#include "file_int.h"


/* One attempt at the lock a wait is for; block: wait in the kernel. */
static int lock_once(const file_wait *fw, int block)
{
    if (fw->how) return flock(fw->fd, fw->how | (block ? 0 : LOCK_NB));
    return file__setlk_range(fw->fd, block ? F_OFD_SETLKW : F_OFD_SETLK, fw->type, fw->start, fw->len);
}

static int g_intr_sig;
static pthread_once_t g_sig_once = PTHREAD_ONCE_INIT;

static void intr_handler(int sig) { (void)sig; }

static void sig_init(void)
{
    for (int sig = SIGRTMIN + 4; sig <= SIGRTMAX - 4; sig++) {
        struct sigaction old, sa;
        if (sigaction(sig, NULL, &old) || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = intr_handler;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) {
            g_intr_sig = sig;
            return;
        }
    }
}

static void *wait_main(void *arg)
{
    file_wait *fw = arg;
    int r = -1, err = 0, abandon;
    if (g_intr_sig) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, g_intr_sig);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    }
    for (int backoff_us = 500;;) {
        pthread_mutex_lock(&fw->mu);
        abandon = fw->abandon;
        pthread_mutex_unlock(&fw->mu);
        if (abandon) break;
        if (g_intr_sig) {
            r = lock_once(fw, 1);
        } else {
            /* No signal to spare: poll with capped backoff instead. */
            r = lock_once(fw, 0);
            if (r < 0 && (errno == EAGAIN || errno == EACCES)) {
                usleep((useconds_t)backoff_us);
                if (backoff_us < 20000) backoff_us *= 2;
                errno = EINTR;
            }
        }
        if (r == 0 || errno != EINTR) break;
    }
    if (r < 0 && !abandon && errno != EINTR) err = errno;
    pthread_mutex_lock(&fw->mu);
    fw->done = 1;
    fw->granted = r == 0;
    fw->err = err;
    baton_waiter_wake(fw->w);
    pthread_mutex_unlock(&fw->mu);
    return NULL;
}

/* Blocks until fd is locked as fw0 says (a range, or flock(2)), the deadline
 * passes or the call is cancelled. On failure fd is closed. WHAT names the
 * file in messages ("lock file lock.x", "lock path /var/lock/job"). */
static int wait_lock(int fd, const file_wait *fw0, baton_acquire_req *req, const char *what)
{
    file_wait fw;
    pthread_attr_t at;
    pthread_t th;
    sigset_t all, old;
    int e, rc = 0, granted;

    pthread_once(&g_sig_once, sig_init);
    memset(&fw, 0, sizeof fw);
    pthread_mutex_init(&fw.mu, NULL);
    fw.w = req->waiter;
    fw.fd = fd;
    fw.how = fw0->how;
    fw.type = fw0->type;
    fw.start = fw0->start;
    fw.len = fw0->len;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    e = pthread_create(&th, &at, wait_main, &fw);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (e) {
        pthread_mutex_destroy(&fw.mu);
        close(fd);
        return baton_seterr(BATON_ENOMEM, e, "cannot start a wait thread");
    }
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        int done;
        pthread_mutex_lock(&fw.mu);
        done = fw.done;
        pthread_mutex_unlock(&fw.mu);
        if (done) break;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
            rc = BATON_ETIMEDOUT;
        else
            rc = baton_waiter_park(req->waiter, gen, req->deadline_ns);
        if (rc) break;
    }
    if (rc) {
        /* Give up: interrupt the helper until it has left fcntl. */
        pthread_mutex_lock(&fw.mu);
        fw.abandon = 1;
        while (!fw.done) {
            pthread_mutex_unlock(&fw.mu);
            if (g_intr_sig) pthread_kill(th, g_intr_sig);
            usleep(200);
            pthread_mutex_lock(&fw.mu);
        }
        pthread_mutex_unlock(&fw.mu);
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&fw.mu);
    granted = fw.granted;
    if (rc || !granted) {
        close(fd);   /* also hands back a grant that came as we gave up */
        if (rc == BATON_ECANCELED) return baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
        if (rc) return baton_seterr(BATON_ETIMEDOUT, 0, "lock wait timed out");
        return baton_seterr(BATON_EIO, fw.err, "%s: %s", what, strerror(fw.err));
    }
    return 0;
}

/* Takes the lock fw says on fd: at once, or by waiting when the request
 * allows it. On failure fd is closed. */
int file__take_lock(int fd, file_wait *fw, baton_acquire_req *req, const char *what)
{
    int rc;
    fw->fd = fd;
    if (lock_once(fw, 0) == 0)
        return 0;
    if (errno != EAGAIN && errno != EACCES) {
        rc = baton_seterr(BATON_EIO, errno, "%s: %s", what, strerror(errno));
        close(fd);
        return rc;
    }
    if (req->deadline_ns == 0) {
        close(fd);
        return baton_seterr(BATON_ELOCKED, 0, "%s is held", what);
    }
    return wait_lock(fd, fw, req, what);
}

/* Takes a range of fd (see file__take_lock). */
int file__take_range(int fd, short type, off_t start, off_t len, baton_acquire_req *req, const char *fname)
{
    file_wait fw;
    char what[300];
    memset(&fw, 0, sizeof fw);
    fw.type = type;
    fw.start = start;
    fw.len = len;
    snprintf(what, sizeof what, "lock file %s", fname);
    return file__take_lock(fd, &fw, req, what);
}

/* ---- the inotify watcher ----------------------------------------------------
 * One thread per engine reads one inotify fd and wakes the waiters whose
 * watch an event names: semaphore waiters (their counter file), value
 * watchers (the values folder, filtered by the value's file name), group
 * watchers and queue takers (their folder). Watches are added with
 * IN_MASK_ADD, so two kinds of waiter on one path never narrow each other's
 * mask, and are never removed (they go with the engine; one per path). A
 * queue overflow wakes everyone: they re-read, so nothing is missed. */
static void *watch_main(void *arg)
{
    file_engine *e = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        struct pollfd p[2] = { { e->ino_fd, POLLIN, 0 }, { e->stop_pipe[0], POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        ssize_t n = read(e->ino_fd, buf, sizeof buf);
        if (n <= 0) continue;
        pthread_mutex_lock(&e->wmu);
        for (char *q = buf; q < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)q;
            for (watch_reg *r = e->regs; r; r = r->next) {
                if (ev->mask & IN_Q_OVERFLOW) baton_waiter_wake(r->w);
                else if (r->wd != ev->wd) continue;
                else if (!r->name[0] || !ev->len || (ev->mask & IN_IGNORED) || !strcmp(ev->name, r->name))
                    baton_waiter_wake(r->w);
            }
            q += sizeof *ev + ev->len;
        }
        pthread_mutex_unlock(&e->wmu);
    }
    return NULL;
}

int file__watch_add(file_engine *e, const char *path, uint32_t mask, const char *name, watch_reg *reg,
                    baton_waiter *w)
{
    int rc = 0;
    pthread_mutex_lock(&e->wmu);
    if (!e->wth_started) {
        sigset_t all, old;
        if (e->ino_fd < 0) e->ino_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (e->ino_fd < 0 || (e->stop_pipe[0] < 0 && pipe2(e->stop_pipe, O_CLOEXEC))) {
            rc = baton_seterr(BATON_EIO, errno, "inotify: %s", strerror(errno));
            goto out;
        }
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&e->wth, NULL, watch_main, e)) rc = baton_seterr(BATON_ENOMEM, 0, "cannot start the watcher");
        else e->wth_started = 1;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) goto out;
    }
    reg->wd = inotify_add_watch(e->ino_fd, path, mask | IN_MASK_ADD | IN_DONT_FOLLOW);
    if (reg->wd < 0) {
        rc = baton_seterr(BATON_EIO, errno, "inotify %s: %s", path, strerror(errno));
        goto out;
    }
    snprintf(reg->name, sizeof reg->name, "%s", name ? name : "");
    reg->w = w;
    reg->next = e->regs;
    e->regs = reg;
out:
    pthread_mutex_unlock(&e->wmu);
    return rc;
}

void file__watch_remove(file_engine *e, watch_reg *reg)
{
    pthread_mutex_lock(&e->wmu);
    for (watch_reg **pp = &e->regs; *pp; pp = &(*pp)->next)
        if (*pp == reg) { *pp = reg->next; break; }
    pthread_mutex_unlock(&e->wmu);
}
