/*
 * The ownerless synchronizers of the Redis backend: semaphore (Redisson
 * RSemaphore), permit-expirable semaphore (RPermitExpirableSemaphore) and
 * count-down latch (RCountDownLatch). Layouts in docs/redis-layout.md.
 * Waiting is by notification on the object's channel; permits that expire
 * are returned to the pool by the scripts themselves (server time).
 */
#include "rb.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

typedef struct {
    char *key;       /* prefix + name: the count */
    char *timeouts;  /* permits: {key}:timeout */
    char *channel;
} robj;

static void robj_free(robj *o) {
    if (!o) return;
    free(o->key);
    free(o->timeouts);
    free(o->channel);
    free(o);
}

enum { OBJ_SEM, OBJ_PERMITS, OBJ_LATCH };

static int robj_new(reng *e, const char *name, int kind, void **st) {
    *st = NULL;
    robj *o = calloc(1, sizeof *o);
    if (!o) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    size_t n = strlen(e->prefix) + strlen(name) + 1;
    int ok = (o->key = malloc(n)) != NULL;
    if (ok) {
        snprintf(o->key, n, "%s%s", e->prefix, name);
        if (kind == OBJ_LATCH) {
            /* Redisson always braces the name here, hash tag or not. */
            size_t m = strlen(o->key) + 40;
            if ((o->channel = malloc(m)) != NULL)
                snprintf(o->channel, m, "redisson_countdownlatch__channel__{%s}", o->key);
        } else {
            o->channel = baton__redis_prefixed("redisson_sc", o->key);
        }
        if (kind == OBJ_PERMITS) o->timeouts = baton__redis_suffixed(o->key, "timeout");
        ok = o->channel && (kind != OBJ_PERMITS || o->timeouts);
    }
    if (!ok) {
        robj_free(o);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    *st = o;
    return 0;
}

static int reply_int(int rc, redisReply *r, long long *out, const char *what) {
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return baton__redis_bad_reply(r, what);
    *out = r->integer;
    rreply_free(r);
    return 0;
}

static int int_script(reng *e, int sid, int nkeys, int argc, const char *const *argv, const size_t *lens,
                      long long *out, const char *what) {
    redisReply *r = NULL;
    int rc = baton__redis_script(e, sid, nkeys, argc, argv, lens, baton__redis_io_deadline(e), &r, NULL);
    return reply_int(rc, r, out, what);
}

/* ctl ops shared by the semaphore and the permits (same script body). */
static int ctl(reng *e, robj *o, int sid, int nkeys, int op, int64_t arg, int64_t *out, const char *what) {
    const char *name;
    switch (op) {
    case BATON_CTL_TRY_SET: name = "set"; break;
    case BATON_CTL_ADD: name = "add"; break;
    case BATON_CTL_DRAIN: name = "drain"; break;
    case BATON_CTL_AVAILABLE: name = "get"; break;
    default: return baton_seterr(BATON_EINVAL, 0, "redis: %s: unknown operation %d", what, op);
    }
    if (op == BATON_CTL_TRY_SET && arg < 0) return baton_seterr(BATON_EINVAL, 0, "redis: negative permit count");
    char a[24];
    snprintf(a, sizeof a, "%" PRId64, arg);
    const char *argv[5];
    int n = 0;
    argv[n++] = o->key;
    if (nkeys == 2) argv[n++] = o->timeouts;
    argv[n++] = name;
    argv[n++] = a;
    argv[n++] = o->channel;
    const char *const *args = argv;
    long long v = 0;
    int rc = int_script(e, sid, nkeys, nkeys + 3, args, NULL, &v, what);
    if (!rc && out) *out = v;
    return rc;
}

/* ---- semaphore ----------------------------------------------------------------- */

int baton__redis_sem_new(void *eng, const char *name, void **st) { return robj_new(eng, name, OBJ_SEM, st); }
void baton__redis_sem_free(void *eng, void *st) { (void)eng; robj_free(st); }

int baton__redis_sem_release(void *eng, void *st, uint32_t permits) {
    robj *o = st;
    char k[16];
    snprintf(k, sizeof k, "%" PRIu32, permits);
    const char *argv[3] = { o->key, k, o->channel };
    long long v;
    return int_script(eng, S_SEM_REL, 1, 3, argv, NULL, &v, "the semaphore release script");
}

typedef struct {
    reng *e;
    robj *o;
    uint32_t permits;
} sem_ctx;

static int sem_once(sem_ctx *x, int *granted) {
    char k[16];
    snprintf(k, sizeof k, "%" PRIu32, x->permits);
    const char *argv[2] = { x->o->key, k };
    int64_t dl = baton__redis_io_deadline(x->e);
    rconn *c = NULL;
    redisReply *r = NULL;
    *granted = 0;
    int rc = rpool_get(&x->e->pool, &c, dl);
    if (rc) return rc;
    long long v = 0;
    rc = baton__redis_script_on(x->e, c, S_SEM_ACQ, 1, 2, argv, NULL, dl, &r, NULL);
    rc = reply_int(rc, r, &v, "the semaphore acquire script");
    if (!rc && v == 1 && baton__redis_wait_replicas(x->e, c, "semaphore acquire", INT64_MAX)) rc = RB_EFINAL;
    rpool_put(&x->e->pool, c);
    if (rc == RB_EFINAL) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        baton__redis_sem_release(x->e, x->o, x->permits);
        baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the permits were returned", msg);
        return RB_EFINAL;
    }
    if (!rc) *granted = v == 1;
    return rc;
}

