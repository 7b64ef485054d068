/*
 * The embedded file backend: one lock file per name in a private directory,
 * locked with open file description (OFD) locks.
 *
 * OFD locks belong to the open file description, not the process, so two
 * handles in one process exclude each other, and the kernel drops the lock the
 * moment the holder dies. There is no lease: a lock is held until released or
 * until its holder exits. The fence is a counter inside the lock file, bumped
 * while the lock is held, so it survives every client.
 *
 * Waiting uses F_OFD_SETLKW on a helper thread, so the kernel queues the waiter
 * and grants it the instant the holder lets go (no polling). A wait that times
 * out or is cancelled abandons its helper: when that helper is finally granted
 * it unlocks at once and exits.
 */
#include "core/internal.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The record at the start of every lock file; fixed width so it is rewritten in place. */
#define REC_SIZE 256
#define REC_FMT "baton-lock 1\nfence %020" PRIu64 "\nheld %d\nholder %-200.200s\n"

typedef struct {
    int dirfd;
} file_engine;

typedef struct {
    char fname[256];
    int fd;          /* open and locked while held, else -1 */
} file_lock;

static int resolve_dir(const baton_uri *u, char *out, size_t n)
{
    const char *env;
    if (u->host && strcmp(u->host, "localhost"))
        return baton_seterr(BATON_EINVAL, 0, "file URI: host '%s' is not allowed; use file:///abs/dir", u->host);
    if (u->nparams)
        return baton_seterr(BATON_EINVAL, 0, "file URI: unknown option '%s'", u->params[0].key);
    if (u->path && *u->path) {
        if (u->path[0] != '/')
            return baton_seterr(BATON_EINVAL, 0, "file URI: the directory must be absolute");
        snprintf(out, n, "%s", u->path);
    } else if ((env = getenv("BATON_DIR")) && *env) {
        if (env[0] != '/')
            return baton_seterr(BATON_EINVAL, 0, "BATON_DIR must be an absolute path");
        snprintf(out, n, "%s", env);
    } else if ((env = getenv("XDG_RUNTIME_DIR")) && env[0] == '/') {
        snprintf(out, n, "%s/baton", env);
    } else {
        snprintf(out, n, "/tmp/baton-%lu", (unsigned long)geteuid());
    }
    return 0;
}

static int file_open(void **eng, const baton_uri *u, const baton_client_options *o)
{
    char dir[4096];
    struct stat st;
    file_engine *e;
    int rc, fd;
    (void)o;

    if ((rc = resolve_dir(u, dir, sizeof dir))) return rc;
    if (mkdir(dir, 0700) && errno != EEXIST)
        return baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
    if (fstat(fd, &st) || st.st_uid != geteuid()) {
        close(fd);
        return baton_seterr(BATON_EAUTH, 0, "lock dir %s is owned by someone else; refusing it", dir);
    }
    e = calloc(1, sizeof *e);
    if (!e) { close(fd); return baton_seterr(BATON_ENOMEM, 0, "out of memory"); }
    e->dirfd = fd;
    *eng = e;
    return 0;
}

static void file_close(void *eng)
{
    file_engine *e = eng;
    close(e->dirfd);
    free(e);
}

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ULL; }
    return h;
}

/* Any name maps to one file name inside the dir: bytes outside [A-Za-z0-9_-]
 * become %XX (so '/', '.', ".." cannot survive), and long names are cut and
 * suffixed with a 128-bit hash of the whole name. */
int baton__file_name(const char *name, char *out, size_t n)
{
    static const char hx[] = "0123456789ABCDEF";
    size_t o = 0;
    int cut = 0;
    o += (size_t)snprintf(out, n, "lock.");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (o + 4 > 160) { cut = 1; break; }
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hx[*p >> 4];
            out[o++] = hx[*p & 15];
        }
    }
    out[o] = 0;
    if (cut)
        snprintf(out + o, n - o, ".%016" PRIx64 "%016" PRIx64, fnv1a(name, 0xcbf29ce484222325ULL),
                 fnv1a(name, 0x84222325cbf29ce4ULL));
    return 0;
}

