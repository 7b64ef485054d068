/*
 * The RedLock backend: one lock over N independent Redis masters, granted by
 * a majority (quorum = N/2 + 1), with a fencing token that strictly increases
 * across grants, also across a node that lost its data as long as the nodes'
 * clocks roughly agree (docs/fencing.md). See docs/redlock.md.
 *
 * URI: redlock://[user[:password]@]h1[:port],h2[:port],...[/db][?options]
 * Options: prefix, node_timeout_ms (50), connect_timeout_ms (250),
 * io_timeout_ms, retry_delay_ms (20), tls, cacert, cert, key, insecure.
 *
 * Key layout on every node: the SET NX PX "simple" layout (value = owner hex,
 * a space, the holder description), so node-redlock and redsync clients on
 * the same key exclude each other; the fence counter baton_fence:{key} and
 * the unlock channel baton_lock__channel:{key} of the Redis backend's simple
 * layout (a one-node redlock:// and redis://...?layout=simple share locks).
 *
 * Acquire, one attempt:
 *  1. every node runs ACQ (SET NX PX lease; on success draw the node's fence,
 *     max(INCR counter, node clock in µs), stored back, and return it), all
 *     sent at once; the validity clock starts at the first send;
 *  2. with a majority of yes and validity = lease - elapsed - (lease/100 +
 *     2 ms) > 0, F = the largest counter among the yes-nodes is written back
 *     (FENCE: counter = max(counter, F), only where the key is still ours) to
 *     the yes-nodes;
 *  3. granted when a majority confirmed the write-back and the validity is
 *     still positive; otherwise every node that may hold our key removes it
 *     (a clean-up that publishes nothing: see LUA_REL_QUIET).
 * Waiting: retry after a backoff or a random delay, woken early by the
 * unlock channel of any node (a holder's release); bounded by the deadline.
 */
#include "redlock_int.h"
#include "../redis/scripts.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


/* ---- scripts -------------------------------------------------------------------- */

/* KEYS lock, fence counter; ARGV value, lease ms -> {1, fence} | {0, pttl}.
 * The node's fence is max(INCR counter, its clock in µs), stored back
 * (fence_next in ../redis/scripts.h, docs/fencing.md): a node that lost its
 * counter still hands out fences above the ones it granted before. */
#define LUA_ACQ                                                                \
    BATON_LUA_EFFECTS BATON_LUA_FENCE                                          \
    "if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then\n"       \
    "  return {1, fence_next(KEYS[2])}\n"                                      \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1])}\n"

/* KEYS lock, fence counter; ARGV value, F -> 1 when the key is ours (the
 * counter is then >= F), 0 otherwise. Decimal strings compared exactly. */
#define LUA_FENCE                                                              \
    "if redis.call('type', KEYS[1]).ok ~= 'string'\n"                          \
    "   or redis.call('get', KEYS[1]) ~= ARGV[1] then\n"                       \
    "  return 0\n"                                                             \
    "end\n"                                                                    \
    "local cur = redis.call('get', KEYS[2]) or '0'\n"                          \
    "local f = ARGV[2]\n"                                                      \
    "if #cur < #f or (#cur == #f and cur < f) then\n"                          \
    "  redis.call('set', KEYS[2], f)\n"                                        \
    "end\n"                                                                    \
    "return 1\n"

/* KEYS lock; ARGV value, ttl ms -> 1 extended, 2 was free and is ours again
 * (a repair; it does not count towards the quorum), 0 someone else's. */
#define LUA_RENEW                                                              \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "if t == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then\n"        \
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"                              \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "if t == 'none' then\n"                                                    \
    "  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])\n"                   \
    "  return 2\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* KEYS lock, unlock channel; ARGV value -> 1 released, 0 not ours. An
 * unlock by the holder: waiters are woken. */
