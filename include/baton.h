/*
 * baton — distributed locks and coordination for C.
 *
 * The only header applications include. Every call returns 0 or a negative
 * BATON_E* code; baton_error_last() gives the message and the engine's native
 * code of the last failure on the calling thread.
 */
#ifndef BATON_H
#define BATON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(BATON_BUILDING) && defined(__GNUC__)
#define BATON_EXTERN(type) __attribute__((visibility("default"))) type
#else
#define BATON_EXTERN(type) extern type
#endif

#define BATON_VERSION_STRING "0.1.0"
#define BATON_VERSION_MAJOR 0
#define BATON_VERSION_MINOR 1
#define BATON_VERSION_PATCH 0

/* X(name, value, message). Codes are never renumbered; new ones are appended. */
#define BATON_ERRORS(X)                                                        \
    X(OK, 0, "success")                                                        \
    X(ELOCKED, -1, "held by another owner")                                    \
    X(ETIMEDOUT, -2, "timed out")                                              \
    X(ELOST, -3, "lease or session lost")                                      \
    X(ENOTOWNER, -4, "not the owner")                                          \
    X(EUNAVAILABLE, -5, "engine unavailable")                                  \
    X(EAUTH, -6, "authentication failed")                                      \
    X(ENOTSUP, -7, "not supported by this engine")                             \
    X(EDISABLED, -8, "backend compiled out")                                   \
    X(EINVAL, -9, "invalid argument")                                          \
    X(ECANCELED, -10, "canceled")                                              \
    X(ENOMEM, -11, "out of memory")                                            \
    X(EPROTO, -12, "protocol error")                                           \
    X(EDEADLK, -13, "would deadlock")                                          \
    X(EIO, -14, "i/o error")                                                   \
    X(ENOTHELD, -15, "not held")                                            \
    X(ESTALE, -16, "fenced off: a newer fence was seen")                        \
    X(ENOENT, -17, "not found")                                                \
    X(ECONFLICT, -18, "changed since the version given")

typedef enum {
#define BATON__ERR_ENUM(name, value, msg) BATON_##name = value,
    BATON_ERRORS(BATON__ERR_ENUM)
#undef BATON__ERR_ENUM
} baton_error_code;

typedef struct {
    int code;          /* BATON_E* */
    long native;       /* errno, HTTP status, ...; 0 when none */
    const char *message;
} baton_error;

/* Static text for a code; never NULL. */
BATON_EXTERN(const char *) baton_strerror(int code);
/* The last error on this thread; never NULL (code 0 when none). */
BATON_EXTERN(const baton_error *) baton_error_last(void);
BATON_EXTERN(void) baton_error_clear(void);
BATON_EXTERN(const char *) baton_version(void);

/* The library never writes to stderr itself: what it has to say (a server
 * that rejects WAIT, say) goes to this callback, process-wide, from any
 * thread. NULL (the default) = say nothing. */
enum { BATON_LOG_ERROR = 0, BATON_LOG_WARN = 1, BATON_LOG_INFO = 2, BATON_LOG_DEBUG = 3 };
typedef void (*baton_log_cb)(int level, const char *message, void *payload);
BATON_EXTERN(void) baton_log_set(baton_log_cb cb, void *payload);

/* ---- client ---------------------------------------------------------- */

typedef struct baton_client baton_client;

typedef struct {
    unsigned int version;
    int connect_timeout_ms;  /* default 2000 */
    int io_timeout_ms;       /* default 5000 */
    const char *password;    /* overrides the URI and the environment */
    /* version 2: the lease of an engine whose leases are the client's, not
     * each lock's (etcd: the client lease's TTL, rounded up to whole
     * seconds), when the URI sets none (etcd's ttl= wins); 0 = the
     * engine's default (30 s). `baton run -t` sets it. */
    uint32_t lease_ms;
} baton_client_options;

#define BATON_CLIENT_OPTIONS_VERSION 2
#define BATON_CLIENT_OPTIONS_INIT { BATON_CLIENT_OPTIONS_VERSION, 2000, 5000, NULL, 0 }

/* uri NULL or "" = the embedded file backend in the default directory. */
BATON_EXTERN(int) baton_client_open(baton_client **out, const char *uri,
                                    const baton_client_options *opts);
/* Closes the client. The lifetime rule, for every handle opened on a client
 * (locks, read-write locks, semaphores, permits, latches, elections):
 *  - close and free in any order: each handle is freed by its owner with its
 *    _free call, before or after baton_client_close; the client's memory
 *    goes with the last of them;
 *  - close wakes every thread blocked in a call through the client (those
 *    calls return BATON_ECANCELED), waits for every call in flight to
 *    return, waits for renewals and on_lost callbacks in flight (each is
 *    bounded by its own deadline), then releases every lock and permit the
 *    client still holds;
 *  - afterwards every call on a handle of the client answers
 *    BATON_ECANCELED ("the client of this handle is closed"), held() and
 *    fence() answer 0, and _cancel and _name still work;
 *  - from an on_lost callback, closing the client and freeing the
 *    callback's own handle are allowed.
 * A multilock holds no client: free it before or after its locks' clients
 * are closed, but before its locks are freed. */
BATON_EXTERN(void) baton_client_close(baton_client *c);
/* The backend name ("file", "redis", ...). */
BATON_EXTERN(const char *) baton_client_backend(const baton_client *c);
/* The URI with any password removed; safe to print or export. */
BATON_EXTERN(const char *) baton_client_uri(const baton_client *c);
/* One line on the client's connection or session as the engine sees it (a
 * ZooKeeper session id and its negotiated timeout). BATON_ENOTSUP when the
 * engine has nothing to say. */
BATON_EXTERN(int) baton_client_describe(baton_client *c, char *buf, size_t n);
/* For handing this client's engine to a child process (what `baton run`
 * does with BATON_URI): *var = the environment variable the engine reads
 * its credentials from when a URI carries none (static; NULL when it reads
 * none), *secret = the credentials of the URI the client was opened with,
 * in that variable's form (malloc'd; NULL when the URI had none: wipe and
 * free it). Pair it with baton_client_uri(), which has no password. 0, or
 * BATON_ENOMEM / BATON_EINVAL. */
BATON_EXTERN(int) baton_client_secret(baton_client *c, const char **var, char **secret);

/* Until when the client's session (ZooKeeper) or client lease (etcd), and
 * with it everything granted on it (locks, permits, leadership), is known
 * alive: the CLOCK_MONOTONIC time (ns) of the last confirmation plus its
 * timeout. INT64_MAX for an engine whose grants do not hang on a session
 * (each has its own lease: see baton_lock_deadline). 0 with *mono_ns set. */
