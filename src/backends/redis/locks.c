/*
 * The fair lock and the read-write lock of the Redis backend (layouts in
 * docs/redis-layout.md, scripts in scripts.h).
 *
 * Fair lock: Redisson's RedissonFairLock keys. A waiter queues once with a
 * ticket (the fence it will hold), refreshes its queue entry's server-time
 * deadline at least every lease/3, and is woken only by a message on its own
 * channel: the release script hands the lock to the head entry itself and
 * publishes its ticket, which the waiter takes as the grant. A waiter that
 * gives up leaves the queue (passing the lock on if it was handed over
 * meanwhile); one that dies is dropped when its entry's deadline passes.
 *
 * Read-write lock: Redisson's RReadWriteLock hash plus a zset of waiting
 * writers; while a writer waits, new readers wait too.
 */
#include "rb.h"
#include "scripts.h"

#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps the thread's last error across a cleanup call that may overwrite it. */
typedef struct {
    int code;
    long native;
    char msg[512];
} saved_err;

static void err_save(saved_err *s, int code) {
    const baton_error *le = baton_error_last();
    s->code = code;
    s->native = le->native;
    snprintf(s->msg, sizeof s->msg, "%s", le->message ? le->message : baton_strerror(code));
}

static int err_restore(const saved_err *s) {
    return baton_seterr(s->code, s->native, "%s", s->msg);
}

/* Runs a granting script (reply {1, fence} | {0, ms}) on one connection and,
 * after a grant, WAITs for replicas there. Too few: UNDO(e, l, owner) runs
 * and RB_EFINAL is returned with the message set. */
typedef int (*undo_fn)(reng *e, rlock *l, const baton_owner *owner);

static int grant_script3(reng *e, rlock *l, int sid, int nkeys, int argc, const char *const *argv,
                         baton_acquire_req *req, undo_fn undo, int *granted, int64_t *hint, long long *third) {
    int64_t dl = baton__redis_io_deadline(e), sent = 0;
    redisReply *r = NULL;
    rconn *c = NULL;
    *granted = 0;
    *hint = -1;
    int rc = rpool_get(&e->pool, &c, dl);
    if (rc) return rc;
    rc = baton__redis_script_on(e, c, sid, nkeys, argc, argv, NULL, dl, &r, &sent);
    long long flag = 0, n = 0;
    if (!rc && third && r->type == REDIS_REPLY_ARRAY && r->elements == 3) {
        /* {0, hint, ticket} or {1, fence, pttl} */
        if (r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER ||
            r->element[2]->type != REDIS_REPLY_INTEGER || (r->element[0]->integer != 0 && r->element[0]->integer != 1))
            rc = baton__redis_bad_reply(r, "a lock script"), r = NULL;
        else
            flag = r->element[0]->integer, n = r->element[1]->integer, *third = r->element[2]->integer;
        if (!rc && flag == 1 && n <= 0) rc = baton__redis_bad_reply(r, "a lock script (fence)"), r = NULL;
    } else if (!rc && baton__redis_pair(r, &flag, &n)) {
        rc = baton__redis_bad_reply(r, "a lock script"), r = NULL;
    } else if (!rc && flag == 1 && n <= 0) {
        rc = baton__redis_bad_reply(r, "a lock script (fence)"), r = NULL;
    }
    if (!rc && flag == 1 && baton__redis_wait_replicas(e, c, "acquire", INT64_MAX)) rc = RB_EFINAL;
    rpool_put(&e->pool, c);
    if (r) rreply_free(r);
    if (rc == RB_EFINAL) {
        saved_err s;
        err_save(&s, BATON_EUNAVAILABLE);
        undo(e, l, req->owner);
        baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the lock was released", s.msg);
        return RB_EFINAL;
    }
    if (rc) return rc;
    if (flag == 1) {
        *granted = 1;
        req->fence = (uint64_t)n;
        req->sent_ns = sent;
    } else {
        *hint = n >= 0 ? n : (n == -2 ? 0 : -1);
    }
    return 0;
}

