/*
 * The interface a baton engine implements (for engine authors). Internal:
 * not installed, no ABI promise. Engines are compiled into libbaton; the
 * contract still moves (an event-loop form is next), and an exported one
 * would freeze it before it is right. See docs/engines.md, "Writing an
 * engine": one folder under src/backends/ and one line in
 * src/include/baton/sys/engines.h.
 *
 * An engine is two things:
 *  - its description (baton_engine_info, include/baton.h): name, schemes,
 *    primitives, behaviour bits and a declarative spec of its URI options.
 *    Always compiled, even when the engine's client library is absent, so
 *    `baton engines` and the docs can describe every engine; the core
 *    parses and checks URI options against the spec, so no engine parses
 *    its own.
 *  - its backend table (baton_backend below), compiled only when the engine
 *    is built: open/close, one method table per primitive (a primitive
 *    exists iff its table does: the registry refuses a table whose tables
 *    disagree with the description's primitive bits), and the engine
 *    services (identity, describe, secrets, counters) apart.
 * Within a table each member says whether it must or may be provided; a
 * NULL "may" member makes the core answer BATON_ENOTSUP.
 *
 * Version rule: the registry accepts a table whose version is exactly
 * BATON_BACKEND_VERSION and refuses any other with a clear error (never a
 * silent skip). Any change to a member's meaning or a table's layout bumps
 * it; engines live in this tree, so they move with it.
 *
 * Threading: every member may be called from any thread, concurrently, for
 * different lock states. The core serializes calls on one lock state
 * (acquire, renew, release, free never overlap for the same state).
 * Members never hold a client-wide mutex across a round trip.
 */
#ifndef BATON_SYS_BACKEND_H
#define BATON_SYS_BACKEND_H

#include "baton.h"
#include <pthread.h>
#include "engines.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BATON_BACKEND_VERSION 12

/* Behaviour bits (baton_backend.caps); which primitives an engine has is
 * said by its method tables, not by bits. */
#define BATON_CAP_LEASE   BATON_FEATURE_LEASE   /* locks expire unless renewed; core renews them */
#define BATON_CAP_NOTIFY  BATON_FEATURE_NOTIFY  /* waiting is woken by the engine, not by polling */
#define BATON_CAP_FAIR    BATON_FEATURE_FAIR    /* FIFO grants when baton_lock_options.fair */
#define BATON_CAP_SESSION BATON_FEATURE_SESSION /* the engine reports lost grants itself (baton_host_lost*):
                                                   the core watches held locks even without a lease */

/* A parsed URI: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&...]
 * Every string is percent-decoded and NUL-terminated; absent parts are NULL
 * (port 0). hosts[0] mirrors host/port. */
typedef struct {
    char *host;
    int port;
} baton_uri_host;

typedef struct {
    char *key;
    char *value;
} baton_uri_param;

typedef struct baton_uri {
    char *scheme;
    char *user;
    char *password;
    char *host;
    int port;
    baton_uri_host *hosts;
    size_t nhosts;
    char *path;              /* without the leading '/'; "" when absent; file: the whole path */
    baton_uri_param *params;
    size_t nparams;
    char *redacted;          /* the URI without its password */
} baton_uri;

/* NULL when the parameter is absent. */
const char *baton_uri_get(const baton_uri *u, const char *key);

/* Who holds a lock: 128 random bits plus a readable description. */
typedef struct {
    unsigned char id[16];
    char hex[33];            /* id as 32 lowercase hex digits */
    char uuid[37];           /* id as 8-4-4-4-12 */
    unsigned long tid;       /* the acquiring thread (gettid) */
    /* "host pid tid" (host names are at most 64 bytes; at most
     * BATON_OWNER_DESC_MAX bytes with its NUL), "" until the first acquire.
     * One immutable string per thread, shared by every owner of that thread
     * and never freed (a lock handle per lock: 100,000 of them add up). */
    const char *desc;
} baton_owner;
#define BATON_OWNER_DESC_MAX 96

