/*
 * Waking lock waiters on foreign releases by the server's keyspace
 * notifications (docs/redis-layout.md, "Keyspace notifications").
 *
 * redis-py, node-redlock, redsync and a DEL by hand release a lock without
 * publishing on baton's channel, and a lease that runs out publishes
 * nothing either. When the server has notify-keyspace-events on for the
 * generic class (g: del) — optionally also x (expired) — a waiter listens on
 * its key's release events as well, on the client's one subscriber
 * connection, and is woken the moment the key goes:
 *   K   SUBSCRIBE __keyspace@DB__:KEY (payload: the event name), while
 *       someone waits (it lingers 5 s after, as every channel does);
 *   E   SUBSCRIBE __keyevent@DB__:del (and :expired with x), payload the
 *       key: every delete of the database reaches the client while it
 *       waits, and only the waiters of that key are woken.
 * The configuration is read with CONFIG GET at most every 10 s, only when a
 * wait starts. A server whose ACL (or rename-command) refuses CONFIG is
 * listened to on the per-key channel anyway; the first del/expired event
 * that arrives proves K is on. baton never changes the server's
 * configuration.
 *
 * Notifications only wake: every wake is followed by an ordinary attempt,
 * and the waiting loop keeps its TTL and 2 s re-checks. What changes when a
 * wait is covered (notifications known on and the subscription confirmed
 * before the attempt) is that the simple layout's 2-200 ms backoff
 * re-check, which only exists to notice silent foreign releases, is
 * dropped.
 */
#include "rb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define RECHECK_NS (10LL * 1000000000LL)        /* CONFIG GET again after */
#define REFUSED_RECHECK_NS (60LL * 1000000000LL) /* ... or after a refusal */

static _Thread_local rb_ks_wait *tl_wait;

/* Events after which the key no longer holds a lock. (UNLINK notifies
 * "del"; HDEL of the last field notifies "del" too.) */
static int is_release_event(const char *p, size_t n) {
    static const char *const ev[] = { "del", "expired", "evicted", "rename_from", "move_from" };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        if (strlen(ev[i]) == n && !memcmp(ev[i], p, n)) return 1;
    return 0;
}

/* K: the payload is the event. Called on the subscriber thread. */
static int want_keyspace(void *arg, const char *payload, size_t len) {
    rb_ks_wait *kw = arg;
    if (!is_release_event(payload, len)) return 0; /* a renewal's "expire", a "set" */
    /* a "del" proves K and g on (what a silent release needs); "expired"
     * or "evicted" alone prove other classes only */
    if (len == 3 && !memcmp(payload, "del", 3) && !__atomic_load_n(&kw->e->ks.seen, __ATOMIC_RELAXED))
        __atomic_store_n(&kw->e->ks.seen, 1, __ATOMIC_RELAXED);
    return 1;
}

/* E: the payload is the key. */
static int want_keyevent(void *arg, const char *payload, size_t len) {
    rb_ks_wait *kw = arg;
    return strlen(kw->key) == len && !memcmp(kw->key, payload, len);
}

/* The answer to CONFIG GET notify-keyspace-events: 0 and the flags in BUF,
 * 1 when the server refused (an error reply, or not the pair asked for). */
static int config_parse(const redisReply *r, char *buf, size_t n) {
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
        snprintf(buf, n, "%s", r->element[1]->str);
        return 0;
    }
    return 1;
}

/* Reads notify-keyspace-events. 0 and the flags in BUF, 1 when the server
 * refused (an error reply), -1 when it could not be asked now. */
static int config_get(reng *e, char *buf, size_t n, int64_t deadline) {
    int64_t dl = rmin64(baton__redis_io_deadline(e), deadline);
    if (baton_now_ns() >= dl) return -1;
    rconn *c = NULL;
    if (rpool_get(&e->pool, &c, dl) != 0) return -1;
    const char *argv[3] = { "CONFIG", "GET", "notify-keyspace-events" };
    size_t lens[3] = { 6, 3, 22 };
    redisReply *r = NULL;
    int rc = rconn_command(c, 3, argv, lens, &r, dl);
    rpool_put(&e->pool, c);
    if (rc) return -1;
    int out = config_parse(r, buf, n);
    rreply_free(r);
    return out;
}

