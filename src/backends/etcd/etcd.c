/*
 * The etcd engine: etcd://host1:2379,host2:2379[/prefix][?options] and
 * etcds:// (TLS), in the layout of etcd's own concurrency package, so that
 * `etcdctl lock NAME` and baton's NAME are one lock.
 *
 * A client has one lease (etcd's concurrency.Session): granted at open with
 * TTL `ttl` seconds (default 30), kept alive every TTL/3 by a thread of the
 * client. The lease's deadline is measured on the monotonic clock from the
 * moment each successful keep-alive was sent; when the thread cannot renew
 * it before then (the members are unreachable, the process was stopped), or
 * the server says the lease is gone, every grant of this client is LOST
 * (baton_host_lost_all) and the next acquire grants a new lease. Close
 * revokes the lease, which deletes every key still on it.
 *
 * Options: ttl (s), connect_timeout_ms, timeout_ms (each request), cacert,
 * cert, key (etcds://), transport (grpc: gRPC over HTTP/2, the default
 * when built with libnghttp2 (and, for etcds://, OpenSSL's headers);
 * gateway: the v3 JSON gateway over HTTP/1.1), user and password in the URI's user
 * info or $BATON_ETCD_PASSWORD. Layout and rules: docs/etcd-engine.md.
 */
#include "etcd_int.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_TTL_S 30

