/*
 * Permits with ids (BATON_CAP_PERMITS), as the ZooKeeper engine has them
 * (Curator's InterProcessSemaphoreV2): a permit lives on the lease of the
 * client that took it, so it lasts as long as that client keeps its lease
 * alive, and comes back by itself when the client dies or is cut off for a
 * TTL. The lease_ms of acquire and renew is not used: an etcd lease has a
 * TTL in whole seconds, at least 1.5 s (etcd's minimum), and a keep-alive
 * cannot change it, so a per-permit lease of Redisson's kind (300 ms, renewed
 * to another length) is not what etcd offers.
 *
 *   <prefix>\0permits/<name>           the number of permits C, decimal text
 *   <prefix>\0permits/<name>/<id>      one key per permit taken or wanted,
 *                                      on the taker's lease; value "host pid
 *                                      tid", "?host pid tid" while it waits
 *
 * A key whose rank among the permit keys (by create revision) is below C
 * holds a permit. Ranks only fall (older keys leave, newer ones come after),
 * so with C fixed at most C keys ever hold one. A grant is a txn that checks
 * the key still exists (the lease may have taken it while we waited) and
 * drops the "?" from its value.
 *
 * Waiting, without a herd: a waiter whose predecessor key is also waiting
 * watches only that key (any event: its grant drops the "?", a give-up
 * deletes it); the first waiter (its predecessor holds, or there is none)
 * watches everything under the name (releases, expiries and count changes).
 * A waiter that becomes able to take a permit has a predecessor that could
 * too, so grants run down the line one by one.
 *
 * available = C - the number of permit keys (a waiter counts as taken: there
 * is none while permits are free). Drain sets C to the number of keys, in a
 * txn that fails if a key was created since it counted them.
 */
#include "etcd_int.h"
#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct eperm {
    char *name;
    char *base;              /* "<prefix>\0permits/<name>": the count key, and the prefix of all */
    size_t blen;
    char *dir;               /* base + "/" */
    size_t dlen;
} eperm;

/* A listing of the name: the count and the permit keys by create revision. */
typedef struct {
    int64_t count, count_mod, hrev;
    json_t *kvs;             /* borrowed from resp */
    json_t *resp;
} plist;

int etcd_permits_new(void *eng, const char *name, void **st)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), nl = strlen(name);
    eperm *p = calloc(1, sizeof *p);

    *st = NULL;
    if (!p || !(p->name = strdup(name)) || !(p->dir = malloc(pl + 10 + nl + 2))) goto nomem;
    memcpy(p->dir, e->prefix, pl);
    memcpy(p->dir + pl, "\0permits/", 9);
    memcpy(p->dir + pl + 9, name, nl);
    memcpy(p->dir + pl + 9 + nl, "/", 2);
    p->dlen = pl + 9 + nl + 1;
    if (!(p->base = malloc(p->dlen))) goto nomem;
    p->blen = p->dlen - 1;
    memcpy(p->base, p->dir, p->blen);
    p->base[p->blen] = 0;
    *st = p;
    return 0;
nomem:
    if (p) free(p->name), free(p->dir);
    free(p);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

void etcd_permits_free(void *eng, void *st)
{
    eperm *p = st;
    (void)eng;
    if (!p) return;
    free(p->name), free(p->base), free(p->dir);
    free(p);
}

static char *id_key(const eperm *p, const char *id, size_t *len)
{
    size_t il = strlen(id);
    char *k = malloc(p->dlen + il + 1);
    if (!k) return NULL;
    memcpy(k, p->dir, p->dlen);
    memcpy(k + p->dlen, id, il + 1);
    *len = p->dlen + il;
    return k;
}

/* The range ops of a listing: the count key, then every permit key in
 * create order (values wanted: "?" tells a waiter). NULL when out of memory. */
static json_t *list_ops(const eperm *p)
{
    size_t el;
    char *b64 = egw_b64(p->base, p->blen), *d64 = egw_b64(p->dir, p->dlen), *end = egw_prefix_end(p->dir, p->dlen, &el),
         *e64 = end ? egw_b64(end, el) : NULL;
    json_t *ops = NULL;
    if (b64 && d64 && e64)
        ops = json_pack("[{s:{s:s}}, {s:{s:s, s:s, s:s, s:s}}]", "request_range", "key", b64, "request_range", "key",
                        d64, "range_end", e64, "sort_order", "ASCEND", "sort_target", "CREATE");
    free(b64), free(d64), free(end), free(e64);
    return ops;
}

/* Fills L from the txn answer RESP (taken over) whose ops FIRST and FIRST+1
 * are list_ops(). */
