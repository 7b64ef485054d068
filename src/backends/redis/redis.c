/*
 * The Redis backend: URI and options, the two key layouts (Redisson RLock /
 * RFencedLock hash, or SET NX PX string), the lock operations, and waiting
 * on pub/sub through the client's subscriber (sub.c).
 *
 * URI: redis://[user[:password]@]host[:port][/db][?options], rediss:// = TLS.
 * Options: prefix, layout=redisson|simple, cacert, cert, key, insecure,
 * connect_timeout_ms, io_timeout_ms. See docs/redis-layout.md.
 */
#include "redis_int.h"
#include "scripts.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/sha.h>

enum { LAYOUT_REDISSON, LAYOUT_SIMPLE };

enum {
    S_ACQ_REDISSON, S_REL_REDISSON, S_RENEW_REDISSON,
    S_ACQ_SIMPLE, S_REL_SIMPLE, S_RENEW_SIMPLE,
    S_INFO, S_COUNT
};

static const char *const script_body[S_COUNT] = {
    BATON_LUA_ACQ_REDISSON, BATON_LUA_REL_REDISSON, BATON_LUA_RENEW_REDISSON,
    BATON_LUA_ACQ_SIMPLE, BATON_LUA_REL_SIMPLE, BATON_LUA_RENEW_SIMPLE,
    BATON_LUA_INFO,
};

/* Waiting in the simple layout: foreign clients (redis-py, redlock, redsync)
 * release without publishing, so each park is capped by a backoff that starts
 * at 2 ms and doubles up to 200 ms (with jitter). The same cap applies while
 * the subscription is not (yet) confirmed and while the server is unreachable. */
#define BACKOFF_START_MS 2
#define BACKOFF_MAX_MS 200
#define SUB_READY_WAIT_MS 250

typedef struct {
    rcfg cfg;
    rpool pool;
    rsub sub;
    char *prefix;
    int layout;
    char sha[S_COUNT][41];
} reng;

typedef struct {
    char *key;       /* prefix + name */
    char *fence;     /* redisson_lock_token:{key} | baton_fence:{key} */
    char *holder;    /* baton_holder:{key} (redisson layout) */
    char *channel;   /* redisson_lock__channel:{key} | baton_lock__channel:{key} */
} rlock;

/* ---- helpers ------------------------------------------------------------ */

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

static int parse_int(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, int *out) {
    if (!strcmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) { *out = 1; return 0; }
    if (!strcmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) { *out = 0; return 0; }
    return -1;
}

/* Redisson's rule for derived names: "prefix:{name}", or "prefix:name" when
 * the name already carries a hash tag. Keeps every key of a lock in one slot. */
static char *derived(const char *prefix, const char *key) {
    int tagged = strchr(key, '{') != NULL;
    size_t n = strlen(prefix) + strlen(key) + 4;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, tagged ? "%s:%s" : "%s:{%s}", prefix, key);
    return s;
}

static void rlock_clear(rlock *l) {
    free(l->key);
    free(l->fence);
    free(l->holder);
    free(l->channel);
    memset(l, 0, sizeof *l);
}

