/*
 * The Redis backend: URI and options, the two key layouts (Redisson RLock /
 * RFencedLock hash, or SET NX PX string), the lock operations, and waiting
 * on pub/sub through the client's subscriber (sub.c).
 *
 * URI: redis://[user[:password]@]host[:port][/db][?options], rediss:// = TLS.
 * Options: prefix, layout=redisson|simple, cacert, cert, key, insecure,
 * connect_timeout_ms, io_timeout_ms, wait_replicas, wait_ms. See
 * docs/redis-layout.md. The fair and read-write locks live in locks.c, the
 * semaphores and the latch in prims.c.
 */
#include "rb.h"
#include "scripts.h"
#include "scripts_coord.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>


#define LAYOUT_REDISSON RB_LAYOUT_REDISSON
#define LAYOUT_SIMPLE RB_LAYOUT_SIMPLE

static const char *const script_body[S_COUNT] = {
    [S_ACQ_REDISSON] = BATON_LUA_ACQ_REDISSON,
    [S_REL_REDISSON] = BATON_LUA_REL_REDISSON,
    [S_RENEW_REDISSON] = BATON_LUA_RENEW_REDISSON,
    [S_ACQ_SIMPLE] = BATON_LUA_ACQ_SIMPLE,
    [S_REL_SIMPLE] = BATON_LUA_REL_SIMPLE,
    [S_RENEW_SIMPLE] = BATON_LUA_RENEW_SIMPLE,
    [S_INFO] = BATON_LUA_INFO,
    [S_FAIR_ACQ] = BATON_LUA_FAIR_ACQ,
    [S_FAIR_REL] = BATON_LUA_FAIR_REL,
    [S_FAIR_LEAVE] = BATON_LUA_FAIR_LEAVE,
    [S_RW_READ_ACQ] = BATON_LUA_RW_READ_ACQ,
    [S_RW_WRITE_ACQ] = BATON_LUA_RW_WRITE_ACQ,
    [S_RW_READ_REL] = BATON_LUA_RW_READ_REL,
    [S_RW_WRITE_REL] = BATON_LUA_RW_WRITE_REL,
    [S_RW_READ_RENEW] = BATON_LUA_RW_READ_RENEW,
    [S_RW_WRITE_RENEW] = BATON_LUA_RW_WRITE_RENEW,
    [S_RW_LEAVE] = BATON_LUA_RW_LEAVE,
    [S_SEM_ACQ] = BATON_LUA_SEM_ACQ,
    [S_SEM_REL] = BATON_LUA_SEM_REL,
    [S_SEM_CTL] = BATON_LUA_SEM_CTL,
    [S_PERMITS_ACQ] = BATON_LUA_PERMITS_ACQ,
    [S_PERMITS_REL] = BATON_LUA_PERMITS_REL,
    [S_PERMITS_RENEW] = BATON_LUA_PERMITS_RENEW,
    [S_PERMITS_CTL] = BATON_LUA_PERMITS_CTL,
    [S_LATCH_CTL] = BATON_LUA_LATCH_CTL,
    [S_LIST] = BATON_LUA_LIST,
    [S_BREAK] = BATON_LUA_BREAK,
    [S_VALUE] = BATON_LUA_VALUE,
    [S_GROUP_JOIN] = BATON_LUA_GROUP_JOIN,
    [S_GROUP_LEAVE] = BATON_LUA_GROUP_LEAVE,
    [S_GROUP_RENEW] = BATON_LUA_GROUP_RENEW,
    [S_GROUP_LIST] = BATON_LUA_GROUP_LIST,
    [S_QUEUE_PUT] = BATON_LUA_QUEUE_PUT,
    [S_QUEUE_TAKE] = BATON_LUA_QUEUE_TAKE,
    [S_QUEUE_ITEM] = BATON_LUA_QUEUE_ITEM,
    [S_QUEUE_SIZE] = BATON_LUA_QUEUE_SIZE,
};

/* Waiting in the simple layout: foreign clients (redis-py, redlock, redsync)
 * release without publishing, so each park is capped by a backoff that starts
 * at 2 ms and doubles up to 200 ms (with jitter). The same cap applies while
 * the subscription is not (yet) confirmed and while the server is unreachable. */
#define BACKOFF_START_MS 2
#define BACKOFF_MAX_MS 200
#define SUB_READY_WAIT_MS 250
/* A waiter never depends on a notification alone: foreign clients release
 * without publishing (redis-py, Redisson's expiry, a DEL by hand) and a
 * message can be lost with a connection. Every park is capped at the key's
 * TTL (the attempt's hint) and at RECHECK_MAX_MS (docs/redis-layout.md). */
#define RECHECK_MAX_MS 2000

/* ---- helpers ------------------------------------------------------------ */

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

/* The suffix form (Redisson's suffixName): "{name}:suffix" or "name:suffix";
 * "{name}" ("name") alone when suffix is NULL. */
char *baton__redis_suffixed(const char *key, const char *suffix) {
    int tagged = strchr(key, '{') != NULL;
    size_t n = strlen(key) + (suffix ? strlen(suffix) : 0) + 4;
    char *s = malloc(n);
    if (!s) return NULL;
    snprintf(s, n, tagged ? "%s%s%s" : "{%s}%s%s", key, suffix ? ":" : "", suffix ? suffix : "");
    return s;
}

/* A lock state owns its key alone: the other names are derived where they
 * are used (baton__redis_lname), not kept (issue 27: ~200 B a held lock). */
void baton__redis_lock_clear(rlock *l) {
    free(l->key);
    memset(l, 0, sizeof *l);
}