static int list_parse(eperm *p, json_t *resp, size_t first, plist *l)
{
    json_t *kv = etcd_txn_kv(resp, first, NULL);
    json_t *r = json_object_get(json_array_get(json_object_get(resp, "responses"), first + 1), "response_range");

    memset(l, 0, sizeof *l);
    l->resp = resp;
    l->hrev = egw_int(json_object_get(resp, "header"), "revision");
    l->kvs = json_object_get(r, "kvs");
    /* only this name's permit keys "<dir><32 hex>": not those of permits
     * named "<name>/..." (their keys and count are in the range too) */
    for (size_t i = json_array_size(l->kvs); i-- > 0;) {
        const char *k = json_string_value(json_object_get(json_array_get(l->kvs, i), "key"));
        char *dk = NULL;
        size_t kl;
        int own = 0;
        if (k && !egw_unb64(k, &dk, &kl) && kl == p->dlen + BATON_PERMIT_ID_SIZE - 1) {
            own = 1;
            for (size_t j = p->dlen; j < kl && own; j++)
                own = (dk[j] >= '0' && dk[j] <= '9') || (dk[j] >= 'a' && dk[j] <= 'f');
        }
        free(dk);
        if (!own) json_array_remove(l->kvs, i);
    }
    if (kv) {
        const char *v = json_string_value(json_object_get(kv, "value"));
        char *dv = NULL, *end;
        size_t dl;
        l->count_mod = egw_int(kv, "mod_revision");
        if (!v || egw_unb64(v, &dv, &dl)) goto bad;
        errno = 0;
        l->count = strtoll(dv, &end, 10);
        if (errno || end == dv || *end) {
            free(dv);
            json_decref(resp);
            l->resp = NULL;
            return baton_seterr(BATON_EPROTO, 0, "etcd: permits '%s': the count is not a number", p->name);
        }
        free(dv);
    }
    if (l->hrev <= 0) goto bad;
    return 0;
bad:
    json_decref(resp);
    l->resp = NULL;
    return baton_seterr(BATON_EPROTO, 0, "etcd: permits '%s': a malformed txn answer", p->name);
}

static int list(eeng *e, eperm *p, plist *l)
{
    json_t *ops = list_ops(p), *resp = NULL;
    int rc;
    if ((rc = egw_call(e->gw, "/v3/kv/txn", ops ? json_pack("{s:o}", "success", ops) : NULL, &resp, 0))) return rc;
    return list_parse(p, resp, 0, l);
}

static int64_t nkeys(const plist *l)
{
    return (int64_t)json_array_size(l->kvs);
}

/* Our key's place in L: *RANK (keys before it), *PRED (the key just before,
 * malloc'd, NULL when none) and whether that one waits. -1 when our key
 * (created at MYREV) is not there. */
static int place(const plist *l, int64_t myrev, int64_t *rank, char **pred, size_t *predlen, int *pred_waits)
{
    size_t i, n = json_array_size(l->kvs);
    *pred = NULL;
    for (i = 0; i < n; i++)
        if (egw_int(json_array_get(l->kvs, i), "create_revision") == myrev) break;
    if (i == n) return -1;
    *rank = (int64_t)i;
    *pred_waits = 0;
    if (i > 0) {
        json_t *kv = json_array_get(l->kvs, i - 1);
        const char *k = json_string_value(json_object_get(kv, "key"));
        const char *v = json_string_value(json_object_get(kv, "value"));
        char *dv = NULL;
        size_t dl;
        if (!k || egw_unb64(k, pred, predlen)) return -2;
        if (v && !egw_unb64(v, &dv, &dl) && dv) *pred_waits = dv[0] == '?';
        free(dv);
    }
    return 0;
}

/* Deletes KEY; *GONE = 1 when it was there. */
static int del_key(eeng *e, const char *key, size_t klen, int *gone)
{
    char *k64 = egw_b64(key, klen);
    json_t *resp = NULL;
    int rc = egw_call(e->gw, "/v3/kv/deleterange", k64 ? json_pack("{s:s}", "key", k64) : NULL, &resp, 0);
    free(k64);
    if (rc) return rc;
    *gone = egw_int(resp, "deleted") > 0;
    json_decref(resp);
    return 0;
}

