/*
 * Internal declarations shared by the SQLite backend modules:
 *   sqlite.c  URI and options, opening the database file (checks, WAL), the
 *             connection pool with a deadline-aware busy handler, errors,
 *             the table, lock_info, identity, describe and the backend table
 *   lease.c   the lease: claim, renew and release, each one short write
 *             transaction; the waiting loop
 *   permits.c semaphores (permit-expirable and plain) and count-down latches
 *   coord.c   values, group membership and work queues
 *   fairrw.c  fair locks' line of waiters, read-write locks
 *   wake.c    the same-host wake-up: a sidecar file written after every
 *             release, watched with inotify by waiters of other processes
 *
 * Layout and rules: docs/sqlite-engine.md.
 */
#ifndef BATON_SQ_INT_H
#define BATON_SQ_INT_H

#include "baton/sys/backend.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#define SQ_POOL_IDLE 4           /* idle connections a client keeps for reuse */

/* One connection and what its busy handler needs: SQLite calls the handler
 * while another connection holds the write lock; it gives up at DEADLINE
 * (monotonic ns) or when W is cancelled. */
typedef struct sqconn {
    sqlite3 *db;
    int64_t deadline;
    baton_waiter *w;
} sqconn;

/* A blocked acquire, woken by the wake-up watcher. */
typedef struct sqwait {
    baton_waiter *w;
    struct sqwait *next;
} sqwait;

typedef struct sqeng {
    pthread_mutex_t mu;
    char *path;              /* the database file, absolute, as given */
    char *real;              /* its resolved real path (identity) */
    char *table;             /* validated identifier: [A-Za-z_][A-Za-z0-9_]* */
    char *wakepath;          /* <real>-baton-wake */
    char boot[40];           /* this boot's id (/proc/sys/kernel/random/boot_id) */
    int busy_timeout_ms;     /* how long one statement waits for the write lock */
    int recheck_ms;          /* the longest a waiter sleeps between claims */
    int io_timeout_ms;
    char journal[16];        /* the journal mode the database is in ("wal") */
    /* guarded by mu */
    sqconn *idle[SQ_POOL_IDLE];
    int nidle;
    int permits_ok;          /* the _sem and _permit tables exist (permits.c) */
    int latch_ok;            /* the _latch table exists */
    int coord_ok;            /* the _value, _member, _queue and _qfence tables exist (coord.c) */
    int fairrw_ok;           /* the _waiter and _rw tables exist (fairrw.c) */
    sqwait *waits;
    /* the watcher (wake.c) */
    int ino_fd;              /* -1 until started; also -1 when inotify is unavailable */
    int watching;            /* the watch is in place: releases elsewhere wake us */
    int watch_failed;        /* gave up on the watch: waiters back off instead */
    int stop;
    int stop_pipe[2];
    pthread_t thr;
    int thr_started;
} sqeng;

enum { SQ_LOCK, SQ_MEMBER, SQ_TAKER, SQ_READ, SQ_WRITE };

/* One lock state: a lock, a group member (coord.c: name = the group) or a
 * queue taker (name = the queue). */
typedef struct sqlock {
    char *name;
    uint64_t fence;          /* of the current grant, 0 when none */
    int kind;                /* SQ_* */
    char *id;                /* a member's id */
    int64_t seq;             /* a taker's item, 0 when none */
    char *data;              /* ... and its bytes */
    size_t len;
} sqlock;

/* ---- sqlite.c ------------------------------------------------------------ */

/* Milliseconds on CLOCK_BOOTTIME: monotonic, shared by every process of the
 * host, counting suspend. Leases are stored on it. */
int64_t sq_boot_ms(void);
/* A connection from the pool (or a new one). */
int sq_conn_get(sqeng *e, sqconn **out);
/* Back to the pool (or closed when the pool is full or BROKEN). */
void sq_conn_put(sqeng *e, sqconn *c, int broken);
/* Arms C's busy handler: wait for the write lock until DEADLINE (monotonic
 * ns), or until W (may be NULL) is cancelled. */
void sq_conn_arm(sqconn *c, int64_t deadline, baton_waiter *w);
/* A statement's text with every "@T" replaced by the quoted table name. */
char *sq_sql(sqeng *e, const char *tmpl);
/* Prepares SQL (with @T) on C: 0 or a baton error. */
int sq_prepare(sqeng *e, sqconn *c, const char *tmpl, sqlite3_stmt **st);
/* SQLite's result code RC on C as a baton code, with the message. */
int sq_err(sqeng *e, sqconn *c, int rc, const char *what);
/* Runs plain SQL (no results) on C. */
int sq_exec(sqeng *e, sqconn *c, const char *sql, const char *what);
/* sq_exec for a CREATE ... IF NOT EXISTS that several processes may run at
 * once on a fresh file: SQLITE_BUSY answered without the busy handler is
 * tried again until the connection's busy deadline. */
int sq_exec_ddl(sqeng *e, sqconn *c, const char *sql, const char *what);
/* BEGIN IMMEDIATE on C (armed): the write lock first, so what the
 * transaction reads stays true until its COMMIT. BATON_ECANCELED when W was
 * cancelled while waiting for the lock. */
