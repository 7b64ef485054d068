/*
 * The read-write lock, in the layout of etcd's recipe.RWMutex
 * (client/v3/experimental/recipes), so baton and that recipe share one lock:
 *
 *   <prefix><name>/read/<lease hex>-<owner hex>    a reader, on its client's lease
 *   <prefix><name>/write/<lease hex>-<owner hex>   a writer, on its client's lease
 *
 * value: who ("host pid tid"). The recipe names its keys "<unix ns>"; only
 * the "read/" and "write/" parts and the create revisions matter to either.
 * Each side of each handle has its own key (the owner is per handle), so the
 * local queue of lock.c (one key per lease and name) is not needed here.
 *
 * Ordering is by create revision, as for the mutex:
 *   - a reader waits for the last writer (or mutex key) created before it;
 *   - a writer waits for the last key of any kind created before it.
 * So a waiting writer holds back every reader that comes after it (no writer
 * starvation), and each waiter watches exactly one key, for its DELETE, then
 * looks again: no herd. After each wait the waiter confirms its own key is
 * still there (a lease that expired meanwhile took it: never grant then).
 *
 * Downgrade: a reader skips a writer key of its own owner (the write side of
 * the same handle) and waits for the writer before that one instead.
 *
 * The fence is the key's create revision. A write release records it as
 * the name's last fence (lock.c's "\0fence/<name>") for lock_info.
 *
 * A mutex and a read-write lock on one name share "<name>/" and exclude each
 * other: the mutex sees every reader and writer as a contender, a writer
 * waits for mutex keys like any key, and a reader waits for the last mutex
 * key or writer before it (see look()).
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct erw {
    int kind;                /* ETCD_READ or ETCD_WRITE (first: see etcd_int.h) */
    char *name;
    char *pfx;               /* "<prefix><name>/" */
    size_t plen;
    /* the grant (touched only by calls on this state, which the core serializes) */
    char *key;               /* NULL when not held */
    size_t klen;
    int64_t rev;
    uint64_t gen;
} erw;

static int side_new(eeng *e, const char *name, int kind, erw **out)
{
    size_t pl = strlen(e->prefix), nl = strlen(name);
    erw *s = calloc(1, sizeof *s);

    *out = NULL;
    if (!s || !(s->name = strdup(name)) || !(s->pfx = malloc(pl + nl + 2))) {
        if (s) free(s->name);
        free(s);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    s->kind = kind;
    memcpy(s->pfx, e->prefix, pl);
    memcpy(s->pfx + pl, name, nl);
    memcpy(s->pfx + pl + nl, "/", 2);
    s->plen = pl + nl + 1;
    *out = s;
    return 0;
}

int etcd_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr)
{
    eeng *e = eng;
    erw *r = NULL, *w = NULL;
    int rc;

    *rd = *wr = NULL;
    if (opts && opts->fixed_lease)
        return baton_seterr(BATON_ENOTSUP, 0, "etcd: no fixed leases: a lock lives as long as the client's lease");
    if ((rc = side_new(e, name, ETCD_READ, &r))) return rc;
    if ((rc = side_new(e, name, ETCD_WRITE, &w))) {
        etcd_rw_free(e, r);
        return rc;
    }
    *rd = r;
    *wr = w;
    return 0;
}

void etcd_rw_free(eeng *e, void *st)
{
    erw *s = st;
    if (!s) return;
    etcd_held_del(e, s);
    free(s->key);
    free(s->pfx);
    free(s->name);
    free(s);
}

/* "<pfx>read/" or "<pfx>write/" (malloc'd, *LEN bytes). */
static char *side_prefix(const erw *s, int kind, size_t *len)
{
    const char *tag = kind == ETCD_READ ? "read/" : "write/";
    size_t tl = strlen(tag);
    char *p = malloc(s->plen + tl + 1);
    if (!p) return NULL;
    memcpy(p, s->pfx, s->plen);
    memcpy(p + s->plen, tag, tl + 1);
    *len = s->plen + tl;
    return p;
}

