/*
 * The operator's side of the Redis backend (backend.h, version 7):
 * lock_list walks the keys under the engine's prefix with SCAN MATCH and
 * asks the server which of them are locks of the layout (one read-only
 * script per SCAN batch); lock_break runs one script that removes the
 * holder, draws a new fence the way a grant does and wakes every waiter.
 * Layouts and rules: docs/redis-layout.md ("Operators").
 */
#include "rb.h"
#include "scripts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys SCAN is asked for per call (a hint to the server), and so at most
 * about this many keys per classifying script. */
#define SCAN_COUNT "500"

void baton__redis_glob_escape(char *out, const char *s) {
    for (; *s; s++) {
        if (strchr("*?[]\\", *s)) *out++ = '\\';
        *out++ = *s;
    }
    *out = 0;
}

int baton__redis_side_key(const char *key) {
    static const char *const side[] = {
        "redisson_lock_token:", "baton_holder:", "baton_fence:",
        "redisson_lock_queue:", "redisson_lock_timeout:", "baton_rwlock_writers:",
        /* values, groups and queues (values.c, coord.c): never locks */
        "baton_value:", "baton_value_ver:", "baton_group:", "baton_group_values:", "baton_group_owners:",
        "baton_group_ver:", "baton_queue:", "baton_queue_items:", "baton_queue_taken:", "baton_queue_owners:",
        "baton_queue_seq:",
    };
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++)
        if (!strncmp(key, side[i], strlen(side[i]))) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void baton__redis_names_emit(char **names, size_t n, int (*fn)(void *arg, const char *name), void *arg) {
    if (n) qsort(names, n, sizeof *names, cmp_str); /* names is NULL when n is 0 */
    for (size_t i = 0; i < n; i++) {
        if (i && !strcmp(names[i], names[i - 1])) continue; /* SCAN may return a key twice */
        if (fn(arg, names[i])) break;
    }
}

typedef struct {
    char **v;
    size_t n, cap;
} namevec;

static int names_add(namevec *nv, const char *s) {
    if (nv->n == nv->cap) {
        size_t cap = nv->cap ? nv->cap * 2 : 64;
        char **v = realloc(nv->v, cap * sizeof *v);
        if (!v) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        nv->v = v;
        nv->cap = cap;
    }
    if (!(nv->v[nv->n] = strdup(s))) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    nv->n++;
    return 0;
}

static void names_free(namevec *nv) {
    for (size_t i = 0; i < nv->n; i++) free(nv->v[i]);
    free(nv->v);
}

static int list_script(rconn *c, const char *sha, int simple, char **keys, size_t n, int64_t deadline,
                       redisReply **out);

/* The list script once per key, its answers gathered into one array reply:
 * for a cluster node, where the keys of one script share a hash slot. */
