/* Front-ends of the ownerless synchronizers: semaphore, permit-expirable
 * semaphore and count-down latch (on the engine's latch table, or on its
 * values: value.c). Each is a backend state plus a waiter so a
 * blocked call can be cancelled from another thread. */
#include "sync.h"
#include <stdlib.h>
#include <string.h>

struct baton_semaphore { sync_obj o; };
struct baton_permits { sync_obj o; };
struct baton_latch { sync_obj o; int on_values; };

/* Client membership: close frees the engine state and leaves the handle
 * (every call then answers BATON_ECANCELED) for its owner to free. */
static void sync_destroy(baton__member *m)
{
    sync_obj *o = BATON__CONTAINER(m, sync_obj, cm);
    if (o->st) o->st_free(o->c->eng, o->st);
    o->st = NULL;
}

/* The sync_obj is the first member of every handle struct below. */
static void sync_free_handle(baton__member *m)
{
    sync_obj *o = BATON__CONTAINER(m, sync_obj, cm);
    if (o->on_free) o->on_free(o);
    baton__waiter_destroy(&o->w);
    free(o->name);
    free(o);
}

static void sync_cancel(baton__member *m);
static const baton__member_ops sync_member_ops = { sync_destroy, sync_free_handle, sync_cancel, NULL, NULL };

static void sync_cancel(baton__member *m)
{
    sync_obj *o = BATON__CONTAINER(m, sync_obj, cm);
    baton__waiter_cancel(&o->w);
    if (o->on_cancel) o->on_cancel(o);
}

int baton__sync_open(sync_obj *o, baton_client *c, const char *name, const void *tbl, sync_new_fn fn,
                     void (*st_free)(void *, void *), const char *what)
{
    int rc;
    if (!c) return baton_seterr(BATON_EINVAL, 0, "%s: NULL client", what);
    if ((rc = baton__name_check(name))) return rc;
    if (!tbl || !fn)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no %s", c->be->info->name, what);
    if (!(o->name = strdup(name))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = baton__waiter_init(&o->w))) {
        free(o->name);
        return baton_seterr(rc, 0, "out of memory");
    }
    if ((rc = fn(c->eng, name, &o->st))) {
        baton__waiter_destroy(&o->w);
        free(o->name);
        return rc;
    }
    o->c = c;
    o->st_free = st_free;
    o->cm.ops = &sync_member_ops;
    if ((rc = baton__client_link(c, &o->cm))) {
        st_free(c->eng, o->st);
        baton__waiter_destroy(&o->w);
        free(o->name);
        return rc;
    }
    return 0;
}


/* A blocking call's start: a cancel kept since the last call (it came
 * before or between waits) ends this one at once; one that comes while it
 * waits is consumed by it (sync_end). */
int baton__sync_begin(sync_obj *o, int64_t wait_ms, int64_t *d)
{
    if (baton_waiter_canceled(&o->w)) {
        baton__waiter_reset(&o->w);
        return baton_seterr(BATON_ECANCELED, 0, "canceled (before the call started)");
    }
    baton__wait_deadline_ns(wait_ms, d);
    return 0;
}

int baton__sync_end(sync_obj *o, int rc)
{
    baton__waiter_reset(&o->w);
    return rc;
}

/* Runs a ctl op whose answer is a count; negative counts read as 0. */
enum { CTL_SEM, CTL_PERMITS, CTL_LATCH };

static int ctl_u64(sync_obj *o, int kind, int op, uint64_t *out)
{
    int (*ctl)(void *, void *, int, int64_t, int64_t *);
    int64_t v = 0;
    int rc;
    ENTER(o);
    /* The backend is read only once inside: the client may be closed. */
    ctl = kind == CTL_SEM ? o->c->be->sem->ctl : kind == CTL_PERMITS ? o->c->be->permits->ctl : o->c->be->latch->ctl;
    rc = ctl(o->c->eng, o->st, op, 0, &v);
    if (!rc && out) *out = v < 0 ? 0 : (uint64_t)v;
    LEAVE(o, rc);
}


/* ---- semaphore ---- */

int baton_semaphore_open(baton_semaphore **out, baton_client *c, const char *name)
{
    baton_semaphore *s;
    int rc;
    NEED(out, "baton_semaphore_open");
    *out = NULL;
    if (!(s = calloc(1, sizeof *s))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = baton__sync_open(&s->o, c, name, c ? c->be->sem : NULL, c && c->be->sem ? c->be->sem->create : NULL, c && c->be->sem ? c->be->sem->destroy : NULL,
                        "semaphore"))) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int baton_semaphore_acquire(baton_semaphore *s, uint32_t permits, int64_t wait_ms)
{
    int64_t d;
    int rc;
    NEED(s, "baton_semaphore_acquire");
    if (permits == 0) return baton_seterr(BATON_EINVAL, 0, "acquire of 0 permits");
    ENTER(&s->o);
    if (!(rc = baton__sync_begin(&s->o, wait_ms, &d))) {
        rc = baton__sync_end(&s->o, s->o.c->be->sem->acquire(s->o.c->eng, s->o.st, permits, d, &s->o.w));
        if (rc == BATON_ELOCKED && wait_ms != 0) rc = baton_seterr(BATON_ETIMEDOUT, 0, "semaphore wait timed out");
    }
    LEAVE(&s->o, rc);
}