/* The derived names of a lock state (rb.h: RN_*). */
const char *baton__redis_lname(const rlock *l, int which, char *buf) {
    const char *p = NULL;
    int simple = l->kind == RK_PLAIN && l->layout == LAYOUT_SIMPLE, rw = l->kind == RK_READ || l->kind == RK_WRITE;
    switch (which) {
    case RN_FENCE: p = simple ? "baton_fence" : "redisson_lock_token"; break;
    case RN_HOLDER: p = simple ? "baton_fence" : "baton_holder"; break;
    case RN_CHANNEL:
        p = rw ? "redisson_rwlock" : simple ? "baton_lock__channel" : "redisson_lock__channel";
        break;
    case RN_QUEUE: p = l->kind == RK_FAIR ? "redisson_lock_queue" : NULL; break;
    case RN_TIMEOUTS: p = l->kind == RK_FAIR ? "redisson_lock_timeout" : rw ? "baton_rwlock_writers" : NULL; break;
    case RN_TPREFIX:
        if (!rw) return NULL;
        p = "";
        break;
    default: break;
    }
    if (!p) return NULL;
    /* "p:{key}" ("{key}" for the prefix; the key bare when it has a '{'
     * already), by hand: this runs for every command a lock sends, where
     * snprintf's cost showed. Fits: lock_init refuses a key over
     * RL_KEY_MAX (rb.h). */
    size_t pn = strlen(p), kn = strlen(l->key);
    int braced = memchr(l->key, '{', kn) != NULL;
    char *o = buf;
    memcpy(o, p, pn), o += pn;
    if (pn) *o++ = ':';
    if (!braced) *o++ = '{';
    memcpy(o, l->key, kn), o += kn;
    if (!braced) *o++ = '}';
    *o = 0;
    return buf;
}

int baton__redis_lock_init(reng *e, const char *name, int kind, rlock *l) {
    memset(l, 0, sizeof *l);
    size_t pn = strlen(e->prefix), nn = strlen(name), n = pn + nn + 1;
    if (n > RL_KEY_MAX)
        return baton_seterr(BATON_EINVAL, 0, "redis: the key of '%s' is %zu bytes; the limit is %d", name, n - 1,
                            RL_KEY_MAX - 1);
    char *key = malloc(n);
    if (!key) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    memcpy(key, e->prefix, pn);
    memcpy(key + pn, name, nn + 1);
    l->kind = kind;
    l->layout = e->layout;
    l->key = key;
    return 0;
}

/* On a cluster the scripts SPUBLISH (sharded pub/sub, Redis 7): the message
 * stays on the slot's shard instead of crossing the cluster bus to every
 * node, and Redisson in cluster mode publishes and listens that way too
 * (its getPublishCommand()). The fair lock's queue-entry channels keep
 * PUBLISH: their waiters listen with a pattern, which sharded pub/sub has
 * not. Made once from the single-server scripts, which stay as they are. */
static char *cluster_body[S_COUNT];
static pthread_once_t cluster_body_once = PTHREAD_ONCE_INIT;

static char *spublish_variant(const char *src) {
    static const char from[] = "redis.call('publish', ", to[] = "redis.call('spublish', ";
    size_t n = 0;
    for (const char *p = src; (p = strstr(p, from)) != NULL; p += sizeof from - 1) n++;
    char *out = malloc(strlen(src) + n * (sizeof to - sizeof from) + 1), *o = out;
    if (!out) return NULL;
    for (const char *p = src, *hit; *p; p = hit + sizeof from - 1) {
        if (!(hit = strstr(p, from))) {
            strcpy(o, p);
            return out;
        }
        memcpy(o, p, (size_t)(hit - p));
        o += hit - p;
        const char *eol = strchr(hit, '\n');
        size_t line = eol ? (size_t)(eol - hit) : strlen(hit);
        /* "prefix .. ':' .. e": a fair-lock queue entry's channel */
        int entry = 0;
        for (size_t k = 0; k + 3 <= line && !entry; k++) entry = !memcmp(hit + k, "':'", 3);
        memcpy(o, entry ? from : to, entry ? sizeof from - 1 : sizeof to - 1);
        o += entry ? sizeof from - 1 : sizeof to - 1;
    }
    *o = 0;
    return out;
}

static void make_cluster_bodies(void) {
    for (int i = 0; i < S_COUNT; i++) cluster_body[i] = spublish_variant(script_body[i]);
}

static const char *body_of(const reng *e, int sid) {
    return e->cfg.cluster && cluster_body[sid] ? cluster_body[sid] : script_body[sid];
}

const char *baton__redis_script_body(const reng *e, int sid) { return body_of(e, sid); }

static void rlock_clear(rlock *l) { baton__redis_lock_clear(l); }