int etcd_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                         char id[BATON_PERMIT_ID_SIZE])
{
    eeng *e = eng;
    eperm *p = st;
    baton_owner o;
    char ids[24], wait_val[128], *key = NULL, *k64 = NULL, *v64 = NULL;
    size_t klen = 0;
    int64_t lease, myrev = 0;
    uint64_t gen;
    plist l;
    int rc, gone, tries = 0;
    (void)lease_ms; /* the client's lease keeps the permit */

again:
    free(key), free(k64), free(v64);
    key = k64 = v64 = NULL;
    if (++tries > 5) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: the client's lease keeps expiring while acquiring a permit "
                          "of '%s'", p->name);
        goto out;
    }
    if ((rc = baton__owner_init(&o))) goto out;
    if ((rc = etcd_lease_get(e, &lease, &gen, 0))) goto out;
    snprintf(ids, sizeof ids, "%lld", (long long)lease);
    snprintf(wait_val, sizeof wait_val, "?%s", o.desc);
    if (!(key = id_key(p, o.hex, &klen)) || !(k64 = egw_b64(key, klen)) ||
        !(v64 = egw_b64(wait_val, strlen(wait_val)))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    {
        /* our key (waiting) and a listing after it, in one txn */
        json_t *ops = list_ops(p), *resp = NULL;
        if (ops && json_array_insert_new(ops, 0, json_pack("{s:{s:s, s:s, s:s}}", "request_put", "key", k64,
                                                           "value", v64, "lease", ids))) {
            json_decref(ops);
            ops = NULL;
        }
        if ((rc = egw_call(e->gw, "/v3/kv/txn", ops ? json_pack("{s:o}", "success", ops) : NULL, &resp, 0))) {
            if (etcd_is_lease_gone()) {
                etcd_lease_dead(e, gen);
                goto again;
            }
            goto out;
        }
        myrev = egw_int(json_object_get(resp, "header"), "revision");
        if ((rc = list_parse(p, resp, 1, &l))) goto fail_del;
    }
    for (;;) {
        char *pred = NULL;
        size_t predlen = 0;
        int64_t rank = 0;
        int pw = 0, pr;
        pr = place(&l, myrev, &rank, &pred, &predlen, &pw);
        if (pr == -2) {
            json_decref(l.resp);
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: a key that is not base64 in a range answer");
            goto fail_del;
        }
        if (pr < 0) {
            /* our key went with the lease while we waited */
            json_decref(l.resp);
            etcd_lease_dead(e, gen);
            goto again;
        }
        if (rank < l.count) {
            /* ours: drop the "?" if the key is still the one we made (this
             * put also wakes the waiter behind us) */
            char revs[24], *h64 = egw_b64(o.desc, strlen(o.desc));
            json_t *resp = NULL;
            int ok;
            free(pred);
            json_decref(l.resp);
            snprintf(revs, sizeof revs, "%lld", (long long)myrev);
            rc = egw_call(e->gw, "/v3/kv/txn",
                          h64 ? json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:b}}]}", "compare", "key",
                                          k64, "target", "CREATE", "result", "EQUAL", "create_revision", revs,
                                          "success", "request_put", "key", k64, "value", h64, "ignore_lease", 1)
                          : NULL,
                          &resp, 0);
            free(h64);
            if (rc) goto fail_del;
            ok = json_is_true(json_object_get(resp, "succeeded"));
            json_decref(resp);
            if (!ok) {
                etcd_lease_dead(e, gen); /* our key is gone: so is the lease */
                goto again;
            }
            if (!etcd_lease_live(e, gen)) {
                /* declared lost meanwhile: this grant would go unreported */
                del_key(e, key, klen, &gone);
                goto again;
            }
            snprintf(id, BATON_PERMIT_ID_SIZE, "%s", o.hex);
            rc = 0;
            goto out;
        }
        if (deadline_ns == 0) {
            free(pred);
            json_decref(l.resp);
            del_key(e, key, klen, &gone);
            rc = baton_seterr(BATON_ELOCKED, 0, "etcd: permits '%s': none free (%lld)", p->name, (long long)l.count);
            goto out;
        }
        /* a waiting predecessor: only it; else (the first waiter) everything */
        if (pw && pred) rc = egw_wait_prefix(e->gw, pred, predlen, l.hrev + 1, deadline_ns, w);
        else rc = egw_wait_prefix(e->gw, p->base, p->blen, l.hrev + 1, deadline_ns, w);
        free(pred);
        json_decref(l.resp);
        if (rc == BATON_ETIMEDOUT) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "etcd: permits '%s': none free at the deadline", p->name);
            goto fail_del;
        }
        if (rc == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "etcd: permit acquire on '%s' canceled", p->name);
            goto fail_del;
        }
        if (rc) goto fail_del;
        if (!etcd_lease_live(e, gen)) {
            /* lost while we waited: leave the line (best effort), queue again */
            del_key(e, key, klen, &gone);
            goto again;
        }
        if ((rc = list(e, p, &l))) goto fail_del;
    }
fail_del:
    {
        baton_error saved = *baton_error_last();
        char msg[256];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        del_key(e, key, klen, &gone); /* best effort: the lease takes it at the latest */
        baton_seterr(rc, saved.native, "%s", msg);
    }
out:
    free(key), free(k64), free(v64);
    return rc;
}

int etcd_permits_release(void *eng, void *st, const char *id)
{
    eeng *e = eng;
    eperm *p = st;
    size_t klen;
    char *key = id_key(p, id, &klen);
    int rc, gone = 0;

    if (!key) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = del_key(e, key, klen, &gone);
    free(key);
    if (rc) return rc;
    return gone ? 0 : baton_seterr(BATON_ENOTOWNER, 0, "etcd: permits '%s': no permit %s (released, or its "
                                                         "holder's lease ended)", p->name, id);
}

