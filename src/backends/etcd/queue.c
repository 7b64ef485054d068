/*
 * Work queues (baton_queue_*): items are keys ordered by their create
 * revision; a taken item has a claim key on its taker's client lease, so it
 * comes back by itself when the taker dies (its lease runs out):
 *
 *   <prefix>\0queue/<name>\0i/<32 hex>   an item (value: its bytes), no lease
 *   <prefix>\0queue/<name>\0t/<32 hex>   the claim of the item of that id,
 *                                        on the taker's lease; value: "<owner
 *                                        hex> <host pid tid>"
 *
 * The NUL after the name keeps one queue's keys out of another's range
 * (a queue "a/x" is not inside "a"), and the leading "\0queue/" out of the
 * locks', values' and groups' ways.
 *
 *   put     one put of a new key (a random id: a re-sent put writes the
 *           same key again, never a second item)
 *   take    one txn reads every claim and the 64 oldest items (more pages
 *           only when 64 are taken); then one txn creates the claim of the
 *           oldest unclaimed item if the claim is still absent
 *           (create_revision == 0) and the item still exists: 2 requests.
 *           A claim that loses the race (another taker) starts over. The
 *           fence is the claim's create revision: etcd's revision, which
 *           grows with every write, so every take's is above every earlier
 *           one's.
 *           Waiting: a watch stream on the whole queue from the revision of
 *           the read: any put, done, release or expired claim wakes every
 *           waiting taker (a herd: each of N waiters then reads and one
 *           wins the claim; the others watch again, ~2N requests per item).
 *   done    one txn: delete the item and the claim if the claim is still
 *           ours (its create revision = our fence), else BATON_ELOST.
 *   return  one txn: delete the claim if still ours (lock.c's release):
 *           the item keeps its create revision, so it is first in line again.
 *   size    one txn of two counts: items - claims.
 *
 * The queue options' lease_ms is not used: a claim lives on the client's
 * lease (the URI's ttl=), as locks do.
 */
#include "etcd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define ID_HEX 32
#define TAKE_PAGE 64

typedef struct equeue {
    char *name;
    char *qp;                /* "<prefix>\0queue/<name>\0" */
    size_t qlen;
} equeue;

/* A taker: its own copies (it may outlive its queue's state). */
typedef struct etaker {
    int kind;                /* ETCD_TAKER (first: see etcd_int.h) */
    char *name;
    char *qp;
    size_t qlen;
    /* the item held (touched only by the calls on this state) */
    char *claim;             /* NULL when none */
    size_t clen;
    char *ikey;
    size_t ilen;
    int64_t rev;             /* the claim's create revision = the fence */
    uint64_t gen;
    char *data;
    size_t len;
} etaker;

static int queue_prefix(eeng *e, const char *name, char **out, size_t *len)
{
    size_t pl = strlen(e->prefix), nl = strlen(name);
    char *p = malloc(pl + 7 + nl + 2);
    if (!p) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    memcpy(p, e->prefix, pl);
    memcpy(p + pl, "\0queue/", 7);
    memcpy(p + pl + 7, name, nl);
    p[pl + 7 + nl] = 0;
    p[pl + 7 + nl + 1] = 0;
    *out = p;
    *len = pl + 7 + nl + 1;
    return 0;
}

/* QP + "i/" or "t/" + ID (ID_HEX bytes; NULL = none): malloc'd, *LEN bytes. */
static char *qkey(const char *qp, size_t qlen, char kind, const char *id, size_t *len)
{
    char *k = malloc(qlen + 2 + ID_HEX + 1);
    if (!k) return NULL;
    memcpy(k, qp, qlen);
    k[qlen] = kind;
    k[qlen + 1] = '/';
    *len = qlen + 2;
    if (id) {
        memcpy(k + qlen + 2, id, ID_HEX);
        *len += ID_HEX;
    }
    k[*len] = 0;
    return k;
}