static int sem_attempt(void *p, int *done, int64_t *hint) {
    int granted = 0;
    int rc = sem_once(p, &granted);
    *hint = -1;
    if (granted || rc == RB_EFINAL) *done = 1;
    return rc == RB_EFINAL ? BATON_EUNAVAILABLE : rc;
}

int baton__redis_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w) {
    reng *e = eng;
    robj *o = st;
    sem_ctx x = { e, o, permits };
    int granted = 0;
    int64_t prev = baton__redis_bound_enter(e, deadline_ns);
    int rc = sem_once(&x, &granted);
    if (rc == RB_EFINAL) rc = BATON_EUNAVAILABLE;
    else if (!rc && !granted && deadline_ns == 0)
        rc = baton_seterr(BATON_ELOCKED, 0, "redis: semaphore '%s' has fewer than %" PRIu32 " permits", o->key, permits);
    else if (!rc && !granted && !w)
        rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");
    else if (!rc && !granted) {
        char what[80];
        snprintf(what, sizeof what, "acquire of semaphore '%.40s'", o->key);
        rc = baton__redis_wait_loop(e, o->channel, w, deadline_ns, 0, 0, sem_attempt, &x, what);
    }
    baton__redis_bound_leave(prev);
    return rc;
}

int baton__redis_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out) {
    return ctl(eng, st, S_SEM_CTL, 1, op, arg, out, "semaphore");
}

/* ---- permit-expirable semaphore ------------------------------------------------- */

int baton__redis_permits_new(void *eng, const char *name, void **st) { return robj_new(eng, name, OBJ_PERMITS, st); }
void baton__redis_permits_free(void *eng, void *st) { (void)eng; robj_free(st); }

static const char hexd[] = "0123456789abcdef";

static int unhex(const char *id, unsigned char raw[16]) {
    for (int i = 0; i < 16; i++) {
        const char *a = strchr(hexd, id[2 * i]), *b = strchr(hexd, id[2 * i + 1]);
        if (!id[2 * i] || !id[2 * i + 1] || !a || !b)
            return baton_seterr(BATON_EINVAL, 0, "redis: a permit id is 32 lowercase hex digits");
        raw[i] = (unsigned char)(((a - hexd) << 4) | (b - hexd));
    }
    return 0;
}

