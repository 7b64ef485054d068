/*
 * Declarations shared by the backend-level modules of the Redis backend
 * (the engine, its scripts and the primitives built on them):
 *   redis.c   URI/options, scripts, plain locks, WAIT, the waiting loop
 *   table.c   the backend table (dispatches on the lock kind)
 *   locks.c   fair lock, read-write lock
 *   prims.c   semaphore, permit-expirable semaphore, count-down latch
 *   values.c  values (plain string keys with a version beside them)
 *   coord.c   group membership and work queues
 * The connection layer (conn.c, sub.c, redis_int.h) knows nothing of these.
 */
#ifndef BATON_REDIS_RB_H
#define BATON_REDIS_RB_H

#include "redis_int.h"

enum { RB_LAYOUT_REDISSON, RB_LAYOUT_SIMPLE };

/* Script ids; the bodies are in scripts.h, the table in redis.c. */
enum {
    S_ACQ_REDISSON, S_REL_REDISSON, S_RENEW_REDISSON,
    S_ACQ_SIMPLE, S_REL_SIMPLE, S_RENEW_SIMPLE,
    S_INFO,
    S_FAIR_ACQ, S_FAIR_REL, S_FAIR_LEAVE,
    S_RW_READ_ACQ, S_RW_WRITE_ACQ, S_RW_READ_REL, S_RW_WRITE_REL,
    S_RW_READ_RENEW, S_RW_WRITE_RENEW, S_RW_LEAVE,
    S_SEM_ACQ, S_SEM_REL, S_SEM_CTL,
    S_PERMITS_ACQ, S_PERMITS_REL, S_PERMITS_RENEW, S_PERMITS_CTL,
    S_LATCH_CTL,
    S_LIST, S_BREAK,
    S_VALUE, S_GROUP_JOIN, S_GROUP_LEAVE, S_GROUP_RENEW, S_GROUP_LIST,
    S_QUEUE_PUT, S_QUEUE_TAKE, S_QUEUE_ITEM, S_QUEUE_SIZE,
    S_COUNT
};

/* keyspace.c: what the server's notify-keyspace-events offers a lock
 * waiter (read and written with atomics). K: per-key __keyspace@DB__:KEY
 * channels; E: the __keyevent@DB__:del/expired channels, filtered by key;
 * UNKNOWN: CONFIG GET refused (an ACL, a renamed command): listen on the
 * per-key channel and trust it once an event has arrived. */
enum { RKS_UNASKED, RKS_OFF, RKS_K, RKS_E, RKS_UNKNOWN };
typedef struct {
    int mode;                /* RKS_* below; 0 = not asked yet */
    int expired;             /* the 'x' class is on too (from CONFIG GET) */
    int seen;                /* a del/expired keyspace event arrived (CONFIG refused) */
    int64_t checked_ns;      /* when mode was last settled */
} rks_state;

typedef struct {
    rcfg cfg;
    rpool pool;
    rsub sub;
    char *prefix;
    int layout;
    int wait_replicas;       /* > 0: WAIT after every granting acquire */
    int wait_ms;
    int wait_warned;         /* the server rejected WAIT; warned once (atomic) */
    char sha[S_COUNT][41];
    baton_host *host;        /* the core's side (attach) */
    int watching;            /* the subscriber watches for drops (atomic) */
    char ident[200];         /* resolved address, db, layout, prefix */
    rks_state ks;            /* keyspace.c */
    struct rasync *as;       /* async.c: the mux and its ops, made on first use */
} reng;

/* Runs script SID on connection C (EVALSHA, falling back to EVAL on NOSCRIPT).
 * argv = the keys, then the arguments; lens NULL = NUL-terminated strings.
 * Error replies become baton errors. *sent_ns (if given) is when the request
 * that produced the reply was sent. */
int baton__redis_script_on(reng *e, rconn *c, int sid, int nkeys, int argc, const char *const *argv,
                           const size_t *lens, int64_t deadline, redisReply **out, int64_t *sent_ns);
/* The same on a pooled connection. */
int baton__redis_script(reng *e, int sid, int nkeys, int argc, const char *const *argv,
                        const size_t *lens, int64_t deadline, redisReply **out, int64_t *sent_ns);
/* The I/O deadline of one round trip from now: now + io_timeout, cut at the
 * bound of the call this thread is in. */
int64_t baton__redis_io_deadline(reng *e);
/* A public call that may take several round trips (an acquire and its
 * clean-ups) sets its bound: max(WAIT_DEADLINE, now + io_timeout), or
 * now + io_timeout for a try (WAIT_DEADLINE 0). Returns the previous bound,
 * for baton__redis_bound_leave. */
int64_t baton__redis_bound_enter(reng *e, int64_t wait_deadline);
/* Around one attempt of an acquire: its round trips end a quarter of the io
 * timeout before the call's bound, kept for the clean-up of a grant the
 * attempt may have made without hearing the answer. */