/* Creates our key if absent (value WHO, on lease ID): 0 with its create
 * revision in *REV (an earlier key of ours on this lease is taken over). */
static int create_key(eeng *e, erw *s, int64_t id, const char *who, int64_t *rev, int64_t *sent, int timeout_ms)
{
    char ids[24], *k64 = egw_b64(s->key, s->klen), *v64 = egw_b64(who, strlen(who));
    json_t *req = NULL, *resp = NULL;
    int rc;

    snprintf(ids, sizeof ids, "%lld", (long long)id);
    if (k64 && v64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}], s:[{s:{s:s, s:b}}]}", "compare", "key",
                        k64, "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success", "request_put",
                        "key", k64, "value", v64, "lease", ids, "failure", "request_range", "key", k64, "keys_only", 1);
    free(k64), free(v64);
    *sent = baton_now_ns();
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, timeout_ms))) return rc;
    if (json_is_true(json_object_get(resp, "succeeded")))
        *rev = egw_int(json_object_get(resp, "header"), "revision");
    else
        *rev = egw_int(etcd_txn_kv(resp, 0, NULL), "create_revision");
    json_decref(resp);
    if (*rev <= 0)
        return baton_seterr(BATON_EPROTO, 0, "etcd: the rwlock txn on '%s' answered without a revision", s->name);
    return 0;
}

/* {"request_range": the last key of [FROM, TO) created before revision
 * BOUND, keys only} (NULL when out of memory; json_pack's "o" takes it). */
static json_t *last_before(const char *from, size_t flen, const char *to, size_t tlen, int64_t bound)
{
    char maxr[24], *f64 = egw_b64(from, flen), *t64 = egw_b64(to, tlen);
    json_t *j = NULL;
    snprintf(maxr, sizeof maxr, "%lld", (long long)(bound - 1));
    if (f64 && t64)
        j = json_pack("{s:{s:s, s:s, s:s, s:s, s:s, s:s, s:b}}", "request_range", "key", f64, "range_end", t64,
                      "sort_order", "DESCEND", "sort_target", "CREATE", "limit", "1", "max_create_revision", maxr,
                      "keys_only", 1);
    free(f64), free(t64);
    return j;
}

/* One look in one round trip: the last key created before revision BOUND
 * among those S waits for (*KEY malloc'd, NULL when none; *KREV its create
 * revision), our own key's create revision now (*MINE, 0 = gone) and the
 * revision of that snapshot (*HREV).
 *
 * A writer waits for every key under "<name>/". A reader waits for every
 * key but the readers': the writers ("<name>/write/...") and the mutex's
 * keys of the same name ("<name>/<lease hex>": a plain lock and a
 * read-write lock of one name exclude each other). That is two ranges,
 * ["<name>/", "<name>/read/") and ["<name>/read0", the end of "<name>/")
 * ('0' follows '/'), read in the same txn; the later of the two is the one
 * to wait for. */