static int grant_script(reng *e, rlock *l, int sid, int nkeys, int argc, const char *const *argv,
                        baton_acquire_req *req, undo_fn undo, int *granted, int64_t *hint) {
    return grant_script3(e, l, sid, nkeys, argc, argv, req, undo, granted, hint, NULL);
}

static int int_script(reng *e, int sid, int nkeys, int argc, const char *const *argv, int64_t deadline,
                      long long *out, const char *what) {
    redisReply *r = NULL;
    int rc = baton__redis_script(e, sid, nkeys, argc, argv, NULL, deadline, &r, NULL);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return baton__redis_bad_reply(r, what);
    *out = r->integer;
    rreply_free(r);
    return 0;
}

/* Queue entries and writer intents live for the lock's lease (at least
 * QLEASE_MIN_MS, so a tiny lease does not make waiters drop out between two
 * refreshes) and are refreshed every third of it while their owner waits. */
#define QLEASE_MIN_MS 500

static uint32_t qlease_of(uint32_t lease_ms) {
    uint32_t q = lease_ms ? lease_ms : 30000;
    return q < QLEASE_MIN_MS ? QLEASE_MIN_MS : q;
}

static int64_t refresh_of(uint32_t lease_ms) { return qlease_of(lease_ms) / 3; }

/* ---- fair lock -------------------------------------------------------------- */

typedef struct {
    reng *e;
    rlock *l;
    baton_acquire_req *req;
    rb_owner os;
    char lease[24];
    char qlease[24];
    char ticket[24];     /* our place in the queue = the fence we will hold; "0": none */
    int64_t queued_at;   /* when the last attempt that was answered "not granted" was sent */
    int uncertain;       /* an attempt failed after sending: our entry may differ from ticket */
} fair_ctx;

int baton__redis_fair_release(reng *e, rlock *l, const baton_owner *owner) {
    rb_owner os;
    baton__redis_owner(owner, &os);
    /* the timeout zset too: dead waiters are purged before the handoff */
    const char *argv[5] = { l->key, RL_QUEUE(l), RL_TIMEOUTS(l), os.field, RL_CHANNEL(l) };
    long long v = 0;
    int rc = int_script(e, S_FAIR_REL, 3, 5, argv, baton__redis_io_deadline(e), &v, "the fair release script");
    if (rc) return rc;
    if (v != 1) return baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer held by this owner", l->key);
    return 0;
}

static int fair_undo(reng *e, rlock *l, const baton_owner *owner) { return baton__redis_fair_release(e, l, owner); }

static int fair_once(fair_ctx *x, int wait, int *granted, int64_t *hint) {
    const char *argv[11] = {
        x->l->key, RL_QUEUE(x->l), RL_TIMEOUTS(x->l), RL_FENCE(x->l),
        x->lease, x->os.field, x->req->owner->desc, x->qlease, RL_CHANNEL(x->l), wait ? "wait" : "try", x->ticket,
    };
    long long third = LLONG_MIN; /* stays so for a two-element reply */
    int64_t t = baton_now_ns();
    int rc = grant_script3(x->e, x->l, S_FAIR_ACQ, 4, 11, argv, x->req, fair_undo, granted, hint, &third);
    if (!rc && *granted && third != LLONG_MIN) {
        /* handed over before this attempt: the lease runs from then, and
         * `third` is the PTTL left of it */
        int64_t lease_ms = x->req->lease_ms ? x->req->lease_ms : 30000;
        int64_t left = third > 0 ? (third < lease_ms ? third : lease_ms) : 0;
        x->req->sent_ns -= (lease_ms - left) * 1000000;
    }
    if (!rc && !*granted && wait) {
        if (third <= 0) return baton_seterr(BATON_EPROTO, 0, "redis: the fair acquire script queued without a ticket");
        snprintf(x->ticket, sizeof x->ticket, "%lld", third);
        x->queued_at = t;
    }
    if (rc && rc != RB_EFINAL) x->uncertain = 1;
    return rc;
}

static int fair_attempt(void *p, int *done, int64_t *hint) {
    int granted = 0;
    int rc = fair_once(p, 1, &granted, hint);
    if (granted || rc == RB_EFINAL) *done = 1;
    return rc == RB_EFINAL ? BATON_EUNAVAILABLE : rc;
}

