/*
 * The mutex, in the layout of etcd's concurrency.Mutex (what `etcdctl lock`
 * uses), so both exclude each other on one name:
 *
 *   <prefix><name>/<lease id, lowercase hex>   one key per contender, on its
 *                                               client's lease; value: who
 *                                               (baton: "host pid tid")
 *
 * A contender creates its key in a txn if the key's create revision is 0
 * (and reads the first key by create revision in the same round trip); the
 * owner is the key with the lowest create revision under "<name>/". A waiter
 * watches only the key with the greatest create revision below its own, for
 * its DELETE, and looks again; after the wait it confirms its own key still
 * exists (a lease that expired while it waited took the key with it: the
 * etcd 3.4 mutex bug Jepsen found). The fence is the key's create revision;
 * release deletes the key in a txn that checks that create revision (so a
 * stale holder never deletes a newer contender's key).
 *
 * The last fence granted for a name is kept, for lock_info once nobody holds
 * the lock, in "<prefix>\0fence/<name>" (written by the release txn): a NUL
 * never starts a name, so no lock's "<name>/" range covers it.
 *
 * The key is per lease, i.e. per client: two lock states of one client on
 * one name would share it, so they first queue here (ename), one at a time.
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct elock {
    int kind;                /* ETCD_MUTEX or ETCD_CANDIDATE (first: see etcd_int.h) */
    eeng *e;
    ename *n;
    char *pfx;               /* "<prefix><name>/" */
    size_t plen;
    int election;            /* a candidate (concurrency.Election): the key's value is what it proclaims */
    /* the grant (touched only by the calls on this state, which the core serializes) */
    char *key;               /* NULL when not held */
    size_t klen;
    int64_t rev;
    uint64_t gen;
} elock;

/* ---- local queue of one client's states per name -------------------------- */

static void queue_drop(ename *n, ename_wait *q)
{
    ename_wait **pp = &n->head, *prev = NULL;
    while (*pp && *pp != q) prev = *pp, pp = &(*pp)->next;
    if (!*pp) return;
    *pp = q->next;
    if (n->tail == q) n->tail = prev;
}

/* Takes NAME for L when nobody of this client holds it and no older local
 * waiter is in line; else waits in line (a try answers ELOCKED). */