static int permit_script(reng *e, robj *o, int sid, const unsigned char raw[16], const char *lease, long long *out,
                         const char *what) {
    const char *argv[5] = { o->key, o->timeouts, (const char *)raw, lease ? lease : o->channel, o->channel };
    size_t lens[5] = { strlen(o->key), strlen(o->timeouts), 16, strlen(argv[3]), strlen(o->channel) };
    return int_script(e, sid, 2, lease ? 5 : 4, argv, lens, out, what);
}

int baton__redis_permits_release(void *eng, void *st, const char *id) {
    robj *o = st;
    unsigned char raw[16];
    int rc = unhex(id, raw);
    if (rc) return rc;
    long long v = 0;
    rc = permit_script(eng, o, S_PERMITS_REL, raw, NULL, &v, "the permit release script");
    if (!rc && v != 1)
        rc = baton_seterr(BATON_ENOTOWNER, 0, "redis: permit %s of '%s' is unknown or expired", id, o->key);
    return rc;
}

int baton__redis_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms) {
    robj *o = st;
    unsigned char raw[16];
    int rc = unhex(id, raw);
    if (rc) return rc;
    char lease[16];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms);
    long long v = 0;
    rc = permit_script(eng, o, S_PERMITS_RENEW, raw, lease, &v, "the permit renewal script");
    if (!rc && v != 1)
        rc = baton_seterr(BATON_ENOTOWNER, 0, "redis: permit %s of '%s' is unknown or expired", id, o->key);
    return rc;
}

typedef struct {
    reng *e;
    robj *o;
    char lease[16];
    unsigned char raw[16];
    char *id;
} permits_ctx;