static void sha1_hex(const char *s, char out[41]) {
    unsigned char d[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)s, strlen(s), d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The bound of the public call this thread is in (monotonic ns; INT64_MAX:
 * none): every round trip of the call, its clean-ups included, ends by it.
 * Thread-local, because the call runs on its caller's thread and the helpers
 * that do its I/O (scripts, undo, leave, WAIT) are shared by every kind. */
static _Thread_local int64_t call_bound = INT64_MAX;

static int64_t io_ns(const reng *e) { return (int64_t)e->cfg.io_timeout_ms * 1000000; }

int64_t baton__redis_io_deadline(reng *e) { return rmin64(rdeadline_ms(e->cfg.io_timeout_ms), call_bound); }

int64_t baton__redis_bound_enter(reng *e, int64_t wait_deadline) {
    int64_t prev = call_bound, io_end = baton_now_ns() + io_ns(e);
    int64_t b = wait_deadline == 0 || wait_deadline < io_end ? io_end : wait_deadline;
    call_bound = rmin64(prev, b); /* a nested call never extends its caller's bound */
    return prev;
}

int64_t baton__redis_attempt_enter(reng *e) {
    int64_t prev = call_bound, now = baton_now_ns(), reserve = io_ns(e) / 4;
    /* Leave a quarter of the io timeout for the clean-up of a grant the
     * attempt may make without hearing of it, while that leaves the attempt
     * at least as much; nearer the bound the attempt runs to it and a grant
     * it leaves behind expires with its lease. */
    if (prev != INT64_MAX && prev - reserve - now >= reserve) call_bound = prev - reserve;
    return prev;
}

void baton__redis_bound_leave(int64_t prev) { call_bound = prev; }

#define MAX_SCRIPT_ARGS 16

int baton__redis_script_on(reng *e, rconn *c, int sid, int nkeys, int argc, const char *const *args,
                           const size_t *arglens, int64_t deadline, redisReply **out, int64_t *sent_ns) {
    *out = NULL;
    if (argc > MAX_SCRIPT_ARGS || nkeys > argc)
        return baton_seterr(BATON_EINVAL, 0, "redis: too many script arguments");
    const char *argv[MAX_SCRIPT_ARGS + 3];
    size_t lens[MAX_SCRIPT_ARGS + 3];
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    int n = 0;
    argv[n] = "EVALSHA", lens[n++] = 7;
    argv[n] = e->sha[sid], lens[n++] = 40;
    argv[n] = nk, lens[n++] = strlen(nk);
    for (int i = 0; i < argc; i++, n++) {
        argv[n] = args[i];
        lens[n] = arglens ? arglens[i] : strlen(args[i]);
    }
    redisReply *r = NULL;
    if (sent_ns) *sent_ns = baton_now_ns();
    int rc = rconn_command(c, n, argv, lens, &r, deadline);
    if (!rc && r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, "NOSCRIPT", 8)) {
        rreply_free(r);
        r = NULL;
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = body_of(e, sid);
        lens[1] = strlen(argv[1]);
        if (sent_ns) *sent_ns = baton_now_ns();
        rc = rconn_command(c, n, argv, lens, &r, deadline);
    }
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(r, "script failed");
        rreply_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int baton__redis_script(reng *e, int sid, int nkeys, int argc, const char *const *argv,
                        const size_t *lens, int64_t deadline, redisReply **out, int64_t *sent_ns) {
    *out = NULL;
    rconn *c = NULL;
    int rc = rpool_get(&e->pool, &c, deadline);
    if (rc) return rc;
    rc = baton__redis_script_on(e, c, sid, nkeys, argc, argv, lens, deadline, out, sent_ns);
    rpool_put(&e->pool, c);
    return rc;
}

/* The old signature, for the plain lock code below. */
static int run_script(reng *e, int sid, int nkeys, const char **keys, int nargs, const char **args,
                      int64_t deadline, redisReply **out, int64_t *sent_ns) {
    const char *argv[MAX_SCRIPT_ARGS];
    if (nkeys + nargs > MAX_SCRIPT_ARGS) return baton_seterr(BATON_EINVAL, 0, "redis: too many script arguments");
    for (int i = 0; i < nkeys; i++) argv[i] = keys[i];
    for (int i = 0; i < nargs; i++) argv[nkeys + i] = args[i];
    return baton__redis_script(e, sid, nkeys, nkeys + nargs, argv, NULL, deadline, out, sent_ns);
}

int baton__redis_bad_reply(redisReply *r, const char *what) {
    if (r) rreply_free(r);
    return baton_seterr(BATON_EPROTO, 0, "redis: unexpected reply to %s", what);
}

#define bad_reply baton__redis_bad_reply

/* Keeps the thread's last error across a clean-up call. */
typedef struct {
    int code;
    long native;
    char msg[512];
} saved_err_t;

static void save_err(saved_err_t *s) {
    const baton_error *le = baton_error_last();
    s->code = le->code;
    s->native = le->native;
    snprintf(s->msg, sizeof s->msg, "%s", le->message ? le->message : "");
}

static void restore_err(const saved_err_t *s) { baton_seterr(s->code, s->native, "%s", s->msg); }

int baton__redis_pair(const redisReply *r, long long *flag, long long *n) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER)
        return BATON_EPROTO;
    *flag = r->element[0]->integer;
    *n = r->element[1]->integer;
    return 0;
}

/* ---- replica acknowledgement (WAIT) ---------------------------------------- */

int baton__redis_wait_replicas(reng *e, rconn *c, const char *what, int64_t cap) {
    if (e->wait_replicas <= 0) return 0;
    int64_t dl = rmin64(baton_now_ns() + ((int64_t)e->wait_ms + e->cfg.io_timeout_ms) * 1000000, rmin64(cap, call_bound));
    char nr[16], ms[16];
    snprintf(nr, sizeof nr, "%d", e->wait_replicas);
    snprintf(ms, sizeof ms, "%d", e->wait_ms);
    const char *argv[3] = { "WAIT", nr, ms };
    size_t lens[3] = { 4, strlen(nr), strlen(ms) };
    redisReply *r = NULL;
    int rc = rconn_command(c, 3, argv, lens, &r, dl);
    if (rc) return baton_seterr(BATON_EUNAVAILABLE, baton_error_last()->native,
                                "redis: %s: no answer to WAIT (%s)", what, baton_error_last()->message);
    if (r->type == REDIS_REPLY_ERROR) {
        /* A server (or proxy, or ACL) without WAIT: degrade, say so once. */
        if (!__atomic_exchange_n(&e->wait_warned, 1, __ATOMIC_RELAXED))
            baton_log(BATON_LOG_WARN, "redis %s:%d rejected WAIT (%s); grants are not confirmed by replicas",
                    e->cfg.host, e->cfg.port, r->str ? r->str : "error");
        rreply_free(r);
        return 0;
    }
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(r, "WAIT");
    long long acked = r->integer;
    rreply_free(r);
    if (acked < e->wait_replicas)
        return baton_seterr(BATON_EUNAVAILABLE, 0, "redis: %s: only %lld of %d replicas acknowledged within %d ms",
                            what, acked, e->wait_replicas, e->wait_ms);
    return 0;
}

