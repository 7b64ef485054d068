/*
 * The transport: etcd's v3 JSON gateway (grpc-gateway, served by etcd 3.4
 * under /v3/ on the client port) over libcurl, bodies through jansson.
 *
 * Unary calls take an easy handle from a small pool, so each thread reuses a
 * kept-alive HTTP/1.1 connection (one round trip per request once
 * connected). The members of the URI are tried in turn: a call that cannot
 * connect, or whose member answers "unavailable" (no leader), moves the
 * current member on and tries the next one, each at most once per call.
 *
 * A watch is a long-lived streaming POST (/v3/watch): the answer is a
 * sequence of JSON objects, one per message. egw_wait_delete runs one on its
 * own easy handle and multi handle in the waiting thread, polling its socket
 * in slices of at most WATCH_SLICE_MS so a cancel or the deadline is seen
 * quickly; the lock itself is never polled: only the server's DELETE event
 * (or the end of the stream) ends the wait.
 *
 * With transport=grpc (h2.c, pb.c) the same requests go as gRPC over HTTP/2
 * instead: the JSON request is encoded as etcd's protobuf message and the
 * answer decoded back into the gateway's JSON, so the callers do not know;
 * failover, auth and the error mapping stay here.
 */
#include "etcd_int.h"

#include "ecurl.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define POOL_MAX 16
#define WATCH_SLICE_MS 50
/* etcd confirms a watch ("created") as soon as it is set up; a stream that
 * shows nothing for this long is held back on the way (nginx's proxy_pass
 * with its defaults buffers it, headers and all: HTTP/1.0 to etcd,
 * proxy_buffering on) or its member is not answering, so the waiter looks
 * again (through failover) instead of sleeping to its deadline through the
 * release (docs/etcd-engine.md, "Why two transports") */
#define WATCH_CONFIRM_MS 2000

struct egw {
    char **base;             /* "http://host:port" per member */
    size_t nbase;
    egw_config cfg;          /* strings owned below */
    char *cacert, *cert, *key, *user, *password;
    pthread_mutex_t mu;
    /* guarded by mu */
    size_t cur;              /* the member calls go to first */
    char *token;             /* auth token, NULL before authenticating */
    uint64_t token_gen;      /* bumped on each new token */
    CURL *pool[POOL_MAX];
    int npool;
    unsigned held_back;      /* watches a proxy held back (warned once) */
    eh2 *h2;                 /* transport=grpc */
};

int egw_have_grpc(void)
{
#ifdef BATON_ETCD_GRPC
    return 1;
#else
    return 0;
#endif
}

int egw_have_grpc_tls(void)
{
#if defined(BATON_ETCD_GRPC) && defined(BATON_ETCD_GRPC_TLS)
    return 1;
#else
    return 0;
#endif
}

/* ---- helpers (base64: src/util/base64.c) ------------------------------ */

int64_t egw_int(const json_t *o, const char *key)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (json_is_integer(v)) return (int64_t)json_integer_value(v);
    if (json_is_string(v)) return strtoll(json_string_value(v), NULL, 10);
    return 0;
}

char *egw_prefix_end(const char *p, size_t len, size_t *outlen)
{
    char *end = malloc(len + 1);
    if (!end) return NULL;
    memcpy(end, p, len);
    for (size_t i = len; i > 0; i--) {
        if ((unsigned char)end[i - 1] < 0xff) {
            end[i - 1]++;
            *outlen = i;
            end[i] = 0;
            return end;
        }
    }
    /* all 0xff: every key after P ("\0" means "to the end" in etcd) */
    end[0] = 0;
    *outlen = 1;
    return end;
}

/* ---- setup -------------------------------------------------------------- */

static char *dupz(const char *s)
{
    return s ? strdup(s) : NULL;
}

