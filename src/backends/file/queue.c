/* ---- work queues -----------------------------------------------------------------
 * A queue NAME is the folder "queues/<escaped name>/": one file per item,
 * "i.<sequence number, 20 digits>" holding the item's bytes, the counter
 * "next" (the next sequence number, bumped under an OFD lock) and "fence"
 * (the lock-file record whose counter gives every take a new fence, with the
 * lock files' wall-clock floor: lock.c).
 *
 * put: writes the item into a temporary file, then, under the lock of
 * "next", renames it to the next number without replacing anything (so a
 * counter a power loss took, rebuilt from the highest item there, cannot
 * overwrite an item). An item appears whole.
 *
 * take: the oldest item that no live taker holds: items in number order, each
 * asked first with F_OFD_GETLK (takes nothing), the first free one locked
 * with a non-blocking exclusive OFD lock through a fd the taker keeps for as
 * long as it holds the item. Two takers cannot both lock one item. done
 * removes the file under the lock; giving it back closes the fd, and so
 * does the kernel when the taker dies (SIGKILL included): the item is free
 * again at once, in its old place at the head of the line.
 *
 * Waiting takers: inotify on the folder, woken by a new item (IN_MOVED_TO)
 * or a taker's close of an item it had opened for writing (IN_CLOSE_WRITE:
 * a give-back, a done, a death). The kernel sends that close event just
 * before it drops the lock, so a waiter can look too early: waiters also
 * look again every second (RESCAN_NS), the bound on how late an item given
 * back by a dying taker is seen. Every waiting taker of a queue wakes on
 * every such event (a herd: each then asks each item's lock); the first to
 * lock an item has it.
 *
 * Cost: put is 3 renames/writes and one lock; a take reads the folder and
 * asks the lock of each item before the first free one (the taken ones at
 * the head), then bumps the fence under its lock. */
#include "file_int.h"

#define NEXT_HEAD "baton-queue 1\nnext "
#define RESCAN_NS 1000000000LL

typedef struct {
    char rel[220];   /* "queues/<escaped name>" */
} file_queue;

typedef struct {
    file_lock base;  /* kind K_TAKER; fd: the item's file, locked; gfd: the queue's folder */
    char rel[220];
    char iname[32];
    char *data;
    size_t len;
} file_taker;

static int queue_new(void *eng, const char *name, void **st)
{
    file_queue *q = calloc(1, sizeof *q);
    char esc[200];
    (void)eng;
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    file__esc_name(name, esc, sizeof esc);
    snprintf(q->rel, sizeof q->rel, "queues/%s", esc);
    *st = q;
    return 0;
}

static void queue_free(void *eng, void *st)
{
    (void)eng;
    free(st);
}

/* The items' numbers in the folder, sorted: malloc'd in *out. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int items(file_engine *e, int dfd, uint64_t **out, size_t *n)
{
    size_t cap = 0;
    struct dirent *d;
    int dup_fd = dup(dfd);
    DIR *dir = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;   /* a dup shares dfd's position: rewound below */
    *out = NULL;
    *n = 0;
    if (!dir) {
        int err = errno;
        if (dup_fd >= 0) close(dup_fd);
        return baton_seterr(BATON_EIO, err, "queue folder in %s: %s", e->dir, strerror(err));
    }
    rewinddir(dir);
    while ((d = readdir(dir))) {
        char *end;
        uint64_t s;
        if (strncmp(d->d_name, "i.", 2) || strlen(d->d_name) != 22) continue;
        errno = 0;
        s = strtoull(d->d_name + 2, &end, 10);
        if (errno || *end) continue;
        if (*n == cap) {
            uint64_t *p = realloc(*out, (cap = cap ? cap * 2 : 64) * sizeof *p);
            if (!p) {
                closedir(dir);
                free(*out);
                *out = NULL;
                return baton_seterr(BATON_ENOMEM, 0, "out of memory");
            }
            *out = p;
        }
        (*out)[(*n)++] = s;
    }
    closedir(dir);
    if (*n) qsort(*out, *n, sizeof **out, cmp_u64);
    return 0;
}