static int list_script_each(rconn *c, const char *sha, int simple, char **keys, size_t n, int64_t deadline,
                            redisReply **out) {
    redisReply *all = calloc(1, sizeof *all);
    if (!all || !(all->element = calloc(n, sizeof *all->element))) {
        free(all);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    all->type = REDIS_REPLY_ARRAY;
    all->elements = n;
    for (size_t i = 0; i < n; i++) {
        redisReply *one = NULL;
        int rc = list_script(c, sha, simple, keys + i, 1, deadline, &one);
        if (rc) {
            rreply_free(all);
            return rc;
        }
        all->element[i] = one->element[0];
        one->element[0] = NULL;
        rreply_free(one);
    }
    *out = all;
    return 0;
}

/* Runs the list script over the N keys KEYS on C (EVALSHA, EVAL on
 * NOSCRIPT): the usual helper takes a fixed, small number of arguments. */
static int list_script(rconn *c, const char *sha, int simple, char **keys, size_t n, int64_t deadline,
                       redisReply **out) {
    size_t argc = n + 4;
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    char nk[24];
    redisReply *r = NULL;
    int rc;
    *out = NULL;
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    snprintf(nk, sizeof nk, "%zu", n);
    argv[0] = "EVALSHA";
    argv[1] = sha;
    argv[2] = nk;
    for (size_t i = 0; i < n; i++) argv[3 + i] = keys[i];
    argv[3 + n] = simple ? "simple" : "redisson";
    for (size_t i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    rc = rconn_command(c, (int)argc, argv, lens, &r, deadline);
    if (!rc && r->type == REDIS_REPLY_ERROR && r->str && !strncmp(r->str, "NOSCRIPT", 8)) {
        rreply_free(r);
        r = NULL;
        argv[0] = "EVAL";
        argv[1] = BATON_LUA_LIST;
        lens[0] = 4;
        lens[1] = strlen(argv[1]);
        rc = rconn_command(c, (int)argc, argv, lens, &r, deadline);
    }
    free(argv);
    free(lens);
    if (rc) return rc;
    if (r->type == REDIS_REPLY_ERROR && n > 1 && r->str && !strncmp(r->str, "CROSSSLOT", 9)) {
        /* A Redis Cluster node: one key (and its side keys) per script. */
        rreply_free(r);
        return list_script_each(c, sha, simple, keys, n, deadline, out);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(r, "the list script failed");
        rreply_free(r);
        return rc;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n) return baton__redis_bad_reply(r, "the list script");
    for (size_t i = 0; i < n; i++)
        if (r->element[i]->type != REDIS_REPLY_STRING) return baton__redis_bad_reply(r, "the list script");
    *out = r;
    return 0;
}

int baton__redis_scan_locks(rconn *c, const char *list_sha, const char *pattern, int simple, int64_t deadline,
                            int (*fn)(void *arg, const char *key, const char *what), void *arg) {
    char cursor[32] = "0";
    namevec cand = { 0 };
    redisReply *r = NULL, *k = NULL;
    int rc = 0;
    do {
        const char *argv[6] = { "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT };
        size_t lens[6];
        for (int i = 0; i < 6; i++) lens[i] = strlen(argv[i]);
        if ((rc = rconn_command(c, 6, argv, lens, &r, deadline))) goto out;
        if (r->type == REDIS_REPLY_ERROR) {
            rc = rreply_error(r, "SCAN failed");
            goto out;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[0]->len >= sizeof cursor || r->element[1]->type != REDIS_REPLY_ARRAY) {
            rc = baton__redis_bad_reply(r, "SCAN");
            r = NULL;
            goto out;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = 0;
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            const redisReply *key = r->element[1]->element[i];
            /* a name with a NUL byte is none baton could have been given */
            if (key->type != REDIS_REPLY_STRING || strlen(key->str) != key->len || baton__redis_side_key(key->str))
                continue;
            if ((rc = names_add(&cand, key->str))) goto out;
        }
        rreply_free(r);
        r = NULL;
        if (cand.n) {
            if ((rc = list_script(c, list_sha, simple, cand.v, cand.n, deadline, &k))) goto out;
            for (size_t i = 0; i < cand.n; i++)
                if (k->element[i]->len > 0 && (rc = fn(arg, cand.v[i], k->element[i]->str))) goto out;
            rreply_free(k);
            k = NULL;
            names_free(&cand);
            memset(&cand, 0, sizeof cand);
        }
    } while (strcmp(cursor, "0") != 0);
out:
    if (r) rreply_free(r);
    if (k) rreply_free(k);
    names_free(&cand);
    return rc;
}

typedef struct {
    namevec nv;
    size_t plen;
} list_ctx;

static int list_add(void *arg, const char *key, const char *what) {
    list_ctx *x = arg;
    (void)what;
    return names_add(&x->nv, key + x->plen);
}

typedef struct {
    reng *e;
    const char *pat;
    int64_t deadline;
    list_ctx *x;
} list_walk;

static int list_walk_node(void *arg, rconn *node) {
    list_walk *w = arg;
    return baton__redis_scan_locks(node, w->e->sha[S_LIST], w->pat, w->e->layout == RB_LAYOUT_SIMPLE, w->deadline,
                                   list_add, w->x);
}

/* The whole walk is one call, bounded by the io timeout: SCAN batches and
 * their scripts on one connection. The lock names are collected first and
 * given out sorted and once each (SCAN may return a key twice). */
int baton__redis_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg) {
    reng *e = eng;
    int64_t deadline = rdeadline_ms(e->cfg.io_timeout_ms);
    list_ctx x = { { 0 }, strlen(e->prefix) };
    char *pat = malloc(2 * (x.plen + strlen(prefix)) + 2);
    rconn *c = NULL;
    int rc;
    if (!pat) return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    baton__redis_glob_escape(pat, e->prefix);
    baton__redis_glob_escape(pat + strlen(pat), prefix);
    strcat(pat, "*");
    if ((rc = rpool_get(&e->pool, &c, deadline))) goto out;
    if (c->route) { /* a cluster: every master's keys */
        list_walk w = { e, pat, deadline, &x };
        rc = rcluster_each_master(c, deadline, list_walk_node, &w);
    } else {
        rc = baton__redis_scan_locks(c, e->sha[S_LIST], pat, e->layout == RB_LAYOUT_SIMPLE, deadline, list_add, &x);
    }
    if (!rc) baton__redis_names_emit(x.nv.v, x.nv.n, fn, arg);
out:
    if (rc && baton_now_ns() >= deadline) {
        char last[256];
        snprintf(last, sizeof last, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        rc = baton_seterr(rc, ETIMEDOUT, "redis: list: the walk over the keys matching '%s' did not finish within "
                          "io_timeout_ms (%d ms); give a longer PREFIX or a larger io_timeout_ms (last: %s)", pat,
                          e->cfg.io_timeout_ms, last);
    }
    if (c) rpool_put(&e->pool, c);
    names_free(&x.nv);
    free(pat);
    return rc;
}

int baton__redis_lock_break(void *eng, const char *name, uint64_t *fence) {
    reng *e = eng;
    rlock fair, rw;
    char *simple_fence = NULL, *simple_chan = NULL, *plain_chan = NULL;
    redisReply *r = NULL;
    int rc;
    *fence = 0;
    /* The fair kind names the lock, its token, holder, queue and timeouts;
     * the read kind the reader timeout prefix and the read-write channel. */
    if ((rc = baton__redis_lock_init(e, name, RK_FAIR, &fair))) return rc;
    if ((rc = baton__redis_lock_init(e, name, RK_READ, &rw))) {
        baton__redis_lock_clear(&fair);
        return rc;
    }
    simple_fence = baton__redis_prefixed("baton_fence", fair.key);
    simple_chan = baton__redis_prefixed("baton_lock__channel", fair.key);
    plain_chan = baton__redis_prefixed("redisson_lock__channel", fair.key);
    if (!simple_fence || !simple_chan || !plain_chan) {
        rc = baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
        goto out;
    }
    const char *argv[12] = {
        fair.key, RL_FENCE(&fair), simple_fence, RL_HOLDER(&fair), RL_QUEUE(&fair), RL_TIMEOUTS(&fair),
        e->layout == RB_LAYOUT_SIMPLE ? "simple" : "redisson", RL_TPREFIX(&rw),
        plain_chan, simple_chan, RL_CHANNEL(&rw), RL_CHANNEL(&fair),
    };
    if ((rc = baton__redis_script(e, S_BREAK, 6, 12, argv, NULL, baton__redis_io_deadline(e), &r, NULL))) goto out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER) {
        rc = baton__redis_bad_reply(r, "the break script");
        r = NULL;
        goto out;
    }
    if (r->element[0]->integer == -1) {
        rc = baton_seterr(BATON_EINVAL, 0, "redis: '%s' is a %s that is not a lock of layout=%s (a semaphore, a "
                          "latch, or data of another program); left alone", fair.key,
                          r->element[1]->type == REDIS_REPLY_STRING || r->element[1]->type == REDIS_REPLY_STATUS
                              ? r->element[1]->str : "key",
                          e->layout == RB_LAYOUT_SIMPLE ? "simple" : "redisson");
        goto out;
    }
    if (r->element[1]->type != REDIS_REPLY_INTEGER || r->element[1]->integer <= 0) {
        rc = baton__redis_bad_reply(r, "the break script (fence)");
        r = NULL;
        goto out;
    }
    *fence = (uint64_t)r->element[1]->integer;
    if (r->element[0]->integer == 0)
        rc = baton_seterr(BATON_ENOTHELD, 0, "redis: '%s' was not held; its fence was bumped", fair.key);
out:
    if (r) rreply_free(r);
    free(simple_fence);
    free(simple_chan);
    free(plain_chan);
    baton__redis_lock_clear(&fair);
    baton__redis_lock_clear(&rw);
    return rc;
}