/* A parking spot for one blocked call. Notifications bump a generation so a
 * wake-up between "check" and "park" is never missed: read the generation
 * with baton_waiter_gen() before the check, pass it to baton_waiter_park(). */
typedef struct baton_waiter baton_waiter;
unsigned baton_waiter_gen(baton_waiter *w);
/* Returns 0 when woken or the deadline (monotonic ns, INT64_MAX = none) passed,
 * BATON_ECANCELED when the call was cancelled. */
int baton_waiter_park(baton_waiter *w, unsigned seen_gen, int64_t deadline_ns);
void baton_waiter_wake(baton_waiter *w);
int baton_waiter_canceled(baton_waiter *w);
/* For an engine's native async acquire (baton_async_methods), whose waiter
 * nobody parks on: FN(ARG) is called by every wake and cancel of W after
 * the generation moved, on the waking thread, with none of W's locks held,
 * so it must only signal (queue work for the engine's own thread). NULL
 * removes it; after the call returns no new call of the old FN starts, but
 * one already running may still finish (the engine's own lock orders that). */
void baton_waiter_set_notify(baton_waiter *w, void (*fn)(void *arg), void *arg);

/* The core's side of one client, handed to the backend by attach() after
 * open. Every call below may be made from any thread (a subscriber or session
 * thread included) at any time between attach and close, and never blocks on
 * I/O. */
typedef struct baton_host baton_host;
/* The engine may have lost locks it cannot name (its connection dropped: a
 * restart without persistence, a failover): re-check every lock this client
 * holds now, by the owner-checked renewal, instead of at the next renewal
 * period. A lock the engine no longer has becomes LOST at once (held()
 * false, on_lost once). Locks with a fixed lease are not renewed, so not
 * re-checked. */
void baton_host_recheck(baton_host *h);

/* The engine no longer holds a grant: its session expired or was given up,
 * the connection a session lock lived on died. The core then does what it
 * does for a lease that ran out: held() false at once, on_lost called once
 * (on the keeper thread), release answers BATON_ELOST, `baton run` stops
 * its command and exits 75. From any thread, at any time; it never blocks
 * on I/O and never calls back into the backend before it returns.
 *
 * baton_host_lost: the lock state ST (from lock_new, rwlock_new or
 * election_new), for the grant with fencing token FENCE (0 = whatever grant
 * ST holds now). Passing the fence makes a late report harmless: a grant
 * made after the loss carries a new fence and is left alone. A state that
 * is neither held nor being acquired is ignored. A report that comes while
 * the state's acquire is in flight is kept by the core for the grant it
 * names (FENCE; 0 or baton_host_lost_all: whatever grant that acquire
 * makes): the acquire gives that grant back and tries again instead of
 * calling it held, so an engine need not close the window between its last
 * check and its return itself.
 *
 * baton_host_lost_all: every grant this client holds now. Call it before
 * the engine can make a new grant (a new session) to this client, or the new
 * grant is declared lost too; with several sessions, use baton_host_lost per
 * state instead. */
void baton_host_lost(baton_host *h, void *st, uint64_t fence);
void baton_host_lost_all(baton_host *h);

/* For an engine that loads its client library on first use (so that a
 * program that never opens it does not pay for loading it at start-up): one
 * function to take from the library, SLOT the address of the function
 * pointer to fill. */
typedef struct {
    const char *name;
    void *slot;
} baton_dl_sym;
/* dlopen SONAME (RTLD_NOW | RTLD_LOCAL, never unloaded) and fill every slot
 * of SYMS: 0, or -1 with ERR (ERRLEN bytes) saying "cannot load SONAME
 * (HINT): why" or "SONAME has no NAME ..." — every symbol or none: on an error
 * no slot is left filled. Not thread-safe: call it under a pthread_once. */
int baton_dl_load(const char *soname, const char *hint, const baton_dl_sym *syms, size_t n, char *err, size_t errlen);

/* Says something through the application's baton_log_set() callback (no-op
 * without one). level: BATON_LOG_*. */
