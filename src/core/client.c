/* Clients: URI → backend, the keeper thread, and the list of open locks. */
#include "client.h"
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>


static void gate_unref(baton__gate *g)
{
    int last;
    pthread_mutex_lock(&g->mu);
    last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (!last) return;
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int baton_client_open(baton_client **out, const char *uri, const baton_client_options *opts)
{
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    /* the size of each version of the struct: version 1 ended before lease_ms */
    static const size_t sizes[] = { offsetof(baton_client_options, lease_ms), sizeof(baton_client_options) };
    baton_opts *uo = NULL;
    baton_client *c;
    int rc;

    if (!out) return baton_seterr(BATON_EINVAL, 0, "baton_client_open: NULL out");
    *out = NULL;
    if (opts) {
        if ((rc = baton__opts_copy(&o, opts, sizes, BATON_CLIENT_OPTIONS_VERSION, "client options"))) return rc;
        o.version = BATON_CLIENT_OPTIONS_VERSION; /* later fields keep their defaults */
        if (o.connect_timeout_ms <= 0) o.connect_timeout_ms = 2000;
        if (o.io_timeout_ms <= 0) o.io_timeout_ms = 5000;
    }
    if (!uri || !*uri) uri = "file://";
    c = calloc(1, sizeof *c);
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (!(c->gate = calloc(1, sizeof *c->gate))) {
        free(c);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    c->opts = o;
    pthread_mutex_init(&c->gate->mu, NULL);
    pthread_cond_init(&c->gate->cv, NULL);
    c->gate->refs = 1;
    if ((rc = baton__uri_parse(uri, &c->uri))) goto fail;
    if ((rc = baton__registry_find(c->uri->scheme, &c->be))) goto fail;
    if ((rc = baton__opts_parse(c->be->info, c->uri, &uo))) goto fail;
    rc = c->be->open(&c->eng, c->uri, uo, &c->opts);
    baton__opts_free(uo);
    if (rc) goto fail;
    if ((rc = baton__keeper_start(&c->keeper))) {
        c->be->close(c->eng);
        goto fail;
    }
    pthread_mutex_init(&c->host.mu, NULL);
    c->host.c = c;
    snprintf(c->ident, sizeof c->ident, "%s", c->uri->redacted ? c->uri->redacted : uri);
    if (c->be->services->identity) {
        char id[sizeof c->ident];
        if (c->be->services->identity(c->eng, id, sizeof id) == 0 && id[0])
            snprintf(c->ident, sizeof c->ident, "%s", id);
    }
    if (c->be->services->attach) c->be->services->attach(c->eng, &c->host);
    *out = c;
    return 0;
fail:
    baton__uri_free(c->uri);
    gate_unref(c->gate);
    free(c);
    return rc;
}

int baton__client_link(baton_client *c, baton__member *m)
{
    baton__gate *g = c->gate;
    pthread_mutex_lock(&g->mu);
    if (g->closing) {
        pthread_mutex_unlock(&g->mu);
        return baton_seterr(BATON_ECANCELED, 0, "the client is closing");
    }
    m->gate = g;
    g->refs++;
    m->mstate = MEMBER_LIVE;
    m->free_pending = 0;
    m->cnext = g->members;
    m->cprev = NULL;
    if (g->members) g->members->cprev = m;
    g->members = m;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* g->mu held. */
static void member_unlink(baton__gate *g, baton__member *m)
{
    if (m->cprev) m->cprev->cnext = m->cnext;
    else g->members = m->cnext;
    if (m->cnext) m->cnext->cprev = m->cprev;
    m->cnext = m->cprev = NULL;
}

int baton__member_enter(baton__member *m)
{
    baton__gate *g = m->gate;
    pthread_mutex_lock(&g->mu);
    if (g->closing || m->mstate != MEMBER_LIVE) {
        pthread_mutex_unlock(&g->mu);
        return baton_seterr(BATON_ECANCELED, 0, "the client of this handle is closed");
    }
    g->active++;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

void baton__member_leave(baton__member *m)
{
    baton__gate *g = m->gate;
    pthread_mutex_lock(&g->mu);
    if (--g->active == 0) pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void baton__member_free(baton__member *m)
{
    baton__gate *g = m->gate;
    pthread_mutex_lock(&g->mu);
    if (m->mstate == MEMBER_LIVE && !g->closing) {
        member_unlink(g, m);
        m->mstate = MEMBER_DEAD;
        g->active++;
        pthread_mutex_unlock(&g->mu);
        m->ops->destroy(m);
        pthread_mutex_lock(&g->mu);
        if (--g->active == 0) pthread_cond_broadcast(&g->cv);
    } else if (m->mstate != MEMBER_DEAD) {
        /* Its client is closing: the close destroys it and frees it then
         * (it may be this very thread, inside an on_lost). */
        m->free_pending = 1;
        pthread_mutex_unlock(&g->mu);
        return;
    }
    pthread_mutex_unlock(&g->mu);
    m->ops->free_handle(m);
    gate_unref(g);
}

void baton_client_close(baton_client *c)
{
    baton__gate *g;
    baton__member *list, *m;
    if (!c) return;
    g = c->gate;
    /* From here on a backend thread's call into the host does nothing. */
    pthread_mutex_lock(&c->host.mu);
    c->host.c = NULL;
    pthread_mutex_unlock(&c->host.mu);

    /* No async operation starts; the queued ones are done (canceled). */
    baton__async_close_begin(c);
    /* No new call through a handle; the ones blocked in the engine are
     * woken (BATON_ECANCELED) and every call in flight leaves. */
    pthread_mutex_lock(&g->mu);
    g->closing = 1;
    for (m = g->members; m; m = m->cnext) {
        m->mstate = MEMBER_CLOSING;
        if (m->ops->cancel) m->ops->cancel(m);
    }
    while (g->active > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    /* Every async callback not yet delivered runs now, once, with
     * BATON_ECANCELED, on this thread; none runs after close returns. */
    baton__async_close_end(c);

    /* Renewals and reports in flight end (bounded by their deadlines); an
     * on_lost that runs now gets BATON_ECANCELED from any call and may free
     * its handle (freed below). */
    baton__keeper_stop(c->keeper);
    c->keeper = NULL;

    pthread_mutex_lock(&g->mu);
    list = g->members;
    g->members = NULL;
    pthread_mutex_unlock(&g->mu);
    while ((m = list)) {
        int pending;
        list = m->cnext;
        m->cnext = m->cprev = NULL;
        m->ops->destroy(m);
        pthread_mutex_lock(&g->mu);
        m->mstate = MEMBER_DEAD;
        pending = m->free_pending;
        pthread_mutex_unlock(&g->mu);
        if (pending) {
            m->ops->free_handle(m);
            gate_unref(g);
        }
    }
    c->be->close(c->eng);
    baton__uri_free(c->uri);
    pthread_mutex_destroy(&c->host.mu);
    free(c);
    gate_unref(g);
}

const char *baton_client_backend(const baton_client *c)
{
    return c ? c->be->info->name : NULL;
}

const char *baton_client_uri(const baton_client *c)
{
    return c ? c->uri->redacted : NULL;
}

int baton_client_describe(baton_client *c, char *buf, size_t n)
{
    if (!c || !buf || !n) return baton_seterr(BATON_EINVAL, 0, "baton_client_describe: NULL argument");
    buf[0] = 0;
    if (!c->be->services->describe) return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has nothing to describe", c->be->info->name);
    return c->be->services->describe(c->eng, buf, n);
}

int baton_client_deadline(baton_client *c, int64_t *mono_ns)
{
    if (!c || !mono_ns) return baton_seterr(BATON_EINVAL, 0, "baton_client_deadline: NULL argument");
    *mono_ns = c->be->services->session_deadline ? c->be->services->session_deadline(c->eng) : INT64_MAX;
    return 0;
}

int baton_client_secret(baton_client *c, const char **var, char **secret)
{
    const baton_uri *u;
    if (!c || !var || !secret) return baton_seterr(BATON_EINVAL, 0, "baton_client_secret: NULL argument");
    *var = c->be->services->secret_env;
    *secret = NULL;
    u = c->uri;
    if (!c->be->services->secret_env || !u->password || !*u->password) return 0;
    if (c->be->services->secret_userinfo) {
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
    pthread_mutex_lock(&c->gate->mu);
    for (baton__member *m = c->gate->members; m; m = m->cnext)
        if (fn(m, arg)) any = 1;
    pthread_mutex_unlock(&c->gate->mu);
    if (any) baton__keeper_kick(c->keeper);
    pthread_mutex_unlock(&h->mu);
}

static int member_recheck(baton__member *m, void *arg)
{
    return m->ops->recheck && m->ops->recheck(m, *(int64_t *)arg);
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
    return m->ops->lost && m->ops->lost(m, a->st, a->fence);
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