static int queue_put(void *eng, void *st, const void *data, size_t len)
{
    static _Atomic unsigned seq;
    file_engine *e = eng;
    file_queue *q = st;
    char tname[96], iname[32], buf[64];
    int dfd, tfd = -1, nfd = -1, rc;
    uint64_t next = 0, *all = NULL;
    size_t n;
    ssize_t r;
    if ((rc = file__subdir(e, q->rel, 1, &dfd))) return rc;
    snprintf(tname, sizeof tname, "t.%ld.%u.%" PRId64, (long)getpid(), ++seq, baton_now_ns());
    if ((rc = file__sub_open(e, dfd, tname, O_WRONLY | O_CREAT | O_EXCL, "queue item", &tfd))) goto out;
    if ((r = pwrite(tfd, data, len, 0)) != (ssize_t)len) {
        rc = baton_seterr(BATON_EIO, r < 0 ? errno : ENOSPC, "queue item: write: %s", strerror(r < 0 ? errno : ENOSPC));
        goto out;
    }
    close(tfd);
    tfd = -1;
    if ((rc = file__sub_open(e, dfd, "next", O_RDWR | O_CREAT, "queue counter", &nfd))) goto out;
    if ((rc = file__lock_short(e, nfd, "queue counter"))) goto out;
    r = pread(nfd, buf, sizeof buf - 1, 0);
    if (r == (ssize_t)(sizeof NEXT_HEAD - 1 + 21) && !memcmp(buf, NEXT_HEAD, sizeof NEXT_HEAD - 1)) {
        buf[r] = 0;
        next = strtoull(buf + sizeof NEXT_HEAD - 1, NULL, 10);
    }
    if (!next) {
        /* never set, or lost: after the highest item there */
        if ((rc = items(e, dfd, &all, &n))) goto out;
        next = n ? all[n - 1] + 1 : 1;
    }
    for (int tries = 0;; tries++, next++) {
        snprintf(iname, sizeof iname, "i.%020" PRIu64, next);
        if (renameat2(dfd, tname, dfd, iname, RENAME_NOREPLACE) == 0) break;
        if (errno == EINVAL || errno == ENOSYS) {   /* no RENAME_NOREPLACE here: link, then unlink */
            if (linkat(dfd, tname, dfd, iname, 0) == 0) {
                unlinkat(dfd, tname, 0);
                break;
            }
        }
        if (errno != EEXIST || tries > 1000) {
            rc = baton_seterr(BATON_EIO, errno, "queue item %s/%s/%s: %s", e->dir, q->rel, iname, strerror(errno));
            goto out;
        }
    }
    tname[0] = 0;
    r = snprintf(buf, sizeof buf, NEXT_HEAD "%020" PRIu64 "\n", next + 1);
    if (pwrite(nfd, buf, (size_t)r, 0) != r)
        baton_log(BATON_LOG_WARN, "queue counter %s/%s/next: write failed; the next put rebuilds it", e->dir, q->rel);
out:
    if (tname[0]) unlinkat(dfd, tname, 0);
    if (tfd >= 0) close(tfd);
    if (nfd >= 0) close(nfd);
    free(all);
    close(dfd);
    return rc;
}

static int queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    file_queue *q = st;
    file_taker *t = calloc(1, sizeof *t);
    (void)eng; (void)opts;
    if (!t) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    t->base.kind = K_TAKER;
    t->base.fd = t->base.gfd = -1;
    t->base.fname = t->iname;
    snprintf(t->rel, sizeof t->rel, "%s", q->rel);
    *tst = t;
    return 0;
}

/* 1 when the item file NAME is free and now ours (its fd in *fdout), 0 when
 * a taker holds it or it is gone, or an error. */
static int try_item(file_engine *e, int dfd, const char *name, int *fdout)
{
    int fd, rc, busy;
    /* ask first through a read-only fd: a failed try on a write fd would
     * wake every waiting taker (its close is an IN_CLOSE_WRITE) */
    fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return 0;
    busy = file__locked_by_other(fd);
    close(fd);
    if (busy) return busy < 0 ? busy : 0;
    if ((rc = file__sub_open(e, dfd, name, O_RDWR, "queue item", &fd))) return rc;
    if (fd < 0) return 0;
    if (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0 || !file__still_linked(fd)) {
        close(fd);
        return 0;
    }
    *fdout = fd;
    return 1;
}

/* Takes the oldest free item: 0, BATON_ELOCKED (error not set) when there
 * is none, or an error. */
static int take_once(file_engine *e, file_taker *t, int dfd)
{
    uint64_t *all;
    size_t n;
    int rc = BATON_ELOCKED, fd = -1;
    if ((rc = items(e, dfd, &all, &n))) return rc;
    rc = BATON_ELOCKED;
    for (size_t i = 0; i < n; i++) {
        char name[32];
        int r;
        snprintf(name, sizeof name, "i.%020" PRIu64, all[i]);
        if ((r = try_item(e, dfd, name, &fd)) < 0) {
            rc = r;
            break;
        }
        if (!r) continue;
        if ((rc = file__slurp(fd, BATON_QUEUE_ITEM_MAX, &t->data, &t->len, "queue item"))) {
            close(fd);
            break;
        }
        snprintf(t->iname, sizeof t->iname, "%s", name);
        t->base.fd = fd;
        rc = 0;
        break;
    }
    free(all);
    return rc;
}

/* The fence of a take, from the queue's fence file. */
static int take_fence(file_engine *e, int dfd, const char *desc, uint64_t *fence)
{
    int fd, rc;
    if ((rc = file__sub_open(e, dfd, "fence", O_RDWR | O_CREAT, "queue fence file", &fd))) return rc;
    if (!(rc = file__lock_short(e, fd, "queue fence file"))) rc = file__bump_fence(fd, desc, fence);
    close(fd);
    return rc;
}

