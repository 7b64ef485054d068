/*
 * The semaphore (BATON_CAP_SEM): Redisson's RSemaphore semantics, i.e. a
 * count of permits that nobody owns (any client may release, add or drain;
 * the count may go below zero), kept in one key:
 *
 *   <prefix>\0sem/<name>    the count, decimal text, on no lease
 *
 * (a NUL never starts a name, so no lock's "<name>/" range covers it, as for
 * lock.c's fence key). Every change is a compare-and-swap txn on the key's
 * mod revision, retried when another client changed it first. An acquirer
 * that finds too few permits watches the key from the revision it read (no
 * change is missed between the read and the watch) and reads again after
 * each event.
 *
 * Why not "the first N keys by create revision" on the client's lease: the
 * permits here have no owners (a permit taken by one client is given back
 * by another, a permit taken by a process that dies stays taken, as in
 * Redisson), so they cannot live on the taker's lease. Waiters all watch the
 * one key, so a release wakes each of them for one read: a herd, the price
 * of ownerless counting (Redisson publishes to every waiter the same way).
 */
#include "etcd_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct esem {
    char *name;
    char *key;
    size_t klen;
} esem;

char *etcd_sem_key(eeng *e, const char *name, size_t *len)
{
    size_t pl = strlen(e->prefix), nl = strlen(name);
    char *k = malloc(pl + nl + 6);
    if (!k) return NULL;
    memcpy(k, e->prefix, pl);
    memcpy(k + pl, "\0sem/", 5);
    memcpy(k + pl + 5, name, nl + 1);
    *len = pl + 5 + nl;
    return k;
}

int etcd_sem_new(void *eng, const char *name, void **st)
{
    esem *s = calloc(1, sizeof *s);
    *st = NULL;
    if (!s || !(s->name = strdup(name)) || !(s->key = etcd_sem_key(eng, name, &s->klen))) {
        if (s) free(s->name);
        free(s);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = s;
    return 0;
}

void etcd_sem_free(void *eng, void *st)
{
    esem *s = st;
    (void)eng;
    if (!s) return;
    free(s->key);
    free(s->name);
    free(s);
}

/* The count now: *V (0 when never set), the key's mod revision *MOD (0 =
 * absent) and the revision of the read *HREV. */
static int read_count(eeng *e, esem *s, int64_t *v, int64_t *mod, int64_t *hrev)
{
    char *k64 = egw_b64(s->key, s->klen), *dv = NULL, *end;
    json_t *req = k64 ? json_pack("{s:s}", "key", k64) : NULL, *resp = NULL, *kv;
    const char *b64;
    size_t dl;
    int rc;

    free(k64);
    *v = *mod = 0;
    if ((rc = egw_call_idem(e->gw, "/v3/kv/range", req, &resp, 0))) return rc;
    *hrev = egw_int(json_object_get(resp, "header"), "revision");
    kv = json_array_get(json_object_get(resp, "kvs"), 0);
    if (kv) {
        *mod = egw_int(kv, "mod_revision");
        b64 = json_string_value(json_object_get(kv, "value"));
        if (b64 && egw_unb64(b64, &dv, &dl)) {
            json_decref(resp);
            return baton_seterr(BATON_EPROTO, 0, "etcd: a value that is not base64 in a range answer");
        }
        errno = 0;
        *v = dv && *dv ? strtoll(dv, &end, 10) : 0;
        if (dv && (errno || *end)) {
            free(dv);
            json_decref(resp);
            return baton_seterr(BATON_EPROTO, 0, "etcd: semaphore '%s': the count is not a number", s->name);
        }
        free(dv);
    }
    json_decref(resp);
    if (*hrev <= 0) return baton_seterr(BATON_EPROTO, 0, "etcd: a range answer without a header revision");
    return 0;
}

/* Puts V if the key's mod revision is still MOD (0: the key is absent;
 * ONLY_NEW: if it was never created). *OK = 1 when it was put. */
static int put_if(eeng *e, esem *s, int64_t mod, int only_new, int64_t v, int *ok)
{
    char revs[24], val[24], *k64 = egw_b64(s->key, s->klen), *v64;
    json_t *req = NULL, *resp = NULL;
    int rc;

    snprintf(revs, sizeof revs, "%lld", (long long)mod);
    snprintf(val, sizeof val, "%lld", (long long)v);
    v64 = egw_b64(val, strlen(val));
    if (k64 && v64)
        req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s, s:s}}]}", "compare", "key", k64, "target",
                        only_new ? "CREATE" : "MOD", "result", "EQUAL", only_new ? "create_revision" : "mod_revision",
                        only_new ? "0" : revs, "success", "request_put", "key", k64, "value", v64);
    free(k64), free(v64);
    if ((rc = egw_call(e->gw, "/v3/kv/txn", req, &resp, 0))) return rc;
    *ok = json_is_true(json_object_get(resp, "succeeded"));
    json_decref(resp);
    return 0;
}

