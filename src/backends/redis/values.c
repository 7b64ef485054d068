/*
 * Values on Redis (baton_value_*; layout in docs/redis-layout.md): the
 * value NAME is the plain string baton_value:{prefix+NAME}, so redis-cli
 * GET and SET work on it, and its version lives beside it in the hash
 * baton_value_ver:{prefix+NAME} with the sha1 of the content it belongs to.
 * Every operation is one script (BATON_LUA_VALUE) that first adopts a
 * change made by someone else (the content's sha1 is not the recorded one:
 * a new version), so versions grow for foreign writes too.
 *
 * Watching: baton's scripts PUBLISH the new version on
 * baton_value__channel:{K} on every change they make or adopt; a watcher
 * also listens on the key's keyspace channel (__keyspace@DB__:V), which
 * carries a foreign SET at once when the server has keyspace notifications
 * on (baton never turns them on), and re-reads at least every 2 s (the
 * waiting loop's RECHECK_MAX_MS), so a change nobody published, or a
 * message lost with a connection, is seen within 2 s.
 */
#include "rb.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *key;       /* baton_value:{K} */
    char *meta;      /* baton_value_ver:{K} */
    char *channel;   /* baton_value__channel:{K} */
    char *keyspace;  /* __keyspace@DB__:baton_value:{K} */
} rvalue;

static void rvalue_free(rvalue *v) {
    if (!v) return;
    free(v->key);
    free(v->meta);
    free(v->channel);
    free(v->keyspace);
    free(v);
}