static int queue_new(void *eng, const char *name, void **st)
{
    equeue *q = calloc(1, sizeof *q);
    *st = NULL;
    if (!q || !(q->name = strdup(name)) || queue_prefix(eng, name, &q->qp, &q->qlen)) {
        if (q) free(q->name);
        free(q);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = q;
    return 0;
}

static void queue_free(void *eng, void *st)
{
    equeue *q = st;
    (void)eng;
    if (!q) return;
    free(q->name);
    free(q->qp);
    free(q);
}

static int queue_put(void *eng, void *st, const void *data, size_t len)
{
    eeng *e = eng;
    equeue *q = st;
    unsigned char raw[ID_HEX / 2];
    char id[ID_HEX + 1], *k, *k64 = NULL, *d64 = NULL;
    size_t kl, got = 0;
    json_t *resp = NULL;
    int rc;

    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return baton_seterr(BATON_EIO, errno, "getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof raw; i++) snprintf(id + 2 * i, 3, "%02x", raw[i]);
    if (!(k = qkey(q->qp, q->qlen, 'i', id, &kl)) || !(k64 = egw_b64(k, kl)) || !(d64 = egw_b64(data, len))) {
        free(k), free(k64), free(d64);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    rc = egw_call_idem(e->gw, "/v3/kv/put", json_pack("{s:s, s:s}", "key", k64, "value", d64), &resp, 0);
    json_decref(resp);
    free(k), free(k64), free(d64);
    return rc;
}

static int queue_size(void *eng, void *st, uint64_t *waiting)
{
    eeng *e = eng;
    equeue *q = st;
    size_t il, tl, iel, tel;
    char *ik = qkey(q->qp, q->qlen, 'i', NULL, &il), *tk = qkey(q->qp, q->qlen, 't', NULL, &tl);
    char *ie = ik ? egw_prefix_end(ik, il, &iel) : NULL, *te = tk ? egw_prefix_end(tk, tl, &tel) : NULL;
    char *i64 = ik ? egw_b64(ik, il) : NULL, *ie64 = ie ? egw_b64(ie, iel) : NULL,
         *t64 = tk ? egw_b64(tk, tl) : NULL, *te64 = te ? egw_b64(te, tel) : NULL;
    json_t *req = NULL, *resp = NULL;
    int64_t items = 0, taken = 0;
    int rc;

    if (i64 && ie64 && t64 && te64)
        req = json_pack("{s:[{s:{s:s, s:s, s:b}}, {s:{s:s, s:s, s:b}}]}", "success", "request_range", "key", i64,
                        "range_end", ie64, "count_only", 1, "request_range", "key", t64, "range_end", te64,
                        "count_only", 1);
    free(ik), free(tk), free(ie), free(te), free(i64), free(ie64), free(t64), free(te64);
    if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, 0))) return rc;
    etcd_txn_kv(resp, 0, &items);
    etcd_txn_kv(resp, 1, &taken);
    json_decref(resp);
    *waiting = items > taken ? (uint64_t)(items - taken) : 0;
    return 0;
}

/* ---- takers ----------------------------------------------------------------- */

static int queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    equeue *q = st;
    etaker *t = calloc(1, sizeof *t);
    (void)eng, (void)opts;
    *tst = NULL;
    if (!t || !(t->name = strdup(q->name)) || !(t->qp = malloc(q->qlen))) {
        if (t) free(t->name);
        free(t);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    memcpy(t->qp, q->qp, q->qlen);
    t->qlen = q->qlen;
    t->kind = ETCD_TAKER;
    *tst = t;
    return 0;
}

static void taker_clear(eeng *e, etaker *t)
{
    etcd_held_del(e, t);
    free(t->claim), free(t->ikey), free(t->data);
    t->claim = t->ikey = t->data = NULL;
    t->clen = t->ilen = t->len = 0;
    t->rev = 0;
}

void etcd_taker_free(eeng *e, void *st)
{
    etaker *t = st;
    taker_clear(e, t);
    free(t->name);
    free(t->qp);
    free(t);
}

/* The id of an item or claim key (the ID_HEX bytes after "<qp>i/"), NULL
 * when K is not one of this queue's. */
static const char *key_id(const etaker *t, const char *k, size_t kl)
{
    return kl == t->qlen + 2 + ID_HEX ? k + t->qlen + 2 : NULL;
}

/* The oldest item nobody has claimed: *IKEY (malloc'd; NULL when none) and
 * its create revision *IREV; *HREV = the revision of the first read. */
