/*
 * Internal declarations shared by the ZooKeeper backend modules:
 *   zk.c    URI/options, sessions (one zhandle per client, replaced when it
 *           dies), the watcher, the session check thread, paths, errors,
 *           identity, engine_ops and the backend table
 *   lock.c  contender nodes: the FIFO lock, the read-write lock, election
 *   sem.c   permits (Curator's InterProcessSemaphoreV2 layout)
 *   semaphore.c  semaphores (a count node, kazoo Counter's layout)
 *   value.c values (node data, kazoo Counter's layout)
 *   group.c group members (kazoo Party's nodes) and queue takers (kazoo
 *           LockingQueue's layout): lock states of their own kinds
 *
 * Layout and rules: docs/zk-engine.md.
 */
#ifndef BATON_ZK_INT_H
#define BATON_ZK_INT_H

#include "baton/sys/backend.h"

/* libzookeeper_mt: the synchronous calls exist only in the threaded build */
#ifndef THREADED
#define THREADED
#endif
#include <zookeeper/zookeeper.h>
#include <pthread.h>
#include <stdint.h>

/* One ZooKeeper session: a zhandle and what the watcher learnt about it.
 * Fields below zh are guarded by the engine's mutex. */
typedef struct zsess {
    struct zeng *e;
    struct zcall *calls;     /* requests sent and not answered yet (call.c) */
    struct zorphan *deleting;/* orphan deletes sent and not answered yet */
    zhandle_t *zh;
    uint64_t gen;            /* 1, 2, ...: which session of this client */
    int refs;                /* calls using zh now, +1 while it is the engine's current one */
    int state;               /* the last ZOO_*_STATE the watcher saw */
    int dead;                /* expired, auth failed or declared lost: no new work on it */
    int closing;             /* sess_close waits for the calls in flight (e->mu) */
    int auth_pending;        /* digest auth sent, no answer yet */
    int auth_rc;             /* its answer (ZOK, ZAUTHFAILED) */
    int64_t down_since;      /* monotonic ns the connection dropped; 0 while connected */
    int64_t suspect;         /* ns: this process was found stopped then (0 = not); the
                                session may have expired meanwhile, held() answers 0
                                until a request sent since is answered */
    int64_t probe_sent;      /* when the probe in flight was sent, 0 = none */
    int64_t last_probe;      /* when the last probe was sent */
    int64_t confirmed;       /* monotonic ns: the server knew the session alive at or
                                after this (the send time of the newest answered probe,
                                or when it connected); 0 = not yet */
} zsess;

/* A parking spot the watchers can find by number: a watch's context is the
 * slot's id, never a pointer, so a watch that fires after its waiter gave up
 * (or after its lock state was freed) finds nothing and does nothing. */
typedef struct zslot {
    uint64_t id;
    baton_waiter *w;         /* NULL while nobody waits on it */
    struct zslot *next;
} zslot;

/* A node to delete once the session it lives on can (a timed-out contender
 * whose delete met a connection loss). */
typedef struct zorphan {
    struct zeng *e;
    struct zsess *s;         /* while its delete is in flight */
    char *path;
    uint64_t gen;
    struct zorphan *next;
} zorphan;

enum { ZK_LOCK, ZK_READ, ZK_WRITE, ZK_LATCH, ZK_MEMBER, ZK_TAKER };

/* One lock state (lock, read side, write side, election candidate). */
typedef struct zlock {
    struct zeng *e;
    int kind;
    char *dir;               /* the lock's directory (absolute path) */
    uint64_t slot;           /* our watcher id */
    /* guarded by e->mu */
    char *node;              /* our contender node (absolute), NULL when none */
    uint64_t gen;            /* the session it lives on */
    uint64_t fence;          /* its czxid */
    int lost;                /* that session died while the node existed */
    int granted;             /* the node holds (a grant confirmed); 0 while it waits */
    int dir_fired;           /* the child watch of the acquire's listing fired
                                before the grant was confirmed (lock.c) */
    int armed;               /* an exists watch was asked for on node (lock.c) */
    int64_t report_until;    /* re-report the loss until then (see zk.c) */
    /* ZK_MEMBER: the member's node name ("<id>__party__"); ZK_TAKER: the
     * queue (dir) and the item this taker holds (its entry's name, bytes) */
    char *id;
    char *item;
    int item_len;
    struct zlock *next, *prev;
} zlock;