void baton_log(int level, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Monotonic clock, ns. */
int64_t baton_now_ns(void);

/* Sets the thread's last error and returns code. */
int baton_seterr(int code, long native, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* One acquire call. */
typedef struct {
    const baton_owner *owner;
    uint32_t lease_ms;       /* engines with BATON_CAP_LEASE grant for this long */
    int fair;
    int64_t deadline_ns;     /* 0 = one attempt; INT64_MAX = wait forever; else monotonic */
    baton_waiter *waiter;    /* park here while waiting; cancel wakes it */
    uint64_t fence;          /* out: fencing token of the grant */
    int64_t sent_ns;         /* out: when the granting request was sent (the lease starts then) */
    const char *value;       /* election_new states: the value this candidate proclaims
                                while it leads (never NULL there; "" allowed); NULL otherwise */
} baton_acquire_req;

/* URI options, parsed by the core against the engine's spec
 * (baton_engine_info.options) before open: unknown names, bad values, values
 * out of range and options given on a scheme they do not apply to are
 * refused there, naming the option. The engine reads them by name; a name
 * absent from its spec is a bug (the call answers as for an absent option
 * and logs it). */
typedef struct baton_opts baton_opts;
/* 1 when the URI gave NAME. */
int baton_opts_given(const baton_opts *o, const char *name);
/* The value as given, or the spec's default (NULL when it has none). */
const char *baton_opts_str(const baton_opts *o, const char *name);
/* int and ms options: the value (range-checked), or the default (0 when none). */
int64_t baton_opts_int(const baton_opts *o, const char *name);
/* bool options: 0 or 1. */
int baton_opts_bool(const baton_opts *o, const char *name);
/* enum options: the index of the value in the spec's choices. */
int baton_opts_enum(const baton_opts *o, const char *name);

/* ---- the method tables ------------------------------------------------- */

/* Locks: must. Also drives the lock states that rw.create and
 * election.create make. */
typedef struct {
    /* must: prepare per-lock state for NAME (validated non-empty by the core). */
    int (*create)(void *eng, const char *name, const baton_lock_options *opts, void **st);
    /* must: free per-lock state; the lock is not held. */
    void (*destroy)(void *eng, void *st);
    /* must: acquire. 0 on grant (fill fence, sent_ns), BATON_ELOCKED when a try
     * finds it held, BATON_ETIMEDOUT when the deadline passes, BATON_ECANCELED,
     * or an error. Must confirm ownership before returning 0 after a wait. */
    int (*acquire)(void *eng, void *st, baton_acquire_req *req);
    /* must: owner-checked release. BATON_ELOST (or BATON_ENOTOWNER) when the
     * engine says someone else holds it now. */
    int (*release)(void *eng, void *st, const baton_owner *owner);
    /* must with BATON_CAP_LEASE: owner-checked renewal to lease_ms; finish
     * by deadline_ns (the lease's own deadline: past it the core has
     * declared the lock lost on its own clock already, so a call that
     * overruns only holds a worker thread). BATON_ELOST when the lock is no
     * longer ours. Renewals of different states run concurrently. */
    int (*renew)(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
    /* may: what the engine knows about NAME. */
    int (*info)(void *eng, const char *name, baton_lockinfo *out);
    /* may: calls FN(ARG, NAME) once for every lock name that starts with
     * PREFIX ("" = all) and is held now (by baton or a foreign client of the
     * same layout), in any order; NAME is valid during the call only. FN
     * returning nonzero stops the walk (and list returns 0). Names the
     * engine keeps only as a hash (the file engine's long names) are given
     * as the engine stores them. Read-only, bounded by the client's io
     * timeout. NULL = BATON_ENOTSUP (`baton list`). */
    int (*list)(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
    /* may: an operator breaks the lock NAME (`baton unlock --force`):
     * whoever holds it (baton or foreign, plain lock, either side of a
     * read-write lock) holds it no more, and *FENCE is set to a new fence
     * that exceeds every fence granted for NAME so far, stored where the
     * next grant will start from, so the old holder is fenced off at any
     * store that checks fences. The old holder's renewal and release then
     * answer BATON_ELOST. BATON_ENOTHELD (fence still bumped) when nobody
     * held it. An engine whose holder keeps the lock by a means an operator
     * cannot revoke from here (the kernel's lock of a live process) answers
     * BATON_ENOTSUP with a message that says what to do instead. */
    int (*force_unlock)(void *eng, const char *name, uint64_t *fence);
} baton_lock_methods;

/* Read-write locks. */
typedef struct {
    /* must: the read and write sides of a read-write lock on NAME, as two
     * lock states driven by the lock methods. Both are used with one owner.
     * The read side must be granted to the holder of the write side
     * (downgrade). A waiting writer must not be starved by new readers.
     * The core refuses upgrades itself. May answer BATON_ENOTSUP in a mode
     * that has none (say which in the description's notes). */
    int (*create)(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr);
} baton_rw_methods;

/* Counting semaphores without owners (Redisson's RSemaphore). */
typedef struct {
    int (*create)(void *eng, const char *name, void **st);      /* must */
    void (*destroy)(void *eng, void *st);                        /* must */
    /* must: waits like lock acquire (deadline 0 = one try, BATON_ELOCKED
     * when too few permits). */
    int (*acquire)(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
    int (*release)(void *eng, void *st, uint32_t permits);      /* must */
    int (*ctl)(void *eng, void *st, int op, int64_t arg, int64_t *out); /* must: BATON_CTL_* */
} baton_sem_methods;

/* Permits with ids and leases (Redisson's RPermitExpirableSemaphore). */
typedef struct {
    int (*create)(void *eng, const char *name, void **st);      /* must */
    void (*destroy)(void *eng, void *st);                        /* must */
    /* must: id is 32 hex digits. */
    int (*acquire)(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                   char id[BATON_PERMIT_ID_SIZE]);
    int (*release)(void *eng, void *st, const char *id);        /* must */
    int (*renew)(void *eng, void *st, const char *id, uint32_t lease_ms); /* must */
    int (*ctl)(void *eng, void *st, int op, int64_t arg, int64_t *out); /* must: BATON_CTL_* */
} baton_permits_methods;

/* Count-down latches. */
typedef struct {
    int (*create)(void *eng, const char *name, void **st);      /* must */
    void (*destroy)(void *eng, void *st);                        /* must */
    int (*ctl)(void *eng, void *st, int op, int64_t arg, int64_t *out); /* must: BATON_CTL_* */
    /* must: 0 when the count is zero (or the latch does not exist),
     * BATON_ETIMEDOUT, BATON_ECANCELED. */
    int (*await)(void *eng, void *st, int64_t deadline_ns, baton_waiter *w);
} baton_latch_methods;

/* Leader elections. */
typedef struct {
    /* must: a candidate in the election NAME, as a lock state driven by the
     * lock methods: acquire (campaign: granted = this candidate leads;
     * req->value is what it proclaims), release (resign), renew (with
     * BATON_CAP_LEASE) and destroy. The fence of a grant identifies the
     * term: it strictly increases from leader to leader. The oldest
     * candidate leads (FIFO), so a resigning leader hands over to the next
     * one in line. */
    int (*create)(void *eng, const char *name, const baton_lock_options *opts, void **st);
    /* must: the current leader of NAME: its value (NUL-terminated, cut to n
     * bytes) and its term's fence; *fence = 0 and value "" when nobody
     * leads. With deadline_ns 0, answers at once. Otherwise waits (parked on
     * w, never polling where the engine notifies) while the leader is still
     * the one the caller knows, known_fence and known_value (0 and "" =
     * nobody), and answers as soon as it differs: 0 with the new leader,
     * BATON_ETIMEDOUT at the deadline, BATON_ECANCELED when w is cancelled. */
    int (*leader)(void *eng, const char *name, uint64_t known_fence, const char *known_value, char *value,
                  size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w);
    /* may: the leader holding ST proclaims a new value without a new term
     * (etcd's Proclaim). BATON_ELOST when ST no longer leads. NULL =
     * BATON_ENOTSUP. */
    int (*proclaim)(void *eng, void *st, const baton_owner *owner, const char *value);
} baton_election_methods;

/* Values (baton_value_*; the core builds counters, and latches where the
 * engine has no latch table, on them). A value's versions strictly increase
 * over its whole life (deletion and re-creation included) and are never 0;
 * 0 means absent. Values are a namespace of their own. */
typedef struct {
    int (*create)(void *eng, const char *name, void **st);      /* must: no I/O needed */
    void (*destroy)(void *eng, void *st);                        /* must */
    /* must: the value now: out->data malloc'd (NUL-terminated, len without
     * it), out->version. BATON_ENOENT when absent (out left zeroed). */
    int (*get)(void *eng, void *st, baton_value_data *out);
    /* must: set to DATA/LEN if EXPECT holds (BATON_VALUE_ANY: always; 0:
     * absent; else the version now), atomically at the engine: two clients
     * that both expect version V never both succeed. BATON_ECONFLICT when
     * it does not hold. *version = the new version. */
    int (*set)(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version);
    /* must: delete if EXPECT holds (as for set); BATON_ENOENT when absent. */
    int (*del)(void *eng, void *st, uint64_t expect);
    /* must: park on W until the version may differ from KNOWN, the deadline
     * (0 = answer at once) passes or W is cancelled: 0 (the core re-reads:
     * spurious returns are allowed, a missed change is not: it must be
     * seen within the bound the engine's docs state), BATON_ETIMEDOUT,
     * BATON_ECANCELED. Where the engine notifies, never polls; where a
     * notification can be lost (pub/sub), re-reads at a documented bound. */
    int (*watch)(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w);
} baton_value_methods;

/* Group membership (baton_group_*). */
typedef struct {
    /* must: a member state for member ID of group NAME, as a lock state
     * driven by the lock methods: acquire = join (req->value is the
     * member's value; never waits for other members: BATON_ELOCKED when
     * a live member has ID), release = leave, renew (with BATON_CAP_LEASE)
     * and destroy; loss reported as for locks. Fences are not used (0 is
     * fine). A member whose holder dies is gone within its session/lease.
     * ID is [A-Za-z0-9._-]{1,BATON_MEMBER_ID_MAX}, checked by the core. */
    int (*create)(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st);
    /* must: FN(ARG, ID, VALUE) once per live member of NAME (any order;
     * strings valid during the call only). *TOKEN: anything the engine's
     * watch needs to know what this listing saw (a revision, a child
     * version), opaque to the core. */
    int (*list)(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value), void *arg,
                uint64_t *token);
    /* must: park on W until the members of NAME may differ from what the
     * list that gave TOKEN saw (as value watch: spurious returns allowed,
     * misses not; a member whose lease ran out counts as a change within
     * the engine's documented bound), the deadline, or a cancel. */
    int (*watch)(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w);
} baton_group_methods;

/* Work queues (baton_queue_*). */
typedef struct {
    int (*create)(void *eng, const char *name, void **st);      /* must: no I/O needed */
    void (*destroy)(void *eng, void *st);                        /* must */
    /* must: append an item (1..BATON_QUEUE_ITEM_MAX bytes) at the tail. */
    int (*put)(void *eng, void *st, const void *data, size_t len);
    /* must: a taker state on queue ST, a lock state driven by the lock
     * methods: acquire = take the oldest item that nobody holds and lock it
     * to req->owner (wait as for locks: BATON_ELOCKED for a try on an empty
     * queue, parked on req->waiter otherwise, woken by the engine where it
     * notifies); req->fence = a number larger than every earlier take's
     * from this queue; release = give the item back (owner-checked; it can
     * be taken again at once); renew = extend its lease (BATON_CAP_LEASE);
     * a taker that dies loses its item within its session/lease, and the
     * item goes back. The same state may take again after release or done. */
    int (*taker)(void *eng, void *st, const baton_lock_options *opts, void **tst);
    /* must: the bytes of the item TST holds (valid until its next acquire,
     * release, done or destroy). */
    int (*item)(void *eng, void *tst, const char **data, size_t *len);
    /* must: remove the item TST holds for good, owner-checked: BATON_ELOST
     * when it is no longer this taker's. TST then holds nothing. */
    int (*done)(void *eng, void *tst, const baton_owner *owner);
    /* may: the number of items waiting (not taken). NULL = BATON_ENOTSUP. */
    int (*size)(void *eng, void *st, uint64_t *waiting);
} baton_queue_methods;

/* A rate limiter's configuration, as stored at the engine with its state. */
typedef struct {
    uint32_t permits;        /* per interval_ms; >= 1 */
    uint32_t interval_ms;    /* >= 1 */
    uint32_t burst;          /* >= 1 */
} baton_rate_cfg;

/* The GCRA step for engines that run it in C (under their own lock or
 * transaction): with the limiter's TAT *tat (µs on the engine's clock; 0 =
 * never used) at NOW_US, N admissions (0 = none, just the answer). Returns
 * W, the µs until they may pass (0 = now); when W <= RESERVE_US they are
 * granted (*tat advanced: the caller waits W and goes), else nothing
 * changes. Admissions are interval_ms*1000/permits µs apart (rounded down:
 * at most 1 µs per admission fast); burst of them fit at once. */
int64_t baton_gcra_step(const baton_rate_cfg *cfg, int64_t now_us, int64_t *tat, uint32_t n, int64_t reserve_us);

/* Rate limiters (baton_ratelimit_*; GCRA). */
typedef struct {
    /* must: state for the limiter KEY (the core's: the name, or the name
     * plus "@client:" and the client id), no I/O needed. Limiters are a
     * namespace of their own. */
    int (*create)(void *eng, const char *key, void **st);
    void (*destroy)(void *eng, void *st);                        /* must */
    /* must: one atomic step at the engine, on its clock: when nothing is
     * stored, store CFG (TAT = none); when another configuration is stored,
     * replace it with CFG if REPLACE (the TAT stays), else BATON_ECONFLICT
     * with *stored filled and nothing taken. Then the GCRA step for N
     * admissions, baton_gcra_step's rule (N 0 = configure only): *wait_us
     * = the µs until they may pass; 0 or at most RESERVE_US = granted (the
     * TAT advanced; the caller waits it out: a reservation, so waiters
     * queue in order without asking again), more = refused (nothing
     * changed). *stored = the configuration in force. Bounded by the
     * client's io timeout. */
    int (*take)(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n, int64_t reserve_us,
                int64_t *wait_us, baton_rate_cfg *stored);
    /* must: the stored configuration and how far the TAT lies ahead of the
     * engine's clock now (µs, 0 when behind), changing nothing;
     * BATON_ENOENT when nothing is stored. */
    int (*inspect)(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us);
} baton_ratelimit_methods;

/* The engines' rate limiter tables (src/backends/<engine>/ratelimit.c). */
extern const baton_ratelimit_methods baton__ratelimit_redis, baton__ratelimit_file, baton__ratelimit_sqlite,
    baton__ratelimit_postgres;

/* Engine services: everything besides primitives. All may. */
typedef struct {
    /* called once, right after open, with the core's side of the client
     * (valid until close). Engines that learn of loss on their own (a
     * dropped connection, a session expiry) keep it to tell the core. */
    void (*attach)(void *eng, baton_host *host);
    /* a stable name of the engine instance this client talks to, the same
     * however the URI spelled it (resolved addresses, database, key
     * prefix): two clients of one engine must give equal strings, clients
     * of different engines different ones. A multilock orders its members
     * by it, so two processes always take shared locks in the same order.
     * NULL = the core uses the redacted URI. Writes at most n bytes. */
    int (*identity)(void *eng, char *buf, size_t n);
    /* one line on this client's connection or session as the engine sees
     * it ("session 0x1f00a2 timeout 4000 ms (negotiated)"), for `baton
     * status`. Writes at most n bytes; NULL = nothing to say. */
    int (*describe)(void *eng, char *buf, size_t n);
    /* with BATON_CAP_SESSION: the baton_now_ns() time until which the
     * engine knows its session (ZooKeeper's) or lease (etcd's) is alive, and
     * with it every grant made on it: the last time the server confirmed it
     * plus its timeout, counted from when that confirmation was asked for.
     * INT64_MAX = no bound known. Past it, baton_lock_held answers 0 at once
     * (a process stopped and resumed past its session timeout must not
     * believe it still holds its locks while the engine's own threads have
     * not run yet). As soon as its thread runs, the engine must either
     * confirm the session with the server (a request sent after the deadline
     * passed and answered: the deadline moves on and held() answers 1
     * again, as Curator's SUSPENDED then RECONNECTED) or give it up and
     * report its grants lost (baton_host_lost*). Called from any thread,
     * with none of the core's locks held; cheap (no I/O). NULL = the
     * engine's reports alone end its grants. */
    int64_t (*session_deadline)(void *eng);
    /* the engine's own counts of the operations it has served, all its
     * clients together (Redis: INFO commandstats): FN(ARG, OP, COUNT) once
     * per kind of operation the engine counts, OP its lower-case name there
     * ("evalsha", "client|setname"; at most 63 bytes, valid during the call
     * only), COUNT never decreasing while the engine runs (a restart may
     * reset it). A quorum reports each member's counts, so one OP may come
     * several times: they add up. The request that reads them may be counted
     * too (Redis: "info"). 0 with every count reported, or an error with FN
     * not called at all. `baton bench` counts what a handoff costs with it. */
    int (*engine_ops)(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg);
    /* the environment variable the engine reads its credentials from when
     * the URI carries none ("PGPASSWORD"), so that a process can hand the
     * engine to a child (baton run's BATON_URI) without the secret in a
     * URI; NULL = none. The core fills it from the URI it was opened with
     * (baton_client_secret). */
    const char *secret_env;
    /* with secret_env: 1 when it holds the URI's whole user info
     * ("user:password", ZooKeeper's digest), 0 when the password alone. */
    int secret_userinfo;
    /* the URI scheme of a quorum over several independent engines of this
     * kind (Redis: "redlock"); baton_client_open_quorum() composes its URI
     * from the members' hosts. NULL = no quorum over this engine. */
    const char *quorum_scheme;
} baton_services;

/* The event-loop API (include/baton.h; docs/async.md): may. An engine that
 * can wait for a lock without a thread per waiter (the file engine's inotify,
 * Redis's pub/sub, ZooKeeper's watches, libpq's non-blocking mode) starts
 * acquires here and completes them later; without this table the core runs
 * each async operation's blocking call on its bounded worker pool (a thread
 * per running wait, more waits queued and retried in slices), so every
 * engine serves the async API either way.
 *
 * Completion: the core passes DONE and a TOKEN per acquire; the engine calls
 * DONE(TOKEN, RC, FENCE, SENT_NS) exactly once per started acquire, from any
 * of its own threads, never from inside acquire_start, with none of the
 * core's locks held (it may hold its own: DONE only queues the result and
 * wakes the client's fd; the core finishes the grant, keeper and lease
 * check on the caller's thread in baton_client_process). RC as for the
 * blocking acquire; FENCE and SENT_NS as req->fence and req->sent_ns.
 *
 * An engine may be native for some lock states only: acquire_start answers
 * BATON_ENOTSUP for the others and the core runs those on its pool. Release
 * and renewal are native when release_start / renew_start are set (v12),
 * else the blocking methods run on the pool / the keeper's workers. */
typedef void (*baton_async_done)(void *token, int rc, uint64_t fence, int64_t sent_ns);
typedef struct {
    /* must: start acquiring ST as REQ says (REQ stays valid until DONE is
     * called; its waiter is not parked on). 0 when started (DONE follows),
     * or an error at once (DONE never called). A try (deadline 0) may be
     * answered at once through DONE too, but still from an engine thread
     * or queued for the core: never from inside this call. */
    int (*acquire_start)(void *eng, void *st, baton_acquire_req *req, baton_async_done done, void *token);
    /* must: the acquire started on ST completes promptly: BATON_ECANCELED,
     * or its real result when it had already been decided. Any thread,
     * with none of the core's locks held; a no-op when nothing was started
     * or DONE was called already, and then ST may even be freed: compare
     * it with the engine's pending acquires, never dereference it first. */
    void (*acquire_cancel)(void *eng, void *st);
    /* may: the engine work that needs the caller's thread (a connection
     * the loop owns); the core calls it from baton_client_process. NULL =
     * none: the engine's threads do all of it. */
    int (*process)(void *eng);
    /* may: ms until process must run even without fd readiness; -1 none. */
    int64_t (*timeout_ms)(void *eng);
    /* may (v12): an owner-checked release of ST, completed through DONE
     * (TOKEN; RC as the blocking release's, FENCE and SENT_NS 0) exactly
     * once, never from inside this call, within the engine's io timeout.
     * BATON_ENOTSUP at once sends it to the blocking release on the pool.
     * OWNER stays valid until DONE. The core never overlaps it with another
     * call on ST. */
    int (*release_start)(void *eng, void *st, const baton_owner *owner, baton_async_done done, void *token);
    /* may (v12): an owner-checked renewal of ST to LEASE_MS, completed
     * through DONE as release_start, by DEADLINE_NS at the latest (the
     * engine answers BATON_EUNAVAILABLE past it). The keeper starts every
     * due renewal this way and collects the answers, so an engine that
     * pipelines sends a batch of renewals in a few writes. BATON_ENOTSUP
     * at once: the keeper calls the blocking renew. */
    int (*renew_start)(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns,
                       baton_async_done done, void *token);
} baton_async_methods;

/* Each engine's description, from its spec.c. */
#define BATON__DECLARE_INFO(n) extern const baton_engine_info baton__info_##n;
BATON_ENGINES(BATON__DECLARE_INFO)
#undef BATON__DECLARE_INFO

typedef struct baton_backend {
    unsigned int version;        /* BATON_BACKEND_VERSION */
    const baton_engine_info *info; /* must: the engine's description (name, schemes, primitives, options) */
    unsigned int caps;           /* BATON_CAP_* behaviour bits */

    /* must: connect (or prepare to) and return engine state in *eng. OPTS:
     * the URI's options, already checked against the spec; valid during the
     * call only (copy what you keep). */
    int (*open)(void **eng, const baton_uri *uri, const baton_opts *opts, const baton_client_options *copts);
    /* must: free the engine state; called after every lock state was freed. */
    void (*close)(void *eng);

    const baton_lock_methods *lock;         /* must */
    const baton_rw_methods *rw;             /* may: NULL = no read-write locks */
    const baton_sem_methods *sem;           /* may */
    const baton_permits_methods *permits;   /* may */
    const baton_latch_methods *latch;       /* may */
    const baton_election_methods *election; /* may */
    const baton_value_methods *value;       /* may */
    const baton_group_methods *group;       /* may */
    const baton_queue_methods *queue;       /* may */
    const baton_ratelimit_methods *ratelimit; /* may */
    const baton_services *services;         /* must (its members may all be NULL) */
    const baton_async_methods *async;       /* may: NULL = the core's worker pool (see above) */
} baton_backend;

/* sem_ctl / permits_ctl / latch_ctl operations. */
enum {
    BATON_CTL_TRY_SET = 1,   /* arg = count; *out = 1 when this call set it, else 0 */
    BATON_CTL_ADD,           /* arg = delta (may be negative) */
    BATON_CTL_DRAIN,         /* *out = permits taken */
    BATON_CTL_AVAILABLE,     /* *out = available permits (latch: the count) */
    BATON_CTL_COUNT_DOWN,    /* latch: one down; wakes every waiter at zero */
};

#ifdef __cplusplus
}
#endif
#endif