static void drop_item(file_taker *t)
{
    if (t->base.fd >= 0) close(t->base.fd);   /* also unlocks: the item is free again */
    if (t->base.gfd >= 0) close(t->base.gfd);
    t->base.fd = t->base.gfd = -1;
    free(t->data);
    t->data = NULL;
    t->len = 0;
}

int file__taker_take(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    file_taker *t = (file_taker *)fl;
    char path[4096 + 240];
    watch_reg reg;
    int dfd, rc, watching = 0;
    if (fl->fd >= 0) return baton_seterr(BATON_EDEADLK, 0, "this taker holds an item already");
    drop_item(t);
    snprintf(path, sizeof path, "%s/%s", e->dir, t->rel);
    if ((rc = file__subdir(e, t->rel, 1, &dfd))) return rc;
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        int64_t until;
        req->sent_ns = baton_now_ns();
        if ((rc = take_once(e, t, dfd)) != BATON_ELOCKED) break;
        if (req->deadline_ns == 0) {
            rc = baton_seterr(BATON_ELOCKED, 0, "the queue has no free item");
            break;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "queue take timed out");
            break;
        }
        if (!watching) {
            if ((rc = file__watch_add(e, path, IN_MOVED_TO | IN_CLOSE_WRITE | IN_MOVE_SELF | IN_DELETE_SELF | IN_ONLYDIR, NULL, &reg, req->waiter)))
                break;
            watching = 1;
            continue;
        }
        until = baton_now_ns() + RESCAN_NS;
        if (req->deadline_ns < until) until = req->deadline_ns;
        if ((rc = baton_waiter_park(req->waiter, gen, until))) {
            rc = baton_seterr(rc, 0, "queue take canceled");
            break;
        }
        /* the folder anew, as value watches do (value.c) */
        file__watch_remove(e, &reg);
        watching = 0;
        close(dfd);
        if ((rc = file__subdir(e, t->rel, 1, &dfd))) {
            drop_item(t);
            return rc;
        }
    }
    if (watching) file__watch_remove(e, &reg);
    if (!rc && (rc = take_fence(e, dfd, req->owner->desc, &req->fence))) {
        close(fl->fd);
        fl->fd = -1;
    }
    if (rc) {
        close(dfd);
        drop_item(t);
        return rc;
    }
    fl->gfd = dfd;
    return 0;
}

int file__taker_release(file_lock *fl)
{
    if (fl->fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "no item taken");
    drop_item((file_taker *)fl);
    return 0;
}

void file__taker_free(file_lock *fl)
{
    drop_item((file_taker *)fl);
    free(fl);
}

static int queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    file_taker *t = tst;
    (void)eng;
    if (t->base.fd < 0 || !t->data) return baton_seterr(BATON_ENOTHELD, 0, "no item taken");
    *data = t->data;
    *len = t->len;
    return 0;
}

static int queue_done(void *eng, void *tst, const baton_owner *owner)
{
    file_taker *t = tst;
    struct stat a, b;
    int rc = 0;
    (void)eng; (void)owner;
    if (t->base.fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "no item taken");
    /* ours iff the name is still the file we locked (only a lock holder removes one) */
    if (fstat(t->base.fd, &a) || fstatat(t->base.gfd, t->iname, &b, AT_SYMLINK_NOFOLLOW) || a.st_dev != b.st_dev ||
        a.st_ino != b.st_ino)
        rc = baton_seterr(BATON_ELOST, 0, "queue item %s was removed by something else", t->iname);
    else if (unlinkat(t->base.gfd, t->iname, 0))
        rc = baton_seterr(BATON_EIO, errno, "queue item %s: %s", t->iname, strerror(errno));
    drop_item(t);
    return rc;
}

static int queue_size(void *eng, void *st, uint64_t *waiting)
{
    file_engine *e = eng;
    file_queue *q = st;
    uint64_t *all = NULL;
    size_t n = 0;
    int dfd, rc;
    *waiting = 0;
    if ((rc = file__subdir(e, q->rel, 0, &dfd)) || dfd < 0) return rc;
    if (!(rc = items(e, dfd, &all, &n))) {
        for (size_t i = 0; i < n; i++) {
            char name[32];
            int fd;
            snprintf(name, sizeof name, "i.%020" PRIu64, all[i]);
            if ((fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0) continue;
            if (file__locked_by_other(fd) == 0) (*waiting)++;
            close(fd);
        }
    }
    free(all);
    close(dfd);
    return rc;
}

const baton_queue_methods file__queue_methods = {
    .create = queue_new,
    .destroy = queue_free,
    .put = queue_put,
    .taker = queue_taker,
    .item = queue_item,
    .done = queue_done,
    .size = queue_size,
};