static int configure(eeng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts, egw_config *cfg)
{
    size_t pl;

    memset(cfg, 0, sizeof *cfg);
    cfg->tls = !strcmp(u->scheme, "etcds");
    /* gRPC by default (measured faster: docs/etcd-engine.md, Transport),
     * except where it is not built (or, for etcds://, built without TLS) */
    cfg->transport = egw_have_grpc() && (!cfg->tls || egw_have_grpc_tls()) ? EGW_GRPC : EGW_GATEWAY;
    e->ttl_s = DEFAULT_TTL_S;
    e->connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 2000;
    cfg->io_timeout_ms = opts && opts->io_timeout_ms > 0 ? opts->io_timeout_ms : 5000;
    if (baton_opts_given(uo, "ttl")) e->ttl_s = (int)baton_opts_int(uo, "ttl");
    if (baton_opts_given(uo, "connect_timeout_ms")) e->connect_timeout_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    if (baton_opts_given(uo, "timeout_ms")) cfg->io_timeout_ms = (int)baton_opts_int(uo, "timeout_ms");
    if (baton_opts_given(uo, "transport")) /* spec order: gateway, grpc */
        cfg->transport = baton_opts_enum(uo, "transport") == 1 ? EGW_GRPC : EGW_GATEWAY;
    cfg->cacert = baton_opts_str(uo, "cacert");
    cfg->cert = baton_opts_str(uo, "cert");
    cfg->key = baton_opts_str(uo, "key");
    cfg->connect_timeout_ms = e->connect_timeout_ms;
    e->io_timeout_ms = cfg->io_timeout_ms;
    if (!u->nhosts || !u->hosts[0].host || !*u->hosts[0].host)
        return baton_seterr(BATON_EINVAL, 0, "etcd: the URI names no member (etcd://host:port[,host:port...])");
    for (size_t i = 0; i < u->nhosts; i++)
        if (!u->hosts[i].host || !*u->hosts[i].host || strpbrk(u->hosts[i].host, "/ ?#@"))
            return baton_seterr(BATON_EINVAL, 0, "etcd: bad host in the URI");
    if (u->user) {
        cfg->user = u->user;
        cfg->password = u->password ? u->password : getenv("BATON_ETCD_PASSWORD");
        if (!cfg->password) return baton_seterr(BATON_EINVAL, 0, "etcd: user '%s' without a password (in the URI "
                                                "or $BATON_ETCD_PASSWORD)", u->user);
    }
    /* the key prefix: the URI's path, ending in '/' when it is not empty */
    pl = u->path ? strlen(u->path) : 0;
    if (!(e->prefix = malloc(pl + 2))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    memcpy(e->prefix, pl ? u->path : "", pl);
    e->prefix[pl] = 0;
    if (pl && e->prefix[pl - 1] != '/') strcat(e->prefix, "/");
    return 0;
}

/* identity(): the members as written, sorted, and the prefix. */
static int make_ident(eeng *e, const baton_uri *u)
{
    size_t n = strlen(e->prefix) + 16;
    char **hs = calloc(u->nhosts, sizeof *hs);
    if (!hs) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (size_t i = 0; i < u->nhosts; i++) n += strlen(u->hosts[i].host) + 10;
    if (!(e->ident = malloc(n))) {
        free(hs);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    for (size_t i = 0; i < u->nhosts; i++) {
        char tmp[300];
        snprintf(tmp, sizeof tmp, "%s:%d", u->hosts[i].host, u->hosts[i].port > 0 ? u->hosts[i].port : 2379);
        hs[i] = strdup(tmp);
        if (!hs[i]) {
            for (size_t j = 0; j < i; j++) free(hs[j]);
            free(hs);
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
    }
    for (size_t i = 1; i < u->nhosts; i++)
        for (size_t j = i; j > 0 && strcmp(hs[j - 1], hs[j]) > 0; j--) {
            char *t = hs[j];
            hs[j] = hs[j - 1], hs[j - 1] = t;
        }
    strcpy(e->ident, "etcd:");
    for (size_t i = 0; i < u->nhosts; i++) {
        if (i) strcat(e->ident, ",");
        strcat(e->ident, hs[i]);
        free(hs[i]);
    }
    strcat(e->ident, "/");
    strcat(e->ident, e->prefix);
    free(hs);
    return 0;
}

/* ---- the lease ---------------------------------------------------------- */

/* Until when a lease granted or renewed with TTL S, asked for at T, is known
 * alive: the server counts S from when it got the request (after T), and
 * baton gives it up a sixth of S earlier, so on_lost (and `baton run`'s
 * kill) has acted before the server can free the keys. Without the margin
 * the loss was reported 100-400 ms before another client's grant on a
 * frozen link (etcd_freeze, ttl=2). */
static int64_t ns_after_s(int64_t t, int s)
{
    return t + (int64_t)s * 1000000000LL - (int64_t)s * 1000000000LL / 6;
}

/* Grants a new lease (e->mu not held): 0 with it made the live one. */
static int lease_grant(eeng *e, int timeout_ms)
{
    json_t *resp = NULL;
    int64_t sent = baton_now_ns(), id, ttl;
    int rc = egw_call_idem(e->gw, "/v3/lease/grant", json_pack("{s:I}", "TTL", (json_int_t)e->ttl_s), &resp,
                           timeout_ms);
    if (rc) return rc;
    id = egw_int(resp, "ID");
    ttl = egw_int(resp, "TTL");
    json_decref(resp);
    if (id <= 0 || ttl <= 0) return baton_seterr(BATON_EPROTO, 0, "etcd: lease grant answered without an ID or TTL");
    pthread_mutex_lock(&e->mu);
    e->lease = id;
    e->lease_gen++;
    e->granted_ttl_s = (int)ttl;
    e->lease_deadline = ns_after_s(sent, (int)ttl);
    e->next_keepalive = sent + ttl * 1000000000LL / 3;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int etcd_lease_get(eeng *e, int64_t *id, uint64_t *gen, int timeout_ms)
{
    int rc;
    int64_t end = baton_now_ns() + (int64_t)(timeout_ms > 0 ? timeout_ms : e->io_timeout_ms) * 1000000;
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&e->mu);
        /* one grant at a time: a second lease granted beside the first would
         * replace it while a key may already live on it, unrenewed */
        while (!e->lease && e->granting) {
            struct timespec ts = { .tv_sec = end / 1000000000LL, .tv_nsec = end % 1000000000LL };
            if (baton_now_ns() >= end) {
                pthread_mutex_unlock(&e->mu);
                return baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: no lease granted in time");
            }
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        if (e->lease) {
            *id = e->lease;
            *gen = e->lease_gen;
            pthread_mutex_unlock(&e->mu);
            return 0;
        }
        e->granting = 1;
        pthread_mutex_unlock(&e->mu);
        {
            int64_t left = (end - baton_now_ns()) / 1000000;
            rc = left > 0 ? lease_grant(e, (int)left)
                          : baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: no lease granted in time");
        }
        pthread_mutex_lock(&e->mu);
        e->granting = 0;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        if (rc) return rc;
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: the lease was lost as soon as it was granted");
}

int etcd_lease_live(eeng *e, uint64_t gen)
{
    int live;
    pthread_mutex_lock(&e->mu);
    live = e->lease && e->lease_gen == gen;
    pthread_mutex_unlock(&e->mu);
    return live;
}

void etcd_lease_dead(eeng *e, uint64_t gen)
{
    baton_host *h = NULL;
    pthread_mutex_lock(&e->mu);
    if (e->lease && e->lease_gen == gen) {
        e->lease = 0;
        h = e->host;
    }
    pthread_mutex_unlock(&e->mu);
    /* before any new lease can make a grant: every grant so far was on this one */
    if (h) baton_host_lost_all(h);
}

static void orphan_free(eorphan *o)
{
    free(o->name);
    free(o->key);
    free(o);
}

/* e->mu held. Deletes one withdrawn key that is due (etcd_withdraw), within
 * what is left before the next keep-alive: 1 when there was one to try. */
static int orphan_step(eeng *e, int64_t now)
{
    eorphan *o, **pp;
    int64_t budget;
    int rc, del;
    for (o = e->orphans; o; o = o->next)
        if (!o->busy && o->next_try <= now) break;
    if (!o) return 0;
    if (!e->lease || o->gen != e->lease_gen) {
        /* its lease is gone, or given up (then it expires unrenewed): the
         * key goes with it, and a new lease means new key names */
        for (pp = &e->orphans; *pp != o; pp = &(*pp)->next) {}
        *pp = o->next;
        orphan_free(o);
        pthread_cond_broadcast(&e->cv);
        return 1;
    }
    budget = (e->next_keepalive - now) / 1000000;
    if (budget > e->io_timeout_ms) budget = e->io_timeout_ms;
    if (budget < 50) budget = 50;
    o->busy = 1;
    pthread_mutex_unlock(&e->mu);
    rc = etcd_delete_own(e, o->name, o->key, o->klen, o->rev, 0, &del, (int)budget);
    pthread_mutex_lock(&e->mu);
    o->busy = 0;
    if (rc == 0) {
        /* deleted, or not ours any more: either way out of the line */
        for (pp = &e->orphans; *pp != o; pp = &(*pp)->next) {}
        *pp = o->next;
        orphan_free(o);
    } else {
        o->next_try = baton_now_ns() + 500000000LL;
    }
    pthread_cond_broadcast(&e->cv);
    return 1;
}

/* The keep-alive thread: renews the lease every TTL/3; retries every 200 ms
 * after a failure until the lease's deadline, then declares it lost. Between
 * renewals it deletes the keys of contenders that gave up and could not
 * delete their key in time (orphan_step). */
/* ---- grants whose keys are checked ------------------------------------- */

#define HELD_BATCH 64            /* ranges per txn (etcd allows 128 operations by default) */

void etcd_held_add(eeng *e, void *st, const char *key, size_t klen, int64_t rev)
{
    eheld *h = calloc(1, sizeof *h);
    etcd_held_del(e, st);
    if (!h || !(h->key = malloc(klen + 1))) {
        free(h);
        return;              /* unchecked: only a deleted key goes unnoticed */
    }
    memcpy(h->key, key, klen);
    h->key[klen] = 0;
    h->klen = klen;
    h->st = st;
    h->rev = rev;
    pthread_mutex_lock(&e->mu);
    h->next = e->held;
    e->held = h;
    pthread_mutex_unlock(&e->mu);
}

void etcd_held_del(eeng *e, void *st)
{
    eheld *gone = NULL;
    pthread_mutex_lock(&e->mu);
    for (eheld **pp = &e->held; *pp; pp = &(*pp)->next)
        if ((*pp)->st == st) {
            gone = *pp;
            *pp = gone->next;
            break;
        }
    pthread_mutex_unlock(&e->mu);
    if (gone) free(gone->key);
    free(gone);
}

/* Called by the keep-alive thread (e->mu held, released meanwhile): every
 * held key is read back, HELD_BATCH per txn; one that is gone or was
 * created again (another create revision) was deleted by someone else, and
 * its grant is reported lost. */
static void held_check(eeng *e, int timeout_ms)
{
    typedef struct { void *st; char *key; size_t klen; int64_t rev; } snap;
    snap *v = NULL;
    size_t n = 0, cap = 0;
    baton_host *host = e->host;

    for (eheld *h = e->held; h; h = h->next) {
        if (h->reported) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            snap *nv = realloc(v, nc * sizeof *nv);
            if (!nv) break;
            v = nv;
            cap = nc;
        }
        if (!(v[n].key = malloc(h->klen + 1))) break;
        memcpy(v[n].key, h->key, h->klen + 1);
        v[n].klen = h->klen;
        v[n].st = h->st;
        v[n++].rev = h->rev;
    }
    if (!n) goto out_locked;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < n; i += HELD_BATCH) {
        size_t m = n - i < HELD_BATCH ? n - i : HELD_BATCH;
        json_t *ops = json_array(), *resp = NULL;
        for (size_t j = 0; ops && j < m; j++) {
            char *k64 = egw_b64(v[i + j].key, v[i + j].klen);
            if (!k64 || json_array_append_new(ops, json_pack("{s:{s:s, s:b}}", "request_range", "key", k64,
                                                             "keys_only", 1))) {
                json_decref(ops);
                ops = NULL;
            }
            free(k64);
        }
        if (!ops) break;
        if (egw_call_idem(e->gw, "/v3/kv/txn", json_pack("{s:o}", "success", ops), &resp, timeout_ms)) {
            json_decref(resp);
            break;           /* no answer: the lease's own checks decide */
        }
        for (size_t j = 0; j < m; j++) {
            int64_t count = 0;
            json_t *kv = etcd_txn_kv(resp, j, &count);
            if (kv && egw_int(kv, "create_revision") == v[i + j].rev) continue;
            pthread_mutex_lock(&e->mu);
            {
                int still = 0;
                for (eheld *h = e->held; h; h = h->next)
                    if (h->st == v[i + j].st && h->rev == v[i + j].rev && !h->reported) still = h->reported = 1;
                pthread_mutex_unlock(&e->mu);
                if (!still) continue;
            }
            baton_log(BATON_LOG_WARN, "etcd: our key %.*s (fence %lld) was deleted by another client: the lock "
                      "is lost", (int)v[i + j].klen, v[i + j].key, (long long)v[i + j].rev);
            if (host) baton_host_lost(host, v[i + j].st, (uint64_t)v[i + j].rev);
        }
        json_decref(resp);
    }
    pthread_mutex_lock(&e->mu);
out_locked:
    for (size_t i = 0; i < n; i++) free(v[i].key);
    free(v);
}

static void *keepalive_main(void *arg)
{
    eeng *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int64_t now = baton_now_ns(), id = e->lease;
        uint64_t gen = e->lease_gen;
        if (!id) {
            struct timespec ts = { .tv_sec = (now + 1000000000LL) / 1000000000LL,
                                   .tv_nsec = (now + 1000000000LL) % 1000000000LL };
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            continue;
        }
        if (now >= e->lease_deadline) {
            /* stopped, or unreachable for a whole TTL: whatever the server
             * still says, our view of the lease is too old to trust */
            pthread_mutex_unlock(&e->mu);
            baton_log(BATON_LOG_WARN, "etcd: lease %llx not kept alive before its deadline: locks on it are lost",
                      (unsigned long long)id);
            etcd_lease_dead(e, gen);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        if (now < e->next_keepalive) {
            /* awake at the lease's deadline too: a renewal that failed just
             * before it must not push the loss to the next retry */
            int64_t t = e->next_keepalive < e->lease_deadline ? e->next_keepalive : e->lease_deadline;
            struct timespec ts;
            if (orphan_step(e, now)) continue;
            for (eorphan *o = e->orphans; o; o = o->next)
                if (!o->busy && o->next_try < t) t = o->next_try;
            ts.tv_sec = t / 1000000000LL;
            ts.tv_nsec = t % 1000000000LL;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            continue;
        }
        int64_t left_ms = (e->lease_deadline - now) / 1000000;
        pthread_mutex_unlock(&e->mu);

        json_t *resp = NULL;
        int64_t sent = baton_now_ns(), ttl = -1;
        int rc = egw_call_idem(e->gw, "/v3/lease/keepalive", json_pack("{s:I}", "ID", (json_int_t)id), &resp,
                          (int)(left_ms > 0 && left_ms < 5000 ? left_ms : 5000));
        if (!rc) {
            json_t *res = json_object_get(resp, "result");
            ttl = res ? egw_int(res, "TTL") : -1;
            if (!res) baton_log(BATON_LOG_WARN, "etcd: lease keep-alive answered without a result");
        }
        json_decref(resp);
        if (!rc && ttl == 0) {
            baton_log(BATON_LOG_WARN, "etcd: lease %llx expired on the server: locks on it are lost",
                      (unsigned long long)id);
            etcd_lease_dead(e, gen);
            pthread_mutex_lock(&e->mu);
            continue;
        }
        pthread_mutex_lock(&e->mu);
        if (e->lease_gen != gen) continue;
        if (ttl > 0) {
            e->granted_ttl_s = (int)ttl;
            e->lease_deadline = ns_after_s(sent, (int)ttl);
            e->next_keepalive = sent + ttl * 1000000000LL / 3;
            /* with each keep-alive: are our keys still there? */
            if (e->held) held_check(e, (int)(ttl * 1000 / 3 < e->io_timeout_ms ? ttl * 1000 / 3 : e->io_timeout_ms));
        } else {
            e->next_keepalive = baton_now_ns() + 200000000LL;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- open / close ------------------------------------------------------- */

static void eng_free(eeng *e)
{
    if (!e) return;
    egw_free(e->gw);
    while (e->held) {        /* none: every state was freed before close */
        eheld *h = e->held;
        e->held = h->next;
        free(h->key);
        free(h);
    }
    while (e->orphans) {
        eorphan *o = e->orphans;
        e->orphans = o->next;
        orphan_free(o);
    }
    while (e->names) {
        ename *n = e->names;
        e->names = n->next;
        free(n->name);
        free(n);
    }
    free(e->prefix);
    free(e->ident);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int etcd_open(void **eng, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    pthread_condattr_t ca;
    egw_config cfg;
    eeng *e;
    int rc;

    *eng = NULL;
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    if ((rc = configure(e, u, uo, opts, &cfg))) goto fail;
    /* the client's lease: the URI's ttl= wins, else the lease the caller
     * asked for (baton run -t), in whole seconds rounded up */
    if (opts && opts->version >= 2 && opts->lease_ms) {
        if (!baton_opts_given(uo, "ttl"))
            e->ttl_s = opts->lease_ms > 24u * 3600 * 1000 ? 24 * 3600 : (int)((opts->lease_ms + 999) / 1000);
    }
    if ((rc = make_ident(e, u))) goto fail;
    if ((rc = egw_new(&e->gw, u, &cfg))) goto fail;
    /* the lease now: a wrong address or password shows at open */
    if ((rc = lease_grant(e, 0))) goto fail;
    if (pthread_create(&e->thr, NULL, keepalive_main, e)) {
        rc = baton_seterr(BATON_ENOMEM, 0, "etcd: cannot start the keep-alive thread");
        goto fail;
    }
    e->thr_started = 1;
    *eng = e;
    return 0;
fail:
    if (e->lease) {
        json_t *r = NULL;
        egw_call_idem(e->gw, "/v3/lease/revoke", json_pack("{s:I}", "ID", (json_int_t)e->lease), &r, 0);
        json_decref(r);
    }
    eng_free(e);
    return rc;
}

static void etcd_close(void *eng)
{
    eeng *e = eng;
    int64_t id;
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    id = e->lease;
    e->lease = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thr_started) pthread_join(e->thr, NULL);
    if (id) {
        /* every key on it goes with it (best effort: it expires anyway) */
        json_t *r = NULL;
        egw_call_idem(e->gw, "/v3/lease/revoke", json_pack("{s:I}", "ID", (json_int_t)id), &r, 0);
        json_decref(r);
    }
    eng_free(e);
}

static void etcd_attach(void *eng, baton_host *host)
{
    eeng *e = eng;
    pthread_mutex_lock(&e->mu);
    e->host = host;
    pthread_mutex_unlock(&e->mu);
}

static int etcd_identity(void *eng, char *buf, size_t n)
{
    eeng *e = eng;
    snprintf(buf, n, "%s", e->ident);
    return 0;
}

static int etcd_describe(void *eng, char *buf, size_t n)
{
    eeng *e = eng;
    char ep[256];
    int64_t id, left;
    int ttl;
    egw_endpoint(e->gw, ep, sizeof ep);
    pthread_mutex_lock(&e->mu);
    id = e->lease;
    ttl = e->granted_ttl_s;
    left = id ? (e->lease_deadline - baton_now_ns()) / 1000000 : 0;
    pthread_mutex_unlock(&e->mu);
    if (id)
        snprintf(buf, n, "lease %llx ttl %d s (kept alive every %d ms, %lld ms left) via %s", (unsigned long long)id,
                 ttl, ttl * 1000 / 3, (long long)left, ep);
    else
        snprintf(buf, n, "no lease (lost; a new one on the next acquire) via %s", ep);
    return 0;
}

static int etcd_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    (void)eng, (void)st, (void)owner, (void)lease_ms, (void)deadline_ns;
    return baton_seterr(BATON_ENOTSUP, 0, "etcd: locks live on the client's lease, kept alive by the client");
}

/* Until when the client's lease is known alive: the deadline the keep-alive
 * thread keeps (the last keep-alive's send time + the TTL granted). No
 * lease = any grant still held was made on one that is gone. */
static int64_t etcd_session_deadline(void *eng)
{
    eeng *e = eng;
    int64_t d;
    pthread_mutex_lock(&e->mu);
    d = e->lease ? e->lease_deadline : 0;
    pthread_mutex_unlock(&e->mu);
    return d;
}

static const baton_lock_methods etcd_lock_methods = {
    .create = etcd_lock_new,
    .destroy = etcd_lock_free,
    .acquire = etcd_lock_acquire,
    .release = etcd_lock_release,
    .renew = etcd_lock_renew,
    .info = etcd_lock_info,
    .list = etcd_lock_list,
    .force_unlock = etcd_lock_break,
};

static const baton_rw_methods etcd_rw_methods = {
    .create = etcd_rwlock_new,
};

static const baton_sem_methods etcd_sem_methods = {
    .create = etcd_sem_new,
    .destroy = etcd_sem_free,
    .acquire = etcd_sem_acquire,
    .release = etcd_sem_release,
    .ctl = etcd_sem_ctl,
};

static const baton_permits_methods etcd_permits_methods = {
    .create = etcd_permits_new,
    .destroy = etcd_permits_free,
    .acquire = etcd_permits_acquire,
    .release = etcd_permits_release,
    .renew = etcd_permits_renew,
    .ctl = etcd_permits_ctl,
};

static const baton_election_methods etcd_election_methods = {
    .create = etcd_election_new,
    .leader = etcd_election_leader,
    .proclaim = etcd_election_proclaim,
};

static const baton_services etcd_services_methods = {
    .secret_env = "BATON_ETCD_PASSWORD",
    .attach = etcd_attach,
    .identity = etcd_identity,
    .session_deadline = etcd_session_deadline,
    .engine_ops = etcd_engine_ops,
    .describe = etcd_describe,
};

const baton_backend baton__backend_etcd = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_etcd,
    .caps = BATON_CAP_FAIR | BATON_CAP_NOTIFY | BATON_CAP_SESSION,
    .open = etcd_open,
    .close = etcd_close,
    .lock = &etcd_lock_methods,
    .rw = &etcd_rw_methods,
    .sem = &etcd_sem_methods,
    .permits = &etcd_permits_methods,
    .election = &etcd_election_methods,
    .value = &etcd_value_methods,
    .group = &etcd_group_methods,
    .queue = &etcd_queue_methods,
    .services = &etcd_services_methods,
};