BATON_EXTERN(int) baton_client_deadline(baton_client *c, int64_t *mono_ns);

/* A quorum client (RedLock) over the engines of N open clients: a majority of
 * them must grant. The members must be of one kind that has a quorum form
 * (Redis) and share credentials, database and options; they stay open and
 * independent (close them yourself). BATON_ENOTSUP otherwise. */
BATON_EXTERN(int) baton_client_open_quorum(baton_client **out, baton_client *const *members, size_t n,
                                           const baton_client_options *opts);

/* ---- lock ------------------------------------------------------------ */

typedef struct baton_lock baton_lock;

/* Called on one of the client's keeper threads (never the one that times
 * leases, so a slow callback delays no other lock's loss) when a held lock
 * is lost: its lease deadline passed without a confirmed renewal, or the
 * engine said the grant is gone. It may release, re-acquire or free its
 * own lock and close its client. Keep it short. */
typedef void (*baton_lost_cb)(baton_lock *l, void *payload);

typedef struct {
    unsigned int version;
    uint32_t lease_ms;       /* default 30000; ignored by engines without leases */
    uint32_t renew_ms;       /* 0 = lease/3; ignored when fixed_lease */
    int fixed_lease;         /* 1 = no renewal: the lock expires after lease_ms */
    int reentrant;           /* 1 = the holding thread may acquire again */
    int fair;                /* 1 = FIFO grants; BATON_ENOTSUP where the engine cannot */
    baton_lost_cb on_lost;
    void *on_lost_payload;
} baton_lock_options;

#define BATON_LOCK_OPTIONS_VERSION 1
#define BATON_LOCK_OPTIONS_INIT { BATON_LOCK_OPTIONS_VERSION, 30000, 0, 0, 0, 0, NULL, NULL }

BATON_EXTERN(int) baton_lock_open(baton_lock **out, baton_client *c, const char *name,
                                  const baton_lock_options *opts);
/* wait_ms: 0 = try once, > 0 = wait at most that long, < 0 = wait forever. */
BATON_EXTERN(int) baton_lock_acquire(baton_lock *l, int64_t wait_ms);
BATON_EXTERN(int) baton_lock_release(baton_lock *l);
/* The fencing token of the current grant; 0 when not held. */
BATON_EXTERN(uint64_t) baton_lock_fence(const baton_lock *l);
/* 1 while held and not lost. */
BATON_EXTERN(int) baton_lock_held(const baton_lock *l);
/* Until when the current grant is known to be this holder's: the
 * CLOCK_MONOTONIC time (ns, as clock_gettime gives it) before which no other
 * client can be granted it, as far as this client can tell. A leased lock:
 * its lease deadline (the time the granting or last renewing request was
 * sent + the lease - the drift margin), moving on with every renewal; a
 * grant on a session (ZooKeeper) or a client lease (etcd): the session's
 * bound (the last confirmation + its timeout); INT64_MAX when the grant has
 * no end of its own (a file lock lives until it is released or its process
 * dies). A supervisor that stops its work at this time (less what stopping
 * takes) never works beside the next holder, even if this process is
 * stopped: `baton run`'s watchdog does. 0 with *mono_ns set (it may be in
 * the past: the loss is being reported), BATON_ENOTHELD when not held. */
BATON_EXTERN(int) baton_lock_deadline(const baton_lock *l, int64_t *mono_ns);
/* Changes the lease of the held lock L to LEASE_MS from now: an
 * owner-checked renewal with the new lease (longer or shorter), and the
 * lease the keeper renews to from then on. With fixed_lease the lock is not
 * renewed, so a holder can extend it only while its work progresses
 * (node-redlock's using()). 0, BATON_ENOTHELD (not held), BATON_ELOST (lost
 * before, or the engine has another owner now), BATON_EINVAL (under 10 ms).
 * On a grant without a lease of its own (a session's, a client lease's, a
 * file lock) nothing expires by it: 0 while held, nothing changed. */
BATON_EXTERN(int) baton_lock_extend(baton_lock *l, uint32_t lease_ms);
/* The clock of the deadlines above: CLOCK_MONOTONIC in ns (the one clock
 * baton times leases with, for callers that compare against it). */
BATON_EXTERN(int64_t) baton_now_ns(void);
/* Cancels an acquire of this handle, from any thread; it returns
 * BATON_ECANCELED. A cancel is consumed by exactly one acquire: the one in
 * flight when it arrives (which may still have been granted, if the grant
 * won the race), or else the next one, which returns BATON_ECANCELED at
 * once without asking the engine. So a cancel issued just before another
 * thread starts its acquire is never lost. */
BATON_EXTERN(int) baton_lock_cancel(baton_lock *l);
/* Releases if held, then frees (also after the client was closed). */
BATON_EXTERN(void) baton_lock_free(baton_lock *l);
BATON_EXTERN(const char *) baton_lock_name(const baton_lock *l);

typedef struct {
    unsigned int version;
    int held;                 /* 1 when someone holds it */
    char holder[256];         /* "host pid tid" of a baton holder; for a foreign holder what the
                                 engine keeps: Redisson's "<uuid>:<thread id>" hash field, the
                                 simple layout's whole value (redis-py's token); "" when unknown */
    uint64_t fence;           /* the last fence granted for this name (0 if never) */
    int64_t remaining_ms;     /* remaining lease; -1 when the engine does not know */
    /* -1 below = the engine does not know (permits: BATON_PERMITS_UNKNOWN) */
    int64_t queue_length;     /* waiters queued for a fair lock */
    int64_t readers;          /* holders of a read-write lock's read side */
    int writer;               /* 1 when a read-write lock's write side is held */
    int64_t waiting_writers;  /* writers waiting on a read-write lock */
    int64_t permits;          /* available permits of a semaphore of this name (Redis: also a latch's
                                 count); signed: baton_semaphore_add can make a count negative (-2 is
                                 a real count of -2). BATON_PERMITS_UNKNOWN when no semaphore of this
                                 name is known to the engine; test for it by name (or `>= 0` for
                                 "some permits are free"), not with -1. */
} baton_lockinfo;

/* baton_lockinfo.permits when the engine knows no semaphore of that name
 * (INT64_MIN, not -1, since a semaphore's count may be -1). Before this was
 * defined the field used -1 for both; a caller that tests `permits >= 0`
 * reads both representations alike. */
#define BATON_PERMITS_UNKNOWN INT64_MIN

