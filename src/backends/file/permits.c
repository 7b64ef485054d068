/* ---- permit-expirable semaphore -----------------------------------------------
 * N slots, one lock file each ("perm.<name>+<slot>"), and the count N in
 * "perm.<name>". A permit is an exclusive OFD lock on one slot file, held by
 * an open fd of the handle that acquired it, so the kernel frees a crashed
 * (even SIGKILLed) holder's permit the moment it dies, with no lease to run
 * out first.
 *
 * The lease is therefore ignored on this engine: a permit lasts until it is
 * released, its handle is freed, or its process ends; renewal only confirms
 * it is still held. Only the handle that acquired a permit can release or
 * renew it (the lock belongs to that handle's open file); there any other id
 * is unknown: BATON_ENOTOWNER, as the Redis engine answers for an unknown or
 * expired id. A child forked while a permit is held shares its open file and
 * keeps the permit taken until it exits or execs (the fds are close-on-exec).
 *
 * Acquires run one at a time under a short lock on the count file, so a count
 * lowered below the permits in use (ADD < 0) is exact: nobody is granted until
 * holders above the new count have left. Releases need no lock.
 *
 * Processes cannot notify each other here, so a wait polls: capped
 * exponential backoff with jitter, parked on the caller's waiter so a cancel
 * ends it at once. */
#include "file_int.h"

#define PERMITS_MAX 1000000   /* one file per slot: keep scans and the dir sane */
#define PCNT_HEAD "baton-permits 1\npermits "
#define PCNT_FMT PCNT_HEAD "%+020" PRId64 "\nslots %010" PRId64 "\n"
/* A count-file lock held longer than this is a stopped process's, not a scan. */
#define PCNT_STALL_NS (5 * 1000000000LL)
#define POLL_MIN_NS 1000000LL      /* 1 ms */
#define POLL_MAX_NS 100000000LL    /* 100 ms */

typedef struct file_permit {
    char id[BATON_PERMIT_ID_SIZE];
    uint32_t slot;
    int fd;                      /* holds the slot's lock */
    struct file_permit *next;
} file_permit;

typedef struct {
    char cname[256];             /* the count file; slot files add "+<slot>" */
    char name[161];              /* for messages */
    pthread_mutex_t mu;          /* guards held: threads may share a handle */
    file_permit *held;
} file_permits;

typedef struct {
    int set;                     /* 0: never set (or the file was lost) */
    int64_t n;                   /* the permit count; may be below 0 after ADD */
    int64_t slots;               /* the highest count ever: slot files above n may be held */
} pcount;

/* Reads the count. An empty or unreadable record is "never set": after a
 * power loss nobody holds a slot, and the next TRY_SET sets it again. */
static void pcount_read(int fd, pcount *pc)
{
    char buf[128], *p, *end;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    const size_t hl = sizeof PCNT_HEAD - 1;
    memset(pc, 0, sizeof *pc);
    if (n < (ssize_t)hl) return;
    buf[n] = 0;
    if (memcmp(buf, PCNT_HEAD, hl)) return;
    errno = 0;
    pc->n = strtoll(buf + hl, &end, 10);
    if (errno || *end != '\n' || strncmp(end, "\nslots ", 7)) goto unset;
    p = end + 7;
    pc->slots = strtoll(p, &end, 10);
    if (errno || *end != '\n' || p == end) goto unset;
    if (pc->n < -PERMITS_MAX || pc->n > PERMITS_MAX || pc->slots < 0 || pc->slots > PERMITS_MAX) goto unset;
    pc->set = 1;
    return;
unset:
    /* nothing of a record that is not one: its count and slots would be
     * used all the same (a slot scan up to a corrupt count: found by
     * fuzz_file) */
    memset(pc, 0, sizeof *pc);
}

static int pcount_write(int fd, const pcount *pc)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, PCNT_FMT, pc->n, pc->slots);
    ssize_t w = pwrite(fd, buf, (size_t)n, 0);
    if (w != n || ftruncate(fd, n))
        return baton_seterr(BATON_EIO, w < 0 ? errno : 0, "permit count file: write: %s",
                            w < 0 ? strerror(errno) : "short write");
    return 0;
}

/* Opens the count file and locks it exclusively (it is held for a scan of the
 * slots at most). Waits until deadline_ns (0 or INT64_MAX: PCNT_STALL_NS) and
 * gives way to a cancel on w. */
