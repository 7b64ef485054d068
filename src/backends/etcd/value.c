/*
 * Values (baton_value_*): the value NAME is the plain key "<prefix><name>",
 * so etcdctl reads and writes the same thing (`etcdctl put NAME v`,
 * `etcdctl get NAME`, `etcdctl watch NAME`; with a URI prefix, the key is
 * "<prefix>NAME"). Nothing else is kept: no lease, no side key.
 *
 * The version is the key's mod_revision: etcd's revisions are one counter
 * for the whole store that never goes back, so the versions of one key only
 * grow, across deletion and re-creation too, and an existing key's is never
 * 0 (absent = 0, as baton wants).
 *
 *   get     one range (1 request)
 *   set     any: one put; expect V: one txn comparing mod_revision == V
 *           (V = 0: the key is absent, as an absent key's mod_revision
 *           compares as 0)
 *   delete  any: one delete range; expect V: one txn (compare, delete, and
 *           a range to tell "absent" from "changed" when the compare fails)
 *   watch   a watch stream on the key from the known version + 1: any
 *           event ends it. A change after the caller's read has a
 *           revision above the version it read, so it replays on the
 *           stream, however late the stream starts. When that revision is
 *           compacted (etcd ends the stream), the stream breaks, or the
 *           value was absent (version 0: no revision to start from), one
 *           range gives the version now and the revision H of the read,
 *           and the stream starts from H+1, which compaction cannot have
 *           reached. The core reads the value before and after.
 *
 * A value NAME shares the key space of locks: its key "<name>" is not in
 * any lock's range ("<lock>/"), except a value named "<lock>/<x>" (no more
 * '/'), which sits among lock <lock>'s contenders and would hold that lock
 * off. Keep values and locks apart (a value path with two levels, or a URI
 * prefix of their own): docs/etcd-engine.md, "Values".
 */
#include "etcd_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct evalue {
    char *key;               /* "<prefix><name>" */
    size_t klen;
    char *name;
} evalue;

static int value_new(void *eng, const char *name, void **st)
{
    eeng *e = eng;
    size_t pl = strlen(e->prefix), nl = strlen(name);
    evalue *v = calloc(1, sizeof *v);

    *st = NULL;
    if (!v || !(v->key = malloc(pl + nl + 1)) || !(v->name = strdup(name))) {
        if (v) free(v->key);
        free(v);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    memcpy(v->key, e->prefix, pl);
    memcpy(v->key + pl, name, nl + 1);
    v->klen = pl + nl;
    *st = v;
    return 0;
}

static void value_free(void *eng, void *st)
{
    evalue *v = st;
    (void)eng;
    if (!v) return;
    free(v->key);
    free(v->name);
    free(v);
}

/* The key now: *VERSION (0 = absent), *HREV (the revision of the read) and,
 * with OUT, its bytes. */
static int value_read(eeng *e, evalue *v, baton_value_data *out, uint64_t *version, int64_t *hrev, int timeout_ms)
{
    char *k64 = egw_b64(v->key, v->klen);
    json_t *resp = NULL, *kv;
    int rc;

    if (!k64) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = egw_call_idem(e->gw, "/v3/kv/range", json_pack("{s:s, s:b}", "key", k64, "keys_only", out == NULL), &resp,
                       timeout_ms);
    free(k64);
    if (rc) return rc;
    *hrev = egw_int(json_object_get(resp, "header"), "revision");
    kv = json_array_get(json_object_get(resp, "kvs"), 0);
    *version = kv ? (uint64_t)egw_int(kv, "mod_revision") : 0;
    if (*hrev <= 0 || (kv && *version == 0)) {
        json_decref(resp);
        return baton_seterr(BATON_EPROTO, 0, "etcd: a range answer without revisions");
    }
    if (out && kv) {
        /* an empty value is left out of the answer */
        const char *b = json_string_value(json_object_get(kv, "value"));
        if (b ? egw_unb64(b, &out->data, &out->len) : !(out->data = calloc(1, 1))) {
            json_decref(resp);
            return b ? baton_seterr(BATON_EPROTO, 0, "etcd: a value that is not base64 in a range answer")
                     : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
        if (!b) out->len = 0;
        out->version = *version;
    }
    json_decref(resp);
    return 0;
}

static int value_get(void *eng, void *st, baton_value_data *out)
{
    evalue *v = st;
    uint64_t ver;
    int64_t hrev;
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = value_read(eng, v, out, &ver, &hrev, 0))) {
        free(out->data);
        memset(out, 0, sizeof *out);
        return rc;
    }
    if (!ver) return baton_seterr(BATON_ENOENT, 0, "etcd: no value '%s'", v->name);
    return 0;
}

static int value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    eeng *e = eng;
    evalue *v = st;
    char revs[24], *k64 = egw_b64(v->key, v->klen), *d64 = egw_b64(data, len);
    json_t *resp = NULL;
    int rc;

    if (!k64 || !d64) {
        free(k64), free(d64);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    if (expect == BATON_VALUE_ANY) {
        /* the same put twice (a re-send after a leader change) is harmless */
        rc = egw_call_idem(e->gw, "/v3/kv/put", json_pack("{s:s, s:s}", "key", k64, "value", d64), &resp, 0);
    } else {
        /* sent once: a compare-and-set applied twice would answer "changed"
         * to the request that changed it */
        snprintf(revs, sizeof revs, "%llu", (unsigned long long)expect);
        rc = egw_call(e->gw, "/v3/kv/txn",
                      json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s}}]}", "compare", "key", k64, "target",
                                "MOD", "result", "EQUAL", "mod_revision", revs, "success", "request_put", "key", k64,
                                "value", d64),
                      &resp, 0);
    }
    free(k64), free(d64);
    if (rc) return rc;
    if (expect != BATON_VALUE_ANY && !json_is_true(json_object_get(resp, "succeeded"))) {
        json_decref(resp);
        return expect ? baton_seterr(BATON_ECONFLICT, 0, "etcd: value '%s' is not at version %llu", v->name,
                                     (unsigned long long)expect)
                      : baton_seterr(BATON_ECONFLICT, 0, "etcd: value '%s' exists", v->name);
    }
    /* the put's revision is the key's new mod_revision */
    if (version) *version = (uint64_t)egw_int(json_object_get(resp, "header"), "revision");
    json_decref(resp);
    return 0;
}

