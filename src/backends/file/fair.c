/*
 * Fair (FIFO) locks on the file engine: a line of waiters in front of the
 * lock file.
 *
 * The kernel's queue of F_OFD_SETLKW waiters is not FIFO, so fair waiters
 * line up in a folder of their own, fair/<escaped name>/ under the lock dir:
 *
 *   ticket          a counter (the lock file's record format), read and
 *                   bumped under a short OFD lock: every waiter draws the
 *                   next number, max(counter + 1, wall clock in us) as
 *                   fences are drawn (lock.c), so a lost counter never
 *                   hands out a number below a live one's
 *   w.<ticket>      one entry per waiter (20 digits, so names sort as
 *                   numbers), kept OFD-locked by its waiter for as long as
 *                   it waits: a waiter that dies drops its lock with its
 *                   last fd, and whoever looks next finds the entry
 *                   unlocked and removes it
 *
 * An entry is made under the ticket file's lock as "t", locked, then renamed
 * into place, so no entry is ever seen unlocked while its waiter lives and
 * entries appear in ticket order.
 *
 * A waiter whose entry has no live entry below it is the head: only the head
 * asks for the lock file itself (blocking in the kernel as a plain lock does,
 * so a holder that dies hands over at once), and it removes its entry once
 * granted, which is what wakes the next one. Every other waiter watches the
 * one entry just ahead of it (inotify on the folder, filtered by that entry's
 * name: deleted, or closed for writing as its dying waiter's fds close) and
 * looks again only then: a handoff wakes one process, not the line. The
 * close of a killed waiter's fd can come just before its lock goes, so a
 * wake-up that finds the entry ahead still locked looks again after 2 ms,
 * doubling, and every FAIR_RECHECK_MS in any case.
 *
 * A fair try (deadline 0) takes the lock only when nobody lives in the line.
 * Plain (unfair) acquirers of the same name do not look at the line: they
 * may take the lock between two fair holders (docs/file-engine.md).
 */
#include "file_int.h"

#define FAIR_RECHECK_MS 1000
#define ENTRY_FMT "w.%020" PRIu64

/* The line's folder, relative to the lock dir and as a path. */
static void line_rel(const file_lock *fl, char *rel, size_t n)
{
    snprintf(rel, n, "fair/%s", fl->fname + 5);   /* past "lock." */
}

