/*
 * What an operator asks of the engine (baton list, baton unlock --force).
 * docs/etcd-engine.md, "Operator commands".
 *
 * list: a range over the prefix (keys only). A key "<name>/<lease hex>"
 * (concurrency.Mutex, etcdctl lock; also concurrency.Election, the same
 * layout) or "<name>/read|write/<...>" (recipe.RWMutex) is a contender of
 * NAME, and a name with any contender is held (by its key of lowest create
 * revision). Keys starting with NUL (fences, semaphores, permits) are not
 * locks.
 *
 * break: the holding keys (the first by create revision, or the readers at
 * the head of the line) are deleted in one txn that checks their create
 * revisions and writes the name's fence key, so the txn always makes a new
 * revision: that revision is the bumped fence. A fence is a key's create
 * revision, and revisions only grow: every key created later, so every
 * later grant, has a greater one. A contender already queued when the lock
 * was broken keeps its older create revision: its grant carries a fence
 * above the broken holder's but below the printed one. The holder learns of
 * the loss at its next keep-alive (etcd.c checks its keys then).
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BREAK_TRIES 3            /* the line changed between look and delete: look again */
#define BREAK_MAX 64             /* holders deleted in one txn (readers) */

static int is_hex(const char *p, size_t n)
{
    if (!n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f'))) return 0;
    return 1;
}

/* The lock name a key (after the prefix, LEN bytes) is a contender of:
 * its length, or 0 when it is none. */
static size_t name_of(const char *k, size_t len)
{
    const char *slash = len ? memrchr(k, '/', len) : NULL;
    size_t nl;
    if (!len || !k[0] || !slash || slash == k) return 0;
    nl = (size_t)(slash - k);
    if (is_hex(slash + 1, len - nl - 1)) return nl;     /* <name>/<lease hex> */
    /* <name>/read/<x> or <name>/write/<x> */
    if (nl >= 6 && !memcmp(slash - 5, "/read", 5)) return nl - 5;
    if (nl >= 7 && !memcmp(slash - 6, "/write", 6)) return nl - 6;
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int etcd_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), ql = strlen(prefix ? prefix : ""), el, n = 0, cap = 0;
    char *start = malloc(pl + ql + 1), *end = NULL, *s64 = NULL, *e64 = NULL, **names = NULL;
    json_t *resp = NULL, *kvs;
    int rc;

    if (!start) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    memcpy(start, e->prefix, pl);
    memcpy(start + pl, prefix ? prefix : "", ql + 1);
    if (pl + ql == 0) {
        /* everything: from the first key on ("\0" as range end) */
        s64 = egw_b64("\0", 1);
        e64 = egw_b64("\0", 1);
    } else {
        end = egw_prefix_end(start, pl + ql, &el);
        s64 = egw_b64(start, pl + ql);
        e64 = end ? egw_b64(end, el) : NULL;
    }
    if (!s64 || !e64) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = egw_call_idem(e->gw, "/v3/kv/range",
                            json_pack("{s:s, s:s, s:b}", "key", s64, "range_end", e64, "keys_only", 1), &resp, 0)))
        goto out;
    kvs = json_object_get(resp, "kvs");
    for (size_t i = 0; i < json_array_size(kvs); i++) {
        const char *k = json_string_value(json_object_get(json_array_get(kvs, i), "key"));
        char *dk = NULL;
        size_t kl, nl;
        if (!k || egw_unb64(k, &dk, &kl)) continue;
        if (kl > pl && !memcmp(dk, e->prefix, pl) && (nl = name_of(dk + pl, kl - pl)) > 0 && nl >= ql &&
            !memchr(dk + pl, 0, nl) && !memcmp(dk + pl, prefix ? prefix : "", ql)) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                char **nv = realloc(names, nc * sizeof *nv);
                if (!nv) {
                    free(dk);
                    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                    goto out;
                }
                names = nv;
                cap = nc;
            }
            dk[pl + nl] = 0;
            if (!(names[n] = strdup(dk + pl))) {
                free(dk);
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto out;
            }
            n++;
        }
        free(dk);
    }
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++)
        if ((i == 0 || strcmp(names[i], names[i - 1])) && fn(arg, names[i])) break;
out:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    json_decref(resp);
    free(start), free(end), free(s64), free(e64);
    return rc;
}

/* "<prefix>\0fence/<name>", as lock.c keeps it. */
static char *fence_key(eeng *e, const char *name, size_t *len)
{
    size_t pl = strlen(e->prefix), nl = strlen(name);
    char *k = malloc(pl + nl + 8);
    if (!k) return NULL;
    memcpy(k, e->prefix, pl);
    memcpy(k + pl, "\0fence/", 7);
    memcpy(k + pl + 7, name, nl + 1);
    *len = pl + 7 + nl;
    return k;
}