int baton__redis_renew_script(reng *e, int sid, int nkeys, int argc, const char *const *argv, int64_t deadline,
                              int *renewed, const char *what) {
    rconn *c = NULL;
    redisReply *r = NULL;
    *renewed = 0;
    int rc = rpool_get(&e->pool, &c, deadline);
    if (rc) return rc;
    rc = baton__redis_script_on(e, c, sid, nkeys, argc, argv, NULL, deadline, &r, NULL);
    if (!rc && r->type != REDIS_REPLY_INTEGER) rc = bad_reply(r, what), r = NULL;
    if (!rc && r->integer == 1) {
        *renewed = 1;
        if (baton__redis_wait_replicas(e, c, "renewal", deadline)) rc = BATON_EUNAVAILABLE;
    }
    rpool_put(&e->pool, c);
    if (r) rreply_free(r);
    return rc;
}

static void watch_cb(void *arg) { baton_host_recheck(arg); }

void baton__redis_watch(reng *e) {
    if (!e->host || __atomic_load_n(&e->watching, __ATOMIC_RELAXED)) return;
    if (!__atomic_exchange_n(&e->watching, 1, __ATOMIC_RELAXED) && rsub_watch(&e->sub, watch_cb, e->host) != 0)
        __atomic_store_n(&e->watching, 0, __ATOMIC_RELAXED); /* try again at the next grant */
}

/* ---- the waiting loop ---------------------------------------------------------- */

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

int baton__redis_wait_loop(reng *e, const char *channel, baton_waiter *w, int64_t deadline,
                           int64_t refresh_ms, int poll_anyway, rb_attempt_fn attempt, void *ctx,
                           const char *what) {
    return baton__redis_wait_loop_msg(e, channel, w, deadline, refresh_ms, poll_anyway ? RB_WAIT_POLL : 0, attempt,
                                      NULL, ctx, what,
                                      NULL, -1, 0);
}

rsub_entry *baton__redis_presub(reng *e, const char *channel, int pattern, baton_waiter *w) {
    rsub_entry *se = NULL;
    if (!w || !rsub_register_ready(&e->sub, channel, pattern, w, &se)) return NULL;
    return se;
}

void baton__redis_presub_drop(reng *e, rsub_entry *pre) { rsub_unregister(&e->sub, pre); }

