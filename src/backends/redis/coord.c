/*
 * Group membership and work queues on Redis (baton_group_*, baton_queue_*;
 * layouts in docs/redis-layout.md, scripts in scripts_coord.h).
 *
 * A group member and a queue taker are lock states (kinds RK_MEMBER and
 * RK_TAKER, dispatched by table.c): the core renews them like locks, so a
 * member or a taken item lives on a lease kept in a zset scored by the
 * server's clock, and a holder that dies stops renewing and is dropped by
 * the next script that touches the group or queue (every script first
 * drops members, or puts back items, whose deadline passed). Watchers and
 * waiting takers are woken by PUBLISH on the object's channel and re-check
 * on their own at the next deadline in the zset and at least every 2 s
 * (the waiting loop's bound), so a message lost with a connection, or an
 * expiry nobody's script noticed yet, costs at most that delay.
 */
#include "rb.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- key names --------------------------------------------------------------- */

/* NAME's keys: "<what>:{prefix+NAME}" for each of N suffixes, then the
 * channel. OUT has N + 1 slots. */
static int keys_make(reng *e, const char *name, const char *const *what, size_t n, char **out) {
    size_t len = strlen(e->prefix) + strlen(name) + 1;
    char *k = malloc(len);
    int ok = k != NULL;
    for (size_t i = 0; i <= n; i++) out[i] = NULL;
    if (ok) {
        snprintf(k, len, "%s%s", e->prefix, name);
        for (size_t i = 0; i <= n && ok; i++) ok = (out[i] = baton__redis_prefixed(what[i], k)) != NULL;
    }
    free(k);
    if (!ok) {
        for (size_t i = 0; i <= n; i++) free(out[i]), out[i] = NULL;
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    return 0;
}

static void keys_free(char **k, size_t n) {
    for (size_t i = 0; i < n; i++) free(k[i]), k[i] = NULL;
}

enum { GK_MEMBERS, GK_VALUES, GK_OWNERS, GK_CHANGES, GK_CHANNEL, GK_N };
static const char *const group_keys[GK_N] = {
    "baton_group", "baton_group_values", "baton_group_owners", "baton_group_ver", "baton_group__channel",
};

enum { QK_ITEMS, QK_WAITING, QK_TAKEN, QK_OWNERS, QK_SEQ, QK_CHANNEL, QK_N };
static const char *const queue_keys[QK_N] = {
    "baton_queue_items", "baton_queue", "baton_queue_taken", "baton_queue_owners", "baton_queue_seq",
    "baton_queue__channel",
};

/* Saves the thread's last error across a clean-up call. */
typedef struct {
    int code;
    long native;
    char msg[512];
} saved_err;

static void err_save(saved_err *s) {
    const baton_error *le = baton_error_last();
    s->code = le->code;
    s->native = le->native;
    snprintf(s->msg, sizeof s->msg, "%s", le->message ? le->message : "");
}

static void err_restore(const saved_err *s) { baton_seterr(s->code, s->native, "%s", s->msg); }

/* ---- group members --------------------------------------------------------------- */

typedef struct {
    int kind;                /* RK_MEMBER: first, as in every lock state */
    char *k[GK_N];
    char *id;
} rmember;

int baton__redis_member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st) {
    (void)opts;
    *st = NULL;
    rmember *m = calloc(1, sizeof *m);
    if (!m) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    m->kind = RK_MEMBER;
    int rc = keys_make(eng, name, group_keys, GK_N - 1, m->k);
    if (!rc && !(m->id = strdup(id))) rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    if (rc) {
        keys_free(m->k, GK_N);
        free(m);
        return rc;
    }
    *st = m;
    return 0;
}

static void member_free(rmember *m) {
    keys_free(m->k, GK_N);
    free(m->id);
    free(m);
}

/* The leave script: 1 left, 0 not ours; or an error. */
static int member_leave(reng *e, rmember *m, const baton_owner *owner, int *left) {
    const char *argv[7] = { m->k[0], m->k[1], m->k[2], m->k[3], m->k[GK_CHANNEL], m->id, owner->hex };
    redisReply *r = NULL;
    *left = 0;
    int rc = baton__redis_script(e, S_GROUP_LEAVE, 4, 7, argv, NULL, baton__redis_io_deadline(e), &r, NULL);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return baton__redis_bad_reply(r, "the group leave script");
    *left = r->integer == 1;
    rreply_free(r);
    return 0;
}

