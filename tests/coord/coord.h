/* The coordination conformance suite (issue 24): shared state and helpers of
 * coord.c (main, workers, values, counters, latches) and families.c
 * (groups, barriers, queues). See coord.c for what it runs and how. */
#ifndef BATON_TESTS_COORD_H
#define BATON_TESTS_COORD_H

#include <baton.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../harness.h"
#include "../common/testlib.h"

extern char g_uri[1024];
extern char g_prefix[128];
extern const char *g_backend;
extern unsigned g_prims;        /* baton_engine_find(...)->primitives */
/* How a dead holder's grant ends on this engine, for the bounded waits of
 * the kill cases: */
extern int g_leases;            /* per-grant leases, renewed by the client */
extern int g_session_ms;        /* ZooKeeper session / etcd client lease (ms) */
extern int g_conn_session;      /* PostgreSQL / MySQL session and row modes (their families still use lease rows) */
/* the lease every lease-based case uses */
#define CO_LEASE_MS 2000

/* The longest a dead member's or taker's grant may outlive its process,
 * plus a margin for a starved machine. */
static inline int co_dead_bound_ms(void) {
    if (g_session_ms) return g_session_ms + 8000;
    if (g_leases) return CO_LEASE_MS + 8000;
    return 8000;   /* file (the kernel), SQL sessions (the server sees the close) */
}

static inline const char *co_name(char *buf, size_t n, const char *suffix) {
    snprintf(buf, n, "%s%s", g_prefix, suffix);
    return buf;
}

static inline baton_client *co_client(void) { return tl_client_open(g_uri); }

/* The calls that fill a result struct, freeing what it held first: the
 * API zeroes *out without freeing it, so a struct used again must be
 * cleared (OUT must be zeroed or hold a previous result). */
static inline int co_value_get(baton_value *v, baton_value_data *out) {
    baton_value_data_clear(out);
    return baton_value_get(v, out);
}
static inline int co_value_watch(baton_value *v, uint64_t known, baton_value_data *out, int64_t wait_ms) {
    baton_value_data_clear(out);
    return baton_value_watch(v, known, out, wait_ms);
}
static inline int co_members(baton_group *g, baton_members *out) {
    baton_members_clear(out);
    return baton_group_members(g, out);
}
static inline int co_group_watch(baton_group *g, baton_members *out, int64_t wait_ms) {
    baton_members_clear(out);
    return baton_group_watch(g, out, wait_ms);
}

/* A thread with a bounded join: run FN(ARG); co_join waits at most
 * TIMEOUT_MS, calling CANCEL(CARG) first when it is not done by then. */
typedef struct {
    void *(*fn)(void *);
    void *arg;
    atomic_int done;
    pthread_t th;
} co_thread;

void co_start(co_thread *t, void *(*fn)(void *), void *arg);
int co_wait(co_thread *t, int timeout_ms);
void co_join(co_thread *t, int timeout_ms, int (*cancel)(void *), void *carg);

/* families.c; its CHECKs are counted apart (harness.h's counters are static) */
void families_enter(const char *name);
void families_totals(int *passed, int *failed);
void test_group_basic(void);
void test_group_two_clients(void);
void test_group_watch(void);
void test_group_closed_client(void);
void test_group_killed_member(void);
void test_group_bad_ids(void);
void test_barrier(void);
void test_queue_fifo(void);
void test_queue_wait_put(void);
void test_queue_return_done(void);
void test_queue_concurrent(void);
void test_queue_killed_taker(void);
void test_queue_item_lost(void);
void test_queue_bad(void);
int worker_member(const char *uri, const char *name, const char *id, uint32_t lease_ms);
int worker_take(const char *uri, const char *name, uint32_t lease_ms);

#endif
