/* ---- path locks ---------------------------------------------------------
 * A lock name that is an absolute path is that very file, as for flock(1):
 * it is opened (created 0666 less the umask if missing, as flock(1) does;
 * its directory must exist) and locked with flock(2), LOCK_EX for a plain
 * lock or a write side, LOCK_SH for a read side, so `baton run /var/lock/job`
 * and `flock /var/lock/job` exclude each other. The path is followed like
 * flock(1) follows it (links included): it is the user's own choice, not
 * baton's directory. The file is never written.
 *
 * The fence lives in baton's lock dir instead, in "path.<the file's real
 * path, mapped like a name>", with the same max(counter + 1, clock) rule.
 * Its bytes also order baton's own clients: a writer holds its gate byte
 * while it waits and holds (new baton readers queue behind it, as on lock
 * files; flock(1) -s readers do not see the gate), and readers take its
 * counter byte one at a time to bump the fence. A file a fence file is kept
 * for is one inode: the real path names it however the lock path was
 * spelled. */
#include "file_int.h"

/* Opens the file PATH names, creating it if missing. Only a regular file or
 * a directory is opened at all (opening a device or a FIFO can block or have
 * effects). */
static int path_open(const char *path, int *fdout)
{
    struct stat st;
    int fd, err;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return baton_seterr(BATON_EINVAL, 0, "lock path %s is %s; baton locks only regular files and "
                            "directories there", path, file__kind_of(&st));
    fd = open(path, O_RDONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EISDIR)   /* flock(1) locks directories too */
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return baton_seterr(BATON_EINVAL, err, "lock path %s: %s (a lock name that starts with '/' is that "
                                "file; its directory must exist)", path, strerror(err));
        if (err == EACCES || err == EPERM)
            return baton_seterr(BATON_EAUTH, err, "lock path %s: %s", path, strerror(err));
        return baton_seterr(BATON_EIO, err, "lock path %s: %s", path, strerror(err));
    }
    if (fstat(fd, &st) || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
        close(fd);
        return baton_seterr(BATON_EINVAL, 0, "lock path %s is not a regular file or directory", path);
    }
    *fdout = fd;
    return 0;
}

/* Whether fd is still the file at PATH: not removed, nor replaced by another
 * (a lock on a file nobody opens by that path any more excludes nobody). */
static int path_still_there(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && a.st_nlink > 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* The fence file of the file open on fd (or, with fd < 0, at PATH). */
static void path_fence_name(int fd, const char *path, char *out, size_t n)
{
    char link[64], real[PATH_MAX];
    ssize_t len = -1;
    if (fd >= 0) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        len = readlink(link, real, sizeof real - 1);
    }
    if (len > 0 && real[0] == '/') real[len] = 0;
    else if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    baton__file_name(real, out, n);
    memcpy(out, "path.", 5);   /* "lock." -> "path.": its own name space */
}

/* Bumps the fence in the fence file, one bumper at a time (readers share
 * the lock they were granted). */
static int path_bump(int gfd, const char *fname, const char *desc, uint64_t *fence)
{
    int rc;
    while ((rc = file__setlk_range(gfd, F_OFD_SETLKW, F_WRLCK, COUNTER)) < 0 && errno == EINTR) {}
    if (rc < 0) return baton_seterr(BATON_EIO, errno, "fence file %s: %s", fname, strerror(errno));
    rc = file__bump_fence(gfd, desc, fence);
    file__setlk_range(gfd, F_OFD_SETLK, F_UNLCK, COUNTER);
    return rc;
}

int file__path_acquire(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    const int shared = fl->kind == K_READ;
    char fname[256], what[1100];
    file_wait fw;
    int fd = -1, gfd = -1, rc;

    if (shared) {
        pthread_mutex_lock(&fl->rw->mu);
        if (fl->rw->wr_fd >= 0) {
            /* Downgrade: ride on the write side's exclusive lock (nobody else
             * may read while it is held); its release turns it shared. */
            path_fence_name(fl->rw->wr_fd, fl->path, fname, sizeof fname);
            rc = path_bump(fl->rw->wr_gfd, fname, req->owner->desc, &req->fence);
            if (!rc) {
                fl->rw->rd_borrows = 1;
                req->sent_ns = baton_now_ns();
            }
            pthread_mutex_unlock(&fl->rw->mu);
            return rc;
        }
        pthread_mutex_unlock(&fl->rw->mu);
    }
    snprintf(what, sizeof what, "lock path %s", fl->path);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES)
            return baton_seterr(BATON_EIO, 0, "lock path %s keeps being removed or replaced while it is locked",
                                fl->path);
        if ((rc = path_open(fl->path, &fd))) return rc;
        path_fence_name(fd, fl->path, fname, sizeof fname);
        if ((rc = file__dir_open(e, fname, O_RDWR | O_CREAT, "fence file", &gfd))) {
            close(fd);
            return rc;
        }
        req->sent_ns = baton_now_ns();
        /* the gate, in the fence file: held by a baton writer of this file */
        memset(&fw, 0, sizeof fw);
        fw.type = shared ? F_RDLCK : F_WRLCK;
        fw.start = 0;
        fw.len = 1;
        if ((rc = file__take_lock(gfd, &fw, req, what))) {
            close(fd);
            return rc;
        }
        memset(&fw, 0, sizeof fw);
        fw.how = shared ? LOCK_SH : LOCK_EX;
        if ((rc = file__take_lock(fd, &fw, req, what))) {
            close(gfd);
            return rc;
        }
        if (path_still_there(fd, fl->path) && file__still_linked(gfd)) break;
        close(fd);
        close(gfd);
    }
    if (shared) file__setlk_range(gfd, F_OFD_SETLK, F_UNLCK, GATE);
    if ((rc = path_bump(gfd, fname, req->owner->desc, &req->fence))) {
        close(fd);
        close(gfd);
        return rc;
    }
    if (shared) {
        close(gfd);
        gfd = -1;
    }
    fl->fd = fd;
    fl->gfd = gfd;
    if (fl->kind == K_WRITE) {
        pthread_mutex_lock(&fl->rw->mu);
        fl->rw->wr_fd = fd;
        fl->rw->wr_gfd = gfd;
        pthread_mutex_unlock(&fl->rw->mu);
    }
    return 0;
}