static int permits_once(permits_ctx *x, int *granted, int64_t *hint) {
    *granted = 0;
    *hint = -1;
    /* A fresh id for every attempt: 128 random bits. */
    size_t got = 0;
    while (got < sizeof x->raw) {
        ssize_t n = getrandom(x->raw + got, sizeof x->raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return baton_seterr(BATON_EIO, errno, "getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    const char *argv[5] = { x->o->key, x->o->timeouts, (const char *)x->raw, x->lease, x->o->channel };
    size_t lens[5] = { strlen(argv[0]), strlen(argv[1]), 16, strlen(x->lease), strlen(x->o->channel) };
    int64_t dl = baton__redis_io_deadline(x->e);
    rconn *c = NULL;
    redisReply *r = NULL;
    int rc = rpool_get(&x->e->pool, &c, dl);
    if (rc) return rc;
    rc = baton__redis_script_on(x->e, c, S_PERMITS_ACQ, 2, 5, argv, lens, dl, &r, NULL);
    long long flag = 0, n = 0;
    if (!rc && baton__redis_pair(r, &flag, &n)) rc = baton__redis_bad_reply(r, "the permit acquire script"), r = NULL;
    if (!rc && flag == 1 && baton__redis_wait_replicas(x->e, c, "permit acquire", INT64_MAX)) rc = RB_EFINAL;
    rpool_put(&x->e->pool, c);
    if (r) rreply_free(r);
    for (int i = 0; i < 16; i++) {
        x->id[2 * i] = hexd[x->raw[i] >> 4];
        x->id[2 * i + 1] = hexd[x->raw[i] & 15];
    }
    x->id[32] = 0;
    if (rc == RB_EFINAL) {
        char msg[512];
        long long v;
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        permit_script(x->e, x->o, S_PERMITS_REL, x->raw, NULL, &v, "the permit release script");
        baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the permit was returned", msg);
    }
    if (rc) {
        x->id[0] = 0;
        return rc;
    }
    if (flag == 1) *granted = 1;
    else {
        x->id[0] = 0;
        *hint = n;
    }
    return 0;
}

static int permits_attempt(void *p, int *done, int64_t *hint) {
    int granted = 0;
    int rc = permits_once(p, &granted, hint);
    if (granted || rc == RB_EFINAL) *done = 1;
    return rc == RB_EFINAL ? BATON_EUNAVAILABLE : rc;
}

int baton__redis_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                                 char id[BATON_PERMIT_ID_SIZE]) {
    reng *e = eng;
    robj *o = st;
    permits_ctx x;
    memset(&x, 0, sizeof x);
    x.e = e;
    x.o = o;
    x.id = id;
    snprintf(x.lease, sizeof x.lease, "%" PRIu32, lease_ms);
    int granted = 0;
    int64_t hint = -1;
    int64_t prev = baton__redis_bound_enter(e, deadline_ns);
    int rc = permits_once(&x, &granted, &hint);
    if (rc == RB_EFINAL) rc = BATON_EUNAVAILABLE;
    else if (!rc && !granted && deadline_ns == 0)
        rc = baton_seterr(BATON_ELOCKED, 0, "redis: no permit of '%s' is available", o->key);
    else if (!rc && !granted && !w)
        rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");
    else if (!rc && !granted) {
        char what[80];
        snprintf(what, sizeof what, "acquire of a permit of '%.40s'", o->key);
        rc = baton__redis_wait_loop(e, o->channel, w, deadline_ns, 0, 0, permits_attempt, &x, what);
    }
    baton__redis_bound_leave(prev);
    return rc;
}

int baton__redis_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out) {
    return ctl(eng, st, S_PERMITS_CTL, 2, op, arg, out, "permit-expirable semaphore");
}

/* ---- count-down latch ------------------------------------------------------------ */

int baton__redis_latch_new(void *eng, const char *name, void **st) { return robj_new(eng, name, OBJ_LATCH, st); }
void baton__redis_latch_free(void *eng, void *st) { (void)eng; robj_free(st); }

int baton__redis_latch_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out) {
    robj *o = st;
    const char *name;
    switch (op) {
    case BATON_CTL_TRY_SET: name = "set"; break;
    case BATON_CTL_COUNT_DOWN: name = "down"; break;
    case BATON_CTL_AVAILABLE: name = "get"; break;
    default: return baton_seterr(BATON_EINVAL, 0, "redis: count-down latch: unknown operation %d", op);
    }
    if (op == BATON_CTL_TRY_SET && arg <= 0) return baton_seterr(BATON_EINVAL, 0, "redis: a latch count must be positive");
    char a[24];
    snprintf(a, sizeof a, "%" PRId64, arg);
    const char *argv[4] = { o->key, name, a, o->channel };
    long long v = 0;
    int rc = int_script(eng, S_LATCH_CTL, 1, 4, argv, NULL, &v, "the latch script");
    if (!rc && out) *out = v;
    return rc;
}

typedef struct {
    reng *e;
    robj *o;
} latch_ctx;

static int latch_attempt(void *p, int *done, int64_t *hint) {
    latch_ctx *x = p;
    int64_t v = 0;
    int rc = baton__redis_latch_ctl(x->e, x->o, BATON_CTL_AVAILABLE, 0, &v);
    *hint = -1;
    if (!rc && v == 0) *done = 1;
    return rc;
}

int baton__redis_latch_await(void *eng, void *st, int64_t deadline_ns, baton_waiter *w) {
    reng *e = eng;
    robj *o = st;
    latch_ctx x = { e, o };
    int done = 0;
    int64_t hint;
    int64_t prev = baton__redis_bound_enter(e, deadline_ns);
    int rc = latch_attempt(&x, &done, &hint);
    if (!rc && !done && deadline_ns == 0)
        rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: latch '%s' is not at zero", o->key);
    else if (!rc && !done && !w)
        rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting call needs a waiter");
    else if (!rc && !done) {
        char what[80];
        snprintf(what, sizeof what, "wait for latch '%.40s'", o->key);
        rc = baton__redis_wait_loop(e, o->channel, w, deadline_ns, 0, 0, latch_attempt, &x, what);
    }
    baton__redis_bound_leave(prev);
    return rc;
}