static int claim(eeng *e, elock *l, int64_t deadline, baton_waiter *w)
{
    ename *n = l->n;
    ename_wait q = { w, NULL };
    int queued = 0, rc = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        if (n->holder == l) break;
        if (!n->holder && (queued ? n->head == &q : !n->head)) {
            n->holder = l;
            break;
        }
        if (deadline == 0) {
            rc = baton_seterr(BATON_ELOCKED, 0, "etcd: '%s' is held by this client", n->name);
            break;
        }
        if (!queued) {
            if (n->tail) n->tail->next = &q;
            else n->head = &q;
            n->tail = &q;
            queued = 1;
        }
        unsigned seen = baton_waiter_gen(w);
        pthread_mutex_unlock(&e->mu);
        int prc = baton_waiter_park(w, seen, deadline);
        pthread_mutex_lock(&e->mu);
        if (n->holder == l || (!n->holder && n->head == &q)) continue; /* ours now: take it first */
        if (prc == BATON_ECANCELED || baton_waiter_canceled(w)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "etcd: acquire of '%s' canceled", n->name);
            break;
        }
        if (deadline != INT64_MAX && baton_now_ns() >= deadline) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "etcd: '%s' still held by this client", n->name);
            break;
        }
    }
    if (queued) {
        int was_head = n->head == &q;
        queue_drop(n, &q);
        /* leaving the head of the line with nobody holding: the next one's turn */
        if (rc && was_head && !n->holder && n->head) baton_waiter_wake(n->head->w);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

static void unclaim(eeng *e, elock *l)
{
    pthread_mutex_lock(&e->mu);
    if (l->n->holder == l) {
        l->n->holder = NULL;
        if (l->n->head) baton_waiter_wake(l->n->head->w);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- states ----------------------------------------------------------------- */

static int state_new(eeng *e, const char *name, const baton_lock_options *opts, int election, void **st);

int etcd_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    return state_new(eng, name, opts, 0, st);
}

/* A candidate in the election NAME, on concurrency.Election's layout: the
 * same keys as the mutex ("<name>/<lease hex>", the value being what it
 * proclaims), the leader being the first by create revision. */
int etcd_election_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    return state_new(eng, name, opts, 1, st);
}

static int state_new(eeng *e, const char *name, const baton_lock_options *opts, int election, void **st)
{
    elock *l;
    ename *n;
    size_t pl = strlen(e->prefix), nl = strlen(name);

    *st = NULL;
    if (opts && opts->fixed_lease)
        return baton_seterr(BATON_ENOTSUP, 0, "etcd: no fixed leases: a lock lives as long as the client's lease");
    if (!(l = calloc(1, sizeof *l)) || !(l->pfx = malloc(pl + nl + 2))) goto nomem;
    memcpy(l->pfx, e->prefix, pl);
    memcpy(l->pfx + pl, name, nl);
    l->pfx[pl + nl] = '/';
    l->pfx[pl + nl + 1] = 0;
    l->plen = pl + nl + 1;
    l->kind = election ? ETCD_CANDIDATE : ETCD_MUTEX;
    l->e = e;
    l->election = election;
    pthread_mutex_lock(&e->mu);
    for (n = e->names; n && strcmp(n->name, name); n = n->next) {}
    if (!n) {
        if (!(n = calloc(1, sizeof *n)) || !(n->name = strdup(name))) {
            pthread_mutex_unlock(&e->mu);
            free(n);
            goto nomem;
        }
        n->next = e->names;
        e->names = n;
    }
    n->refs++;
    l->n = n;
    pthread_mutex_unlock(&e->mu);
    *st = l;
    return 0;
nomem:
    if (l) free(l->pfx);
    free(l);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

void etcd_lock_free(void *eng, void *st)
{
    eeng *e = eng;
    elock *l = st;
    if (!l) return;
    if (l->kind == ETCD_READ || l->kind == ETCD_WRITE) {
        etcd_rw_free(e, st);
        return;
    }
    if (l->kind == ETCD_MEMBER) {
        etcd_member_free(e, st);
        return;
    }
    if (l->kind == ETCD_TAKER) {
        etcd_taker_free(e, st);
        return;
    }
    etcd_held_del(e, l);
    unclaim(e, l);
    pthread_mutex_lock(&e->mu);
    if (--l->n->refs == 0) {
        for (ename **pp = &e->names; *pp; pp = &(*pp)->next)
            if (*pp == l->n) {
                *pp = l->n->next;
                break;
            }
        free(l->n->name);
        free(l->n);
    }
    pthread_mutex_unlock(&e->mu);
    free(l->key);
    free(l->pfx);
    free(l);
}

/* ---- requests --------------------------------------------------------------- */

/* {"request_range": the first key of [P, P's end) by create revision} */
json_t *etcd_first_create(const char *p, size_t len)
{
    size_t el;
    char *end = egw_prefix_end(p, len, &el), *p64 = egw_b64(p, len), *e64 = end ? egw_b64(end, el) : NULL;
    json_t *j = p64 && e64 ? json_pack("{s:{s:s, s:s, s:s, s:s, s:s}}", "request_range", "key", p64, "range_end", e64,
                                       "sort_order", "ASCEND", "sort_target", "CREATE", "limit", "1")
                           : NULL;
    free(end), free(p64), free(e64);
    return j;
}

/* ---- one name's keys among its children's ------------------------------------ */

/* Whether KEY (KLEN bytes), under "<prefix><name>/" (PLEN bytes), is one of
 * NAME's own keys: a contender "<name>/<lease hex>" (the mutex, an election),
 * or a side of the read-write lock "<name>/read/<id>", "<name>/write/<id>" —
 * and not a key of a lock named "<name>/<more>" ("a/x/<lease>" is in the
 * range of "a/" too: counting it made "a/x" block "a" and show as its
 * holder). etcd's concurrency.Mutex has no such check (`etcdctl lock a`
 * waits for `etcdctl lock a/x`); a name's own keys are the same either way,
 * so both still exclude each other on one name. A lock named "<name>/read"
 * or "<name>/write" shares keys with NAME's read-write lock, as in etcd's
 * recipe. */
int etcd_own_key(const char *key, size_t klen, size_t plen)
{
    const char *s = key + plen, *sl;
    size_t n;
    if (klen <= plen) return 0;
    n = klen - plen;
    if (!(sl = memchr(s, '/', n))) return 1;
    if (((size_t)(sl - s) == 4 && !memcmp(s, "read", 4)) || ((size_t)(sl - s) == 5 && !memcmp(s, "write", 5)))
        return sl + 1 < s + n && !memchr(sl + 1, '/', (size_t)(s + n - sl - 1));
    return 0;
}

/* KV (a kv of a range answer) is one of the name's own keys (see above)? */
int etcd_own_kv(json_t *kv, size_t plen)
{
    const char *k = json_string_value(json_object_get(kv, "key"));
    char *dk = NULL;
    size_t kl;
    int own;
    if (!k || egw_unb64(k, &dk, &kl)) return 0;
    own = etcd_own_key(dk, kl, plen);
    free(dk);
    return own;
}

/* How many pages of foreign keys etcd_own_next reads before giving up: a
 * name with more than 32768 keys of its children before its own. */
#define OWN_PAGES 1024

int etcd_own_next(eeng *e, const char *from, size_t flen, const char *to, size_t tlen, size_t plen, int desc,
                  int64_t bound, int keys_only, json_t **resp, json_t **kv, int timeout_ms)
{
    char b[24], *f64 = egw_b64(from, flen), *t64 = egw_b64(to, tlen);
    int rc = 0;

    *resp = NULL;
    *kv = NULL;
    if (!f64 || !t64) {
        free(f64), free(t64);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    for (int page = 0; page < OWN_PAGES; page++) {
        json_t *kvs, *last = NULL;
        if (desc && bound <= 0) goto out;   /* max_create_revision 0 would mean "no bound" */
        snprintf(b, sizeof b, "%lld", (long long)bound);
        if ((rc = egw_call_idem(e->gw, "/v3/kv/range",
                                json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "key", f64, "range_end", t64,
                                          "sort_order", desc ? "DESCEND" : "ASCEND", "sort_target", "CREATE", "limit",
                                          "32", desc ? "max_create_revision" : "min_create_revision", b, "keys_only",
                                          keys_only),
                                resp, timeout_ms)))
            break;
        kvs = json_object_get(*resp, "kvs");
        for (size_t i = 0; i < json_array_size(kvs); i++) {
            last = json_array_get(kvs, i);
            if (etcd_own_kv(last, plen)) {
                *kv = last;
                goto out;
            }
        }
        if (!last || !json_is_true(json_object_get(*resp, "more"))) goto out;   /* none of its own */
        bound = egw_int(last, "create_revision") + (desc ? -1 : 1);
        json_decref(*resp);
        *resp = NULL;
    }
    if (!rc) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: too many keys of names below '%.*s'", (int)plen, from);
out:
    free(f64), free(t64);
    if (rc) {
        json_decref(*resp);
        *resp = NULL;
    }
    return rc;
}

/* The first kv of the i-th range response of a txn answer. */
json_t *etcd_txn_kv(json_t *resp, size_t i, int64_t *count)
{
    json_t *r = json_object_get(json_array_get(json_object_get(resp, "responses"), i), "response_range");
    if (count) *count = egw_int(r, "count");
    return json_array_get(json_object_get(r, "kvs"), 0);
}

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

/* Deletes KEY if its create revision is still REV (the release txn). With
 * MARK, also records REV as the last fence of NAME. *DELETED = 1 when it was
 * our key.
 *
 * Safe to send again (egw_call_idem): applied twice it deletes nothing more,
 * since the compare is on our own create revision. Only the answer of a
 * repeat differs (the key is already gone), so the failure branch says why
 * the compare failed: our key absent after a re-sent request, or (MARK) the
 * name's last fence being our revision — written by this very txn — means
 * an earlier attempt deleted it ("leader changed" answers the first one
 * with no result). A key there at another revision is a newer contender's:
 * not ours. */
int etcd_delete_own(eeng *e, const char *name, const char *key, size_t klen, int64_t rev, int mark, int *deleted,
                    int timeout_ms)
{
    char revs[24], *k64 = egw_b64(key, klen), *f64 = NULL, *v64 = NULL, *fk = NULL;
    size_t fl;
    json_t *req = NULL, *resp = NULL, *ops, *fails;
    int rc, resent = 0;

    *deleted = 0;
    snprintf(revs, sizeof revs, "%lld", (long long)rev);
    if (!k64) goto nomem;
    if (!(req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s}}], s:[{s:{s:s, s:b}}]}", "compare", "key", k64,
                          "target", "CREATE", "result", "EQUAL", "create_revision", revs, "success",
                          "request_delete_range", "key", k64, "failure", "request_range", "key", k64, "keys_only", 1)))
        goto nomem;
    if (mark) {
        if (!(fk = fence_key(e, name, &fl)) || !(f64 = egw_b64(fk, fl)) || !(v64 = egw_b64(revs, strlen(revs))))
            goto nomem;
        ops = json_object_get(req, "success");
        fails = json_object_get(req, "failure");
        if (json_array_append_new(ops, json_pack("{s:{s:s, s:s}}", "request_put", "key", f64, "value", v64)) ||
            json_array_append_new(fails, json_pack("{s:{s:s}}", "request_range", "key", f64)))
            goto nomem;
    }
    rc = egw_call_idem_resent(e->gw, "/v3/kv/txn", req, &resp, timeout_ms, &resent);
    req = NULL;
    if (!rc) {
        if (json_is_true(json_object_get(resp, "succeeded"))) {
            *deleted = 1;
        } else {
            int64_t n = 0;
            json_t *fkv;
            etcd_txn_kv(resp, 0, &n);
            if (n == 0 && resent) *deleted = 1; /* gone: our first attempt went through */
            if (mark && (fkv = etcd_txn_kv(resp, 1, NULL))) {
                const char *v = json_string_value(json_object_get(fkv, "value"));
                char *dv = NULL;
                size_t dl;
                if (v && !egw_unb64(v, &dv, &dl) && dv && !strcmp(dv, revs) && n == 0) *deleted = 1;
                free(dv);
            }
        }
    }
    json_decref(resp);
    free(k64), free(f64), free(v64), free(fk);
    return rc;
