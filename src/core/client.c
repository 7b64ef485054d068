/* Clients: URI → backend, the keeper thread, and the list of open locks. */
#include "client.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>


int baton_client_open(baton_client **out, const char *uri, const baton_client_options *opts)
{
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    baton_client *c;
    int rc;

    if (!out) return baton_seterr(BATON_EINVAL, 0, "baton_client_open: NULL out");
    *out = NULL;
    if (opts) {
        if (opts->version < 1 || opts->version > BATON_CLIENT_OPTIONS_VERSION)
            return baton_seterr(BATON_EINVAL, 0, "client options: unknown version %u", opts->version);
        o = *opts;
        if (o.connect_timeout_ms <= 0) o.connect_timeout_ms = 2000;
        if (o.io_timeout_ms <= 0) o.io_timeout_ms = 5000;
    }
    if (!uri || !*uri) uri = "file://";
    c = calloc(1, sizeof *c);
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    c->opts = o;
    pthread_mutex_init(&c->mu, NULL);
    if ((rc = baton__uri_parse(uri, &c->uri))) goto fail;
    if ((rc = baton__registry_find(c->uri->scheme, &c->be))) goto fail;
    if ((rc = c->be->open(&c->eng, c->uri, &c->opts))) goto fail;
    if ((rc = baton__keeper_start(&c->keeper))) {
        c->be->close(c->eng);
        goto fail;
    }
    pthread_mutex_init(&c->host.mu, NULL);
    c->host.c = c;
    snprintf(c->ident, sizeof c->ident, "%s", c->uri->redacted ? c->uri->redacted : uri);
    if (c->be->identity) {
        char id[sizeof c->ident];
        if (c->be->identity(c->eng, id, sizeof id) == 0 && id[0])
            snprintf(c->ident, sizeof c->ident, "%s", id);
    }
    if (c->be->attach) c->be->attach(c->eng, &c->host);
    *out = c;
    return 0;
fail:
    baton__uri_free(c->uri);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return rc;
}

void baton__client_link(baton_client *c, baton__member *l)
{
    pthread_mutex_lock(&c->mu);
    l->cnext = c->members;
    l->cprev = NULL;
    if (c->members) c->members->cprev = l;
    c->members = l;
    pthread_mutex_unlock(&c->mu);
}

void baton__client_unlink(baton_client *c, baton__member *l)
{
    pthread_mutex_lock(&c->mu);
    if (l->cprev) l->cprev->cnext = l->cnext;
    else c->members = l->cnext;
    if (l->cnext) l->cnext->cprev = l->cprev;
    l->cnext = l->cprev = NULL;
    pthread_mutex_unlock(&c->mu);
}

void baton_client_close(baton_client *c)
{
    if (!c) return;
    /* From here on a backend thread's call into the host does nothing. */
    pthread_mutex_lock(&c->host.mu);
    c->host.c = NULL;
    pthread_mutex_unlock(&c->host.mu);
    for (;;) {
        baton__member *l;
        pthread_mutex_lock(&c->mu);
        l = c->members;
        if (l) {
            c->members = l->cnext;
            if (c->members) c->members->cprev = NULL;
            l->cnext = l->cprev = NULL;
        }
        pthread_mutex_unlock(&c->mu);
        if (!l) break;
        l->destroy(l);
    }
    baton__keeper_stop(c->keeper);
    c->be->close(c->eng);
    baton__uri_free(c->uri);
    pthread_mutex_destroy(&c->host.mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *baton_client_backend(const baton_client *c)
{
    return c ? c->be->name : NULL;
}

const char *baton_client_uri(const baton_client *c)
{
    return c ? c->uri->redacted : NULL;
}

int baton_client_describe(baton_client *c, char *buf, size_t n)
{
    if (!c || !buf || !n) return baton_seterr(BATON_EINVAL, 0, "baton_client_describe: NULL argument");
    buf[0] = 0;
    if (!c->be->describe) return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has nothing to describe", c->be->name);
    return c->be->describe(c->eng, buf, n);
}

int baton_client_secret(baton_client *c, const char **var, char **secret)
{
    const baton_uri *u;
    if (!c || !var || !secret) return baton_seterr(BATON_EINVAL, 0, "baton_client_secret: NULL argument");
    *var = c->be->secret_env;
    *secret = NULL;
    u = c->uri;
    if (!c->be->secret_env || !u->password || !*u->password) return 0;
    if (c->be->secret_userinfo) {
        size_t n = strlen(u->user ? u->user : "") + 1 + strlen(u->password) + 1;
        if ((*secret = malloc(n))) snprintf(*secret, n, "%s:%s", u->user ? u->user : "", u->password);
    } else {
        *secret = strdup(u->password);
    }
    return *secret ? 0 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

/* Calls FN on every member of the host's client (none once it is closing)
 * and kicks the keeper when one of them made something due. */
static void host_each(baton_host *h, int (*fn)(baton__member *m, void *arg), void *arg)
{
    baton_client *c;
    int any = 0;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    if (!(c = h->c)) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    pthread_mutex_lock(&c->mu);
    for (baton__member *m = c->members; m; m = m->cnext)
        if (fn(m, arg)) any = 1;
    pthread_mutex_unlock(&c->mu);
    if (any) baton__keeper_kick(c->keeper);
    pthread_mutex_unlock(&h->mu);
}

static int member_recheck(baton__member *m, void *arg)
{
    return m->recheck && m->recheck(m, *(int64_t *)arg);
}

/* Every held, renewed lock is due for its owner-checked renewal now: the
 * engine said it may have lost them (see backend.h). */
void baton_host_recheck(baton_host *h)
{
    int64_t now = baton_now_ns();
    host_each(h, member_recheck, &now);
}

typedef struct {
    void *st;
    uint64_t fence;
} lost_arg;

static int member_lost(baton__member *m, void *arg)
{
    lost_arg *a = arg;
    return m->lost && m->lost(m, a->st, a->fence);
}

/* The engine says grants are gone (see backend.h): the keeper reports them. */
void baton_host_lost(baton_host *h, void *st, uint64_t fence)
{
    lost_arg a = { st, fence };
    if (st) host_each(h, member_lost, &a);
}

void baton_host_lost_all(baton_host *h)
{
    lost_arg a = { NULL, 0 };
    host_each(h, member_lost, &a);
}