#define LUA_REL                                                                \
    "if redis.call('type', KEYS[1]).ok == 'string'\n"                          \
    "   and redis.call('get', KEYS[1]) == ARGV[1] then\n"                      \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  redis.call('publish', KEYS[2], 0)\n"                                    \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* KEYS lock; ARGV value -> 1 removed, 0 not ours. The clean-up of a failed
 * attempt: it removes our key where the attempt may have set it but wakes
 * nobody -- the lock was never ours, so nothing a waiter waits for changed,
 * and a waiter subscribed on the same channel would wake itself, reset its
 * backoff and spin (a node without the holder's key grants every attempt). */
#define LUA_REL_QUIET                                                          \
    "if redis.call('type', KEYS[1]).ok == 'string'\n"                          \
    "   and redis.call('get', KEYS[1]) == ARGV[1] then\n"                      \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* KEYS lock, fence counter -> {exists, pttl, value ('' unless a string), fence}. */
#define LUA_INFO                                                               \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "local f = redis.call('get', KEYS[2]) or '0'\n"                            \
    "if t == 'none' then return {0, -2, '', f} end\n"                          \
    "local v = ''\n"                                                           \
    "if t == 'string' then v = redis.call('get', KEYS[1]) end\n"               \
    "return {1, redis.call('pttl', KEYS[1]), v, f}\n"

/* An operator breaks the lock on one node. KEYS lock, fence counter,
 * unlock channel. The key goes when it is a lock (a SET NX string whose
 * value is not a number; anything else is left alone), a fence is drawn as
 * a grant draws it, and waiters are woken. -> {held here, fence, value}. */
#define LUA_BREAK                                                              \
    BATON_LUA_EFFECTS BATON_LUA_FENCE BATON_LUA_LOCK_OF                        \
    "local w = lock_of(KEYS[1], true)\n"                                       \
    "local v, held = '', 0\n"                                                  \
    "if w and string.sub(w, 1, 1) == '=' then\n"                               \
    "  v = string.sub(w, 2)\n"                                                 \
    "  held = 1\n"                                                             \
    "  redis.call('del', KEYS[1])\n"                                           \
    "end\n"                                                                    \
    "local f = fence_next(KEYS[2])\n"                                          \
    "redis.call('publish', KEYS[3], 0)\n"                                      \
    "return {held, f, v}\n"

/* KEYS fence counter; ARGV F -> 1: the counter is now >= F (set when it
 * was below). Decimal strings compared exactly. */
#define LUA_FENCE_MAX                                                          \
    "local cur = redis.call('get', KEYS[1]) or '0'\n"                          \
    "local f = ARGV[1]\n"                                                      \
    "if #cur < #f or (#cur == #f and cur < f) then\n"                          \
    "  redis.call('set', KEYS[1], f)\n"                                        \
    "end\n"                                                                    \
    "return 1\n"

enum { S_ACQ, S_FENCE, S_RENEW, S_REL, S_REL_QUIET, S_INFO, S_BREAK, S_FENCE_MAX, S_LIST, S_COUNT };
static const char *const script_body[S_COUNT] = { LUA_ACQ, LUA_FENCE, LUA_RENEW, LUA_REL, LUA_REL_QUIET, LUA_INFO,
                                                  LUA_BREAK, LUA_FENCE_MAX, BATON_LUA_LIST };
static char script_sha[S_COUNT][41];
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;

static void sha_init(void) {
    for (int s = 0; s < S_COUNT; s++) {
        unsigned char d[SHA_DIGEST_LENGTH];
        SHA1((const unsigned char *)script_body[s], strlen(script_body[s]), d);
        for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(script_sha[s] + 2 * i, 3, "%02x", d[i]);
    }
}

static rl_call script(int sid, int nkeys, const char *const *keys, int nargs, const char *const *args) {
    rl_call c;
    memset(&c, 0, sizeof c);
    c.body = script_body[sid];
    c.sha = script_sha[sid];
    c.nkeys = nkeys;
    c.keys = keys;
    c.nargs = nargs;
    c.args = args;
    return c;
}

/* ---- helpers ----------------------------------------------------------------------- */

#define MS 1000000LL

typedef struct {
    char *key;       /* prefix + name */
    char *fence;     /* baton_fence:{key} */
    char *channel;   /* baton_lock__channel:{key} */
} rl_lock;

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

#define derived baton__redis_prefixed

static void lock_clear(rl_lock *l) {
    free(l->key);
    free(l->fence);
    free(l->channel);
    memset(l, 0, sizeof *l);
}

static int lock_init(rl_eng *e, const char *name, rl_lock *l) {
    memset(l, 0, sizeof *l);
    size_t n = strlen(e->prefix) + strlen(name) + 1;
    l->key = malloc(n);
    if (l->key) {
        snprintf(l->key, n, "%s%s", e->prefix, name);
        l->fence = derived("baton_fence", l->key);
        l->channel = derived("baton_lock__channel", l->key);
    }
    if (!l->key || !l->fence || !l->channel) {
        lock_clear(l);
        return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    }
    return 0;
}

/* The value stored in every node's key: owner hex, a space, the description. */
typedef struct { char s[300]; } owner_value;

static void owner_value_of(const baton_owner *o, owner_value *v) {
    snprintf(v->s, sizeof v->s, "%s %s", o->hex, o->desc);
}

static int64_t drift_ns(uint32_t lease_ms) { return (int64_t)lease_ms * MS / 100 + 2 * MS; }

static int64_t node_timeout_ns(const rl_eng *e) { return (int64_t)e->node_timeout_ms * MS; }

/* Release, renewal and info wait this much longer when fewer than a quorum
 * answered within the node timeout (a node busy with fsync, say). */
static int64_t slow_ns(const rl_eng *e) {
    int ms = e->nodes[0].cfg.io_timeout_ms < 2000 ? e->nodes[0].cfg.io_timeout_ms : 2000;
    return (int64_t)ms * MS;
}

static unsigned rnd(void) {
    static _Thread_local unsigned x;
    if (!x) x = (unsigned)baton_now_ns() ^ (unsigned)(uintptr_t)&x ^ 0x9e3779b9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

/* Uniform in [lo, hi] ns. */
static int64_t rnd_ns(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)(hi - lo) + 1;
    uint64_t r = ((uint64_t)rnd() << 32) | rnd();
    return lo + (int64_t)(r % span);
}

static void slots_on(rl_eng *e, rl_slot *s) {
    memset(s, 0, sizeof(rl_slot) * e->n);
    for (size_t i = 0; i < e->n; i++) s[i].state = RS_ON;
}

/* The first failed slot's message, for error texts. */
static const char *first_failure(rl_eng *e, const rl_slot *s, int *code) {
    for (size_t i = 0; i < e->n; i++)
        if (s[i].state == RS_FAIL) {
            if (code) *code = s[i].err;
            return s[i].msg;
        }
    if (code) *code = 0;
    return "";
}

/* A reply of the wrong shape: the node counts as failed (EPROTO). */
static void slot_bad(rl_eng *e, rl_slot *s, size_t i, const char *what) {
    s[i].state = RS_FAIL;
    s[i].err = BATON_EPROTO;
    snprintf(s[i].msg, sizeof s[i].msg, "%s: unexpected reply to %s", e->nodes[i].label, what);
}

static int int_reply(const redisReply *r, long long *v) {
    if (!r || r->type != REDIS_REPLY_INTEGER) return 0;
    *v = r->integer;
    return 1;
}

/* ---- open / close -------------------------------------------------------------- */

static void eng_free(rl_eng *e) {
    if (!e) return;
    rl_nodes_destroy(e);
    if (e->nodes)
        for (size_t i = 0; i < e->n; i++) free(e->nodes[i].cfg.host);
    free(e->nodes);
    free(e->user);
    free(e->password);
    if (e->ssl_ctx) SSL_CTX_free(e->ssl_ctx);
    free(e->prefix);
    free(e);
}

static int einval(const char *fmt, const char *a, const char *b) {
    return baton_seterr(BATON_EINVAL, 0, fmt, a, b);
}

static int parse_config(rl_eng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *o) {
    const char *red = u->redacted ? u->redacted : "uri";
    if (!u->scheme || strcmp(u->scheme, "redlock") != 0)
        return einval("redlock: unsupported scheme '%s'%s", u->scheme ? u->scheme : "", "");
    size_t n = u->nhosts;
    if (n == 0 || !u->hosts) return einval("redlock: %s: no nodes (want redlock://h1:6379,h2:6379,h3:6379)%s", red, "");
    if (n > RL_MAX_NODES) {
        char lim[16];
        snprintf(lim, sizeof lim, "%d", RL_MAX_NODES);
        return einval("redlock: %s: too many nodes (at most %s)", red, lim);
    }
    e->nodes = calloc(n, sizeof *e->nodes);
    if (!e->nodes) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    e->n = n;
    e->quorum = n / 2 + 1;
    for (size_t i = 0; i < n; i++) {
        const baton_uri_host *h = &u->hosts[i];
        if (!h->host || !*h->host) return einval("redlock: %s: a node without a host%s", red, "");
        if (h->port < 0 || h->port > 65535) return einval("redlock: %s: bad port for node '%s'", red, h->host);
        int port = h->port ? h->port : 6379;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(e->nodes[k].cfg.host, h->host) && e->nodes[k].cfg.port == port)
                return einval("redlock: node '%s' is listed twice in %s (each node must be independent)",
                              e->nodes[k].label, red);
        e->nodes[i].cfg.host = xstrdup(h->host);
        if (!e->nodes[i].cfg.host) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
        e->nodes[i].cfg.port = port;
        snprintf(e->nodes[i].label, sizeof e->nodes[i].label, strchr(h->host, ':') ? "[%s]:%d" : "%s:%d",
                 h->host, port);
    }

    const char *pw = NULL;
    if (o && o->password) pw = o->password;
    else if (u->password && *u->password) pw = u->password;
    else if (getenv("BATON_REDIS_PASSWORD") && *getenv("BATON_REDIS_PASSWORD")) pw = getenv("BATON_REDIS_PASSWORD");
    else if (getenv("REDISCLI_AUTH") && *getenv("REDISCLI_AUTH")) pw = getenv("REDISCLI_AUTH");
    if (pw && !(e->password = xstrdup(pw))) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    if (u->user && *u->user && !(e->user = xstrdup(u->user)))
        return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");

    long db = 0;
    if (u->path && *u->path && rparse_int(u->path, 0, INT_MAX, &db))
        return einval("redlock: bad database number '%s' (want /0, /1, ...)%s", u->path, "");

    int connect_ms = o && o->connect_timeout_ms > 0 && o->connect_timeout_ms < 250 ? o->connect_timeout_ms : 250;
    int io_ms = o && o->io_timeout_ms > 0 ? o->io_timeout_ms : 5000;
    int tls = baton_opts_bool(uo, "tls"), insecure = baton_opts_bool(uo, "insecure");
    const char *cacert = baton_opts_str(uo, "cacert"), *cert = baton_opts_str(uo, "cert");
    const char *key = baton_opts_str(uo, "key"), *prefix = baton_opts_str(uo, "prefix");
    if (strcmp(baton_opts_str(uo, "layout"), "simple"))
        return baton_seterr(BATON_ENOTSUP, 0, "redlock: layout '%s' is not supported: RedLock uses the "
                            "SET NX PX (simple) layout on every node", baton_opts_str(uo, "layout"));
    e->node_timeout_ms = (int)baton_opts_int(uo, "node_timeout_ms");
    e->retry_delay_ms = (int)baton_opts_int(uo, "retry_delay_ms");
    if (baton_opts_given(uo, "connect_timeout_ms")) connect_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    if (baton_opts_given(uo, "io_timeout_ms")) io_ms = (int)baton_opts_int(uo, "io_timeout_ms");
    if (!tls && (cacert || cert || key || insecure))
        return einval("redlock: options cacert, cert, key and insecure need tls=1%s%s", "", "");
    if (key && !cert) return einval("redlock: option 'key' needs 'cert'%s%s", "", "");
    if (!(e->prefix = xstrdup(prefix))) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    if (tls) {
        int rc = rtls_ctx_new(&e->ssl_ctx, cacert, cert, key, insecure);
        if (rc) return rc;
    }
    for (size_t i = 0; i < n; i++) {
        rcfg *c = &e->nodes[i].cfg;
        c->user = e->user;
        c->password = e->password;
        c->db = (int)db;
        c->tls = tls;
        c->insecure = insecure;
        c->ssl_ctx = e->ssl_ctx;
        c->connect_timeout_ms = connect_ms;
        c->io_timeout_ms = io_ms;
    }

#ifdef BATON_TEST_HOOKS
    /* Test builds only (redlock_int.h, tests/redlock): a pause between
     * sending a round's requests and reading the replies. */
    const char *pm = getenv("BATON_REDLOCK_TEST_PAUSE_MS");
    if (pm && *pm) {
        long ms;
        if (!strcmp(pm, "stop")) e->pause_ms = -1;
        else if (!rparse_int(pm, 1, 600000, &ms)) e->pause_ms = (int)ms;
        if (e->pause_ms) {
            const char *at = getenv("BATON_REDLOCK_TEST_PAUSE_AT");
            e->pause_at = at && !strcmp(at, "fence") ? RL_HOOK_FENCE : RL_HOOK_ACQUIRE;
        }
    }
#endif
    return 0;
}