nomem:
    json_decref(req);
    free(k64), free(f64), free(v64), free(fk);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

int etcd_call_ms(eeng *e, int64_t deadline)
{
    int64_t left;
    if (deadline == 0 || deadline == INT64_MAX) return e->io_timeout_ms;
    left = (deadline - baton_now_ns()) / 1000000;
    if (left < 0) left = 0;
    left += ETCD_GRACE_MS;
    return left < e->io_timeout_ms ? (int)left : e->io_timeout_ms;
}

void etcd_withdraw(eeng *e, const char *name, const char *key, size_t klen, int64_t rev, uint64_t gen,
                   int timeout_ms)
{
    baton_error saved = *baton_error_last();
    char msg[256];
    eorphan *o;
    int del;
    snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
    if (etcd_delete_own(e, name, key, klen, rev, 0, &del, timeout_ms) == 0) goto out;
    /* no answer in time: a key left in the line would hold every later
     * contender off while our lease lives, so the keep-alive thread deletes
     * it (and a new key of the same name waits for that: settle) */
    if (!(o = calloc(1, sizeof *o)) || !(o->name = strdup(name)) || !(o->key = malloc(klen + 1))) {
        if (o) free(o->name);
        free(o);
        goto out; /* it then stays until the lease ends */
    }
    memcpy(o->key, key, klen);
    o->key[klen] = 0;
    o->klen = klen;
    o->rev = rev;
    o->gen = gen;
    pthread_mutex_lock(&e->mu);
    o->next = e->orphans;
    e->orphans = o;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
out:
    baton_seterr(saved.code, saved.native, "%s", msg);
}