int64_t baton__redis_attempt_enter(reng *e);
void baton__redis_bound_leave(int64_t prev);

/* After a grant on connection C: when wait_replicas is set, WAIT for them.
 * Ends by CAP and the call's bound.
 * 0 = enough replicas acknowledged (or the server rejected WAIT: warned once),
 * BATON_EUNAVAILABLE = too few, or the connection failed; the caller then
 * undoes the grant. */
int baton__redis_wait_replicas(reng *e, rconn *c, const char *what, int64_t cap);

/* A renewal script (reply 1 = renewed, 0 = not ours) on one connection and,
 * when it renewed and replicas are required, WAIT there: a renewal too few
 * replicas acknowledged is BATON_EUNAVAILABLE, so the core does not move the
 * lease deadline on it (a failover would promote a replica whose copy
 * expires at the old deadline). 0 and *renewed, or an error. */
int baton__redis_renew_script(reng *e, int sid, int nkeys, int argc, const char *const *argv, int64_t deadline,
                              int *renewed, const char *what);

/* After a grant: the subscriber starts watching its connection, so a drop
 * (restart, failover) makes the core re-check every held lock at once. */
void baton__redis_watch(reng *e);

/* Not a baton code: "unavailable, do not retry" (a grant undone because too
 * few replicas acknowledged it); the message is set. Callers map it to
 * BATON_EUNAVAILABLE before returning to the core. */
#define RB_EFINAL (-1000)

/* Frees R and sets BATON_EPROTO. */
int baton__redis_bad_reply(redisReply *r, const char *what);
/* Parses {flag, n} replies: 0 and *flag, *n; or EPROTO. Frees nothing. */
int baton__redis_pair(const redisReply *r, long long *flag, long long *n);

/* Redisson's derived names: "P:{K}" ("P:K" when K has a hash tag), and the
 * suffix form "{K}:S" ("K:S"); "{K}" alone when S is NULL. malloc'ed. */
char *baton__redis_suffixed(const char *key, const char *suffix);

/* Owner strings. */
typedef struct {
    char field[80];      /* redisson: "<uuid>:<tid>" */
    char value[300];     /* simple: "<hex> <desc>" */
} rb_owner;
void baton__redis_owner(const baton_owner *o, rb_owner *s);

/* The waiting loop shared by every primitive: subscribe to CHANNEL, wait for
 * the confirmation, then attempt / park until done, the deadline, or cancel.
 * ATTEMPT returns 0 with *done, or an error; *hint_ms (-1 = none) bounds the
 * next park (a lease or queue entry that runs out). refresh_ms > 0 also bounds
 * every park (queue entries refreshed by the attempt). Returns 0 when an
 * attempt said done, BATON_ETIMEDOUT, BATON_ECANCELED or an error. */
typedef int (*rb_attempt_fn)(void *ctx, int *done, int64_t *hint_ms);
int baton__redis_wait_loop(reng *e, const char *channel, baton_waiter *w, int64_t deadline,
                           int64_t refresh_ms, int poll_anyway, rb_attempt_fn attempt, void *ctx,
                           const char *what);
/* The same, and MSG (may be NULL) sees each message's payload first:
 * 1 = the message itself completes the wait. */
typedef int (*rb_msg_fn)(void *ctx, const char *payload);
enum {
    RB_WAIT_POLL = 1,    /* re-check with backoff even when subscribed (no unlock messages) */
    RB_WAIT_PATTERN = 2, /* CHANNEL is a PSUBSCRIBE glob */
    RB_WAIT_ONE = 4,     /* a one-wake registration (rsub_register_one): a release wakes one waiter */
};
int baton__redis_wait_loop_msg(reng *e, const char *channel, baton_waiter *w, int64_t deadline,
                               int64_t refresh_ms, int flags, rb_attempt_fn attempt, rb_msg_fn msg,
                               void *ctx, const char *what, rsub_entry *pre, int64_t pre_hint, unsigned pre_gen);
/* Before a waiting acquire's first attempt: when CHANNEL's subscription is
 * still live (it lingers after a wait), registers W on it now, so that
 * attempt already counts as "after subscribing" and the loop can park at
 * once (pass the entry as PRE, with the attempt's hint and the waiter's
 * generation read before the attempt). NULL otherwise. */
rsub_entry *baton__redis_presub(reng *e, const char *channel, int pattern, baton_waiter *w);
void baton__redis_presub_drop(reng *e, rsub_entry *pre);

/* keyspace.c: a plain lock's waiter also listens for the lock key's
 * del/expired keyspace events when the server sends them
 * (docs/redis-layout.md, "Keyspace notifications"). */
