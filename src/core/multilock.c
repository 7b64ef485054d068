/* Multilock: all-or-nothing over locks of any engines, taken in one global order. */
#include "lock.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

struct baton_multilock {
    size_t n;
    baton_lock **locks;     /* in the caller's order */
    baton_lock **order;     /* in the global acquisition order */
    int held;
    int acquiring;          /* atomic */
    int canceled;           /* atomic: a cancel kept for the next acquire */
};

static int cmp_lock(const void *a, const void *b)
{
    const baton_lock *x = *(baton_lock *const *)a, *y = *(baton_lock *const *)b;
    int r = strcmp(x->c->be->info->name, y->c->be->info->name);
    if (!r) r = strcmp(x->c->ident, y->c->ident);
    if (!r) r = strcmp(x->name, y->name);
    return r;
}

int baton_multilock_open(baton_multilock **out, baton_lock *const *locks, size_t n)
{
    baton_multilock *m;
    if (out) *out = NULL;
    if (!out || (!locks && n)) return baton_seterr(BATON_EINVAL, 0, "baton_multilock_open: NULL argument");
    if (n == 0) return baton_seterr(BATON_EINVAL, 0, "a multilock needs at least one lock");
    for (size_t i = 0; i < n; i++)
        if (!locks[i]) return baton_seterr(BATON_EINVAL, 0, "multilock member %zu is NULL", i);
    /* The order reads each member's client: all must be open meanwhile. */
    for (size_t i = 0; i < n; i++) {
        int rc = baton__member_enter(&locks[i]->cm);
        if (rc) {
            while (i-- > 0) baton__member_leave(&locks[i]->cm);
            return rc;
        }
    }
    if (!(m = calloc(1, sizeof *m))) {
        for (size_t i = 0; i < n; i++) baton__member_leave(&locks[i]->cm);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    m->n = n;
    m->locks = malloc(n * sizeof *m->locks);
    m->order = malloc(n * sizeof *m->order);
    if (!m->locks || !m->order) {
        for (size_t i = 0; i < n; i++) baton__member_leave(&locks[i]->cm);
        free(m->locks); free(m->order); free(m);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    memcpy(m->locks, locks, n * sizeof *locks);
    memcpy(m->order, locks, n * sizeof *locks);
    qsort(m->order, n, sizeof *m->order, cmp_lock);
    for (size_t i = 0; i < n; i++) baton__member_leave(&locks[i]->cm);
    for (size_t i = 1; i < n; i++)
        if (!cmp_lock(&m->order[i - 1], &m->order[i])) {
            const char *name = m->order[i]->name;
            int rc = baton_seterr(BATON_EINVAL, 0, "multilock: '%s' appears twice on one engine; "
                                  "it would wait for itself", name);
            free(m->locks); free(m->order); free(m);
            return rc;
        }
    *out = m;
    return 0;
}

int baton_multilock_acquire(baton_multilock *m, int64_t wait_ms)
{
    int64_t deadline;
    size_t i;
    int rc = 0;
    if (!m) return baton_seterr(BATON_EINVAL, 0, "baton_multilock_acquire: NULL");
    if (m->held) return baton_seterr(BATON_EDEADLK, 0, "multilock already held");
    if (__atomic_exchange_n(&m->canceled, 0, __ATOMIC_SEQ_CST))
        return baton_seterr(BATON_ECANCELED, 0, "multilock acquire canceled (before it started)");
    __atomic_store_n(&m->acquiring, 1, __ATOMIC_SEQ_CST);
    baton__wait_deadline_ns(wait_ms, &deadline);
    for (i = 0; i < m->n; i++) {
        int64_t left = 0;
        if (deadline == INT64_MAX) left = -1;
        else if (deadline) {
            left = (deadline - baton_now_ns()) / 1000000;
            if (left <= 0) left = 0;   /* the rest get a final try */
        }
        if (__atomic_load_n(&m->canceled, __ATOMIC_SEQ_CST)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "lock '%s': acquire canceled", m->order[i]->name);
            break;
        }
        if ((rc = baton_lock_acquire(m->order[i], left))) break;
    }
    /* This acquire consumed a cancel that came while it ran: the members
     * it did not reach must not keep theirs. */
    __atomic_store_n(&m->acquiring, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->canceled, 0, __ATOMIC_SEQ_CST);
    for (size_t j = 0; j < m->n; j++) baton__lock_uncancel(m->order[j]);
    if (rc) {
        baton_error saved = *baton_error_last();
        char msg[512];
        snprintf(msg, sizeof msg, "multilock member '%s': %s", m->order[i]->name, saved.message);
        while (i-- > 0) baton_lock_release(m->order[i]);
        if (rc == BATON_ELOCKED && wait_ms != 0) rc = BATON_ETIMEDOUT;
        return baton_seterr(rc, saved.native, "%s", msg);
    }
    m->held = 1;
    return 0;
}

int baton_multilock_release(baton_multilock *m)
{
    int rc = 0;
    if (!m) return baton_seterr(BATON_EINVAL, 0, "baton_multilock_release: NULL");
    if (!m->held) return baton_seterr(BATON_ENOTHELD, 0, "multilock is not held");
    m->held = 0;
    for (size_t i = m->n; i-- > 0;) {
        int r = baton_lock_release(m->order[i]);
        if (r && !rc) rc = r;   /* the first failure (e.g. BATON_ELOST) is the answer */
    }
    return rc;
}

int baton_multilock_held(const baton_multilock *m)
{
    if (!m || !m->held) return 0;
    for (size_t i = 0; i < m->n; i++)
        if (!baton_lock_held(m->locks[i])) return 0;
    return 1;
}

size_t baton_multilock_fences(const baton_multilock *m, uint64_t *out, size_t cap)
{
    if (!m) return 0;
    for (size_t i = 0; i < m->n && i < cap; i++) out[i] = baton_lock_fence(m->locks[i]);
    return m->n;
}

int baton_multilock_cancel(baton_multilock *m)
{
    if (!m) return baton_seterr(BATON_EINVAL, 0, "baton_multilock_cancel: NULL");
    /* Kept on the multilock itself, not on its members: a member's own
     * kept cancel would end its next lone acquire. */
    __atomic_store_n(&m->canceled, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->acquiring, __ATOMIC_SEQ_CST))
        for (size_t i = 0; i < m->n; i++) baton_lock_cancel(m->order[i]);
    return 0;
}

void baton_multilock_free(baton_multilock *m)
{
    if (!m) return;
    if (m->held) baton_multilock_release(m);
    free(m->locks);
    free(m->order);
    free(m);
}