int egw_new(egw **out, const baton_uri *u, const egw_config *cfg)
{
    egw *g;
    int rc;

    *out = NULL;
    if (cfg->transport == EGW_GRPC) {
        if (!egw_have_grpc())
            return baton_seterr(BATON_ENOTSUP, 0, "etcd: transport=grpc: this build has no libnghttp2 "
                                "(libnghttp2-dev at build time)");
        if (cfg->tls && !egw_have_grpc_tls())
            return baton_seterr(BATON_ENOTSUP, 0, "etcd: transport=grpc: this build has no TLS for it (libssl-dev "
                                "at build time): use etcds://...?transport=gateway");
    } else if ((rc = baton__ecurl_load())) {
        return rc;
    }
    if (!(g = calloc(1, sizeof *g))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    g->cfg = *cfg;
    g->cacert = dupz(cfg->cacert), g->cert = dupz(cfg->cert), g->key = dupz(cfg->key);
    g->user = dupz(cfg->user), g->password = dupz(cfg->password);
    g->cfg.cacert = g->cacert, g->cfg.cert = g->cert, g->cfg.key = g->key;
    g->cfg.user = g->user, g->cfg.password = g->password;
    if (!(g->base = calloc(u->nhosts, sizeof *g->base))) goto nomem;
    for (size_t i = 0; i < u->nhosts; i++) {
        const char *h = u->hosts[i].host;
        size_t n = strlen(h) + 32;
        int v6 = strchr(h, ':') != NULL;
        if (!(g->base[i] = malloc(n))) goto nomem;
        snprintf(g->base[i], n, "%s://%s%s%s:%d", cfg->tls ? "https" : "http", v6 ? "[" : "", h, v6 ? "]" : "",
                 u->hosts[i].port > 0 ? u->hosts[i].port : 2379);
        g->nbase++;
    }
#ifdef BATON_ETCD_GRPC
    if (cfg->transport == EGW_GRPC && (rc = eh2_new(&g->h2, u, &g->cfg))) {
        egw_free(g);
        return rc;
    }
#endif
    *out = g;
    return 0;
nomem:
    egw_free(g);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static void wipe_free(char *s)
{
    if (!s) return;
    memset(s, 0, strlen(s));
    free(s);
}

void egw_free(egw *g)
{
    if (!g) return;
    for (int i = 0; i < g->npool; i++) curl_easy_cleanup(g->pool[i]);
#ifdef BATON_ETCD_GRPC
    eh2_free(g->h2);
#endif
    for (size_t i = 0; i < g->nbase; i++) free(g->base[i]);
    free(g->base);
    free(g->cacert), free(g->cert), free(g->key), free(g->user);
    wipe_free(g->password);
    wipe_free(g->token);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void egw_endpoint(egw *g, char *buf, size_t n)
{
    pthread_mutex_lock(&g->mu);
    snprintf(buf, n, "%s%s", g->base[g->cur % g->nbase], g->h2 ? " (gRPC)" : "");
    pthread_mutex_unlock(&g->mu);
}

/* ---- one request -------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} buf_t;

static size_t on_body(char *data, size_t sz, size_t nm, void *arg)
{
    buf_t *b = arg;
    size_t n = sz * nm;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return 0;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return n;
}

static CURL *handle_get(egw *g)
{
    CURL *h = NULL;
    pthread_mutex_lock(&g->mu);
    if (g->npool) h = g->pool[--g->npool];
    pthread_mutex_unlock(&g->mu);
    return h ? h : curl_easy_init();
}

static void handle_put(egw *g, CURL *h)
{
    if (!h) return;
    pthread_mutex_lock(&g->mu);
    if (g->npool < POOL_MAX) {
        g->pool[g->npool++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    if (h) curl_easy_cleanup(h);
}

/* The options every request of this transport has. */
static void setup(egw *g, CURL *h, const char *url, const char *body, struct curl_slist *hdr, buf_t *b,
                  int timeout_ms)
{
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, b);
    /* the whole transfer (name lookup, connect, TLS, request, answer) ends
     * at timeout_ms: curl's resolver here is threaded (AsynchDNS), so the
     * lookup obeys it too */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(timeout_ms > 0 && timeout_ms < g->cfg.connect_timeout_ms ? timeout_ms
                                                                                    : g->cfg.connect_timeout_ms));
    if (timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");   /* never an http_proxy from the environment */
    if (g->cfg.tls) {
        if (g->cacert) curl_easy_setopt(h, CURLOPT_CAINFO, g->cacert);
        if (g->cert) curl_easy_setopt(h, CURLOPT_SSLCERT, g->cert);
        if (g->key) curl_easy_setopt(h, CURLOPT_SSLKEY, g->key);
    }
}

static struct curl_slist *headers(egw *g, uint64_t *gen)
{
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json"), *t;
    if (!hdr) return NULL;
    /* no "Expect: 100-continue" round trip for larger bodies */
    if (!(t = curl_slist_append(hdr, "Expect:"))) goto fail;
    hdr = t;
    pthread_mutex_lock(&g->mu);
    *gen = g->token_gen;
    if (g->token) {
        size_t n = strlen(g->token) + 32;
        char *line = malloc(n);
        if (line) {
            snprintf(line, n, "Authorization: %s", g->token);
            t = curl_slist_append(hdr, line);
            wipe_free(line);
        }
        if (!line || !t) {
            pthread_mutex_unlock(&g->mu);
            goto fail;
        }
        hdr = t;
    }
    pthread_mutex_unlock(&g->mu);
    return hdr;
fail:
    curl_slist_free_all(hdr);
    return NULL;
}

/* Classes of answers (internal). */
enum {
    R_OK,
    R_NEXT,          /* try the next member */
    R_ELECT,         /* the cluster has no leader: the request was not proposed */
    R_ELECT_MAYBE,   /* the leader changed under it: it may have been applied */
    R_AUTH_RETRY,    /* token expired */
    R_FAIL
};

/* An etcd error (gRPC CODE, MSG; the gateway's HTTP status or 0 for gRPC)
 * as a baton error, and its class. */
static int server_error(int64_t code, const char *msg, long http, int *klass)
{
    if (!msg || !*msg) msg = "(no message)";
    *klass = R_FAIL;
    /* gRPC codes: 14 unavailable (no leader, stopping), 16 unauthenticated,
     * 7 permission denied, 3 invalid argument (also "authentication failed") */
    if (strstr(msg, "no leader")) {
        *klass = R_ELECT;
        return baton_seterr(BATON_EUNAVAILABLE, code, "etcd: %s", msg);
    }
    if (code == 14 || strstr(msg, "leader changed")) {
        /* "leader changed", "request timed out": proposed, outcome unknown */
        *klass = R_ELECT_MAYBE;
        return baton_seterr(BATON_EUNAVAILABLE, code, "etcd: %s", msg);
    }
    if (strstr(msg, "invalid auth token") || strstr(msg, "auth token")) {
        *klass = R_AUTH_RETRY;
        return baton_seterr(BATON_EAUTH, code, "etcd: %s", msg);
    }
    if (code == 16 || code == 7 || http == 401 || strstr(msg, "authentication failed") ||
        strstr(msg, "user name is empty") || strstr(msg, "permission denied"))
        return baton_seterr(BATON_EAUTH, code, "etcd: %s", msg);
    if (!http) return baton_seterr(BATON_EIO, code, "etcd: %s (gRPC status %lld)", msg, (long long)code);
    return baton_seterr(BATON_EIO, code, "etcd: %s (HTTP %ld)", msg, http);
}

/* A request ready to send: the JSON text for the gateway, or the framed
 * protobuf message for gRPC. */
typedef struct {
    const char *path;
    const epb_method *m;     /* gRPC */
    char *body;
    size_t len;
} ereq;

/* REQ (freed here) as the body of PATH on G's transport. */
static int req_make(egw *g, const char *path, json_t *req, ereq *r)
{
    int rc = 0;
    memset(r, 0, sizeof *r);
    r->path = path;
    if (!req) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (g->h2) {
        if (!(r->m = epb_method_for(path)))
            rc = baton_seterr(BATON_ENOTSUP, 0, "etcd: transport=grpc does not know %s", path);
        else
            rc = epb_encode(r->m->req, req, (unsigned char **)&r->body, &r->len);
    } else if (!(r->body = json_dumps(req, JSON_COMPACT))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    } else {
        r->len = strlen(r->body);
    }
    json_decref(req);
    return rc;
}

static void req_free(ereq *r)
{
    if (r->body) memset(r->body, 0, r->len);   /* it may hold a password */
    free(r->body);
}

/* One POST of R to member AT over the gateway. */
static int attempt_gw(egw *g, size_t at, const ereq *r, json_t **resp, int timeout_ms, int *klass)
{
    buf_t b = { 0 };
    uint64_t gen = 0;
    struct curl_slist *hdr = headers(g, &gen);
    CURL *h = handle_get(g);
    CURLcode cc;
    long http = 0;
    json_error_t je;
    json_t *o;
    char url[512];
    int rc;

    *klass = R_FAIL;
    if (!hdr || !h) {
        curl_slist_free_all(hdr);
        if (h) curl_easy_cleanup(h);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    snprintf(url, sizeof url, "%s%s", g->base[at], r->path);
    setup(g, h, url, r->body, hdr, &b, timeout_ms);
    cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_slist_free_all(hdr);
    if (cc != CURLE_OK) {
        /* a dead connection is not kept */
        curl_easy_cleanup(h);
        free(b.p);
        if (b.oom) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        if (cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_CERTPROBLEM || cc == CURLE_PEER_FAILED_VERIFICATION ||
            cc == CURLE_SSL_CONNECT_ERROR)
            return baton_seterr(BATON_EAUTH, cc, "etcd: %s: TLS: %s", g->base[at], curl_easy_strerror(cc));
        *klass = R_NEXT;
        return baton_seterr(BATON_EUNAVAILABLE, cc, "etcd: %s: %s", g->base[at], curl_easy_strerror(cc));
    }
    handle_put(g, h);
    o = b.p ? json_loadb(b.p, b.len, 0, &je) : NULL;
    if (!json_is_object(o)) {
        rc = baton_seterr(BATON_EPROTO, http, "etcd: %s%s: not a JSON object in the reply (HTTP %ld, %zu bytes)",
                          g->base[at], r->path, http, b.len);
        json_decref(o);
        free(b.p);
        /* not an etcd gateway (a proxy's error page): the next member may be one */
        *klass = http >= 500 ? R_NEXT : R_FAIL;
        return rc;
    }
    free(b.p);
    if (http != 200 || json_object_get(o, "error")) {
        const char *msg = json_string_value(json_object_get(o, "message"));
        if (!msg) msg = json_string_value(json_object_get(o, "error"));
        rc = server_error(egw_int(o, "code"), msg, http, klass);
        json_decref(o);
        return rc;
    }
    *klass = R_OK;
    *resp = o;
    return 0;
}

#ifdef BATON_ETCD_GRPC
/* The auth token now (malloc'd, NULL when none). */
static char *token_get(egw *g, int *oom)
{
    char *t = NULL;
    *oom = 0;
    pthread_mutex_lock(&g->mu);
    if (g->token && !(t = strdup(g->token))) *oom = 1;
    pthread_mutex_unlock(&g->mu);
    return t;
}

/* The one answer of a unary gRPC call. */
typedef struct {
    const epb_msg *m;
    json_t *o;
    int n;
} unary_t;

static int on_unary(void *arg, const unsigned char *p, size_t len)
{
    unary_t *u = arg;
    if (u->n++) return baton_seterr(BATON_EPROTO, 0, "etcd: grpc: more than one answer to a unary call");
    return epb_decode(u->m, p, len, &u->o);
}

/* One gRPC call of R to member AT. */
static int attempt_grpc(egw *g, size_t at, const ereq *r, json_t **resp, int timeout_ms, int *klass)
{
    eh2_status st;
    unary_t u = { r->m->resp, NULL, 0 };
    int oom, rc;
    char *tok = token_get(g, &oom);

    *klass = R_FAIL;
    if (oom) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* one request message then the end of ours: a streaming method
     * (LeaseKeepAlive) answers it and ends the stream too */
    rc = eh2_call(g->h2, at, r->m->grpc, tok, (const unsigned char *)r->body, r->len, 1,
                  baton_now_ns() + (int64_t)timeout_ms * 1000000, NULL, on_unary, &u, &st);
    wipe_free(tok);
    if (rc == BATON_ETIMEDOUT)
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: %s: no answer within %d ms", eh2_authority(g->h2, at),
                          timeout_ms);
    if (rc) {
        json_decref(u.o);
        if (rc == BATON_EUNAVAILABLE) *klass = R_NEXT;
        return rc;
    }
    if (st.grpc_status != 0) {
        json_decref(u.o);
        return server_error(st.grpc_status, st.message, 0, klass);
    }
    if (!u.o) return baton_seterr(BATON_EPROTO, 0, "etcd: %s%s: a gRPC answer without a message",
                                  eh2_authority(g->h2, at), r->m->grpc);
    if (r->m->stream) {
        json_t *w = json_object();
        if (!w || json_object_set_new(w, "result", u.o)) {
            json_decref(w);
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
        u.o = w;
    }
    *klass = R_OK;
    *resp = u.o;
    return 0;
}
#endif

/* Milliseconds left until UNTIL (monotonic ns), 0 when it passed. */
static int ms_left(int64_t until)
{
    int64_t ms = (until - baton_now_ns() + 999999) / 1000000;
    return ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Sends R to the current member, moving on through the members on
 * connection failures and "unavailable". A cluster that answers but has no
 * leader (an election after the leader died) is asked again, with a growing
 * pause: elections take about a second and a caller should not see one. A
 * request that may have been applied before the leader changed is sent again
 * only when IDEM says that is harmless. Everything, every member and every
 * pass, ends at UNTIL: each attempt gets what is left of it (before, each
 * member had the whole timeout again, and a pass over 3 silent members took
 * 3 timeouts). */
static int post(egw *g, const ereq *r, json_t **resp, int64_t until, int idem, int *klass, int *resent)
{
    size_t start, tries;
    int rc = 0, pause_ms = 25, attempts = 0;

    *resp = NULL;
    *klass = R_FAIL;
    for (;;) {
        int electing = 0;
        pthread_mutex_lock(&g->mu);
        start = g->cur;
        pthread_mutex_unlock(&g->mu);
        for (tries = 0; tries < g->nbase; tries++) {
            size_t at = (start + tries) % g->nbase;
            int timeout_ms = ms_left(until);
            if (!timeout_ms) {
                if (!rc) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: no member answered in time");
                *klass = R_FAIL;
                return rc;
            }
            /* the request may have been applied by an earlier attempt */
            if (attempts++ && resent) *resent = 1;
#ifdef BATON_ETCD_GRPC
            if (g->h2)
                rc = attempt_grpc(g, at, r, resp, timeout_ms, klass);
            else
#endif
                rc = attempt_gw(g, at, r, resp, timeout_ms, klass);
            if (*klass == R_ELECT_MAYBE && !idem) {
                *klass = R_FAIL;
                return rc;
            }
            if (*klass == R_ELECT || *klass == R_ELECT_MAYBE) {
                electing = 1;
                continue;
            }
            if (*klass == R_NEXT) continue;
            if (*klass == R_OK && tries) {
                pthread_mutex_lock(&g->mu);
                g->cur = at;
                pthread_mutex_unlock(&g->mu);
            }
            return rc;
        }
        /* every member failed: the next call starts with the one after */
        pthread_mutex_lock(&g->mu);
        if (g->cur == start) g->cur = (start + 1) % g->nbase;
        pthread_mutex_unlock(&g->mu);
        if (!electing || baton_now_ns() + (int64_t)pause_ms * 1000000 >= until) break;
        {
            struct timespec ts = { 0, (long)pause_ms * 1000000L };
            while (nanosleep(&ts, &ts) && errno == EINTR) {}
        }
        if (pause_ms < 400) pause_ms *= 2;
    }
    *klass = R_FAIL;
    return rc ? rc : baton_seterr(BATON_EUNAVAILABLE, 0, "etcd: no member answered");
}

/* Authenticate and keep the token. */
static int authenticate(egw *g, int64_t until)
{
    json_t *resp = NULL;
    ereq r;
    int rc, klass;
    const char *tok;

    rc = req_make(g, "/v3/auth/authenticate",
                  json_pack("{s:s, s:s}", "name", g->user, "password", g->password ? g->password : ""), &r);
    if (!rc) rc = post(g, &r, &resp, until, 1, &klass, NULL);
    req_free(&r);
    if (rc) {
        if (rc == BATON_EIO) rc = baton_seterr(BATON_EAUTH, 0, "%s", baton_error_last()->message);
        return rc;
    }
    tok = json_string_value(json_object_get(resp, "token"));
    if (!tok || !*tok) {
        json_decref(resp);
        return baton_seterr(BATON_EPROTO, 0, "etcd: authenticate answered without a token (is auth enabled?)");
    }
    pthread_mutex_lock(&g->mu);
    wipe_free(g->token);
    g->token = strdup(tok);
    g->token_gen++;
    pthread_mutex_unlock(&g->mu);
    json_decref(resp);
    return g->token ? 0 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static int call(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms, int idem, int *resent)
{
    ereq r;
    int rc, klass, have_token;
    int64_t until;

    *resp = NULL;
    if ((rc = req_make(g, path, req, &r))) goto out;
    if (timeout_ms <= 0) timeout_ms = g->cfg.io_timeout_ms;
    /* one deadline for the whole call: authentication, every member, every
     * pass, the retry after a new token */
    until = baton_now_ns() + (int64_t)timeout_ms * 1000000;
    pthread_mutex_lock(&g->mu);
    have_token = g->token != NULL;
    pthread_mutex_unlock(&g->mu);
    if (g->user && !have_token && (rc = authenticate(g, until))) goto out;
    if (resent) *resent = 0;
    rc = post(g, &r, resp, until, idem, &klass, resent);
    if (rc && klass == R_AUTH_RETRY && g->user) {
        /* the token expired (etcd's simple tokens live --auth-token-ttl): a
         * new one, once (the refused request was not applied) */
        if (!(rc = authenticate(g, until))) rc = post(g, &r, resp, until, idem, &klass, resent);
    }
out:
    req_free(&r);
    return rc;
}

int egw_call(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms)
{
    return call(g, path, req, resp, timeout_ms, 0, NULL);
}

int egw_call_idem(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms)
{
    return call(g, path, req, resp, timeout_ms, 1, NULL);
}

int egw_call_idem_resent(egw *g, const char *path, json_t *req, json_t **resp, int timeout_ms, int *resent)
{
    return call(g, path, req, resp, timeout_ms, 1, resent);
}

/* ---- watch -------------------------------------------------------------- */

typedef struct {
    buf_t b;
    size_t used;             /* bytes of b already parsed */
    int any;                 /* any event ends the wait, not only a DELETE */
    int deleted;             /* the event waited for came */
    int created;             /* the watch was set up */
    int ended;               /* canceled by the server, compacted, or a bad message */
    int compacted;           /* the start revision was compacted away */
} wstate;

/* One WatchResponse (the gateway's "result"; NULL: an error object). */
static void watch_result(wstate *ws, json_t *res)
{
    json_t *ev;
    if (!res) {
        ws->ended = 1;
        return;
    }
    if (json_is_true(json_object_get(res, "created"))) ws->created = 1;
    if (json_is_true(json_object_get(res, "canceled")) || egw_int(res, "compact_revision")) ws->ended = 1;
    if (egw_int(res, "compact_revision")) ws->compacted = 1;
    ev = json_object_get(res, "events");
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const char *t = json_string_value(json_object_get(json_array_get(ev, i), "type"));
        if (ws->any || (t && !strcmp(t, "DELETE"))) ws->deleted = 1;
    }
}

#ifdef BATON_ETCD_GRPC
static int on_watch_grpc(void *arg, const unsigned char *p, size_t len)
{
    wstate *ws = arg;
    const epb_method *m = epb_method_for("/v3/watch");
    json_t *o = NULL;
    int rc = epb_decode(m->resp, p, len, &o);
    if (rc) return rc;
    watch_result(ws, o);
    json_decref(o);
    return ws->deleted || ws->ended ? 1 : 0;
}
#endif

static size_t on_watch(char *data, size_t sz, size_t nm, void *arg)
{
    wstate *ws = arg;
    size_t n = on_body(data, sz, nm, &ws->b);
    if (n != sz * nm) return n;
    /* parse every complete message */
    for (;;) {
        json_error_t je;
        json_t *o;
        while (ws->used < ws->b.len && strchr(" \r\n\t", ws->b.p[ws->used])) ws->used++;
        if (ws->used >= ws->b.len) break;
        o = json_loadb(ws->b.p + ws->used, ws->b.len - ws->used, JSON_DISABLE_EOF_CHECK, &je);
        if (!o) break;       /* incomplete: wait for more */
        ws->used += (size_t)je.position;
        watch_result(ws, json_object_get(o, "result"));
        json_decref(o);
    }
    if (ws->used == ws->b.len) ws->used = ws->b.len = 0;
    return n;
}

#ifdef BATON_ETCD_GRPC
/* The watch as a gRPC stream on the current member: 0 when the event came
 * or the stream ended (the caller looks again), BATON_ETIMEDOUT,
 * BATON_ECANCELED. */
static int watch_grpc(egw *g, json_t *req, int64_t deadline_ns, baton_waiter *w, wstate *ws)
{
    const epb_method *m = epb_method_for("/v3/watch");
    unsigned char *msg = NULL;
    size_t len, at;
    eh2_status st;
    char *tok;
    int rc, oom;

    if ((rc = epb_encode(m->req, req, &msg, &len))) return rc;
    tok = token_get(g, &oom);
    if (oom) {
        free(msg);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    pthread_mutex_lock(&g->mu);
    at = g->cur % g->nbase;
    pthread_mutex_unlock(&g->mu);
    /* our side stays open: etcd would end the stream with it */
    rc = eh2_call(g->h2, at, m->grpc, tok, msg, len, 0, deadline_ns, w, on_watch_grpc, ws, &st);
    free(msg);
    wipe_free(tok);
    if (rc == BATON_ETIMEDOUT || rc == BATON_ECANCELED || rc == BATON_ENOMEM) return rc;
    if (rc || !st.stopped) {
        /* the member went away, an error status, a bad message: as when the gateway's stream ends */
        baton_log(BATON_LOG_DEBUG, "etcd: watch stream ended: %s",
                  rc ? baton_error_last()->message : st.message);
        ws->ended = 1;
    }
    return 0;
}
#endif

static int wait_event(egw *g, const char *key, size_t klen, int prefix, int any, int64_t rev, int64_t deadline_ns,
                      baton_waiter *w, int *fired)
{
    char *k64 = egw_b64(key, klen), *body = NULL, url[512], revs[24], *end = NULL, *e64 = NULL;
    size_t el;
    json_t *req = NULL;
    struct curl_slist *hdr = NULL;
    CURL *h = NULL;
    CURLM *m = NULL;
    wstate ws = { 0 };
    uint64_t gen;
    int rc = 0, running = 1;
    int64_t t0 = baton_now_ns();

    snprintf(revs, sizeof revs, "%lld", (long long)rev);
    ws.any = any;
    if (prefix && (!(end = egw_prefix_end(key, klen, &el)) || !(e64 = egw_b64(end, el)))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
#ifdef BATON_ETCD_GRPC
    if (g->h2) {
        if (!k64 || !(req = json_pack("{s:{s:s, s:s, s:s*}}", "create_request", "key", k64, "start_revision", revs,
                                      "range_end", e64))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto out;
        }
        rc = watch_grpc(g, req, deadline_ns, w, &ws);
        goto ended;
    }
#endif
    if (!k64 || !(req = json_pack("{s:{s:s, s:s, s:s*}}", "create_request", "key", k64, "start_revision", revs,
                                  "range_end", e64)) ||
        !(body = json_dumps(req, JSON_COMPACT)) || !(hdr = headers(g, &gen)) || !(h = curl_easy_init()) ||
        !(m = curl_multi_init())) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    egw_endpoint(g, url, sizeof url - 16);
    strcat(url, "/v3/watch");
    setup(g, h, url, body, hdr, &ws.b, 0);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_watch);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &ws);
    curl_multi_add_handle(m, h);
    while (!ws.deleted && !ws.ended && running) {
        int64_t now = baton_now_ns(), slice = WATCH_SLICE_MS;
        if (baton_waiter_canceled(w)) {
            rc = BATON_ECANCELED;
            break;
        }
        if (deadline_ns != INT64_MAX && now >= deadline_ns) {
            rc = BATON_ETIMEDOUT;
            break;
        }
        if (deadline_ns != INT64_MAX && (deadline_ns - now) / 1000000 < slice) slice = (deadline_ns - now) / 1000000 + 1;
        if (curl_multi_perform(m, &running) != CURLM_OK) break;
        if (!running || ws.deleted || ws.ended) break;
        if (!ws.created && now - t0 >= WATCH_CONFIRM_MS * 1000000LL) {
            int first;
            pthread_mutex_lock(&g->mu);
            first = !g->held_back++;
            pthread_mutex_unlock(&g->mu);
            if (first)
                baton_log(BATON_LOG_WARN, "etcd: %s: no answer to the watch within %d ms (a proxy holding the "
                          "stream back? nginx: proxy_buffering off or proxy_http_version 1.1); waiters look again "
                          "every %d ms instead", url, WATCH_CONFIRM_MS, WATCH_CONFIRM_MS);
            ws.ended = 1;
            break;
        }
        curl_multi_poll(m, NULL, 0, (int)slice, NULL);
    }
#ifdef BATON_ETCD_GRPC
ended:
#endif
    if (fired) *fired = ws.deleted ? 1 : ws.compacted ? -1 : 0;
    if (!rc && !ws.deleted) {
        /* the stream ended without the event (the member went away, an
         * error): the caller looks again; not in a tight loop */
        int64_t pause = t0 + 100000000LL;
        if (deadline_ns < pause) pause = deadline_ns;
        baton_waiter_park(w, baton_waiter_gen(w), pause);
        if (baton_waiter_canceled(w)) rc = BATON_ECANCELED;
    }
    if (m && h) curl_multi_remove_handle(m, h);
out:
    if (h) curl_easy_cleanup(h);
    if (m) curl_multi_cleanup(m);
    if (hdr) curl_slist_free_all(hdr);   /* (libcurl is not loaded with transport=grpc) */
    free(ws.b.p);
    free(body);
    json_decref(req);
    free(k64);
    free(end);
    free(e64);
    return rc;
}

int egw_wait_delete(egw *g, const char *key, size_t klen, int64_t rev, int64_t deadline_ns, baton_waiter *w)
{
    return wait_event(g, key, klen, 0, 0, rev, deadline_ns, w, NULL);
}

int egw_wait_key(egw *g, const char *key, size_t klen, int64_t rev, int64_t deadline_ns, baton_waiter *w,
                 int *fired)
{
    return wait_event(g, key, klen, 0, 1, rev, deadline_ns, w, fired);
}

int egw_wait_prefix(egw *g, const char *prefix, size_t plen, int64_t rev, int64_t deadline_ns, baton_waiter *w)
{
    return wait_event(g, prefix, plen, 1, 1, rev, deadline_ns, w, NULL);
}

int egw_wait_prefix_fired(egw *g, const char *prefix, size_t plen, int64_t rev, int64_t deadline_ns,
                          baton_waiter *w, int *fired)
{
    return wait_event(g, prefix, plen, 1, 1, rev, deadline_ns, w, fired);
}

/* ---- plain GETs (/metrics) ---------------------------------------------- */

size_t egw_members(egw *g)
{
    return g->nbase;
}

int egw_get(egw *g, size_t member, const char *path, char **body, size_t *len)
{
    char url[512];
    buf_t b = { 0 };
    CURL *h;
    CURLcode cc;
    long http = 0;
    int rc = 0;

    *body = NULL;
    *len = 0;
    if (member >= g->nbase) return baton_seterr(BATON_EINVAL, 0, "etcd: no member %zu", member);
    /* the gRPC transport does without libcurl until now */
    if ((rc = baton__ecurl_load())) return rc;
    /* its own handle: the pool's are set up for the gateway's POSTs */
    if (!(h = curl_easy_init())) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(url, sizeof url, "%s%s", g->base[member], path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)g->cfg.connect_timeout_ms);
    if (g->cfg.io_timeout_ms > 0) curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)g->cfg.io_timeout_ms);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    if (g->cfg.tls) {
        if (g->cacert) curl_easy_setopt(h, CURLOPT_CAINFO, g->cacert);
        if (g->cert) curl_easy_setopt(h, CURLOPT_SSLCERT, g->cert);
        if (g->key) curl_easy_setopt(h, CURLOPT_SSLKEY, g->key);
    }
    cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_cleanup(h);
    if (b.oom) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    else if (cc != CURLE_OK)
        rc = baton_seterr(BATON_EUNAVAILABLE, cc, "etcd: %s: %s", url, curl_easy_strerror(cc));
    else if (http != 200)
        rc = baton_seterr(BATON_EPROTO, http, "etcd: %s: HTTP %ld", url, http);
    if (rc) {
        free(b.p);
        return rc;
    }
    if (!b.p && !(b.p = calloc(1, 1))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    *body = b.p;
    *len = b.len;
    return 0;
}