static int value_del(void *eng, void *st, uint64_t expect)
{
    eeng *e = eng;
    evalue *v = st;
    char revs[24], *k64 = egw_b64(v->key, v->klen);
    json_t *resp = NULL;
    int64_t deleted = 0;
    int rc, resent = 0;

    if (!k64) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (expect == BATON_VALUE_ANY) {
        rc = egw_call_idem_resent(e->gw, "/v3/kv/deleterange", json_pack("{s:s}", "key", k64), &resp, 0, &resent);
        free(k64);
        if (rc) return rc;
        deleted = egw_int(resp, "deleted");
        json_decref(resp);
        /* none deleted by a re-sent request: the first one did it */
        if (!deleted && !resent) return baton_seterr(BATON_ENOENT, 0, "etcd: no value '%s'", v->name);
        return 0;
    }
    snprintf(revs, sizeof revs, "%llu", (unsigned long long)expect);
    rc = egw_call(e->gw, "/v3/kv/txn",
                  json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s}}], s:[{s:{s:s, s:b}}]}", "compare", "key", k64,
                            "target", "MOD", "result", "EQUAL", "mod_revision", revs, "success",
                            "request_delete_range", "key", k64, "failure", "request_range", "key", k64, "keys_only", 1),
                  &resp, 0);
    free(k64);
    if (rc) return rc;
    if (json_is_true(json_object_get(resp, "succeeded"))) {
        json_t *r = json_object_get(json_array_get(json_object_get(resp, "responses"), 0), "response_delete_range");
        deleted = egw_int(r, "deleted");
        json_decref(resp);
        /* expect 0 held: it was absent */
        return deleted ? 0 : baton_seterr(BATON_ENOENT, 0, "etcd: no value '%s'", v->name);
    }
    rc = etcd_txn_kv(resp, 0, NULL) ? baton_seterr(BATON_ECONFLICT, 0, "etcd: value '%s' is not at version %llu",
                                                   v->name, (unsigned long long)expect)
                                    : baton_seterr(BATON_ENOENT, 0, "etcd: no value '%s'", v->name);
    json_decref(resp);
    return rc;
}

/* How long a watch waits before it reads again after a failed read (the
 * member unreachable, the link cut) while its deadline allows. */
#define VALUE_RETRY_MS 250

static int value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    eeng *e = eng;
    evalue *v = st;

    /* the caller has just read version KNOWN: every change since has a
     * revision above it, so a stream from KNOWN+1 replays it (no read
     * first). Absent (0), or once that stream has ended: read, then watch
     * from the read's revision (a compacted KNOWN+1 costs one stream). */
    int64_t from = known > 0 && known < (uint64_t)INT64_MAX && deadline_ns != 0 ? (int64_t)known + 1 : 0;

    for (int first = 1;; first = 0) {
        unsigned seen = baton_waiter_gen(w);
        int fired = 0;
        uint64_t ver = known;
        int64_t hrev = from - 1;
        int rc = from ? 0 : value_read(e, v, NULL, &ver, &hrev, etcd_call_ms(e, deadline_ns));
        from = 0;
        if (rc && (first || rc == BATON_ENOMEM || rc == BATON_EAUTH)) return rc;
        if (rc) {
            /* after a wait: the stream broke with the member (a cut link, a
             * member gone); ride it out until the deadline */
            int64_t t = baton_now_ns() + VALUE_RETRY_MS * 1000000LL;
            baton_log(BATON_LOG_DEBUG, "etcd: watch of '%s': %s; reading again", v->name,
                      baton_error_last()->message ? baton_error_last()->message : "");
            if (deadline_ns != INT64_MAX && t > deadline_ns) t = deadline_ns;
            if (baton_waiter_park(w, seen, t) == BATON_ECANCELED || baton_waiter_canceled(w))
                return baton_seterr(BATON_ECANCELED, 0, "etcd: watch of '%s' canceled", v->name);
            if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns)
                return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: value '%s' unchanged at the deadline", v->name);
            continue;
        }
        if (ver != known) return 0;
        if (deadline_ns == 0 || (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns))
            return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: value '%s' unchanged at the deadline", v->name);
        /* every event on the key after the read: the core reads the value
         * then; a stream that ended without one (compacted, the member
         * gone) makes us read again here */
        rc = egw_wait_key(e->gw, v->key, v->klen, hrev + 1, deadline_ns, w, &fired);
        if (rc == 0 && fired > 0) return 0;
        if (rc == BATON_ETIMEDOUT)
            return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: value '%s' unchanged at the deadline", v->name);
        if (rc == BATON_ECANCELED) return baton_seterr(BATON_ECANCELED, 0, "etcd: watch of '%s' canceled", v->name);
        if (rc) return rc;
    }
}

const baton_value_methods etcd_value_methods = {
    .create = value_new,
    .destroy = value_free,
    .get = value_get,
    .set = value_set,
    .del = value_del,
    .watch = value_watch,
};
