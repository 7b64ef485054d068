/*
 * Group membership (baton_group_*): one key per member on its client's
 * lease, so a member lives exactly as long as the lease of the client that
 * joined (etcd's leases are what etcd offers for ephemeral registrations;
 * a killed client's members go when its TTL runs out):
 *
 *   <prefix>\0group/<name>/<id>     value: the member's value
 *
 * The NUL keeps groups out of every lock's and value's way (no name starts
 * with one: lock.c's "\0fence/" does the same). A group named "a/b" has its
 * keys inside group "a"'s range: a listing skips them (an id has no '/'),
 * a watch of "a" wakes for them too (spurious, allowed).
 *
 *   join    one txn: create the key if absent (create_revision == 0), on
 *           the client's lease; a live member with that id makes it fail:
 *           BATON_ELOCKED. The key is then checked at each keep-alive
 *           (etcd_held_add): deleted by someone else, the membership is
 *           reported lost.
 *   leave   one txn: delete the key if its create revision is still ours.
 *   list    one range of the group's keys; the token is its revision.
 *   watch   a watch stream on the group's keys from token+1: any event.
 *           A member whose lease ran out is a DELETE event when etcd
 *           revokes the lease (TTL + etcd's own lease check, ~500 ms).
 *           A stream that breaks is started again from token+1 (nothing
 *           missed) until the deadline; one whose start was compacted
 *           returns (the core lists again, with a new token).
 *
 * The group options' lease_ms is not used: a member lives on the client's
 * lease (the URI's ttl=), as locks do.
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct emember {
    int kind;                /* ETCD_MEMBER (first: see etcd_int.h) */
    char *name;              /* the group's */
    char *id;
    char *key;               /* "<prefix>\0group/<name>/<id>" */
    size_t klen;
    /* the membership (touched only by the calls on this state) */
    int64_t rev;             /* 0 when not a member */
    uint64_t gen;
} emember;

/* "<prefix>\0group/<name>/" (malloc'd, *LEN bytes), with room for EXTRA more. */
static char *group_prefix(eeng *e, const char *name, size_t extra, size_t *len)
{
    size_t pl = strlen(e->prefix), nl = strlen(name);
    char *p = malloc(pl + 7 + nl + 1 + extra + 1);
    if (!p) return NULL;
    memcpy(p, e->prefix, pl);
    memcpy(p + pl, "\0group/", 7);
    memcpy(p + pl + 7, name, nl);
    p[pl + 7 + nl] = '/';
    p[pl + 7 + nl + 1] = 0;
    *len = pl + 7 + nl + 1;
    return p;
}

static int member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    eeng *e = eng;
    size_t il = strlen(id);
    emember *m = calloc(1, sizeof *m);
    (void)opts;

    *st = NULL;
    if (!m || !(m->name = strdup(name)) || !(m->id = strdup(id)) || !(m->key = group_prefix(e, name, il, &m->klen))) {
        if (m) free(m->name), free(m->id);
        free(m);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    memcpy(m->key + m->klen, id, il + 1);
    m->klen += il;
    m->kind = ETCD_MEMBER;
    *st = m;
    return 0;
}

void etcd_member_free(eeng *e, void *st)
{
    emember *m = st;
    etcd_held_del(e, m);
    free(m->name);
    free(m->id);
    free(m->key);
    free(m);
}

/* The join txn on lease ID: 0 with *REV (the key's create revision), or
 * BATON_ELOCKED when another member has the id. */
static int join_txn(eeng *e, emember *m, int64_t id, const char *value, int64_t *rev, int timeout_ms)
{
    char ids[24], *k64 = egw_b64(m->key, m->klen), *v64 = egw_b64(value, strlen(value));
    json_t *req = NULL, *resp = NULL, *kv;
    int rc, resent = 0;

    snprintf(ids, sizeof ids, "%lld", (long long)id);
    if (k64 && v64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s, s:s}}], s:[{s:{s:s}}]}", "compare", "key", k64,
                        "target", "CREATE", "result", "EQUAL", "create_revision", "0", "success", "request_put", "key",
                        k64, "value", v64, "lease", ids, "failure", "request_range", "key", k64);
    free(k64), free(v64);
    if ((rc = egw_call_idem_resent(e->gw, "/v3/kv/txn", req, &resp, timeout_ms, &resent))) return rc;
    if (json_is_true(json_object_get(resp, "succeeded"))) {
        *rev = egw_int(json_object_get(resp, "header"), "revision");
    } else {
        kv = etcd_txn_kv(resp, 0, NULL);
        /* a re-sent join finds the key its first attempt made: on our
         * lease, with our value */
        if (resent && kv && egw_int(kv, "lease") == id) {
            const char *b = json_string_value(json_object_get(kv, "value"));
            char *d = NULL;
            size_t dl = 0;
            if (b ? !egw_unb64(b, &d, &dl) && dl == strlen(value) && !memcmp(d, value, dl) : !*value)
                *rev = egw_int(kv, "create_revision");
            free(d);
        }
        if (*rev <= 0) rc = baton_seterr(BATON_ELOCKED, 0, "etcd: group '%s' has a member '%s' already", m->name,
                                         m->id);
    }
    json_decref(resp);
    if (!rc && *rev <= 0) rc = baton_seterr(BATON_EPROTO, 0, "etcd: a txn answer without a header revision");
    return rc;
}