int baton_semaphore_release(baton_semaphore *s, uint32_t permits)
{
    NEED(s, "baton_semaphore_release");
    if (permits == 0) return baton_seterr(BATON_EINVAL, 0, "release of 0 permits");
    ENTER(&s->o);
    LEAVE(&s->o, s->o.c->be->sem->release(s->o.c->eng, s->o.st, permits));
}

int baton_semaphore_try_set(baton_semaphore *s, uint32_t permits, int *was_set)
{
    int64_t v = 0;
    int rc;
    NEED(s, "baton_semaphore_try_set");
    ENTER(&s->o);
    rc = s->o.c->be->sem->ctl(s->o.c->eng, s->o.st, BATON_CTL_TRY_SET, permits, &v);
    if (!rc && was_set) *was_set = v != 0;
    LEAVE(&s->o, rc);
}

int baton_semaphore_add(baton_semaphore *s, int64_t delta)
{
    NEED(s, "baton_semaphore_add");
    ENTER(&s->o);
    LEAVE(&s->o, s->o.c->be->sem->ctl(s->o.c->eng, s->o.st, BATON_CTL_ADD, delta, NULL));
}

int baton_semaphore_drain(baton_semaphore *s, uint64_t *drained)
{
    NEED(s, "baton_semaphore_drain");
    return ctl_u64(&s->o, CTL_SEM, BATON_CTL_DRAIN, drained);
}

int baton_semaphore_available(baton_semaphore *s, uint64_t *out)
{
    NEED(s, "baton_semaphore_available");
    return ctl_u64(&s->o, CTL_SEM, BATON_CTL_AVAILABLE, out);
}

int baton_semaphore_cancel(baton_semaphore *s)
{
    NEED(s, "baton_semaphore_cancel");
    baton__waiter_cancel(&s->o.w);
    return 0;
}

void baton_semaphore_free(baton_semaphore *s)
{
    if (s) baton__member_free(&s->o.cm);
}

/* ---- permit-expirable semaphore ---- */

int baton_permits_open(baton_permits **out, baton_client *c, const char *name)
{
    baton_permits *p;
    int rc;
    NEED(out, "baton_permits_open");
    *out = NULL;
    if (!(p = calloc(1, sizeof *p))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = baton__sync_open(&p->o, c, name, c ? c->be->permits : NULL, c && c->be->permits ? c->be->permits->create : NULL,
                        c && c->be->permits ? c->be->permits->destroy : NULL, "permit-expirable semaphore"))) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int baton_permits_acquire(baton_permits *p, uint32_t lease_ms, int64_t wait_ms, char id[BATON_PERMIT_ID_SIZE])
{
    int64_t d;
    int rc;
    NEED(p && id, "baton_permits_acquire");
    if (lease_ms == 0) return baton_seterr(BATON_EINVAL, 0, "a permit needs a lease");
    id[0] = 0;
    ENTER(&p->o);
    if (!(rc = baton__sync_begin(&p->o, wait_ms, &d))) {
        rc = baton__sync_end(&p->o, p->o.c->be->permits->acquire(p->o.c->eng, p->o.st, lease_ms, d, &p->o.w, id));
        if (rc == BATON_ELOCKED && wait_ms != 0) rc = baton_seterr(BATON_ETIMEDOUT, 0, "permit wait timed out");
    }
    LEAVE(&p->o, rc);
}

static int check_id(const char *id)
{
    if (!id || strlen(id) != 32 || strspn(id, "0123456789abcdef") != 32)
        return baton_seterr(BATON_EINVAL, 0, "a permit id is 32 lowercase hex digits");
    return 0;
}

int baton_permits_release(baton_permits *p, const char *id)
{
    int rc;
    NEED(p, "baton_permits_release");
    if ((rc = check_id(id))) return rc;
    ENTER(&p->o);
    LEAVE(&p->o, p->o.c->be->permits->release(p->o.c->eng, p->o.st, id));
}

