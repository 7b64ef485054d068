/*
 * The Redis backend's native async table (backend.h v12; docs/async.md):
 * the plain lock's acquire, release and renewal on a single server
 * (redis://, rediss://, redis+unix://), both layouts, through the client's
 * mux (mux.c): every command of every lock goes down one pipelined
 * connection, and no thread waits per lock.
 *
 * Each operation is a small state machine (struct rop) run on the mux's
 * I/O thread alone: replies, timers and kicks all arrive there. It sends
 * the same scripts with the same keys and arguments as the blocking path
 * (redis.c try_once / plain_release / plain_renew), so async and blocking
 * clients, and foreign Redisson / SET NX clients, interoperate.
 *
 * Waiting follows the blocking loop's rules (redis.c wait_loop_msg): a
 * first try; when held, register the unlock channel with the subscriber
 * (sub.c's one-wake registration, as the blocking plain acquire: a release
 * wakes one waiter of the client, told of every attempt, its failure and
 * the grant; one that leaves without the lock passes the wake on) and wait
 * for the confirmation (at most
 * SUB_READY_MS) before the retry that relies on the message; then retry on
 * every wake (an unlock message, a reconnect, a cancel: the waiter's notify
 * hook kicks the I/O thread), at the lock's pttl (+1 ms), every
 * RECHECK_MS, and, in the simple layout (foreign clients release without
 * publishing, unless their keyspace events are sure to wake the waiter:
 * keyspace.c, asked through the mux by ks_listen) or while unsubscribed or
 * failing, with a backoff of 2 ms doubling to 200 ms. An attempt whose answer was lost after it was sent
 * may have been granted: it is given back (owner-checked) before the next
 * attempt or the failure.
 *
 * Everything else (fair, read-write, election / group / queue states,
 * cluster, sentinel, wait_replicas > 0) answers BATON_ENOTSUP: the core's
 * worker pool runs the blocking call.
 *
 * Finding an op from outside (acquire_cancel gets the lock state, the
 * waiter's notify hook an argument): a process-wide table of pending
 * acquires keyed by the lock state, under one mutex (g_mu). Keyed lookups
 * never dereference a state that may have been freed, and an op is freed
 * only after it left the table, so a late notify finds nothing.
 */
#include "rb.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUB_READY_MS 250
#define RECHECK_MS 1000
#define BACKOFF_START_MS 2
#define BACKOFF_MAX_MS 200
#define TAB_SIZE 1024
#define KS_RETRY_NS (1000LL * 1000000) /* a CONFIG GET that got no answer is asked again after */

enum { OP_ACQ, OP_REL, OP_RENEW };
enum { PH_ATTEMPT, PH_DROP, PH_SUBWAIT, PH_PARK, PH_DONE };

struct rasync {
    rmux *mux;
    reng *e;
    struct rop *kick_head;   /* ops kicked from outside; g_mu */
    rmux_cmd ks_cmd;         /* CONFIG GET notify-keyspace-events (I/O thread) */
    int ks_asking;           /* ks_cmd is in flight (I/O thread) */
    int64_t ks_next_ask;     /* after a failed one, not before (I/O thread) */
};

typedef struct rop {
    rmux_cmd cmd;            /* the one command in flight */
    rmux_timer tm;
    struct rop *hnext;       /* g_tab chain; g_mu */
    struct rop *kprev, *knext; /* the engine's kick list; g_mu */
    reng *e;
    void *st;
    baton_acquire_req *req;  /* OP_ACQ */
    const baton_owner *owner; /* OP_REL, OP_RENEW */
    baton_async_done done;
    void *token;
    rsub_entry *se;
    rb_ks_wait *ks;          /* OP_ACQ waiting: the key's release events, where the server sends them */
    int64_t until;           /* OP_ACQ: the end of the confirmation wait; OP_RENEW: its deadline */
    int pending_rc;          /* PH_DROP: then finish with this (0: attempt again) */
    uint32_t lease_ms;
    unsigned gen;            /* the waiter's generation before the last attempt */
    uint16_t backoff_ms;
    uint8_t kind, phase;
    uint8_t busy;            /* a command is in flight */
    uint8_t uncertain;       /* an attempt got no answer after it was sent */
    uint8_t eval;            /* NOSCRIPT seen: send the body */
    uint8_t canceled, kicked; /* g_mu */
} rop;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rop *g_tab[TAB_SIZE];