static int entry_ticket(const char *name, uint64_t *t)
{
    char *end;
    if (strncmp(name, "w.", 2) || strlen(name) != 22) return 0;
    *t = strtoull(name + 2, &end, 10);
    return *end == 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The tickets of the entries in the folder DFD, sorted: malloc'd in *out. */
static int tickets(int dfd, uint64_t **out, size_t *n)
{
    int fd = dup(dfd);
    DIR *d;
    struct dirent *de;
    size_t cap = 16;
    uint64_t *v = malloc(cap * sizeof *v);
    *out = NULL;
    *n = 0;
    if (fd < 0 || !v || !(d = fdopendir(fd))) {
        int err = errno;
        if (fd >= 0) close(fd);
        free(v);
        return baton_seterr(BATON_EIO, err, "fair line: %s", strerror(err));
    }
    rewinddir(d);
    while ((de = readdir(d))) {
        uint64_t t;
        if (!entry_ticket(de->d_name, &t)) continue;
        if (*n == cap) {
            uint64_t *nv = realloc(v, cap * 2 * sizeof *v);
            if (!nv) {
                closedir(d);
                free(v);
                return baton_seterr(BATON_ENOMEM, 0, "out of memory");
            }
            v = nv;
            cap *= 2;
        }
        v[(*n)++] = t;
    }
    closedir(d);
    qsort(v, *n, sizeof *v, cmp_u64);
    *out = v;
    return 0;
}

/* Whether the entry of ticket T is a live waiter's: 1 yes, 0 no (removed
 * now if it was a dead one's), or an error. */
static int entry_alive(file_engine *e, int dfd, uint64_t t)
{
    char name[32];
    int fd, rc;
    snprintf(name, sizeof name, ENTRY_FMT, t);
    if ((rc = file__sub_open(e, dfd, name, O_RDONLY, "fair line entry", &fd))) return rc;
    if (fd < 0) return 0;   /* gone already */
    rc = file__locked_by_other(fd);
    close(fd);
    if (rc == 0) unlinkat(dfd, name, 0);   /* its waiter died (a live one unlinks before it closes) */
    return rc;
}

/* The live entry closest below MINE (UINT64_MAX: any live entry): 0 with
 * *ahead set, or 0 when there is none (*ahead = 0), or an error. Looks from
 * MINE downwards and stops at the first live one, so a look costs one
 * listing and, in a line without dead entries, one entry opened. */
static int entry_ahead(file_engine *e, int dfd, uint64_t mine, uint64_t *ahead)
{
    uint64_t *v;
    size_t n;
    int rc = tickets(dfd, &v, &n);
    *ahead = 0;
    if (rc) return rc;
    for (size_t i = n; i-- > 0;) {
        if (v[i] >= mine) continue;
        if ((rc = entry_alive(e, dfd, v[i])) < 0) break;
        if (rc == 1) {
            *ahead = v[i];
            rc = 0;
            break;
        }
    }
    if (rc > 0) rc = 0;
    free(v);
    return rc;
}

/* The ticket file's lock: held for a read and a write by live waiters, so
 * it is waited for briefly, by the acquire's deadline and at most 5 s (a
 * stopped process holding it, BATON_EUNAVAILABLE). */
static int lock_ticket(file_engine *e, int fd, int64_t deadline)
{
    int64_t limit = baton_now_ns() + 5 * 1000000000LL;
    long pause_ns = 20000;
    while (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
        int err = errno;
        if (err != EAGAIN && err != EACCES && err != EINTR)
            return baton_seterr(BATON_EIO, err, "fair ticket file: %s", strerror(err));
        if (baton_now_ns() >= deadline) return baton_seterr(BATON_ETIMEDOUT, 0, "lock wait timed out");
        if (baton_now_ns() >= limit)
            return baton_seterr(BATON_EUNAVAILABLE, 0, "fair ticket file in %s stayed locked for 5 s; is a "
                                "process stopped while holding it?", e->dir);
        struct timespec ts = { 0, pause_ns };
        nanosleep(&ts, NULL);
        if (pause_ns < 2000000) pause_ns *= 2;
    }
    return 0;
}

/* Draws a ticket and puts this waiter's entry, locked, into the line: 0 with
 * *efd (the entry, locked while open) and *ticket, or an error. */
static int line_join(file_engine *e, int dfd, const baton_owner *owner, int64_t deadline, int *efd,
                     uint64_t *ticket)
{
    char name[32];
    uint64_t stored, t, floor = file__wall_us();
    int tfd, fd = -1, held, rc;

    *efd = -1;
    if ((rc = file__sub_open(e, dfd, "ticket", O_RDWR | O_CREAT, "fair ticket file", &tfd))) return rc;
    if ((rc = lock_ticket(e, tfd, deadline))) goto out;
    t = file__read_rec(tfd, &stored, &held, NULL, 0) && stored + 1 > floor ? stored + 1 : floor;
    if ((rc = file__write_rec(tfd, t, 0, ""))) goto out;
    /* "t" exists only while someone holds the ticket lock: a leftover is a
     * dead waiter's */
    unlinkat(dfd, "t", 0);
    if ((rc = file__sub_open(e, dfd, "t", O_RDWR | O_CREAT | O_EXCL, "fair line entry", &fd))) goto out;
    if (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
        rc = baton_seterr(BATON_EIO, errno, "fair line entry: lock: %s", strerror(errno));
        goto out;
    }
    /* who waits, for people looking at the folder */
    if (pwrite(fd, owner->desc, strlen(owner->desc), 0) < 0) { /* only a courtesy */ }
    snprintf(name, sizeof name, ENTRY_FMT, t);
    if (renameat(dfd, "t", dfd, name)) {
        rc = baton_seterr(BATON_EIO, errno, "fair line entry: rename: %s", strerror(errno));
        unlinkat(dfd, "t", 0);
        goto out;
    }
    *efd = fd;
    *ticket = t;
    fd = -1;
out:
    if (fd >= 0) close(fd);
    close(tfd);   /* drops the ticket lock */
    return rc;
}

static void line_leave(int dfd, int efd, uint64_t ticket)
{
    char name[32];
    snprintf(name, sizeof name, ENTRY_FMT, ticket);
    /* unlink first: an entry seen unlocked is then never a live waiter's */
    unlinkat(dfd, name, 0);
    close(efd);
}

/* Waits in the line until this waiter is its head: 0, or BATON_ETIMEDOUT,
 * BATON_ECANCELED or an error. */
static int wait_head(file_engine *e, int dfd, const char *path, uint64_t mine, int efd, baton_acquire_req *req)
{
    watch_reg reg;
    uint64_t watched = 0;
    int64_t nap_ms = FAIR_RECHECK_MS;
    int rc;

    memset(&reg, 0, sizeof reg);
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        uint64_t ahead;
        int64_t until;
        if ((rc = entry_ahead(e, dfd, mine, &ahead))) break;
        if (!ahead) break;   /* the head */
        if (!file__still_linked(efd)) {
            /* someone removed our entry (a cleaner): we no longer hold a
             * place that others respect; say so rather than barge */
            rc = baton_seterr(BATON_EIO, 0, "fair line entry in %s was removed while waiting", path);
            break;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "lock wait timed out");
            break;
        }
        if (ahead != watched) {
            /* watch the entry ahead, then look again: a change between the
             * look above and the watch is seen by that look */
            char name[32];
            snprintf(name, sizeof name, ENTRY_FMT, ahead);
            if (watched) file__watch_remove(e, &reg);
            watched = 0;
            if ((rc = file__watch_add(e, path, IN_DELETE | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_DELETE_SELF |
                                      IN_MOVE_SELF | IN_ONLYDIR, name, &reg, req->waiter)))
                break;
            watched = ahead;
            nap_ms = FAIR_RECHECK_MS;
            continue;
        }
        until = baton_now_ns() + nap_ms * 1000000LL;
        if (req->deadline_ns < until) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
            break;
        }
        /* woken with the entry ahead still locked: its waiter's close came
         * before its lock went; look again soon, then less often */
        if (baton_waiter_gen(req->waiter) != gen) nap_ms = 2;
        else if (nap_ms < FAIR_RECHECK_MS) nap_ms = nap_ms * 2 > FAIR_RECHECK_MS ? FAIR_RECHECK_MS : nap_ms * 2;
    }
    if (watched) file__watch_remove(e, &reg);
    return rc;
}