static int rlock_init(reng *e, const char *name, rlock *l) {
    memset(l, 0, sizeof *l);
    size_t n = strlen(e->prefix) + strlen(name) + 1;
    l->key = malloc(n);
    if (l->key) snprintf(l->key, n, "%s%s", e->prefix, name);
    if (l->key) {
        if (e->layout == LAYOUT_REDISSON) {
            l->fence = derived("redisson_lock_token", l->key);
            l->holder = derived("baton_holder", l->key);
            l->channel = derived("redisson_lock__channel", l->key);
        } else {
            l->fence = derived("baton_fence", l->key);
            l->holder = derived("baton_fence", l->key);
            l->channel = derived("baton_lock__channel", l->key);
        }
    }
    if (!l->key || !l->fence || !l->holder || !l->channel) {
        rlock_clear(l);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    return 0;
}

static void sha1_hex(const char *s, char out[41]) {
    unsigned char d[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)s, strlen(s), d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* Runs script SID with EVALSHA, falling back to EVAL on NOSCRIPT. Error
 * replies become baton errors; *out is the reply otherwise. *sent_ns (if
 * given) is when the request that produced the reply was sent. */
static int run_script(reng *e, int sid, int nkeys, const char **keys, int nargs, const char **args,
                      int64_t deadline, redisReply **out, int64_t *sent_ns) {
    *out = NULL;
    const char *argv[12];
    size_t lens[12];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int argc = 0;
    argv[argc++] = "EVALSHA";
    argv[argc++] = e->sha[sid];
    argv[argc++] = nk;
    for (int i = 0; i < nkeys; i++) argv[argc++] = keys[i];
    for (int i = 0; i < nargs; i++) argv[argc++] = args[i];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);

    rconn *c = NULL;
    int rc = rpool_get(&e->pool, &c, deadline);
    if (rc) return rc;
    redisReply *r = NULL;
    if (sent_ns) *sent_ns = baton_now_ns();
    rc = rconn_command(c, argc, argv, lens, &r, deadline);
    if (!rc && r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, "NOSCRIPT", 8)) {
        rreply_free(r);
        r = NULL;
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = script_body[sid];
        lens[1] = strlen(script_body[sid]);
        if (sent_ns) *sent_ns = baton_now_ns();
        rc = rconn_command(c, argc, argv, lens, &r, deadline);
    }
    rpool_put(&e->pool, c);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(r, "script failed");
        rreply_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

static int bad_reply(redisReply *r, const char *what) {
    if (r) rreply_free(r);
    return baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply to %s", what);
}

/* ---- open / close ------------------------------------------------------- */

static void eng_free(reng *e) {
    if (!e) return;
    free(e->cfg.host);
    free(e->cfg.user);
    free(e->cfg.password);
    if (e->cfg.ssl_ctx) SSL_CTX_free(e->cfg.ssl_ctx);
    free(e->prefix);
    free(e);
}

static int einval(const char *fmt, const char *a, const char *b) {
    return baton_seterr(BATON_EINVAL, 0, fmt, a, b);
}

static int parse_config(reng *e, const baton_uri *u, const baton_client_options *o) {
    rcfg *cfg = &e->cfg;
    const char *scheme = u->scheme ? u->scheme : "";
    if (!strcmp(scheme, "rediss")) cfg->tls = 1;
    else if (strcmp(scheme, "redis") != 0)
        return einval("redis: unsupported scheme '%s'%s", scheme, "");
    if (u->nhosts > 1)
        return einval("redis: %s: one host only (several independent nodes are a quorum lock)%s",
                      u->redacted ? u->redacted : "uri", "");
    if (!u->host || !*u->host) return einval("redis: %s: missing host%s", u->redacted ? u->redacted : "uri", "");
    if (u->port < 0 || u->port > 65535) return einval("redis: bad port in %s%s", u->redacted ? u->redacted : "uri", "");
    cfg->host = xstrdup(u->host);
    cfg->port = u->port ? u->port : 6379;
    if (u->user && *u->user) cfg->user = xstrdup(u->user);

    const char *pw = NULL;
    if (o && o->password) pw = o->password;
    else if (u->password && *u->password) pw = u->password;
    else if (getenv("BATON_REDIS_PASSWORD") && *getenv("BATON_REDIS_PASSWORD")) pw = getenv("BATON_REDIS_PASSWORD");
    else if (getenv("REDISCLI_AUTH") && *getenv("REDISCLI_AUTH")) pw = getenv("REDISCLI_AUTH");
    if (pw) cfg->password = xstrdup(pw);

    if (u->path && *u->path) {
        long db;
        if (parse_int(u->path, 0, INT_MAX, &db)) return einval("redis: bad database number '%s' (want /0, /1, ...)%s", u->path, "");
        cfg->db = (int)db;
    }

    cfg->connect_timeout_ms = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000;
    cfg->io_timeout_ms = o && o->io_timeout_ms > 0 ? o->io_timeout_ms : 5000;

    const char *cacert = NULL, *cert = NULL, *key = NULL;
    const char *prefix = "";
    e->layout = LAYOUT_REDISSON;
    for (size_t i = 0; i < u->nparams; i++) {
        const char *k = u->params[i].key ? u->params[i].key : "";
        const char *v = u->params[i].value ? u->params[i].value : "";
        long n;
        if (!strcmp(k, "prefix")) {
            prefix = v;
        } else if (!strcmp(k, "layout")) {
            if (!strcmp(v, "redisson")) e->layout = LAYOUT_REDISSON;
            else if (!strcmp(v, "simple")) e->layout = LAYOUT_SIMPLE;
            else return einval("redis: bad layout '%s'%s (want redisson or simple)", v, "");
        } else if (!strcmp(k, "cacert") || !strcmp(k, "cert") || !strcmp(k, "key")) {
            if (!cfg->tls) return einval("redis: option '%s' needs a rediss:// URI%s", k, "");
            if (!*v) return einval("redis: option '%s' needs a file name%s", k, "");
            if (!strcmp(k, "cacert")) cacert = v;
            else if (!strcmp(k, "cert")) cert = v;
            else key = v;
        } else if (!strcmp(k, "insecure")) {
            if (!cfg->tls) return einval("redis: option '%s' needs a rediss:// URI%s", k, "");
            if (parse_bool(v, &cfg->insecure)) return einval("redis: bad value '%s' for insecure%s (want 0 or 1)", v, "");
        } else if (!strcmp(k, "connect_timeout_ms") || !strcmp(k, "io_timeout_ms")) {
            if (parse_int(v, 1, 3600000, &n)) return einval("redis: bad value '%s' for %s (want 1..3600000)", v, k);
            if (k[0] == 'c') cfg->connect_timeout_ms = (int)n;
            else cfg->io_timeout_ms = (int)n;
        } else {
            return einval("redis: unknown option '%s'%s (known: prefix, layout, cacert, cert, key, insecure, "
                          "connect_timeout_ms, io_timeout_ms)", k, "");
        }
    }
    if (key && !cert) return einval("redis: option 'key' needs 'cert'%s%s", "", "");
    e->prefix = xstrdup(prefix);
    if (!cfg->host || !e->prefix || (pw && !cfg->password) || (u->user && *u->user && !cfg->user))
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    if (cfg->tls) {
        int rc = rtls_ctx_new(&cfg->ssl_ctx, cacert, cert, key, cfg->insecure);
        if (rc) return rc;
    }
    return 0;
}

static int r_open(void **out, const baton_uri *u, const baton_client_options *o) {
    *out = NULL;
    reng *e = calloc(1, sizeof *e);
    if (!e) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = parse_config(e, u, o);
    if (rc) { eng_free(e); return rc; }
    for (int i = 0; i < S_COUNT; i++) sha1_hex(script_body[i], e->sha[i]);
    rc = rpool_init(&e->pool, &e->cfg);
    if (rc) { eng_free(e); return rc; }
    rc = rsub_init(&e->sub, &e->cfg);
    if (rc) { rpool_destroy(&e->pool); eng_free(e); return rc; }

    /* Connect now, so a wrong address, password or TLS setup fails here. */
    rconn *c = NULL;
    rc = rpool_get(&e->pool, &c, INT64_MAX);
    if (!rc) {
        const char *argv[1] = { "PING" };
        size_t lens[1] = { 4 };
        redisReply *r = NULL;
        rc = rconn_command(c, 1, argv, lens, &r, rdeadline_ms(e->cfg.io_timeout_ms));
        if (!rc) {
            if (r->type == REDIS_REPLY_ERROR) rc = rreply_error(r, "PING failed");
            else if (r->type != REDIS_REPLY_STATUS || strcasecmp(r->str, "PONG") != 0)
                rc = baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply to PING");
            rreply_free(r);
        }
        if (rc) c->broken = 1;
        rpool_put(&e->pool, c);
    }
    if (rc) {
        rsub_destroy(&e->sub);
        rpool_destroy(&e->pool);
        eng_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

static void r_close(void *eng) {
    reng *e = eng;
    if (!e) return;
    rsub_destroy(&e->sub);
    rpool_destroy(&e->pool);
    eng_free(e);
}

/* ---- locks -------------------------------------------------------------- */

static int r_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st) {
    reng *e = eng;
    *st = NULL;
    if (opts && opts->fair)
        return baton_seterr(BATON_ENOTSUP, 0, "redis: fair locks are not supported by this backend yet");
    rlock *l = malloc(sizeof *l);
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = rlock_init(e, name, l);
    if (rc) { free(l); return rc; }
    *st = l;
    return 0;
}

static void r_lock_free(void *eng, void *st) {
    (void)eng;
    rlock *l = st;
    if (!l) return;
    rlock_clear(l);
    free(l);
}

typedef struct {
    char field[80];      /* redisson: "<uuid>:<tid>" */
    char value[300];     /* simple: "<hex> <desc>" */
} owner_strs;

static void owner_fill(const baton_owner *o, owner_strs *s) {
    snprintf(s->field, sizeof s->field, "%s:%lu", o->uuid, o->tid);
    snprintf(s->value, sizeof s->value, "%s %s", o->hex, o->desc);
}

/* One acquire attempt: 0 with *granted, or *ttl_ms (-1 = no expiry). */
static int try_once(reng *e, rlock *l, baton_acquire_req *req, int *granted, int64_t *ttl_ms) {
    owner_strs os;
    owner_fill(req->owner, &os);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    redisReply *r = NULL;
    int64_t sent = 0;
    int rc;
    *granted = 0;
    *ttl_ms = -1;
    if (e->layout == LAYOUT_REDISSON) {
        const char *keys[3] = { l->key, l->fence, l->holder };
        const char *args[3] = { lease, os.field, req->owner->desc };
        rc = run_script(e, S_ACQ_REDISSON, 3, keys, 3, args, rdeadline_ms(e->cfg.io_timeout_ms), &r, &sent);
    } else {
        const char *keys[2] = { l->key, l->fence };
        const char *args[2] = { os.value, lease };
        rc = run_script(e, S_ACQ_SIMPLE, 2, keys, 2, args, rdeadline_ms(e->cfg.io_timeout_ms), &r, &sent);
    }
    if (rc) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
        return bad_reply(r, "the acquire script");
    if (r->element[0]->integer == 1) {
        if (r->element[1]->integer <= 0) return bad_reply(r, "the acquire script (fence)");
        *granted = 1;
        req->fence = (uint64_t)r->element[1]->integer;
        req->sent_ns = sent;
    } else {
        long long t = r->element[1]->integer;
        *ttl_ms = t >= 0 ? t : (t == -2 ? 0 : -1);
    }
    rreply_free(r);
    return 0;
}

static unsigned jitter_rand(void) {
    static _Thread_local unsigned x;
    if (!x) x = (unsigned)baton_now_ns() ^ (unsigned)(uintptr_t)&x ^ 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

/* A park of about BACKOFF ms, jittered into [backoff/2, backoff]. */
static int64_t backoff_ns(int backoff_ms) {
    int64_t ns = (int64_t)backoff_ms * 1000000;
    return ns / 2 + (int64_t)(jitter_rand() % (unsigned)(ns / 2 + 1));
}

static int r_lock_acquire(void *eng, void *st, baton_acquire_req *req) {
    reng *e = eng;
    rlock *l = st;
    int granted = 0;
    int64_t ttl = -1;
    int rc = try_once(e, l, req, &granted, &ttl);
    if (rc) return rc;
    if (granted) return 0;
    if (req->deadline_ns == 0)
        return baton_seterr(BATON_ELOCKED, 0, "redis: '%s' is held by another owner", l->key);
    if (!req->waiter) return baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");

    /* Subscribe to the unlock channel, and wait for the confirmation before
     * the next attempt, so an unlock in between cannot be missed. */
    rsub_entry *se = NULL;
    if (rsub_register(&e->sub, l->channel, req->waiter, &se) != 0) se = NULL; /* degrade to backoff */
    /* The confirmation normally takes one round trip; if it is late (server
     * down, no pub/sub permission) the loop below re-checks with backoff. */
    int64_t ready_by = rmin64(req->deadline_ns, baton_now_ns() + (int64_t)SUB_READY_WAIT_MS * 1000000);
    for (;;) {
        unsigned g = baton_waiter_gen(req->waiter);
        if (!se || rsub_ready(&e->sub, se) || baton_now_ns() >= ready_by) break;
        if (baton_waiter_park(req->waiter, g, ready_by) == BATON_ECANCELED || baton_waiter_canceled(req->waiter)) {
            rsub_unregister(&e->sub, se);
            return baton_seterr(BATON_ECANCELED, 0, "redis: acquire of '%s' canceled", l->key);
        }
    }

    int backoff = BACKOFF_START_MS;
    for (;;) {
        if (baton_waiter_canceled(req->waiter)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redis: acquire of '%s' canceled", l->key);
            break;
        }
        unsigned g = baton_waiter_gen(req->waiter);
        int ready = rsub_ready(&e->sub, se);
        rc = try_once(e, l, req, &granted, &ttl);
        if (!rc && granted) break;
        if (rc && rc != BATON_EUNAVAILABLE) break; /* auth, protocol, memory: give up */
        int64_t now = baton_now_ns();
        if (now >= req->deadline_ns) {
            if (!rc) rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: '%s' still held when the wait ran out", l->key);
            break;
        }
        int64_t until = req->deadline_ns;
        if (!rc && ttl >= 0) until = rmin64(until, now + ttl * 1000000 + 1000000);
        if (rc || !ready || e->layout == LAYOUT_SIMPLE) {
            until = rmin64(until, now + backoff_ns(backoff));
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        if (baton_waiter_park(req->waiter, g, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redis: acquire of '%s' canceled", l->key);
            break;
        }
    }
    rsub_unregister(&e->sub, se);
    return rc;
}

static int r_lock_release(void *eng, void *st, const baton_owner *owner) {
    reng *e = eng;
    rlock *l = st;
    owner_strs os;
    owner_fill(owner, &os);
    redisReply *r = NULL;
    int rc;
    if (e->layout == LAYOUT_REDISSON) {
        const char *keys[3] = { l->key, l->channel, l->holder };
        const char *args[1] = { os.field };
        rc = run_script(e, S_REL_REDISSON, 3, keys, 1, args, rdeadline_ms(e->cfg.io_timeout_ms), &r, NULL);
    } else {
        const char *keys[2] = { l->key, l->channel };
        const char *args[1] = { os.value };
        rc = run_script(e, S_REL_SIMPLE, 2, keys, 1, args, rdeadline_ms(e->cfg.io_timeout_ms), &r, NULL);
    }
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(r, "the release script");
    long long v = r->integer;
    rreply_free(r);
    if (v != 1) return baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer held by this owner", l->key);
    return 0;
}

static int r_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    reng *e = eng;
    rlock *l = st;
    owner_strs os;
    owner_fill(owner, &os);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms ? lease_ms : 30000);
    int64_t dl = rdeadline_ms(e->cfg.io_timeout_ms);
    if (deadline_ns > 0) dl = rmin64(dl, deadline_ns);
    if (baton_now_ns() >= dl)
        return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: renewal of '%s' is past its deadline", l->key);
    redisReply *r = NULL;
    int rc;
    if (e->layout == LAYOUT_REDISSON) {
        const char *keys[2] = { l->key, l->holder };
        const char *args[2] = { lease, os.field };
        rc = run_script(e, S_RENEW_REDISSON, 2, keys, 2, args, dl, &r, NULL);
    } else {
        const char *keys[1] = { l->key };
        const char *args[2] = { os.value, lease };
        rc = run_script(e, S_RENEW_SIMPLE, 1, keys, 2, args, dl, &r, NULL);
    }
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(r, "the renewal script");
    long long v = r->integer;
    rreply_free(r);
    if (v != 1) return baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer held by this owner", l->key);
    return 0;
}

static int r_lock_info(void *eng, const char *name, baton_lockinfo *out) {
    reng *e = eng;
    rlock l;
    int rc = rlock_init(e, name, &l);
    if (rc) return rc;
    const char *keys[3] = { l.key, l.fence, l.holder };
    redisReply *r = NULL;
    rc = run_script(e, S_INFO, 3, keys, 0, NULL, rdeadline_ms(e->cfg.io_timeout_ms), &r, NULL);
    rlock_clear(&l);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING)
        return bad_reply(r, "the info script");
    out->version = BATON_LOCK_INFO_VERSION;
    out->held = r->element[0]->integer == 1;
    long long pttl = r->element[1]->integer;
    out->remaining_ms = out->held ? (pttl >= 0 ? pttl : -1) : 0;
    snprintf(out->holder, sizeof out->holder, "%s", out->held ? r->element[2]->str : "");
    char *end;
    errno = 0;
    unsigned long long f = strtoull(r->element[3]->str, &end, 10);
    out->fence = (errno || *end) ? 0 : (uint64_t)f;
    rreply_free(r);
    return 0;
}

static const char *const redis_schemes[] = { "redis", "rediss", NULL };

const baton_backend baton__backend_redis = {
    .version = BATON_BACKEND_VERSION,
    .name = "redis",
    .schemes = redis_schemes,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_INFO,
    .open = r_open,
    .close = r_close,
    .lock_new = r_lock_new,
    .lock_free = r_lock_free,
    .lock_acquire = r_lock_acquire,
    .lock_release = r_lock_release,
    .lock_renew = r_lock_renew,
    .lock_info = r_lock_info,
};