#define BATON_LOCK_INFO_VERSION 1
#define BATON_LOCK_INFO_INIT { BATON_LOCK_INFO_VERSION, 0, "", 0, -1, -1, -1, -1, -1, BATON_PERMITS_UNKNOWN }

/* What the engine knows about NAME, held by anyone. */
BATON_EXTERN(int) baton_lock_info(baton_client *c, const char *name, baton_lockinfo *out);

/* The names of the locks held now whose name starts with PREFIX (NULL or ""
 * = all): FN(PAYLOAD, NAME) once each, in no particular order; FN returning
 * nonzero stops early. BATON_ENOTSUP where the engine cannot enumerate. */
typedef int (*baton_name_cb)(void *payload, const char *name);
BATON_EXTERN(int) baton_lock_list(baton_client *c, const char *prefix, baton_name_cb fn, void *payload);
/* For operators: breaks the lock NAME, whoever holds it, and bumps its fence
 * past every fence granted so far (*fence, when not NULL, gets the new one),
 * so a holder that still believes it holds the lock is refused by any store
 * that checks fences (docs/fencing.md). 0 when a holder was removed,
 * BATON_ENOTHELD when nobody held it (the fence is bumped all the same),
 * BATON_ENOTSUP where the engine cannot (the file engine: the kernel keeps
 * a live process's lock; stop that process instead). */
BATON_EXTERN(int) baton_lock_force_unlock(baton_client *c, const char *name, uint64_t *fence);
/* The same call by its first name. */
BATON_EXTERN(int) baton_lock_break(baton_client *c, const char *name, uint64_t *fence);

/* ---- read-write lock ---------------------------------------------------
 * Many readers or one writer. The two sides are ordinary baton_lock handles
 * owned by the rwlock (acquire/release/fence/held/cancel work on them); do not
 * free them. Both sides share one owner: the thread holding the write side may
 * take the read side (downgrade), then release the write side. Taking the
 * write side while holding the read side is refused with BATON_EDEADLK (no
 * upgrade). A waiting writer is not starved by a stream of new readers. */
typedef struct baton_rwlock baton_rwlock;

BATON_EXTERN(int) baton_rwlock_open(baton_rwlock **out, baton_client *c, const char *name,
                                    const baton_lock_options *opts);
BATON_EXTERN(baton_lock *) baton_rwlock_read(baton_rwlock *rw);
BATON_EXTERN(baton_lock *) baton_rwlock_write(baton_rwlock *rw);
/* Releases whatever side is held, then frees both. */
BATON_EXTERN(void) baton_rwlock_free(baton_rwlock *rw);

/* ---- semaphore -----------------------------------------------------------
 * N permits shared by every client; permits are not owned (like Redisson's
 * RSemaphore): anyone may release, and a holder that dies never gives its
 * permits back (use baton_permits_* for that). A semaphore that was never
 * set has 0 permits: an acquire waits until someone sets or adds some. */
typedef struct baton_semaphore baton_semaphore;

BATON_EXTERN(int) baton_semaphore_open(baton_semaphore **out, baton_client *c, const char *name);
/* wait_ms as for locks. A try that finds too few permits answers
 * BATON_ELOCKED, meaning "no permit now", not "held by another owner". */
BATON_EXTERN(int) baton_semaphore_acquire(baton_semaphore *s, uint32_t permits, int64_t wait_ms);
BATON_EXTERN(int) baton_semaphore_release(baton_semaphore *s, uint32_t permits);
/* Sets the number of permits if it was never set; *was_set = 1 when this call set it. */
BATON_EXTERN(int) baton_semaphore_try_set(baton_semaphore *s, uint32_t permits, int *was_set);
BATON_EXTERN(int) baton_semaphore_add(baton_semaphore *s, int64_t delta);
BATON_EXTERN(int) baton_semaphore_drain(baton_semaphore *s, uint64_t *drained);
/* A count made negative by baton_semaphore_add reads as 0 here (nothing is
 * available); baton_lock_info's permits shows the signed value. */
BATON_EXTERN(int) baton_semaphore_available(baton_semaphore *s, uint64_t *out);
/* Cancels a blocked acquire; like baton_lock_cancel, a cancel with no
 * acquire in flight is kept for the next one (the same for permits and
 * latches: acquire / await). */
BATON_EXTERN(int) baton_semaphore_cancel(baton_semaphore *s);
BATON_EXTERN(void) baton_semaphore_free(baton_semaphore *s);

/* ---- permit-expirable semaphore --------------------------------------------
 * Each acquired permit has an id and its own lease; an expired permit returns
 * to the pool by itself. */
typedef struct baton_permits baton_permits;
#define BATON_PERMIT_ID_SIZE 33   /* 32 hex digits + NUL */

BATON_EXTERN(int) baton_permits_open(baton_permits **out, baton_client *c, const char *name);
BATON_EXTERN(int) baton_permits_acquire(baton_permits *p, uint32_t lease_ms, int64_t wait_ms,
                                        char id[BATON_PERMIT_ID_SIZE]);
/* BATON_ENOTOWNER for an unknown or expired id. */
BATON_EXTERN(int) baton_permits_release(baton_permits *p, const char *id);
BATON_EXTERN(int) baton_permits_renew(baton_permits *p, const char *id, uint32_t lease_ms);
BATON_EXTERN(int) baton_permits_try_set(baton_permits *p, uint32_t permits, int *was_set);
BATON_EXTERN(int) baton_permits_add(baton_permits *p, int64_t delta);
BATON_EXTERN(int) baton_permits_available(baton_permits *p, uint64_t *out);
BATON_EXTERN(int) baton_permits_cancel(baton_permits *p);
BATON_EXTERN(void) baton_permits_free(baton_permits *p);

/* ---- count-down latch ------------------------------------------------------ */
typedef struct baton_latch baton_latch;

BATON_EXTERN(int) baton_latch_open(baton_latch **out, baton_client *c, const char *name);
/* Sets the count if the latch is not active; *was_set = 1 when this call set it. */
BATON_EXTERN(int) baton_latch_try_set(baton_latch *l, uint64_t count, int *was_set);
BATON_EXTERN(int) baton_latch_count_down(baton_latch *l);
BATON_EXTERN(int) baton_latch_count(baton_latch *l, uint64_t *out);
/* Waits until the count is zero: 0, BATON_ETIMEDOUT, BATON_ECANCELED. */
BATON_EXTERN(int) baton_latch_await(baton_latch *l, int64_t wait_ms);
BATON_EXTERN(int) baton_latch_cancel(baton_latch *l);
BATON_EXTERN(void) baton_latch_free(baton_latch *l);

