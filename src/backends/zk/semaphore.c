/*
 * The semaphore (baton_semaphore_*): Redisson's RSemaphore semantics, a
 * count of permits nobody owns (any client releases, adds or drains; the
 * count may go below zero), kept in one persistent node:
 *
 *   <sem_root>/NAME              the count, decimal text (kazoo Counter's
 *                                layout: no data reads as 0)
 *   <sem_root>/NAME/op-<ms>-<hex> persistent, for one write (see below)
 *
 * A semaphore never set has no node: 0 permits, and an acquire waits on an
 * exists watch until someone sets or adds some.
 *
 * Every change is a compare-and-set: a setData on the data version read
 * (a create when there was no node), retried from a new read when another
 * client changed it first. An acquirer that finds too few permits keeps a
 * data (or exists) watch on the node, parks, and reads again when it fires.
 *
 * Why not Curator's InterProcessSemaphoreV2 (lease nodes, as the permits
 * are): its permits are owned (a lease node on the taker's session), and
 * these have no owner: a permit taken by one process is given back by
 * another, a permit taken by a process that dies stays taken.
 *
 * Exactly once: a write whose answer is lost (the connection dropped, the
 * io timeout passed) may or may not have been carried out, and a
 * compare-and-set cannot be sent again blindly: had it been carried out, a
 * release would count twice, an acquire take its permits twice. So each
 * write is a transaction with the creation of a persistent marker
 * op-<ms>-<random> below the count. A lost answer is settled by sending the
 * same transaction again, from the same session or, when it ended, a new
 * one: it is conditional on the data version read (or on the node's
 * absence), so it succeeds only if neither the first one nor anyone else
 * wrote meanwhile, and the first one, if still on its way, then fails for
 * ever (the version moved on). When it fails, the marker tells whether the
 * first one was carried out. The marker is deleted right after, without
 * waiting for the answer; one whose delete was lost (a connection loss) is
 * swept later by any writer that finds many of them (see sweep_markers).
 */
#include "zk_int.h"
#include "core/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A parked waiter reads again at least this often, watch or not (as lock
 * waiters do): a safety net, not the way it is woken. */
#define RECHECK_MS 5000

typedef struct zsem {
    zeng *e;
    char *path;              /* <sem_root>/NAME */
    uint64_t slot;
} zsem;

