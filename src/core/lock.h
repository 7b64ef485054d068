/* The lock front-end's state, shared with the keeper. */
#ifndef BATON_CORE_LOCK_H
#define BATON_CORE_LOCK_H

#include "client.h"
#include "keeper.h"
#include <stddef.h>

enum { LOCK_FREE, LOCK_HELD, LOCK_LOST };

struct baton_lock {
    struct baton_client *c;
    char *name;                 /* in the handle's own allocation */
    baton_lock_options opts;
    void *st;                   /* backend state */
    baton_owner owner;
    baton_waiter waiter;
    /* Guards the fields below; never held across I/O. One of a set of
     * mutexes shared by all handles (lock.c), so: a leaf lock. Take no
     * other mutex while holding it (another handle's smu may be the same
     * one, and a thread holding that other mutex may want it). */
    pthread_mutex_t *smu;
    int io_busy;                /* the io gate (baton__lock_io_enter): a backend call on st is made;
                                 * guarded by the gate's shared mutex, not smu */
    int state;
    int acquiring;
    unsigned depth;
    unsigned long holder_tid;
    uint64_t fence;
    int64_t lease_deadline;     /* monotonic ns; INT64_MAX when the engine has no lease */
    int64_t next_renew;         /* monotonic ns; INT64_MAX when not renewed */
    /* The engine reported a loss while an acquire was in flight: the grant
     * with this fence (or, with lost_any, whatever it grants) is lost. */
    uint64_t lost_fence;
    int lost_any;
    int is_write;               /* the write side of a read-write lock */
    baton__kept kn;             /* the keeper's node */
    baton__member cm;           /* the client's member node */
    struct baton_lock *sibling; /* the other side of a read-write lock */
    const char *value;          /* an election candidate's value (req.value); NULL for locks */
    struct baton__aop *aop;     /* the async operation in flight; guarded by the client's async mutex */
};

/* The io gate serializes the backend calls on a lock's state, as a mutex
 * would, but may be left on another thread than the one that entered it: a
 * renewal started natively (backend.h, renew_start) holds it from its start
 * on a keeper worker until its answer on an engine thread. Its mutex and
 * condition variable are shared by all locks (a handle per lock). */
void baton__lock_io_enter(baton_lock *l);
void baton__lock_io_leave(baton_lock *l);

/* Creates a lock handle around backend state st (NULL = ask lock_new). */
int baton__lock_create(baton_lock **out, struct baton_client *c, const char *name,
                       const baton_lock_options *opts, void *st);
/* The public calls minus the client gate (for callers inside one). */
int baton__lock_acquire(baton_lock *l, int64_t wait_ms);
int baton__lock_release(baton_lock *l);
/* baton__lock_acquire in parts, for an acquire the engine completes later
 * (async.c): the prologue, the check of a grant, the retry decision after
 * a grant given back, the epilogue (lock.c has the details). */
int baton__lock_acquire_begin(baton_lock *l, int64_t wait_ms, baton_acquire_req *req, int *reentered);
int baton__lock_grant_check(baton_lock *l, const baton_acquire_req *req, int *dead);
int baton__lock_retry_rc(baton_lock *l, const baton_acquire_req *req, int dead);
int baton__lock_acquire_end(baton_lock *l, int rc, const baton_acquire_req *req, int64_t wait_ms);
/* Release with FN in place of the engine's release for a held grant (a
 * queue item's done); a lost grant is given back with the release. */
int baton__lock_release_with(baton_lock *l, int (*fn)(void *eng, void *st, const baton_owner *owner));
/* The event-loop API's side of a lock and a client (async.c). */
int baton__async_cancel(baton_lock *l);
void baton__async_forget(baton_lock *l);
/* Drops a cancel kept for the next acquire (multilock). */
void baton__lock_uncancel(baton_lock *l);

#define BATON__CONTAINER(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
int baton__name_check(const char *name);
int baton__wait_deadline_ns(int64_t wait_ms, int64_t *out);

#endif