static int find_item(eeng *e, etaker *t, char **ikey, size_t *ilen, int64_t *irev, int64_t *hrev, int timeout_ms)
{
    size_t il, tl, iel, tel;
    char *ik = qkey(t->qp, t->qlen, 'i', NULL, &il), *tk = qkey(t->qp, t->qlen, 't', NULL, &tl);
    char *ie = ik ? egw_prefix_end(ik, il, &iel) : NULL, *te = tk ? egw_prefix_end(tk, tl, &tel) : NULL;
    char *i64 = ik ? egw_b64(ik, il) : NULL, *ie64 = ie ? egw_b64(ie, iel) : NULL,
         *t64 = tk ? egw_b64(tk, tl) : NULL, *te64 = te ? egw_b64(te, tel) : NULL;
    json_t *resp = NULL, *claims = NULL, *items;
    int64_t from = 0;
    int rc = 0;

    *ikey = NULL;
    *hrev = 0;
    if (!i64 || !ie64 || !t64 || !te64) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    for (int page = 0; !*ikey && page < 1024; page++) {
        char mins[24], lim[8];
        snprintf(mins, sizeof mins, "%lld", (long long)from);
        snprintf(lim, sizeof lim, "%d", TAKE_PAGE);
        json_t *rng = json_pack("{s:{s:s, s:s, s:s, s:s, s:s, s:s, s:b}}", "request_range", "key", i64, "range_end",
                                ie64, "sort_order", "ASCEND", "sort_target", "CREATE", "limit", lim,
                                "min_create_revision", mins, "keys_only", 1);
        /* the claims with the first page, in one revision */
        json_t *req = page ? json_pack("{s:[o]}", "success", rng)
                           : json_pack("{s:[o, {s:{s:s, s:s, s:b}}]}", "success", rng, "request_range", "key", t64,
                                       "range_end", te64, "keys_only", 1);
        json_decref(resp);
        if ((rc = egw_call_idem(e->gw, "/v3/kv/txn", req, &resp, timeout_ms))) goto out;
        if (!page) {
            *hrev = egw_int(json_object_get(resp, "header"), "revision");
            claims = json_incref(json_object_get(
                json_object_get(json_array_get(json_object_get(resp, "responses"), 1), "response_range"), "kvs"));
        }
        items = json_object_get(json_object_get(json_array_get(json_object_get(resp, "responses"), 0),
                                                "response_range"),
                                "kvs");
        for (size_t i = 0; i < json_array_size(items) && !*ikey; i++) {
            json_t *kv = json_array_get(items, i);
            const char *k = json_string_value(json_object_get(kv, "key")), *id;
            char *dk = NULL;
            size_t kl;
            int claimed = 0;
            from = egw_int(kv, "create_revision") + 1;
            if (!k || egw_unb64(k, &dk, &kl)) {
                rc = baton_seterr(BATON_EPROTO, 0, "etcd: a key that is not base64 in a range answer");
                goto out;
            }
            if (!(id = key_id(t, dk, kl))) {
                free(dk);
                continue;
            }
            for (size_t j = 0; j < json_array_size(claims) && !claimed; j++) {
                const char *c = json_string_value(json_object_get(json_array_get(claims, j), "key"));
                char *dc = NULL;
                size_t cl;
                if (c && !egw_unb64(c, &dc, &cl) && key_id(t, dc, cl) && !memcmp(key_id(t, dc, cl), id, ID_HEX))
                    claimed = 1;
                free(dc);
            }
            if (claimed) {
                free(dk);
                continue;
            }
            *ikey = dk;
            *ilen = kl;
            *irev = egw_int(kv, "create_revision");
        }
        if (!json_is_true(json_object_get(json_object_get(json_array_get(json_object_get(resp, "responses"), 0),
                                                          "response_range"),
                                          "more")))
            break;
    }
    if (*hrev <= 0) rc = baton_seterr(BATON_EPROTO, 0, "etcd: a txn answer without a header revision");
out:
    if (rc) {
        free(*ikey);
        *ikey = NULL;
    }
    json_decref(resp);
    json_decref(claims);
    free(ik), free(tk), free(ie), free(te), free(i64), free(ie64), free(t64), free(te64);
    return rc;
}

/* The claim txn: the claim of IKEY on lease ID if it is absent and the item
 * is still the one read (IREV), reading the item's bytes in the same
 * revision. 0 with the item held by T, BATON_ELOCKED when it was taken or
 * done meanwhile. */