/* Is KEY (after "<prefix><name>/", LEN bytes) a reader of the rw layout? */
static int is_reader(const char *k, size_t len) { return len > 5 && !memcmp(k, "read/", 5); }

int etcd_lock_break(void *eng, const char *name, uint64_t *fence)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), nl = strlen(name), fl, el;
    char *pfx = malloc(pl + nl + 2), *fk = fence_key(e, name, &fl), *f64 = fk ? egw_b64(fk, fl) : NULL;
    int rc = 0, broke = 0;

    *fence = 0;
    if (!pfx || !f64) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    memcpy(pfx, e->prefix, pl);
    memcpy(pfx + pl, name, nl);
    memcpy(pfx + pl + nl, "/", 2);
    for (int tries = 0;; tries++) {
        char *end = egw_prefix_end(pfx, pl + nl + 1, &el), *p64 = egw_b64(pfx, pl + nl + 1),
             *e64 = end ? egw_b64(end, el) : NULL;
        json_t *resp = NULL, *kvs, *cmp = json_array(), *ops = json_array(), *tx;
        int64_t rev = 0;
        size_t nh = 0;
        int first_reader = 0;
        free(end);
        if (!p64 || !e64 || !cmp || !ops) {
            free(p64), free(e64), json_decref(cmp), json_decref(ops);
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto out;
        }
        /* the line, by create revision */
        rc = egw_call_idem(e->gw, "/v3/kv/range",
                           json_pack("{s:s, s:s, s:s, s:s, s:b, s:I}", "key", p64, "range_end", e64, "sort_order",
                                     "ASCEND", "sort_target", "CREATE", "keys_only", 1, "limit",
                                     (json_int_t)BREAK_MAX + 1), &resp, 0);
        free(p64), free(e64);
        if (rc) {
            json_decref(cmp), json_decref(ops);
            goto out;
        }
        kvs = json_object_get(resp, "kvs");
        for (size_t i = 0; i < json_array_size(kvs) && nh < BREAK_MAX; i++) {
            json_t *kv = json_array_get(kvs, i);
            const char *k = json_string_value(json_object_get(kv, "key"));
            char *dk = NULL, revs[24];
            size_t kl;
            int reader;
            if (!k || egw_unb64(k, &dk, &kl)) continue;
            if (!etcd_own_key(dk, kl, pl + nl + 1)) {
                /* a key of a name below this one ("<name>/x/..."): not ours to break */
                free(dk);
                continue;
            }
            reader = kl > pl + nl + 1 && is_reader(dk + pl + nl + 1, kl - pl - nl - 1);
            free(dk);
            /* the first key holds; readers at the head hold together */
            if (nh == 0) first_reader = reader;
            else if (!first_reader || !reader) break;
            snprintf(revs, sizeof revs, "%lld", (long long)egw_int(kv, "create_revision"));
            json_array_append_new(cmp, json_pack("{s:s, s:s, s:s, s:s}", "key", k, "target", "CREATE", "result",
                                                 "EQUAL", "create_revision", revs));
            json_array_append_new(ops, json_pack("{s:{s:s}}", "request_delete_range", "key", k));
            nh++;
        }
        json_decref(resp);
        resp = NULL;
        json_array_append_new(ops, json_pack("{s:{s:s, s:s}}", "request_put", "key", f64, "value", "MA=="));
        tx = json_pack("{s:o, s:o}", "compare", cmp, "success", ops);
        if ((rc = egw_call(e->gw, "/v3/kv/txn", tx, &resp, 0))) goto out;
        rev = egw_int(json_object_get(resp, "header"), "revision");
        if (json_is_true(json_object_get(resp, "succeeded"))) {
            json_decref(resp);
            broke = nh > 0;
            *fence = (uint64_t)rev;
            break;
        }
        json_decref(resp);
        if (tries + 1 >= BREAK_TRIES) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: '%s' changes too fast to break", name);
            goto out;
        }
    }
    {
        /* lock_info's "last fence": the one just made (best effort) */
        char v[24], *v64;
        json_t *resp = NULL;
        snprintf(v, sizeof v, "%llu", (unsigned long long)*fence);
        if ((v64 = egw_b64(v, strlen(v))) &&
            !egw_call(e->gw, "/v3/kv/put", json_pack("{s:s, s:s}", "key", f64, "value", v64), &resp, 0))
            json_decref(resp);
        free(v64);
    }
    if (!broke) rc = baton_seterr(BATON_ENOTHELD, 0, "etcd: '%s' was not held (fence bumped to %llu)", name,
                                  (unsigned long long)*fence);
out:
    free(pfx), free(fk), free(f64);
    return rc;
}
