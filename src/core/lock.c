/* The lock front-end: reentrancy, leases, renewal and loss on top of any backend. */
#include "lock.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ms_to_ns(int64_t ms) { return ms * 1000000LL; }

int baton__name_check(const char *name)
{
    size_t n;
    if (!name || !*name) return baton_seterr(BATON_EINVAL, 0, "lock name is empty");
    n = strlen(name);
    if (n > BATON_MAX_NAME)
        return baton_seterr(BATON_EINVAL, 0, "lock name is %zu bytes; the limit is %d", n, BATON_MAX_NAME);
    return 0;
}

/* "Wait a very long time" (up to INT64_MAX ms) saturates to "forever" rather
 * than overflowing into a deadline in the past. */
int baton__wait_deadline_ns(int64_t wait_ms, int64_t *out)
{
    int64_t now;
    if (wait_ms == 0) { *out = 0; return 0; }
    if (wait_ms < 0) { *out = INT64_MAX; return 0; }
    now = baton_now_ns();
    *out = wait_ms >= (INT64_MAX - now) / 1000000LL ? INT64_MAX : now + ms_to_ns(wait_ms);
    return 0;
}

/* The part of a lease the holder may count on: the engine's clock may run a
 * little faster than ours (1%, RedLock's drift factor), and between our
 * timer firing and the application stopping (on_lost, `baton run` killing
 * its command) a loaded machine schedules late: 25 ms more (5% of a lease
 * shorter than half a second). A 3 s lease thus ends 55 ms early for us. */
static int64_t lease_validity_ns(uint32_t lease_ms)
{
    int64_t l = ms_to_ns(lease_ms), sched = l / 20 < ms_to_ns(25) ? l / 20 : ms_to_ns(25);
    return l - l / 100 - sched;
}

/* What the keeper and the client call back (below). */
static int lock_poll(baton__kept *n, int64_t now, int renewing, int64_t *next);
static int lock_keep(baton__kept *n, int64_t now);
static int lock_start(baton__kept *n, int64_t now);
static void lock_report(baton__kept *n);
static int renewal_answer(baton_lock *l, int rc, int64_t sent, uint64_t fence);
static const baton__kept_ops lock_kept_ops = { lock_poll, lock_keep, lock_start, lock_report };
static int lock_recheck(baton__member *m, int64_t now);
static int lock_lost(baton__member *m, void *st, uint64_t fence);
static void lock_member_destroy(baton__member *m);
static void lock_member_free(baton__member *m);
static void lock_member_cancel(baton__member *m);
static const baton__member_ops lock_member_ops = { lock_member_destroy, lock_member_free, lock_member_cancel,
                                                   lock_recheck, lock_lost };

/* The io gate's shared pairs (lock.h): a pair is held only to flip or wait
 * on io_busy, never across I/O. */
#define GATE_PAIRS 64
static struct gate_pair {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} g_gate[GATE_PAIRS];
static pthread_once_t g_gate_once = PTHREAD_ONCE_INIT;
/* The handles' state mutexes (lock.h, smu): leaf locks, held for a few
 * field reads and writes, so sharing them costs no waiting to speak of. */
#define SMU_SHARED 64
static pthread_mutex_t g_smu[SMU_SHARED];


static void gate_init(void)
{
    for (int i = 0; i < GATE_PAIRS; i++) {
        pthread_mutex_init(&g_gate[i].mu, NULL);
        pthread_cond_init(&g_gate[i].cv, NULL);
    }
    for (int i = 0; i < SMU_SHARED; i++)
        pthread_mutex_init(&g_smu[i], NULL);
}

static struct gate_pair *gate_of(const baton_lock *l)
{
    uint64_t a = (uint64_t)(uintptr_t)l * UINT64_C(0x9E3779B97F4A7C15);
    pthread_once(&g_gate_once, gate_init);
    return &g_gate[a >> (64 - 6)];
}

static pthread_mutex_t *smu_of(const baton_lock *l)
{
    /* another multiplier than the gate's: two handles that share a gate
     * pair need not share a state mutex too */
    uint64_t a = (uint64_t)(uintptr_t)l * UINT64_C(0xC2B2AE3D27D4EB4F);
    pthread_once(&g_gate_once, gate_init);
    return &g_smu[a >> (64 - 6)];
}

void baton__lock_io_enter(baton_lock *l)
{
    struct gate_pair *g = gate_of(l);
    pthread_mutex_lock(&g->mu);
    while (l->io_busy)
        pthread_cond_wait(&g->cv, &g->mu);
    l->io_busy = 1;
    pthread_mutex_unlock(&g->mu);
}