int etcd_orphan_settle(eeng *e, const char *key, size_t klen, int64_t deadline)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        eorphan *o;
        for (o = e->orphans; o; o = o->next)
            if (o->klen == klen && !memcmp(o->key, key, klen)) break;
        if (!o) break;
        if (baton_now_ns() >= deadline) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: an earlier key of ours (%.*s) is still being removed",
                              (int)klen, key);
            break;
        }
        {
            struct timespec ts = { .tv_sec = (time_t)(deadline / 1000000000LL),
                                   .tv_nsec = (long)(deadline % 1000000000LL) };
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* The create-if-absent txn: our key on lease ID (value: who), and the
 * owner. 0 with *MYREV, *OWNERREV, *SENT. */
static int create_key(eeng *e, elock *l, int64_t id, const char *value, int64_t *myrev, int64_t *ownrev,
                      int64_t *sent, int *existed, int timeout_ms)
{
    char ids[24], *k64 = egw_b64(l->key, l->klen), *v64 = egw_b64(value, strlen(value));
    json_t *req = NULL, *resp = NULL, *kv;
    int rc;

    snprintf(ids, sizeof ids, "%lld", (long long)id);
    if (k64 && v64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}, o], s:[{s:{s:s}}, o]}", "compare", "key",
                        k64, "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success", "request_put",
                        "key", k64, "value", v64, "lease", ids, etcd_first_create(l->pfx, l->plen), "failure",
                        "request_range", "key", k64, etcd_first_create(l->pfx, l->plen));
    free(k64), free(v64);
    *sent = baton_now_ns();
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, timeout_ms))) return rc;
    *existed = !json_is_true(json_object_get(resp, "succeeded"));
    if (!*existed) {
        *myrev = egw_int(json_object_get(resp, "header"), "revision");
    } else {
        kv = etcd_txn_kv(resp, 0, NULL);
        *myrev = egw_int(kv, "create_revision");
    }
    kv = etcd_txn_kv(resp, 1, NULL);
    *ownrev = egw_int(kv, "create_revision");
    if (kv && !etcd_own_kv(kv, l->plen)) {
        /* the first key is a name's below ours ("<name>/x/..."): the first of
         * our own, read after (a key before ours then was before it too) */
        json_t *r2 = NULL, *own = NULL;
        size_t el;
        char *end = egw_prefix_end(l->pfx, l->plen, &el);
        rc = end ? etcd_own_next(e, l->pfx, l->plen, end, el, l->plen, 0, *ownrev + 1, 1, &r2, &own, timeout_ms)
                 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        free(end);
        /* none: our key is gone already (the wait loop finds out) */
        *ownrev = own ? egw_int(own, "create_revision") : INT64_MAX;
        json_decref(r2);
        if (rc) {
            json_decref(resp);
            return rc;
        }
    }
    json_decref(resp);
    if (*myrev <= 0 || *ownrev <= 0)
        return baton_seterr(BATON_EPROTO, 0, "etcd: the lock txn on '%s' answered without revisions", l->n->name);
    return 0;
}