static int member_join(reng *e, rmember *m, baton_acquire_req *req) {
    char lease[16];
    snprintf(lease, sizeof lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    const char *argv[9] = { m->k[0], m->k[1], m->k[2], m->k[3], m->k[GK_CHANNEL],
                            m->id, req->value ? req->value : "", req->owner->hex, lease };
    int64_t dl = baton__redis_io_deadline(e), sent = 0;
    rconn *c = NULL;
    redisReply *r = NULL;
    int rc = rpool_get(&e->pool, &c, dl);
    if (rc) return rc;
    rc = baton__redis_script_on(e, c, S_GROUP_JOIN, 4, 9, argv, NULL, dl, &r, &sent);
    int uncertain = rc == BATON_EUNAVAILABLE; /* sent, no answer: we may have joined */
    long long flag = 0, n = 0;
    if (!rc && baton__redis_pair(r, &flag, &n)) rc = baton__redis_bad_reply(r, "the group join script"), r = NULL;
    if (!rc && flag == 1 && baton__redis_wait_replicas(e, c, "group join", INT64_MAX)) rc = RB_EFINAL;
    rpool_put(&e->pool, c);
    if (r) rreply_free(r);
    if (rc == RB_EFINAL || uncertain) {
        /* Owner-checked, so it never removes another process's member. */
        saved_err s;
        int left;
        err_save(&s);
        member_leave(e, m, req->owner, &left);
        err_restore(&s);
        if (rc == RB_EFINAL) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the member left again", s.msg);
        return rc;
    }
    if (rc) return rc;
    if (flag != 1) return baton_seterr(BATON_ELOCKED, 0, "redis: group '%s' has a live member '%s'", m->k[0], m->id);
    req->fence = n > 0 ? (uint64_t)n : 0;
    req->sent_ns = sent;
    return 0;
}

static int member_renew(reng *e, rmember *m, const baton_owner *owner, uint32_t lease_ms, int64_t deadline) {
    char lease[16];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms ? lease_ms : 30000);
    const char *argv[8] = { m->k[0], m->k[1], m->k[2], m->k[3], m->k[GK_CHANNEL], m->id, owner->hex, lease };
    int renewed = 0;
    int rc = baton__redis_renew_script(e, S_GROUP_RENEW, 4, 8, argv, deadline, &renewed, "the group renewal script");
    if (!rc && !renewed)
        rc = baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer a member of '%s'", m->id, m->k[0]);
    return rc;
}

/* ---- group listing and watching ------------------------------------------------------ */

/* The list script on NAME: OP 'list' or 'state'. */
static int group_state(reng *e, const char *name, const char *op, redisReply **out) {
    char *k[GK_N];
    int rc = keys_make(e, name, group_keys, GK_N - 1, k);
    if (rc) return rc;
    const char *argv[6] = { k[0], k[1], k[2], k[3], k[GK_CHANNEL], op };
    rc = baton__redis_script(e, S_GROUP_LIST, 4, 6, argv, NULL, baton__redis_io_deadline(e), out, NULL);
    keys_free(k, GK_N);
    if (rc) return rc;
    redisReply *r = *out;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->elements % 2 == 0 &&
             r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER;
    for (size_t i = 2; ok && i < r->elements; i++) ok = r->element[i]->type == REDIS_REPLY_STRING;
    if (!ok) {
        *out = NULL;
        return baton__redis_bad_reply(r, "the group list script");
    }
    return 0;
}

int baton__redis_group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                            void *arg, uint64_t *token) {
    redisReply *r = NULL;
    int rc = group_state(eng, name, "list", &r);
    if (rc) return rc;
    for (size_t i = 2; i + 1 < r->elements; i += 2) fn(arg, r->element[i]->str, r->element[i + 1]->str);
    if (token) *token = (uint64_t)r->element[0]->integer;
    rreply_free(r);
    return 0;
}

typedef struct {
    reng *e;
    const char *name;
    uint64_t token;
} gwatch_ctx;

/* Done when the group's change counter moved (the script dropped expired
 * members first); else park until the next member's deadline. */