static int rl_open(void **out, const baton_uri *u, const baton_opts *uo, const baton_client_options *o) {
    *out = NULL;
    int lrc = baton__ossl_load(); /* script digests and TLS */
    if (lrc) return lrc;
    pthread_once(&sha_once, sha_init);
    rl_eng *e = calloc(1, sizeof *e);
    if (!e) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    int rc = parse_config(e, u, uo, o);
    if (!rc) rc = rl_nodes_init(e);
    if (rc) {
        eng_free(e);
        return rc;
    }

    /* Reach the nodes now, so a wrong address or password fails here: a
     * majority must answer PING. */
    rl_slot s[RL_MAX_NODES];
    slots_on(e, s);
    static const char *const ping[1] = { "PING" };
    rl_call call;
    memset(&call, 0, sizeof call);
    call.raw = ping;
    call.nraw = 1;
    rl_round_opts ro = { .timeout_ns = (int64_t)e->nodes[0].cfg.connect_timeout_ms * MS, .all_nodes = 1 };
    rl_round(e, s, &call, &ro, NULL);
    size_t ok = 0;
    int auth = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state == RS_DONE) {
            const redisReply *r = s[i].reply;
            if (r->type == REDIS_REPLY_STATUS && r->str && !strcasecmp(r->str, "PONG")) ok++;
            else slot_bad(e, s, i, "PING");
        }
        if (s[i].state == RS_FAIL && s[i].err == BATON_EAUTH) auth = 1;
    }
    if (ok < e->quorum || auth) {
        int code = 0;
        const char *why = first_failure(e, s, &code);
        if (auth) {
            for (size_t i = 0; i < e->n; i++)
                if (s[i].state == RS_FAIL && s[i].err == BATON_EAUTH) { why = s[i].msg; break; }
            rc = baton_seterr(BATON_EAUTH, 0, "redlock: %s", why);
        } else {
            rc = baton_seterr(code == BATON_EPROTO ? BATON_EPROTO : BATON_EUNAVAILABLE, 0,
                              "redlock: only %zu of %zu nodes answered (a quorum is %zu): %s", ok, e->n,
                              e->quorum, why);
        }
        rl_slots_reset(e, s);
        eng_free(e);
        return rc;
    }
    rl_slots_reset(e, s);
    *out = e;
    return 0;
}