/* One read, in one round trip (a txn of two ranges, one revision): the key
 * just before ours (greatest create revision below MYREV; *KEY malloc'd,
 * NULL when none), our own key's create revision now (*MINE, 0 = gone) and
 * the revision of that snapshot (*HREV). */
static int look(eeng *e, elock *l, int64_t myrev, char **key, size_t *klen, int64_t *mine, int64_t *hrev,
                int timeout_ms)
{
    size_t el;
    char maxr[24], *end = egw_prefix_end(l->pfx, l->plen, &el), *p64 = egw_b64(l->pfx, l->plen),
                   *e64 = end ? egw_b64(end, el) : NULL, *k64 = egw_b64(l->key, l->klen);
    json_t *req = NULL, *resp = NULL, *kv;
    const char *k;
    int rc;

    *key = NULL;
    snprintf(maxr, sizeof maxr, "%lld", (long long)(myrev - 1));
    if (p64 && e64 && k64)
        req = json_pack("{s:[{s:{s:s, s:s, s:s, s:s, s:s, s:s, s:b}}, {s:{s:s, s:b}}]}", "success", "request_range",
                        "key", p64, "range_end", e64, "sort_order", "DESCEND", "sort_target", "CREATE", "limit", "1",
                        "max_create_revision", maxr, "keys_only", 1, "request_range", "key", k64, "keys_only", 1);
    free(end), free(p64), free(e64), free(k64);
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, timeout_ms))) return rc;
    *hrev = egw_int(json_object_get(resp, "header"), "revision");
    *mine = egw_int(etcd_txn_kv(resp, 1, NULL), "create_revision");
    kv = etcd_txn_kv(resp, 0, NULL);
    if (kv && !etcd_own_kv(kv, l->plen)) {
        /* a key of a name below ours: the nearest of our own before it, read
         * after (a watch from HREV still sees it go) */
        json_t *r2 = NULL;
        size_t el;
        char *end2 = egw_prefix_end(l->pfx, l->plen, &el);
        rc = end2 ? etcd_own_next(e, l->pfx, l->plen, end2, el, l->plen, 1, egw_int(kv, "create_revision") - 1, 1,
                                  &r2, &kv, timeout_ms)
                  : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        free(end2);
        json_decref(resp);
        resp = r2;
        if (rc) return rc;
    }
    if (kv) {
        k = json_string_value(json_object_get(kv, "key"));
        if (!k || egw_unb64(k, key, klen)) {
            json_decref(resp);
            return baton_seterr(BATON_EPROTO, 0, "etcd: a key that is not base64 in a range answer");
        }
    }
    json_decref(resp);
    if (*hrev <= 0) {
        free(*key);
        *key = NULL;
        return baton_seterr(BATON_EPROTO, 0, "etcd: a txn answer without a header revision");
    }
    return 0;
}

/* ---- acquire / release ---------------------------------------------------------- */

int etcd_is_lease_gone(void)
{
    const char *m = baton_error_last()->message;
    return m && strstr(m, "lease not found");
}

