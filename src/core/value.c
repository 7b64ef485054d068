/* Values with watches, and what the core builds on them where the engine
 * has values: shared counters (decimal text, kazoo's Counter layout) and
 * count-down latches (the count in the value NAME). */
#include "sync.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct baton_value {
    sync_obj o;                 /* first: sync.c frees the handle through it */
    /* the callback form */
    pthread_mutex_t smu;
    pthread_t thread;
    int subscribed;
    int stop;
    baton_waiter sw;            /* the subscription thread's parking spot */
    baton_value_cb cb;
    void *payload;
};

struct baton_counter {
    baton_value *v;
};

void baton_value_data_clear(baton_value_data *d)
{
    if (!d) return;
    free(d->data);
    memset(d, 0, sizeof *d);
}

static void value_on_free(sync_obj *o)
{
    baton_value *v = (baton_value *)o;
    pthread_mutex_destroy(&v->smu);
    baton__waiter_destroy(&v->sw);
}

/* The client closes: a subscription parked in the engine must let go too. */
static void value_on_cancel(sync_obj *o)
{
    baton__waiter_cancel(&((baton_value *)o)->sw);
}

int baton_value_open(baton_value **out, baton_client *c, const char *name)
{
    baton_value *v;
    int rc;
    NEED(out, "baton_value_open");
    *out = NULL;
    if (!(v = calloc(1, sizeof *v))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = baton__waiter_init(&v->sw))) {
        free(v);
        return baton_seterr(rc, 0, "out of memory");
    }
    pthread_mutex_init(&v->smu, NULL);
    if ((rc = baton__sync_open(&v->o, c, name, c ? c->be->value : NULL, c && c->be->value ? c->be->value->create : NULL,
                               c && c->be->value ? c->be->value->destroy : NULL, "values"))) {
        value_on_free(&v->o);
        free(v);
        return rc;
    }
    v->o.on_free = value_on_free;
    v->o.on_cancel = value_on_cancel;
    *out = v;
    return 0;
}

/* get, with "absent" as version 0 rather than an error (for watchers). */
static int get_or_absent(sync_obj *o, baton_value_data *d)
{
    int rc;
    memset(d, 0, sizeof *d);
    rc = o->c->be->value->get(o->c->eng, o->st, d);
    if (rc == BATON_ENOENT) {
        baton_value_data_clear(d);
        return 0;
    }
    if (rc) baton_value_data_clear(d);
    return rc;
}

int baton_value_get(baton_value *v, baton_value_data *out)
{
    int rc;
    NEED(v && out, "baton_value_get");
    memset(out, 0, sizeof *out);
    ENTER(&v->o);
    rc = get_or_absent(&v->o, out);
    if (!rc && out->version == 0) rc = baton_seterr(BATON_ENOENT, 0, "value '%s' does not exist", v->o.name);
    LEAVE(&v->o, rc);
}

int baton_value_set(baton_value *v, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    uint64_t ver = 0;
    int rc;
    NEED(v, "baton_value_set");
    if (!data && len) return baton_seterr(BATON_EINVAL, 0, "baton_value_set: NULL data");
    if (len > BATON_VALUE_MAX)
        return baton_seterr(BATON_EINVAL, 0, "value '%s' is %zu bytes; the limit is %d", v->o.name, len,
                            BATON_VALUE_MAX);
    ENTER(&v->o);
    rc = v->o.c->be->value->set(v->o.c->eng, v->o.st, data ? data : "", len, expect, &ver);
    if (!rc && version) *version = ver;
    LEAVE(&v->o, rc);
}

int baton_value_delete(baton_value *v, uint64_t expect)
{
    NEED(v, "baton_value_delete");
    ENTER(&v->o);
    LEAVE(&v->o, v->o.c->be->value->del(v->o.c->eng, v->o.st, expect));
}