typedef struct zeng {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* session state changed (CLOCK_MONOTONIC) */
    char *hosts;             /* "h1:p1,h2:p2" as zookeeper_init wants it */
    char *base;              /* "/<chroot><root>": every lock lives below it ("" = "/") */
    char *vbase, *gbase, *qbase, *sbase; /* the same for values, groups, queues, semaphores */
    size_t chroot_len;       /* the "/<chroot>" part of base */
    char *ident;             /* identity(): resolved hosts + base */
    char *auth;              /* "user:password" for digest auth, or NULL */
    int session_timeout_ms;  /* asked for */
    int connect_timeout_ms;
    int io_timeout_ms;
    int lost_after_ms;       /* a disconnection this long loses the session's grants (0 = derive) */
    int fence_note;          /* note each grant's fence in the lock directory (lock.c) */
    /* guarded by mu */
    int negotiated_ms;       /* what the server granted (zoo_recv_timeout) */
    int64_t tick;            /* when the check thread last ran (0 = not yet) */
    zsess *cur;              /* NULL between a dead session and the next one */
    uint64_t next_gen, next_slot;
    zslot *slots;
    zlock *locks;
    zorphan *orphans;
    baton_host *host;
    uint64_t old_ids[16];    /* ids of sessions this client gave up (newest last) */
    unsigned nold;
    int stop;
    pthread_t thr;
    int thr_started;
    int closers;             /* sessions being closed on threads of their own */
    uint64_t mntr_reads;     /* atomic: mntr requests engine_ops sent (the server counts them) */
} zeng;

/* ---- zk.c ---------------------------------------------------------------- */

/* A connected session, referenced, by DEADLINE (monotonic ns): a new one when
 * the current one died. BATON_EUNAVAILABLE, BATON_EAUTH. */
int zk_sess_get(zeng *e, int64_t deadline, zsess **out);
void zk_sess_put(zeng *e, zsess *s);
/* 1 when S may no longer be used (under no lock). */
int zk_sess_dead(zeng *e, zsess *s);
/* Waits (at most until DEADLINE) until S is connected again after a
 * connection loss: 0, or BATON_EUNAVAILABLE when it died or time ran out. */
int zk_sess_wait(zeng *e, zsess *s, int64_t deadline);
/* The current session's generation when it is alive, else 0. */
uint64_t zk_live_gen(zeng *e);
/* 1 when ID is a session this client had and gave up (its ephemeral nodes
 * are not ours any more, even while the server keeps them). */
int zk_old_session(zeng *e, int64_t id);

uint64_t zk_slot_open(zeng *e);
void zk_slot_close(zeng *e, uint64_t id);
/* Points slot ID at W (NULL = nobody waits). */
void zk_slot_arm(zeng *e, uint64_t id, baton_waiter *w);
/* The watcher for node watches: its context is a slot id. */
void zk_node_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);
#define ZK_SLOT_CTX(id) ((void *)(uintptr_t)(id))

void zk_lock_link(zeng *e, zlock *l);
void zk_lock_unlink(zeng *e, zlock *l);
/* Queues PATH (on session GEN) for deletion by the check thread. */
void zk_orphan_add(zeng *e, const char *path, uint64_t gen);
/* Takes PATH back from the orphans not sent yet: 1 when it was there (the
 * caller deletes it itself, before making a node of that name again, so
 * that a late delete never removes the new one). */
int zk_orphan_claim(zeng *e, const char *path);
/* Forgets L's node (the caller deletes or frees the path it returns). */
char *zk_take_node(zeng *e, zlock *l, uint64_t *gen, int *lost);

/* A ZooKeeper return code as a baton error (sets the thread's error). */
int zk_err(int zrc, const char *what, const char *path);
/* 1 for the codes after which the session may still be usable. */
int zk_retryable(int zrc);
/* NAME → "<base>/<name>" (malloc'd), or BATON_EINVAL for names ZooKeeper
 * cannot hold. SUFFIX (may be NULL) is appended as "/<suffix>". */
int zk_path(zeng *e, const char *name, const char *suffix, char **out);
/* The same below BASE (e->vbase, e->gbase, e->qbase). */
int zk_path_in(zeng *e, const char *base, const char *name, const char *suffix, char **out);
/* Creates PATH's missing ancestors as containers (below the chroot) and
 * PATH itself with MODE (ZOO_PERSISTENT where a foreign client caches that
 * it made the node); 0 or a ZooKeeper code (ZNODEEXISTS is 0). */
int zk_mkpath(zeng *e, zsess *s, const char *path, int mode, int64_t deadline);
/* Creates PATH's missing ancestors (containers below the base) and PATH,
 * by DEADLINE (0 = the io timeout). */
int zk_mkdirs(zeng *e, zsess *s, const char *path, int64_t deadline);
const struct ACL_vector *zk_acl(zeng *e);
int64_t zk_deadline_ms(int ms);

/* The deadline of one request made for a call that ends at DEADLINE
 * (monotonic ns; 0 = a try, INT64_MAX = no end): the io timeout from now,
 * but never later than DEADLINE + ZK_GRACE_MS (a request sent at or after
 * the deadline still gets ZK_GRACE_MS: the last look of a wait, the delete
 * of its node). */