static void rl_close(void *eng) { eng_free(eng); }

/* ---- locks ------------------------------------------------------------------------ */

static int rl_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st) {
    rl_eng *e = eng;
    *st = NULL;
    if (opts && opts->fair) return baton_seterr(BATON_ENOTSUP, 0, "redlock: fair locks are not supported");
    rl_lock *l = malloc(sizeof *l);
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    int rc = lock_init(e, name, l);
    if (rc) {
        free(l);
        return rc;
    }
    *st = l;
    return 0;
}

static void rl_lock_free(void *eng, void *st) {
    (void)eng;
    rl_lock *l = st;
    if (!l) return;
    lock_clear(l);
    free(l);
}

typedef struct {
    size_t yes, no, failed;
    char why[400];           /* the first failure */
} tally;

/* Runs the owner-checked release on the nodes in MASK (NULL = all): yes =
 * released, no = not ours there, failed = no answer. QUIET: the clean-up of
 * an attempt that was not granted, which publishes nothing (LUA_REL_QUIET). */
static void release_round(rl_eng *e, rl_lock *l, const char *value, const unsigned char *mask, int quiet, int64_t hard,
                          tally *t) {
    rl_slot s[RL_MAX_NODES];
    memset(t, 0, sizeof *t);
    memset(s, 0, sizeof(rl_slot) * e->n);
    size_t on = 0;
    for (size_t i = 0; i < e->n; i++)
        if (!mask || mask[i]) {
            s[i].state = RS_ON;
            on++;
        }
    if (!on) return;
    const char *keys[2] = { l->key, l->channel };
    const char *args[1] = { value };
    rl_call call = quiet ? script(S_REL_QUIET, 1, keys, 1, args) : script(S_REL, 2, keys, 1, args);
    rl_round_opts ro = { .timeout_ns = node_timeout_ns(e), .enough = e->quorum, .grace_ns = slow_ns(e),
                         .hard_deadline = hard, .all_nodes = 1 };
    rl_round(e, s, &call, &ro, NULL);
    for (size_t i = 0; i < e->n; i++) {
        long long v;
        if (s[i].state == RS_DONE) {
            if (!int_reply(s[i].reply, &v)) slot_bad(e, s, i, "the release script");
            else if (v == 1) t->yes++;
            else t->no++;
        }
        if (s[i].state == RS_FAIL) t->failed++;
    }
    snprintf(t->why, sizeof t->why, "%s", first_failure(e, s, NULL));
    rl_slots_reset(e, s);
}

enum { OUT_GRANTED, OUT_HELD, OUT_SPLIT, OUT_UNAVAILABLE, OUT_EXPIRED };

typedef struct {
    int outcome;             /* OUT_* */
    int code;                /* the code to return for it */
    int64_t free_in;         /* OUT_HELD: ns until a majority may be free (-1 unknown) */
    char why[1024];
} attempt_res;

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* The I/O timeout of one call from now (monotonic ns). */
static int64_t io_end(const rl_eng *e) { return baton_now_ns() + (int64_t)e->nodes[0].cfg.io_timeout_ms * MS; }

/* One RedLock attempt (see the top of the file), every round of it (the
 * clean-up included) ended by BOUND. Returns 0 with the outcome in *a, or a
 * fatal error (authentication, memory). */