/* The release script handed us the lock and published our ticket. The
 * lease was set when the releaser's script ran, at some moment after the
 * server answered our last "not granted" attempt, and the message may have
 * been delayed (network, a paused process) by any amount: the only safe
 * start is that attempt's send time. If too little of the lease is left
 * counted from there, the message is not taken: an attempt follows, which
 * returns the lease actually left. With replica acks required the grant
 * also goes through an attempt (WAIT must run on the connection that saw it). */
static int fair_msg(void *p, const char *payload) {
    fair_ctx *x = p;
    if (x->e->wait_replicas > 0 || !strcmp(x->ticket, "0") || strcmp(payload, x->ticket) != 0) return 0;
    int64_t lease_ns = (int64_t)(x->req->lease_ms ? x->req->lease_ms : 30000) * 1000000;
    if (x->queued_at + lease_ns - baton_now_ns() < lease_ns / 3) return 0;
    x->req->fence = strtoull(x->ticket, NULL, 10);
    x->req->sent_ns = x->queued_at;
    return 1;
}

static void fair_leave(fair_ctx *x) {
    /* "0": our entry is not known for sure (an attempt failed after it was
     * sent): the script removes every entry of our field */
    const char *argv[8] = { x->l->key, RL_QUEUE(x->l), RL_TIMEOUTS(x->l), x->os.field, x->uncertain ? "0" : x->ticket,
                            x->lease, x->req->owner->desc, RL_CHANNEL(x->l) };
    long long v;
    int64_t dl = baton__redis_io_deadline(x->e);
    if (int_script(x->e, S_FAIR_LEAVE, 3, 8, argv, dl, &v, "the fair leave script") == BATON_EUNAVAILABLE)
        int_script(x->e, S_FAIR_LEAVE, 3, 8, argv, dl, &v, "the fair leave script"); /* one retry; else the entry expires */
}

/* Copies S into OUT (room for 2 * strlen(S) + 1) with Redis glob characters escaped. */
static void glob_escape(char *out, const char *s) {
    for (; *s; s++) {
        if (strchr("*?[]\\", *s)) *out++ = '\\';
        *out++ = *s;
    }
    *out = 0;
}