#define ZK_GRACE_MS 250
int64_t zk_call_deadline(zeng *e, int64_t deadline);

/* ---- call.c -------------------------------------------------------------- */

/* ZooKeeper requests that end at a deadline (the C client's synchronous
 * calls have none). Each returns what the zoo_* call of the same name
 * would, or ZOPERATIONTIMEOUT when DEADLINE (monotonic ns; 0 = the io
 * timeout from now) passed first: the request may still be carried out
 * (an abandoned create deletes the node it made). W/CTX: a watch, or NULL. */
int zk_get_children(zsess *s, const char *path, watcher_fn w, void *ctx, struct String_vector *out, int64_t deadline);
int zk_exists(zsess *s, const char *path, watcher_fn w, void *ctx, struct Stat *st, int64_t deadline);
int zk_get(zsess *s, const char *path, watcher_fn w, void *ctx, char *buf, int *len, struct Stat *st,
           int64_t deadline);
int zk_set(zsess *s, const char *path, const char *buf, int len, int version, int64_t deadline);
int zk_delete(zsess *s, const char *path, int version, int64_t deadline);
int zk_create(zsess *s, const char *path, const char *data, int len, const struct ACL_vector *acl, int mode,
              char *out, int outlen, struct Stat *st, int64_t deadline);

/* The same in two steps, to have several requests in flight at once:
 * zk_start_* sends (NULL with *ZRC when nothing was sent), zk_call_wait
 * waits (the answer, or ZOPERATIONTIMEOUT), the accessors read an answered
 * call, zk_call_put lets it go (also unanswered). */
typedef struct zcall zcall;
zcall *zk_start_children(zsess *s, const char *path, watcher_fn w, void *ctx, int *zrc);
/* The listing with the parent's stat (zk_call_stat). */
zcall *zk_start_children2(zsess *s, const char *path, watcher_fn w, void *ctx, int *zrc);
zcall *zk_start_exists(zsess *s, const char *path, watcher_fn w, void *ctx, int *zrc);
zcall *zk_start_get(zsess *s, const char *path, watcher_fn w, void *ctx, int *zrc);
zcall *zk_start_set(zsess *s, const char *path, const char *buf, int len, int version, int *zrc);
zcall *zk_start_delete(zsess *s, const char *path, int version, int *zrc);
zcall *zk_start_create(zsess *s, const char *path, const char *data, int len, const struct ACL_vector *acl, int mode,
                       int *zrc);
/* One transaction of two writes: PATH's data set to BUF if its version is
 * still VERSION (ZK_CREATE_VERSION: PATH created, persistent, with BUF),
 * and the ephemeral node MARK created, so that a write whose answer was
 * lost can be looked up (MARK exists iff it was carried out). The call's
 * stat is PATH's new one (a set's). */
#define ZK_CREATE_VERSION (-2)
zcall *zk_start_marked(zsess *s, const char *path, const char *buf, int len, int version, const char *mark,
                       const struct ACL_vector *acl, int *zrc);
int zk_call_wait(zcall *c, int64_t deadline);
/* After zookeeper_close of S: drops the calls whose completion never came. */
void zk_calls_release(zsess *s);
void zk_call_strings(zcall *c, struct String_vector *out); /* moves the listing out */
const struct Stat *zk_call_stat(zcall *c);
const char *zk_call_value(zcall *c);                      /* the path a create made */
void zk_call_data(zcall *c, char *buf, int *len);
/* A copy of the node's data (malloc'd, NUL-terminated; *len bytes). */
int zk_call_data_take(zcall *c, char **data, int *len);
void zk_call_put(zcall *c);

/* ---- lock.c -------------------------------------------------------------- */

int zk_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st);
int zk_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr);
int zk_election_new(void *eng, const char *name, const baton_lock_options *opts, void **st);
void zk_lock_free(void *eng, void *st);
int zk_lock_acquire(void *eng, void *st, baton_acquire_req *req);
int zk_lock_release(void *eng, void *st, const baton_owner *owner);
int zk_lock_info(void *eng, const char *name, baton_lockinfo *out);
/* admin.c: baton list, baton unlock --force */
int zk_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int zk_lock_break(void *eng, const char *name, uint64_t *fence);
int zk_election_leader(void *eng, const char *name, uint64_t known_fence, const char *known_value,
                       char *value, size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w);
int zk_election_proclaim(void *eng, void *st, const baton_owner *owner, const char *value);

/* An internal result: the session died under a waiting contender (its node
 * went with it); start again on a new session. */
#define ZK_AGAIN 1
/* Creates an ephemeral sequential node DIR/PREFIX<seq> holding DATA: the
 * directory is made on demand; after a connection loss the node is looked
 * for by its prefix (it carries a uuid) before a second one is made.
 * 0 with *out (malloc'd) and *st; ZK_AGAIN when the session died.
 * With LIST (else NULL), DIR's children are asked for right behind the first
 * create, in the same round trip; *LISTED = 1 when *LIST holds them (the
 * caller deallocates it), taken after the node was made; LW (else NULL)
 * with LCTX is the child watch that listing leaves on DIR. */
