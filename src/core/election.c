/* Leader election: a candidate is a lock on the backend's election state
 * (leases, loss and on_lost come from the lock), plus the value it proclaims
 * and what an observer last saw. Engines without an election table get the
 * one the core builds on a lock and a value (election_gen.c). Listeners:
 * observe on a thread of their own. */
#include "election.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void election_lost(baton_lock *l, void *payload)
{
    baton_election *e = payload;
    (void)l;
    if (e->opts.on_lost) e->opts.on_lost(e, e->opts.on_lost_payload);
}

static int value_check(const char *value)
{
    if (!value) return baton_seterr(BATON_EINVAL, 0, "election value is NULL");
    if (strlen(value) > BATON_ELECTION_VALUE_MAX)
        return baton_seterr(BATON_EINVAL, 0, "election value is %zu bytes; the limit is %d", strlen(value),
                            BATON_ELECTION_VALUE_MAX);
    return 0;
}

/* The lock's member cancel, wrapped: a closing client also wakes this
 * election's observer and listener. Unhooked (under the gate's mutex, as
 * close calls it) before the election is freed. */
static void election_member_cancel(baton__member *m)
{
    baton_lock *l = BATON__CONTAINER(m, baton_lock, cm);
    baton_election *e = l->opts.on_lost_payload;
    e->lock_cancel(m);
    baton__waiter_cancel(&e->ow);
    baton__waiter_cancel(&e->lw);
}

static void hook_cancel(baton_election *e, int on)
{
    pthread_mutex_lock(&e->l->cm.gate->mu);
    if (on) {
        e->lock_ops = e->l->cm.ops;
        e->lock_cancel = e->lock_ops->cancel;
        e->hooked_ops = *e->lock_ops;
        e->hooked_ops.cancel = election_member_cancel;
        e->l->cm.ops = &e->hooked_ops;
    } else if (e->lock_ops) {
        e->l->cm.ops = e->lock_ops;
    }
    pthread_mutex_unlock(&e->l->cm.gate->mu);
}

static void election_destroy(baton_election *e)
{
    pthread_mutex_destroy(&e->omu);
    pthread_mutex_destroy(&e->lmu);
    baton__waiter_destroy(&e->ow);
    baton__waiter_destroy(&e->lw);
    free(e->name);
    free(e);
}

/* The engine's own election states (ZooKeeper, etcd). */
static int native_open(baton_election *e, const baton_lock_options *lo)
{
    baton_client *c = e->c;
    void *st = NULL;
    int rc;
    if ((rc = c->be->election->create(c->eng, e->name, lo, &st))) return rc;
    if ((rc = baton__lock_create(&e->l, c, e->name, lo, st))) {
        c->be->lock->destroy(c->eng, st);
        return rc;
    }
    e->l->value = e->value;
    return 0;
}