int baton__redis_fair_acquire(reng *e, rlock *l, baton_acquire_req *req) {
    fair_ctx x;
    memset(&x, 0, sizeof x);
    x.e = e;
    x.l = l;
    x.req = req;
    baton__redis_owner(req->owner, &x.os);
    snprintf(x.lease, sizeof x.lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    snprintf(x.qlease, sizeof x.qlease, "%" PRIu32, qlease_of(req->lease_ms));
    snprintf(x.ticket, sizeof x.ticket, "0");
    int waiting = req->deadline_ns != 0;
    if (waiting && !req->waiter) return baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");
    if (strchr(req->owner->desc, '|'))
        return baton_seterr(BATON_EINVAL, 0, "redis: a fair waiter's description cannot contain '|'");

    /* Our own channels, "<prefix>:<queue entry>": the release script (and a
     * Redisson unlock) signals the head entry only. The entry carries our
     * ticket, new for each wait, so we listen on the glob of all our entries
     * ("<prefix>:<field>|*", glob characters escaped): one subscription per
     * thread and lock, which lingers between waits. */
    const char *lchan = RL_CHANNEL(l);
    size_t n = 2 * (strlen(lchan) + strlen(x.os.field)) + 4;
    char *chan = malloc(n);
    if (!chan) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    glob_escape(chan, lchan);
    strcat(chan, ":");
    glob_escape(chan + strlen(chan), x.os.field);
    strcat(chan, "|*");
    rsub_entry *pre = waiting ? baton__redis_presub(e, chan, 1, req->waiter) : NULL;
    unsigned gen = pre ? baton_waiter_gen(req->waiter) : 0;

    /* The first attempt already takes a place in the queue. */
    int granted = 0;
    int64_t hint = -1;
    int64_t ab = baton__redis_attempt_enter(e);
    int rc = fair_once(&x, waiting, &granted, &hint);
    baton__redis_bound_leave(ab);
    if (rc == RB_EFINAL) rc = BATON_EUNAVAILABLE, granted = 1; /* undone and final: no leave */
    if (!rc && !granted && !waiting)
        rc = baton_seterr(BATON_ELOCKED, 0, "redis: '%s' is held or has waiters queued", l->key);
    if (!rc && !granted) {
        char what[80];
        snprintf(what, sizeof what, "fair acquire of '%.40s'", l->key);
        rc = baton__redis_wait_loop_msg(e, chan, req->waiter, req->deadline_ns, refresh_of(req->lease_ms), RB_WAIT_PATTERN,
                                        fair_attempt, fair_msg, &x, what, pre, hint, gen);
        pre = NULL; /* the loop unregistered it */
        granted = !rc;
    }
    if (pre) baton__redis_presub_drop(e, pre);
    free(chan);
    if (rc && waiting && !granted) {
        saved_err s;
        err_save(&s, rc);
        fair_leave(&x);
        return err_restore(&s);
    }
    return rc;
}

/* ---- read-write lock --------------------------------------------------------- */

typedef struct {
    reng *e;
    rlock *l;
    baton_acquire_req *req;
    rb_owner os;
    char lease[24];
    char qlease[24];
    int uncertain;       /* an attempt failed, maybe after the server granted it */
} rw_ctx;

int baton__redis_rw_release(reng *e, rlock *l, const baton_owner *owner) {
    rb_owner os;
    baton__redis_owner(owner, &os);
    long long v = 0;
    int rc;
    if (l->kind == RK_READ) {
        const char *argv[4] = { l->key, RL_TPREFIX(l), os.field, RL_CHANNEL(l) };
        rc = int_script(e, S_RW_READ_REL, 2, 4, argv, baton__redis_io_deadline(e), &v, "the read release script");
    } else {
        const char *argv[4] = { l->key, RL_HOLDER(l), os.field, RL_CHANNEL(l) };
        rc = int_script(e, S_RW_WRITE_REL, 2, 4, argv, baton__redis_io_deadline(e), &v, "the write release script");
    }
    if (rc) return rc;
    if (v != 1)
        return baton_seterr(BATON_ELOST, 0, "redis: the %s side of '%s' is no longer held by this owner",
                            l->kind == RK_READ ? "read" : "write", l->key);
    return 0;
}

int baton__redis_rw_renew(reng *e, rlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline) {
    rb_owner os;
    baton__redis_owner(owner, &os);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms ? lease_ms : 30000);
    int64_t dl = baton__redis_io_deadline(e);
    if (deadline > 0) dl = rmin64(dl, deadline);
    if (baton_now_ns() >= dl)
        return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: renewal of '%s' is past its deadline", l->key);
    int rc, renewed = 0;
    if (l->kind == RK_READ) {
        const char *argv[4] = { l->key, RL_TPREFIX(l), lease, os.field };
        rc = baton__redis_renew_script(e, S_RW_READ_RENEW, 2, 4, argv, dl, &renewed, "the read renewal script");
    } else {
        const char *argv[4] = { l->key, RL_HOLDER(l), lease, os.field };
        rc = baton__redis_renew_script(e, S_RW_WRITE_RENEW, 2, 4, argv, dl, &renewed, "the write renewal script");
    }
    if (rc) return rc;
    if (!renewed)
        return baton_seterr(BATON_ELOST, 0, "redis: the %s side of '%s' is no longer held by this owner",
                            l->kind == RK_READ ? "read" : "write", l->key);
    return 0;
}

static int rw_undo(reng *e, rlock *l, const baton_owner *owner) { return baton__redis_rw_release(e, l, owner); }

/* A grant nobody heard of is given back (owner-checked) before the next
 * attempt and when the acquire gives up. */
static void rw_drop_uncertain(rw_ctx *x) {
    if (!x->uncertain) return;
    saved_err s;
    err_save(&s, baton_error_last()->code);
    if (baton__redis_rw_release(x->e, x->l, x->req->owner) != BATON_EUNAVAILABLE) x->uncertain = 0;
    err_restore(&s);
}