static int pcount_lock(file_engine *e, file_permits *fp, int64_t deadline_ns, baton_waiter *w, int *fdout)
{
    int64_t limit = baton_now_ns() + PCNT_STALL_NS;
    int stalled = 1;
    if (deadline_ns != 0 && deadline_ns < limit) limit = deadline_ns, stalled = 0;
    for (int tries = 0; tries < RELINK_TRIES; tries++) {
        long pause_ns = 50000;
        int fd, rc = file__dir_open(e, fp->cname, O_RDWR | O_CREAT, "permit count file", &fd);
        if (rc) return rc;
        while (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
            int err = errno;
            if (err != EAGAIN && err != EACCES) {
                close(fd);
                return baton_seterr(BATON_EIO, err, "permit count file %s: %s", fp->cname, strerror(err));
            }
            if (w && baton_waiter_canceled(w)) {
                close(fd);
                return baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
            }
            if (baton_now_ns() >= limit) {
                close(fd);
                if (!stalled)
                    return baton_seterr(BATON_ETIMEDOUT, 0, "permits of '%s': timed out", fp->name);
                return baton_seterr(BATON_EUNAVAILABLE, 0, "permit count file %s/%s stayed locked for %lld s; "
                                    "is a process stopped while holding it?", e->dir, fp->cname,
                                    (long long)(PCNT_STALL_NS / 1000000000LL));
            }
            struct timespec ts = { 0, pause_ns };
            nanosleep(&ts, NULL);
            if (pause_ns < 1000000) pause_ns *= 2;
        }
        if (file__still_linked(fd)) {
            *fdout = fd;
            return 0;
        }
        close(fd);
    }
    return file__replaced_err(e, fp->cname);
}

static void slot_name(const file_permits *fp, int64_t slot, char *buf, size_t n)
{
    snprintf(buf, n, "%s+%" PRId64, fp->cname, slot);
}

/* 1 when some open file (any process, this one included) holds the slot,
 * 0 when it is free, or an error. Creates nothing. */
static int slot_held(file_engine *e, const file_permits *fp, int64_t slot)
{
    char name[300];
    struct flock f;
    int fd, r;
    slot_name(fp, slot, name, sizeof name);
    if ((r = file__dir_open(e, name, O_RDONLY, "permit slot file", &fd))) return r;
    if (fd < 0) return 0;
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    r = fcntl(fd, F_OFD_GETLK, &f);
    if (r < 0) r = baton_seterr(BATON_EIO, errno, "permit slot file %s: %s", name, strerror(errno));
    else r = f.l_type != F_UNLCK;
    close(fd);
    return r;
}

/* How many slots below hi are held, or an error. */
static int64_t slots_held(file_engine *e, const file_permits *fp, int64_t lo, int64_t hi)
{
    int64_t held = 0;
    for (int64_t s = lo; s < hi; s++) {
        int r = slot_held(e, fp, s);
        if (r < 0) return r;
        held += r;
    }
    return held;
}

/* Takes the slot without waiting: 0 with its fd in *fdout, BATON_ELOCKED
 * (error not set) when it is held, or an error. */
static int slot_take(file_engine *e, const file_permits *fp, int64_t slot, int *fdout)
{
    char name[300];
    slot_name(fp, slot, name, sizeof name);
    for (int tries = 0; tries < RELINK_TRIES; tries++) {
        int fd, rc = file__dir_open(e, name, O_RDWR | O_CREAT, "permit slot file", &fd);
        if (rc) return rc;
        if (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
            int err = errno;
            close(fd);
            if (err == EAGAIN || err == EACCES) return BATON_ELOCKED;
            return baton_seterr(BATON_EIO, err, "permit slot file %s: %s", name, strerror(err));
        }
        if (file__still_linked(fd)) {
            *fdout = fd;
            return 0;
        }
        close(fd);
    }
    return file__replaced_err(e, name);
}

/* One attempt: a free slot below the count, provided the holders of slots
 * above it (left by a lowered count) still leave one over. */
static int permits_try(file_engine *e, file_permits *fp, int64_t deadline_ns, baton_waiter *w,
                       uint32_t *slot, int *fdout)
{
    pcount pc;
    int64_t over = 0, hi, free_low = 0;
    int cfd, rc;
    if ((rc = pcount_lock(e, fp, deadline_ns, w, &cfd))) return rc;
    pcount_read(cfd, &pc);
    if (!pc.set) {
        rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': the count was never set", fp->name);
        goto out;
    }
    if (pc.n <= 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': the count is %" PRId64, fp->name, pc.n);
        goto out;
    }
    hi = pc.slots > pc.n ? pc.slots : pc.n;
    if ((over = slots_held(e, fp, pc.n, hi)) < 0) { rc = (int)over; goto out; }
    if (over > 0) {
        int64_t taken = slots_held(e, fp, 0, pc.n);
        if (taken < 0) { rc = (int)taken; goto out; }
        free_low = pc.n - taken;
        if (free_low <= over) {
            rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': all %" PRId64 " are taken (the count was lowered "
                              "while %" PRId64 " more were held)", fp->name, pc.n, over);
            goto out;
        }
    }
    rc = BATON_ELOCKED;
    for (int64_t s = 0; s < pc.n && rc == BATON_ELOCKED; s++) {
        rc = slot_take(e, fp, s, fdout);
        if (rc == 0) *slot = (uint32_t)s;
    }
    if (rc == BATON_ELOCKED)
        baton_seterr(BATON_ELOCKED, 0, "permits of '%s': all %" PRId64 " are taken", fp->name, pc.n);