int baton_permits_renew(baton_permits *p, const char *id, uint32_t lease_ms)
{
    int rc;
    NEED(p, "baton_permits_renew");
    if ((rc = check_id(id))) return rc;
    if (lease_ms == 0) return baton_seterr(BATON_EINVAL, 0, "a permit needs a lease");
    ENTER(&p->o);
    LEAVE(&p->o, p->o.c->be->permits->renew(p->o.c->eng, p->o.st, id, lease_ms));
}

int baton_permits_try_set(baton_permits *p, uint32_t permits, int *was_set)
{
    int64_t v = 0;
    int rc;
    NEED(p, "baton_permits_try_set");
    ENTER(&p->o);
    rc = p->o.c->be->permits->ctl(p->o.c->eng, p->o.st, BATON_CTL_TRY_SET, permits, &v);
    if (!rc && was_set) *was_set = v != 0;
    LEAVE(&p->o, rc);
}

int baton_permits_add(baton_permits *p, int64_t delta)
{
    NEED(p, "baton_permits_add");
    ENTER(&p->o);
    LEAVE(&p->o, p->o.c->be->permits->ctl(p->o.c->eng, p->o.st, BATON_CTL_ADD, delta, NULL));
}

int baton_permits_available(baton_permits *p, uint64_t *out)
{
    NEED(p, "baton_permits_available");
    return ctl_u64(&p->o, CTL_PERMITS, BATON_CTL_AVAILABLE, out);
}

int baton_permits_cancel(baton_permits *p)
{
    NEED(p, "baton_permits_cancel");
    baton__waiter_cancel(&p->o.w);
    return 0;
}

void baton_permits_free(baton_permits *p)
{
    if (p) baton__member_free(&p->o.cm);
}

/* ---- count-down latch ---- */

int baton_latch_open(baton_latch **out, baton_client *c, const char *name)
{
    baton_latch *l;
    int rc;
    NEED(out, "baton_latch_open");
    *out = NULL;
    if (!(l = calloc(1, sizeof *l))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (c && !c->be->latch && c->be->value) {
        /* The engine has no latch of its own: the count lives in the value NAME. */
        l->on_values = 1;
        rc = baton__sync_open(&l->o, c, name, c->be->value, c->be->value->create, c->be->value->destroy,
                              "count-down latch");
    } else {
        rc = baton__sync_open(&l->o, c, name, c ? c->be->latch : NULL, c && c->be->latch ? c->be->latch->create : NULL,
                              c && c->be->latch ? c->be->latch->destroy : NULL, "count-down latch");
    }
    if (rc) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

int baton_latch_try_set(baton_latch *l, uint64_t count, int *was_set)
{
    int64_t v = 0;
    int rc;
    NEED(l, "baton_latch_try_set");
    if (count == 0 || count > INT64_MAX) return baton_seterr(BATON_EINVAL, 0, "latch count must be 1..2^63-1");
    ENTER(&l->o);
    if (l->on_values) LEAVE(&l->o, baton__vlatch_try_set(&l->o, count, was_set));
    rc = l->o.c->be->latch->ctl(l->o.c->eng, l->o.st, BATON_CTL_TRY_SET, (int64_t)count, &v);
    if (!rc && was_set) *was_set = v != 0;
    LEAVE(&l->o, rc);
}

int baton_latch_count_down(baton_latch *l)
{
    NEED(l, "baton_latch_count_down");
    ENTER(&l->o);
    if (l->on_values) LEAVE(&l->o, baton__vlatch_count_down(&l->o));
    LEAVE(&l->o, l->o.c->be->latch->ctl(l->o.c->eng, l->o.st, BATON_CTL_COUNT_DOWN, 0, NULL));
}

int baton_latch_count(baton_latch *l, uint64_t *out)
{
    NEED(l, "baton_latch_count");
    if (l->on_values) {
        ENTER(&l->o);
        LEAVE(&l->o, baton__vlatch_count(&l->o, out));
    }
    return ctl_u64(&l->o, CTL_LATCH, BATON_CTL_AVAILABLE, out);
}

int baton_latch_await(baton_latch *l, int64_t wait_ms)
{
    int64_t d;
    int rc;
    NEED(l, "baton_latch_await");
    ENTER(&l->o);
    if (!(rc = baton__sync_begin(&l->o, wait_ms, &d)))
        rc = baton__sync_end(&l->o, l->on_values ? baton__vlatch_await(&l->o, d)
                                                 : l->o.c->be->latch->await(l->o.c->eng, l->o.st, d, &l->o.w));
    LEAVE(&l->o, rc);
}

int baton_latch_cancel(baton_latch *l)
{
    NEED(l, "baton_latch_cancel");
    baton__waiter_cancel(&l->o.w);
    return 0;
}

void baton_latch_free(baton_latch *l)
{
    if (l) baton__member_free(&l->o.cm);
}