/* Reads until the version differs from KNOWN, parking on W in between. */
static int watch_loop(sync_obj *o, baton_waiter *w, uint64_t known, baton_value_data *out, int64_t deadline)
{
    for (;;) {
        int rc = get_or_absent(o, out);
        if (rc) return rc;
        if (out->version != known) return 0;
        baton_value_data_clear(out);
        if (deadline == 0 || (deadline != INT64_MAX && baton_now_ns() >= deadline))
            return baton_seterr(BATON_ETIMEDOUT, 0, "value '%s' did not change", o->name);
        rc = o->c->be->value->watch(o->c->eng, o->st, known, deadline, w);
        if (rc == BATON_ETIMEDOUT) {
            /* one last read: a change at the deadline is still news */
            if ((rc = get_or_absent(o, out))) return rc;
            if (out->version != known) return 0;
            baton_value_data_clear(out);
            return baton_seterr(BATON_ETIMEDOUT, 0, "value '%s' did not change", o->name);
        }
        if (rc) return rc;
    }
}

int baton_value_watch(baton_value *v, uint64_t known, baton_value_data *out, int64_t wait_ms)
{
    int64_t d;
    int rc;
    NEED(v && out, "baton_value_watch");
    memset(out, 0, sizeof *out);
    ENTER(&v->o);
    if (!(rc = baton__sync_begin(&v->o, wait_ms, &d))) rc = baton__sync_end(&v->o, watch_loop(&v->o, &v->o.w, known, out, d));
    LEAVE(&v->o, rc);
}

static int sub_stopped(baton_value *v)
{
    int s;
    pthread_mutex_lock(&v->smu);
    s = v->stop;
    pthread_mutex_unlock(&v->smu);
    return s;
}

/* The subscription: the value now, then after every change. A failure
 * (engine unreachable) is retried a second later; the client's close ends
 * the thread (its calls are refused from then on). */
static void *sub_main(void *arg)
{
    baton_value *v = arg;
    uint64_t known = UINT64_MAX;   /* no version is this: the first read is news */
    while (!sub_stopped(v)) {
        baton_value_data d;
        int rc;
        if (baton__member_enter(&v->o.cm)) break;
        rc = watch_loop(&v->o, &v->sw, known, &d, INT64_MAX);
        baton__member_leave(&v->o.cm);
        if (sub_stopped(v)) {
            baton_value_data_clear(&d);
            break;
        }
        if (rc == 0) {
            known = d.version;
            v->cb(v, &d, v->payload);
            baton_value_data_clear(&d);
        } else {
            unsigned g = baton_waiter_gen(&v->sw);
            baton__waiter_reset(&v->sw);
            if (!sub_stopped(v)) baton_waiter_park(&v->sw, g, baton_now_ns() + 1000000000LL);
        }
        baton__waiter_reset(&v->sw);
    }
    return NULL;
}

int baton_value_subscribe(baton_value *v, baton_value_cb cb, void *payload)
{
    int rc;
    NEED(v && cb, "baton_value_subscribe");
    pthread_mutex_lock(&v->smu);
    if (v->subscribed) {
        pthread_mutex_unlock(&v->smu);
        return baton_seterr(BATON_EINVAL, 0, "value '%s': this handle has a subscription already", v->o.name);
    }
    v->cb = cb;
    v->payload = payload;
    v->stop = 0;
    baton__waiter_reset(&v->sw);
    if ((rc = pthread_create(&v->thread, NULL, sub_main, v))) {
        pthread_mutex_unlock(&v->smu);
        return baton_seterr(BATON_ENOMEM, rc, "value '%s': cannot start the subscription thread", v->o.name);
    }
    v->subscribed = 1;
    pthread_mutex_unlock(&v->smu);
    return 0;
}

int baton_value_unsubscribe(baton_value *v)
{
    pthread_t t;
    NEED(v, "baton_value_unsubscribe");
    pthread_mutex_lock(&v->smu);
    if (!v->subscribed) {
        pthread_mutex_unlock(&v->smu);
        return baton_seterr(BATON_ENOTHELD, 0, "value '%s' has no subscription", v->o.name);
    }
    v->stop = 1;
    v->subscribed = 0;
    t = v->thread;
    pthread_mutex_unlock(&v->smu);
    baton__waiter_cancel(&v->sw);
    pthread_join(t, NULL);
    return 0;
}

