/* Quorum clients from open clients: the members' backend names the scheme of
 * its quorum form (Redis → "redlock"); the core only composes that URI from
 * the members' hosts, so it never needs to know which engine it is. */
#include "client.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->cap + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* Percent-encodes everything but unreserved characters. */
static void put_enc(sbuf *b, const char *s)
{
    static const char hx[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("-._~", c)) {
            put(b, (const char *)&c, 1);
        } else {
            char e[3] = { '%', hx[c >> 4], hx[c & 15] };
            put(b, e, 3);
        }
    }
}

static int same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && !strcmp(a, b));
}

int baton_client_open_quorum(baton_client **out, baton_client *const *members, size_t n,
                             const baton_client_options *opts)
{
    const baton_uri *u0;
    sbuf b = { NULL, 0, 0, 0 };
    int rc, tls;

    if (out) *out = NULL;
    if (!out || !members || n == 0) return baton_seterr(BATON_EINVAL, 0, "baton_client_open_quorum: no members");
    for (size_t i = 0; i < n; i++)
        if (!members[i]) return baton_seterr(BATON_EINVAL, 0, "quorum member %zu is NULL", i);
    if (!members[0]->be->services->quorum_scheme)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no quorum form", members[0]->be->info->name);
    u0 = members[0]->uri;
    /* A cluster's masters each own part of the keys: a RedLock vote on each
     * would be refused (MOVED) by all but one of them. */
    if (strstr(u0->scheme, "-cluster"))
        return baton_seterr(BATON_ENOTSUP, 0, "a quorum (RedLock) needs independent servers; %s:// is one Redis "
                            "Cluster, already a single lock service", u0->scheme);
    tls = !strcmp(u0->scheme, "rediss");
    for (size_t i = 1; i < n; i++) {
        const baton_uri *u = members[i]->uri;
        int same_params = u->nparams == u0->nparams;
        for (size_t k = 0; same_params && k < u->nparams; k++)
            same_params = !strcmp(u->params[k].key, u0->params[k].key) && !strcmp(u->params[k].value, u0->params[k].value);
        if (members[i]->be != members[0]->be || strcmp(u->scheme, u0->scheme) || !same(u->user, u0->user) ||
            !same(u->password, u0->password) || strcmp(u->path, u0->path) || !same_params)
            return baton_seterr(BATON_ENOTSUP, 0, "quorum members must share engine, scheme, credentials, "
                                "database and options (member %zu differs)", i);
        if (u->nhosts != 1)
            return baton_seterr(BATON_ENOTSUP, 0, "quorum member %zu names several hosts", i);
    }
    puts_(&b, members[0]->be->services->quorum_scheme);
    puts_(&b, "://");
    if (u0->user || u0->password) {
        if (u0->user) put_enc(&b, u0->user);
        if (u0->password) { puts_(&b, ":"); put_enc(&b, u0->password); }
        puts_(&b, "@");
    }
    for (size_t i = 0; i < n; i++) {
        const baton_uri *u = members[i]->uri;
        char port[16];
        if (i) puts_(&b, ",");
        if (strchr(u->host, ':')) { puts_(&b, "["); puts_(&b, u->host); puts_(&b, "]"); }
        else put_enc(&b, u->host);
        if (u->port) { snprintf(port, sizeof port, ":%d", u->port); puts_(&b, port); }
    }
    if (*u0->path) { puts_(&b, "/"); put_enc(&b, u0->path); }
    for (size_t k = 0; k < u0->nparams; k++) {
        puts_(&b, k ? "&" : "?");
        put_enc(&b, u0->params[k].key);
        puts_(&b, "=");
        put_enc(&b, u0->params[k].value);
    }
    if (tls) puts_(&b, u0->nparams ? "&tls=1" : "?tls=1");
    if (b.oom) { free(b.p); return baton_seterr(BATON_ENOMEM, 0, "out of memory"); }
    rc = baton_client_open(out, b.p, opts);
    free(b.p);
    return rc;
}