int etcd_lock_acquire(void *eng, void *st, baton_acquire_req *req)
{
    eeng *e = eng;
    elock *l = st;
    int64_t id, myrev = 0, ownrev = 0, sent = 0;
    uint64_t gen;
    int rc, existed = 0, tries = 0;

    if (l->kind == ETCD_READ || l->kind == ETCD_WRITE) return etcd_rw_acquire(e, st, req);
    if (l->kind == ETCD_MEMBER) return etcd_member_acquire(e, st, req);
    if (l->kind == ETCD_TAKER) return etcd_taker_acquire(e, st, req);
    if ((rc = claim(e, l, req->deadline_ns, req->waiter))) return rc;
again:
    if (++tries > 5) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: the client's lease keeps expiring while acquiring '%s'",
                          l->n->name);
        goto fail;
    }
    if ((rc = etcd_lease_get(e, &id, &gen, etcd_call_ms(e, req->deadline_ns)))) goto fail;
    free(l->key);
    if (!(l->key = malloc(l->plen + 20))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    l->klen = l->plen + (size_t)snprintf(l->key + l->plen, 20, "%llx", (unsigned long long)id);
    memcpy(l->key, l->pfx, l->plen);
    l->gen = gen;
    /* a withdrawal of this very key may still be pending */
    if ((rc = etcd_orphan_settle(e, l->key, l->klen, baton_now_ns() + etcd_call_ms(e, req->deadline_ns) * 1000000LL)))
        goto fail;
    if ((rc = create_key(e, l, id, l->election && req->value ? req->value : req->owner->desc, &myrev, &ownrev,
                         &sent, &existed, etcd_call_ms(e, req->deadline_ns)))) {
        if (etcd_is_lease_gone()) {
            etcd_lease_dead(e, gen);
            goto again;
        }
        goto fail;
    }
    if (existed && l->election && req->value) {
        /* our key was there already (an earlier campaign on this lease):
         * campaign with the value asked for now, as etcd's Campaign does */
        l->rev = myrev;
        if ((rc = etcd_election_proclaim(e, l, req->owner, req->value))) goto fail_del;
    }
    if (ownrev != myrev && req->deadline_ns == 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "etcd: '%s' is held", l->n->name);
        etcd_withdraw(e, l->n->name, l->key, l->klen, myrev, gen, etcd_call_ms(e, 0));
        goto fail;
    }
    while (ownrev != myrev) {
        char *pk = NULL;
        size_t pkl = 0;
        int64_t hrev = 0, mine = 0;
        if ((rc = look(e, l, myrev, &pk, &pkl, &mine, &hrev, etcd_call_ms(e, req->deadline_ns)))) goto fail_del;
        if (mine != myrev) {
            /* our key went with the lease while we waited (granting here
             * anyway was the etcd 3.4 mutex bug Jepsen found) */
            free(pk);
            etcd_lease_dead(e, gen);
            goto again;
        }
        /* at revision hrev our key exists and none is before it: ours */
        if (!pk) break;
        rc = egw_wait_delete(e->gw, pk, pkl, hrev + 1, req->deadline_ns, req->waiter);
        free(pk);
        if (rc == BATON_ETIMEDOUT) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "etcd: '%s' still held at the deadline", l->n->name);
            goto fail_del;
        }
        if (rc == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "etcd: acquire of '%s' canceled", l->n->name);
            goto fail_del;
        }
        if (rc) goto fail_del;
        if (!etcd_lease_live(e, gen)) goto again;
    }
    if (!etcd_lease_live(e, gen)) {
        /* the lease was declared lost while we acquired: the loss report
         * could not name this grant, so it must not stand */
        etcd_withdraw(e, l->n->name, l->key, l->klen, myrev, gen, etcd_call_ms(e, req->deadline_ns));
        goto again;
    }
    req->fence = (uint64_t)myrev;
    req->sent_ns = sent;
    l->rev = myrev;
    /* a key deleted by someone else is found at the next keep-alive */
    if (!l->election) etcd_held_add(e, l, l->key, l->klen, myrev);
    return 0;
fail_del:
    /* withdraw from the queue: at once if the server answers within the
     * grace, else by the keep-alive thread (the error is kept) */
    etcd_withdraw(e, l->n->name, l->key, l->klen, myrev, gen, etcd_call_ms(e, req->deadline_ns));
fail:
    free(l->key);
    l->key = NULL;
    unclaim(e, l);
    return rc;
}

int etcd_lock_release(void *eng, void *st, const baton_owner *owner)
{
    eeng *e = eng;
    elock *l = st;
    int rc, del = 0, live;
    (void)owner;

    if (l->kind == ETCD_READ || l->kind == ETCD_WRITE) return etcd_rw_release(e, st);
    if (l->kind == ETCD_MEMBER) return etcd_member_release(e, st);
    if (l->kind == ETCD_TAKER) return etcd_taker_release(e, st);
    if (!l->key) return baton_seterr(BATON_ENOTHELD, 0, "etcd: '%s' is not held", l->n->name);
    etcd_held_del(e, l);
    live = etcd_lease_live(e, l->gen);
    rc = etcd_delete_own(e, l->n->name, l->key, l->klen, l->rev, 1, &del, 0);
    if (rc == 0 && (!del || !live))
        rc = baton_seterr(BATON_ELOST, 0, "etcd: '%s' was lost (its key or lease is gone)", l->n->name);
    if (rc == 0 || rc == BATON_ELOST) {
        free(l->key);
        l->key = NULL;
        unclaim(e, l);
    }
    return rc;
}

