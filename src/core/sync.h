/* The handle shared by the ownerless objects (semaphores, permits, latches,
 * values, queues): engine state, a parking spot so another thread can
 * cancel a blocked call, and client membership. */
#ifndef BATON_CORE_SYNC_H
#define BATON_CORE_SYNC_H

#include "lock.h"

typedef struct sync_obj {
    baton_client *c;
    void *st;
    baton_waiter w;
    baton__member cm;
    void (*st_free)(void *eng, void *st);
    char *name;
    void (*on_free)(struct sync_obj *o);  /* the handle's own extras; may be NULL */
    void (*on_cancel)(struct sync_obj *o); /* wake the handle's other waiters (close); may be NULL */
} sync_obj;

typedef int (*sync_new_fn)(void *eng, const char *name, void **st);

/* Creates the engine state with FN (TBL NULL: the engine has no WHAT:
 * BATON_ENOTSUP) and links O to C. */
int baton__sync_open(sync_obj *o, baton_client *c, const char *name, const void *tbl, sync_new_fn fn,
                     void (*st_free)(void *, void *), const char *what);
/* A blocking call's start (a kept cancel ends it at once) and end. */
int baton__sync_begin(sync_obj *o, int64_t wait_ms, int64_t *d);
int baton__sync_end(sync_obj *o, int rc);

/* Every call enters the client's gate (see client.h). */
#define ENTER(o) do { int rc_ = baton__member_enter(&(o)->cm); if (rc_) return rc_; } while (0)
#define LEAVE(o, rc) do { int r_ = (rc); baton__member_leave(&(o)->cm); return r_; } while (0)
#define NEED(x, what) do { if (!(x)) return baton_seterr(BATON_EINVAL, 0, "%s: NULL argument", what); } while (0)

/* Latches on values, for engines with values and no latch table (value.c). */
int baton__vlatch_try_set(sync_obj *o, uint64_t count, int *was_set);
int baton__vlatch_count_down(sync_obj *o);
int baton__vlatch_count(sync_obj *o, uint64_t *out);
int baton__vlatch_await(sync_obj *o, int64_t deadline_ns);

/* The handle under a baton_value, for the core's own uses (elections). */
sync_obj *baton__value_obj(baton_value *v);

#endif