static int look(eeng *e, erw *s, int64_t bound, char **key, size_t *klen, int64_t *krev, int64_t *mine,
                int64_t *hrev, int timeout_ms)
{
    size_t el = 0, rl = 0, nr = s->kind == ETCD_READ ? 2 : 1;
    char *end = egw_prefix_end(s->pfx, s->plen, &el), *rd = side_prefix(s, ETCD_READ, &rl),
         *k64 = egw_b64(s->key, s->klen);
    json_t *req = NULL, *resp = NULL, *best = NULL, *extra = NULL;
    const char *k;
    int rc;

    *key = NULL;
    *krev = 0;
    if (end && rd && k64) {
        if (s->kind == ETCD_READ) {
            json_t *below = last_before(s->pfx, s->plen, rd, rl, bound);
            rd[rl - 1] = '0'; /* "<name>/read0": just past every "<name>/read/..." key */
            req = json_pack("{s:[o, o, {s:{s:s, s:b}}]}", "success", below, last_before(rd, rl, end, el, bound),
                            "request_range", "key", k64, "keys_only", 1);
        } else {
            req = json_pack("{s:[o, {s:{s:s, s:b}}]}", "success", last_before(s->pfx, s->plen, end, el, bound),
                            "request_range", "key", k64, "keys_only", 1);
        }
    }
    free(k64);
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, timeout_ms))) {
        free(end), free(rd);
        return rc;
    }
    *hrev = egw_int(json_object_get(resp, "header"), "revision");
    *mine = egw_int(etcd_txn_kv(resp, nr, NULL), "create_revision");
    for (size_t i = 0; i < nr; i++) {
        json_t *kv = etcd_txn_kv(resp, i, NULL);
        if (kv && !etcd_own_kv(kv, s->plen)) {
            /* a key of a name below ours ("<name>/x/..."): the nearest of
             * our own before it in that range, read after (a watch from
             * HREV still sees it go) */
            json_t *r2 = NULL;
            const char *from = s->pfx, *to = end;
            size_t fl = s->plen, tl = el;
            if (s->kind == ETCD_READ && i == 0) to = rd, tl = rl, rd[rl - 1] = '/'; /* ["<name>/", "<name>/read/") */
            else if (s->kind == ETCD_READ) from = rd, fl = rl;
            rc = etcd_own_next(e, from, fl, to, tl, s->plen, 1, egw_int(kv, "create_revision") - 1, 1, &r2, &kv,
                               timeout_ms);
            if (s->kind == ETCD_READ) rd[rl - 1] = '0';
            if (rc) {
                json_decref(resp), json_decref(extra);
                free(end), free(rd);
                return rc;
            }
            if (!extra) extra = json_array();
            json_array_append_new(extra, r2 ? r2 : json_null());
        }
        if (kv && egw_int(kv, "create_revision") > *krev) {
            best = kv;
            *krev = egw_int(kv, "create_revision");
        }
    }
    free(end), free(rd);
    if (best) {
        k = json_string_value(json_object_get(best, "key"));
        if (!k || egw_unb64(k, key, klen)) {
            json_decref(resp), json_decref(extra);
            return baton_seterr(BATON_EPROTO, 0, "etcd: a key that is not base64 in a range answer");
        }
    }
    json_decref(resp), json_decref(extra);
    if (*hrev <= 0) {
        free(*key);
        *key = NULL;
        return baton_seterr(BATON_EPROTO, 0, "etcd: a txn answer without a header revision");
    }
    return 0;
}

/* KEY (LEN bytes) is a key of OWNER (it ends in "-<owner hex>")? */
static int owned(const char *key, size_t len, const baton_owner *owner)
{
    size_t hl = strlen(owner->hex);
    return len > hl && key[len - hl - 1] == '-' && !memcmp(key + len - hl, owner->hex, hl);
}