static size_t slot_of(const void *st) { return ((uintptr_t)st >> 4) % TAB_SIZE; }

/* g_mu held */
static rop *tab_find(const void *st) {
    for (rop *o = g_tab[slot_of(st)]; o; o = o->hnext)
        if (o->st == st) return o;
    return NULL;
}

static void tab_remove(rop *op) {
    for (rop **p = &g_tab[slot_of(op->st)]; *p; p = &(*p)->hnext)
        if (*p == op) {
            *p = op->hnext;
            return;
        }
}

/* g_mu held: OP to its engine's kick list; 1 when the mux must be kicked. */
static int kick_push(rop *op) {
    if (op->kicked) return 0;
    struct rasync *as = op->e->as;
    op->kicked = 1;
    op->kprev = NULL;
    op->knext = as->kick_head;
    if (as->kick_head) as->kick_head->kprev = op;
    as->kick_head = op;
    return 1;
}

static void kick_unlink(rop *op) {
    if (!op->kicked) return;
    if (op->kprev) op->kprev->knext = op->knext;
    else op->e->as->kick_head = op->knext;
    if (op->knext) op->knext->kprev = op->kprev;
    op->kicked = 0;
}

/* The waiter's notify hook (any thread, none of the waiter's locks held). */
static void on_wake(void *st) {
    rmux *m = NULL;
    pthread_mutex_lock(&g_mu);
    rop *op = tab_find(st);
    if (op && kick_push(op)) m = op->e->as->mux;
    pthread_mutex_unlock(&g_mu);
    if (m) rmux_kick(m);
}

/* ---- commands --------------------------------------------------------------- */

static void on_reply(rmux_cmd *c, int rc, redisReply *r, int sent);

/* Submits script SID for OP: EVALSHA, or EVAL once the server said NOSCRIPT. */
static int send_script(rop *op, int sid, int nkeys, int argc, const char *const *args) {
    reng *e = op->e;
    const char *argv[12];
    size_t lens[12];
    char nk[4];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[0] = op->eval ? "EVAL" : "EVALSHA";
    argv[1] = op->eval ? baton__redis_script_body(e, sid) : e->sha[sid];
    argv[2] = nk;
    for (int i = 0; i < argc; i++) argv[3 + i] = args[i];
    for (int i = 0; i < argc + 3; i++) lens[i] = strlen(argv[i]);
    op->cmd.cb = on_reply;
    op->cmd.deadline = baton_now_ns() + (int64_t)e->cfg.io_timeout_ms * 1000000;
    /* busy is the I/O thread's: an acquire's first send, on the caller's
     * thread, finds it set already (a_acquire_start), and on a failure the
     * caller frees the op, which a kick may hold meanwhile (on_kick reads
     * busy under g_mu and leaves a busy op alone) */
    int mine = rmux_on_thread(e->as->mux);
    if (mine) op->busy = 1;
    int rc = rmux_submit(e->as->mux, &op->cmd, argc + 3, argv, lens);
    if (rc && mine) op->busy = 0;
    return rc;
}

static int send_acquire(rop *op) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rlock *l = op->st;
    const baton_acquire_req *req = op->req;
    rb_owner os;
    char lease[24];
    baton__redis_owner(req->owner, &os);
    snprintf(lease, sizeof lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    if (req->waiter) op->gen = baton_waiter_gen(req->waiter);
    op->phase = PH_ATTEMPT;
    rsub_attempt(&op->e->sub, op->se); /* one-wake (sub.c): this waiter owes an attempt no more */
    if (op->e->layout == RB_LAYOUT_REDISSON) {
        const char *a[6] = { l->key, RL_IN(l, RN_FENCE, nb[0]), RL_IN(l, RN_HOLDER, nb[1]), lease, os.field,
                             req->owner->desc };
        return send_script(op, S_ACQ_REDISSON, 3, 6, a);
    }
    const char *a[4] = { l->key, RL_IN(l, RN_FENCE, nb[0]), os.value, lease };
    return send_script(op, S_ACQ_SIMPLE, 2, 4, a);
}