int zk_create_seq(zeng *e, zsess *s, const char *dir, const char *prefix, const char *data, char **out,
                  struct Stat *st, struct String_vector *list, int *listed, watcher_fn lw, void *lctx,
                  int64_t deadline);
/* Internal lock states (permits' Curator mutex). */
int zk_lock_init(zeng *e, const char *dir, int kind, zlock **out);

/* A child of a lock directory that takes part in some recipe. */
typedef struct {
    const char *name;        /* points into the children list */
    long long seq;           /* its 10-digit sequence number */
    unsigned kinds;          /* ZK_K_* bits */
} zchild;

#define ZK_K_LOCK  1u  /* "-lock-" (Curator InterProcessMutex), "__lock__" (kazoo Lock) */
#define ZK_K_READ  2u  /* "__READ__" (Curator), "__rlock__" (kazoo ReadLock) */
#define ZK_K_WRITE 4u  /* "__WRIT__" (Curator), "__lock__" (kazoo WriteLock) */
#define ZK_K_LATCH 8u  /* "latch-" (Curator LeaderLatch), "__lock__" (kazoo Election) */
#define ZK_K_LEASE 16u /* "-lease-" (Curator InterProcessSemaphoreV2) */

/* The children of SV that have a kind in MASK, sorted by sequence; *out
 * is malloc'd (free it, not the names). */
int zk_contenders(const struct String_vector *sv, unsigned mask, zchild **out, int *n);
/* Our protected-name prefix "_c_<uuid>-<tag>". */
void zk_prefix(char *buf, size_t n, const char *uuid, int kind);

/* ---- semaphore.c --------------------------------------------------------- */

int zk_sem_new(void *eng, const char *name, void **st);
void zk_sem_free(void *eng, void *st);
int zk_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w);
int zk_sem_release(void *eng, void *st, uint32_t permits);
int zk_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);
/* The signed count of NAME's semaphore (baton_lock_info): 0 with *V, and
 * *EXISTS = 0 when it was never set. */
int zk_sem_count(zeng *e, zsess *s, const char *name, int64_t *v, int *exists, int64_t dl);

/* ---- sem.c --------------------------------------------------------------- */

int zk_permits_new(void *eng, const char *name, void **st);
void zk_permits_free(void *eng, void *st);
int zk_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                       char id[BATON_PERMIT_ID_SIZE]);
int zk_permits_release(void *eng, void *st, const char *id);
int zk_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms);
int zk_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out);

/* ---- value.c ------------------------------------------------------------- */

int zk_value_new(void *eng, const char *name, void **st);
void zk_value_free(void *eng, void *st);
int zk_value_get(void *eng, void *st, baton_value_data *out);
int zk_value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version);
int zk_value_del(void *eng, void *st, uint64_t expect);
int zk_value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w);
/* A stat's owner says the node is ephemeral (a session's); persistent
 * nodes and containers show 0 there. */
#define ZK_IS_EPHEMERAL(st) ((st)->ephemeralOwner != 0)
/* Parks on W (armed on SLOT) until woken, DEADLINE or at most RECHECK_MS:
 * BATON_ETIMEDOUT past the deadline, BATON_ECANCELED, else 0. */
int zk_park(zeng *e, baton_waiter *w, unsigned gen, int64_t deadline, const char *what);
/* A new session for a watcher whose session died: tries until DEADLINE
 * (0 = once) or a cancel of W. */
int zk_resession(zeng *e, zsess **s, int64_t deadline, baton_waiter *w, const char *what);

/* ---- group.c ------------------------------------------------------------- */

int zk_member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st);
int zk_group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value), void *arg,
                  uint64_t *token);
int zk_group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w);
int zk_member_acquire(zeng *e, zlock *l, baton_acquire_req *req);
/* Release of a member or a taker: deletes its node if it is still ours. */
int zk_owned_release(zeng *e, zlock *l);
/* lock.c: arms the watch that reports our held node deleted by another. */
void zk_arm_held(zeng *e, zsess *s, zlock *l);

int zk_queue_new(void *eng, const char *name, void **st);
void zk_queue_free(void *eng, void *st);
int zk_queue_put(void *eng, void *st, const void *data, size_t len);
int zk_queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst);
int zk_queue_item(void *eng, void *tst, const char **data, size_t *len);
int zk_queue_done(void *eng, void *tst, const baton_owner *owner);
int zk_queue_size(void *eng, void *st, uint64_t *waiting);
int zk_taker_acquire(zeng *e, zlock *l, baton_acquire_req *req);


#endif
