/*
 * ZooKeeper requests with a deadline.
 *
 * The C client's synchronous calls (zoo_get_children, zoo_create, ...) wait
 * for their completion without a timeout: on a frozen link that is until the
 * client gives the connection up, 2/3 of the session timeout after it last
 * heard from the server (6.7 s of the default 10 s), whatever the caller's
 * deadline. A waiter with a 2.5 s wait returned 10.8 s late (zk_freeze).
 * So every request baton makes goes through here: the asynchronous call, and
 * a wait on its completion that ends at the caller's deadline
 * (ZOPERATIONTIMEOUT then).
 *
 * The call and its completion share a reference-counted zcall: a completion
 * that comes after its caller gave up finds the call abandoned and frees it.
 * An abandoned create that did make its node deletes that node at once, so a
 * contender nobody waits for never holds the line.
 *
 * The C client (3.8, threaded) never calls the completion of a request still
 * unanswered when zookeeper_close runs: it queues a ZCLOSING answer for it
 * and stops its completion thread first. So each session keeps its calls in
 * flight (s->calls), and zk_sess_put lets them go after the close.
 */
#include "zk_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { C_VOID, C_STAT, C_STRINGS, C_DATA, C_CREATE, C_MARKED };

struct zcall {
    zsess *s;
    struct zcall *next, *prev; /* in s->calls while in flight (s->e->mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* CLOCK_MONOTONIC */
    int refs;                /* the caller's, and the completion's once sent */
    int type;
    int done, rc;
    int abandoned;           /* the caller gave up waiting */
    zhandle_t *zh;           /* for the clean-up of an abandoned create */
    struct Stat st;
    struct String_vector sv; /* copied: the C client frees its own */
    char *data;              /* get: a copy of the node's data */
    int len;
    char *value;             /* create: the path made */
    /* marked write: the C client writes the answers here when it comes,
     * so they live as long as the call */
    zoo_op_result_t res[2];
    struct Stat mst;
    char mpath[8];
};

static zcall *call_new(zsess *s, int type)
{
    zcall *c = calloc(1, sizeof *c);
    pthread_condattr_t ca;
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
    c->refs = 1;
    c->type = type;
    c->rc = ZSYSTEMERROR;
    c->zh = s->zh;
    c->s = s;
    return c;
}

static void link_call(zcall *c)
{
    zeng *e = c->s->e;
    pthread_mutex_lock(&e->mu);
    c->prev = NULL;
    c->next = c->s->calls;
    if (c->next) c->next->prev = c;
    c->s->calls = c;
    pthread_mutex_unlock(&e->mu);
}

