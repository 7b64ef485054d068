/* Leader election: a candidate is a lock on the backend's election state
 * (leases, loss and on_lost come from the lock), plus the value it proclaims
 * and what an observer last saw. */
#include "lock.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct baton_election {
    baton_client *c;
    baton_lock *l;
    baton_election_options opts;
    char value[BATON_ELECTION_VALUE_MAX + 1];   /* proclaimed while leading */
    baton_waiter ow;                            /* observe's parking spot */
    pthread_mutex_t omu;                        /* one observer at a time */
    int observed;                               /* observe answered once */
    int observing;                              /* an observe is in flight (atomic) */
    uint64_t known_fence;
    char known_value[BATON_ELECTION_VALUE_MAX + 1];
};

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

int baton_election_open(baton_election **out, baton_client *c, const char *name,
                        const baton_election_options *opts)
{
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_election *e;
    static const size_t sizes[] = { sizeof(baton_election_options) };
    void *st = NULL;
    int rc;

    if (out) *out = NULL;
    if (!out || !c) return baton_seterr(BATON_EINVAL, 0, "baton_election_open: NULL argument");
    if ((rc = baton__name_check(name))) return rc;
    if ((rc = baton__opts_copy(&o, opts, sizes, BATON_ELECTION_OPTIONS_VERSION, "election options"))) return rc;
    if (!c->be->election || !c->be->election->create || !c->be->election->leader)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no leader election", c->be->info->name);
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    e->c = c;
    e->opts = o;
    lo.lease_ms = o.lease_ms;
    lo.on_lost = election_lost;
    lo.on_lost_payload = e;
    if ((rc = baton__waiter_init(&e->ow))) {
        free(e);
        return baton_seterr(rc, 0, "out of memory");
    }
    pthread_mutex_init(&e->omu, NULL);
    if ((rc = c->be->election->create(c->eng, name, &lo, &st))) goto fail;
    if ((rc = baton__lock_create(&e->l, c, name, &lo, st))) {
        c->be->lock->destroy(c->eng, st);
        goto fail;
    }
    e->l->value = e->value;
    *out = e;
    return 0;
fail:
    pthread_mutex_destroy(&e->omu);
    baton__waiter_destroy(&e->ow);
    free(e);
    return rc;
}

int baton_election_campaign(baton_election *e, const char *value, int64_t wait_ms)
{
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_campaign: NULL election");
    if ((rc = value_check(value))) return rc;
    if (baton_lock_held(e->l))
        return baton_seterr(BATON_EDEADLK, 0, "election '%s': this candidate already leads", e->l->name);
    /* Not while acquiring: the backend reads the value during the campaign. */
    pthread_mutex_lock(&e->l->smu);
    if (e->l->acquiring) {
        pthread_mutex_unlock(&e->l->smu);
        return baton_seterr(BATON_EINVAL, 0, "election '%s': another thread is campaigning", e->l->name);
    }
    snprintf(e->value, sizeof e->value, "%s", value);
    pthread_mutex_unlock(&e->l->smu);
    return baton_lock_acquire(e->l, wait_ms);
}

int baton_election_resign(baton_election *e)
{
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_resign: NULL election");
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
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_proclaim: NULL election");
    if ((rc = value_check(value))) return rc;
    l = e->l;
    if (!baton_lock_held(l))
        return baton_seterr(BATON_ENOTHELD, 0, "election '%s': this candidate does not lead", l->name);
    if ((rc = baton__member_enter(&l->cm))) return rc;
    if (!l->c->be->election->proclaim) {
        rc = baton_seterr(BATON_ENOTSUP, 0, "the %s backend cannot change a leader's value", l->c->be->info->name);
        baton__member_leave(&l->cm);
        return rc;
    }
    pthread_mutex_lock(&l->io);
    rc = l->c->be->election->proclaim(l->c->eng, l->st, &l->owner, value);
    pthread_mutex_unlock(&l->io);
    if (rc == 0) {
        pthread_mutex_lock(&l->smu);
        snprintf(e->value, sizeof e->value, "%s", value);
        pthread_mutex_unlock(&l->smu);
    }
    baton__member_leave(&l->cm);
    return rc;
}

static void copy_out(char *dst, size_t n, const char *src)
{
    if (dst && n) snprintf(dst, n, "%s", src);
}

int baton_election_leader(baton_election *e, char *value, size_t n, uint64_t *fence)
{
    char v[BATON_ELECTION_VALUE_MAX + 1] = "";
    uint64_t f = 0;
    int rc;
    if (!e) return baton_seterr(BATON_EINVAL, 0, "baton_election_leader: NULL election");
    if ((rc = baton__member_enter(&e->l->cm))) return rc;
    rc = e->c->be->election->leader(e->c->eng, e->l->name, 0, "", v, sizeof v, &f, 0, NULL);
    baton__member_leave(&e->l->cm);
    if (rc) return rc;
    copy_out(value, n, v);
    if (fence) *fence = f;
    if (f == 0) return baton_seterr(BATON_ENOTHELD, 0, "election '%s': nobody leads", e->l->name);
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
        return baton_seterr(BATON_ECANCELED, 0, "election '%s': observe canceled (before it started)", e->l->name);
    }
    __atomic_store_n(&e->observing, 1, __ATOMIC_SEQ_CST);
    if (!e->observed) deadline = 0;
    else baton__wait_deadline_ns(wait_ms, &deadline);
    rc = e->c->be->election->leader(e->c->eng, e->l->name, e->known_fence, e->known_value, v, sizeof v, &f,
                                   deadline, &e->ow);
    __atomic_store_n(&e->observing, 0, __ATOMIC_SEQ_CST);
    baton__waiter_reset(&e->ow);
    if (rc == 0 && e->observed && wait_ms == 0 && f == e->known_fence && !strcmp(v, e->known_value))
        rc = baton_seterr(BATON_ETIMEDOUT, 0, "election '%s': the leader has not changed", e->l->name);
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
    pthread_mutex_lock(&e->l->smu);
    campaigning = e->l->acquiring;
    pthread_mutex_unlock(&e->l->smu);
    if (observing || !campaigning) baton__waiter_cancel(&e->ow);
    if (campaigning || !observing) baton_lock_cancel(e->l);
    return 0;
}

void baton_election_free(baton_election *e)
{
    if (!e) return;
    baton_lock_free(e->l);
    pthread_mutex_destroy(&e->omu);
    baton__waiter_destroy(&e->ow);
    free(e);
}