/* What is left of lease ID (LeaseTimeToLive), in ms; -1 when unknown or gone. */
static int64_t lease_left_ms(eeng *e, int64_t id)
{
    json_t *req = json_pack("{s:I}", "ID", (json_int_t)id), *resp = NULL;
    int64_t ttl = -1;
    if (req && !egw_call_idem(e->gw, "/v3/lease/timetolive", req, &resp, 0)) {
        json_t *t = json_object_get(resp, "TTL");
        if (t) ttl = egw_int(resp, "TTL");
    }
    json_decref(resp);
    return ttl >= 0 ? ttl * 1000 : -1;
}

int etcd_lock_info(void *eng, const char *name, baton_lockinfo *out)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), nl = strlen(name), fl;
    size_t sl;
    char *pfx = malloc(pl + nl + 2), *fk = fence_key(e, name, &fl), *f64 = fk ? egw_b64(fk, fl) : NULL,
         *sk = etcd_sem_key(e, name, &sl), *s64 = sk ? egw_b64(sk, sl) : NULL;
    json_t *req = NULL, *resp = NULL, *r2 = NULL, *kv;
    int64_t count = 0;
    int rc;

    if (pfx) {
        memcpy(pfx, e->prefix, pl);
        memcpy(pfx + pl, name, nl);
        memcpy(pfx + pl + nl, "/", 2);
    }
    /* the holder, the last fence, and the count of a semaphore of that name */
    if (pfx && f64 && s64)
        req = json_pack("{s:[o, {s:{s:s}}, {s:{s:s}}]}", "success", etcd_first_create(pfx, pl + nl + 1),
                        "request_range", "key", f64, "request_range", "key", s64);
    free(fk), free(f64), free(sk), free(s64);
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, 0))) {
        free(pfx);
        return rc;
    }
    kv = etcd_txn_kv(resp, 0, &count);
    out->queue_length = count > 1 ? count - 1 : 0;
    if (kv && !etcd_own_kv(kv, pl + nl + 1)) {
        /* the first key is a name's below this one ("<name>/x/..."): this
         * name's first, read after; its queue is not counted then */
        size_t el;
        char *end = egw_prefix_end(pfx, pl + nl + 1, &el);
        json_t *own = NULL;
        rc = end ? etcd_own_next(e, pfx, pl + nl + 1, end, el, pl + nl + 1, 0, egw_int(kv, "create_revision") + 1, 0,
                                 &r2, &own, 0)
                 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        free(end);
        if (rc) {
            free(pfx);
            json_decref(resp);
            return rc;
        }
        kv = own;
        out->queue_length = -1;
    }
    free(pfx);
    out->held = kv != NULL;
    out->remaining_ms = -1;
    out->holder[0] = 0;
    if (kv) {
        const char *v = json_string_value(json_object_get(kv, "value")),
                   *k = json_string_value(json_object_get(kv, "key"));
        char *dv = NULL, *dk = NULL;
        size_t dl, kl;
        out->fence = (uint64_t)egw_int(kv, "create_revision");
        if (v && !egw_unb64(v, &dv, &dl)) snprintf(out->holder, sizeof out->holder, "%s", dv);
        /* the holder's key ends in its lease id (etcdctl's value is empty:
         * the key is then what names the holder) */
        if (k && !egw_unb64(k, &dk, &kl)) {
            const char *hex = strrchr(dk, '/');
            char *end = NULL;
            unsigned long long id = hex ? strtoull(hex + 1, &end, 16) : 0;
            if (!out->holder[0]) snprintf(out->holder, sizeof out->holder, "%s", dk);
            if (id && end && !*end) out->remaining_ms = lease_left_ms(e, (int64_t)id);
        }
        free(dv);
        free(dk);
    } else {
        kv = etcd_txn_kv(resp, 1, NULL);
        const char *v = json_string_value(json_object_get(kv, "value"));
        char *dv = NULL;
        size_t dl;
        out->fence = 0;
        if (v && !egw_unb64(v, &dv, &dl)) out->fence = strtoull(dv, NULL, 10);
        free(dv);
    }
    if ((kv = etcd_txn_kv(resp, 2, NULL))) {
        const char *v = json_string_value(json_object_get(kv, "value"));
        char *dv = NULL;
        size_t dl;
        if (v && !egw_unb64(v, &dv, &dl) && dv) out->permits = strtoll(dv, NULL, 10);
        free(dv);
    }
    json_decref(r2);
    json_decref(resp);
    return 0;
}

/* ---- election -------------------------------------------------------------------- */

