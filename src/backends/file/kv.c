/* ---- the folders of values, groups and queues ----------------------------
 * Values, groups and queues live in folders of their own under the lock dir
 * ("values/", "groups/<group>/", "queues/<queue>/"), so none of their files
 * can meet a lock file, a semaphore or each other, whatever the names: a
 * group and a queue of one NAME are two folders. The folders are made like
 * the lock dir (0700, or 02770 in a group-shared one) and opened without
 * following a link at any of their components, so nothing planted there is
 * used. What the three share is here: the folders, the names, a short lock
 * for one read-modify-write, whole-file reads. */
#include "file_int.h"

/* Opens the folder NAME under PARENT, making it when CREATE. */
static int subdir_step(file_engine *e, int parent, const char *name, const char *rel, int create, int *fdout)
{
    mode_t mode = e->shared ? 02770 : 0700;
    struct stat st;
    *fdout = -1;
    for (int tries = 0; tries < 2; tries++) {
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            *fdout = fd;
            return 0;
        }
        if (errno == ENOTDIR || errno == ELOOP) {
            if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
                return baton_seterr(BATON_EIO, 0, "%s/%s is %s, not a folder of baton's; refusing it. Remove it if "
                                    "nothing should be there", e->dir, rel, file__kind_of(&st));
            return baton_seterr(BATON_EIO, errno, "%s/%s: %s", e->dir, rel, strerror(errno));
        }
        if (errno != ENOENT) return baton_seterr(BATON_EIO, errno, "%s/%s: %s", e->dir, rel, strerror(errno));
        if (!create) return 0;
        if (mkdirat(parent, name, mode) && errno != EEXIST)
            return baton_seterr(BATON_EIO, errno, "%s/%s: %s", e->dir, rel, strerror(errno));
        if (e->shared && fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
            st.st_uid == geteuid() && (st.st_mode & 07777) != mode) {
            /* undo the umask, as for the files of a shared dir */
            int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (dfd >= 0) {
                if (fchmod(dfd, mode)) {
                }
                close(dfd);
            }
        }
    }
    return baton_seterr(BATON_EIO, 0, "%s/%s keeps disappearing", e->dir, rel);
}

int file__subdir(file_engine *e, const char *rel, int create, int *fdout)
{
    char buf[1024], *save = NULL, *comp;
    int fd = e->dirfd, rc = 0;
    *fdout = -1;
    if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
        return baton_seterr(BATON_EINVAL, 0, "folder name too long");
    for (comp = strtok_r(buf, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
        int next;
        rc = subdir_step(e, fd, comp, rel, create, &next);
        if (fd != e->dirfd) close(fd);
        if (rc || next < 0) return rc;
        fd = next;
    }
    *fdout = fd;
    return 0;
}

void file__esc_name(const char *name, char *out, size_t n)
{
    char f[256];
    baton__file_name(name, f, sizeof f);
    snprintf(out, n, "%s", f + 5);   /* past "lock." */
}

int file__lock_short(file_engine *e, int fd, const char *what)
{
    int64_t limit = baton_now_ns() + 5 * 1000000000LL;
    long pause_ns = 20000;
    while (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
        int err = errno;
        if (err != EAGAIN && err != EACCES && err != EINTR)
            return baton_seterr(BATON_EIO, err, "%s: %s", what, strerror(err));
        if (baton_now_ns() >= limit)
            return baton_seterr(BATON_EUNAVAILABLE, 0, "%s in %s stayed locked for 5 s; is a process stopped "
                                "while holding it?", what, e->dir);
        struct timespec ts = { 0, pause_ns };
        nanosleep(&ts, NULL);
        if (pause_ns < 2000000) pause_ns *= 2;
    }
    return 0;
}

int file__locked_by_other(int fd)
{
    struct flock f;
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_GETLK, &f) < 0) return baton_seterr(BATON_EIO, errno, "F_OFD_GETLK: %s", strerror(errno));
    return f.l_type != F_UNLCK;
}

int file__slurp(int fd, size_t max, char **out, size_t *len, const char *what)
{
    struct stat st;
    size_t got = 0, cap;
    char *buf;
    *out = NULL;
    *len = 0;
    if (fstat(fd, &st)) return baton_seterr(BATON_EIO, errno, "%s: %s", what, strerror(errno));
    if ((uint64_t)st.st_size > max) return baton_seterr(BATON_EPROTO, 0, "%s is too large (%lld bytes)", what,
                                                        (long long)st.st_size);
    cap = (size_t)st.st_size;
    if (!(buf = malloc(cap + 1))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    while (got < cap) {
        ssize_t n = pread(fd, buf + got, cap - got, (off_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            free(buf);
            return baton_seterr(BATON_EIO, err, "%s: %s", what, strerror(err));
        }
        if (n == 0) break;   /* cut under us: what was there */
        got += (size_t)n;
    }
    buf[got] = 0;
    *out = buf;
    *len = got;
    return 0;
}