int baton_election_open(baton_election **out, baton_client *c, const char *name,
                        const baton_election_options *opts)
{
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_election *e;
    static const size_t sizes[] = { sizeof(baton_election_options) };
    int rc, generic;

    if (out) *out = NULL;
    if (!out || !c) return baton_seterr(BATON_EINVAL, 0, "baton_election_open: NULL argument");
    if ((rc = baton__name_check(name))) return rc;
    if ((rc = baton__opts_copy(&o, opts, sizes, BATON_ELECTION_OPTIONS_VERSION, "election options"))) return rc;
    generic = !c->be->election;
    if (generic ? !c->be->value || !c->be->lock->info : !c->be->election->create || !c->be->election->leader)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no leader election", c->be->info->name);
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    e->c = c;
    e->opts = o;
    e->generic = generic;
    lo.lease_ms = o.lease_ms;
    lo.on_lost = election_lost;
    lo.on_lost_payload = e;
    if (!(e->name = strdup(name))) {
        free(e);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    if ((rc = baton__waiter_init(&e->ow))) {
        free(e->name);
        free(e);
        return baton_seterr(rc, 0, "out of memory");
    }
    if ((rc = baton__waiter_init(&e->lw))) {
        baton__waiter_destroy(&e->ow);
        free(e->name);
        free(e);
        return baton_seterr(rc, 0, "out of memory");
    }
    pthread_mutex_init(&e->omu, NULL);
    pthread_mutex_init(&e->lmu, NULL);
    if ((rc = generic ? baton__gelect_open(e, &lo) : native_open(e, &lo))) {
        election_destroy(e);
        return rc;
    }
    hook_cancel(e, 1);
    *out = e;
    return 0;
}

int baton_election_campaign(baton_election *e, const char *value, int64_t wait_ms)
{
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_campaign: NULL election");
    if ((rc = value_check(value))) return rc;
    if (baton_lock_held(e->l))
        return baton_seterr(BATON_EDEADLK, 0, "election '%s': this candidate already leads", e->name);
    /* Not while acquiring: the backend reads the value during the campaign. */
    pthread_mutex_lock(e->l->smu);
    if (e->l->acquiring) {
        pthread_mutex_unlock(e->l->smu);
        return baton_seterr(BATON_EINVAL, 0, "election '%s': another thread is campaigning", e->name);
    }
    snprintf(e->value, sizeof e->value, "%s", value);
    pthread_mutex_unlock(e->l->smu);
    rc = baton_lock_acquire(e->l, wait_ms);
    if (rc == 0 && e->generic) rc = baton__gelect_granted(e);
    return rc;
}

int baton_election_resign(baton_election *e)
{
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_resign: NULL election");
    /* the record goes first: observers never see a released term's value */
    if (e->generic && baton_lock_held(e->l)) baton__gelect_clear(e);
    return baton_lock_release(e->l);
}

int baton_election_is_leader(const baton_election *e) { return e ? baton_lock_held(e->l) : 0; }

int baton_election_deadline(const baton_election *e, int64_t *mono_ns)
{
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_deadline: NULL election");
    return baton_lock_deadline(e->l, mono_ns);
}

uint64_t baton_election_fence(const baton_election *e) { return e ? baton_lock_fence(e->l) : 0; }

int baton_election_proclaim(baton_election *e, const char *value)
{
    baton_lock *l;
    int rc, lost;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_proclaim: NULL election");
    if ((rc = value_check(value))) return rc;
    l = e->l;
    pthread_mutex_lock(l->smu);
    lost = l->state == LOCK_LOST;
    pthread_mutex_unlock(l->smu);
    if (lost) return baton_seterr(BATON_ELOST, 0, "election '%s': this candidate lost its leadership", e->name);
    if (!baton_lock_held(l))
        return baton_seterr(BATON_ENOTHELD, 0, "election '%s': this candidate does not lead", e->name);
    if (e->generic) {
        rc = baton__gelect_proclaim(e, value);
    } else {
        if ((rc = baton__member_enter(&l->cm))) return rc;
        if (!l->c->be->election->proclaim) {
            rc = baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot change a leader's value", l->c->be->info->name);
            baton__member_leave(&l->cm);
            return rc;
        }
        baton__lock_io_enter(l);
        rc = l->c->be->election->proclaim(l->c->eng, l->st, &l->owner, value);
        baton__lock_io_leave(l);
        baton__member_leave(&l->cm);
    }
    if (rc == 0) {
        pthread_mutex_lock(l->smu);
        snprintf(e->value, sizeof e->value, "%s", value);
        pthread_mutex_unlock(l->smu);
    }
    return rc;
}

static void copy_out(char *dst, size_t n, const char *src)
{
    if (dst && n) snprintf(dst, n, "%s", src);
}

/* The backend's leader(), or the core's for a generic election (REC: the
 * record handle of the caller's thread). Inside the client's gate. */
static int leader_call(baton_election *e, baton_value *rec, uint64_t known_fence, const char *known_value,
                       char *value, size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w)
{
    if (e->generic) return baton__gelect_leader(e, rec, known_fence, known_value, value, n, fence, deadline_ns, w);
    return e->c->be->election->leader(e->c->eng, e->name, known_fence, known_value, value, n, fence, deadline_ns, w);
}

int baton_election_leader(baton_election *e, char *value, size_t n, uint64_t *fence)
{
    char v[BATON_ELECTION_VALUE_MAX + 1] = "";
    baton_waiter w;
    uint64_t f = 0;
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_leader: NULL election");
    /* a generic election may wait a moment for a new leader's record: on a
     * parking spot of this call's own */
    if ((rc = baton__waiter_init(&w))) return baton_seterr(rc, 0, "out of memory");
    if ((rc = baton__member_enter(&e->l->cm))) {
        baton__waiter_destroy(&w);
        return rc;
    }
    rc = leader_call(e, e->rec, 0, "", v, sizeof v, &f, 0, &w);
    baton__member_leave(&e->l->cm);
    baton__waiter_destroy(&w);
    if (rc) return rc;
    copy_out(value, n, v);
    if (fence) *fence = f;
    if (f == 0) return baton_seterr(BATON_ENOTHELD, 0, "election '%s': nobody leads", e->name);
    return 0;
}

int baton_election_observe(baton_election *e, char *value, size_t n, uint64_t *fence, int64_t wait_ms)
{
    char v[BATON_ELECTION_VALUE_MAX + 1] = "";
    uint64_t f = 0;
    int64_t deadline;
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_observe: NULL election");
    if ((rc = baton__member_enter(&e->l->cm))) return rc;
    pthread_mutex_lock(&e->omu);
    if (baton_waiter_canceled(&e->ow)) {
        /* a cancel kept from before this call (see baton_election_cancel) */
        baton__waiter_reset(&e->ow);
        pthread_mutex_unlock(&e->omu);
        baton__member_leave(&e->l->cm);
        return baton_seterr(BATON_ECANCELED, 0, "election '%s': observe canceled (before it started)", e->name);
    }
    __atomic_store_n(&e->observing, 1, __ATOMIC_SEQ_CST);
    if (!e->observed) deadline = 0;
    else baton__wait_deadline_ns(wait_ms, &deadline);
    rc = leader_call(e, e->rec, e->known_fence, e->known_value, v, sizeof v, &f, deadline, &e->ow);
    __atomic_store_n(&e->observing, 0, __ATOMIC_SEQ_CST);
    baton__waiter_reset(&e->ow);
    if (rc == 0 && e->observed && wait_ms == 0 && f == e->known_fence && !strcmp(v, e->known_value))
        rc = baton_seterr(BATON_ETIMEDOUT, 0, "election '%s': the leader has not changed", e->name);
    if (rc == 0) {
        e->observed = 1;
        e->known_fence = f;
        snprintf(e->known_value, sizeof e->known_value, "%s", v);
        copy_out(value, n, v);
        if (fence) *fence = f;
    }
    pthread_mutex_unlock(&e->omu);
    baton__member_leave(&e->l->cm);
    return rc;
}

int baton_election_cancel(baton_election *e)
{
    int observing, campaigning;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_cancel: NULL election");
    /* The call in flight is cancelled; with none, both kinds keep the
     * cancel for their next call. */
    observing = __atomic_load_n(&e->observing, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(e->l->smu);
    campaigning = e->l->acquiring;
    pthread_mutex_unlock(e->l->smu);
    if (observing || !campaigning) baton__waiter_cancel(&e->ow);
    if (campaigning || !observing) baton_lock_cancel(e->l);
    return 0;
}

/* ---- listeners ---- */

static int listen_stopped(baton_election *e)
{
    int s;
    pthread_mutex_lock(&e->lmu);
    s = e->lstop;
    pthread_mutex_unlock(&e->lmu);
    return s;
}

/* The listener: the leader now, then every change. A failure (engine
 * unreachable) is retried a second later, without a call; the client's close
 * ends the thread (its calls are refused from then on). */
static void *listen_main(void *arg)
{
    baton_election *e = arg;
    char known[BATON_ELECTION_VALUE_MAX + 1] = "", v[BATON_ELECTION_VALUE_MAX + 1];
    uint64_t kf = 0;
    int first = 1;
    while (!listen_stopped(e)) {
        uint64_t f = 0;
        int rc;
        if (baton__member_enter(&e->l->cm)) break;
        rc = leader_call(e, e->lrec, kf, known, v, sizeof v, &f, first ? 0 : INT64_MAX, &e->lw);
        baton__member_leave(&e->l->cm);
        if (listen_stopped(e)) break;
        if (rc == 0 && (first || f != kf || strcmp(v, known))) {
            int ev = f == 0 ? BATON_ELECTION_NONE : first || f != kf ? BATON_ELECTION_LEADER : BATON_ELECTION_VALUE;
            first = 0;
            kf = f;
            snprintf(known, sizeof known, "%s", v);
            e->lcb(e, ev, f ? v : "", f, e->lpayload);
        } else if (rc && rc != BATON_ECANCELED) {
            unsigned g = baton_waiter_gen(&e->lw);
            baton__waiter_reset(&e->lw);
            if (!listen_stopped(e)) baton_waiter_park(&e->lw, g, baton_now_ns() + 1000000000LL);
        }
        baton__waiter_reset(&e->lw);
    }
    return NULL;
}

int baton_election_listen(baton_election *e, baton_election_cb cb, void *payload)
{
    baton_value *rec = NULL;
    int rc;
    if (!e || !cb) return baton_seterr(BATON_EINVAL, 0, "baton_election_listen: NULL argument");
    pthread_mutex_lock(&e->lmu);
    if (e->listening) {
        pthread_mutex_unlock(&e->lmu);
        return baton_seterr(BATON_EINVAL, 0, "election '%s': this handle has a listener already", e->name);
    }
    /* the listener's own record handle: its watch and the observer's never share engine state */
    if (e->generic && (rc = baton_value_open(&rec, e->c, baton_value_name(e->rec)))) {
        pthread_mutex_unlock(&e->lmu);
        return rc;
    }
    e->lrec = rec;
    e->lcb = cb;
    e->lpayload = payload;
    e->lstop = 0;
    baton__waiter_reset(&e->lw);
    if ((rc = pthread_create(&e->lthread, NULL, listen_main, e))) {
        e->lrec = NULL;
        pthread_mutex_unlock(&e->lmu);
        baton_value_free(rec);
        return baton_seterr(BATON_ENOMEM, rc, "election '%s': cannot start the listener thread", e->name);
    }
    e->listening = 1;
    pthread_mutex_unlock(&e->lmu);
    return 0;
}

int baton_election_unlisten(baton_election *e)
{
    pthread_t t;
    baton_value *rec;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_unlisten: NULL election");
    pthread_mutex_lock(&e->lmu);
    if (!e->listening) {
        pthread_mutex_unlock(&e->lmu);
        return baton_seterr(BATON_ENOTHELD, 0, "election '%s' has no listener", e->name);
    }
    e->lstop = 1;
    e->listening = 0;
    t = e->lthread;
    pthread_mutex_unlock(&e->lmu);
    baton__waiter_cancel(&e->lw);
    pthread_join(t, NULL);
    /* the thread is gone: its record handle with it */
    pthread_mutex_lock(&e->lmu);
    rec = e->lrec;
    e->lrec = NULL;
    pthread_mutex_unlock(&e->lmu);
    baton_value_free(rec);
    return 0;
}

void baton_election_free(baton_election *e)
{
    if (!e) return;
    if (e->listening) baton_election_unlisten(e);
    if (e->generic && baton_lock_held(e->l)) baton__gelect_clear(e);
    hook_cancel(e, 0);
    baton_value_free(e->rec);
    baton_lock_free(e->l);
    election_destroy(e);
}