int file__path_release(file_lock *fl)
{
    file_rw *rw = fl->rw;
    int rc = 0;
    if (rw) pthread_mutex_lock(&rw->mu);
    if (fl->kind == K_READ && rw->rd_borrows) {
        rw->rd_borrows = 0;   /* the write side still holds the file */
        goto out;
    }
    if (fl->fd < 0) {
        rc = baton_seterr(BATON_ENOTHELD, 0, "not held");
        goto out;
    }
    if (fl->kind == K_WRITE && rw->rd_borrows && rw->rd) {
        /* Finish a downgrade: the exclusive lock turns shared in place (it
         * never waits: nobody else holds the file), then the gate opens. */
        if (flock(fl->fd, LOCK_SH | LOCK_NB)) {
            rc = baton_seterr(BATON_EIO, errno, "lock path %s: downgrade: %s", fl->path, strerror(errno));
            goto out;
        }
        rw->rd->fd = fl->fd;
        rw->rd_borrows = 0;
    } else {
        if (fl->gfd >= 0) file__mark_released(fl->gfd);
        flock(fl->fd, LOCK_UN);
        close(fl->fd);
    }
    if (fl->gfd >= 0) close(fl->gfd);   /* also opens the gate */
    fl->fd = fl->gfd = -1;
    if (fl->kind == K_WRITE) rw->wr_fd = rw->wr_gfd = -1;
out:
    if (rw) pthread_mutex_unlock(&rw->mu);
    return rc;
}

/* What /proc/locks says about the path locks on PATH's file, and the fence
 * from its fence file. Creates nothing and takes no lock, so a status query
 * never disturbs a holder (or a flock -n that runs at the same moment). */
int file__path_info(file_engine *e, const char *path, baton_lockinfo *out)
{
    char fname[256], line[512], rec_holder[256];
    struct stat st;
    long wpid = -1;
    int64_t readers = 0;
    int gfd, rc, rheld = 0;
    FILE *f;

    if (stat(path, &st)) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return baton_seterr(BATON_EIO, errno, "lock path %s: %s", path, strerror(errno));
    }
    f = fopen("/proc/locks", "re");
    if (!f) return baton_seterr(BATON_EIO, errno, "/proc/locks: %s", strerror(errno));
    while (fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters are "1: -> FLOCK ..." */
        char type[16];
        unsigned maj, min;
        unsigned long ino;
        long pid;
        if (sscanf(line, "%*d: FLOCK %*s %15s %ld %x:%x:%lu", type, &pid, &maj, &min, &ino) != 5) continue;
        if (maj != major(st.st_dev) || min != minor(st.st_dev) || ino != (unsigned long)st.st_ino) continue;
        if (!strcmp(type, "WRITE")) wpid = pid;
        else readers++;
    }
    fclose(f);
    out->held = wpid >= 0 || readers > 0;
    out->writer = wpid >= 0;
    out->readers = readers;
    out->remaining_ms = -1;
    path_fence_name(-1, path, fname, sizeof fname);
    if ((rc = file__dir_open(e, fname, O_RDONLY, "fence file", &gfd))) return rc;
    if (gfd < 0) rec_holder[0] = 0;
    else {
        file__read_rec(gfd, &out->fence, &rheld, rec_holder, sizeof rec_holder);
        close(gfd);
    }
    if (wpid >= 0) {
        /* The record names the last baton holder; it is this one if the pids agree. */
        long rpid = -1;
        if (rheld && sscanf(rec_holder, "%*s %ld", &rpid) == 1 && rpid == wpid)
            snprintf(out->holder, sizeof out->holder, "%s", rec_holder);
        else
            snprintf(out->holder, sizeof out->holder, "pid %ld", wpid);
    }
    return 0;
}