int etcd_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    eeng *e = eng;
    eperm *p = st;
    size_t klen;
    char *key = id_key(p, id, &klen), *k64 = key ? egw_b64(key, klen) : NULL;
    json_t *resp = NULL;
    int rc, there;
    (void)lease_ms; /* the holder's client lease is what keeps it */

    free(key);
    if (!k64) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = egw_call_idem(e->gw, "/v3/kv/range", json_pack("{s:s, s:b}", "key", k64, "keys_only", 1), &resp, 0);
    free(k64);
    if (rc) return rc;
    there = json_array_size(json_object_get(resp, "kvs")) > 0;
    json_decref(resp);
    return there ? 0 : baton_seterr(BATON_ENOTOWNER, 0, "etcd: permits '%s': no permit %s", p->name, id);
}

/* Puts the count V: if the count key's mod revision is still MOD (0 =
 * absent) and, with HREV, no permit key was created after HREV. */
static int put_count(eeng *e, eperm *p, int64_t mod, int only_new, int64_t hrev, int64_t v, int *ok)
{
    char revs[24], val[24], hr[24], *b64 = egw_b64(p->base, p->blen), *v64, *d64 = egw_b64(p->dir, p->dlen), *end,
                                     *e64 = NULL;
    size_t el;
    json_t *req = NULL, *resp = NULL, *cmp;
    int rc;

    snprintf(revs, sizeof revs, "%lld", (long long)mod);
    snprintf(val, sizeof val, "%lld", (long long)v);
    snprintf(hr, sizeof hr, "%lld", (long long)(hrev + 1));
    v64 = egw_b64(val, strlen(val));
    if ((end = egw_prefix_end(p->dir, p->dlen, &el))) e64 = egw_b64(end, el);
    free(end);
    if (b64 && v64 && d64 && e64 &&
        (req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s}}]}", "compare", "key", b64, "target",
                         only_new ? "CREATE" : "MOD", "result", "EQUAL", only_new ? "create_revision" : "mod_revision",
                         only_new ? "0" : revs, "success", "request_put", "key", b64, "value", v64)) &&
        hrev > 0) {
        /* every permit key was created before the listing we counted */
        cmp = json_object_get(req, "compare");
        if (json_array_append_new(cmp, json_pack("{s:s, s:s, s:s, s:s, s:s}", "key", d64, "range_end", e64, "target",
                                                 "CREATE", "result", "LESS", "create_revision", hr))) {
            json_decref(req);
            req = NULL;
        }
    }
    free(b64), free(v64), free(d64), free(e64);
    if ((rc = egw_call(e->gw, "/v3/kv/txn", req, &resp, 0))) return rc;
    *ok = json_is_true(json_object_get(resp, "succeeded"));
    json_decref(resp);
    return 0;
}

int etcd_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    eeng *e = eng;
    eperm *p = st;
    plist l;
    int ok = 0, rc;

    switch (op) {
    case BATON_CTL_TRY_SET:
        if (arg < 0) return baton_seterr(BATON_EINVAL, 0, "etcd: permits '%s': a negative count", p->name);
        if ((rc = put_count(e, p, 0, 1, 0, arg, &ok))) return rc;
        if (out) *out = ok;
        return 0;
    case BATON_CTL_AVAILABLE:
        if ((rc = list(e, p, &l))) return rc;
        if (out) *out = l.count - nkeys(&l);
        json_decref(l.resp);
        return 0;
    case BATON_CTL_ADD:
    case BATON_CTL_DRAIN:
        for (;;) {
            int64_t v, avail;
            if ((rc = list(e, p, &l))) return rc;
            avail = l.count - nkeys(&l);
            json_decref(l.resp);
            if (op == BATON_CTL_DRAIN && avail <= 0) {
                if (out) *out = 0;
                return 0;
            }
            if (op == BATON_CTL_ADD &&
                ((arg > 0 && l.count > INT64_MAX - arg) || (arg < 0 && l.count < INT64_MIN - arg)))
                return baton_seterr(BATON_EINVAL, 0, "etcd: permits '%s': the count would overflow", p->name);
            v = op == BATON_CTL_ADD ? l.count + arg : l.count - avail;
            if ((rc = put_count(e, p, l.count_mod, 0, op == BATON_CTL_DRAIN ? l.hrev : 0, v, &ok))) return rc;
            if (ok) {
                if (out && op == BATON_CTL_DRAIN) *out = avail;
                return 0;
            }
        }
    default:
        return baton_seterr(BATON_EINVAL, 0, "etcd: unknown permits operation %d", op);
    }
}