out:
    close(cfd);   /* also drops the count lock */
    return rc;
}

/* The pause before the next poll: d/2 .. d, so pollers that started together
 * drift apart. */
static int64_t jittered(int64_t d)
{
    static _Thread_local uint64_t x;
    if (!x) x = ((uint64_t)baton_now_ns() ^ ((uint64_t)(uintptr_t)&x << 20)) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return d / 2 + (int64_t)(x % (uint64_t)(d / 2 + 1));
}

int file__permits_new(void *eng, const char *name, void **st)
{
    file_permits *fp = calloc(1, sizeof *fp);
    (void)eng;
    if (!fp) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fp->cname, sizeof fp->cname);
    memcpy(fp->cname, "perm.", 5);   /* "lock." -> "perm.": its own name space */
    snprintf(fp->name, sizeof fp->name, "%s", name);
    pthread_mutex_init(&fp->mu, NULL);
    *st = fp;
    return 0;
}

void file__permits_free(void *eng, void *st)
{
    file_permits *fp = st;
    (void)eng;
    for (file_permit *p = fp->held, *next; p; p = next) {
        next = p->next;
        close(p->fd);   /* hands the permit back */
        free(p);
    }
    pthread_mutex_destroy(&fp->mu);
    free(fp);
}

int file__permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                                char id[BATON_PERMIT_ID_SIZE])
{
    file_engine *e = eng;
    file_permits *fp = st;
    file_permit *p;
    baton_owner rnd;
    int64_t delay = POLL_MIN_NS;
    uint32_t slot = 0;
    int fd = -1, rc;
    (void)lease_ms;   /* no lease here: the kernel frees a dead holder's slot (see above) */

    if ((rc = baton__owner_init(&rnd))) return rc;
    if (!(p = calloc(1, sizeof *p))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        int64_t now, until;
        rc = permits_try(e, fp, deadline_ns, w, &slot, &fd);
        if (rc != BATON_ELOCKED) break;
        if (deadline_ns == 0) break;   /* the message is set */
        now = baton_now_ns();
        if (deadline_ns != INT64_MAX && now >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "permits of '%s': none came free in time", fp->name);
            break;
        }
        until = now + jittered(delay);
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
            break;
        }
        if ((delay *= 2) > POLL_MAX_NS) delay = POLL_MAX_NS;
    }
    if (rc) {
        free(p);
        return rc;
    }
    /* 96 random bits make ids of one name distinct; the slot is readable at the end. */
    snprintf(p->id, sizeof p->id, "%.24s%08" PRIx32, rnd.hex, slot);
    p->slot = slot;
    p->fd = fd;
    pthread_mutex_lock(&fp->mu);
    p->next = fp->held;
    fp->held = p;
    pthread_mutex_unlock(&fp->mu);
    memcpy(id, p->id, BATON_PERMIT_ID_SIZE);
    return 0;
}

/* Unlinks the permit ID from the handle's list; NULL when it is not there. */
static file_permit *permit_take_out(file_permits *fp, const char *id)
{
    file_permit *found = NULL;
    pthread_mutex_lock(&fp->mu);
    for (file_permit **pp = &fp->held; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->id, id)) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&fp->mu);
    return found;
}

static int unknown_permit(const file_permits *fp, const char *id)
{
    return baton_seterr(BATON_ENOTOWNER, 0, "permit %s of '%s' is not held through this handle "
                        "(unknown or released; on the file engine only the acquiring handle can release it)",
                        id, fp->name);
}

int file__permits_release(void *eng, void *st, const char *id)
{
    file_permits *fp = st;
    file_permit *p = permit_take_out(fp, id);
    (void)eng;
    if (!p) return unknown_permit(fp, id);
    close(p->fd);
    free(p);
    return 0;
}

/* The lease is ignored; a permit is held as long as its fd is open, unless
 * its slot file was removed (then a newcomer can take the slot afresh, and
 * the permit is dropped as expired). */