/* ---- leader election -------------------------------------------------------
 * Candidates campaign for leadership of NAME; the oldest campaign leads, the
 * others wait in line (each watches only the one before it where the engine
 * can). The leader proclaims a value (an address, a host name) that anyone
 * can read or observe. Leadership is a lock: it has a fencing token (the
 * term), is lost like a lock (session expiry, an unrenewable lease) and is
 * then reported once through on_lost. Engines: ZooKeeper (Curator's
 * LeaderLatch layout) and etcd (its election API's layout) have their own;
 * on file, SQLite, PostgreSQL, MySQL and Redis the library builds it on a
 * lock plus a value: a candidate is the lock "baton:election:NAME" (fair
 * where the engine has fair locks; its fence is the term) and the leader
 * keeps the record "<term>\n<holder>\n<value>" in the value of that name (lock and
 * value names starting with "baton:election:" are reserved for it); an
 * observer there re-reads at least every second, so a leader that died
 * with nobody in line is seen gone within its lease + 1 s (docs/engines.md).
 * RedLock (no values) answers BATON_ENOTSUP. */
typedef struct baton_election baton_election;

/* Called on the keeper thread when this candidate's leadership is lost. */
typedef void (*baton_election_lost_cb)(baton_election *e, void *payload);

typedef struct {
    unsigned int version;
    uint32_t lease_ms;       /* engines with leases: as for locks (default 30000) */
    baton_election_lost_cb on_lost;
    void *on_lost_payload;
} baton_election_options;

#define BATON_ELECTION_OPTIONS_VERSION 1
#define BATON_ELECTION_OPTIONS_INIT { BATON_ELECTION_OPTIONS_VERSION, 30000, NULL, NULL }
#define BATON_ELECTION_VALUE_MAX 1024   /* bytes of a proclaimed value, NUL excluded */

BATON_EXTERN(int) baton_election_open(baton_election **out, baton_client *c, const char *name,
                                      const baton_election_options *opts);
/* Joins the election with VALUE and waits until this candidate leads: 0
 * (leader), BATON_ELOCKED (wait_ms 0 and someone else leads; the candidacy is
 * withdrawn), BATON_ETIMEDOUT, BATON_ECANCELED. wait_ms as for locks. */
BATON_EXTERN(int) baton_election_campaign(baton_election *e, const char *value, int64_t wait_ms);
/* Gives up leadership (the next candidate in line leads). BATON_ENOTHELD when
 * not leading, BATON_ELOST when leadership was lost before. */
BATON_EXTERN(int) baton_election_resign(baton_election *e);
/* 1 while this candidate leads and has not lost it. */
BATON_EXTERN(int) baton_election_is_leader(const baton_election *e);
/* The term's fencing token while leading; 0 otherwise. */
BATON_EXTERN(uint64_t) baton_election_fence(const baton_election *e);
/* The leader changes its value without a new term. BATON_ENOTHELD when not
 * leading, BATON_ELOST when its leadership was lost (the engine has another
 * term now); BATON_ENOTSUP where the engine cannot. */
BATON_EXTERN(int) baton_election_proclaim(baton_election *e, const char *value);
/* Who leads now: its value (cut to n bytes, NUL-terminated) and fence (may be
 * NULL). BATON_ENOTHELD when nobody leads. */
BATON_EXTERN(int) baton_election_leader(baton_election *e, char *value, size_t n, uint64_t *fence);
/* Waits until the leader differs from the one this handle reported last
 * (the first call answers at once): 0 with the new leader (fence 0 and value
 * "" when nobody leads), BATON_ETIMEDOUT, BATON_ECANCELED. wait_ms as for
 * locks. */
BATON_EXTERN(int) baton_election_observe(baton_election *e, char *value, size_t n, uint64_t *fence,
                                         int64_t wait_ms);
/* baton_lock_deadline for the leadership this candidate holds. */
BATON_EXTERN(int) baton_election_deadline(const baton_election *e, int64_t *mono_ns);
/* Wakes a blocked campaign or observe (any thread): BATON_ECANCELED. With
 * neither in flight, the next campaign and the next observe each return
 * BATON_ECANCELED at once (see baton_lock_cancel). */
BATON_EXTERN(int) baton_election_cancel(baton_election *e);
/* Listeners: the callback form of baton_election_observe. From a thread of
 * its own, CB is called once with the leader now and again after every
 * change: EVENT BATON_ELECTION_LEADER (a new leader, a new term: FENCE),
 * BATON_ELECTION_VALUE (the leader proclaimed VALUE, same term) or
 * BATON_ELECTION_NONE (nobody leads: VALUE "", FENCE 0). Like a watch it may
 * skip intermediate states, never the last. VALUE is valid during the call
 * only. A failing engine is retried every second (the callback is not
 * called for failures). One listener per handle: BATON_EINVAL for a second;
 * CB must not free E. */
enum { BATON_ELECTION_LEADER = 1, BATON_ELECTION_VALUE = 2, BATON_ELECTION_NONE = 3 };
typedef void (*baton_election_cb)(baton_election *e, int event, const char *value, uint64_t fence,
                                  void *payload);
BATON_EXTERN(int) baton_election_listen(baton_election *e, baton_election_cb cb, void *payload);
/* Stops the listener and waits for a callback in flight; never from the
 * callback. BATON_ENOTHELD without one. baton_election_free stops it too. */
BATON_EXTERN(int) baton_election_unlisten(baton_election *e);
/* Stops a listener, resigns if leading, then frees. */
BATON_EXTERN(void) baton_election_free(baton_election *e);

/* ---- values ----------------------------------------------------------------
 * A small named datum every client can read, set and watch: configuration,
 * a service's address, progress published by a worker (ZooKeeper's data
 * publish/subscribe, etcd's keys, Redisson's RBucket). Each change gives the
 * value a new version, larger than every version NAME had before (deletion
 * and re-creation included); version 0 means "absent". A watcher is told of
 * the value after a change, not of every change: after a burst of sets it
 * may skip intermediate values but always ends on the last one. Values are
 * their own namespace: a value NAME and a lock NAME do not meet. */
typedef struct baton_value baton_value;

#define BATON_VALUE_MAX (512 * 1024) /* bytes of a value */
#define BATON_VALUE_ANY UINT64_MAX  /* expect: set or delete whatever version is there */