static int claim_item(eeng *e, etaker *t, const baton_owner *owner, const char *ikey, size_t ilen, int64_t irev,
                      int64_t id, int timeout_ms)
{
    char ids[24], irevs[24], *val = NULL, *ck = NULL, *c64 = NULL, *i64 = NULL, *v64 = NULL;
    size_t cl = 0;
    json_t *req = NULL, *resp = NULL, *kv;
    int rc, resent = 0;
    int64_t rev = 0;

    snprintf(ids, sizeof ids, "%lld", (long long)id);
    snprintf(irevs, sizeof irevs, "%lld", (long long)irev);
    if ((val = malloc(strlen(owner->hex) + strlen(owner->desc) + 2)))
        sprintf(val, "%s %s", owner->hex, owner->desc);
    if (val && (ck = qkey(t->qp, t->qlen, 't', key_id(t, ikey, ilen), &cl)) && (c64 = egw_b64(ck, cl)) &&
        (i64 = egw_b64(ikey, ilen)) && (v64 = egw_b64(val, strlen(val))))
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}, {s:{s:s}}], "
                        "s:[{s:{s:s}}, {s:{s:s}}]}",
                        "compare", "key", c64, "target", "CREATE", "result", "EQUAL", "create_revision", "0", "key",
                        i64, "target", "CREATE", "result", "EQUAL", "create_revision", irevs, "success",
                        "request_put", "key", c64, "value", v64, "lease", ids, "request_range", "key", i64,
                        "failure", "request_range", "key", c64, "request_range", "key", i64);
    free(c64), free(v64);
    if ((rc = egw_call_idem_resent(e->gw, "/v3/kv/txn", req, &resp, timeout_ms, &resent))) goto out;
    if (json_is_true(json_object_get(resp, "succeeded"))) {
        rev = egw_int(json_object_get(resp, "header"), "revision");
    } else if (resent && (kv = etcd_txn_kv(resp, 0, NULL)) && egw_int(kv, "lease") == id) {
        /* a re-sent claim finds the one its first attempt made: ours when
         * it names our owner */
        const char *b = json_string_value(json_object_get(kv, "value"));
        char *d = NULL;
        size_t dl;
        if (b && !egw_unb64(b, &d, &dl) && dl == strlen(val) && !memcmp(d, val, dl))
            rev = egw_int(kv, "create_revision");
        free(d);
    }
    if (!rev) {
        rc = BATON_ELOCKED;  /* taken or done by another taker meanwhile: look again */
        goto out;
    }
    kv = etcd_txn_kv(resp, 1, NULL);
    {
        const char *b = json_string_value(json_object_get(kv, "value"));
        if (!kv) {
            rc = BATON_ELOCKED;   /* (re-sent) done meanwhile */
            goto out;
        }
        if (b ? egw_unb64(b, &t->data, &t->len) : !(t->data = calloc(1, 1))) {
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: an item that is not base64");
            goto out;
        }
        if (!b) t->len = 0;
    }
    t->claim = ck;
    t->clen = cl;
    ck = NULL;
    if (!(t->ikey = malloc(ilen + 1))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    memcpy(t->ikey, ikey, ilen + 1);
    t->ilen = ilen;
    t->rev = rev;
out:
    json_decref(resp);
    free(val), free(ck), free(i64);
    return rc;
}