/* Adds DELTA to the count (compare-and-swap, retried). */
static int add(eeng *e, esem *s, int64_t delta)
{
    for (;;) {
        int64_t v, mod, hrev;
        int ok = 0, rc;
        if ((rc = read_count(e, s, &v, &mod, &hrev))) return rc;
        if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta))
            return baton_seterr(BATON_EINVAL, 0, "etcd: semaphore '%s': the count would overflow", s->name);
        if ((rc = put_if(e, s, mod, 0, v + delta, &ok))) return rc;
        if (ok) return 0;
    }
}

int etcd_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    eeng *e = eng;
    esem *s = st;

    for (;;) {
        int64_t v, mod, hrev;
        int ok = 0, rc;
        if ((rc = read_count(e, s, &v, &mod, &hrev))) return rc;
        if (v >= (int64_t)permits) {
            if ((rc = put_if(e, s, mod, 0, v - permits, &ok))) return rc;
            if (ok) return 0;
            continue; /* someone changed it first: read again */
        }
        if (deadline_ns == 0)
            return baton_seterr(BATON_ELOCKED, 0, "etcd: semaphore '%s': %lld permits available, %u wanted", s->name,
                                (long long)v, permits);
        /* any change of the key from the revision read on wakes us */
        rc = egw_wait_prefix(e->gw, s->key, s->klen, hrev + 1, deadline_ns, w);
        if (rc == BATON_ETIMEDOUT)
            return baton_seterr(BATON_ETIMEDOUT, 0, "etcd: semaphore '%s': too few permits at the deadline", s->name);
        if (rc == BATON_ECANCELED)
            return baton_seterr(BATON_ECANCELED, 0, "etcd: acquire on semaphore '%s' canceled", s->name);
        if (rc) return rc;
    }
}

int etcd_sem_release(void *eng, void *st, uint32_t permits)
{
    return add(eng, st, (int64_t)permits);
}

int etcd_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    eeng *e = eng;
    esem *s = st;
    int64_t v, mod, hrev;
    int ok = 0, rc;

    switch (op) {
    case BATON_CTL_TRY_SET:
        if (arg < 0) return baton_seterr(BATON_EINVAL, 0, "etcd: semaphore '%s': a negative count", s->name);
        if ((rc = put_if(e, s, 0, 1, arg, &ok))) return rc;
        if (out) *out = ok;
        return 0;
    case BATON_CTL_ADD:
        return add(e, s, arg);
    case BATON_CTL_AVAILABLE:
        if ((rc = read_count(e, s, &v, &mod, &hrev))) return rc;
        if (out) *out = v;
        return 0;
    case BATON_CTL_DRAIN:
        for (;;) {
            if ((rc = read_count(e, s, &v, &mod, &hrev))) return rc;
            if (v <= 0) {
                if (out) *out = 0;
                return 0;
            }
            if ((rc = put_if(e, s, mod, 0, 0, &ok))) return rc;
            if (ok) {
                if (out) *out = v;
                return 0;
            }
        }
    default:
        return baton_seterr(BATON_EINVAL, 0, "etcd: unknown semaphore operation %d", op);
    }
}