/* Caches the server's answer (G as config_get's, 0 or 1) as the mode. */
static int mode_store(reng *e, int g, const char *flags, int64_t now) {
    int mode;
    if (g > 0) {
        mode = RKS_UNKNOWN;
    } else {
        /* "A" is every class (g$lshzxe...); K/E say which channels */
        int all = strchr(flags, 'A') != NULL;
        int gen = all || strchr(flags, 'g'), exp = all || strchr(flags, 'x');
        if (gen && strchr(flags, 'K')) mode = RKS_K;
        else if (gen && strchr(flags, 'E')) mode = RKS_E;
        else mode = RKS_OFF;
        __atomic_store_n(&e->ks.expired, exp != 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&e->ks.mode, mode, __ATOMIC_RELAXED);
    __atomic_store_n(&e->ks.checked_ns, now, __ATOMIC_RELAXED);
    return mode;
}

int baton__redis_ks_mode_cached(reng *e, int *ask) {
    int mode = __atomic_load_n(&e->ks.mode, __ATOMIC_RELAXED);
    int64_t at = __atomic_load_n(&e->ks.checked_ns, __ATOMIC_RELAXED);
    int64_t every = mode == RKS_UNKNOWN ? REFUSED_RECHECK_NS : RECHECK_NS;
    *ask = mode == RKS_UNASKED || baton_now_ns() - at >= every;
    return mode;
}

void baton__redis_ks_config_answer(reng *e, const redisReply *r) {
    char flags[64] = "";
    if (r) mode_store(e, config_parse(r, flags, sizeof flags), flags, baton_now_ns());
}

/* The mode to wait with, asking the server when the last answer is old. */
static int current_mode(reng *e, int64_t deadline) {
    int ask = 0, mode = baton__redis_ks_mode_cached(e, &ask);
    if (!ask) return mode;
    char flags[64] = "";
    int64_t now = baton_now_ns();
    int g = config_get(e, flags, sizeof flags, deadline);
    if (g < 0) return mode == RKS_UNASKED ? RKS_UNKNOWN : mode; /* keep the last answer; not cached */
    return mode_store(e, g, flags, now);
}

static void reg(reng *e, rb_ks_wait *kw, int i, const char *fmt, const char *tail, baton_waiter *w,
                rsub_want_fn want) {
    size_t n = strlen(fmt) + strlen(tail) + 24;
    char *chan = malloc(n);
    if (!chan) return; /* degrade: no wake-up, the loop's re-checks remain */
    snprintf(chan, n, fmt, e->cfg.db, tail);
    /* node-local events: on a cluster, on the master of the key's slot */
    if (rsub_register_node_for(&e->sub, chan, kw->key, kw->wake, w, want, kw, &kw->se[i]) != 0) kw->se[i] = NULL;
    free(chan);
}

void baton__redis_ks_enter(reng *e, const char *key, baton_waiter *w, int64_t deadline, rb_ks_wait *kw) {
    baton__redis_ks_enter_for(e, key, NULL, w, deadline, kw);
}

void baton__redis_ks_enter_mode(reng *e, const char *key, const char *wake, baton_waiter *w, int mode,
                                rb_ks_wait *kw) {
    memset(kw, 0, sizeof *kw);
    kw->e = e;
    kw->key = key;
    kw->wake = wake;
    kw->mode = mode;
    if (!w) return;
    switch (mode) {
    case RKS_K:
    case RKS_UNKNOWN:
        reg(e, kw, 0, "__keyspace@%d__:%s", key, w, want_keyspace);
        break;
    case RKS_E:
        reg(e, kw, 0, "__keyevent@%d__:%s", "del", w, want_keyevent);
        if (__atomic_load_n(&e->ks.expired, __ATOMIC_RELAXED))
            reg(e, kw, 1, "__keyevent@%d__:%s", "expired", w, want_keyevent);
        break;
    default:
        break;
    }
    kw->wake = NULL; /* the subscriber copied it; the caller's buffer may go */
}

void baton__redis_ks_enter_for(reng *e, const char *key, const char *wake, baton_waiter *w, int64_t deadline,
                               rb_ks_wait *kw) {
    baton__redis_ks_enter_mode(e, key, wake, w, w ? current_mode(e, deadline) : RKS_UNASKED, kw);
    if (kw->se[0]) tl_wait = kw;
}

void baton__redis_ks_leave(rb_ks_wait *kw) {
    if (tl_wait == kw) tl_wait = NULL;
    for (int i = 0; i < 2; i++)
        if (kw->se[i]) rsub_unregister(&kw->e->sub, kw->se[i]);
    memset(kw->se, 0, sizeof kw->se);
}

int baton__redis_ks_covered_by(const rb_ks_wait *kw) {
    if (!kw || !kw->se[0]) return 0;
    if (kw->mode == RKS_UNKNOWN && !__atomic_load_n(&kw->e->ks.seen, __ATOMIC_RELAXED)) return 0;
    /* the del channel is what a silent release comes by; expired is a bonus
     * (the attempt's TTL hint wakes the waiter at expiry anyway) */
    return rsub_ready(&kw->e->sub, kw->se[0]);
}

int baton__redis_ks_covered(reng *e) {
    rb_ks_wait *kw = tl_wait;
    return kw && kw->e == e && baton__redis_ks_covered_by(kw);
}