int baton__redis_wait_loop_msg(reng *e, const char *channel, baton_waiter *w, int64_t deadline,
                               int64_t refresh_ms, int flags, rb_attempt_fn attempt, rb_msg_fn msg,
                               void *ctx, const char *what, rsub_entry *pre, int64_t pre_hint, unsigned pre_gen) {
    /* Subscribe to the wake-up channel, and wait for the confirmation before
     * the next attempt, so a wake-up in between cannot be missed. */
    rsub_entry *se = pre;
    if (!se && ((flags & RB_WAIT_ONE) ? rsub_register_one(&e->sub, channel, w, &se)
                                      : rsub_register(&e->sub, channel, (flags & RB_WAIT_PATTERN) != 0, w, &se)) != 0)
        se = NULL; /* degrade to backoff */
    /* The confirmation normally takes one round trip; if it is late (server
     * down, no pub/sub permission) the loop below re-checks with backoff. */
    int64_t ready_by = rmin64(deadline, baton_now_ns() + (int64_t)SUB_READY_WAIT_MS * 1000000);
    for (;;) {
        unsigned g = baton_waiter_gen(w);
        if (!se || rsub_ready(&e->sub, se) || baton_now_ns() >= ready_by) break;
        if (baton_waiter_park(w, g, ready_by) == BATON_ECANCELED || baton_waiter_canceled(w)) {
            rsub_unregister(&e->sub, se);
            return baton_seterr(BATON_ECANCELED, 0, "redis: %s canceled", what);
        }
    }

    int backoff = BACKOFF_START_MS, rc = 0;
    for (;;) {
        if (baton_waiter_canceled(w)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redis: %s canceled", what);
            break;
        }
        /* With PRE, the caller's attempt is this round's: take the waiter's
         * generation from before it, so a wake-up since then is not lost. */
        unsigned g = pre ? pre_gen : baton_waiter_gen(w);
        int ready = rsub_ready(&e->sub, se);
        /* cluster: the channel's slot has a new master (failover, MOVED) */
        if (!ready && rsub_reroute(&e->sub, &se, w)) pre = NULL;
        /* keyspace.c: a foreign release will wake us (read before the attempt) */
        int covered = !pre && baton__redis_ks_covered(e);
        int done = 0;
        int64_t hint = -1;
        char payload[RSUB_MSG_MAX];
        /* A message that itself completes the wait (a fair handoff) saves
         * the round trip of another attempt. */
        if (msg && rsub_message(&e->sub, se, payload, sizeof payload) && msg(ctx, payload)) {
            rc = 0;
            break;
        }
        if (pre) {
            /* the caller's attempt ran subscribed already: park on its answer */
            pre = NULL;
            rc = 0;
            hint = pre_hint;
        } else if (baton_now_ns() >= deadline && baton__redis_io_deadline(e) <= baton_now_ns()) {
            /* The wait ran out, and with it the call's bound (a wait longer
             * than the io timeout): an attempt now could not even be sent,
             * so this is the end of the wait, not a failure of the engine
             * (unless the last attempt failed: then that stands). */
            if (!rc) rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: %s: the wait ran out", what);
            break;
        } else {
            int64_t ab = baton__redis_attempt_enter(e);
            rsub_attempt(&e->sub, se); /* one-wake entries (sub.c): who owes an attempt */
            rc = attempt(ctx, &done, &hint);
            baton__redis_bound_leave(ab);
            if (done && !rc) rsub_granted(&e->sub, se);
            else if (!done && !rc) rsub_attempt_failed(&e->sub, se);
        }
        if (done) break;
        if (rc && rc != BATON_EUNAVAILABLE) break; /* auth, protocol, memory: give up */
        int64_t now = baton_now_ns();
        if (now >= deadline) {
            if (!rc) rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: %s: the wait ran out", what);
            break;
        }
        int64_t until = deadline;
        /* a hint is a server's number: bound it before scaling (a day is "no hint") */
        if (!rc && hint >= 0 && hint < 86400000) until = rmin64(until, now + hint * 1000000 + 1000000);
        if (refresh_ms > 0) until = rmin64(until, now + refresh_ms * 1000000);
        until = rmin64(until, now + (int64_t)RECHECK_MAX_MS * 1000000);
        if (rc || !ready || ((flags & RB_WAIT_POLL) && !covered)) {
            until = rmin64(until, now + backoff_ns(backoff));
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        if (baton_waiter_park(w, g, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "redis: %s canceled", what);
            break;
        }
    }
    rsub_unregister(&e->sub, se);
    return rc;
}

/* ---- open / close ------------------------------------------------------- */

static void eng_free(reng *e) {
    if (!e) return;
    rcluster_free(e->cfg.cluster);
    rsentinel_free(e->cfg.sentinel);
    free(e->cfg.unix_path);
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

static int parse_config(reng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *o) {
    rcfg *cfg = &e->cfg;
    const char *scheme = u->scheme ? u->scheme : "";
    int cluster = !strcmp(scheme, "redis-cluster") || !strcmp(scheme, "rediss-cluster"); /* cluster.c */
    int sentinel = !strcmp(scheme, "redis-sentinel") || !strcmp(scheme, "rediss-sentinel"); /* sentinel.c */
    int unixsock = !strcmp(scheme, "redis+unix");
    if (!strcmp(scheme, "rediss") || !strcmp(scheme, "rediss-cluster") || !strcmp(scheme, "rediss-sentinel")) cfg->tls = 1;
    else if (strcmp(scheme, "redis") != 0 && !cluster && !sentinel && !unixsock)
        return einval("redis: unsupported scheme '%s'%s", scheme, "");
    if (u->nhosts > 1 && !cluster && !sentinel)
        return einval("redis: %s: one host only (several independent nodes are a quorum lock)%s",
                      u->redacted ? u->redacted : "uri", "");
    if (unixsock) {
        if (u->nhosts || !u->path || !*u->path)
            return einval("redis: %s: want redis+unix:///path/to/redis.sock[?db=N]%s", u->redacted ? u->redacted : "uri", "");
        size_t n = strlen(u->path) + 2;
        if ((cfg->unix_path = malloc(n))) snprintf(cfg->unix_path, n, "/%s", u->path);
        cfg->host = xstrdup(cfg->unix_path);
        cfg->db = (int)baton_opts_int(uo, "db");
    } else {
        if (!u->host || !*u->host) return einval("redis: %s: missing host%s", u->redacted ? u->redacted : "uri", "");
        if (u->port < 0 || u->port > 65535) return einval("redis: bad port in %s%s", u->redacted ? u->redacted : "uri", "");
        cfg->host = xstrdup(u->host);
    }
    cfg->port = u->port ? u->port : 6379;
    if (u->user && *u->user) cfg->user = xstrdup(u->user);

    const char *pw = NULL;
    if (o && o->password) pw = o->password;
    else if (u->password && *u->password) pw = u->password;
    else if (getenv("BATON_REDIS_PASSWORD") && *getenv("BATON_REDIS_PASSWORD")) pw = getenv("BATON_REDIS_PASSWORD");
    else if (getenv("REDISCLI_AUTH") && *getenv("REDISCLI_AUTH")) pw = getenv("REDISCLI_AUTH");
    if (pw) cfg->password = xstrdup(pw);

    if (!unixsock && u->path && *u->path) {
        long db;
        if (rparse_int(u->path, 0, INT_MAX, &db)) return einval("redis: bad database number '%s' (want /0, /1, ...)%s", u->path, "");
        cfg->db = (int)db;
    }

    cfg->connect_timeout_ms = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000;
    cfg->io_timeout_ms = o && o->io_timeout_ms > 0 ? o->io_timeout_ms : 5000;

    const char *cacert = baton_opts_str(uo, "cacert"), *cert = baton_opts_str(uo, "cert");
    const char *key = baton_opts_str(uo, "key"), *prefix = baton_opts_str(uo, "prefix");
    e->layout = baton_opts_enum(uo, "layout") == 1 ? LAYOUT_SIMPLE : LAYOUT_REDISSON; /* spec order */
    cfg->insecure = baton_opts_bool(uo, "insecure");
    e->wait_replicas = (int)baton_opts_int(uo, "wait_replicas");
    e->wait_ms = (int)baton_opts_int(uo, "wait_ms");
    if (baton_opts_given(uo, "connect_timeout_ms")) cfg->connect_timeout_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    if (baton_opts_given(uo, "io_timeout_ms")) cfg->io_timeout_ms = (int)baton_opts_int(uo, "io_timeout_ms");
    if (key && !cert) return einval("redis: option 'key' needs 'cert'%s%s", "", "");
    if (!e->wait_ms) e->wait_ms = 1000;
    if (prefix && strlen(prefix) > RB_PREFIX_MAX)
        return baton_seterr(BATON_EINVAL, 0, "redis: option 'prefix' is %zu bytes; the limit is %d", strlen(prefix),
                            RB_PREFIX_MAX);
    e->prefix = xstrdup(prefix);
    if (!cfg->host || !e->prefix || (pw && !cfg->password) || (u->user && *u->user && !cfg->user))
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    if (cfg->tls) {
        int rc = rtls_ctx_new(&cfg->ssl_ctx, cacert, cert, key, cfg->insecure);
        if (rc) return rc;
    }
    if (cluster) return baton__redis_cluster_config(cfg, u);
    if (sentinel)
        return rsentinel_new(&cfg->sentinel, cfg, u, baton_opts_str(uo, "master"), baton_opts_str(uo, "sentinel_user"),
                             baton_opts_str(uo, "sentinel_password"));
    return 0;
}

/* The server as connected to (its address, not the host name's spelling),
 * the database, layout and prefix: "localhost" and "127.0.0.1" give one
 * identity, so a multilock orders their locks the same way. */
static void set_ident(reng *e, rconn *c) {
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char host[INET6_ADDRSTRLEN] = "";
    int port = e->cfg.port;
    if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) == 0) {
        if (sa.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&sa;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
            port = ntohs(a->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&sa;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
            port = ntohs(a->sin6_port);
        }
    }
    if (!host[0]) snprintf(host, sizeof host, "%.45s", e->cfg.host);
    if (e->cfg.unix_path) {
        snprintf(e->ident, sizeof e->ident, "redis+unix:%.60s/%d %s %.100s", e->cfg.unix_path, e->cfg.db,
                 e->layout == LAYOUT_REDISSON ? "redisson" : "simple", e->prefix);
        return;
    }
    if (e->cfg.sentinel) { /* the master moves; the name the sentinels give it does not */
        snprintf(e->ident, sizeof e->ident, "redis-sentinel:%.60s/%d %s %.100s", rsentinel_name(e->cfg.sentinel), e->cfg.db,
                 e->layout == LAYOUT_REDISSON ? "redisson" : "simple", e->prefix);
        return;
    }
    snprintf(e->ident, sizeof e->ident, "redis:[%s]:%d/%d %s %.100s", host, port, e->cfg.db,
             e->layout == LAYOUT_REDISSON ? "redisson" : "simple", e->prefix);
}

int baton__redis_identity(void *eng, char *buf, size_t n) {
    reng *e = eng;
    if (!e->ident[0]) return BATON_ENOTSUP;
    snprintf(buf, n, "%s", e->ident);
    return 0;
}

void baton__redis_attach(void *eng, baton_host *host) { ((reng *)eng)->host = host; }

/* Sentinel: the master moved (on the watcher's thread). The subscriber drops
 * its connection to the old one at once (woken to see its epoch is stale),
 * and every held lock is re-checked on the new master. */
static void sentinel_switch(void *arg) {
    reng *e = arg;
    uint64_t one = 1;
    ssize_t n;
    do n = write(e->sub.evfd, &one, sizeof one); while (n < 0 && errno == EINTR);
    if (e->host && __atomic_load_n(&e->watching, __ATOMIC_RELAXED)) baton_host_recheck(e->host);
}

int baton__redis_open(void **out, const baton_uri *u, const baton_opts *uo, const baton_client_options *o) {
    *out = NULL;
    int lrc = baton__ossl_load(); /* script digests and TLS */
    if (lrc) return lrc;
    reng *e = calloc(1, sizeof *e);
    if (!e) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = parse_config(e, u, uo, o);
    if (rc) { eng_free(e); return rc; }
    if (e->cfg.cluster) pthread_once(&cluster_body_once, make_cluster_bodies);
    for (int i = 0; i < S_COUNT; i++) sha1_hex(body_of(e, i), e->sha[i]);
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
        else set_ident(e, c);
        rpool_put(&e->pool, c);
    }
    if (!rc && e->cfg.sentinel) rc = rsentinel_watch(e->cfg.sentinel, sentinel_switch, e);
    if (rc) {
        rsentinel_stop(e->cfg.sentinel);
        rsub_destroy(&e->sub);
        rpool_destroy(&e->pool);
        eng_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void baton__redis_close(void *eng) {
    reng *e = eng;
    if (!e) return;
    rsentinel_stop(e->cfg.sentinel); /* its callback touches the subscriber */
    baton__redis_async_close(e);     /* the core ended every async op before */
    rsub_destroy(&e->sub);
    rpool_destroy(&e->pool);
    eng_free(e);
}

/* ---- locks -------------------------------------------------------------- */

int baton__redis_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st) {
    reng *e = eng;
    *st = NULL;
    int fair = opts && opts->fair;
    if (fair && e->layout != LAYOUT_REDISSON)
        return baton_seterr(BATON_ENOTSUP, 0, "redis: fair locks need layout=redisson (the simple layout has no queue)");
    rlock *l = malloc(sizeof *l);
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    int rc = baton__redis_lock_init(e, name, fair ? RK_FAIR : RK_PLAIN, l);
    if (rc) { free(l); return rc; }
    *st = l;
    return 0;
}

void baton__redis_lock_free(void *eng, void *st) {
    (void)eng;
    rlock *l = st;
    if (!l) return;
    rlock_clear(l);
    free(l);
}

void baton__redis_owner(const baton_owner *o, rb_owner *s) {
    snprintf(s->field, sizeof s->field, "%s:%lu", o->uuid, o->tid);
    snprintf(s->value, sizeof s->value, "%s %s", o->hex, o->desc);
}


/* One acquire attempt: 0 with *granted, or *ttl_ms (-1 = no expiry).
 * RB_EFINAL (message set) when the grant was undone because too few
 * replicas acknowledged it. */
static int try_once(reng *e, rlock *l, baton_acquire_req *req, int *granted, int64_t *ttl_ms, int *uncertain) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rb_owner os;
    baton__redis_owner(req->owner, &os);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, req->lease_ms ? req->lease_ms : 30000);
    redisReply *r = NULL;
    int64_t sent = 0, dl = baton__redis_io_deadline(e);
    *granted = 0;
    *ttl_ms = -1;
    rconn *c = NULL;
    int rc = rpool_get(&e->pool, &c, dl);
    if (rc) return rc;
    if (e->layout == LAYOUT_REDISSON) {
        const char *argv[6] = { l->key, RL_IN(l, RN_FENCE, nb[0]), RL_IN(l, RN_HOLDER, nb[1]), lease, os.field,
                                req->owner->desc };
        rc = baton__redis_script_on(e, c, S_ACQ_REDISSON, 3, 6, argv, NULL, dl, &r, &sent);
    } else {
        const char *argv[4] = { l->key, RL_IN(l, RN_FENCE, nb[0]), os.value, lease };
        rc = baton__redis_script_on(e, c, S_ACQ_SIMPLE, 2, 4, argv, NULL, dl, &r, &sent);
    }
    /* No answer after sending: the server may have granted it anyway. */
    if (rc == BATON_EUNAVAILABLE && uncertain) *uncertain = 1;
    long long flag = 0, n = 0;
    if (!rc && baton__redis_pair(r, &flag, &n)) rc = bad_reply(r, "the acquire script"), r = NULL;
    else if (!rc && flag == 1 && n <= 0) rc = bad_reply(r, "the acquire script (fence)"), r = NULL;
    if (!rc && flag == 1) rc = baton__redis_wait_replicas(e, c, "acquire", INT64_MAX) ? RB_EFINAL : 0;
    rpool_put(&e->pool, c);
    if (r) rreply_free(r);
    if (rc == RB_EFINAL) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        baton__redis_plain_release(e, l, req->owner);
        baton_seterr(BATON_EUNAVAILABLE, 0, "%s; the lock was released", msg);
        return RB_EFINAL;
    }
    if (rc) return rc;
    if (flag == 1) {
        *granted = 1;
        req->fence = (uint64_t)n;
        req->sent_ns = sent;
    } else {
        *ttl_ms = n >= 0 ? n : (n == -2 ? 0 : -1);
    }
    return 0;
}