int zk_sem_new(void *eng, const char *name, void **st)
{
    zeng *e = eng;
    zsem *m = calloc(1, sizeof *m);
    int rc;
    *st = NULL;
    if (!m) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    m->e = e;
    if ((rc = zk_path_in(e, e->sbase, name, NULL, &m->path))) {
        free(m);
        return rc;
    }
    if (!(m->slot = zk_slot_open(e))) {
        free(m->path);
        free(m);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = m;
    return 0;
}

void zk_sem_free(void *eng, void *st)
{
    zsem *m = st;
    (void)eng;
    if (!m) return;
    zk_slot_close(m->e, m->slot);
    free(m->path);
    free(m);
}

/* The count in BUF (LEN bytes): 0 or BATON_EPROTO. */
static int parse_count(const char *path, const char *buf, int len, int64_t *v)
{
    char tmp[32], *end;
    if (len <= 0) {
        *v = 0; /* kazoo's Counter makes its node empty: its default, 0 */
        return 0;
    }
    if (len >= (int)sizeof tmp) goto bad;
    memcpy(tmp, buf, (size_t)len);
    tmp[len] = 0;
    errno = 0;
    *v = strtoll(tmp, &end, 10);
    if (errno || end == tmp || *end) goto bad;
    return 0;
bad:
    return baton_seterr(BATON_EPROTO, 0, "zk: semaphore %s: its data is not a count (a decimal number)", path);
}

/*
 * The count now: *V (0 when never set) and *VER (the data version, or
 * ZK_CREATE_VERSION when there is no node). With SLOT, a watch that fires
 * on its next change (its creation when absent). 0, or a ZooKeeper code as
 * *ZRC with BATON_EUNAVAILABLE-like errors left to the caller.
 */
static int read_count(zsess *s, zsem *m, uint64_t slot, int64_t *v, int *ver, int *zrc, int64_t dl, int *kids)
{
    if (kids) *kids = 0;
    char buf[32];
    struct Stat st;
    watcher_fn wf = slot ? zk_node_watcher : NULL;
    void *ctx = slot ? ZK_SLOT_CTX(slot) : NULL;
    for (int tries = 0; tries < 5; tries++) {
        int len = sizeof buf;
        *zrc = zk_get(s, m->path, wf, ctx, buf, &len, &st, dl);
        if (*zrc == ZOK) {
            *ver = st.version;
            if (kids) *kids = st.numChildren;
            /* longer than any count: not ours, and not a number */
            if (st.dataLength > (int)sizeof buf - 1) len = (int)sizeof buf;
            return parse_count(m->path, buf, len, v);
        }
        if (*zrc != ZNONODE) return 0;
        *v = 0;
        *ver = ZK_CREATE_VERSION;
        if (!slot) {
            *zrc = ZOK;
            return 0;
        }
        /* the watch on a node that is not there: exists sets it */
        *zrc = zk_exists(s, m->path, wf, ctx, &st, dl);
        if (*zrc == ZNONODE) {
            *zrc = ZOK;
            return 0;
        }
        if (*zrc != ZOK) return 0;
        /* made meanwhile: read it */
    }
    *zrc = ZOPERATIONTIMEOUT;
    return 0;
}

/* Milliseconds since the epoch (markers' names: see sweep_markers). */
static long long wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A fresh marker path for one write. */
static int mark_path(zsem *m, char **out)
{
    baton_owner o;
    int rc;
    size_t n;
    if ((rc = baton__owner_init(&o))) return rc;
    n = strlen(m->path) + sizeof "/op--" + 20 + strlen(o.hex);
    if (!(*out = malloc(n))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* the wall-clock time in its name lets sweep_markers tell a leftover */
    snprintf(*out, n, "%s/op-%lld-%s", m->path, wall_ms(), o.hex);
    return 0;
}

/* Creates the parents of the count node (first use of the root, or a
 * name with '/'): 0 or a baton error. */
static int make_parents(zeng *e, zsess *s, zsem *m, int64_t dl)
{
    char *p = strdup(m->path), *sl;
    int rc = 0;
    if (!p) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    sl = strrchr(p, '/');
    if (sl && sl != p) {
        *sl = 0;
        rc = zk_mkdirs(e, s, p, dl);
    }
    free(p);
    return rc;
}

/* A live session to settle a write on by DL: *SP itself once connected
 * again, else a new one. 0 or an error. */
static int live_session(zeng *e, zsess **sp, zsem *m, int64_t dl)
{
    while (baton_now_ns() < dl) {
        zsess *n = NULL;
        if (!zk_sess_dead(e, *sp)) {
            if (zk_sess_wait(e, *sp, dl) == 0) return 0;
            continue; /* it died meanwhile, or the deadline came */
        }
        int rc = zk_sess_get(e, dl, &n);
        if (rc == 0) {
            zk_sess_put(e, *sp);
            *sp = n;
            return 0;
        }
        if (rc != BATON_EUNAVAILABLE) return rc; /* say why (bad credentials), not "no session" */
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "zk: semaphore %s: a write's answer was lost and no session came "
                        "back in time to settle it", m->path);
}

/* A write (VER, BUF, MARK) whose answer was lost: 1 when it was made (now or
 * then), 0 when another write came first, else a baton error. Sends it again
 * on a live session; a refusal is settled by the marker, read after the
 * refusal on the same session (which the server answered once it had applied
 * everything before it). */
static int settle(zeng *e, zsess **sp, zsem *m, int ver, const char *buf, int len, const char *mark, int64_t dl)
{
    int rc, zrc;
    for (;;) {
        struct Stat st;
        zcall *c;
        if ((rc = live_session(e, sp, m, dl))) return rc;
        if ((c = zk_start_marked(*sp, m->path, buf, len, ver, mark, zk_acl(e), &zrc))) {
            zrc = zk_call_wait(c, dl);
            zk_call_put(c);
        }
        if (zrc == ZOK) return 1;
        if (zk_retryable(zrc) || zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) continue;
        if (zrc != ZBADVERSION && zrc != ZNODEEXISTS && zrc != ZNONODE)
            return zk_err(zrc, "write the count of", m->path);
        /* refused: the version moved on (or the node is there, or gone),
         * so the first send, made or not, can never be carried out now.
         * The look goes right behind the refusal on its session; if it is
         * lost too, refuse again first (a new session's server might not
         * have the first send yet) */
        {
            int64_t ldl = baton_now_ns() + ZK_GRACE_MS * 1000000LL;
            zrc = zk_exists(*sp, mark, NULL, NULL, &st, ldl > dl ? ldl : dl);
        }
        if (zrc == ZOK) return 1;
        if (zrc == ZNONODE) return 0;
        if (!zk_retryable(zrc) || baton_now_ns() >= dl)
            return zk_err(zrc, "look for the marker of a write to", m->path);
    }
}

/* Markers whose delete was lost stay (they are persistent). A writer that
 * reads SWEEP_AT or more children deletes those older than SWEEP_AGE_MS by
 * the time in their names (far past any call's deadline, clocks apart
 * included); answers are not waited for. */
#define SWEEP_AT 16
#define SWEEP_AGE_MS (3600 * 1000LL)

static void sweep_markers(zsess *s, zsem *m, int kids, int64_t dl)
{
    struct String_vector sv = { 0, NULL };
    long long old = wall_ms() - SWEEP_AGE_MS;
    if (kids < SWEEP_AT || zk_get_children(s, m->path, NULL, NULL, &sv, dl) != ZOK) return;
    for (int i = 0; i < sv.count; i++) {
        char *end, *p;
        long long t;
        int zrc;
        if (strncmp(sv.data[i], "op-", 3)) continue;
        t = strtoll(sv.data[i] + 3, &end, 10);
        if (end == sv.data[i] + 3 || *end != '-' || t >= old) continue;
        if (!(p = malloc(strlen(m->path) + strlen(sv.data[i]) + 2))) break;
        sprintf(p, "%s/%s", m->path, sv.data[i]);
        zk_call_put(zk_start_delete(s, p, -1, &zrc));
        free(p);
    }
    deallocate_String_vector(&sv);
}

/*
 * Writes NEWV if the count is still at version VER (ZK_CREATE_VERSION: if
 * there is still no node): 1 when written, 0 when it changed first (read
 * again), else a baton error (negative). *SP may be replaced by a new
 * session. By DL.
 */
static int write_count(zeng *e, zsess **sp, zsem *m, int ver, int64_t newv, int64_t dl)
{
    char buf[32], *mark = NULL;
    int rc, zrc, len, made_parents = 0;
    zsess *s = *sp;

    if ((rc = mark_path(m, &mark))) return rc;
    len = snprintf(buf, sizeof buf, "%" PRId64, newv);
    for (;;) {
        zcall *c = zk_start_marked(s, m->path, buf, len, ver, mark, zk_acl(e), &zrc);
        if (c) {
            zrc = zk_call_wait(c, dl);
            zk_call_put(c);
        }
        if (zrc == ZOK) break;
        if (zrc == ZBADVERSION || (ver == ZK_CREATE_VERSION && zrc == ZNODEEXISTS) ||
            (ver != ZK_CREATE_VERSION && zrc == ZNONODE)) {
            rc = 0; /* another write came first (or the node was deleted) */
            goto out;
        }
        if (zrc == ZNONODE && !made_parents) {
            made_parents = 1;
            if ((rc = make_parents(e, s, m, dl)) < 0) goto out;
            continue;
        }
        if (!zk_retryable(zrc) && zrc != ZSESSIONEXPIRED && zrc != ZINVALIDSTATE) {
            rc = zk_err(zrc, "write the count of", m->path);
            goto out;
        }
        /* The answer is lost: settle it (see the top of this file). */
        if ((rc = settle(e, &s, m, ver, buf, len, mark, dl)) != 1) goto out;
        break;
    }
    {
        /* the marker is of no use now; its answer is not waited for (a
         * lost one leaves the marker to sweep_markers) */
        zcall *d = zk_start_delete(s, mark, -1, &zrc);
        zk_call_put(d);
    }
    rc = 1;
out:
    free(mark);
    *sp = s;
    return rc;
}

/* After a failed read: 0 when it may be tried again (the connection came
 * back, or a new session replaced a dead one, before DL), else the error. */
static int recover(zeng *e, zsess **sp, int zrc, int64_t dl, const char *what, const char *path)
{
    zsess *s = *sp;
    if (zk_retryable(zrc) && baton_now_ns() < dl && zk_sess_wait(e, s, dl) == 0) return 0;
    if (zk_sess_dead(e, s) && baton_now_ns() < dl) {
        /* no grant lives on the session: a new one does as well */
        zsess *n = NULL;
        if (zk_sess_get(e, dl, &n) == 0) {
            zk_sess_put(e, s);
            *sp = n;
            return 0;
        }
    }
    return zk_err(zrc, what, path);
}

/* Adds DELTA (a compare-and-set, retried): 0 or an error; *OUT, when not
 * NULL, the count before. With DRAIN, sets 0 instead and only when the
 * count is above 0. */
static int change(zeng *e, zsem *m, int64_t delta, int drain, int64_t *out)
{
    zsess *s = NULL;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */
    int rc;
    if ((rc = zk_sess_get(e, end, &s))) return rc;
    for (;;) {
        int64_t v = 0, nv;
        int kids = 0;
        int ver, zrc;
        if ((rc = read_count(s, m, 0, &v, &ver, &zrc, end, &kids))) break;
        if (zrc != ZOK) {
            if ((rc = recover(e, &s, zrc, end, "read the count of", m->path))) break;
            continue;
        }
        if (out) *out = v;
        if (drain) {
            if (v <= 0) break; /* nothing to take (and no node made) */
            nv = 0;
        } else {
            /* past int64 is refused, the count unchanged: never a wrap */
            if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) {
                rc = baton_seterr(BATON_EINVAL, 0, "zk: semaphore %s: %" PRId64 " %+" PRId64 " is out of range",
                                  m->path, v, delta);
                break;
            }
            nv = v + delta;
        }
        rc = write_count(e, &s, m, ver, nv, end);
        if (rc == 1) {
            sweep_markers(s, m, kids, end);
            rc = 0;
            break;
        }
        if (rc < 0) break;
        if (baton_now_ns() >= end) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: semaphore %s changes too fast to change", m->path);
            break;
        }
    }
    zk_sess_put(e, s);
    return rc;
}