typedef struct {
    char *data;        /* malloc'd and NUL-terminated (len excludes the NUL); NULL when absent */
    size_t len;
    uint64_t version;  /* 0 = absent */
} baton_value_data;

/* Frees data and zeroes *d; safe on a zeroed or cleared one. */
BATON_EXTERN(void) baton_value_data_clear(baton_value_data *d);

BATON_EXTERN(int) baton_value_open(baton_value **out, baton_client *c, const char *name);
/* The value now. *out is overwritten, never freed: clear a previous result
 * (baton_value_data_clear) before reusing it, here and in watch.
 * BATON_ENOENT when absent (out zeroed). */
BATON_EXTERN(int) baton_value_get(baton_value *v, baton_value_data *out);
/* Sets the value to LEN bytes of DATA (any bytes; at most BATON_VALUE_MAX).
 * EXPECT: BATON_VALUE_ANY = unconditionally; 0 = only if absent (create);
 * else only if the version is EXPECT now (compare-and-set). BATON_ECONFLICT
 * when the condition fails, nothing changed. *version (may be NULL)
 * receives the new version. */
BATON_EXTERN(int) baton_value_set(baton_value *v, const void *data, size_t len, uint64_t expect,
                                  uint64_t *version);
/* Deletes the value; EXPECT as for set. BATON_ENOENT when absent. */
BATON_EXTERN(int) baton_value_delete(baton_value *v, uint64_t expect);
/* Waits until the version differs from KNOWN (0 = absent), then gives the
 * value now in *out (version 0 and data NULL when it was deleted): 0,
 * BATON_ETIMEDOUT, BATON_ECANCELED. wait_ms as for locks. Woken by the
 * engine where it notifies; engines that cannot re-read at a bound their
 * docs state. */
BATON_EXTERN(int) baton_value_watch(baton_value *v, uint64_t known, baton_value_data *out, int64_t wait_ms);
/* The callback form: from a thread of its own, CB is called once with the
 * value now (version 0 when absent) and again after every change (possibly
 * skipping intermediate values, never the last), until
 * baton_value_unsubscribe() or baton_value_free(). D is valid during the
 * call only. A watch that fails (the engine unreachable) is retried every
 * second; the callback is not called for failures. One subscription per
 * handle: BATON_EINVAL for a second. CB must not free V. */
typedef void (*baton_value_cb)(baton_value *v, const baton_value_data *d, void *payload);
BATON_EXTERN(int) baton_value_subscribe(baton_value *v, baton_value_cb cb, void *payload);
/* Stops the subscription and waits for a callback in flight; never from
 * the callback. BATON_ENOTHELD without one. */
BATON_EXTERN(int) baton_value_unsubscribe(baton_value *v);
/* Wakes a blocked watch (see baton_lock_cancel). */
BATON_EXTERN(int) baton_value_cancel(baton_value *v);
BATON_EXTERN(const char *) baton_value_name(const baton_value *v);
BATON_EXTERN(void) baton_value_free(baton_value *v);

/* ---- shared counter --------------------------------------------------------
 * A signed 64-bit counter kept in the value NAME as decimal text (kazoo's
 * Counter layout on ZooKeeper; any engine with values). Absent reads as 0. */
typedef struct baton_counter baton_counter;

BATON_EXTERN(int) baton_counter_open(baton_counter **out, baton_client *c, const char *name);
/* The count and its version (either may be NULL). BATON_EPROTO when the
 * value is not a decimal integer. */
BATON_EXTERN(int) baton_counter_get(baton_counter *k, int64_t *count, uint64_t *version);
/* Adds DELTA atomically (compare-and-set, retried); *after may be NULL.
 * BATON_EINVAL on overflow. */
BATON_EXTERN(int) baton_counter_add(baton_counter *k, int64_t delta, int64_t *after);
/* Sets the count if its version is EXPECT (Curator's trySetCount; see
 * baton_value_set for EXPECT): BATON_ECONFLICT otherwise. */
BATON_EXTERN(int) baton_counter_set(baton_counter *k, int64_t count, uint64_t expect, uint64_t *version);
/* Waits until the version differs from KNOWN (baton_value_watch). */
BATON_EXTERN(int) baton_counter_watch(baton_counter *k, uint64_t known, int64_t *count, uint64_t *version,
                                      int64_t wait_ms);
BATON_EXTERN(int) baton_counter_cancel(baton_counter *k);
BATON_EXTERN(void) baton_counter_free(baton_counter *k);

/* ---- group membership ------------------------------------------------------
 * Members of a group (the machines of a cluster, the instances of a
 * service) join with an id and a value (an address); a member is
 * ephemeral: it leaves when it says so, and is gone within its session
 * or lease when it dies (ZooKeeper's ephemeral nodes, etcd's leases, a
 * renewed lease elsewhere). Anyone can list the members and watch the list.
 * Membership is held like a lock: it is renewed, and its loss is reported
 * once through on_lost. */
typedef struct baton_group baton_group;

#define BATON_MEMBER_ID_MAX 128      /* bytes of a member id: [A-Za-z0-9._-] */
#define BATON_MEMBER_VALUE_MAX 1024  /* bytes of a member's value */

typedef void (*baton_group_lost_cb)(baton_group *g, void *payload);

typedef struct {
    unsigned int version;
    uint32_t lease_ms;       /* engines with leases: as for locks (default 30000) */
    baton_group_lost_cb on_lost;
    void *on_lost_payload;
} baton_group_options;

#define BATON_GROUP_OPTIONS_VERSION 1
#define BATON_GROUP_OPTIONS_INIT { BATON_GROUP_OPTIONS_VERSION, 30000, NULL, NULL }

typedef struct {
    char *id;
    char *value;
} baton_member;

typedef struct {
    baton_member *members;   /* sorted by id */
    size_t n;
} baton_members;

BATON_EXTERN(void) baton_members_clear(baton_members *m);

BATON_EXTERN(int) baton_group_open(baton_group **out, baton_client *c, const char *name,
                                   const baton_group_options *opts);
/* Joins with ID (NULL = a random one: see baton_group_id) and VALUE ("" allowed).
 * BATON_ELOCKED when a live member already has ID. BATON_EDEADLK when this
 * handle is a member already. */
BATON_EXTERN(int) baton_group_join(baton_group *g, const char *id, const char *value);
/* BATON_ENOTHELD when not a member, BATON_ELOST when membership was lost. */
BATON_EXTERN(int) baton_group_leave(baton_group *g);
/* 1 while this handle is a member and has not lost it. */
BATON_EXTERN(int) baton_group_is_member(const baton_group *g);
/* This handle's member id (after a join; NULL before). */
BATON_EXTERN(const char *) baton_group_id(const baton_group *g);
/* baton_lock_deadline for the membership. */
BATON_EXTERN(int) baton_group_deadline(const baton_group *g, int64_t *mono_ns);
/* The live members now. *out is overwritten, never freed: clear a previous
 * result (baton_members_clear) before reusing it, here and in watch. */