int baton_value_cancel(baton_value *v)
{
    NEED(v, "baton_value_cancel");
    baton__waiter_cancel(&v->o.w);
    return 0;
}

const char *baton_value_name(const baton_value *v) { return v ? v->o.name : NULL; }

sync_obj *baton__value_obj(baton_value *v) { return &v->o; }

void baton_value_free(baton_value *v)
{
    if (!v) return;
    if (v->subscribed) baton_value_unsubscribe(v);
    baton__member_free(&v->o.cm);
}

/* ---- counts kept as decimal text (counters, latches on values) ---- */

static int parse_count(const sync_obj *o, const baton_value_data *d, int64_t *out)
{
    char *end;
    long long n;
    if (d->version == 0 || d->len == 0) {
        /* absent, or empty: kazoo's Counter makes its node empty at first use */
        *out = 0;
        return 0;
    }
    errno = 0;
    n = strtoll(d->data, &end, 10);
    while (*end == '\n' || *end == ' ') end++;
    if (errno || end == d->data || *end || d->len != strlen(d->data))
        return baton_seterr(BATON_EPROTO, 0, "value '%s' holds no decimal count", o->name);
    *out = n;
    return 0;
}

static int read_count(sync_obj *o, int64_t *n, uint64_t *version)
{
    baton_value_data d;
    int rc = get_or_absent(o, &d);
    if (!rc) rc = parse_count(o, &d, n);
    *version = d.version;
    baton_value_data_clear(&d);
    return rc;
}

static int write_count(sync_obj *o, int64_t n, uint64_t expect, uint64_t *version)
{
    char buf[32];
    uint64_t ver = 0;
    int len = snprintf(buf, sizeof buf, "%" PRId64, n), rc;
    rc = o->c->be->value->set(o->c->eng, o->st, buf, (size_t)len, expect, &ver);
    if (!rc && version) *version = ver;
    return rc;
}

/* Applies FN to the count by compare-and-set until it sticks. FN returns
 * 0 with the new count, 1 to change nothing, or an error. */
typedef int (*count_fn)(sync_obj *o, int64_t cur, int64_t *next, void *arg);

#define CAS_TRIES 10000

static int count_update(sync_obj *o, count_fn fn, void *arg, int64_t *after)
{
    for (int i = 0; i < CAS_TRIES; i++) {
        uint64_t ver;
        int64_t cur, next = 0;
        int rc = read_count(o, &cur, &ver);
        if (rc) return rc;
        if ((rc = fn(o, cur, &next, arg)) == 1) {
            if (after) *after = cur;
            return 0;
        }
        if (rc) return rc;
        rc = next == INT64_MIN ? (ver ? o->c->be->value->del(o->c->eng, o->st, ver) : 0)
                               : write_count(o, next, ver, NULL);
        if (rc == BATON_ECONFLICT || (rc == BATON_ENOENT && next == INT64_MIN)) continue;
        if (!rc && after) *after = next == INT64_MIN ? 0 : next;
        return rc;
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "'%s': %d compare-and-set rounds lost to other writers", o->name,
                        CAS_TRIES);
}

static int add_fn(sync_obj *o, int64_t cur, int64_t *next, void *arg)
{
    int64_t delta = *(int64_t *)arg;
    if ((delta > 0 && cur > INT64_MAX - delta) || (delta < 0 && cur < INT64_MIN + 1 - delta))
        return baton_seterr(BATON_EINVAL, 0, "counter '%s': adding %" PRId64 " to %" PRId64 " overflows", o->name,
                            delta, cur);
    *next = cur + delta;
    return 0;
}

int baton_counter_open(baton_counter **out, baton_client *c, const char *name)
{
    baton_counter *k;
    int rc;
    NEED(out, "baton_counter_open");
    *out = NULL;
    if (!(k = calloc(1, sizeof *k))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = baton_value_open(&k->v, c, name))) {
        free(k);
        if (rc == BATON_ENOTSUP && c) rc = baton_seterr(rc, 0, "the %s backend has no counters (no values)",
                                                        c->be->info->name);
        return rc;
    }
    *out = k;
    return 0;
}

