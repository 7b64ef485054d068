/*
 * The same-host wake-up. SQLite has no notifications, so a release, after
 * its commit, writes one byte to the sidecar file <db>-baton-wake (next to
 * the database, created on first use). Each client that has a waiter
 * watches that file with inotify (IN_CLOSE_WRITE, and IN_ATTRIB so a hand
 * `touch` works too) on one thread and wakes all its waiters on any event;
 * they claim again, and the one that finds the row free gets the lock. A
 * release in the same client wakes its waiters directly as well.
 *
 * Best effort by design: a sidecar we cannot create or watch (no inotify, a
 * read-only directory, the watch limit) only means waiters fall back to
 * jittered backoff (lease.c). The file's content means nothing; its
 * replacement (deleted, renamed over) is noticed (IN_IGNORED) and the watch
 * set up again, waking everyone in case a release fell in between.
 * inotify sees changes made through this kernel only: the engine is for
 * one host (docs/sqlite-engine.md).
 */
#include "sq_int.h"
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MASK (IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW)

void sq_wake_local(sqeng *e)
{
    pthread_mutex_lock(&e->mu);
    for (sqwait *w = e->waits; w; w = w->next) baton_waiter_wake(w->w);
    pthread_mutex_unlock(&e->mu);
}

/* The sidecar exists, then the watch on it. 0, or -1 (errno). A sidecar we
 * create gets the database's read and write bits (whatever the umask):
 * whoever may write the database may signal its releases. */
static int add_watch(sqeng *e)
{
    int fd = open(e->wakepath, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd >= 0) {
        struct stat sb;
        if (stat(e->real, &sb) == 0 && fchmod(fd, sb.st_mode & 0666) != 0) { /* 0600 then: ours only */ }
        close(fd);
    } else if (errno != EEXIST) {
        return -1;
    }
    return inotify_add_watch(e->ino_fd, e->wakepath, WATCH_MASK) < 0 ? -1 : 0;
}

static int stopping(sqeng *e)
{
    int s;
    pthread_mutex_lock(&e->mu);
    s = e->stop;
    pthread_mutex_unlock(&e->mu);
    return s;
}

static void set_watching(sqeng *e, int on)
{
    pthread_mutex_lock(&e->mu);
    e->watching = on;
    pthread_mutex_unlock(&e->mu);
}

static void *watcher(void *arg)
{
    sqeng *e = arg;
    /* aligned for struct inotify_event */
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int have = 1;   /* the watch added by sq_wake_watch */

    while (!stopping(e)) {
        struct pollfd pfd[2] = { { e->ino_fd, POLLIN, 0 }, { e->stop_pipe[0], POLLIN, 0 } };
        int n = poll(pfd, 2, have ? 1000 : 200), wake = 0;
        if (n < 0 && errno != EINTR) break;
        if (pfd[1].revents) break;
        if (pfd[0].revents & POLLIN) {
            ssize_t got;
            while ((got = read(e->ino_fd, buf, sizeof buf)) > 0) {
                for (char *p = buf; p < buf + got;) {
                    struct inotify_event *ev = (struct inotify_event *)p;
                    if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) have = 0;
                    wake = 1;   /* IN_Q_OVERFLOW included: something happened */
                    p += sizeof *ev + ev->len;
                }
            }
        }
        if (!have) {
            /* the sidecar went away: a new one, a new watch; a release
             * written to the new file before the watch is caught by the
             * wake-up below */
            set_watching(e, 0);
            if (add_watch(e) == 0) {
                have = 1;
                set_watching(e, 1);
                wake = 1;
            }
        }
        if (wake) sq_wake_local(e);
    }
    set_watching(e, 0);
    return NULL;
}

void sq_wake_watch(sqeng *e)
{
    pthread_mutex_lock(&e->mu);
    if (e->thr_started || e->watch_failed || e->stop) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    /* under mu: a second waiter must not start a second watcher; the calls
     * are local and short */
    e->ino_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (e->ino_fd < 0 || add_watch(e) != 0 || pipe2(e->stop_pipe, O_CLOEXEC) != 0) {
        baton_log(BATON_LOG_INFO, "sqlite: no wake-up through %s (%s): waiters back off instead", e->wakepath,
                  strerror(errno));
        goto failed;
    }
    if (pthread_create(&e->thr, NULL, watcher, e) != 0) {
        baton_log(BATON_LOG_INFO, "sqlite: cannot start the wake-up watcher: waiters back off instead");
        goto failed;
    }
    e->thr_started = 1;
    e->watching = 1;
    pthread_mutex_unlock(&e->mu);
    return;
failed:
    if (e->ino_fd >= 0) close(e->ino_fd);
    if (e->stop_pipe[0] >= 0) close(e->stop_pipe[0]);
    if (e->stop_pipe[1] >= 0) close(e->stop_pipe[1]);
    e->ino_fd = e->stop_pipe[0] = e->stop_pipe[1] = -1;
    e->watch_failed = 1;
    pthread_mutex_unlock(&e->mu);
}

void sq_wake_others(sqeng *e)
{
    /* no O_CREAT: nobody watches a sidecar that does not exist (a watcher
     * creates it before it watches) */
    int fd = open(e->wakepath, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return;
    if (pwrite(fd, "r", 1, 0) < 0) { /* the close below still signals */ }
    close(fd);   /* IN_CLOSE_WRITE */
}

void sq_wake_stop(sqeng *e)
{
    int started;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    started = e->thr_started;
    pthread_mutex_unlock(&e->mu);
    if (started) {
        if (write(e->stop_pipe[1], "x", 1) < 0) { /* the watcher also checks stop every second */ }
        pthread_join(e->thr, NULL);
    }
    if (e->ino_fd >= 0) close(e->ino_fd);
    if (e->stop_pipe[0] >= 0) close(e->stop_pipe[0]);
    if (e->stop_pipe[1] >= 0) close(e->stop_pipe[1]);
    e->ino_fd = e->stop_pipe[0] = e->stop_pipe[1] = -1;
}