int file__permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    file_permits *fp = st;
    int ok = 0, found = 0;
    (void)eng; (void)lease_ms;
    pthread_mutex_lock(&fp->mu);
    for (file_permit *p = fp->held; p; p = p->next)
        if (!strcmp(p->id, id)) {
            found = 1;
            ok = file__still_linked(p->fd);
            break;
        }
    pthread_mutex_unlock(&fp->mu);
    if (!found) return unknown_permit(fp, id);
    if (!ok) {
        file_permit *p = permit_take_out(fp, id);
        if (p) { close(p->fd); free(p); }
        return baton_seterr(BATON_ENOTOWNER, 0, "permit %s of '%s': its slot file was removed from %s; "
                            "the permit excludes nobody now and was dropped", id, fp->name,
                            ((file_engine *)eng)->dir);
    }
    return 0;
}

int file__permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    file_engine *e = eng;
    file_permits *fp = st;
    pcount pc;
    int64_t held;
    int cfd, rc = 0, changed = 0;

    switch (op) {
    case BATON_CTL_TRY_SET:
        if (arg < 0 || arg > PERMITS_MAX)
            return baton_seterr(BATON_EINVAL, 0, "permits of '%s': a count of %" PRId64 " is out of 0..%d "
                                "(the file engine keeps one file per permit)", fp->name, arg, PERMITS_MAX);
        break;
    case BATON_CTL_ADD:
        if (arg < -PERMITS_MAX || arg > PERMITS_MAX)
            return baton_seterr(BATON_EINVAL, 0, "permits of '%s': cannot add %" PRId64, fp->name, arg);
        break;
    case BATON_CTL_AVAILABLE:
    case BATON_CTL_DRAIN:
        break;
    default:
        return baton_seterr(BATON_ENOTSUP, 0, "permit-expirable semaphore: operation %d", op);
    }
    if ((rc = pcount_lock(e, fp, 0, NULL, &cfd))) return rc;
    pcount_read(cfd, &pc);
    switch (op) {
    case BATON_CTL_TRY_SET:
        if (out) *out = !pc.set;
        if (!pc.set) {
            pc.set = changed = 1;
            pc.n = arg;
        }
        break;
    case BATON_CTL_ADD:
        if (pc.n + arg < -PERMITS_MAX || pc.n + arg > PERMITS_MAX) {
            rc = baton_seterr(BATON_EINVAL, 0, "permits of '%s': %" PRId64 " %+" PRId64 " is out of -%d..%d",
                              fp->name, pc.n, arg, PERMITS_MAX, PERMITS_MAX);
            break;
        }
        pc.n += arg;
        pc.set = changed = 1;
        break;
    case BATON_CTL_AVAILABLE:
        /* The scan runs after the count lock is dropped: acquirers need not wait for it. */
        close(cfd);
        cfd = -1;
        held = slots_held(e, fp, 0, pc.slots > pc.n ? pc.slots : pc.n);
        if (held < 0) return (int)held;
        if (out) *out = pc.set ? pc.n - held : 0;
        return 0;
    case BATON_CTL_DRAIN:
        /* Under the count lock: no acquire can slip in between the count and the cut. */
        held = pc.set ? slots_held(e, fp, 0, pc.slots > pc.n ? pc.slots : pc.n) : 0;
        if (held < 0) { rc = (int)held; break; }
        if (out) *out = pc.set && pc.n - held > 0 ? pc.n - held : 0;
        if (pc.set && pc.n - held > 0) {
            pc.n = held;
            changed = 1;
        }
        break;
    }
    if (!rc && changed) {
        if (pc.n > pc.slots) pc.slots = pc.n;
        rc = pcount_write(cfd, &pc);
    }
    close(cfd);
    return rc;
}

/* Available permits of a permit-expirable semaphore NAME, for lock_info;
 * 0 with *out untouched when there is none. Reads without locking or
 * creating anything: a status query must not disturb the holders. */
int file__permits_info(file_engine *e, const char *name, int64_t *out)
{
    file_permits fp;
    pcount pc;
    int64_t held;
    int fd, rc;
    memset(&fp, 0, sizeof fp);
    baton__file_name(name, fp.cname, sizeof fp.cname);
    memcpy(fp.cname, "perm.", 5);
    if ((rc = file__dir_open(e, fp.cname, O_RDONLY, "permit count file", &fd))) return rc;
    if (fd < 0) return 0;
    pcount_read(fd, &pc);
    close(fd);
    if (!pc.set) return 0;
    held = slots_held(e, &fp, 0, pc.slots > pc.n ? pc.slots : pc.n);
    if (held < 0) return (int)held;
    /* free permits: none when the count was lowered below the permits in use
     * (a plain semaphore's count, above, is the signed value itself) */
    *out = pc.n > held ? pc.n - held : 0;
    return 0;
}