static int gwatch_attempt(void *p, int *done, int64_t *hint) {
    gwatch_ctx *x = p;
    redisReply *r = NULL;
    *hint = -1;
    int rc = group_state(x->e, x->name, "state", &r);
    if (rc) return rc;
    if ((uint64_t)r->element[0]->integer != x->token) *done = 1;
    *hint = r->element[1]->integer;
    rreply_free(r);
    return 0;
}

/* A message carries the group's new change count: one that is not the
 * token ends the wait without another read (the core lists next). */
static int gwatch_msg(void *p, const char *payload) {
    gwatch_ctx *x = p;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(payload, &end, 10);
    return payload[0] && !*end && !errno && v != x->token;
}

int baton__redis_group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w) {
    reng *e = eng;
    gwatch_ctx x = { e, name, token };
    char *k[GK_N];
    int rc = keys_make(e, name, group_keys, GK_N - 1, k);
    if (rc) return rc;
    int64_t prev = baton__redis_bound_enter(e, deadline_ns);
    if (deadline_ns == 0 || !w) {
        int done = 0;
        int64_t hint;
        rc = gwatch_attempt(&x, &done, &hint);
        if (!rc && !done && deadline_ns == 0)
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: group '%s' has not changed", k[0]);
        else if (!rc && !done)
            rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting call needs a waiter");
    } else {
        /* As a value watch: the loop re-reads once subscribed, then parks
         * until a message, the next member deadline, 2 s, or the deadline. */
        char what[80];
        snprintf(what, sizeof what, "watch of group '%.40s'", k[0]);
        rc = baton__redis_wait_loop_msg(e, k[GK_CHANNEL], w, deadline_ns, 0, 0, gwatch_attempt, gwatch_msg, &x, what,
                                        NULL, -1, 0);
    }
    baton__redis_bound_leave(prev);
    keys_free(k, GK_N);
    return rc;
}

/* ---- queues ---------------------------------------------------------------------------- */

typedef struct {
    char *k[QK_N];
} rqueue;

typedef struct {
    int kind;                /* RK_TAKER: first, as in every lock state */
    char *k[QK_N];           /* a copy: the item may outlive its queue handle */
    char *data;              /* the item held (NUL-terminated), or NULL */
    size_t len;
    char id[32];
    char owner[64];          /* "<owner hex>:<fence>" of the take */
} rtaker;

int baton__redis_queue_new(void *eng, const char *name, void **st) {
    *st = NULL;
    rqueue *q = calloc(1, sizeof *q);
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = keys_make(eng, name, queue_keys, QK_N - 1, q->k);
    if (rc) {
        free(q);
        return rc;
    }
    *st = q;
    return 0;
}

void baton__redis_queue_free(void *eng, void *st) {
    (void)eng;
    rqueue *q = st;
    if (!q) return;
    keys_free(q->k, QK_N);
    free(q);
}

int baton__redis_queue_put(void *eng, void *st, const void *data, size_t len) {
    reng *e = eng;
    rqueue *q = st;
    const char *argv[7] = { q->k[0], q->k[1], q->k[2], q->k[3], q->k[4], q->k[QK_CHANNEL], (const char *)data };
    size_t lens[7];
    for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
    lens[6] = len;
    redisReply *r = NULL;
    int rc = baton__redis_script(e, S_QUEUE_PUT, 5, 7, argv, lens, baton__redis_io_deadline(e), &r, NULL);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_STRING) return baton__redis_bad_reply(r, "the queue put script");
    rreply_free(r);
    return 0;
}

int baton__redis_queue_size(void *eng, void *st, uint64_t *waiting) {
    reng *e = eng;
    rqueue *q = st;
    const char *argv[6] = { q->k[0], q->k[1], q->k[2], q->k[3], q->k[4], q->k[QK_CHANNEL] };
    redisReply *r = NULL;
    int rc = baton__redis_script(e, S_QUEUE_SIZE, 5, 6, argv, NULL, baton__redis_io_deadline(e), &r, NULL);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) return baton__redis_bad_reply(r, "the queue size script");
    *waiting = (uint64_t)r->integer;
    rreply_free(r);
    return 0;
}