int file__fair_acquire(file_engine *e, file_lock *fl, baton_acquire_req *req,
                       int (*take)(file_engine *e, file_lock *fl, baton_acquire_req *req))
{
    char rel[300], path[4096 + 300];
    uint64_t mine = 0, ahead;
    int dfd, efd = -1, rc;

    line_rel(fl, rel, sizeof rel);
    if (req->deadline_ns == 0) {
        /* a try: only when nobody waits */
        if ((rc = file__subdir(e, rel, 0, &dfd))) return rc;
        if (dfd >= 0) {
            rc = entry_ahead(e, dfd, UINT64_MAX, &ahead);
            close(dfd);
            if (rc) return rc;
            if (ahead) return baton_seterr(BATON_ELOCKED, 0, "lock file %s: waiters are queued", fl->fname);
        }
        return take(e, fl, req);
    }
    snprintf(path, sizeof path, "%s/%s", e->dir, rel);
    if ((rc = file__subdir(e, rel, 1, &dfd))) return rc;
    if ((rc = line_join(e, dfd, req->owner, req->deadline_ns, &efd, &mine))) goto out;
    if ((rc = wait_head(e, dfd, path, mine, efd, req))) goto out;
    /* the head: wait for the lock file as a plain lock does */
    rc = take(e, fl, req);
out:
    if (efd >= 0) line_leave(dfd, efd, mine);
    close(dfd);
    return rc;
}

/* lock_info's part: how many live waiters are in NAME's line (a read:
 * dead entries are counted out, not removed); left alone when the name has
 * no line folder. */
int file__fair_info(file_engine *e, const char *fname, int64_t *queued)
{
    char rel[300];
    uint64_t *v;
    size_t n;
    int dfd, rc;
    snprintf(rel, sizeof rel, "fair/%s", fname + 5);
    /* no line folder: never locked fairly, *queued stays "unknown" */
    if ((rc = file__subdir(e, rel, 0, &dfd)) || dfd < 0) return rc;
    *queued = 0;
    if (!(rc = tickets(dfd, &v, &n))) {
        for (size_t i = 0; i < n; i++) {
            char name[32];
            int fd;
            snprintf(name, sizeof name, ENTRY_FMT, v[i]);
            if (file__sub_open(e, dfd, name, O_RDONLY, "fair line entry", &fd) || fd < 0) continue;
            if (file__locked_by_other(fd) == 1) (*queued)++;
            close(fd);
        }
        free(v);
    }
    close(dfd);
    return rc;
}