typedef struct {
    reng *e;
    rlock *l;
    baton_acquire_req *req;
    int uncertain;           /* an attempt got no answer after it was sent */
} plain_ctx;

/* An attempt that got no answer may have been granted, and the acquire
 * script answers "held" even to its own owner: give such a grant back
 * (owner-checked, so it never touches another holder's lock) before trying
 * again or giving up, instead of leaving it to expire a lease later. */
static void drop_uncertain(plain_ctx *x) {
    if (!x->uncertain) return;
    saved_err_t s;
    save_err(&s);
    if (baton__redis_plain_release(x->e, x->l, x->req->owner) != BATON_EUNAVAILABLE) x->uncertain = 0;
    restore_err(&s);
}

static int plain_attempt(void *p, int *done, int64_t *hint) {
    plain_ctx *x = p;
    int granted = 0;
    drop_uncertain(x);
    int rc = try_once(x->e, x->l, x->req, &granted, hint, &x->uncertain);
    if (granted || rc == RB_EFINAL) {
        *done = 1;
        if (rc == RB_EFINAL) rc = BATON_EUNAVAILABLE;
    }
    return rc;
}

int baton__redis_plain_acquire(reng *e, rlock *l, baton_acquire_req *req) {
    int granted = 0;
    int64_t ttl = -1;
    plain_ctx x = { e, l, req, 0 };
    rsub_entry *pre = NULL; /* one-wake: a release wakes one waiter of this client (sub.c) */
    char chan[RL_NAME_MAX]; /* the wait below (kw, the loop) uses it to its end */
    baton__redis_lname(l, RN_CHANNEL, chan);
    if (req->deadline_ns != 0 && req->waiter) rsub_register_ready_one(&e->sub, chan, req->waiter, &pre);
    unsigned gen = pre ? baton_waiter_gen(req->waiter) : 0;
    int64_t ab = baton__redis_attempt_enter(e);
    int rc = try_once(e, l, req, &granted, &ttl, &x.uncertain);
    baton__redis_bound_leave(ab);
    if (rc == RB_EFINAL) rc = BATON_EUNAVAILABLE;
    if (!rc && !granted && req->deadline_ns == 0)
        rc = baton_seterr(BATON_ELOCKED, 0, "redis: '%s' is held by another owner", l->key);
    if (!rc && !granted && !req->waiter) rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting acquire needs a waiter");
    if (rc || granted) {
        if (pre) baton__redis_presub_drop(e, pre);
        if (rc) drop_uncertain(&x);
        return rc;
    }
    char what[64];
    snprintf(what, sizeof what, "acquire of '%.40s'", l->key);
    rb_ks_wait kw; /* foreign releases wake us too, where the server notifies them */
    baton__redis_ks_enter_for(e, l->key, chan, req->waiter, req->deadline_ns, &kw);
    rc = baton__redis_wait_loop_msg(e, chan, req->waiter, req->deadline_ns, 0,
                                    RB_WAIT_ONE | (e->layout == LAYOUT_SIMPLE ? RB_WAIT_POLL : 0),
                                    plain_attempt, NULL, &x, what, pre, ttl, gen);
    baton__redis_ks_leave(&kw);
    if (rc) drop_uncertain(&x);
    return rc;
}