static void unlink_call(zcall *c)
{
    zeng *e = c->s->e;
    pthread_mutex_lock(&e->mu);
    if (c->prev) c->prev->next = c->next;
    else if (c->s->calls == c) c->s->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    c->next = c->prev = NULL;
    /* only a closing session waits for its calls: a broadcast per answer
     * woke the check thread (and anyone waiting for a session) on every
     * request, about 10 futex calls per lock cycle */
    if (c->s->closing) pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void zk_calls_release(zsess *s)
{
    /* after zookeeper_close: no completion runs any more */
    zcall *c = s->calls;
    s->calls = NULL;
    while (c) {
        zcall *n = c->next;
        c->next = c->prev = NULL;
        zk_call_put(c); /* the completion's reference */
        c = n;
    }
}

void zk_call_put(zcall *c)
{
    int last;
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    last = --c->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (!last) return;
    deallocate_String_vector(&c->sv);
    free(c->data);
    free(c->value);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The answer came (the C client's completion thread, or zookeeper_close's
 * with ZCLOSING): c->mu held. Returns with it released, C maybe freed. */
static void finish(zcall *c, int rc)
{
    c->done = 1;
    c->rc = rc;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    unlink_call(c);
    zk_call_put(c);
}

static void noop_void(int rc, const void *data) { (void)rc, (void)data; }

static void on_void(int rc, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    finish(c, rc);
}

static void on_stat(int rc, const struct Stat *st, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (st && rc == ZOK) c->st = *st;
    finish(c, rc);
}

static void on_strings(int rc, const struct String_vector *sv, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (rc == ZOK && sv && sv->count > 0 && !c->abandoned) {
        if (allocate_String_vector(&c->sv, sv->count) != ZOK || !c->sv.data) {
            c->sv.count = 0;
            c->sv.data = NULL;
            rc = ZSYSTEMERROR;
        } else {
            for (int i = 0; i < sv->count; i++)
                if (!(c->sv.data[i] = strdup(sv->data[i]))) {
                    c->sv.count = i;
                    deallocate_String_vector(&c->sv);
                    rc = ZSYSTEMERROR;
                    break;
                }
        }
    }
    finish(c, rc);
}

static void on_strings_stat(int rc, const struct String_vector *sv, const struct Stat *st, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (rc == ZOK && st) c->st = *st;
    pthread_mutex_unlock(&c->mu);
    on_strings(rc, sv, data);
}

static void on_data(int rc, const char *value, int len, const struct Stat *st, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (rc == ZOK && !c->abandoned) {
        if (st) c->st = *st;
        c->len = value && len > 0 ? len : 0;
        if (c->len && !(c->data = malloc((size_t)c->len))) rc = ZSYSTEMERROR;
        else if (c->len) memcpy(c->data, value, (size_t)c->len);
    }
    finish(c, rc);
}

static void on_create(int rc, const char *value, const struct Stat *st, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (rc == ZOK && c->abandoned) {
        /* nobody waits for this node: it must not stand in the line (sent
         * from the completion thread, which the C client allows) */
        if (value) zoo_adelete(c->zh, value, -1, noop_void, NULL);
    } else if (rc == ZOK) {
        if (st) c->st = *st;
        if (!(c->value = strdup(value ? value : ""))) rc = ZSYSTEMERROR;
    }
    finish(c, rc);
}

static void on_marked(int rc, const void *data)
{
    zcall *c = (zcall *)data;
    pthread_mutex_lock(&c->mu);
    if (rc == ZOK) c->st = c->mst;
    finish(c, rc);
}

/* After zoo_a*: the completion holds a reference once the request was
 * queued; else there is nothing to wait for. */
static zcall *sent(zcall *c, int zrc, int *out)
{
    *out = zrc;
    if (zrc != ZOK) {
        unlink_call(c);
        c->refs = 1;
        zk_call_put(c);
        return NULL;
    }
    return c;
}

/* Each starter takes the caller's reference and the completion's, and
 * lists the call in flight, before sending: the completion may run before
 * zoo_a* returns. */
#define START(s, type, out)                       \
    zcall *c = call_new(s, type);                 \
    int zrc_;                                     \
    if (!c) {                                     \
        *(out) = ZSYSTEMERROR;                    \
        return NULL;                              \
    }                                             \
    c->refs = 2;                                  \
    link_call(c)

zcall *zk_start_children(zsess *s, const char *path, watcher_fn w, void *ctx, int *out)
{
    START(s, C_STRINGS, out);
    zrc_ = zoo_awget_children(s->zh, path, w, ctx, on_strings, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_children2(zsess *s, const char *path, watcher_fn w, void *ctx, int *out)
{
    START(s, C_STRINGS, out);
    zrc_ = zoo_awget_children2(s->zh, path, w, ctx, on_strings_stat, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_exists(zsess *s, const char *path, watcher_fn w, void *ctx, int *out)
{
    START(s, C_STAT, out);
    zrc_ = zoo_awexists(s->zh, path, w, ctx, on_stat, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_get(zsess *s, const char *path, watcher_fn w, void *ctx, int *out)
{
    START(s, C_DATA, out);
    zrc_ = zoo_awget(s->zh, path, w, ctx, on_data, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_set(zsess *s, const char *path, const char *buf, int len, int version, int *out)
{
    START(s, C_STAT, out);
    zrc_ = zoo_aset(s->zh, path, buf, len, version, on_stat, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_delete(zsess *s, const char *path, int version, int *out)
{
    START(s, C_VOID, out);
    zrc_ = zoo_adelete(s->zh, path, version, on_void, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_create(zsess *s, const char *path, const char *data, int len, const struct ACL_vector *acl, int mode,
                       int *out)
{
    START(s, C_CREATE, out);
    zrc_ = zoo_acreate2(s->zh, path, data, len, acl, mode, on_create, c);
    return sent(c, zrc_, out);
}

zcall *zk_start_marked(zsess *s, const char *path, const char *buf, int len, int version, const char *mark,
                       const struct ACL_vector *acl, int *out)
{
    zoo_op_t ops[2];
    /* The C client's zoo_amulti (3.8) frees an uninitialised pointer when
     * its handle is unrecoverable (expired, auth failed: state < 0): the
     * second op's request is never made, yet its path is freed. The
     * watcher learns of an expiry on the completion thread, after the I/O
     * thread set the state, so it is asked here; what is left is the
     * instant between this read and zoo_amulti's own. */
    if (zoo_state(s->zh) < 0) {
        *out = ZINVALIDSTATE;
        return NULL;
    }
    START(s, C_MARKED, out);
    /* zoo_amulti serializes the ops at once; only the answers' buffers
     * (mst, mpath, res) are written later */
    if (version == ZK_CREATE_VERSION)
        zoo_create_op_init(&ops[0], path, buf, len, acl, ZOO_PERSISTENT, c->mpath, (int)sizeof c->mpath);
    else
        zoo_set_op_init(&ops[0], path, buf, len, version, &c->mst);
    zoo_create_op_init(&ops[1], mark, NULL, -1, acl, ZOO_PERSISTENT, c->mpath, (int)sizeof c->mpath);
    zrc_ = zoo_amulti(s->zh, 2, ops, c->res, on_marked, c);
    return sent(c, zrc_, out);
}

int zk_call_wait(zcall *c, int64_t deadline)
{
    int rc;
    pthread_mutex_lock(&c->mu);
    while (!c->done) {
        struct timespec ts;
        if (baton_now_ns() >= deadline) break;
        ts.tv_sec = (time_t)(deadline / 1000000000LL);
        ts.tv_nsec = (long)(deadline % 1000000000LL);
        pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    }
    if (c->done) {
        rc = c->rc;
    } else {
        /* the request may still be carried out: the completion cleans up */
        c->abandoned = 1;
        rc = ZOPERATIONTIMEOUT;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void zk_call_strings(zcall *c, struct String_vector *out)
{
    *out = c->sv;
    c->sv.count = 0;
    c->sv.data = NULL;
}

const struct Stat *zk_call_stat(zcall *c) { return &c->st; }

const char *zk_call_value(zcall *c) { return c->value ? c->value : ""; }

void zk_call_data(zcall *c, char *buf, int *len)
{
    int n = c->len < *len ? c->len : *len;
    if (n > 0) memcpy(buf, c->data, (size_t)n);
    *len = n;
}

int zk_call_data_take(zcall *c, char **data, int *len)
{
    char *d = malloc((size_t)c->len + 1);
    if (!d) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (c->len) memcpy(d, c->data, (size_t)c->len);
    d[c->len] = 0;
    *data = d;
    *len = c->len;
    return 0;
}

/* ---- the synchronous calls, with a deadline ------------------------------- */

static int64_t or_io(zsess *s, int64_t deadline) { return deadline ? deadline : zk_deadline_ms(s->e->io_timeout_ms); }

int zk_get_children(zsess *s, const char *path, watcher_fn w, void *ctx, struct String_vector *out, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_children(s, path, w, ctx, &zrc);
    out->count = 0;
    out->data = NULL;
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, or_io(s, deadline))) == ZOK) zk_call_strings(c, out);
    zk_call_put(c);
    return zrc;
}

int zk_exists(zsess *s, const char *path, watcher_fn w, void *ctx, struct Stat *st, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_exists(s, path, w, ctx, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, or_io(s, deadline))) == ZOK && st) *st = c->st;
    zk_call_put(c);
    return zrc;
}

int zk_get(zsess *s, const char *path, watcher_fn w, void *ctx, char *buf, int *len, struct Stat *st,
           int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_get(s, path, w, ctx, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, or_io(s, deadline))) == ZOK) {
        zk_call_data(c, buf, len);
        if (st) *st = c->st;
    }
    zk_call_put(c);
    return zrc;
}

int zk_set(zsess *s, const char *path, const char *buf, int len, int version, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_set(s, path, buf, len, version, &zrc);
    if (!c) return zrc;
    zrc = zk_call_wait(c, or_io(s, deadline));
    zk_call_put(c);
    return zrc;
}

int zk_delete(zsess *s, const char *path, int version, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_delete(s, path, version, &zrc);
    if (!c) return zrc;
    zrc = zk_call_wait(c, or_io(s, deadline));
    zk_call_put(c);
    return zrc;
}

int zk_create(zsess *s, const char *path, const char *data, int len, const struct ACL_vector *acl, int mode,
              char *out, int outlen, struct Stat *st, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_create(s, path, data, len, acl, mode, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, or_io(s, deadline))) == ZOK) {
        if (out && outlen > 0) {
            strncpy(out, zk_call_value(c), (size_t)outlen - 1);
            out[outlen - 1] = 0;
        }
        if (st) *st = c->st;
    }
    zk_call_put(c);
    return zrc;
}