int zk_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    zeng *e = eng;
    zsem *m = st;
    zsess *s = NULL;
    int rc;

    {
        int64_t cd = zk_deadline_ms(e->connect_timeout_ms), dd = zk_call_deadline(e, deadline_ns);
        if ((rc = zk_sess_get(e, cd < dd ? cd : dd, &s))) return rc;
    }
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        uint64_t slot = deadline_ns && w ? m->slot : 0;
        int64_t dl = zk_call_deadline(e, deadline_ns), v = 0;
        int kids = 0;
        int ver, zrc;

        if (slot) zk_slot_arm(e, slot, w);
        if ((rc = read_count(s, m, slot, &v, &ver, &zrc, dl, &kids))) break;
        if (zrc != ZOK) {
            if ((rc = recover(e, &s, zrc, dl, "read the count of", m->path))) break;
            continue;
        }
        if (v >= (int64_t)permits) {
            rc = write_count(e, &s, m, ver, v - permits, dl);
            if (rc == 1) {
                sweep_markers(s, m, kids, dl);
                rc = 0;
                break;
            }
            if (rc < 0) break;
            continue; /* someone changed it first: read again */
        }
        if (w && baton_waiter_canceled(w)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "zk: semaphore acquire canceled");
            break;
        }
        if (deadline_ns == 0 || !slot) {
            rc = baton_seterr(BATON_ELOCKED, 0, "zk: semaphore %s: %" PRId64 " permits available, %u wanted",
                              m->path, v, permits);
            break;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: semaphore %s: too few permits at the deadline (%" PRId64
                              " available, %u wanted)", m->path, v, permits);
            break;
        }
        {
            int64_t until = baton_now_ns() + (int64_t)RECHECK_MS * 1000000LL;
            if (until > deadline_ns) until = deadline_ns;
            baton_waiter_park(w, gen, until);
        }
        /* a session that died meanwhile (its watch with it) is replaced by
         * the next read's recover(); the waiter holds nothing on it */
    }
    zk_slot_arm(e, m->slot, NULL);
    zk_sess_put(e, s);
    return rc;
}

