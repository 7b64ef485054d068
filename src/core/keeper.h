/* The keeper: per client, one timing thread plus a few worker threads that
 * renew leases and report loss. It knows nothing of locks: it keeps nodes
 * (embedded in whatever needs keeping) and calls their functions.
 *
 * Why two kinds of thread: a lease deadline is a timer, not the end of an I/O
 * call. The timing thread never does I/O, so a renewal stuck on a frozen link
 * or a hung server cannot delay the moment another lock (or the same one) is
 * declared lost; renewals of different locks run on different workers and
 * never wait on each other. */
#ifndef BATON_CORE_KEEPER_H
#define BATON_CORE_KEEPER_H

#include <stdint.h>

typedef struct baton__keeper baton__keeper;
typedef struct baton__kept baton__kept;

enum { KEPT_IDLE = 0, KEPT_RENEW, KEPT_LOST };

typedef struct {
    /* On the timing thread, under the keeper's mutex; never blocks on I/O
     * (it may take the node's own mutex). What the node needs at NOW:
     * KEPT_LOST when it has just become lost (its deadline passed: the
     * node marks itself lost before returning), KEPT_RENEW when a renewal
     * is due and none is in flight (RENEWING = 0), else KEPT_IDLE. *NEXT =
     * when to ask again (INT64_MAX = never unless kicked). */
    int (*poll)(baton__kept *n, int64_t now, int renewing, int64_t *next);
    /* On a worker: the renewal (may block up to the node's own deadline).
     * Returns 1 when the node was just lost (report() follows). */
    int (*keep)(baton__kept *n, int64_t now);
    /* May be NULL. On a worker, in place of keep(): starts the renewal
     * and returns at once, 0 when started (the node then calls
     * baton__keeper_renewed exactly once, from any thread, with no keeper
     * mutex held), else nonzero and keep() runs. The worker goes on to the
     * next due node, so a batch of renewals leaves together. */
    int (*start)(baton__kept *n, int64_t now);
    /* On a worker, with no keeper mutex held: tells the application
     * (on_lost). It may remove or forget its own node, or stop the keeper. */
    void (*report)(baton__kept *n);
} baton__kept_ops;

/* One per kept handle (100,000 locks, 100,000 nodes): the functions are
 * shared, the list is doubly linked so that a node leaves in O(1). */
struct baton__kept {
    const baton__kept_ops *ops;
    /* the keeper's bookkeeping, guarded by its mutex */
    baton__kept *knext, *kprev, *qnext;
    unsigned char kept, inq;
    unsigned char jobs_q, jobs_run;   /* KJOB_* bits queued / running (or, started, in flight) */
};

int baton__keeper_start(baton__keeper **out);
/* Waits for the node jobs in flight (except the caller's own, from a
 * report), stops every thread and frees the keeper; from a report, the last
 * worker frees it once the report returns. */
void baton__keeper_stop(baton__keeper *k);
/* 0 or BATON_ENOMEM (no thread). */
int baton__keeper_add(baton__keeper *k, baton__kept *n);
/* Also waits until no job of n runs (except the caller's own, from n's
 * report) and drops its queued ones. */
void baton__keeper_remove(baton__keeper *k, baton__kept *n);
/* keeper_remove for a node about to be freed (possibly from its own report). */
void baton__keeper_forget(baton__keeper *k, baton__kept *n);
/* N is about to be freed: if the calling thread runs a job of N (a report
 * freeing its own handle), the worker must not touch N afterwards. Needs no
 * keeper (it may be stopped already). */
void baton__kept_gone(baton__kept *n);
/* The answer to a renewal START began: the node is no longer renewing;
 * LOST = it was just lost (report() follows on a worker). */
void baton__keeper_renewed(baton__keeper *k, baton__kept *n, int lost);
/* Makes the keeper look at its nodes again now (their due times changed). */
void baton__keeper_kick(baton__keeper *k);

#endif