BATON_EXTERN(int) baton_group_members(baton_group *g, baton_members *out);
/* Waits until the members differ from the ones this handle reported last
 * (the first call answers at once), then gives them: 0, BATON_ETIMEDOUT,
 * BATON_ECANCELED. */
BATON_EXTERN(int) baton_group_watch(baton_group *g, baton_members *out, int64_t wait_ms);
BATON_EXTERN(int) baton_group_cancel(baton_group *g);
/* Leaves if a member, then frees. */
BATON_EXTERN(void) baton_group_free(baton_group *g);

/* ---- double barrier ----------------------------------------------------------
 * N members enter, and all proceed once N have entered; each leaves, and
 * all proceed once every one has left (Curator's and kazoo's
 * DoubleBarrier). Built on the group NAME plus the value NAME (a "ready"
 * mark), so any engine with both carries it. A member that dies leaves. */
typedef struct baton_barrier baton_barrier;

BATON_EXTERN(int) baton_barrier_open(baton_barrier **out, baton_client *c, const char *name, uint32_t count,
                                     const baton_group_options *opts);
/* Joins and waits until COUNT members have entered: 0, BATON_ETIMEDOUT (the
 * entry is withdrawn), BATON_ECANCELED. */
BATON_EXTERN(int) baton_barrier_enter(baton_barrier *b, int64_t wait_ms);
/* Leaves and waits until every member has left. */
BATON_EXTERN(int) baton_barrier_leave(baton_barrier *b, int64_t wait_ms);
BATON_EXTERN(int) baton_barrier_cancel(baton_barrier *b);
BATON_EXTERN(void) baton_barrier_free(baton_barrier *b);

/* ---- work queue ----------------------------------------------------------------
 * FIFO with at-least-once take: a taken item is locked to its taker (renewed
 * like a lock) until done, and goes back to the queue when the taker gives
 * it back, dies, or loses it (then on_lost is called once). Two live takers
 * never hold one item at once. */
typedef struct baton_queue baton_queue;
typedef struct baton_queue_item baton_queue_item;

#define BATON_QUEUE_ITEM_MAX (512 * 1024)

typedef void (*baton_item_lost_cb)(baton_queue_item *it, void *payload);

typedef struct {
    unsigned int version;
    uint32_t lease_ms;       /* of a taken item, on engines with leases (default 30000) */
    baton_item_lost_cb on_lost;
    void *on_lost_payload;
} baton_queue_options;

#define BATON_QUEUE_OPTIONS_VERSION 1
#define BATON_QUEUE_OPTIONS_INIT { BATON_QUEUE_OPTIONS_VERSION, 30000, NULL, NULL }

BATON_EXTERN(int) baton_queue_open(baton_queue **out, baton_client *c, const char *name,
                                   const baton_queue_options *opts);
/* Appends LEN bytes of DATA (1..BATON_QUEUE_ITEM_MAX). */
BATON_EXTERN(int) baton_queue_put(baton_queue *q, const void *data, size_t len);
/* Takes the oldest item nobody holds and locks it to this taker: 0 with
 * *item, BATON_ENOENT (wait_ms 0 and none there), BATON_ETIMEDOUT,
 * BATON_ECANCELED. wait_ms as for locks. */
BATON_EXTERN(int) baton_queue_take(baton_queue *q, baton_queue_item **item, int64_t wait_ms);
/* Items waiting (not taken). */
BATON_EXTERN(int) baton_queue_size(baton_queue *q, uint64_t *waiting);
BATON_EXTERN(int) baton_queue_cancel(baton_queue *q);
/* Frees the queue; free its items first (or after: they still work). */
BATON_EXTERN(void) baton_queue_free(baton_queue *q);

/* The item's bytes (NUL-terminated; *len may be NULL), valid until the item is freed. */
BATON_EXTERN(const char *) baton_queue_item_data(const baton_queue_item *it, size_t *len);
/* 1 while the item is still locked to this taker. */
BATON_EXTERN(int) baton_queue_item_held(const baton_queue_item *it);
/* A number that identifies this take: larger than any earlier take's from the queue (a fence). */
BATON_EXTERN(uint64_t) baton_queue_item_fence(const baton_queue_item *it);
/* baton_lock_deadline for the item's lock. */
BATON_EXTERN(int) baton_queue_item_deadline(const baton_queue_item *it, int64_t *mono_ns);
/* Removes the item for good and frees IT: 0, or BATON_ELOST when it was no
 * longer ours (it went back to the queue; IT is freed all the same). */
BATON_EXTERN(int) baton_queue_done(baton_queue_item *it);
/* Gives the item back (it can be taken again at once; where it stands in
 * line is the engine's: docs/engines.md) and frees IT. */
BATON_EXTERN(int) baton_queue_return(baton_queue_item *it);
/* Frees IT; an item neither done nor returned is returned. */
BATON_EXTERN(void) baton_queue_item_free(baton_queue_item *it);

/* ---- rate limiter ------------------------------------------------------------
 * At most PERMITS admissions per INTERVAL_MS, overall or per client
 * (Redisson's RRateLimiter, RateType OVERALL / PER_CLIENT), by the generic
 * cell rate algorithm (GCRA, redis-cell's): the engine keeps one
 * "theoretical arrival time" (TAT) per limiter and decides each admission
 * in one atomic step on its own clock (Redis: one script on the server's
 * TIME; PostgreSQL: one statement on clock_timestamp(); SQLite: one
 * transaction; file: under the file lock, the local clock). Admissions are
 * spaced INTERVAL_MS / PERMITS apart; after idleness up to BURST pass at
 * once. A limiter's configuration lives with its state at the engine: the
 * first open stores it, a later open with another configuration answers
 * BATON_ECONFLICT (naming both) unless its options say replace
 * (Redisson's setRate: the new rate applies from the next admission; the
 * TAT is kept, so a change never hands out a fresh burst). docs/ratelimit.md. */
typedef struct baton_ratelimit baton_ratelimit;

#define BATON_RATELIMIT_OVERALL    0 /* one limit shared by every client */
#define BATON_RATELIMIT_PER_CLIENT 1 /* each client (client_id) has the limit to itself */