typedef struct {
    reng *e;
    const char *key;
    int mode;                /* RKS_* this wait subscribed with */
    const char *wake;        /* the lock's one-wake channel (ks_enter_for), or NULL */
    rsub_entry *se[2];
} rb_ks_wait;
/* Registers W for KEY's release events as the server's configuration allows
 * (asking it with CONFIG GET at most every 10 s, by DEADLINE, the wait's);
 * never fails: without them KW registers nothing. Marks KW as this thread's
 * wait until ks_leave. */
void baton__redis_ks_enter(reng *e, const char *key, baton_waiter *w, int64_t deadline, rb_ks_wait *kw);
/* The same for a waiter registered one-wake on WAKE (RB_WAIT_ONE): a release
 * event wakes one of WAKE's waiters (rsub_register_node_for), not all. */
void baton__redis_ks_enter_for(reng *e, const char *key, const char *wake, baton_waiter *w, int64_t deadline,
                               rb_ks_wait *kw);
/* The same with MODE given (registers nothing for RKS_OFF or RKS_UNASKED),
 * not marked as this thread's wait: for the async path, which must not
 * block on CONFIG GET. WAKE is copied. */
void baton__redis_ks_enter_mode(reng *e, const char *key, const char *wake, baton_waiter *w, int mode,
                                rb_ks_wait *kw);
/* The last known mode, without asking; *ASK = 1 when it is stale and the
 * caller should send CONFIG GET notify-keyspace-events, handing the reply
 * (NULL: none came) to ks_config_answer. */
int baton__redis_ks_mode_cached(reng *e, int *ask);
void baton__redis_ks_config_answer(reng *e, const redisReply *r);
void baton__redis_ks_leave(rb_ks_wait *kw);
/* 1 when KW is sure to be woken by a foreign release now (below). */
int baton__redis_ks_covered_by(const rb_ks_wait *kw);
/* 1 when this thread's wait on E is sure to be woken by a foreign release
 * right now (notifications known to be on and subscribed): the waiting loop
 * then needs no re-check backoff for foreign releasers. */
int baton__redis_ks_covered(reng *e);

/* Lock states (redis.c owns the plain kind; locks.c fair and read/write;
 * coord.c group members and queue takers). Every lock state starts with its
 * kind, so table.c can dispatch on it. */
enum { RK_PLAIN, RK_FAIR, RK_READ, RK_WRITE, RK_MEMBER, RK_TAKER };

/* A lock state keeps only its key; the other names are derived where they are
 * used (issue 27: seven packed names cost ~200 B a held lock), each
 * byte-identical to what Redisson and redis-py use:
 *   RN_FENCE    redisson_lock_token:{key} | plain simple: baton_fence:{key}
 *   RN_HOLDER   baton_holder:{key} | plain simple: baton_fence:{key} (as fence)
 *   RN_CHANNEL  plain redisson_lock__channel:{key} | simple baton_lock__channel:{key};
 *               fair: the per-waiter prefix redisson_lock__channel:{key};
 *               read/write: redisson_rwlock:{key}
 *   RN_QUEUE    fair: redisson_lock_queue:{key} (else none)
 *   RN_TIMEOUTS fair: redisson_lock_timeout:{key}; rw: baton_rwlock_writers:{key} (else none)
 *   RN_TPREFIX  rw: "{key}" (reader timeout keys are tprefix:<field>:rwlock_timeout:<n>) (else none)
 * ("prefix:key" when the key has a '{' already.) baton__redis_lname formats
 * one into BUF (RL_NAME_MAX bytes; lock_init refuses longer keys) and returns
 * BUF, or NULL for a name the kind has not. The RL_* macros give each a
 * compound literal buffer, alive until the end of the enclosing block: never
 * keep the pointer past it (the subscriber copies the channels it keeps). */
enum { RN_FENCE, RN_HOLDER, RN_CHANNEL, RN_QUEUE, RN_TIMEOUTS, RN_TPREFIX };
/* The URI's prefix is bounded at open and a name by the core (1,024 bytes
 * each), so every derived name fits its buffer: the longest kind prefix,
 * "redisson_lock__channel:{}", adds 25 bytes to the key. */
#define RB_PREFIX_MAX 1024
#define RL_KEY_MAX (RB_PREFIX_MAX + 1024 + 1)
#define RL_NAME_MAX (RL_KEY_MAX + 32)

typedef struct {
    int kind;
    int layout;      /* the engine's layout (RB_LAYOUT_*), at init */
    char *key;       /* prefix + name */
} rlock;