static int send_release(rop *op, const baton_owner *owner) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rlock *l = op->st;
    rb_owner os;
    baton__redis_owner(owner, &os);
    if (op->e->layout == RB_LAYOUT_REDISSON) {
        const char *a[4] = { l->key, RL_IN(l, RN_CHANNEL, nb[0]), RL_IN(l, RN_HOLDER, nb[1]), os.field };
        return send_script(op, S_REL_REDISSON, 3, 4, a);
    }
    const char *a[3] = { l->key, RL_IN(l, RN_CHANNEL, nb[0]), os.value };
    return send_script(op, S_REL_SIMPLE, 2, 3, a);
}

static int send_renew(rop *op) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rlock *l = op->st;
    rb_owner os;
    char lease[24];
    baton__redis_owner(op->owner, &os);
    snprintf(lease, sizeof lease, "%" PRIu32, op->lease_ms ? op->lease_ms : 30000);
    if (op->e->layout == RB_LAYOUT_REDISSON) {
        const char *a[4] = { l->key, RL_IN(l, RN_HOLDER, nb[0]), lease, os.field };
        return send_script(op, S_RENEW_REDISSON, 2, 4, a);
    }
    const char *a[3] = { l->key, os.value, lease };
    return send_script(op, S_RENEW_SIMPLE, 1, 3, a);
}

/* ---- the acquire's state machine (I/O thread) ------------------------------- */

static void finish(rop *op, int rc, uint64_t fence, int64_t sent);

/* The next attempt, giving back an uncertain grant first. */
static void attempt(rop *op) {
    int rc;
    rmux_timer_del(op->e->as->mux, &op->tm);
    if (op->uncertain) {
        op->phase = PH_DROP;
        op->pending_rc = 0;
        rc = send_release(op, op->req->owner);
    } else {
        rc = send_acquire(op);
    }
    if (rc) finish(op, rc, 0, 0);
}

static void finish(rop *op, int rc, uint64_t fence, int64_t sent) {
    reng *e = op->e;
    if (rc && op->uncertain && op->phase != PH_DROP) {
        /* the lost answer may have been a grant: give it back first */
        op->phase = PH_DROP;
        op->pending_rc = rc;
        rmux_timer_del(e->as->mux, &op->tm);
        if (!send_release(op, op->req->owner)) return;
    }
    rmux_timer_del(e->as->mux, &op->tm);
    if (!rc) rsub_granted(&e->sub, op->se);      /* else the unregister passes a wake on */
    if (op->se) rsub_unregister(&e->sub, op->se);
    if (op->ks) {
        baton__redis_ks_leave(op->ks);
        free(op->ks);
        op->ks = NULL;
    }
    if (op->req->waiter) baton_waiter_set_notify(op->req->waiter, NULL, NULL);
    pthread_mutex_lock(&g_mu);
    tab_remove(op);
    kick_unlink(op);
    pthread_mutex_unlock(&g_mu);
    if (!rc) baton__redis_watch(e); /* as the blocking grant: a restart re-checks what we hold */
    op->phase = PH_DONE;
    op->done(op->token, rc, fence, sent);
    free(op);
}

static int canceled(rop *op) {
    pthread_mutex_lock(&g_mu);
    int c = op->canceled;
    pthread_mutex_unlock(&g_mu);
    return c || (op->req->waiter && baton_waiter_canceled(op->req->waiter));
}

