/* ---- semaphore ----------------------------------------------------------
 * A counter in its own file ("sem.<name>"), changed under a short exclusive
 * lock. Waiters are woken by inotify when the file changes, not by polling;
 * like Redisson's RSemaphore, permits have no owner, so a crashed holder's
 * permits are not returned by themselves. */
#include "file_int.h"

#define SEM_FMT "baton-sem 1\npermits %020" PRId64 "\nset %d\n"

typedef struct {
    char fname[256];
    char path[4096 + 300];
} file_sem;

int file__sem_new(void *eng, const char *name, void **st)
{
    file_engine *e = eng;
    file_sem *fs = calloc(1, sizeof *fs);
    int fd, rc;
    if (!fs) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fs->fname, sizeof fs->fname);
    memcpy(fs->fname, "sem.", 4);   /* "lock." → "sem.." keeps the two name spaces apart */
    snprintf(fs->path, sizeof fs->path, "%s/%s", e->dir, fs->fname);
    if ((rc = file__dir_open(e, fs->fname, O_RDWR | O_CREAT, "semaphore file", &fd))) {
        free(fs);
        return rc;
    }
    close(fd);
    *st = fs;
    return 0;
}

void file__sem_free(void *eng, void *st)
{
    (void)eng;
    free(st);
}

enum { SEM_TAKE = 100, SEM_GIVE };

/* One read-modify-write of the counter under an exclusive lock. */
static int sem_update(file_engine *e, file_sem *fs, int op, int64_t arg, int64_t *out)
{
    char buf[128];
    int64_t permits = 0;
    int set = 0, fd, rc = 0, changed = 0;
    ssize_t n;
    if ((rc = file__dir_open(e, fs->fname, O_RDWR, "semaphore file", &fd))) return rc;
    if (fd < 0) return baton_seterr(BATON_EIO, ENOENT, "semaphore file %s/%s was removed", e->dir, fs->fname);
    while (file__setlk(fd, F_OFD_SETLKW, F_WRLCK) < 0)
        if (errno != EINTR) { rc = baton_seterr(BATON_EIO, errno, "semaphore lock: %s", strerror(errno)); goto out; }
    n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
        char *p;
        buf[n] = 0;
        if (strncmp(buf, "baton-sem 1\n", 12)) { rc = baton_seterr(BATON_EPROTO, 0, "%s is not a baton semaphore", fs->fname); goto out; }
        if ((p = strstr(buf, "\npermits "))) permits = strtoll(p + 9, NULL, 10);
        if ((p = strstr(buf, "\nset "))) set = atoi(p + 5);
    }
    switch (op) {
    case SEM_TAKE:
        if (permits < arg) { rc = BATON_ELOCKED; break; }
        permits -= arg; changed = 1; break;
    case SEM_GIVE:
    case BATON_CTL_ADD:
        /* a count past int64 (a huge add, or a count file that says
         * INT64_MAX) is refused, the count unchanged: never a wrap */
        if ((arg > 0 && permits > INT64_MAX - arg) || (arg < 0 && permits < INT64_MIN - arg)) {
            rc = baton_seterr(BATON_EINVAL, 0, "semaphore %s: %" PRId64 " %+" PRId64 " is out of range", fs->fname,
                              permits, arg);
            break;
        }
        permits += arg; set = 1; changed = 1; break;
    case BATON_CTL_TRY_SET:
        if (out) *out = !set;
        if (!set) { permits = arg; set = 1; changed = 1; }
        break;
    case BATON_CTL_DRAIN:
        if (out) *out = permits > 0 ? permits : 0;
        if (permits > 0) { permits = 0; changed = 1; }
        break;
    case BATON_CTL_AVAILABLE: if (out) *out = permits; break;
    default: rc = baton_seterr(BATON_ENOTSUP, 0, "semaphore operation %d", op);
    }
    if (changed) {
        int len = snprintf(buf, sizeof buf, SEM_FMT, permits, set);
        if (pwrite(fd, buf, (size_t)len, 0) != len) rc = baton_seterr(BATON_EIO, errno, "semaphore write: %s", strerror(errno));
    }
out:
    close(fd);   /* also drops the lock */
    return rc;
}

int file__sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    file_engine *e = eng;
    watch_reg reg;
    int rc, watching = 0;
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        rc = sem_update(e, st, SEM_TAKE, permits, NULL);
        if (rc != BATON_ELOCKED) break;
        if (deadline_ns == 0) { rc = baton_seterr(BATON_ELOCKED, 0, "too few permits"); break; }
        if (!watching) {
            /* Watch before parking, then re-check: a release in between is seen. */
            if ((rc = file__watch_add(e, ((file_sem *)st)->path, IN_MODIFY | IN_CLOSE_WRITE, NULL, &reg, w))) break;
            watching = 1;
            continue;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "semaphore wait timed out");
            break;
        }
        if ((rc = baton_waiter_park(w, gen, deadline_ns))) {
            rc = baton_seterr(rc, 0, "semaphore wait canceled");
            break;
        }
    }
    if (watching) file__watch_remove(e, &reg);
    return rc;
}

int file__sem_release(void *eng, void *st, uint32_t permits)
{
    return sem_update(eng, st, SEM_GIVE, permits, NULL);
}

int file__sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    return sem_update(eng, st, op, arg, out);
}