const char *baton__redis_lname(const rlock *l, int which, char *buf);
#define RL_NAME(l, which) baton__redis_lname((l), (which), (char[RL_NAME_MAX]){ 0 })
#define RL_FENCE(l) RL_NAME(l, RN_FENCE)
#define RL_HOLDER(l) RL_NAME(l, RN_HOLDER)
#define RL_CHANNEL(l) RL_NAME(l, RN_CHANNEL)
#define RL_QUEUE(l) RL_NAME(l, RN_QUEUE)
#define RL_TIMEOUTS(l) RL_NAME(l, RN_TIMEOUTS)
#define RL_TPREFIX(l) RL_NAME(l, RN_TPREFIX)
/* Into a buffer of the caller's (RL_NAME_MAX bytes), left uninitialised:
 * for the per-call paths, where the literals' zeroing shows. */
#define RL_IN(l, which, buf) baton__redis_lname((l), (which), (buf))

int baton__redis_lock_init(reng *e, const char *name, int kind, rlock *l);
void baton__redis_lock_clear(rlock *l);

/* redis.c: the engine and the plain lock (the table is in table.c) */
int baton__redis_open(void **out, const baton_uri *u, const baton_opts *uo, const baton_client_options *o);
void baton__redis_close(void *eng);
void baton__redis_attach(void *eng, baton_host *host);
int baton__redis_identity(void *eng, char *buf, size_t n);
int baton__redis_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg);
int baton__redis_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st);
void baton__redis_lock_free(void *eng, void *st);
int baton__redis_lock_info(void *eng, const char *name, baton_lockinfo *out);
int baton__redis_plain_acquire(reng *e, rlock *l, baton_acquire_req *req);
int baton__redis_plain_release(reng *e, rlock *l, const baton_owner *owner);
int baton__redis_plain_renew(reng *e, rlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);

/* async.c: the native async table (plain locks on one server, via mux.c) */
extern const baton_async_methods baton__redis_async_methods;
void baton__redis_async_close(reng *e);
/* Connections the mux opened (reconnects included) and has open now. */
void baton__redis_async_stats(reng *e, uint64_t *opened, int *open_now);
/* The body of script SID as this engine sends it (EVAL after NOSCRIPT). */
const char *baton__redis_script_body(const reng *e, int sid);

/* admin.c: the operator's list and break (backend.h, version 7) */
int baton__redis_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int baton__redis_lock_break(void *eng, const char *name, uint64_t *fence);

/* locks.c */
int baton__redis_fair_acquire(reng *e, rlock *l, baton_acquire_req *req);
int baton__redis_fair_release(reng *e, rlock *l, const baton_owner *owner);
int baton__redis_rw_acquire(reng *e, rlock *l, baton_acquire_req *req);
int baton__redis_rw_release(reng *e, rlock *l, const baton_owner *owner);
int baton__redis_rw_renew(reng *e, rlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline);
int baton__redis_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr);

/* prims.c */
int baton__redis_sem_new(void *eng, const char *name, void **st);
void baton__redis_sem_free(void *eng, void *st);
int baton__redis_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
int baton__redis_sem_release(void *eng, void *st, uint32_t permits);
int baton__redis_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int baton__redis_permits_new(void *eng, const char *name, void **st);
void baton__redis_permits_free(void *eng, void *st);
int baton__redis_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns,
                                 baton_waiter *w, char id[BATON_PERMIT_ID_SIZE]);
int baton__redis_permits_release(void *eng, void *st, const char *id);
int baton__redis_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms);
int baton__redis_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int baton__redis_latch_new(void *eng, const char *name, void **st);
void baton__redis_latch_free(void *eng, void *st);
int baton__redis_latch_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
int baton__redis_latch_await(void *eng, void *st, int64_t deadline_ns, baton_waiter *w);


/* values.c */
int baton__redis_value_new(void *eng, const char *name, void **st);
void baton__redis_value_free(void *eng, void *st);
int baton__redis_value_get(void *eng, void *st, baton_value_data *out);
int baton__redis_value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version);
int baton__redis_value_del(void *eng, void *st, uint64_t expect);
int baton__redis_value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w);

/* coord.c: groups and queues; members and takers are lock states (RK_MEMBER,
 * RK_TAKER) that table.c hands to the functions below. */
int baton__redis_member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st);
int baton__redis_group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                            void *arg, uint64_t *token);
int baton__redis_group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w);
int baton__redis_queue_new(void *eng, const char *name, void **st);
void baton__redis_queue_free(void *eng, void *st);
int baton__redis_queue_put(void *eng, void *st, const void *data, size_t len);
int baton__redis_queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst);
int baton__redis_queue_item(void *eng, void *tst, const char **data, size_t *len);
int baton__redis_queue_done(void *eng, void *tst, const baton_owner *owner);
int baton__redis_queue_size(void *eng, void *st, uint64_t *waiting);
/* The lock methods of the two kinds. */
void baton__redis_coord_free(void *eng, void *st);
int baton__redis_coord_acquire(reng *e, void *st, baton_acquire_req *req);
int baton__redis_coord_release(reng *e, void *st, const baton_owner *owner);
int baton__redis_coord_renew(reng *e, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);

#endif
