/* ---- operators: list and break -------------------------------------------
 * The lock directory holds one "lock.<escaped name>" file per name and one
 * "path.<escaped real path>" fence file per path lock. A name is listed
 * when its lock is held now: for a lock file, F_OFD_GETLK from a fresh open
 * file description (it reports any lock another description holds, plain or
 * either side of a read-write lock, and takes none itself); for a path lock,
 * /proc/locks as file__path_info reads it. Nothing is created or locked, so a
 * listing never disturbs a holder or a flock -n running at the same moment. */
#include "file_int.h"

static int unhex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Undoes baton__file_name's escaping of S (up to a '.' that starts a hash,
 * or the end) into OUT; *hashed = 1 when the name was cut and hashed.
 * -1 when S is not an escaped name. */
static int unescape_name(const char *s, char *out, size_t n, int *hashed)
{
    size_t o = 0;
    *hashed = 0;
    for (; *s; s++) {
        int c = (unsigned char)*s;
        if (c == '.') { *hashed = 1; break; }
        if (c == '%') {
            int a = unhex(s[1]), b = a < 0 ? -1 : unhex(s[2]);
            if (b < 0) return -1;
            c = a << 4 | b;
            s += 2;
        }
        if (o + 1 >= n || c == 0) return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

/* 1 when the lock file FNAME is locked by anyone (another open file
 * description), 0 when not, or not a plain file of ours (skipped). */
static int lockfile_held(file_engine *e, const char *fname)
{
    struct flock f;
    struct stat st;
    int held, fd = openat(e->dirfd, fname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return 0;
    }
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    held = fcntl(fd, F_OFD_GETLK, &f) == 0 && f.l_type != F_UNLCK;
    close(fd);
    return held;
}

int file__list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    file_engine *e = eng;
    size_t pn = strlen(prefix);
    struct dirent *d;
    int fd, rc = 0;
    DIR *dir;

    /* a descriptor of its own: readdir moves the offset, and dirfd is shared */
    fd = openat(e->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(dir = fdopendir(fd))) {
        rc = baton_seterr(BATON_EIO, errno, "lock dir %s: %s", e->dir, strerror(errno));
        if (fd >= 0) close(fd);
        return rc;
    }
    while ((d = readdir(dir))) {
        char name[BATON_MAX_NAME + 8];
        int hashed, path = !strncmp(d->d_name, "path.", 5);
        const char *show = name;
        if (!path && strncmp(d->d_name, "lock.", 5)) continue;
        if (unescape_name(d->d_name + 5, name, sizeof name, &hashed)) continue;
        if (hashed) {
            /* only the head of the name is known: it must agree with the
             * prefix as far as both go; the name is shown as stored */
            size_t hn = strlen(name);
            if (strncmp(name, prefix, hn < pn ? hn : pn)) continue;
            show = d->d_name;
        } else if (strncmp(name, prefix, pn)) {
            continue;
        }
        if (path) {
            baton_lockinfo li = BATON_LOCK_INFO_INIT;
            /* a hashed path cannot be looked up: its path is unknown */
            if (hashed || name[0] != '/' || file__path_info(e, name, &li) || !li.held) continue;
        } else if (!lockfile_held(e, d->d_name)) {
            continue;
        }
        if (fn(arg, show)) break;
    }
    closedir(dir);
    return rc;
}

/* The kernel keeps an OFD or flock(2) lock for as long as its holder's open
 * file description lives: nothing another process does to the file ends it
 * (removing the file would only let a second holder lock a new file beside
 * the old one). So an operator cannot break it from here. */
int file__break(void *eng, const char *name, uint64_t *fence)
{
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    char who[300] = "";
    (void)fence;
    if (file__info(eng, name, &li) == 0 && li.held && li.holder[0])
        snprintf(who, sizeof who, " (holder: %s)", li.holder);
    return baton_seterr(BATON_ENOTSUP, 0, "file: the lock '%s'%s is the kernel's lock of a live process, which "
                        "holds it until that process releases it or exits; nothing can take it away from "
                        "outside. Stop that process instead (`baton status` and /proc/locks name it)",
                        name, who);
}