int baton__redis_value_new(void *eng, const char *name, void **st) {
    reng *e = eng;
    *st = NULL;
    rvalue *v = calloc(1, sizeof *v);
    size_t n = strlen(e->prefix) + strlen(name) + 1;
    char *k = malloc(n);
    if (v && k) {
        snprintf(k, n, "%s%s", e->prefix, name);
        v->key = baton__redis_prefixed("baton_value", k);
        v->meta = baton__redis_prefixed("baton_value_ver", k);
        v->channel = baton__redis_prefixed("baton_value__channel", k);
        if (v->key) {
            size_t m = strlen(v->key) + 32;
            if ((v->keyspace = malloc(m)) != NULL) snprintf(v->keyspace, m, "__keyspace@%d__:%s", e->cfg.db, v->key);
        }
    }
    free(k);
    if (!v || !v->key || !v->meta || !v->channel || !v->keyspace) {
        rvalue_free(v);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    *st = v;
    return 0;
}

void baton__redis_value_free(void *eng, void *st) {
    (void)eng;
    rvalue_free(st);
}

static int is_int(const redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER; }

/* One value script: OP, EXPECT (NULL = 'any'), DATA/LEN (set). */
static int value_script(reng *e, rvalue *v, const char *op, uint64_t expect, const void *data, size_t len,
                        redisReply **out) {
    char ex[24];
    if (expect == BATON_VALUE_ANY) snprintf(ex, sizeof ex, "any");
    else snprintf(ex, sizeof ex, "%" PRIu64, expect);
    const char *argv[6] = { v->key, v->meta, op, v->channel, ex, data ? (const char *)data : "" };
    size_t lens[6] = { strlen(v->key), strlen(v->meta), strlen(op), strlen(v->channel), strlen(ex), data ? len : 0 };
    return baton__redis_script(e, S_VALUE, 2, 6, argv, lens, baton__redis_io_deadline(e), out, NULL);
}

int baton__redis_value_get(void *eng, void *st, baton_value_data *out) {
    rvalue *v = st;
    memset(out, 0, sizeof *out);
    redisReply *r = NULL;
    int rc = value_script(eng, v, "get", BATON_VALUE_ANY, NULL, 0, &r);
    if (rc) return rc;
    if (r->type != REDIS_REPLY_ARRAY || (r->elements != 0 && r->elements != 2))
        return baton__redis_bad_reply(r, "the value script (get)");
    if (r->elements == 0) {
        rreply_free(r);
        return baton_seterr(BATON_ENOENT, 0, "redis: value '%s' does not exist", v->key);
    }
    if (!is_int(r->element[0]) || r->element[0]->integer <= 0 || r->element[1]->type != REDIS_REPLY_STRING)
        return baton__redis_bad_reply(r, "the value script (get)");
    out->data = malloc(r->element[1]->len + 1);
    if (!out->data) {
        rreply_free(r);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    memcpy(out->data, r->element[1]->str, r->element[1]->len);
    out->data[r->element[1]->len] = 0;
    out->len = r->element[1]->len;
    out->version = (uint64_t)r->element[0]->integer;
    rreply_free(r);
    return 0;
}

/* set and del: {1, version} done, {0, version} EXPECT failed, {-1, 0} absent. */
static int value_change(reng *e, rvalue *v, const char *op, const void *data, size_t len, uint64_t expect,
                        uint64_t *version) {
    redisReply *r = NULL;
    int rc = value_script(e, v, op, expect, data, len, &r);
    if (rc) return rc;
    long long flag = 0, n = 0;
    if (baton__redis_pair(r, &flag, &n)) return baton__redis_bad_reply(r, "the value script");
    rreply_free(r);
    if (flag == -1) return baton_seterr(BATON_ENOENT, 0, "redis: value '%s' does not exist", v->key);
    if (flag == 0) {
        if (expect == 0)
            return baton_seterr(BATON_ECONFLICT, 0, "redis: value '%s' exists (version %lld)", v->key, n);
        return baton_seterr(BATON_ECONFLICT, 0, "redis: value '%s' is at version %lld, not %" PRIu64, v->key, n,
                            expect);
    }
    if (n <= 0) return baton_seterr(BATON_EPROTO, 0, "redis: the value script gave version %lld", n);
    if (version) *version = (uint64_t)n;
    return 0;
}

int baton__redis_value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version) {
    return value_change(eng, st, "set", data, len, expect, version);
}

int baton__redis_value_del(void *eng, void *st, uint64_t expect) {
    return value_change(eng, st, "del", NULL, 0, expect, NULL);
}

typedef struct {
    reng *e;
    rvalue *v;
    uint64_t known;
} watch_ctx;

/* One re-read: done when the version (after adopting a foreign change)
 * differs from the one the caller knows. */
static int watch_attempt(void *p, int *done, int64_t *hint) {
    watch_ctx *x = p;
    redisReply *r = NULL;
    *hint = -1;
    int rc = value_script(x->e, x->v, "ver", BATON_VALUE_ANY, NULL, 0, &r);
    if (rc) return rc;
    if (!is_int(r) || r->integer < 0) return baton__redis_bad_reply(r, "the value script (ver)");
    if ((uint64_t)r->integer != x->known) *done = 1;
    rreply_free(r);
    return 0;
}

/* A message on baton's channel carries the new version: one that is not
 * KNOWN ends the wait without another read (the core reads the value next). */
static int watch_msg(void *p, const char *payload) {
    watch_ctx *x = p;
    char *end;
    errno = 0;
    unsigned long long ver = strtoull(payload, &end, 10);
    return payload[0] && !*end && !errno && ver != x->known;
}

int baton__redis_value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w) {
    reng *e = eng;
    rvalue *v = st;
    watch_ctx x = { e, v, known };
    int64_t prev = baton__redis_bound_enter(e, deadline_ns);
    int rc;
    if (deadline_ns == 0 || !w) {
        int done = 0;
        int64_t hint;
        rc = watch_attempt(&x, &done, &hint);
        if (!rc && !done && deadline_ns == 0)
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "redis: value '%s' is still at version %" PRIu64, v->key, known);
        else if (!rc && !done)
            rc = baton_seterr(BATON_EINVAL, 0, "redis: a waiting call needs a waiter");
    } else {
        /* The caller has just read KNOWN; the loop reads again once
         * subscribed (so a change in between is not missed), then parks
         * until a message, 2 s, or the deadline. The keyspace channel wakes
         * it too when the server sends those (a foreign write at once). A
         * server that is down now may come back before the deadline: the
         * loop re-reads with backoff, as a lock waiter does. */
        rsub_entry *ks = NULL;
        if (rsub_register(&e->sub, v->keyspace, 0, w, &ks) != 0) ks = NULL;
        char what[80];
        snprintf(what, sizeof what, "watch of value '%.40s'", v->key);
        rc = baton__redis_wait_loop_msg(e, v->channel, w, deadline_ns, 0, 0, watch_attempt, watch_msg, &x, what,
                                        NULL, -1, 0);
        if (ks) rsub_unregister(&e->sub, ks);
    }
    baton__redis_bound_leave(prev);
    return rc;
}