static int attempt(rl_eng *e, rl_lock *l, baton_acquire_req *req, const char *value, int64_t bound, attempt_res *a) {
    uint32_t lease_ms = req->lease_ms ? req->lease_ms : 30000;
    int64_t lease_ns = (int64_t)lease_ms * MS, drift = drift_ns(lease_ms);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms);
    const char *keys[2] = { l->key, l->fence };
    const char *args[2] = { value, lease };
    rl_call acq = script(S_ACQ, 2, keys, 2, args);
    memset(a, 0, sizeof *a);
    a->free_in = -1;

    rl_slot s[RL_MAX_NODES];
    slots_on(e, s);
    int64_t tmo = node_timeout_ns(e);
    if (tmo > lease_ns - drift) tmo = lease_ns - drift > MS ? lease_ns - drift : MS;
    int64_t first = 0;
    rl_round_opts ro = { .timeout_ns = tmo, .hard_deadline = bound, .hook = RL_HOOK_ACQUIRE };
    rl_round(e, s, &acq, &ro, &first);

    unsigned char yes_node[RL_MAX_NODES] = { 0 }, mine[RL_MAX_NODES] = { 0 };
    long long pttl[RL_MAX_NODES];
    size_t yes = 0, no = 0, failed = 0;
    uint64_t F = 0;
    int auth = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state == RS_DONE) {
            const redisReply *r = s[i].reply;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
                r->element[1]->type == REDIS_REPLY_INTEGER) {
                long long g = r->element[0]->integer, x = r->element[1]->integer;
                if (g == 1 && x > 0) {
                    yes++;
                    yes_node[i] = mine[i] = 1;
                    if ((uint64_t)x > F) F = (uint64_t)x;
                } else if (g == 0) {
                    pttl[no++] = x;
                } else {
                    slot_bad(e, s, i, "the acquire script");
                }
            } else {
                slot_bad(e, s, i, "the acquire script");
            }
        }
        if (s[i].state == RS_FAIL) {
            failed++;
            mine[i] = (unsigned char)s[i].sent; /* the request may have been applied */
            if (s[i].err == BATON_EAUTH) auth = 1;
        }
    }
    int64_t validity_end = first + lease_ns - drift;
    int decided = 0;
    if (yes >= e->quorum) {
        int64_t now = baton_now_ns();
        if (now < validity_end) {
            /* Write the fence back to the yes-nodes; a majority must confirm
             * while the key is still ours there. */
            rl_slot s2[RL_MAX_NODES];
            memset(s2, 0, sizeof(rl_slot) * e->n);
            for (size_t i = 0; i < e->n; i++) s2[i].state = yes_node[i] ? RS_ON : RS_OFF;
            char fs[24];
            snprintf(fs, sizeof fs, "%" PRIu64, F);
            const char *a2[2] = { value, fs };
            rl_call fc = script(S_FENCE, 2, keys, 2, a2);
            rl_round_opts ro2 = { .timeout_ns = node_timeout_ns(e),
                                  .hard_deadline = bound && bound < validity_end ? bound : validity_end,
                                  .hook = RL_HOOK_FENCE };
            rl_round(e, s2, &fc, &ro2, NULL);
            size_t ok = 0;
            long long v;
            for (size_t i = 0; i < e->n; i++) {
                if (s2[i].state != RS_DONE) continue;
                if (!int_reply(s2[i].reply, &v)) slot_bad(e, s2, i, "the fence script");
                else if (v == 1) ok++;
            }
            now = baton_now_ns();
            if (ok >= e->quorum && now < validity_end) {
                rl_slots_reset(e, s2);
                rl_slots_reset(e, s);
                req->fence = F;
                /* The core takes the drift margin off every lease itself
                 * (lock.c): its deadline is then first send + lease - drift,
                 * the validity's end. */
                req->sent_ns = first;
                a->outcome = OUT_GRANTED;
                return 0;
            }
            if (now >= validity_end) {
                a->outcome = OUT_EXPIRED;
                snprintf(a->why, sizeof a->why,
                         "a majority granted it but the validity ran out while the fence was written back "
                         "(%lld ms after the first request, lease %" PRIu32 " ms)",
                         (long long)((now - first) / MS), lease_ms);
            } else {
                a->outcome = OUT_SPLIT;
                snprintf(a->why, sizeof a->why, "the fence write-back reached only %zu of %zu nodes (a quorum is %zu)%s%s",
                         ok, e->n, e->quorum, *first_failure(e, s2, NULL) ? ": " : "", first_failure(e, s2, NULL));
            }
            rl_slots_reset(e, s2);
        } else {
            a->outcome = OUT_EXPIRED;
            snprintf(a->why, sizeof a->why,
                     "a majority granted it but the validity had run out when the replies were read "
                     "(%lld ms after the first request, lease %" PRIu32 " ms)",
                     (long long)((now - first) / MS), lease_ms);
        }
        decided = 1;
    }

    /* Not granted: release wherever our key may be. */
    char why0[400];
    snprintf(why0, sizeof why0, "%s", first_failure(e, s, NULL));
    rl_slots_reset(e, s);
    tally t;
    release_round(e, l, value, mine, 1, bound, &t);

    if (auth && yes + no < e->quorum)
        return baton_seterr(BATON_EAUTH, 0, "redlock: '%s': %s", l->key, why0);
    if (!decided) {
        if (no > e->n - e->quorum) {
            a->outcome = OUT_HELD;
            /* Free once enough of the holder's keys expired for a majority. */
            qsort(pttl, no, sizeof pttl[0], cmp_ll);
            size_t k = no - (e->n - e->quorum);
            long long p = pttl[k - 1];
            a->free_in = p >= 0 ? p * MS : (p == -2 ? 0 : -1);
            for (size_t i = 0; i < k; i++)
                if (pttl[i] == -1) a->free_in = -1; /* a key without expiry */
            snprintf(a->why, sizeof a->why, "held by another owner on %zu of %zu nodes", no, e->n);
        } else if (failed > e->n - e->quorum) {
            a->outcome = OUT_UNAVAILABLE;
            snprintf(a->why, sizeof a->why, "only %zu of %zu nodes answered (a quorum is %zu): %s", e->n - failed,
                     e->n, e->quorum, why0);
        } else {
            a->outcome = OUT_SPLIT;
            snprintf(a->why, sizeof a->why,
                     "no majority: %zu of %zu nodes granted, %zu held by another owner, %zu did not answer", yes,
                     e->n, no, failed);
        }
    }
    a->code = a->outcome == OUT_UNAVAILABLE ? BATON_EUNAVAILABLE
              : a->outcome == OUT_EXPIRED   ? BATON_ETIMEDOUT
                                            : BATON_ELOCKED;
    return 0;
}

/* Parks until UNTIL or cancel, ignoring wake-ups. */
static int park_until(baton_waiter *w, int64_t until) {
    while (baton_now_ns() < until) {
        if (baton_waiter_park(w, baton_waiter_gen(w), until) == BATON_ECANCELED || baton_waiter_canceled(w))
            return BATON_ECANCELED;
    }
    return 0;
}

#define BACKOFF_START_NS (10 * MS)
#define BACKOFF_MAX_NS (200 * MS)
#define WAKE_JITTER_NS (2 * MS)