static int file_lock_new(void *eng, const char *name, const baton_lock_options *o, void **st)
{
    file_lock *fl = calloc(1, sizeof *fl);
    (void)eng; (void)o;
    if (!fl) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fl->fname, sizeof fl->fname);
    fl->fd = -1;
    *st = fl;
    return 0;
}

static void file_lock_free(void *eng, void *st)
{
    file_lock *fl = st;
    (void)eng;
    if (fl->fd >= 0) close(fl->fd);
    free(fl);
}

static int setlk(int fd, int cmd, short type)
{
    struct flock f;
    memset(&f, 0, sizeof f);
    f.l_type = type;
    f.l_whence = SEEK_SET;
    return fcntl(fd, cmd, &f);
}

static int read_rec(int fd, uint64_t *fence, int *held, char *holder, size_t hn)
{
    char buf[REC_SIZE + 1];
    ssize_t n = pread(fd, buf, REC_SIZE, 0);
    char *p;
    *fence = 0;
    *held = 0;
    if (holder) *holder = 0;
    if (n <= 0) return 0;
    buf[n] = 0;
    if (strncmp(buf, "baton-lock 1\n", 13)) return -1;
    if ((p = strstr(buf, "\nfence "))) *fence = strtoull(p + 7, NULL, 10);
    if ((p = strstr(buf, "\nheld "))) *held = atoi(p + 6);
    if (holder && (p = strstr(buf, "\nholder "))) {
        size_t i = 0;
        p += 8;
        while (*p && *p != '\n' && i + 1 < hn) holder[i++] = *p++;
        while (i && holder[i - 1] == ' ') i--;
        holder[i] = 0;
    }
    return 0;
}

static int write_rec(int fd, uint64_t fence, int held, const char *holder)
{
    char buf[REC_SIZE + 64];
    int n = snprintf(buf, sizeof buf, REC_FMT, fence, held, holder ? holder : "");
    if (n < 0 || pwrite(fd, buf, (size_t)n, 0) != n)
        return baton_seterr(BATON_EIO, errno, "lock file: write: %s", strerror(errno));
    return 0;
}

/* The helper that blocks in F_OFD_SETLKW for one wait. */
typedef struct {
    pthread_mutex_t mu;
    baton_waiter *w;     /* NULL once abandoned */
    int fd, done, err, refs;
} file_wait;

static void wait_unref(file_wait *fw)
{
    int last;
    pthread_mutex_lock(&fw->mu);
    last = --fw->refs == 0;
    pthread_mutex_unlock(&fw->mu);
    if (last) {
        pthread_mutex_destroy(&fw->mu);
        free(fw);
    }
}

static void *wait_main(void *arg)
{
    file_wait *fw = arg;
    int r, err = 0;
    do r = setlk(fw->fd, F_OFD_SETLKW, F_WRLCK);
    while (r < 0 && errno == EINTR);
    if (r < 0) err = errno;
    pthread_mutex_lock(&fw->mu);
    if (fw->w) {
        fw->done = 1;
        fw->err = err;
        baton_waiter_wake(fw->w);
        pthread_mutex_unlock(&fw->mu);
    } else {
        /* Abandoned: nobody wants this grant. */
        pthread_mutex_unlock(&fw->mu);
        close(fw->fd);
    }
    wait_unref(fw);
    return NULL;
}