typedef struct {
    unsigned int version;
    uint32_t permits;        /* admissions per interval (>= 1; default 1) */
    uint32_t interval_ms;    /* >= 1 (default 1000) */
    uint32_t burst;          /* admissions that may pass at once after idleness; 0 = permits */
    int scope;               /* BATON_RATELIMIT_OVERALL or _PER_CLIENT */
    const char *client_id;   /* per client: who "the client" is; NULL = one random id per
                                handle (Redisson's per-instance id). 1..64 bytes of [A-Za-z0-9._:-] */
    int replace;             /* 1 = store this configuration even if another one is stored */
} baton_ratelimit_options;

#define BATON_RATELIMIT_OPTIONS_VERSION 1
#define BATON_RATELIMIT_OPTIONS_INIT { BATON_RATELIMIT_OPTIONS_VERSION, 1, 1000, 0, BATON_RATELIMIT_OVERALL, NULL, 0 }

/* Opens the limiter NAME (a namespace of its own) and stores or checks its
 * configuration at the engine (one round trip): BATON_EINVAL for bad
 * options, BATON_ECONFLICT when NAME is configured otherwise, BATON_ENOTSUP
 * on an engine without rate limiters (saying why). opts NULL = defaults. */
BATON_EXTERN(int) baton_ratelimit_open(baton_ratelimit **out, baton_client *c, const char *name,
                                       const baton_ratelimit_options *opts);
/* Takes PERMITS admissions (1..burst; more could never pass: BATON_EINVAL):
 * 0 admitted; wait_ms 0: BATON_ELOCKED when it would have to wait; else
 * waits (wait_ms as for locks) on the engine's answer "retry after D":
 * BATON_ETIMEDOUT when the next chance lies past the deadline (answered at
 * once, without sleeping until it), BATON_ECANCELED. */
BATON_EXTERN(int) baton_ratelimit_acquire(baton_ratelimit *r, uint32_t permits, int64_t wait_ms);
/* One try: 0 admitted (*retry_after_ms = 0), or BATON_ELOCKED with
 * *retry_after_ms = how long until PERMITS would pass (ceiling; may be NULL). */
BATON_EXTERN(int) baton_ratelimit_try(baton_ratelimit *r, uint32_t permits, int64_t *retry_after_ms);

typedef struct {
    uint32_t permits, interval_ms, burst; /* the stored configuration */
    uint64_t available;      /* admissions that would pass now */
    int64_t next_ms;         /* until one more would pass (0 = now) */
} baton_ratelimit_state;

/* What the engine holds for the limiter now, without taking anything:
 * BATON_ENOENT when nobody configured it. */
BATON_EXTERN(int) baton_ratelimit_state_get(baton_ratelimit *r, baton_ratelimit_state *out);
/* The same by name, without opening it (baton status): scope and client_id
 * as in the options (client_id NULL with per client: BATON_EINVAL). */
BATON_EXTERN(int) baton_ratelimit_inspect(baton_client *c, const char *name, int scope, const char *client_id,
                                          baton_ratelimit_state *out);
/* Cancels a waiting acquire (or, with none in flight, the next one). */
BATON_EXTERN(int) baton_ratelimit_cancel(baton_ratelimit *r);
BATON_EXTERN(void) baton_ratelimit_free(baton_ratelimit *r);

/* ---- event-loop API ------------------------------------------------------
 * Start an acquire or a release and learn its result later from a callback,
 * driven by the caller's event loop (hiredis's async context, libcurl's
 * multi): docs/async.md. Loop adapters: include/baton/adapters/{poll,libuv,
 * libevent}.h.
 *
 * Threads: a callback runs only inside baton_client_process() on the thread
 * that called it (or, at close, inside baton_client_close() on the closing
 * thread), never inside the call that started the operation. Start calls may
 * come from any thread. Each engine either waits natively (no thread per
 * waiter) or the core runs the blocking call on a bounded worker pool; see
 * docs/async.md for which engine does what. Renewal and loss of a lock
 * granted this way work as for a blocking grant (the keeper renews it,
 * on_lost reports its loss). */

/* The result of one operation started on L: RC is what the blocking call
 * would have returned (0, BATON_ELOCKED for wait_ms 0, BATON_ETIMEDOUT,
 * BATON_ECANCELED, ...); ARG is the caller's. The callback may start the next
 * operation on L, release it, or free it. */
typedef void (*baton_async_cb)(baton_lock *l, int rc, void *arg);
/* Starts an acquire of L waiting up to WAIT_MS (0 = one try, -1 = forever).
 * 0 when started: CB is then called exactly once. An error at once, CB never
 * called: BATON_EINVAL when L already has an operation in flight (one at a
 * time per handle, as one acquire at a time per blocking handle), or when L
 * is held (async handles are not reentrant); BATON_ECANCELED when the client
 * is closed or closing. baton_lock_cancel(L) makes it complete with
 * BATON_ECANCELED (or 0, when the grant won the race: release it then). */
BATON_EXTERN(int) baton_lock_acquire_async(baton_lock *l, int64_t wait_ms, baton_async_cb cb, void *arg);
/* Starts the release of L; CB gets what baton_lock_release would return. */
BATON_EXTERN(int) baton_lock_release_async(baton_lock *l, baton_async_cb cb, void *arg);
/* One file descriptor (an eventfd) that is readable while completions wait
 * for baton_client_process(); watch it for reading and never read it
 * yourself. -1 with the error set when it cannot be made. The same fd for the
 * client's life; closed by baton_client_close. */
BATON_EXTERN(int) baton_client_fd(baton_client *c);
/* Runs the callbacks of every completed operation (and any engine work that
 * needs the caller's thread). Never blocks on the engine. The number of
 * callbacks run, or an error. */
BATON_EXTERN(int) baton_client_process(baton_client *c);
/* Milliseconds until baton_client_process() must run even if the fd is not
 * readable; -1 when only readiness matters (today's engines and the worker
 * pool complete through the fd). Arm your loop's timer with it. */
BATON_EXTERN(int64_t) baton_client_timeout_ms(baton_client *c);
/* Closing a client with operations in flight: each pending callback is
 * called exactly once with BATON_ECANCELED, inside baton_client_close on the
 * closing thread, before close releases what the client holds; nothing is
 * called after close returns. Freeing a lock with an operation in flight
 * cancels the operation and waits for it to stop; its callback is then never
 * called. */