int zk_sem_release(void *eng, void *st, uint32_t permits)
{
    return change(eng, st, (int64_t)permits, 0, NULL);
}

/* The signed count of NAME's semaphore for baton_lock_info: 0 with *V,
 * *EXISTS = 0 when there is none. */
int zk_sem_count(zeng *e, zsess *s, const char *name, int64_t *v, int *exists, int64_t dl)
{
    zsem m = { e, NULL, 0 };
    int rc, ver, zrc;
    *exists = 0;
    if ((rc = zk_path_in(e, e->sbase, name, NULL, &m.path))) return rc;
    rc = read_count(s, &m, 0, v, &ver, &zrc, dl, NULL);
    if (!rc && zrc != ZOK) rc = zk_err(zrc, "read the count of", m.path);
    if (!rc) *exists = ver != ZK_CREATE_VERSION;
    free(m.path);
    return rc;
}

int zk_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    zeng *e = eng;
    zsem *m = st;
    int64_t v = 0;
    int rc;

    switch (op) {
    case BATON_CTL_TRY_SET: {
        /* a create: only the first one makes the node */
        zsess *s = NULL;
        int64_t end = zk_deadline_ms(e->io_timeout_ms);
        if (arg < 0) return baton_seterr(BATON_EINVAL, 0, "zk: semaphore %s: a negative count", m->path);
        if ((rc = zk_sess_get(e, end, &s))) return rc;
        rc = write_count(e, &s, m, ZK_CREATE_VERSION, arg, end);
        zk_sess_put(e, s);
        if (rc < 0) return rc;
        if (out) *out = rc;
        return 0;
    }
    case BATON_CTL_ADD:
        return change(e, m, arg, 0, NULL);
    case BATON_CTL_DRAIN:
        if ((rc = change(e, m, 0, 1, &v))) return rc;
        if (out) *out = v > 0 ? v : 0;
        return 0;
    case BATON_CTL_AVAILABLE: {
        zsess *s = NULL;
        int64_t end = zk_deadline_ms(e->io_timeout_ms);
        int ver, zrc;
        if ((rc = zk_sess_get(e, end, &s))) return rc;
        for (;;) {
            if ((rc = read_count(s, m, 0, &v, &ver, &zrc, end, NULL)) || zrc == ZOK) break;
            if ((rc = recover(e, &s, zrc, end, "read the count of", m->path))) break;
        }
        zk_sess_put(e, s);
        if (!rc && out) *out = v;
        return rc;
    }
    default:
        return baton_seterr(BATON_EINVAL, 0, "zk: unknown semaphore operation %d", op);
    }
}