static int rl_lock_acquire(void *eng, void *st, baton_acquire_req *req) {
    rl_eng *e = eng;
    rl_lock *l = st;
    owner_value v;
    owner_value_of(req->owner, &v);
    attempt_res a;
    /* The call ends by max(its wait deadline, now + io timeout); a try by
     * now + io timeout. */
    int64_t bound = io_end(e);
    if (req->deadline_ns == INT64_MAX) bound = 0;
    else if (req->deadline_ns > bound) bound = req->deadline_ns;
    int rc = attempt(e, l, req, v.s, bound, &a);
    if (rc) return rc;
    if (a.outcome == OUT_GRANTED) return 0;
    if (req->deadline_ns == 0) return baton_seterr(a.code, 0, "redlock: '%s': %s", l->key, a.why);
    if (!req->waiter) return baton_seterr(BATON_EINVAL, 0, "redlock: a waiting acquire needs a waiter");

    /* Unlock messages from any node wake the wait early; the backoff bounds
     * it when they do not come (foreign releasers, expiry, a node down). */
    rsub_entry *se[RL_MAX_NODES];
    for (size_t i = 0; i < e->n; i++)
        if (rsub_register(&e->nodes[i].sub, l->channel, 0, req->waiter, &se[i]) != 0) se[i] = NULL;
    int64_t backoff = BACKOFF_START_NS;
    for (;;) {
        if (baton_waiter_canceled(req->waiter)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redlock: acquire of '%s' canceled", l->key);
            break;
        }
        int64_t now = baton_now_ns();
        if (now >= req->deadline_ns) {
            rc = baton_seterr(a.outcome == OUT_UNAVAILABLE ? BATON_EUNAVAILABLE : BATON_ETIMEDOUT, 0,
                              "redlock: '%s': the wait ran out: %s", l->key, a.why);
            break;
        }
        unsigned g = baton_waiter_gen(req->waiter);
        int64_t delay;
        if (a.outcome == OUT_HELD) {
            delay = a.free_in >= 0 && a.free_in + MS < backoff ? a.free_in + MS : backoff;
            backoff = backoff * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : backoff * 2;
        } else if (a.outcome == OUT_UNAVAILABLE) {
            delay = rnd_ns(backoff / 2, backoff);
            backoff = backoff * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : backoff * 2;
        } else {
            /* A split vote or a late majority: retry after a random delay, so
             * that contenders do not collide again. */
            delay = rnd_ns(MS, (int64_t)e->retry_delay_ms * MS);
        }
        int64_t until = now + delay < req->deadline_ns ? now + delay : req->deadline_ns;
        if (baton_waiter_park(req->waiter, g, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redlock: acquire of '%s' canceled", l->key);
            break;
        }
        if (baton_now_ns() < until) {
            /* Woken by an unlock message: every waiter heard it at once, so
             * each waits a little random time before voting. */
            int64_t j = baton_now_ns() + rnd_ns(0, WAKE_JITTER_NS);
            if (park_until(req->waiter, j < req->deadline_ns ? j : req->deadline_ns) == BATON_ECANCELED) {
                rc = baton_seterr(BATON_ECANCELED, 0, "redlock: acquire of '%s' canceled", l->key);
                break;
            }
            backoff = BACKOFF_START_NS;
        }
        /* Parked until the deadline: the wait is over. An attempt now would
         * be cut at once by the bound (and with it the clean-up of a node it
         * won), answering "unavailable" for a lock that is simply held. */
        if (baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(a.outcome == OUT_UNAVAILABLE ? BATON_EUNAVAILABLE : BATON_ETIMEDOUT, 0,
                              "redlock: '%s': the wait ran out: %s", l->key, a.why);
            break;
        }
        rc = attempt(e, l, req, v.s, bound, &a);
        if (rc || a.outcome == OUT_GRANTED) break;
    }
    for (size_t i = 0; i < e->n; i++)
        if (se[i]) rsub_unregister(&e->nodes[i].sub, se[i]);
    return rc;
}

static int rl_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    rl_eng *e = eng;
    rl_lock *l = st;
    if (!lease_ms) lease_ms = 30000;
    int64_t hard = deadline_ns > 0 && deadline_ns != INT64_MAX ? deadline_ns : 0;
    owner_value v;
    owner_value_of(owner, &v);
    if (hard && baton_now_ns() >= hard)
        return baton_seterr(BATON_ELOST, 0, "redlock: '%s': the renewal is past the validity", l->key);
    /* The nodes keep the key for lease + drift, so it outlives the client's
     * new deadline (renewal start + lease) even on a node whose clock runs
     * up to 1% fast. */
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%" PRIu64, (uint64_t)lease_ms + lease_ms / 100 + 3);
    const char *keys[1] = { l->key };
    const char *args[2] = { v.s, ttl };
    rl_call call = script(S_RENEW, 1, keys, 2, args);
    rl_slot s[RL_MAX_NODES];
    slots_on(e, s);
    rl_round_opts ro = { .timeout_ns = node_timeout_ns(e), .enough = e->quorum, .grace_ns = slow_ns(e), .hard_deadline = hard };
    rl_round(e, s, &call, &ro, NULL);
    size_t ext = 0, rep = 0, other = 0, failed = 0;
    for (size_t i = 0; i < e->n; i++) {
        long long x;
        if (s[i].state == RS_DONE) {
            if (!int_reply(s[i].reply, &x)) slot_bad(e, s, i, "the renewal script");
            else if (x == 1) ext++;
            else if (x == 2) rep++;
            else other++;
        }
        if (s[i].state == RS_FAIL) failed++;
    }
    char why[400];
    snprintf(why, sizeof why, "%s", first_failure(e, s, NULL));
    rl_slots_reset(e, s);
    int64_t now = baton_now_ns();
    if (ext >= e->quorum && (!hard || now < hard)) return 0;
    if (other + rep > e->n - e->quorum || (hard && now >= hard)) {
        /* Lost: take our keys back (the repaired ones included). */
        tally t;
        release_round(e, l, v.s, NULL, 0, hard ? hard : io_end(e), &t);
        if (other + rep > e->n - e->quorum)
            return baton_seterr(BATON_ELOST, 0, "redlock: '%s' is no longer held by this owner on %zu of %zu nodes",
                                l->key, other + rep, e->n);
        return baton_seterr(BATON_ELOST, 0,
                            "redlock: '%s': the renewal did not reach a majority within the validity "
                            "(%zu of %zu nodes, a quorum is %zu)%s%s",
                            l->key, ext, e->n, e->quorum, *why ? ": " : "", why);
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "redlock: '%s': the renewal reached %zu of %zu nodes (a quorum is %zu): %s",
                        l->key, ext, e->n, e->quorum, why);
}

static int rl_lock_release(void *eng, void *st, const baton_owner *owner) {
    rl_eng *e = eng;
    rl_lock *l = st;
    owner_value v;
    owner_value_of(owner, &v);
    tally t;
    release_round(e, l, v.s, NULL, 0, io_end(e), &t);
    if (t.no >= e->quorum)
        return baton_seterr(BATON_ELOST, 0, "redlock: '%s' is no longer held by this owner on %zu of %zu nodes",
                            l->key, t.no, e->n);
    if (t.yes + t.no >= e->quorum) return 0;
    return baton_seterr(BATON_EUNAVAILABLE, 0,
                        "redlock: '%s': the release reached only %zu of %zu nodes; the others keep the key until "
                        "its lease ends: %s", l->key, t.yes + t.no, e->n, t.why);
}