/* ---- multilock --------------------------------------------------------------
 * All-or-nothing over baton locks of any engines and clients. Members are
 * taken in one global order (engine, URI, name), so two multilocks over
 * overlapping sets never deadlock; on failure what was taken is released.
 * The multilock does not own its members: free them after it. */
typedef struct baton_multilock baton_multilock;

BATON_EXTERN(int) baton_multilock_open(baton_multilock **out, baton_lock *const *locks, size_t n);
BATON_EXTERN(int) baton_multilock_acquire(baton_multilock *m, int64_t wait_ms);
BATON_EXTERN(int) baton_multilock_release(baton_multilock *m);
BATON_EXTERN(int) baton_multilock_held(const baton_multilock *m);
/* The members' fences, in the order the locks were given; returns the member count. */
BATON_EXTERN(size_t) baton_multilock_fences(const baton_multilock *m, uint64_t *out, size_t cap);
/* Cancels the multilock's acquire, or (with none in flight) the next one;
 * the cancel is kept on the multilock, never left on its member locks. */
BATON_EXTERN(int) baton_multilock_cancel(baton_multilock *m);
BATON_EXTERN(void) baton_multilock_free(baton_multilock *m);

/* ---- engines ---------------------------------------------------------------
 * What every engine baton knows does, whether this build has it or not: the
 * one source `baton engines`, the README matrix and the URI option tables
 * are made from. */
#define BATON_PRIM_LOCK     (1u << 0) /* baton_lock_* */
#define BATON_PRIM_FAIR     (1u << 1) /* baton_lock_options.fair */
#define BATON_PRIM_RWLOCK   (1u << 2) /* baton_rwlock_* */
#define BATON_PRIM_SEM      (1u << 3) /* baton_semaphore_* */
#define BATON_PRIM_PERMITS  (1u << 4) /* baton_permits_* */
#define BATON_PRIM_LATCH    (1u << 5) /* baton_latch_* */
#define BATON_PRIM_ELECTION (1u << 6) /* baton_election_* */
#define BATON_PRIM_LIST     (1u << 7) /* baton_lock_list */
#define BATON_PRIM_BREAK    (1u << 8) /* baton_lock_break */
#define BATON_PRIM_INFO     (1u << 9) /* baton_lock_info */
#define BATON_PRIM_VALUE    (1u << 10) /* baton_value_* (and baton_counter_*, built on it) */
#define BATON_PRIM_GROUP    (1u << 11) /* baton_group_* (and baton_barrier_*, with values) */
#define BATON_PRIM_QUEUE    (1u << 12) /* baton_queue_* */
#define BATON_PRIM_RATELIMIT (1u << 13) /* baton_ratelimit_* */

#define BATON_FEATURE_LEASE   (1u << 0) /* grants expire unless renewed (the client renews them) */
#define BATON_FEATURE_NOTIFY  (1u << 1) /* waiters are woken by the engine, not by polling */
#define BATON_FEATURE_FAIR    (1u << 2) /* FIFO grants on request */
#define BATON_FEATURE_SESSION (1u << 3) /* the engine itself reports lost grants (session, lease) */

typedef struct {
    const char *name;        /* as written in the URI's query: "ttl" */
    const char *type;        /* "int", "ms", "bool", "enum", "string", "path" */
    const char *def;         /* the default, as the URI would spell it; NULL = none (see help) */
    const char *help;        /* one sentence */
    long long min, max;      /* int and ms: the accepted range */
    const char *const *choices; /* enum: the values, NULL-terminated */
    const char *schemes;     /* NULL = every scheme of the engine; else the ones it applies to,
                                space-separated ("etcds") */
    const char *alias;       /* another accepted spelling, or NULL */
    const char *needs;       /* NULL, or when the option is used at all: space-separated
                                "other=value" or "other" (given); given without any of them,
                                it has no effect and opening the client warns */
} baton_engine_option;

typedef struct {
    const char *name;            /* "redis" */
    const char *const *schemes;  /* NULL-terminated: "redis", "rediss" */
    const char *summary;         /* one line */
    const char *uri;             /* the URI's form: "redis[s]://[user:password@]host[:port][/db]" */
    unsigned primitives;         /* BATON_PRIM_* */
    unsigned features;           /* BATON_FEATURE_* */
    const char *const *notes;    /* NULL-terminated lines: limits of a primitive ("rwlock: mode=session only"),
                                    why one is absent */
    const baton_engine_option *options; /* terminated by a NULL name */
    int built;                   /* 1 when this library has it */
    const char *why_not;         /* built 0: why (the missing package, or switched off) */
} baton_engine_info;

/* Every engine baton knows, in a fixed order; *n receives the count. */
BATON_EXTERN(const baton_engine_info *const *) baton_engines(size_t *n);
/* The engine that answers SCHEME ("rediss") or is named NAME; NULL when none. */
BATON_EXTERN(const baton_engine_info *) baton_engine_find(const char *scheme_or_name);

/* ---- fence files -----------------------------------------------------------
 * Fencing the caller's own files with a grant's fence (docs/fencing.md). The
 * fence file PATH holds the highest fence admitted so far, in decimal (a
 * missing or empty file: none yet). Under an exclusive flock(2) on PATH.lock
 * (created beside it, mode 0666 & ~umask), FENCE is admitted when it is >=
 * the stored fence — equal is the same holder writing again; a later holder
 * always has a larger one — and stored by writing PATH.tmp and renaming it
 * over PATH (fsync'd). A smaller FENCE is refused with BATON_ESTALE ("fenced
 * off: stored N > yours M"), PATH unchanged. *seen (may be NULL) receives
 * the fence stored before the call. FENCE 0 (no grant has it) and an empty
 * PATH are BATON_EINVAL; a PATH that does not hold a fence, or an I/O error,
 * BATON_EIO. The wait for the flock is unbounded (other admits are short;
 * a guard is held as long as its owner writes). */
typedef struct baton_fence_guard baton_fence_guard;

/* Admits FENCE and lets go of the flock at once. */
BATON_EXTERN(int) baton_fence_admit(const char *path, uint64_t fence, uint64_t *seen);
/* Admits FENCE and keeps the flock in *out until baton_fence_leave(), so that
 * the caller's write happens before any other admit of PATH: no newer holder
 * can admit and write in between. *out is NULL on failure. */
BATON_EXTERN(int) baton_fence_enter(baton_fence_guard **out, const char *path, uint64_t fence,
                                    uint64_t *seen);
/* Lets go of the flock and frees; NULL is a no-op. */
BATON_EXTERN(void) baton_fence_leave(baton_fence_guard *g);

#ifdef __cplusplus
}
#endif
#endif