int etcd_rw_acquire(eeng *e, void *st, baton_acquire_req *req)
{
    erw *s = st;
    size_t tl;
    int64_t id, myrev = 0, sent = 0;
    uint64_t gen;
    int rc, tries = 0;

again:
    if (++tries > 5) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: the client's lease keeps expiring while acquiring '%s'",
                          s->name);
        goto fail;
    }
    if ((rc = etcd_lease_get(e, &id, &gen, etcd_call_ms(e, req->deadline_ns)))) goto fail;
    free(s->key);
    tl = s->plen + (s->kind == ETCD_READ ? 5 : 6);
    if (!(s->key = malloc(tl + 20 + 34))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    memcpy(s->key, s->pfx, s->plen);
    memcpy(s->key + s->plen, s->kind == ETCD_READ ? "read/" : "write/", tl - s->plen);
    s->klen = tl + (size_t)snprintf(s->key + tl, 20 + 34, "%llx-%s", (unsigned long long)id, req->owner->hex);
    s->gen = gen;
    /* a withdrawal of this very key may still be pending */
    if ((rc = etcd_orphan_settle(e, s->key, s->klen, baton_now_ns() + etcd_call_ms(e, req->deadline_ns) * 1000000LL)))
        goto fail;
    if ((rc = create_key(e, s, id, req->owner->desc, &myrev, &sent, etcd_call_ms(e, req->deadline_ns)))) {
        if (etcd_is_lease_gone()) {
            etcd_lease_dead(e, gen);
            goto again;
        }
        goto fail;
    }
    for (int64_t bound = myrev;;) {
        char *bk = NULL;
        size_t bkl = 0;
        int64_t hrev = 0, mine = 0, brev = 0;
        if ((rc = look(e, s, bound, &bk, &bkl, &brev, &mine, &hrev, etcd_call_ms(e, req->deadline_ns)))) goto fail_del;
        if (mine != myrev) {
            /* our key went with the lease while we waited */
            free(bk);
            etcd_lease_dead(e, gen);
            goto again;
        }
        if (!bk) break; /* at revision hrev our key exists and nothing blocks it */
        if (s->kind == ETCD_READ && owned(bk, bkl, req->owner) && brev > 0 && brev < bound) {
            /* our own write side (downgrade): wait for the writer before it */
            free(bk);
            bound = brev;
            continue;
        }
        if (req->deadline_ns == 0) {
            free(bk);
            rc = baton_seterr(BATON_ELOCKED, 0, "etcd: '%s' is held (%s side blocked)", s->name,
                              s->kind == ETCD_READ ? "read" : "write");
            etcd_withdraw(e, s->name, s->key, s->klen, myrev, gen, etcd_call_ms(e, 0));
            goto fail;
        }
        rc = egw_wait_delete(e->gw, bk, bkl, hrev + 1, req->deadline_ns, req->waiter);
        free(bk);
        if (rc == BATON_ETIMEDOUT) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "etcd: '%s' still held at the deadline", s->name);
            goto fail_del;
        }
        if (rc == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "etcd: acquire of '%s' canceled", s->name);
            goto fail_del;
        }
        if (rc) goto fail_del;
        if (!etcd_lease_live(e, gen)) {
            /* lost while we waited: leave the line, queue again */
            etcd_withdraw(e, s->name, s->key, s->klen, myrev, gen, etcd_call_ms(e, req->deadline_ns));
            goto again;
        }
        bound = myrev; /* look again from our own key */
    }
    if (!etcd_lease_live(e, gen)) {
        /* declared lost while we acquired: the report could not name this grant */
        etcd_withdraw(e, s->name, s->key, s->klen, myrev, gen, etcd_call_ms(e, req->deadline_ns));
        goto again;
    }
    req->fence = (uint64_t)myrev;
    req->sent_ns = sent;
    s->rev = myrev;
    /* a key deleted by someone else is found at the next keep-alive */
    etcd_held_add(e, s, s->key, s->klen, myrev);
    return 0;
fail_del:
    /* leave the queue, keeping the error that made us leave: at once if the
     * server answers within the grace, else by the keep-alive thread */
    etcd_withdraw(e, s->name, s->key, s->klen, myrev, gen, etcd_call_ms(e, req->deadline_ns));
fail:
    free(s->key);
    s->key = NULL;
    return rc;
}

int etcd_rw_release(eeng *e, void *st)
{
    erw *s = st;
    int rc, del = 0, live;

    if (!s->key) return baton_seterr(BATON_ENOTHELD, 0, "etcd: '%s' is not held", s->name);
    etcd_held_del(e, s);
    live = etcd_lease_live(e, s->gen);
    rc = etcd_delete_own(e, s->name, s->key, s->klen, s->rev, s->kind == ETCD_WRITE, &del, 0);
    if (rc == 0 && (!del || !live))
        rc = baton_seterr(BATON_ELOST, 0, "etcd: '%s' was lost (its key or lease is gone)", s->name);
    if (rc == 0 || rc == BATON_ELOST) {
        free(s->key);
        s->key = NULL;
    }
    return rc;
}