static int rw_once(rw_ctx *x, int wait, int *granted, int64_t *hint) {
    rlock *l = x->l;
    int rc;
    rw_drop_uncertain(x);
    if (l->kind == RK_READ) {
        const char *argv[6] = { l->key, RL_TPREFIX(l), RL_FENCE(l), RL_TIMEOUTS(l), x->lease, x->os.field };
        rc = grant_script(x->e, l, S_RW_READ_ACQ, 4, 6, argv, x->req, rw_undo, granted, hint);
    } else {
        const char *argv[10] = {
            l->key, RL_TPREFIX(l), RL_FENCE(l), RL_TIMEOUTS(l), RL_HOLDER(l),
            x->lease, x->os.field, x->req->owner->desc, wait ? "wait" : "try", x->qlease,
        };
        rc = grant_script(x->e, l, S_RW_WRITE_ACQ, 5, 10, argv, x->req, rw_undo, granted, hint);
    }
    if (rc == BATON_EUNAVAILABLE) x->uncertain = 1;
    return rc;
}

static int rw_attempt(void *p, int *done, int64_t *hint) {
    int granted = 0;
    int rc = rw_once(p, 1, &granted, hint);
    if (granted || rc == RB_EFINAL) *done = 1;
    return rc == RB_EFINAL ? BATON_EUNAVAILABLE : rc;
}

/* A waiting writer that gives up withdraws its intent (else it expires). */
static void rw_leave(rw_ctx *x) {
    const char *argv[3] = { RL_TIMEOUTS(x->l), x->os.field, RL_CHANNEL(x->l) };
    long long v;
    int_script(x->e, S_RW_LEAVE, 1, 3, argv, baton__redis_io_deadline(x->e), &v, "the writer leave script");
}

int baton__redis_rw_acquire(reng *e, rlock *l, baton_acquire_req *req) {
    rw_ctx x;
    memset(&x, 0, sizeof x);
    x.e = e;
    x.l = l;
    x.req = req;
    baton__redis_owner(req->owner, &x.os);
    snprintf(x.lease, sizeof x.lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    snprintf(x.qlease, sizeof x.qlease, "%" PRIu32, qlease_of(req->lease_ms));
    int waiting = req->deadline_ns != 0, writer = l->kind == RK_WRITE;
    if (waiting && !req->waiter) return baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");

    int granted = 0;
    int64_t hint = -1;
    int64_t ab = baton__redis_attempt_enter(e);
    int rc = rw_once(&x, waiting, &granted, &hint);
    baton__redis_bound_leave(ab);
    if (rc == RB_EFINAL) return BATON_EUNAVAILABLE;
    if (rc && !waiting) {
        rw_drop_uncertain(&x);
        return rc;
    }
    if (!rc && !granted && !waiting)
        return baton_seterr(BATON_ELOCKED, 0, "redis: the %s side of '%s' is not available",
                            writer ? "write" : "read", l->key);
    if (!rc && !granted) {
        char what[80];
        snprintf(what, sizeof what, "%s acquire of '%.40s'", writer ? "write" : "read", l->key);
        rc = baton__redis_wait_loop(e, RL_CHANNEL(l), req->waiter, req->deadline_ns,
                                    writer ? refresh_of(req->lease_ms) : 0, 0, rw_attempt, &x, what);
    }
    if (rc) rw_drop_uncertain(&x);
    if (rc && writer && waiting) {
        saved_err s;
        err_save(&s, rc);
        rw_leave(&x);
        return err_restore(&s);
    }
    return rc;
}

int baton__redis_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr) {
    reng *e = eng;
    (void)opts;
    *rd = *wr = NULL;
    rlock *r = malloc(sizeof *r), *w = malloc(sizeof *w);
    int rc = (!r || !w) ? baton_seterr(BATON_ENOMEM, 0, "redis: out of memory") : 0;
    if (!rc && (rc = baton__redis_lock_init(e, name, RK_READ, r)) == 0) {
        if ((rc = baton__redis_lock_init(e, name, RK_WRITE, w)) != 0) baton__redis_lock_clear(r);
    }
    if (rc) {
        free(r);
        free(w);
        return rc;
    }
    *rd = r;
    *wr = w;
    return 0;
}
