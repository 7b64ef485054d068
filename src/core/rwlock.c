/* Read-write locks: two lock handles over one backend pair, sharing an owner. */
#include "lock.h"
#include <stdlib.h>
#include <string.h>

struct baton_rwlock {
    baton_lock *rd, *wr;
};

int baton_rwlock_open(baton_rwlock **out, baton_client *c, const char *name, const baton_lock_options *opts)
{
    baton_rwlock *rw;
    void *rdst = NULL, *wrst = NULL;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    int rc;

    if (out) *out = NULL;
    if (!out || !c) return baton_seterr(BATON_EINVAL, 0, "baton_rwlock_open: NULL argument");
    if ((rc = baton__name_check(name))) return rc;
    if (!c->be->rw || !c->be->rw->create)
        return baton_seterr(BATON_ENOTSUP, 0, "the %s backend has no read-write lock", c->be->info->name);
    if (opts) o = *opts;
    if (o.fair) return baton_seterr(BATON_ENOTSUP, 0, "fair read-write locks are not supported");
    if (!(rw = calloc(1, sizeof *rw))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = c->be->rw->create(c->eng, name, &o, &rdst, &wrst))) { free(rw); return rc; }
    if ((rc = baton__lock_create(&rw->rd, c, name, &o, rdst))) {
        c->be->lock->destroy(c->eng, rdst);
        c->be->lock->destroy(c->eng, wrst);
        free(rw);
        return rc;
    }
    if ((rc = baton__lock_create(&rw->wr, c, name, &o, wrst))) {
        c->be->lock->destroy(c->eng, wrst);
        baton_lock_free(rw->rd);
        free(rw);
        return rc;
    }
    /* One owner for both sides, so the writer may take the read side. */
    memcpy(&rw->rd->owner, &rw->wr->owner, sizeof rw->wr->owner);
    rw->rd->sibling = rw->wr;
    rw->wr->sibling = rw->rd;
    rw->wr->is_write = 1;
    *out = rw;
    return 0;
}

baton_lock *baton_rwlock_read(baton_rwlock *rw) { return rw ? rw->rd : NULL; }
baton_lock *baton_rwlock_write(baton_rwlock *rw) { return rw ? rw->wr : NULL; }

void baton_rwlock_free(baton_rwlock *rw)
{
    if (!rw) return;
    /* The write side first: a downgraded holder keeps the read side until last. */
    baton_lock_free(rw->wr);
    baton_lock_free(rw->rd);
    free(rw);
}