int etcd_taker_acquire(eeng *e, void *st, baton_acquire_req *req)
{
    etaker *t = st;
    int64_t id;
    uint64_t gen;
    int rc, lease_tries = 0;

    taker_clear(e, t);
    for (;;) {
        char *ikey = NULL;
        size_t ilen = 0;
        int64_t irev = 0, hrev = 0;
        int tm = etcd_call_ms(e, req->deadline_ns);
        if ((rc = etcd_lease_get(e, &id, &gen, tm))) return rc;
        if ((rc = find_item(e, t, &ikey, &ilen, &irev, &hrev, tm))) return rc;
        if (ikey) {
            req->sent_ns = baton_now_ns();
            rc = claim_item(e, t, req->owner, ikey, ilen, irev, id, tm);
            free(ikey);
            if (rc == BATON_ELOCKED) {
                /* lost the race (someone else took it or finished it): the
                 * next one, while the deadline lasts */
                if (req->deadline_ns != 0 && req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
                    return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: no item in queue '%s' at the deadline", t->name);
                continue;
            }
            if (rc && etcd_is_lease_gone() && ++lease_tries < 5) {
                etcd_lease_dead(e, gen);
                continue;
            }
            if (rc) {
                taker_clear(e, t);
                return rc;
            }
            if (!etcd_lease_live(e, gen)) {
                /* declared lost while we took it: give it back, take again */
                etcd_withdraw(e, t->name, t->claim, t->clen, t->rev, gen, tm);
                taker_clear(e, t);
                continue;
            }
            t->gen = gen;
            req->fence = (uint64_t)t->rev;
            etcd_held_add(e, t, t->claim, t->clen, t->rev);
            return 0;
        }
        if (req->deadline_ns == 0) return baton_seterr(BATON_ELOCKED, 0, "etcd: queue '%s' is empty", t->name);
        /* anything in the queue after the read (a put, a return, a claim
         * whose lease ran out) may give us an item */
        rc = egw_wait_prefix(e->gw, t->qp, t->qlen, hrev + 1, req->deadline_ns, req->waiter);
        if (rc == BATON_ETIMEDOUT)
            return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: no item in queue '%s' at the deadline", t->name);
        if (rc == BATON_ECANCELED) return baton_seterr(BATON_ECANCELED, 0, "etcd: take from '%s' canceled", t->name);
        if (rc) return rc;
    }
}

int etcd_taker_release(eeng *e, void *st)
{
    etaker *t = st;
    int rc, del = 0, live;

    if (!t->claim) return baton_seterr(BATON_ENOTHELD, 0, "etcd: no item of '%s' taken", t->name);
    etcd_held_del(e, t);
    live = etcd_lease_live(e, t->gen);
    rc = etcd_delete_own(e, t->name, t->claim, t->clen, t->rev, 0, &del, 0);
    if (rc == 0 && (!del || !live))
        rc = baton_seterr(BATON_ELOST, 0, "etcd: the item of '%s' was lost (its claim or lease is gone)", t->name);
    if (rc == 0 || rc == BATON_ELOST) taker_clear(e, t);
    return rc;
}

static int queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    etaker *t = tst;
    (void)eng;
    if (!t->claim) return baton_seterr(BATON_ENOTHELD, 0, "etcd: no item of '%s' taken", t->name);
    *data = t->data;
    *len = t->len;
    return 0;
}

static int queue_done(void *eng, void *tst, const baton_owner *owner)
{
    eeng *e = eng;
    etaker *t = tst;
    char revs[24], *c64, *i64;
    json_t *req = NULL, *resp = NULL;
    int rc, resent = 0, ok;
    (void)owner;

    if (!t->claim) return baton_seterr(BATON_ENOTHELD, 0, "etcd: no item of '%s' taken", t->name);
    etcd_held_del(e, t);
    snprintf(revs, sizeof revs, "%lld", (long long)t->rev);
    c64 = egw_b64(t->claim, t->clen);
    i64 = egw_b64(t->ikey, t->ilen);
    /* both keys go if the claim is still ours */
    if (c64 && i64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s}}, {s:{s:s}}], s:[{s:{s:s, s:b}}]}", "compare", "key",
                        c64, "target", "CREATE", "result", "EQUAL", "create_revision", revs, "success",
                        "request_delete_range", "key", i64, "request_delete_range", "key", c64, "failure",
                        "request_range", "key", i64, "keys_only", 1);
    free(c64), free(i64);
    if ((rc = egw_call_idem_resent(e->gw, "/v3/kv/txn", req, &resp, 0, &resent))) {
        /* unknown: the claim is checked again no more; it goes with the
         * lease, or the item is done */
        taker_clear(e, t);
        return rc;
    }
    ok = json_is_true(json_object_get(resp, "succeeded"));
    /* a re-sent done finds the item gone: the first attempt did it */
    if (!ok && resent && !etcd_txn_kv(resp, 0, NULL)) ok = 1;
    json_decref(resp);
    taker_clear(e, t);
    return ok ? 0
              : baton_seterr(BATON_ELOST, 0, "etcd: the item of '%s' was no longer ours (its claim or lease is gone)",
                             t->name);
}

const baton_queue_methods etcd_queue_methods = {
    .create = queue_new,
    .destroy = queue_free,
    .put = queue_put,
    .taker = queue_taker,
    .item = queue_item,
    .done = queue_done,
    .size = queue_size,
};