static int rl_lock_info(void *eng, const char *name, baton_lockinfo *out) {
    rl_eng *e = eng;
    rl_lock l;
    int rc = lock_init(e, name, &l);
    if (rc) return rc;
    const char *keys[2] = { l.key, l.fence };
    rl_call call = script(S_INFO, 2, keys, 0, NULL);
    rl_slot s[RL_MAX_NODES];
    slots_on(e, s);
    rl_round_opts ro = { .timeout_ns = node_timeout_ns(e), .enough = e->quorum, .grace_ns = slow_ns(e),
                         .hard_deadline = io_end(e) };
    rl_round(e, s, &call, &ro, NULL);
    size_t answered = 0;
    uint64_t fence = 0, fences[RL_MAX_NODES];
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state != RS_DONE) continue;
        const redisReply *r = s[i].reply;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 || r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_STRING ||
            r->element[3]->type != REDIS_REPLY_STRING) {
            slot_bad(e, s, i, "the info script");
            continue;
        }
        char *end;
        errno = 0;
        unsigned long long f = strtoull(r->element[3]->str, &end, 10);
        fences[answered++] = (!errno && !*end) ? (uint64_t)f : 0;
    }
    /* The last granted fence is the largest a majority has reached: a grant
     * writes its fence back to a majority, while a node that answered an
     * attempt too late (not counted, its key removed) may have drawn a
     * larger, clock-based value that nobody holds. */
    for (size_t i = 1; i < answered; i++)
        for (size_t k = i; k > 0 && fences[k] > fences[k - 1]; k--) {
            uint64_t t = fences[k];
            fences[k] = fences[k - 1];
            fences[k - 1] = t;
        }
    if (answered >= e->quorum) fence = fences[e->quorum - 1];
    if (answered < e->quorum) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redlock: info on '%s': only %zu of %zu nodes answered (a quorum is %zu): %s",
                          l.key, answered, e->n, e->quorum, first_failure(e, s, NULL));
        rl_slots_reset(e, s);
        lock_clear(&l);
        return rc;
    }
    out->version = BATON_LOCK_INFO_VERSION;
    out->fence = fence;
    out->held = 0;
    out->holder[0] = 0;
    out->remaining_ms = 0;
    /* Held when one value is on a majority; its remaining time is how long
     * a majority still has it. */
    for (size_t i = 0; i < e->n && !out->held; i++) {
        if (s[i].state != RS_DONE || s[i].reply->element[0]->integer != 1) continue;
        const char *val = s[i].reply->element[2]->str;
        long long pt[RL_MAX_NODES];
        size_t c = 0;
        for (size_t j = 0; j < e->n; j++)
            if (s[j].state == RS_DONE && s[j].reply->element[0]->integer == 1 &&
                !strcmp(s[j].reply->element[2]->str, val)) {
                long long p = s[j].reply->element[1]->integer;
                pt[c++] = p < 0 ? LLONG_MAX : p;
            }
        if (c < e->quorum) continue;
        qsort(pt, c, sizeof pt[0], cmp_ll);
        long long rem = pt[c - e->quorum];
        out->held = 1;
        out->remaining_ms = rem == LLONG_MAX ? -1 : rem;
        const char *sp = strchr(val, ' ');
        snprintf(out->holder, sizeof out->holder, "%s", sp ? sp + 1 : val);
    }
    rl_slots_reset(e, s);
    lock_clear(&l);
    return 0;
}

/* ---- engine counters ---------------------------------------------------------------- */

/* Every node's INFO commandstats, the caller adds them up: all nodes must
 * answer, or the sum would go down while one is away. */
static int rl_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg) {
    rl_eng *e = eng;
    static const char *const info[2] = { "INFO", "commandstats" };
    rl_call call;
    memset(&call, 0, sizeof call);
    call.raw = info;
    call.nraw = 2;
    rl_slot s[RL_MAX_NODES];
    slots_on(e, s);
    rl_round_opts ro = { .timeout_ns = (int64_t)e->nodes[0].cfg.io_timeout_ms * MS, .all_nodes = 1 };
    rl_round(e, s, &call, &ro, NULL);
    size_t ok = 0;
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state == RS_DONE && s[i].reply->type != REDIS_REPLY_STRING) slot_bad(e, s, i, "INFO commandstats");
        ok += s[i].state == RS_DONE;
    }
    int rc = 0;
    if (ok < e->n) {
        int code = 0;
        const char *why = first_failure(e, s, &code);
        rc = baton_seterr(code == BATON_EPROTO || code == BATON_EAUTH ? code : BATON_EUNAVAILABLE, 0,
                          "redlock: INFO commandstats: %zu of %zu nodes answered: %s", ok, e->n, why);
    } else {
        for (size_t i = 0; i < e->n; i++) baton__redis_cmdstats(s[i].reply->str, s[i].reply->len, fn, arg);
    }
    rl_slots_reset(e, s);
    return rc;
}

/* ---- operators: list and break ------------------------------------------------------ */

typedef struct {
    char *name;              /* without the prefix */
    char *value;
    size_t node;
} rl_seen;

typedef struct {
    rl_seen *v;
    size_t n, cap, node, plen;
} seen_vec;

static int seen_add(void *arg, const char *key, const char *what) {
    seen_vec *sv = arg;
    if (what[0] != '=') return 0; /* RedLock keys are SET NX strings only */
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 64;
        rl_seen *v = realloc(sv->v, cap * sizeof *v);
        if (!v) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
        sv->v = v;
        sv->cap = cap;
    }
    rl_seen *x = &sv->v[sv->n];
    x->name = strdup(key + sv->plen);
    x->value = strdup(what + 1);
    x->node = sv->node;
    if (!x->name || !x->value) {
        free(x->name);
        free(x->value);
        return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    }
    sv->n++;
    return 0;
}

static int cmp_seen(const void *a, const void *b) {
    const rl_seen *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (!c) c = strcmp(x->value, y->value);
    if (!c) c = x->node < y->node ? -1 : x->node > y->node;
    return c;
}

/* Each node is walked on its own connection, one after the other, each
 * with its share of what is left of the io timeout (so a frozen node does
 * not starve the others). A name is listed when one value, i.e. one
 * holder, is on a majority of the nodes: what acquire calls a grant. */