void baton__lock_io_leave(baton_lock *l)
{
    struct gate_pair *g = gate_of(l);
    pthread_mutex_lock(&g->mu);
    l->io_busy = 0;
    /* the pair is shared: wake them all, the one of this lock goes on */
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int baton_lock_open(baton_lock **out, baton_client *c, const char *name, const baton_lock_options *opts)
{
    return baton__lock_create(out, c, name, opts, NULL);
}

int baton__lock_create(baton_lock **out, baton_client *c, const char *name,
                       const baton_lock_options *opts, void *st)
{
    /* the size of each version of baton_lock_options (a program built
     * against an older header passes a shorter struct) */
    static const size_t lock_opts_sizes[] = { sizeof(baton_lock_options) };
    baton_lock_options def = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l;
    int rc;

    if (out) *out = NULL; /* first: a caller that ignores the error never sees garbage */
    if (!out || !c) return baton_seterr(BATON_EINVAL, 0, "baton_lock_open: NULL argument");
    if ((rc = baton__name_check(name))) return rc;
    if ((rc = baton__opts_copy(&def, opts, lock_opts_sizes, BATON_LOCK_OPTIONS_VERSION, "lock options"))) return rc;
    if (def.lease_ms == 0) def.lease_ms = 30000;
    if (def.lease_ms < 10)
        return baton_seterr(BATON_EINVAL, 0, "lease of %u ms is too short (minimum 10 ms)", def.lease_ms);
    if (def.renew_ms == 0) def.renew_ms = def.lease_ms / 3;
    if (def.renew_ms >= def.lease_ms)
        return baton_seterr(BATON_EINVAL, 0, "renew period %u ms must be shorter than the lease %u ms",
                            def.renew_ms, def.lease_ms);
    if (def.fair && !(c->be->caps & BATON_CAP_FAIR))
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no fair lock", c->be->info->name);

    /* the name in the handle's own allocation: one malloc header less per lock */
    l = calloc(1, sizeof *l + strlen(name) + 1);
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    l->c = c;
    l->opts = def;
    l->lease_deadline = l->next_renew = INT64_MAX;
    l->name = (char *)(l + 1);
    memcpy(l->name, name, strlen(name) + 1);
    if ((rc = baton__owner_init(&l->owner))) goto fail_name;
    if ((rc = baton__waiter_init(&l->waiter))) goto fail_name;
    l->smu = smu_of(l);
    if (st) l->st = st;
    else if ((rc = c->be->lock->create(c->eng, l->name, &l->opts, &l->st))) goto fail_sync;
    l->kn.ops = &lock_kept_ops;
    l->cm.ops = &lock_member_ops;
    if ((rc = baton__client_link(c, &l->cm))) {
        c->be->lock->destroy(c->eng, l->st);
        goto fail_sync;
    }
    *out = l;
    return 0;
fail_sync:
    baton__waiter_destroy(&l->waiter);
fail_name:
    free(l);
    return rc;
}

int baton_lock_acquire(baton_lock *l, int64_t wait_ms)
{
    int rc;
    if (!l) return baton_seterr(BATON_EINVAL, 0, "baton_lock_acquire: NULL lock");
    if ((rc = baton__member_enter(&l->cm))) return rc;
    rc = baton__lock_acquire(l, wait_ms);
    baton__member_leave(&l->cm);
    return rc;
}

/* A cancel is kept until an acquire consumes it: the one in flight when it
 * came, or else the next one, which returns BATON_ECANCELED at once. */
static int take_cancel(baton_lock *l)
{
    int c = baton_waiter_canceled(&l->waiter);
    if (c) baton__waiter_reset(&l->waiter);
    return c;
}

void baton__lock_uncancel(baton_lock *l) { baton__waiter_reset(&l->waiter); }

/* smu held: the engine reported the loss of the grant FENCE while it was
 * being made (lock_lost during an acquire). */
static int lost_in_flight(baton_lock *l, uint64_t fence)
{
    return l->lost_any || (l->lost_fence && l->lost_fence == fence);
}

/* The acquire's prologue: the checks, the handle marked acquiring, the
 * request made. 0 with *REENTERED set when a reentrant hold just went one
 * deeper (nothing to ask the engine); else 0 and the engine is to be asked
 * (baton__lock_acquire_end must follow), or an error. */
int baton__lock_acquire_begin(baton_lock *l, int64_t wait_ms, baton_acquire_req *req, int *reentered)
{
    unsigned long me = baton__gettid();

    *reentered = 0;
    if (l->sibling && l->is_write) {
        int upgrade;
        pthread_mutex_lock(l->sibling->smu);
        upgrade = l->sibling->state == LOCK_HELD && l->sibling->holder_tid == me;
        pthread_mutex_unlock(l->sibling->smu);
        if (upgrade)
            return baton_seterr(BATON_EDEADLK, 0, "lock '%s': this thread holds the read side; "
                                "a read lock cannot be upgraded", l->name);
    }
    pthread_mutex_lock(l->smu);
    if (l->state == LOCK_HELD) {
        if (l->holder_tid != me) {
            pthread_mutex_unlock(l->smu);
            return baton_seterr(BATON_EINVAL, 0, "lock '%s': this handle is held by another thread; "
                                "open one handle per thread", l->name);
        }
        if (!l->opts.reentrant) {
            pthread_mutex_unlock(l->smu);
            return baton_seterr(BATON_EDEADLK, 0, "lock '%s' is already held by this thread "
                                "and is not reentrant", l->name);
        }
        if (baton_now_ns() >= l->lease_deadline) {
            /* The keeper has not said so yet, but the outer section has lost
             * exclusion: a nested grant must not hide that. */
            pthread_mutex_unlock(l->smu);
            return baton_seterr(BATON_ELOST, 0, "lock '%s': the lease ran out while held; "
                                "release it to its outermost level first", l->name);
        }
        l->depth++;
        pthread_mutex_unlock(l->smu);
        *reentered = 1;
        return 0;
    }
    if (l->state == LOCK_LOST && l->opts.reentrant && l->depth > 0) {
        /* A nested acquire on a lost lock would take a new grant and leave
         * the outer sections believing they never lost exclusion. */
        pthread_mutex_unlock(l->smu);
        return baton_seterr(BATON_ELOST, 0, "lock '%s' was lost while held; release it to its "
                            "outermost level before acquiring again", l->name);
    }
    if (l->acquiring) {
        pthread_mutex_unlock(l->smu);
        return baton_seterr(BATON_EINVAL, 0, "lock '%s': another thread is acquiring this handle", l->name);
    }
    if (take_cancel(l)) {
        pthread_mutex_unlock(l->smu);
        return baton_seterr(BATON_ECANCELED, 0, "lock '%s': acquire canceled (before it started)", l->name);
    }
    l->acquiring = 1;
    l->lost_fence = 0;
    l->lost_any = 0;
    if (l->state == LOCK_LOST) {
        /* The loss was reported; a new acquire starts afresh. */
        l->state = LOCK_FREE;
        l->depth = 0;
    }
    pthread_mutex_unlock(l->smu);
    baton__keeper_remove(l->c->keeper,&l->kn);

    memset(req, 0, sizeof *req);
    baton__owner_set_thread(&l->owner);
    req->owner = &l->owner;
    req->lease_ms = l->opts.lease_ms;
    req->fair = l->opts.fair;
    req->waiter = &l->waiter;
    req->value = l->value;
    baton__wait_deadline_ns(wait_ms, &req->deadline_ns);
    return 0;
}

/* The engine granted REQ: 0 when the grant can be called held, else it was
 * given back (owner-checked) and *DEAD says whether the engine's session
 * ended under it (else the lease was over when the answer came: a paused
 * process, a slow handoff). */
int baton__lock_grant_check(baton_lock *l, const baton_acquire_req *req, int *dead)
{
    int leased = (l->c->be->caps & BATON_CAP_LEASE) != 0;
    pthread_mutex_lock(l->smu);
    *dead = lost_in_flight(l, req->fence);
    l->lost_any = 0;
    l->lost_fence = 0;
    pthread_mutex_unlock(l->smu);
    if (!*dead && (!leased || baton_now_ns() < req->sent_ns + lease_validity_ns(l->opts.lease_ms)))
        return 0;
    baton__lock_io_enter(l);
    l->c->be->lock->release(l->c->eng, l->st, &l->owner);
    baton__lock_io_leave(l);
    return 1;
}

/* After a grant given back by grant_check: the error that ends the acquire
 * (its time is over, or it was canceled), or 0 to ask the engine again. */
int baton__lock_retry_rc(baton_lock *l, const baton_acquire_req *req, int dead)
{
    if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
        return dead ? baton_seterr(BATON_EUNAVAILABLE, 0, "lock '%s': the engine's session ended "
                                   "as it granted the lock", l->name)
                    : baton_seterr(req->deadline_ns ? BATON_ETIMEDOUT : BATON_ELOCKED, 0,
                                   "lock '%s': granted only after its lease of %u ms was over", l->name,
                                   l->opts.lease_ms);
    if (baton_waiter_canceled(&l->waiter))
        return baton_seterr(BATON_ECANCELED, 0, "lock '%s': acquire canceled", l->name);
    return 0;
}

/* The acquire's epilogue with the engine's final answer RC (REQ granted when
 * 0): the handle is held (and kept) or free again. The acquire's result. */
int baton__lock_acquire_end(baton_lock *l, int rc, const baton_acquire_req *req, int64_t wait_ms)
{
    unsigned long me = baton__gettid();
    int leased = (l->c->be->caps & BATON_CAP_LEASE) != 0;
    /* The keeper watches a grant it renews, and one the engine may declare
     * lost (it reports that on the keeper thread). */
    int kept = leased || (l->c->be->caps & BATON_CAP_SESSION);

    pthread_mutex_lock(l->smu);
    l->acquiring = 0;
    /* This acquire consumed any cancel that came while it ran. */
    baton__waiter_reset(&l->waiter);
    if (rc == 0) {
        l->state = LOCK_HELD;
        l->holder_tid = me;
        l->depth = 1;
        l->fence = req->fence;
        if (leased) {
            l->lease_deadline = req->sent_ns + lease_validity_ns(l->opts.lease_ms);
            l->next_renew = l->opts.fixed_lease ? INT64_MAX : req->sent_ns + ms_to_ns(l->opts.renew_ms);
        } else {
            /* No lease: only the engine ends this grant (baton_host_lost),
             * and a loss it reported for the previous grant is over. */
            l->lease_deadline = l->next_renew = INT64_MAX;
        }
    }
    pthread_mutex_unlock(l->smu);
    if (rc == 0 && kept && baton__keeper_add(l->c->keeper,&l->kn) != 0) {
        /* nobody could renew it or report it lost: give it back */
        int e = baton_error_last()->code;
        char msg[256];
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        baton__lock_release(l);
        return baton_seterr(e, 0, "lock '%s': %s", l->name, msg);
    }
    if (rc == BATON_ELOCKED && wait_ms != 0)
        rc = baton_seterr(BATON_ETIMEDOUT, 0, "lock '%s': wait timed out", l->name);
    return rc;
}

int baton__lock_acquire(baton_lock *l, int64_t wait_ms)
{
    baton_acquire_req req;
    int rc, reentered;

    if (!l) return baton_seterr(BATON_EINVAL, 0, "baton_lock_acquire: NULL lock");
    if ((rc = baton__lock_acquire_begin(l, wait_ms, &req, &reentered)) || reentered) return rc;
    for (;;) {
        int dead;
        baton__lock_io_enter(l);
        rc = l->c->be->lock->acquire(l->c->eng, l->st, &req);
        baton__lock_io_leave(l);
        if (rc) break;
        /* Granted, but the lease was already over when the answer came, or
         * the engine said the session it was granted on died while the
         * answer was on its way: never report that as held. Given back by
         * grant_check; try again while time is left. */
        if (!baton__lock_grant_check(l, &req, &dead)) break;
        if ((rc = baton__lock_retry_rc(l, &req, dead))) break;
    }
    return baton__lock_acquire_end(l, rc, &req, wait_ms);
}

/* Marks the lock lost (smu held by the caller, unlocked here); the keeper
 * then runs lock_report on a worker, with no lock of ours held, so on_lost
 * may release, re-acquire or free the lock. */
static int lose(baton_lock *l)
{
    l->state = LOCK_LOST;
    pthread_mutex_unlock(l->smu);
    return 1;
}

/* The keeper's report(): on_lost, which may release, re-acquire or free l. */
static void lock_report(baton__kept *n)
{
    baton_lock *l = BATON__CONTAINER(n, baton_lock, kn);
    if (l->opts.on_lost) l->opts.on_lost(l, l->opts.on_lost_payload);
}

/* The keeper's poll() on its timing thread: the lease deadline is decided
 * here, on our clock, whatever renewal may still be blocked in the engine. */
static int lock_poll(baton__kept *n, int64_t now, int renewing, int64_t *next)
{
    baton_lock *l = BATON__CONTAINER(n, baton_lock, kn);
    pthread_mutex_lock(l->smu);
    if (l->state != LOCK_HELD) {
        pthread_mutex_unlock(l->smu);
        *next = INT64_MAX;
        return KEPT_IDLE;
    }
    if (now >= l->lease_deadline) {
        *next = INT64_MAX;
        return lose(l) ? KEPT_LOST : KEPT_IDLE;
    }
    *next = l->lease_deadline;
    if (!renewing && l->next_renew != INT64_MAX) {
        /* Due a little early (an eighth of the renewal period, at most a
         * second): renewals due close together leave in one keeper pass,
         * and a client with many locks wakes its keeper once per batch
         * instead of once per lock. Renewing early is always safe. */
        int64_t slack = ms_to_ns(l->opts.renew_ms) / 8, due;
        if (slack > ms_to_ns(1000)) slack = ms_to_ns(1000);
        due = l->next_renew - slack;
        if (now >= due) {
            pthread_mutex_unlock(l->smu);
            return KEPT_RENEW;
        }
        if (due < *next) *next = due;
    }
    pthread_mutex_unlock(l->smu);
    return KEPT_IDLE;
}

/* The keeper's keep() on a worker: one owner-checked renewal, bounded by the
 * lease deadline (the engine must return by then; the timing thread does
 * not wait for it). 1 when the engine said the lock is gone. */
static int lock_keep(baton__kept *n, int64_t now)
{
    baton_lock *l = BATON__CONTAINER(n, baton_lock, kn);
    int64_t sent, deadline;
    uint64_t fence;
    int rc;

    (void)now;
    pthread_mutex_lock(l->smu);
    if (l->state != LOCK_HELD) { pthread_mutex_unlock(l->smu); return 0; }
    deadline = l->lease_deadline;
    fence = l->fence;
    pthread_mutex_unlock(l->smu);

    baton__lock_io_enter(l);
    sent = baton_now_ns();
    rc = l->c->be->lock->renew(l->c->eng, l->st, &l->owner, l->opts.lease_ms, deadline);
    baton__lock_io_leave(l);
    return renewal_answer(l, rc, sent, fence);
}

/* A native renewal in flight (lock_start): what its answer needs. */
typedef struct {
    baton_lock *l;
    baton__keeper *k;
    int64_t sent;
    uint64_t fence;
} renewal;

/* The engine's answer to lock_start's renewal, on an engine thread with
 * none of our locks held: handled as the blocking renewal's. */
static void lock_renewed(void *token, int rc, uint64_t fence, int64_t sent_ns)
{
    renewal *r = token;
    baton_lock *l = r->l;
    baton__keeper *k = r->k;
    int lost;
    (void)fence;
    (void)sent_ns;
    lost = renewal_answer(l, rc, r->sent, r->fence);
    free(r);
    baton__lock_io_leave(l);
    baton__keeper_renewed(k, &l->kn, lost);
}

/* The keeper's start() on a worker: lock_keep's renewal started natively
 * (backend.h v12, renew_start), so one worker sends a batch of them; any
 * refusal sends this one to lock_keep. */
static int lock_start(baton__kept *n, int64_t now)
{
    baton_lock *l = BATON__CONTAINER(n, baton_lock, kn);
    const baton_async_methods *am = l->c->be->async;
    renewal *r;
    int64_t deadline;
    int rc;

    (void)now;
    if (!am || !am->renew_start) return BATON_ENOTSUP;
    if (!(r = malloc(sizeof *r))) return BATON_ENOMEM;
    pthread_mutex_lock(l->smu);
    if (l->state != LOCK_HELD) {
        /* nothing to renew: lock_keep says so at once */
        pthread_mutex_unlock(l->smu);
        free(r);
        return BATON_ENOTHELD;
    }
    deadline = l->lease_deadline;
    r->fence = l->fence;
    pthread_mutex_unlock(l->smu);
    r->l = l;
    r->k = l->c->keeper;
    baton__lock_io_enter(l);
    r->sent = baton_now_ns();
    rc = am->renew_start(l->c->eng, l->st, &l->owner, l->opts.lease_ms, deadline, lock_renewed, r);
    if (rc) {
        baton__lock_io_leave(l);
        free(r);
    }
    return rc;
}

/* The answer RC to a renewal sent at SENT of the grant FENCE: the lease
 * extended, or the lock lost (1), or a retry planned. */
static int renewal_answer(baton_lock *l, int rc, int64_t sent, uint64_t fence)
{
    pthread_mutex_lock(l->smu);
    /* Lost meanwhile (the timing thread, or the engine's report): a late
     * success must not revive it. */
    if (l->state != LOCK_HELD || l->fence != fence) { pthread_mutex_unlock(l->smu); return 0; }
    if (rc == 0 && l->lease_deadline != INT64_MIN) {
        int64_t d = sent + lease_validity_ns(l->opts.lease_ms);
        if (d > l->lease_deadline) l->lease_deadline = d;
        l->next_renew = sent + ms_to_ns(l->opts.renew_ms);
    } else if (rc == BATON_ELOST || rc == BATON_ENOTOWNER || baton_now_ns() >= l->lease_deadline) {
        return lose(l);
    } else {
        /* Engine unreachable: retry soon; the deadline decides when it is lost. */
        int64_t retry = ms_to_ns(l->opts.renew_ms) / 4;
        if (retry < ms_to_ns(20)) retry = ms_to_ns(20);
        if (retry > ms_to_ns(1000)) retry = ms_to_ns(1000);
        l->next_renew = baton_now_ns() + retry;
    }
    pthread_mutex_unlock(l->smu);
    return 0;
}

/* The renewal and the new lease are made under the io mutex, as the
 * keeper's renewal is, so the lease the engine was last given and the one
 * the keeper renews to never disagree: a renewal with the old lease either
 * comes before this one (and is overridden by it) or after it (and uses the
 * new one). */
static int lock_extend(baton_lock *l, uint32_t lease_ms)
{
    int64_t sent, deadline;
    uint64_t fence;
    int rc;
    pthread_mutex_lock(l->smu);
    if (l->state != LOCK_HELD || baton_now_ns() >= l->lease_deadline) {
        rc = l->state == LOCK_FREE ? baton_seterr(BATON_ENOTHELD, 0, "lock '%s' is not held", l->name)
                                   : baton_seterr(BATON_ELOST, 0, "lock '%s' was lost", l->name);
        pthread_mutex_unlock(l->smu);
        return rc;
    }
    if (l->lease_deadline == INT64_MAX) {
        /* no lease of its own: nothing to extend */
        pthread_mutex_unlock(l->smu);
        return 0;
    }
    deadline = l->lease_deadline;
    fence = l->fence;
    pthread_mutex_unlock(l->smu);

    baton__lock_io_enter(l);
    sent = baton_now_ns();
    rc = l->c->be->lock->renew(l->c->eng, l->st, &l->owner, lease_ms, deadline);
    pthread_mutex_lock(l->smu);
    if (rc == 0 && l->state == LOCK_HELD && l->fence == fence && l->lease_deadline != INT64_MIN) {
        l->opts.lease_ms = lease_ms;
        l->opts.renew_ms = lease_ms / 3 ? lease_ms / 3 : 1;
        l->lease_deadline = sent + lease_validity_ns(lease_ms);
        l->next_renew = l->opts.fixed_lease ? INT64_MAX : sent + ms_to_ns(l->opts.renew_ms);
    } else if (rc == 0 || rc == BATON_ENOTOWNER || rc == BATON_ELOST) {
        /* lost meanwhile, or the engine says so: the keeper reports it */
        if (rc) l->lease_deadline = INT64_MIN;
        rc = baton_seterr(BATON_ELOST, 0, "lock '%s' was lost before this extend", l->name);
    }
    pthread_mutex_unlock(l->smu);
    baton__lock_io_leave(l);
    if (rc == BATON_ELOST) baton__keeper_kick(l->c->keeper);
    return rc;
}

int baton_lock_extend(baton_lock *l, uint32_t lease_ms)
{
    int rc;
    if (!l) return baton_seterr(BATON_EINVAL, 0, "baton_lock_extend: NULL lock");
    if (lease_ms < 10) return baton_seterr(BATON_EINVAL, 0, "lease of %u ms is too short (minimum 10 ms)", lease_ms);
    if ((rc = baton__member_enter(&l->cm))) return rc;
    rc = lock_extend(l, lease_ms);
    baton__member_leave(&l->cm);
    return rc;
}

int baton_lock_release(baton_lock *l)
{
    int rc;
    if (!l) return baton_seterr(BATON_EINVAL, 0, "baton_lock_release: NULL lock");
    if ((rc = baton__member_enter(&l->cm))) return rc;
    rc = baton__lock_release(l);
    baton__member_leave(&l->cm);
    return rc;
}

int baton__lock_release(baton_lock *l) { return baton__lock_release_with(l, NULL); }

int baton__lock_release_with(baton_lock *l, int (*fn)(void *eng, void *st, const baton_owner *owner))
{
    int rc;
    pthread_mutex_lock(l->smu);
    if (l->state == LOCK_FREE) {
        pthread_mutex_unlock(l->smu);
        return baton_seterr(BATON_ENOTHELD, 0, "lock '%s' is not held", l->name);
    }
    if (l->state == LOCK_LOST) {
        if (l->depth > 1) {
            /* Every level of a reentrant hold learns of the loss. */
            l->depth--;
            pthread_mutex_unlock(l->smu);
            return baton_seterr(BATON_ELOST, 0, "lock '%s' was lost while held", l->name);
        }
        l->state = LOCK_FREE;
        l->depth = 0;
        l->fence = 0;
        l->lease_deadline = l->next_renew = INT64_MAX;
        pthread_mutex_unlock(l->smu);
        baton__keeper_remove(l->c->keeper,&l->kn);
        /* Lost on our side does not mean gone on the engine's: a session
         * lock whose connection we could not confirm (a stopped process, a
         * frozen link) is still the server's until we let go, and letting
         * go now, after the application stopped using it (baton run: after
         * the command's tree exited), is what keeps the next holder from
         * overlapping it. Owner-checked, so it never touches a new holder. */
        baton__lock_io_enter(l);
        l->c->be->lock->release(l->c->eng, l->st, &l->owner);
        baton__lock_io_leave(l);
        return baton_seterr(BATON_ELOST, 0, "lock '%s' was lost before this release", l->name);
    }
    if (l->depth > 1) {
        int over = baton_now_ns() >= l->lease_deadline;
        l->depth--;
        pthread_mutex_unlock(l->smu);
        if (over) return baton_seterr(BATON_ELOST, 0, "lock '%s': the lease ran out while held", l->name);
        return 0;
    }
    int over = l->lease_deadline != INT64_MAX && baton_now_ns() >= l->lease_deadline;
    l->state = LOCK_FREE;
    l->depth = 0;
    l->fence = 0;
    l->lease_deadline = l->next_renew = INT64_MAX;
    pthread_mutex_unlock(l->smu);
    baton__keeper_remove(l->c->keeper,&l->kn);

    baton__lock_io_enter(l);
    rc = (fn ? fn : l->c->be->lock->release)(l->c->eng, l->st, &l->owner);
    baton__lock_io_leave(l);
    if (rc == BATON_ENOTOWNER)
        rc = baton_seterr(BATON_ELOST, 0, "lock '%s' was lost: the engine has another owner", l->name);
    if (!rc && over && !fn)
        rc = baton_seterr(BATON_ELOST, 0, "lock '%s': the lease ran out before this release", l->name);
    return rc;
}

uint64_t baton_lock_fence(const baton_lock *l)
{
    baton_lock *m = (baton_lock *)l;
    uint64_t f;
    if (!l || baton__member_enter(&m->cm)) return 0;
    pthread_mutex_lock(m->smu);
    f = l->state == LOCK_HELD ? l->fence : 0;
    pthread_mutex_unlock(m->smu);
    baton__member_leave(&m->cm);
    return f;
}

int baton_lock_held(const baton_lock *l)
{
    baton_lock *m = (baton_lock *)l;
    int h, session;
    if (!l || baton__member_enter(&m->cm)) return 0;
    pthread_mutex_lock(m->smu);
    h = l->state == LOCK_HELD && baton_now_ns() < l->lease_deadline;
    session = l->lease_deadline == INT64_MAX;
    pthread_mutex_unlock(m->smu);
    /* A grant on a session (no lease of its own) lives as long as the
     * session: past the engine's bound on it, the grant may be gone already,
     * whatever the engine's threads have had time to report. Asked with smu
     * released: the engine takes its own mutex, which it may hold while it
     * reports losses into the core. */
    if (h && session && l->c->be->services->session_deadline)
        h = baton_now_ns() < l->c->be->services->session_deadline(l->c->eng);
    baton__member_leave(&m->cm);
    return h;
}

int baton_lock_deadline(const baton_lock *l, int64_t *mono_ns)
{
    baton_lock *m = (baton_lock *)l;
    int64_t d;
    int held, rc;
    if (!l || !mono_ns) return baton_seterr(BATON_EINVAL, 0, "baton_lock_deadline: NULL argument");
    if ((rc = baton__member_enter(&m->cm))) return rc;
    pthread_mutex_lock(m->smu);
    held = l->state == LOCK_HELD;
    d = l->lease_deadline;
    pthread_mutex_unlock(m->smu);
    /* As in held(): a grant without a lease of its own lives as long as the
     * engine's session, asked with smu released. */
    if (held && d == INT64_MAX && l->c->be->services->session_deadline)
        d = l->c->be->services->session_deadline(l->c->eng);
    baton__member_leave(&m->cm);
    if (!held) return baton_seterr(BATON_ENOTHELD, 0, "lock '%s' is not held", l->name);
    *mono_ns = d;
    return 0;
}

/* Works on a handle whose client is closed too (it only touches the handle). */
int baton_lock_cancel(baton_lock *l)
{
    if (!l) return baton_seterr(BATON_EINVAL, 0, "baton_lock_cancel: NULL lock");
    /* an async acquire still queued for a worker completes at once */
    if (baton__async_cancel(l)) return 0;
    baton__waiter_cancel(&l->waiter);
    return 0;
}

const char *baton_lock_name(const baton_lock *l)
{
    return l ? l->name : NULL;
}

/* The client's recheck(): a held, renewed lock is due for its owner-checked
 * renewal now (the engine said it may have lost it). Fixed leases are not
 * renewed, so not re-checked. */
static int lock_recheck(baton__member *m, int64_t now)
{
    baton_lock *l = BATON__CONTAINER(m, baton_lock, cm);
    int any = 0;
    pthread_mutex_lock(l->smu);
    if (l->state == LOCK_HELD && l->next_renew != INT64_MAX) {
        l->next_renew = now;
        any = 1;
    }
    pthread_mutex_unlock(l->smu);
    return any;
}

/* The client's lost(): the engine says this grant is gone. Its lease ends
 * now, so held() is false at once and the keeper reports it like an
 * expired lease. A report that comes while an acquire is in flight is kept
 * for the grant it names (any grant, for fence 0): the acquire gives that
 * grant back instead of calling it held. */
static int lock_lost(baton__member *m, void *st, uint64_t fence)
{
    baton_lock *l = BATON__CONTAINER(m, baton_lock, cm);
    int hit = 0;
    if (st && st != l->st) return 0;
    pthread_mutex_lock(l->smu);
    if (l->state == LOCK_HELD && (fence == 0 || fence == l->fence)) {
        l->lease_deadline = INT64_MIN;
        hit = 1;
    } else if (l->acquiring) {
        /* A grant in flight may have been made on the session that just
         * died (the engine's last check passed before the loss): it is
         * given back. After a lost_all (st NULL) the grant may as well come
         * from a new session; giving that one back costs a retry, never
         * exclusion. */
        if (fence == 0) l->lost_any = 1;
        else l->lost_fence = fence;
    }
    pthread_mutex_unlock(l->smu);
    return hit;
}

static void lock_member_cancel(baton__member *m)
{
    baton__waiter_cancel(&BATON__CONTAINER(m, baton_lock, cm)->waiter);
}

/* The member's destroy(): gives back what the handle holds and frees its
 * engine state; the handle stays until its owner frees it. */
static void lock_member_destroy(baton__member *m)
{
    baton_lock *l = BATON__CONTAINER(m, baton_lock, cm);
    int held;
    pthread_mutex_lock(l->smu);
    held = l->state != LOCK_FREE;
    if (l->depth > 1) l->depth = 1;   /* freeing releases every reentrant hold */
    pthread_mutex_unlock(l->smu);
    if (held)
        baton__lock_release(l);
    baton__keeper_forget(l->c->keeper, &l->kn);
    if (l->st) l->c->be->lock->destroy(l->c->eng, l->st);
    l->st = NULL;
}

static void lock_member_free(baton__member *m)
{
    baton_lock *l = BATON__CONTAINER(m, baton_lock, cm);
    baton__kept_gone(&l->kn);
    baton__waiter_destroy(&l->waiter);
    free(l);
}

void baton_lock_free(baton_lock *l)
{
    if (!l) return;
    baton__async_forget(l);
    baton__member_free(&l->cm);
}

int baton_lock_info(baton_client *c, const char *name, baton_lockinfo *out)
{
    int rc;
    if (!c || !out) return baton_seterr(BATON_EINVAL, 0, "baton_lock_info: NULL argument");
    if ((rc = baton__name_check(name))) return rc;
    memset(out, 0, sizeof *out);
    out->version = BATON_LOCK_INFO_VERSION;
    out->remaining_ms = out->queue_length = out->readers = out->waiting_writers = -1;
    out->permits = BATON_PERMITS_UNKNOWN;   /* -1 is a real count: baton_semaphore_add can go below 0 */
    out->writer = -1;
    if (!c->be->lock->info)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot describe locks", c->be->info->name);
    return c->be->lock->info(c->eng, name, out);
}

int baton_lock_list(baton_client *c, const char *prefix, baton_name_cb fn, void *payload)
{
    if (!c || !fn) return baton_seterr(BATON_EINVAL, 0, "baton_lock_list: NULL argument");
    if (!prefix) prefix = "";
    if (strlen(prefix) > BATON_MAX_NAME)
        return baton_seterr(BATON_EINVAL, 0, "prefix is %zu bytes; the limit is %d", strlen(prefix), BATON_MAX_NAME);
    if (!c->be->lock->list)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot list its locks", c->be->info->name);
    return c->be->lock->list(c->eng, prefix, fn, payload);
}

int baton_lock_break(baton_client *c, const char *name, uint64_t *fence)
{
    return baton_lock_force_unlock(c, name, fence);
}

int baton_lock_force_unlock(baton_client *c, const char *name, uint64_t *fence)
{
    uint64_t f = 0;
    int rc;
    if (!c) return baton_seterr(BATON_EINVAL, 0, "baton_lock_break: NULL client");
    if ((rc = baton__name_check(name))) return rc;
    if (!c->be->lock->force_unlock)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot break a lock", c->be->info->name);
    rc = c->be->lock->force_unlock(c->eng, name, &f);
    if (fence) *fence = (rc == 0 || rc == BATON_ENOTHELD) ? f : 0;
    return rc;
}