int etcd_member_acquire(eeng *e, void *st, baton_acquire_req *req)
{
    emember *m = st;
    int64_t id, rev;
    uint64_t gen;
    int rc;

    for (int tries = 0; tries < 5; tries++) {
        rev = 0;
        if ((rc = etcd_lease_get(e, &id, &gen, etcd_call_ms(e, req->deadline_ns)))) return rc;
        req->sent_ns = baton_now_ns();
        rc = join_txn(e, m, id, req->value ? req->value : "", &rev, etcd_call_ms(e, req->deadline_ns));
        if (rc && etcd_is_lease_gone()) {
            etcd_lease_dead(e, gen);
            continue;
        }
        if (rc) return rc;
        if (!etcd_lease_live(e, gen)) {
            /* declared lost while we joined: the report could not name this one */
            etcd_withdraw(e, m->name, m->key, m->klen, rev, gen, etcd_call_ms(e, req->deadline_ns));
            continue;
        }
        m->rev = rev;
        m->gen = gen;
        req->fence = (uint64_t)rev;
        etcd_held_add(e, m, m->key, m->klen, rev);
        return 0;
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: the client's lease keeps expiring while joining '%s'", m->name);
}

int etcd_member_release(eeng *e, void *st)
{
    emember *m = st;
    int rc, del = 0, live;

    if (!m->rev) return baton_seterr(BATON_ENOTHELD, 0, "etcd: not a member of '%s'", m->name);
    etcd_held_del(e, m);
    live = etcd_lease_live(e, m->gen);
    rc = etcd_delete_own(e, m->name, m->key, m->klen, m->rev, 0, &del, 0);
    if (rc == 0 && (!del || !live))
        rc = baton_seterr(BATON_ELOST, 0, "etcd: the membership in '%s' was lost (its key or lease is gone)",
                          m->name);
    if (rc == 0 || rc == BATON_ELOST) m->rev = 0;
    return rc;
}

static int group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                      void *arg, uint64_t *token)
{
    eeng *e = eng;
    size_t pl, el;
    char *pfx = group_prefix(e, name, 0, &pl), *end = pfx ? egw_prefix_end(pfx, pl, &el) : NULL,
         *p64 = pfx ? egw_b64(pfx, pl) : NULL, *e64 = end ? egw_b64(end, el) : NULL;
    json_t *resp = NULL, *kvs;
    int rc;

    if (!p64 || !e64) {
        free(pfx), free(end), free(p64), free(e64);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    rc = egw_call_idem(e->gw, "/v3/kv/range", json_pack("{s:s, s:s}", "key", p64, "range_end", e64), &resp, 0);
    free(end), free(p64), free(e64);
    if (rc) {
        free(pfx);
        return rc;
    }
    *token = (uint64_t)egw_int(json_object_get(resp, "header"), "revision");
    kvs = json_object_get(resp, "kvs");
    for (size_t i = 0; i < json_array_size(kvs) && !rc; i++) {
        json_t *kv = json_array_get(kvs, i);
        const char *k = json_string_value(json_object_get(kv, "key")),
                   *v = json_string_value(json_object_get(kv, "value"));
        char *dk = NULL, *dv = NULL;
        size_t kl, vl;
        if (!k || egw_unb64(k, &dk, &kl) || (v && egw_unb64(v, &dv, &vl)))
            rc = baton_seterr(BATON_EPROTO, 0, "etcd: a key or value that is not base64 in a range answer");
        /* members of this group only: not of a group below it ("<name>/x") */
        else if (kl > pl && !memchr(dk + pl, '/', kl - pl) && !memchr(dk + pl, 0, kl - pl))
            fn(arg, dk + pl, dv ? dv : "");
        free(dk), free(dv);
    }
    json_decref(resp);
    free(pfx);
    if (!rc && !*token) rc = baton_seterr(BATON_EPROTO, 0, "etcd: a range answer without a header revision");
    return rc;
}

static int group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    eeng *e = eng;
    size_t pl;
    char *pfx = group_prefix(e, name, 0, &pl);
    int rc, fired = 0;

    if (!pfx) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* a change since the listing replays at once; "answer at once" gets
     * the grace to see it */
    if (deadline_ns == 0) deadline_ns = baton_now_ns() + ETCD_GRACE_MS * 1000000LL;
    for (;;) {
        rc = egw_wait_prefix_fired(e->gw, pfx, pl, (int64_t)token + 1, deadline_ns, w, &fired);
        /* gRPC ends the stream at its deadline as if it had broken: a timeout */
        if (rc == 0 && !fired && deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) rc = BATON_ETIMEDOUT;
        /* an event, or the token compacted away: the core lists again */
        if (rc || fired) break;
        /* the stream broke (a cut link, the member gone): a new one from the
         * same revision misses nothing (wait_event paused 100 ms first), so
         * a watcher rides out an outage until its deadline */
    }
    free(pfx);
    if (rc == BATON_ETIMEDOUT) return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: group '%s' unchanged", name);
    if (rc == BATON_ECANCELED) return baton_seterr(BATON_ECANCELED, 0, "etcd: watch of group '%s' canceled", name);
    return rc;
}

const baton_group_methods etcd_group_methods = {
    .create = member_new,
    .list = group_list,
    .watch = group_watch,
};