int baton__redis_plain_release(reng *e, rlock *l, const baton_owner *owner) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rb_owner os;
    baton__redis_owner(owner, &os);
    redisReply *r = NULL;
    int rc;
    if (e->layout == LAYOUT_REDISSON) {
        const char *keys[3] = { l->key, RL_IN(l, RN_CHANNEL, nb[0]), RL_IN(l, RN_HOLDER, nb[1]) };
        const char *args[1] = { os.field };
        rc = run_script(e, S_REL_REDISSON, 3, keys, 1, args, baton__redis_io_deadline(e), &r, NULL);
    } else {
        const char *keys[2] = { l->key, RL_IN(l, RN_CHANNEL, nb[0]) };
        const char *args[1] = { os.value };
        rc = run_script(e, S_REL_SIMPLE, 2, keys, 1, args, baton__redis_io_deadline(e), &r, NULL);
    }
    if (rc) return rc;
    if (r->type != REDIS_REPLY_INTEGER) return bad_reply(r, "the release script");
    long long v = r->integer;
    rreply_free(r);
    if (v != 1) return baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer held by this owner", l->key);
    return 0;
}

int baton__redis_plain_renew(reng *e, rlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns) {
    char nb[2][RL_NAME_MAX]; /* uninitialised: the RL_* literals zero 2 KiB each, a hot path's cost */
    rb_owner os;
    baton__redis_owner(owner, &os);
    char lease[24];
    snprintf(lease, sizeof lease, "%" PRIu32, lease_ms ? lease_ms : 30000);
    int64_t dl = baton__redis_io_deadline(e);
    if (deadline_ns > 0) dl = rmin64(dl, deadline_ns);
    if (baton_now_ns() >= dl)
        return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "redis: renewal of '%s' is past its deadline", l->key);
    int rc, renewed = 0;
    if (e->layout == LAYOUT_REDISSON || l->kind == RK_FAIR) {
        const char *argv[4] = { l->key, RL_IN(l, RN_HOLDER, nb[0]), lease, os.field };
        rc = baton__redis_renew_script(e, S_RENEW_REDISSON, 2, 4, argv, dl, &renewed, "the renewal script");
    } else {
        const char *argv[3] = { l->key, os.value, lease };
        rc = baton__redis_renew_script(e, S_RENEW_SIMPLE, 1, 3, argv, dl, &renewed, "the renewal script");
    }
    if (rc) return rc;
    if (!renewed) return baton_seterr(BATON_ELOST, 0, "redis: '%s' is no longer held by this owner", l->key);
    return 0;
}