/* Blocks until fd is locked, the deadline passes or the call is cancelled. */
static int wait_lock(int fd, baton_acquire_req *req, const char *fname)
{
    file_wait *fw = calloc(1, sizeof *fw);
    pthread_attr_t at;
    pthread_t th;
    sigset_t all, old;
    int e, rc = 0;

    if (!fw) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&fw->mu, NULL);
    fw->w = req->waiter;
    fw->fd = fd;
    fw->refs = 2;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64 * 1024);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    e = pthread_create(&th, &at, wait_main, fw);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (e) {
        pthread_mutex_destroy(&fw->mu);
        free(fw);
        return baton_seterr(BATON_ENOMEM, e, "cannot start a wait thread");
    }
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        pthread_mutex_lock(&fw->mu);
        if (fw->done) {
            fw->w = NULL;
            if (fw->err)
                rc = baton_seterr(BATON_EIO, fw->err, "lock file %s: %s", fname, strerror(fw->err));
            pthread_mutex_unlock(&fw->mu);
            break;
        }
        pthread_mutex_unlock(&fw->mu);
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
            rc = BATON_ETIMEDOUT;
        else
            rc = baton_waiter_park(req->waiter, gen, req->deadline_ns);
        if (rc) {
            pthread_mutex_lock(&fw->mu);
            if (fw->done) {
                /* Granted as we gave up: hand the lock back at once. */
                fw->w = NULL;
                pthread_mutex_unlock(&fw->mu);
                close(fd);
            } else {
                fw->w = NULL;   /* the helper closes fd when it is granted */
                pthread_mutex_unlock(&fw->mu);
            }
            rc = rc == BATON_ECANCELED ? baton_seterr(BATON_ECANCELED, 0, "acquire canceled")
                                       : baton_seterr(BATON_ETIMEDOUT, 0, "lock wait timed out");
            wait_unref(fw);
            return rc;
        }
    }
    wait_unref(fw);
    if (rc) close(fd);
    return rc;
}

static int file_acquire(void *eng, void *st, baton_acquire_req *req)
{
    file_engine *e = eng;
    file_lock *fl = st;
    uint64_t fence;
    int held, fd, rc;

    fd = openat(e->dirfd, fl->fname, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return baton_seterr(BATON_EIO, errno, "lock file %s: %s", fl->fname, strerror(errno));
    req->sent_ns = baton_now_ns();
    if (setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
        if (errno != EAGAIN && errno != EACCES) {
            rc = baton_seterr(BATON_EIO, errno, "lock file %s: %s", fl->fname, strerror(errno));
            close(fd);
            return rc;
        }
        if (req->deadline_ns == 0) {
            close(fd);
            return baton_seterr(BATON_ELOCKED, 0, "lock file %s is held", fl->fname);
        }
        if ((rc = wait_lock(fd, req, fl->fname)))
            return rc;
    }
    if (read_rec(fd, &fence, &held, NULL, 0) < 0) {
        close(fd);
        return baton_seterr(BATON_EPROTO, 0, "lock file %s is not a baton lock file", fl->fname);
    }
    fence++;
    if ((rc = write_rec(fd, fence, 1, req->owner->desc))) {
        close(fd);
        return rc;
    }
    fl->fd = fd;
    req->fence = fence;
    return 0;
}

static int file_release(void *eng, void *st, const baton_owner *o)
{
    file_lock *fl = st;
    uint64_t fence;
    int held;
    (void)eng; (void)o;
    if (fl->fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "not held");
    if (read_rec(fl->fd, &fence, &held, NULL, 0) == 0)
        write_rec(fl->fd, fence, 0, "");
    setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
    close(fl->fd);
    fl->fd = -1;
    return 0;
}

static int file_info(void *eng, const char *name, baton_lockinfo *out)
{
    file_engine *e = eng;
    char fname[256];
    struct flock f;
    int fd, held;

    baton__file_name(name, fname, sizeof fname);
    fd = openat(e->dirfd, fname, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return baton_seterr(BATON_EIO, errno, "lock file %s: %s", fname, strerror(errno));
    }
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_GETLK, &f) < 0) {
        int err = errno;
        close(fd);
        return baton_seterr(BATON_EIO, err, "lock file %s: %s", fname, strerror(err));
    }
    out->held = f.l_type != F_UNLCK;
    read_rec(fd, &out->fence, &held, out->holder, sizeof out->holder);
    if (!out->held) out->holder[0] = 0;   /* a dead holder leaves its record behind */
    out->remaining_ms = -1;
    close(fd);
    return 0;
}

static const char *const file_schemes[] = { "file", NULL };

const baton_backend baton__backend_file = {
    .version = BATON_BACKEND_VERSION,
    .name = "file",
    .schemes = file_schemes,
    .caps = BATON_CAP_NOTIFY | BATON_CAP_INFO,
    .open = file_open,
    .close = file_close,
    .lock_new = file_lock_new,
    .lock_free = file_lock_free,
    .lock_acquire = file_acquire,
    .lock_release = file_release,
    .lock_renew = NULL,
    .lock_info = file_info,
};