/* The leader of NAME now: the first key of "<name>/" by create revision. */
static int leader_now(eeng *e, const char *pfx, size_t plen, char *value, size_t n, uint64_t *fence, int64_t *hrev)
{
    json_t *req = json_pack("{s:[o]}", "success", etcd_first_create(pfx, plen)), *resp = NULL, *kv;
    int rc;

    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, 0))) return rc;
    *hrev = egw_int(json_object_get(resp, "header"), "revision");
    kv = etcd_txn_kv(resp, 0, NULL);
    if (kv && !etcd_own_kv(kv, plen)) {
        /* a candidate of a name below this one: this name's first, read after */
        json_t *r2 = NULL;
        size_t el;
        char *end = egw_prefix_end(pfx, plen, &el);
        rc = end ? etcd_own_next(e, pfx, plen, end, el, plen, 0, egw_int(kv, "create_revision") + 1, 0, &r2, &kv, 0)
                 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        free(end);
        json_decref(resp);
        resp = r2;
        if (rc) return rc;
    }
    *fence = 0;
    if (n) value[0] = 0;
    if (kv) {
        const char *v = json_string_value(json_object_get(kv, "value"));
        char *dv = NULL;
        size_t dl;
        *fence = (uint64_t)egw_int(kv, "create_revision");
        if (v && egw_unb64(v, &dv, &dl)) {
            json_decref(resp);
            return baton_seterr(BATON_EPROTO, 0, "etcd: a value that is not base64 in a range answer");
        }
        if (n) snprintf(value, n, "%s", dv ? dv : "");
        free(dv);
    }
    json_decref(resp);
    if (*hrev <= 0) return baton_seterr(BATON_EPROTO, 0, "etcd: a txn answer without a header revision");
    return 0;
}

int etcd_election_leader(void *eng, const char *name, uint64_t known_fence, const char *known_value, char *value,
                         size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), nl = strlen(name);
    char *pfx = malloc(pl + nl + 2), *cur = malloc(n + 1);
    int rc;

    if (!pfx || !cur) {
        free(pfx), free(cur);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    memcpy(pfx, e->prefix, pl);
    memcpy(pfx + pl, name, nl);
    memcpy(pfx + pl + nl, "/", 2);
    for (;;) {
        int64_t hrev = 0;
        if ((rc = leader_now(e, pfx, pl + nl + 1, cur, n + 1, fence, &hrev))) break;
        /* known_value is compared whole; VALUE may be cut to n bytes */
        if (deadline_ns == 0 || *fence != known_fence || (known_value && strncmp(cur, known_value, n))) {
            if (n) snprintf(value, n, "%s", cur);
            break;
        }
        /* anything under "<name>/" changing may change the leader or its value */
        rc = egw_wait_prefix(e->gw, pfx, pl + nl + 1, hrev + 1, deadline_ns, w);
        if (rc == BATON_ETIMEDOUT) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "etcd: the leader of '%s' did not change in time", name);
            break;
        }
        if (rc == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "etcd: waiting for the leader of '%s' canceled", name);
            break;
        }
        if (rc) break;
    }
    free(pfx);
    free(cur);
    return rc;
}

int etcd_election_proclaim(void *eng, void *st, const baton_owner *owner, const char *value)
{
    eeng *e = eng;
    elock *l = st;
    char revs[24], ids[24], *k64, *v64;
    json_t *req = NULL, *resp = NULL;
    int64_t id;
    uint64_t gen;
    int rc, ok;
    (void)owner;

    if (!l->key || !etcd_lease_live(e, l->gen))
        return baton_seterr(BATON_ELOST, 0, "etcd: this candidate no longer leads '%s'", l->n->name);
    pthread_mutex_lock(&e->mu);
    id = e->lease;
    gen = e->lease_gen;
    pthread_mutex_unlock(&e->mu);
    if (gen != l->gen) return baton_seterr(BATON_ELOST, 0, "etcd: this candidate no longer leads '%s'", l->n->name);
    snprintf(revs, sizeof revs, "%lld", (long long)l->rev);
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    k64 = egw_b64(l->key, l->klen);
    v64 = egw_b64(value, strlen(value));
    /* etcd's Proclaim: put the new value if our key is still the one we created */
    if (k64 && v64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}]}", "compare", "key", k64, "target",
                        "CREATE", "result", "EQUAL", "create_revision", revs, "success", "request_put", "key", k64,
                        "value", v64, "lease", ids);
    free(k64), free(v64);
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, 0))) return rc;
    ok = json_is_true(json_object_get(resp, "succeeded"));
    json_decref(resp);
    return ok ? 0 : baton_seterr(BATON_ELOST, 0, "etcd: this candidate no longer leads '%s'", l->n->name);
}