static unsigned jitter(void) {
    static _Thread_local unsigned x;
    if (!x) x = (unsigned)baton_now_ns() ^ 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

static void ks_listen(rop *op);

/* The configuration's answer: the waits parked before it listen now (they
 * are the first of this engine, or the first in 10 s). Ops are freed on
 * this thread alone, so the pointers taken under g_mu stay good. */
static void ks_answer(rmux_cmd *c, int rc, redisReply *r, int sent) {
    struct rasync *as = (struct rasync *)((char *)c - offsetof(struct rasync, ks_cmd));
    reng *e = as->e;
    (void)sent;
    as->ks_asking = 0;
    if (rc) as->ks_next_ask = baton_now_ns() + KS_RETRY_NS; /* a broken link: not at every park */
    baton__redis_ks_config_answer(e, rc ? NULL : r);
    if (r) rreply_free(r);
    int ask = 0, mode = baton__redis_ks_mode_cached(e, &ask);
    if (mode != RKS_K && mode != RKS_E && mode != RKS_UNKNOWN) return;
    for (size_t i = 0; i < TAB_SIZE; i++) {
        rop *ops[16];
        size_t n = 0;
        pthread_mutex_lock(&g_mu);
        /* se and ks are this thread's; phase is read only once se is set,
         * i.e. after the first answer (the caller's send_acquire wrote it
         * before the command was queued) */
        for (rop *o = g_tab[i]; o && n < 16; o = o->hnext) /* more: at their next park */
            if (o->e == e && o->se && !o->ks && o->phase == PH_PARK) ops[n++] = o;
        pthread_mutex_unlock(&g_mu);
        for (size_t k = 0; k < n; k++) ks_listen(ops[k]);
    }
}

/* A waiter listens for its key's release events too (keyspace.c), as the
 * blocking wait does: redis-py, a DEL by hand or an expiry release without
 * publishing. The server's configuration is asked through the mux, never
 * waited for: until its answer, waits rely on their re-checks, and each
 * wait registers at its next park after it. */
static void ks_listen(rop *op) {
    reng *e = op->e;
    struct rasync *as = e->as;
    int ask = 0, mode = baton__redis_ks_mode_cached(e, &ask);
    if (ask && !as->ks_asking && baton_now_ns() >= as->ks_next_ask) {
        static const char *const argv[3] = { "CONFIG", "GET", "notify-keyspace-events" };
        static const size_t lens[3] = { 6, 3, 22 };
        as->ks_cmd.cb = ks_answer;
        as->ks_cmd.deadline = baton_now_ns() + (int64_t)e->cfg.io_timeout_ms * 1000000;
        as->ks_asking = rmux_submit(as->mux, &as->ks_cmd, 3, (const char **)argv, lens) == 0;
    }
    if (mode != RKS_K && mode != RKS_E && mode != RKS_UNKNOWN) return;
    rb_ks_wait *kw = malloc(sizeof *kw);
    if (!kw) return; /* the re-checks remain */
    rlock *l = op->st;
    baton__redis_ks_enter_mode(e, l->key, RL_CHANNEL(l), op->req->waiter, mode, kw);
    if (kw->se[0] || kw->se[1]) op->ks = kw;
    else free(kw);
}

/* Held (HINT: the key's pttl, -1 none) or failed (ERR): when to try again. */
static void park(rop *op, int64_t hint, int err) {
    reng *e = op->e;
    int64_t now = baton_now_ns(), until = op->req->deadline_ns;
    if (now >= until) {
        finish(op, err ? err : baton_seterr(BATON_ETIMEDOUT, 0, "redis: the wait ran out"), 0, 0);
        return;
    }
    int ready = op->se && rsub_ready(&e->sub, op->se);
    if (op->se && !op->ks) ks_listen(op);
    if (!err && hint >= 0 && hint < 86400000) until = rmin64(until, now + hint * 1000000 + 1000000);
    until = rmin64(until, now + (int64_t)RECHECK_MS * 1000000);
    /* the simple layout's backoff is there for silent foreign releases:
     * not needed while their keyspace events are sure to wake us */
    if (err || !ready || (e->layout == RB_LAYOUT_SIMPLE && !baton__redis_ks_covered_by(op->ks))) {
        int64_t ns = (int64_t)op->backoff_ms * 1000000;
        until = rmin64(until, now + ns / 2 + (int64_t)(jitter() % (unsigned)(ns / 2 + 1)));
        op->backoff_ms = op->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : op->backoff_ms * 2;
    }
    op->phase = PH_PARK;
    /* a wake while the attempt was in flight: its answer may be stale */
    if (!err && op->req->waiter && baton_waiter_gen(op->req->waiter) != op->gen) {
        attempt(op);
        return;
    }
    if (rmux_timer_set(e->as->mux, &op->tm, until)) finish(op, BATON_ENOMEM, 0, 0);
}

/* The first "held": subscribe, and wait for the confirmation before the
 * attempt that relies on the unlock message. */
static void subscribe(rop *op) {
    reng *e = op->e;
    rlock *l = op->st;
    /* one-wake, as the blocking plain acquire: a release wakes one waiter
     * of this client, and one that leaves without the lock passes it on */
    if (rsub_register_one(&e->sub, RL_CHANNEL(l), op->req->waiter, &op->se) != 0) {
        op->se = NULL; /* degrade to the backoff */
        park(op, -1, 0);
        return;
    }
    op->phase = PH_SUBWAIT;
    op->until = rmin64(op->req->deadline_ns, baton_now_ns() + (int64_t)SUB_READY_MS * 1000000);
    if (rsub_ready(&e->sub, op->se)) attempt(op);
    else if (rmux_timer_set(e->as->mux, &op->tm, op->until)) finish(op, BATON_ENOMEM, 0, 0);
}

static void acquire_reply(rop *op, int rc, redisReply *r, int sent) {
    long long flag = 0, n = 0;
    if (rc) {
        if (sent) op->uncertain = 1;
        if (rc != BATON_EUNAVAILABLE || op->req->deadline_ns == 0 || canceled(op))
            finish(op, rc, 0, 0);
        else
            park(op, -1, rc);
        return;
    }
    if (baton__redis_pair(r, &flag, &n) || (flag == 1 && n <= 0)) {
        rreply_free(r);
        finish(op, baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply to the acquire script"), 0, 0);
        return;
    }
    rreply_free(r);
    if (flag == 1) {
        finish(op, 0, (uint64_t)n, op->cmd.sent_ns);
        return;
    }
    int64_t hint = n >= 0 ? n : (n == -2 ? 0 : -1);
    if (op->req->deadline_ns == 0) finish(op, baton_seterr(BATON_ELOCKED, 0, "redis: held by another owner"), 0, 0);
    else if (canceled(op)) finish(op, BATON_ECANCELED, 0, 0);
    else if (!op->se) subscribe(op);
    else {
        rsub_attempt_failed(&op->e->sub, op->se); /* a message meanwhile woke us again: park attempts at once */
        park(op, hint, 0);
    }
}

/* The owner-checked give-back of an uncertain grant answered. */
static void drop_reply(rop *op, int rc, redisReply *r) {
    if (r) rreply_free(r);
    if (rc != BATON_EUNAVAILABLE) op->uncertain = 0;
    if (op->pending_rc) finish(op, op->pending_rc, 0, 0);
    else if (rc) park(op, -1, rc);
    else if (canceled(op)) finish(op, BATON_ECANCELED, 0, 0);
    else if (send_acquire(op)) finish(op, BATON_EUNAVAILABLE, 0, 0);
}

/* Release and renewal answers: 1 = done, 0 = not ours. */
static void simple_reply(rop *op, int rc, redisReply *r) {
    if (!rc && r->type != REDIS_REPLY_INTEGER) rc = baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply");
    else if (!rc && r->integer != 1) rc = baton_seterr(BATON_ELOST, 0, "redis: no longer held by this owner");
    if (r) rreply_free(r);
    /* a renewal answered after its deadline is no renewal the core can use */
    if (!rc && op->kind == OP_RENEW && op->until > 0 && baton_now_ns() >= op->until)
        rc = baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: the renewal was answered past its deadline");
    op->done(op->token, rc, 0, 0);
    free(op);
}

static void on_reply(rmux_cmd *c, int rc, redisReply *r, int sent) {
    rop *op = (rop *)c;
    op->busy = 0;
    if (!rc && r->type == REDIS_REPLY_ERROR) {
        if (r->str && !strncmp(r->str, "NOSCRIPT", 8) && !op->eval) {
            /* SCRIPT FLUSH, a restart, a new server: send the body once */
            rreply_free(r);
            op->eval = 1;
            int again = op->kind == OP_RENEW ? send_renew(op)
                      : op->kind == OP_REL || op->phase == PH_DROP ? send_release(op, op->kind == OP_REL ? op->owner
                                                                                                       : op->req->owner)
                      : send_acquire(op);
            if (!again) return;
            rc = again;
            r = NULL;
        } else {
            rc = rreply_error(r, "script failed");
            rreply_free(r);
            r = NULL;
        }
    }
    if (op->kind != OP_ACQ) simple_reply(op, rc, r);
    else if (op->phase == PH_DROP) drop_reply(op, rc, r);
    else if (rc && !sent && rc != BATON_EUNAVAILABLE) finish(op, rc, 0, 0);
    else acquire_reply(op, rc, r, sent);
}

static void on_timer(rmux_timer *t) {
    rop *op = (rop *)((char *)t - offsetof(rop, tm));
    if (op->busy) return;
    if (op->phase == PH_SUBWAIT && baton_now_ns() < op->req->deadline_ns && !rsub_ready(&op->e->sub, op->se) &&
        baton_now_ns() < op->until)
        return;
    if (baton_now_ns() >= op->req->deadline_ns) finish(op, baton_seterr(BATON_ETIMEDOUT, 0, "redis: the wait ran out"), 0, 0);
    else attempt(op);
}

/* The mux's kick: every op woken from outside since the last one. */
static void on_kick(void *arg) {
    struct rasync *as = arg;
    size_t n = 0;
    pthread_mutex_lock(&g_mu);
    for (rop *o = as->kick_head; o; o = o->knext) n++;
    pthread_mutex_unlock(&g_mu);
    /* One at a time off the list, under g_mu: a wake from another thread
     * may push an op again meanwhile (its links are the list's), and N
     * bounds the pass so ops kicked again wait for the next one. */
    while (n--) {
        pthread_mutex_lock(&g_mu);
        rop *op = as->kick_head;
        int busy = 0;
        if (op) kick_unlink(op), busy = op->busy;
        pthread_mutex_unlock(&g_mu);
        if (!op) break;
        /* its answer decides (park reads the waiter's generation); and an
         * op busy with its first send may be freed by a_acquire_start's
         * failure path as soon as g_mu is free: not to be touched. (Not
         * busy: its first send was answered, so only this thread frees it.) */
        if (busy) continue;
        if (canceled(op)) finish(op, BATON_ECANCELED, 0, 0);
        else if (op->phase == PH_SUBWAIT && !rsub_ready(&op->e->sub, op->se)) continue;
        else attempt(op);
    }
}

/* ---- the table ----------------------------------------------------------------- */

static int get_async(reng *e, struct rasync **out) {
    int rc = 0;
    pthread_mutex_lock(&g_mu);
    if (!e->as) {
        struct rasync *as = calloc(1, sizeof *as);
        if (!as) rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        else if ((rc = rmux_new(&as->mux, &e->cfg, on_kick, as))) free(as);
        else as->e = e, e->as = as;
    }
    *out = e->as;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Native for the plain lock on one server without WAIT. */
static int native_for(reng *e, void *st) {
    if (*(const int *)st != RK_PLAIN || e->cfg.cluster || e->cfg.sentinel || e->wait_replicas > 0)
        return baton_seterr(BATON_ENOTSUP, 0, "redis: not native for this lock");
    return 0;
}

static rop *op_new(reng *e, void *st, int kind, baton_async_done done, void *token) {
    rop *op = calloc(1, sizeof *op);
    if (!op) return NULL;
    op->e = e;
    op->st = st;
    op->kind = (uint8_t)kind;
    op->done = done;
    op->token = token;
    op->backoff_ms = BACKOFF_START_MS;
    op->tm.fn = on_timer;
    return op;
}

static int a_acquire_start(void *eng, void *st, baton_acquire_req *req, baton_async_done done, void *token) {
    reng *e = eng;
    struct rasync *as;
    int rc;
    if ((rc = native_for(e, st))) return rc;
    if (req->fair || (req->deadline_ns != 0 && !req->waiter))
        return baton_seterr(BATON_ENOTSUP, 0, "redis: not native for this acquire");
    if ((rc = get_async(e, &as))) return rc;
    rop *op = op_new(e, st, OP_ACQ, done, token);
    if (!op) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    op->req = req;
    op->busy = 1; /* until the first attempt's answer: a kick before it has nothing to do */
    pthread_mutex_lock(&g_mu);
    if (tab_find(st)) rc = baton_seterr(BATON_EINVAL, 0, "redis: an acquire of this lock is in flight");
    else {
        op->hnext = g_tab[slot_of(st)];
        g_tab[slot_of(st)] = op;
    }
    pthread_mutex_unlock(&g_mu);
    if (rc) {
        free(op);
        return rc;
    }
    if (req->waiter) baton_waiter_set_notify(req->waiter, on_wake, st);
    if ((rc = send_acquire(op))) {
        if (req->waiter) baton_waiter_set_notify(req->waiter, NULL, NULL);
        pthread_mutex_lock(&g_mu);
        tab_remove(op);
        kick_unlink(op);
        pthread_mutex_unlock(&g_mu);
        free(op);
    }
    return rc;
}

static void a_acquire_cancel(void *eng, void *st) {
    reng *e = eng;
    rmux *m = NULL;
    pthread_mutex_lock(&g_mu);
    rop *op = tab_find(st);
    if (op && op->e == e) {
        op->canceled = 1;
        if (kick_push(op)) m = e->as->mux;
    }
    pthread_mutex_unlock(&g_mu);
    if (m) rmux_kick(m);
}

static int a_release_start(void *eng, void *st, const baton_owner *owner, baton_async_done done, void *token) {
    reng *e = eng;
    struct rasync *as;
    int rc;
    if ((rc = native_for(e, st)) || (rc = get_async(e, &as))) return rc;
    rop *op = op_new(e, st, OP_REL, done, token);
    if (!op) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    op->owner = owner;
    if ((rc = send_release(op, owner))) free(op);
    return rc;
}

/* A renewal ends by the io timeout (the mux's deadline: no answer breaks
 * the connection) and is answered BATON_EUNAVAILABLE when its answer came
 * past DEADLINE_NS (not by a timer of its own: a renewal's deadline is a
 * lease's, far beyond the io timeout in practice). Past already: refused. */
static int a_renew_start(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns,
                         baton_async_done done, void *token) {
    reng *e = eng;
    struct rasync *as;
    int rc;
    if ((rc = native_for(e, st)) || (rc = get_async(e, &as))) return rc;
    if (deadline_ns > 0 && baton_now_ns() >= deadline_ns)
        return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: renewal past its deadline");
    rop *op = op_new(e, st, OP_RENEW, done, token);
    if (!op) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    op->owner = owner;
    op->lease_ms = lease_ms;
    op->until = deadline_ns;
    if ((rc = send_renew(op))) free(op);
    return rc;
}

const baton_async_methods baton__redis_async_methods = {
    .acquire_start = a_acquire_start,
    .acquire_cancel = a_acquire_cancel,
    .release_start = a_release_start,
    .renew_start = a_renew_start,
};

void baton__redis_async_close(reng *e) {
    if (!e->as) return;
    rmux_free(e->as->mux);
    free(e->as);
    e->as = NULL;
}

void baton__redis_async_stats(reng *e, uint64_t *opened, int *open_now) {
    if (opened) *opened = 0;
    if (open_now) *open_now = 0;
    if (e->as) rmux_stats(e->as->mux, opened, open_now);
}