int baton__redis_queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst) {
    (void)eng;
    (void)opts;
    rqueue *q = st;
    *tst = NULL;
    rtaker *t = calloc(1, sizeof *t);
    int ok = t != NULL;
    for (int i = 0; ok && i < QK_N; i++) ok = (t->k[i] = strdup(q->k[i])) != NULL;
    if (!ok) {
        if (t) keys_free(t->k, QK_N);
        free(t);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    t->kind = RK_TAKER;
    *tst = t;
    return 0;
}

static void taker_drop(rtaker *t) {
    free(t->data);
    t->data = NULL;
    t->len = 0;
    t->id[0] = 0;
    t->owner[0] = 0;
}

static void taker_free(rtaker *t) {
    taker_drop(t);
    keys_free(t->k, QK_N);
    free(t);
}

int baton__redis_queue_item(void *eng, void *tst, const char **data, size_t *len) {
    (void)eng;
    rtaker *t = tst;
    if (!t->data) return baton_seterr(BATON_ENOTHELD, 0, "redis: this taker holds no item of '%s'", t->k[QK_WAITING]);
    *data = t->data;
    *len = t->len;
    return 0;
}

/* The item script: OP 'done', 'back' or 'renew'; *mine = 1 when the item
 * was still this take's. */
static int item_script(reng *e, rtaker *t, const char *op, uint32_t lease_ms, int64_t deadline, int *mine) {
    char lease[16];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms ? lease_ms : 30000);
    const char *argv[10] = { t->k[0], t->k[1], t->k[2], t->k[3], t->k[4], t->k[QK_CHANNEL], op, t->id, t->owner,
                             lease };
    if (!strcmp(op, "renew"))
        return baton__redis_renew_script(e, S_QUEUE_ITEM, 5, 10, argv, deadline, mine, "the queue renewal script");
    redisReply *r = NULL;
    *mine = 0;
    int rc = baton__redis_script(e, S_QUEUE_ITEM, 5, 10, argv, NULL, deadline, &r, NULL);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return baton__redis_bad_reply(r, "the queue item script");
    *mine = r->integer == 1;
    rreply_free(r);
    return 0;
}

static int item_lost(rtaker *t) {
    return baton_seterr(BATON_ELOST, 0, "redis: item %s of '%s' is no longer this taker's (its lease ran out)",
                        t->id, t->k[QK_WAITING]);
}

int baton__redis_queue_done(void *eng, void *tst, const baton_owner *owner) {
    (void)owner; /* the take's owner string is kept in the state */
    rtaker *t = tst;
    if (!t->owner[0]) return baton_seterr(BATON_ENOTHELD, 0, "redis: this taker holds no item");
    int mine = 0;
    int rc = item_script(eng, t, "done", 0, baton__redis_io_deadline(eng), &mine);
    if (rc) return rc;
    if (!mine) rc = item_lost(t);
    taker_drop(t);
    return rc;
}