static int rl_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg) {
    rl_eng *e = eng;
    int64_t deadline = io_end(e);
    seen_vec sv = { NULL, 0, 0, 0, strlen(e->prefix) };
    char **names = NULL, *pat = malloc(2 * (sv.plen + strlen(prefix)) + 2), why[300] = "";
    size_t answered = 0, nn = 0;
    int rc = 0;
    if (!pat) return baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
    baton__redis_glob_escape(pat, e->prefix);
    baton__redis_glob_escape(pat + strlen(pat), prefix);
    strcat(pat, "*");
    for (size_t i = 0; i < e->n; i++) {
        int64_t now = baton_now_ns(), share = (deadline - now) / (int64_t)(e->n - i);
        size_t mark = sv.n;
        rconn *c = NULL;
        int nrc;
        if (share <= 0) break;
        sv.node = i;
        nrc = rl_node_conn(e, i, &c, now + share);
        if (!nrc) nrc = baton__redis_scan_locks(c, script_sha[S_LIST], pat, 1, now + share, seen_add, &sv);
        if (c) rl_node_conn_put(e, i, c);
        if (nrc == BATON_ENOMEM) {
            rc = nrc;
            goto out;
        }
        if (nrc) {
            /* this node's names do not count: it did not finish */
            if (!why[0])
                snprintf(why, sizeof why, "%s: %s", e->nodes[i].label,
                         baton_error_last()->message ? baton_error_last()->message : baton_strerror(nrc));
            for (size_t k = mark; k < sv.n; k++) {
                free(sv.v[k].name);
                free(sv.v[k].value);
            }
            sv.n = mark;
            continue;
        }
        answered++;
    }
    if (answered < e->quorum) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redlock: list: only %zu of %zu nodes were walked within "
                          "io_timeout_ms (a quorum is %zu): %s", answered, e->n, e->quorum, why);
        goto out;
    }
    if (sv.n) qsort(sv.v, sv.n, sizeof *sv.v, cmp_seen); /* sv.v is NULL when nothing was seen */
    if (sv.n && !(names = malloc(sv.n * sizeof *names))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "redlock: out of memory");
        goto out;
    }
    for (size_t i = 0; i < sv.n;) {
        size_t j = i, nodes = 0;
        for (; j < sv.n && !strcmp(sv.v[j].name, sv.v[i].name) && !strcmp(sv.v[j].value, sv.v[i].value); j++)
            if (j == i || sv.v[j].node != sv.v[j - 1].node) nodes++; /* SCAN may return a key twice */
        if (nodes >= e->quorum) names[nn++] = sv.v[i].name;
        i = j;
    }
    baton__redis_names_emit(names, nn, fn, arg);
out:
    for (size_t k = 0; k < sv.n; k++) {
        free(sv.v[k].name);
        free(sv.v[k].value);
    }
    free(sv.v);
    free(names);
    free(pat);
    return rc;
}

/* Two rounds, as an acquire's: every node removes the key (a lock of any
 * owner) and draws a fence; F = the largest of them is written back to
 * every node (counter = max(counter, F)). Both rounds need a majority, so
 * the next grant's majority shares a node with this one and draws above F.
 * The old holder's renewal then finds its key gone on a majority (its
 * repairs count as lost) and answers BATON_ELOST. */
static int rl_lock_break(void *eng, const char *name, uint64_t *fence) {
    rl_eng *e = eng;
    rl_lock l;
    rl_slot s[RL_MAX_NODES];
    char fstr[24], why[400];
    uint64_t F = 0;
    size_t answered = 0, held = 0;
    int rc = lock_init(e, name, &l);
    if (rc) return rc;
    *fence = 0;
    const char *keys[3] = { l.key, l.fence, l.channel };
    rl_call call = script(S_BREAK, 3, keys, 0, NULL);
    rl_round_opts ro = { .timeout_ns = node_timeout_ns(e), .enough = e->quorum, .grace_ns = slow_ns(e),
                         .hard_deadline = io_end(e), .all_nodes = 1 };
    slots_on(e, s);
    rl_round(e, s, &call, &ro, NULL);
    for (size_t i = 0; i < e->n; i++) {
        if (s[i].state != RS_DONE) continue;
        const redisReply *r = s[i].reply;
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer <= 0 ||
            r->element[2]->type != REDIS_REPLY_STRING) {
            slot_bad(e, s, i, "the break script");
            continue;
        }
        answered++;
        if ((uint64_t)r->element[1]->integer > F) F = (uint64_t)r->element[1]->integer;
    }
    /* held when one value (one holder) was removed from a majority */
    for (size_t i = 0; i < e->n && held < e->quorum; i++) {
        if (s[i].state != RS_DONE || s[i].reply->element[0]->integer != 1) continue;
        held = 0;
        for (size_t j = 0; j < e->n; j++)
            if (s[j].state == RS_DONE && s[j].reply->element[0]->integer == 1 &&
                !strcmp(s[j].reply->element[2]->str, s[i].reply->element[2]->str))
                held++;
    }
    snprintf(why, sizeof why, "%s", first_failure(e, s, NULL));
    rl_slots_reset(e, s);
    if (answered < e->quorum) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redlock: break of '%s' reached only %zu of %zu nodes (a quorum "
                          "is %zu); the holder may keep it: %s", l.key, answered, e->n, e->quorum, why);
        goto out;
    }
    snprintf(fstr, sizeof fstr, "%" PRIu64, F);
    const char *fkeys[1] = { l.fence };
    const char *fargs[1] = { fstr };
    call = script(S_FENCE_MAX, 1, fkeys, 1, fargs);
    ro.hard_deadline = io_end(e);
    slots_on(e, s);
    rl_round(e, s, &call, &ro, NULL);
    answered = 0;
    for (size_t i = 0; i < e->n; i++) {
        long long v;
        if (s[i].state == RS_DONE && (!int_reply(s[i].reply, &v) || v != 1)) slot_bad(e, s, i, "the fence script");
        answered += s[i].state == RS_DONE;
    }
    snprintf(why, sizeof why, "%s", first_failure(e, s, NULL));
    rl_slots_reset(e, s);
    if (answered < e->quorum) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "redlock: break of '%s': the new fence reached only %zu of %zu "
                          "nodes (a quorum is %zu): %s", l.key, answered, e->n, e->quorum, why);
        goto out;
    }
    *fence = F;
    if (held < e->quorum)
        rc = baton_seterr(BATON_ENOTHELD, 0, "redlock: '%s' was not held on a majority; its fence was bumped", l.key);
out:
    lock_clear(&l);
    return rc;
}

static const baton_lock_methods rl_lock_methods = {
    .create = rl_lock_new,
    .destroy = rl_lock_free,
    .acquire = rl_lock_acquire,
    .release = rl_lock_release,
    .renew = rl_lock_renew,
    .info = rl_lock_info,
    .list = rl_lock_list,
    .force_unlock = rl_lock_break,
};

static const baton_services rl_services_methods = {
    .engine_ops = rl_engine_ops,
    .secret_env = "BATON_REDIS_PASSWORD",
};

const baton_backend baton__backend_redlock = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_redlock,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY,
    .open = rl_open,
    .close = rl_close,
    .lock = &rl_lock_methods,
    .services = &rl_services_methods,
};