int sq_begin(sqeng *e, sqconn *c, baton_waiter *w, const char *what);
/* A deadline for one statement's wait for the write lock: DEADLINE when
 * set and sooner, else busy_timeout_ms from now. */
int64_t sq_busy_deadline(sqeng *e, int64_t deadline);

/* ---- lease.c ------------------------------------------------------------- */

/* Waits until ATTEMPT answers something else than BATON_ELOCKED (or
 * BATON_EUNAVAILABLE: the database stayed locked), parked on W between
 * attempts: woken by releases (wake.c), at the end of the lease ATTEMPT
 * reports in *left_ms (-1 none), every recheck_ms, or by backoff without a
 * watch. DEADLINE 0 = one attempt. WHAT names the object in errors. */
int sq_wait(sqeng *e, baton_waiter *w, int64_t deadline, const char *what,
            int (*attempt)(void *arg, int64_t *left_ms), void *arg);

int sq_lease_acquire(sqeng *e, sqlock *l, baton_acquire_req *req);
int sq_lease_release(sqeng *e, sqlock *l, const baton_owner *owner);
int sq_lease_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
/* The operator's list and break (backend.h, lock_list and lock_break). */
int sq_lease_list(sqeng *e, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int sq_lease_break(sqeng *e, const char *name, uint64_t *fence);

/* The fence of a new grant: one more than STORED, at least the wall clock in us. */
uint64_t sq_next_fence(uint64_t stored);

/* ---- fairrw.c: fair locks' line, read-write locks ---------------------------- */

int sq_fairrw_tables(sqeng *e);
/* Within a claim's transaction (lease.c), at NOW: the dead leave the line,
 * *TICKET's row (0 = none yet) is refreshed; 0 when nobody live is ahead,
 * BATON_ELOCKED (with *left_ms) when someone is: a wait joins the line then
 * (*TICKET set; commit the transaction), a try (deadline 0) does not. */
int sq_fair_step(sqeng *e, sqconn *c, const char *name, baton_acquire_req *req, int64_t now, int64_t *ticket,
                 int64_t *left_ms);
/* Joins the line (when *TICKET is 0) within the caller's transaction. */
int sq_fair_join(sqeng *e, sqconn *c, const char *name, baton_acquire_req *req, int64_t now, int64_t *ticket);
/* The grant's transaction removes the waiter's row. */
int sq_fair_granted(sqeng *e, sqconn *c, int64_t *ticket);
/* A read: 1 when a live waiter of NAME is ahead of TICKET (*left_ms: its
 * lease), 0 when not, or an error. */
int sq_fair_behind(sqeng *e, const char *name, int64_t ticket, int64_t *left_ms);
/* A waiter that gave up leaves the line (its own statement) and wakes the rest. */
void sq_fair_leave(sqeng *e, int64_t ticket);
int sq_rw_acquire(sqeng *e, sqlock *l, baton_acquire_req *req);
int sq_rw_release(sqeng *e, sqlock *l, const baton_owner *owner);
int sq_rw_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
int sq_rw_break(sqeng *e, sqconn *c, const char *name, uint64_t *fence, int *n);
/* lock_info's part for a name no plain lock holds. */
int sq_rw_info(sqeng *e, sqconn *c, const char *name, baton_lockinfo *out);
/* lock_list's part for names whose read-write lock is held. */
int sq_rw_list(sqeng *e, sqconn *c, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);

/* ---- permits.c ----------------------------------------------------------- */

int sq_permits_new(void *eng, const char *name, void **st);
void sq_permits_free(void *eng, void *st);
int sq_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                       char id[BATON_PERMIT_ID_SIZE]);
int sq_permits_release(void *eng, void *st, const char *id);
int sq_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms);
int sq_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int sq_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
int sq_sem_release(void *eng, void *st, uint32_t permits);
int sq_latch_new(void *eng, const char *name, void **st);
int sq_latch_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int sq_latch_await(void *eng, void *st, int64_t deadline_ns, baton_waiter *w);
/* Available permits of NAME for lock_info; BATON_PERMITS_UNKNOWN when none. */
int sq_permits_info(sqeng *e, sqconn *c, const char *name, int64_t *out);

/* ---- coord.c: values, groups, queues --------------------------------------- */

extern const baton_value_methods sq__value_methods;
extern const baton_group_methods sq__group_methods;
extern const baton_queue_methods sq__queue_methods;
int sq_member_join(sqeng *e, sqlock *l, baton_acquire_req *req);
int sq_member_leave(sqeng *e, sqlock *l, const baton_owner *owner);
int sq_member_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
int sq_taker_take(sqeng *e, sqlock *l, baton_acquire_req *req);
int sq_taker_release(sqeng *e, sqlock *l, const baton_owner *owner);
int sq_taker_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);

/* ---- wake.c -------------------------------------------------------------- */

/* Starts watching the sidecar (once per client; idempotent). Never fails:
 * without a watch, waiters back off instead. Call before the claim that a
 * release must not slip past. */
void sq_wake_watch(sqeng *e);
/* Wakes this client's waiters. */
void sq_wake_local(sqeng *e);
/* Tells every process of the host that a lock was released (after the
 * commit). Best effort. */
void sq_wake_others(sqeng *e);
/* Stops the watcher (close). */
void sq_wake_stop(sqeng *e);

#endif