/* One take: 0 with *granted (the state then holds the item) or *hint. */
static int take_once(reng *e, rtaker *t, baton_acquire_req *req, int *granted, int64_t *hint) {
    char lease[16];
    snprintf(lease, sizeof lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    const char *argv[9] = { t->k[0], t->k[1], t->k[2], t->k[3], t->k[4], t->k[QK_CHANNEL], req->owner->hex, lease };
    int64_t dl = baton__redis_io_deadline(e), sent = 0;
    rconn *c = NULL;
    redisReply *r = NULL;
    *granted = 0;
    *hint = -1;
    int rc = rpool_get(&e->pool, &c, dl);
    if (rc) return rc;
    rc = baton__redis_script_on(e, c, S_QUEUE_TAKE, 5, 8, argv, NULL, dl, &r, &sent);
    int ok = !rc && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
             r->element[1]->type == REDIS_REPLY_INTEGER;
    int took = ok && r->element[0]->integer == 1;
    if (took)
        ok = r->elements == 4 && r->element[1]->integer > 0 && r->element[2]->type == REDIS_REPLY_STRING &&
             r->element[2]->len < sizeof t->id && r->element[3]->type == REDIS_REPLY_STRING;
    if (!rc && !ok) {
        rpool_put(&e->pool, c);
        return baton__redis_bad_reply(r, "the queue take script");
    }
    if (took) {
        taker_drop(t);
        if (!(t->data = malloc(r->element[3]->len + 1))) rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        else {
            memcpy(t->data, r->element[3]->str, r->element[3]->len);
            t->data[r->element[3]->len] = 0;
            t->len = r->element[3]->len;
        }
        snprintf(t->id, sizeof t->id, "%s", r->element[2]->str);
        snprintf(t->owner, sizeof t->owner, "%s:%lld", req->owner->hex, r->element[1]->integer);
        req->fence = (uint64_t)r->element[1]->integer;
        req->sent_ns = sent;
        if (!rc && baton__redis_wait_replicas(e, c, "queue take", INT64_MAX)) rc = RB_EFINAL;
    } else if (!rc) {
        *hint = r->element[1]->integer;
    }
    rpool_put(&e->pool, c);
    if (r) rreply_free(r);
    if (took && rc) {
        /* Too few replicas, or no memory for the item: give it back. */
        saved_err s;
        int mine;
        err_save(&s);
        item_script(e, t, "back", 0, baton__redis_io_deadline(e), &mine);
        taker_drop(t);
        err_restore(&s);
        if (rc == RB_EFINAL) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the item was given back", s.msg);
        return rc == RB_EFINAL ? BATON_EUNAVAILABLE : rc;
    }
    if (rc) return rc;
    *granted = took;
    return 0;
}

typedef struct {
    reng *e;
    rtaker *t;
    baton_acquire_req *req;
} take_ctx;

static int take_attempt(void *p, int *done, int64_t *hint) {
    take_ctx *x = p;
    int granted = 0;
    int rc = take_once(x->e, x->t, x->req, &granted, hint);
    if (granted) *done = 1;
    return rc;
}

static int taker_take(reng *e, rtaker *t, baton_acquire_req *req) {
    int granted = 0;
    int64_t hint = -1;
    take_ctx x = { e, t, req };
    int64_t ab = baton__redis_attempt_enter(e);
    int rc = take_once(e, t, req, &granted, &hint);
    baton__redis_bound_leave(ab);
    if (rc || granted) return rc;
    if (req->deadline_ns == 0)
        return baton_seterr(BATON_ELOCKED, 0, "redis: queue '%s' has no item waiting", t->k[QK_WAITING]);
    if (!req->waiter) return baton_seterr(BATON_EINVAL, 0, "redis: a waiting take needs a waiter");
    char what[80];
    snprintf(what, sizeof what, "take from queue '%.40s'", t->k[QK_WAITING]);
    return baton__redis_wait_loop(e, t->k[QK_CHANNEL], req->waiter, req->deadline_ns, 0, 0, take_attempt, &x, what);
}

/* ---- the lock methods of members and takers ---------------------------------------------- */

void baton__redis_coord_free(void *eng, void *st) {
    (void)eng;
    if (!st) return;
    if (*(int *)st == RK_MEMBER) member_free(st);
    else taker_free(st);
}

int baton__redis_coord_acquire(reng *e, void *st, baton_acquire_req *req) {
    if (*(int *)st == RK_MEMBER) return member_join(e, st, req);
    return taker_take(e, st, req);
}

int baton__redis_coord_release(reng *e, void *st, const baton_owner *owner) {
    if (*(int *)st == RK_MEMBER) {
        rmember *m = st;
        int left = 0;
        int rc = member_leave(e, m, owner, &left);
        if (!rc && !left) rc = baton_seterr(BATON_ELOST, 0, "redis: '%s' was no longer a member of '%s'", m->id, m->k[0]);
        return rc;
    }
    rtaker *t = st;
    if (!t->owner[0]) return baton_seterr(BATON_ENOTHELD, 0, "redis: this taker holds no item");
    int mine = 0;
    int rc = item_script(e, t, "back", 0, baton__redis_io_deadline(e), &mine);
    if (rc) return rc;
    if (!mine) rc = item_lost(t);
    taker_drop(t);
    return rc;
}

int baton__redis_coord_renew(reng *e, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    int64_t dl = baton__redis_io_deadline(e);
    if (deadline_ns > 0) dl = rmin64(dl, deadline_ns);
    if (baton_now_ns() >= dl) return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: renewal past its deadline");
    if (*(int *)st == RK_MEMBER) return member_renew(e, st, owner, lease_ms, dl);
    rtaker *t = st;
    if (!t->owner[0]) return baton_seterr(BATON_ELOST, 0, "redis: this taker holds no item");
    int mine = 0;
    int rc = item_script(e, t, "renew", lease_ms, dl, &mine);
    if (!rc && !mine) rc = item_lost(t);
    return rc;
}