int baton__redis_lock_info(void *eng, const char *name, baton_lockinfo *out) {
    reng *e = eng;
    rlock l, rw;
    /* The fair kind names the queue too (redisson layout); the read kind names
     * the read-write lock's waiting-writers set. */
    int rc = baton__redis_lock_init(e, name, e->layout == LAYOUT_REDISSON ? RK_FAIR : RK_PLAIN, &l);
    if (rc) return rc;
    if ((rc = baton__redis_lock_init(e, name, RK_READ, &rw))) { rlock_clear(&l); return rc; }
    const char *queue = RL_QUEUE(&l);
    const char *keys[5] = { l.key, RL_FENCE(&l), RL_HOLDER(&l), queue ? queue : RL_FENCE(&l), RL_TIMEOUTS(&rw) };
    redisReply *r = NULL;
    rc = run_script(e, S_INFO, 5, keys, 0, NULL, rdeadline_ms(e->cfg.io_timeout_ms), &r, NULL);
    rlock_clear(&l);
    rlock_clear(&rw);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 8 || r->element[0]->type != REDIS_REPLY_INTEGER ||
        r->element[1]->type != REDIS_REPLY_INTEGER || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING || r->element[4]->type != REDIS_REPLY_INTEGER ||
        r->element[5]->type != REDIS_REPLY_STRING || r->element[6]->type != REDIS_REPLY_INTEGER ||
        r->element[7]->type != REDIS_REPLY_INTEGER)
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
    if (e->layout == LAYOUT_REDISSON) out->queue_length = r->element[4]->integer;
    if (!strcmp(r->element[5]->str, "count")) {
        /* An integer string: a semaphore's permits (or a latch's count), not a lock. */
        out->permits = r->element[6]->integer;
        out->writer = 0;
        out->readers = 0;
        out->waiting_writers = r->element[7]->integer;
        rreply_free(r);
        return 0;
    }
    out->writer = !strcmp(r->element[5]->str, "write");
    out->readers = r->element[6]->integer;
    out->waiting_writers = r->element[7]->integer;
    rreply_free(r);
    return 0;
}

/* ---- engine counters (INFO commandstats) ------------------------------------ */

void baton__redis_cmdstats(const char *s, size_t len, void (*fn)(void *arg, const char *op, uint64_t count),
                           void *arg) {
    for (const char *end = s + len, *le; s < end; s = le + 1) {
        const char *colon, *calls;
        size_t nl;
        if (!(le = memchr(s, '\n', (size_t)(end - s)))) le = end;
        if (le - s <= 8 || memcmp(s, "cmdstat_", 8) || !(colon = memchr(s, ':', (size_t)(le - s))) ||
            !(calls = memmem(colon, (size_t)(le - colon), "calls=", 6)))
            continue;
        char name[64];
        if ((nl = (size_t)(colon - s - 8)) == 0 || nl >= sizeof name) continue;
        memcpy(name, s + 8, nl);
        name[nl] = 0;
        fn(arg, name, strtoull(calls + 6, NULL, 10));
    }
}

int baton__redis_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg) {
    reng *e = eng;
    const char *argv[2] = { "INFO", "commandstats" };
    size_t lens[2] = { 4, 12 };
    int64_t dl = rdeadline_ms(e->cfg.io_timeout_ms);
    rconn *c = NULL;
    redisReply *r = NULL;
    int rc = rpool_get(&e->pool, &c, dl);
    if (rc) return rc;
    rc = rconn_command(c, 2, argv, lens, &r, dl);
    rpool_put(&e->pool, c);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(r, "INFO commandstats");
        rreply_free(r);
        return rc;
    }
    if (r->type != REDIS_REPLY_STRING) return bad_reply(r, "INFO commandstats");
    baton__redis_cmdstats(r->str, r->len, fn, arg);
    rreply_free(r);
    return 0;
}
