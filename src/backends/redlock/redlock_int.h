/*
 * Internal declarations of the RedLock backend:
 *   quorum.c   the nodes, their connection pools, and one "round": the same
 *              command sent to several nodes at once and their replies read
 *              in one poll loop with a common deadline
 *   redlock.c  URI/options, the scripts, acquire/renew/release/info, the table
 *
 * The socket/TLS/RESP layer (rconn_*) and the subscriber (rsub_*) are the
 * Redis backend's (src/backends/redis/), reused as they are.
 */
#ifndef BATON_REDLOCK_INT_H
#define BATON_REDLOCK_INT_H

#include "../redis/redis_int.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define RL_MAX_NODES 16
#define RL_POOL_MAX 16

/* One independent Redis master. */
typedef struct {
    rcfg cfg;                /* host/port own; user/password/ssl_ctx shared with the engine */
    char label[128];         /* "host:port", for messages */
    pthread_mutex_t mu;      /* guards the fields below; never held across I/O */
    rconn *idle[RL_POOL_MAX];
    size_t nidle;
    unsigned fails;          /* consecutive failed connects */
    int64_t down_until;      /* no new connect before this (monotonic ns) */
    int connecting;          /* connects to it in flight (one at a time once one failed) */
    rsub sub;                /* unlock notifications from this node (started lazily) */
    int sub_init;
} rl_node;

/* The kind of a round, for the test hook: in a test build of the library
 * (compiled with BATON_TEST_HOOKS, linked by tests/redlock only; never in
 * libbaton.so / libbaton.a) the environment can ask for a pause between
 * sending one kind of round's requests and reading the replies. */
enum { RL_HOOK_NONE, RL_HOOK_ACQUIRE, RL_HOOK_FENCE };

typedef struct {
    rl_node *nodes;
    size_t n, quorum;
    int node_timeout_ms;
    int retry_delay_ms;
    char *prefix;
    char *user, *password;
    SSL_CTX *ssl_ctx;
    pthread_mutex_t cj_mu;   /* connect jobs (quorum.c) */
    pthread_cond_t cj_cv;    /* CLOCK_MONOTONIC */
    int cj_live;             /* abandoned connects still running: close waits for them */
    int cj_stopfd;           /* eventfd written at close: aborts their waits */
    int cj_init;
#ifdef BATON_TEST_HOOKS
    int pause_at;            /* RL_HOOK_*: which round the test pause applies to */
    int pause_ms;            /* > 0 sleep; -1 raise(SIGSTOP) */
#endif
} rl_eng;

/* One node's part of a round. The caller sets state RS_ON for the nodes that
 * take part (RS_OFF for the others) before rl_round. */
enum { RS_OFF, RS_ON, RS_SENT, RS_DONE, RS_FAIL };

typedef struct {
    int state;
    rconn *c;
    redisReply *reply;       /* RS_DONE: the reply (never an error reply) */
    int err;                 /* RS_FAIL: a BATON_E* code */
    int evaled;              /* the NOSCRIPT fallback (EVAL) was sent */
    int sent;                /* the request went out (it may have been applied) */
    char msg[256];           /* RS_FAIL: why */
} rl_slot;

/* A script call: EVALSHA sha nkeys keys... args..., EVAL body on NOSCRIPT;
 * or, when raw is set, that command as it is (PING). At most 8 keys and 8 args. */
typedef struct {
    const char *body;
    const char *sha;
    int nkeys, nargs;
    const char *const *keys;
    const char *const *args;
    const char *const *raw;
    int nraw;
} rl_call;

/* How a round waits. */
typedef struct {
    int64_t timeout_ns;      /* for the replies, from the first send */
    size_t enough;           /* fewer replies than this by then: wait ... */
    int64_t grace_ns;        /* ... up to this much longer for the rest */
    int64_t hard_deadline;   /* never past this (monotonic ns; 0 = none) */
    int hook;                /* RL_HOOK_*: the round's kind (test builds may pause there) */
    int all_nodes;           /* also connect to nodes whose last connect just failed */
} rl_round_opts;

/* Sends CALL to every RS_ON slot (connecting first where needed, in parallel),
 * then reads the replies as O says. *first_sent (may be NULL) is when the
 * first request went out, 0 when none did. Every slot ends RS_OFF, RS_DONE or
 * RS_FAIL. Nodes whose last connect failed a moment ago are skipped (failed)
 * unless O->all_nodes, or unless too few others are left for a quorum. */
void rl_round(rl_eng *e, rl_slot *s, const rl_call *call, const rl_round_opts *o, int64_t *first_sent);
/* Frees the replies and returns the connections; slots become RS_OFF. */
void rl_slots_reset(rl_eng *e, rl_slot *s);

/* A connection to node I alone (from its pool, or a new one connected by
 * the earlier of DEADLINE and the connect timeout), for a walk that is not
 * a round (the operator's list); rl_node_conn_put gives it back (a broken
 * one is closed). */
int rl_node_conn(rl_eng *e, size_t i, rconn **out, int64_t deadline);
void rl_node_conn_put(rl_eng *e, size_t i, rconn *c);

int rl_nodes_init(rl_eng *e);
void rl_nodes_destroy(rl_eng *e);

#endif
