/* Fence files: the caller's own files fenced with a grant's fence
 * (baton_fence_admit, docs/fencing.md). Nothing here knows about engines: a
 * fence is a number that only grows per lock name.
 *
 * Layout, shared with the shell recipe of docs/fencing.md:
 *   PATH       the highest fence admitted, decimal, one line
 *   PATH.lock  flock(2)ed around compare-and-store (its content is unused)
 *   PATH.tmp   the next PATH while it is written, then renamed over it
 * The flock is on a file of its own because the rename replaces PATH's inode:
 * a waiter blocked on the old inode would otherwise wake up holding a lock
 * nobody else takes any more. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct baton_fence_guard {
    int lockfd;
};

/* "PATH" + suffix, malloc'd, or NULL. */
static char *with_suffix(const char *path, const char *suffix)
{
    size_t n = strlen(path), m = strlen(suffix);
    char *s = malloc(n + m + 1);
    if (!s) return NULL;
    memcpy(s, path, n);
    memcpy(s + n, suffix, m + 1);
    return s;
}

/* The stored fence: 0 when PATH is missing or empty. Digits and one optional
 * trailing newline (what `echo` writes) and nothing else: anything else is
 * not a file of ours, and guessing a number out of it could admit a stale
 * holder. */
static int read_stored(const char *path, uint64_t *out, mode_t *mode)
{
    char buf[32];
    ssize_t n;
    size_t len = 0, i;
    uint64_t v = 0;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

    *out = 0;
    if (fd < 0) {
        if (errno == ENOENT) return 0;
        return baton_seterr(BATON_EIO, errno, "fence file %s: %s", path, strerror(errno));
    }
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return baton_seterr(BATON_EIO, 0, "fence file %s is not a regular file", path);
    }
    *mode = st.st_mode & 07777;
    while (len < sizeof buf) {
        n = read(fd, buf + len, sizeof buf - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return baton_seterr(BATON_EIO, e, "fence file %s: read: %s", path, strerror(e));
        }
        if (n == 0) break;
        len += (size_t)n;
    }
    close(fd);
    if (len == sizeof buf) goto bad;
    if (len && buf[len - 1] == '\n') len--;
    for (i = 0; i < len; i++) {
        unsigned d = (unsigned)(buf[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10) goto bad;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
bad:
    return baton_seterr(BATON_EIO, 0, "fence file %s does not hold a fence (want one decimal number)", path);
}

/* PATH.tmp with FENCE, fsync'd, renamed over PATH, the directory fsync'd:
 * after a crash PATH holds the old fence or the new one, never a torn one. */
static int store(const char *path, uint64_t fence, mode_t mode)
{
    char line[32], *tmp = with_suffix(path, ".tmp"), *dir = NULL, *slash;
    int fd = -1, dfd, rc = 0, len;
    size_t off = 0;

    if (!tmp) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    len = snprintf(line, sizeof line, "%" PRIu64 "\n", fence);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) goto fail;
    /* keep the mode a user gave the fence file */
    if (mode != (mode_t)-1 && fchmod(fd, mode)) goto fail;
    while (off < (size_t)len) {
        ssize_t n = write(fd, line + off, (size_t)len - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) goto fail;
        off += (size_t)n;
    }
    if (fsync(fd)) goto fail;
    if (close(fd)) { fd = -1; goto fail; }
    fd = -1;
    if (rename(tmp, path)) goto fail;
    /* the rename itself is durable once the directory is */
    if (!(dir = strdup(path))) { rc = baton_seterr(BATON_ENOMEM, 0, "out of memory"); goto out; }
    slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        (void)fsync(dfd);   /* best effort: some file systems refuse it on directories */
        close(dfd);
    }
    goto out;
fail:
    rc = baton_seterr(BATON_EIO, errno, "fence file %s: %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
out:
    free(dir);
    free(tmp);
    return rc;
}

int baton_fence_enter(baton_fence_guard **out, const char *path, uint64_t fence, uint64_t *seen)
{
    baton_fence_guard *g = NULL;
    char *lockpath = NULL;
    uint64_t stored = 0;
    mode_t mode = (mode_t)-1;
    int fd = -1, rc;

    if (out) *out = NULL;
    if (seen) *seen = 0;
    if (!path || !*path) return baton_seterr(BATON_EINVAL, 0, "fence file: empty path");
    if (fence == 0)
        return baton_seterr(BATON_EINVAL, 0, "fence 0: no grant has it (is BATON_FENCE set?)");
    if (!(lockpath = with_suffix(path, ".lock"))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        rc = baton_seterr(BATON_EIO, errno, "fence lock %s: %s", lockpath, strerror(errno));
        goto out;
    }
    while (flock(fd, LOCK_EX)) {
        if (errno == EINTR) continue;
        rc = baton_seterr(BATON_EIO, errno, "fence lock %s: flock: %s", lockpath, strerror(errno));
        goto out;
    }
    if ((rc = read_stored(path, &stored, &mode))) goto out;
    if (seen) *seen = stored;
    if (fence < stored) {
        rc = baton_seterr(BATON_ESTALE, 0, "fenced off: stored %" PRIu64 " > yours %" PRIu64, stored, fence);
        goto out;
    }
    /* equal: the same holder again, nothing to write */
    if (fence > stored && (rc = store(path, fence, mode))) goto out;
    if (out) {
        if (!(g = malloc(sizeof *g))) { rc = baton_seterr(BATON_ENOMEM, 0, "out of memory"); goto out; }
        g->lockfd = fd;
        fd = -1;
        *out = g;
    }
    rc = 0;
out:
    if (fd >= 0) close(fd);   /* closing the only descriptor drops the flock */
    free(lockpath);
    return rc;
}

int baton_fence_admit(const char *path, uint64_t fence, uint64_t *seen)
{
    return baton_fence_enter(NULL, path, fence, seen);
}

void baton_fence_leave(baton_fence_guard *g)
{
    if (!g) return;
    close(g->lockfd);
    free(g);
}