int baton_counter_get(baton_counter *k, int64_t *count, uint64_t *version)
{
    int64_t n = 0;
    uint64_t ver = 0;
    int rc;
    NEED(k, "baton_counter_get");
    ENTER(&k->v->o);
    rc = read_count(&k->v->o, &n, &ver);
    if (!rc) {
        if (count) *count = n;
        if (version) *version = ver;
    }
    LEAVE(&k->v->o, rc);
}

int baton_counter_add(baton_counter *k, int64_t delta, int64_t *after)
{
    NEED(k, "baton_counter_add");
    ENTER(&k->v->o);
    LEAVE(&k->v->o, count_update(&k->v->o, add_fn, &delta, after));
}

int baton_counter_set(baton_counter *k, int64_t count, uint64_t expect, uint64_t *version)
{
    NEED(k, "baton_counter_set");
    ENTER(&k->v->o);
    LEAVE(&k->v->o, write_count(&k->v->o, count, expect, version));
}

int baton_counter_watch(baton_counter *k, uint64_t known, int64_t *count, uint64_t *version, int64_t wait_ms)
{
    baton_value_data d;
    int64_t n = 0;
    int rc;
    NEED(k, "baton_counter_watch");
    if ((rc = baton_value_watch(k->v, known, &d, wait_ms))) return rc;
    rc = parse_count(&k->v->o, &d, &n);
    if (!rc) {
        if (count) *count = n;
        if (version) *version = d.version;
    }
    baton_value_data_clear(&d);
    return rc;
}

int baton_counter_cancel(baton_counter *k)
{
    NEED(k, "baton_counter_cancel");
    return baton_value_cancel(k->v);
}

void baton_counter_free(baton_counter *k)
{
    if (!k) return;
    baton_value_free(k->v);
    free(k);
}

/* ---- latches on values: the count in the value; absent or 0 = open ---- */

struct latch_set { int64_t want; int set; };

static int latch_set_fn(sync_obj *o, int64_t cur, int64_t *next, void *arg)
{
    struct latch_set *ls = arg;
    (void)o;
    ls->set = cur <= 0;
    if (!ls->set) return 1;
    *next = ls->want;
    return 0;
}

int baton__vlatch_try_set(sync_obj *o, uint64_t count, int *was_set)
{
    struct latch_set ls = { (int64_t)count, 0 };
    int rc = count_update(o, latch_set_fn, &ls, NULL);
    if (!rc && was_set) *was_set = ls.set;
    return rc;
}

static int latch_down_fn(sync_obj *o, int64_t cur, int64_t *next, void *arg)
{
    (void)o;
    (void)arg;
    if (cur <= 0) return 1;
    /* at zero the value goes: an open latch is an absent one, and can be set again */
    *next = cur == 1 ? INT64_MIN : cur - 1;
    return 0;
}

int baton__vlatch_count_down(sync_obj *o) { return count_update(o, latch_down_fn, NULL, NULL); }

int baton__vlatch_count(sync_obj *o, uint64_t *out)
{
    uint64_t ver;
    int64_t n = 0;
    int rc = read_count(o, &n, &ver);
    if (!rc && out) *out = n < 0 ? 0 : (uint64_t)n;
    return rc;
}

int baton__vlatch_await(sync_obj *o, int64_t deadline)
{
    for (;;) {
        uint64_t ver;
        int64_t n = 0;
        int rc = read_count(o, &n, &ver);
        if (rc) return rc;
        if (n <= 0) return 0;
        if (deadline == 0 || (deadline != INT64_MAX && baton_now_ns() >= deadline))
            return baton_seterr(BATON_ETIMEDOUT, 0, "latch '%s' wait timed out", o->name);
        rc = o->c->be->value->watch(o->c->eng, o->st, ver, deadline, &o->w);
        if (rc && rc != BATON_ETIMEDOUT) return rc;
    }
}
