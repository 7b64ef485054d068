/*
 * The default Redis lock's release wakes one waiter per client, not all of
 * them (src/backends/redis/sub.c, "One-wake registrations"), and no wake-up
 * is lost on the way. Servers of its own: one with keyspace notifications
 * off (the default), one with Kgx.
 *
 *   chain          32 waiters on ONE client, a chain of releases: every one
 *                  granted, never two holders at once, fences strictly
 *                  increase, and each handoff comes well before the 2 s
 *                  re-check (a lost wake-up would wait for it)
 *   commands       server commands per handoff (INFO commandstats) with 64
 *                  waiters on one client stay under 3 x the count with 1
 *                  (waking all costs about 32 attempts per handoff here)
 *   lost_to_other  a waiter woken by an unlock message that finds the lock
 *                  still held (a foreign client got it first) keeps waiting,
 *                  and the next real release wakes a waiter again at once
 *   cancel_woken   the oldest waiter is canceled as the release wakes it:
 *                  the next waiter is granted at once (the wake is passed
 *                  on), not at the re-check; repeated, as the race is timing's
 *   timeout_woken  the same with the oldest waiter's wait running out
 *   foreign_del    Kgx: a foreign DEL of a held lock (no unlock message)
 *                  wakes one of the client's waiters; the rest follow
 *   sub_killed     the client's subscriber connection is killed while 16
 *                  waiters wait: all are granted in turn, no two holders,
 *                  fences increase (a lost connection wakes every waiter)
 *   holder_killed  the holder (another process, 1 s lease) is SIGKILLed while
 *                  8 waiters of one client wait: all granted once the lease
 *                  is gone, one at a time, fences above the dead holder's
 *   idle_holder    a client that holds a lock and waits for nothing keeps
 *                  its subscriber connection past the 10 s keepalive (its
 *                  PING is answered +PONG outside subscribe mode) and so
 *                  renews nothing early: a dropped subscriber re-checks,
 *                  i.e. renews, every held lock on its reconnect
 *
 * Usage: test_redis_herd
 */
#include <baton.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"
#include "../common/redis.h"

#define MAXW 64
#define HANDOFF_BOUND_NS 1000000000LL /* the re-check that would hide a lost wake-up is 2 s */

static char g_dir_off[1024], g_dir_k[1024];
static int g_port_off, g_port_k;
static char g_tag[32];

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Every command the server ran (scripts' inner calls included), less the
 * test's own INFO / CONFIG / PUBSUB / CLIENT. */
static long long server_calls(int port) {
    redisReply *r = tl_redis_cmd(port, 5, "INFO commandstats");
    long long n = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (const char *p = r->str; (p = strstr(p, "cmdstat_")) != NULL; p++) {
            const char *c = strstr(p, ":calls=");
            if (!c) break;
            if (strncmp(p, "cmdstat_info:", 13) && strncmp(p, "cmdstat_config", 14) &&
                strncmp(p, "cmdstat_pubsub", 14) && strncmp(p, "cmdstat_client", 14))
                n += atoll(c + 7);
        }
    }
    if (r) freeReplyObject(r);
    return n;
}

static baton_client *open_client(int port) {
    char uri[128];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", port);
    baton_client *c = NULL;
    if (baton_client_open(&c, uri, NULL) != 0) {
        fprintf(stderr, "FATAL: open %s: %s\n", uri, tl_lastmsg());
        exit(1);
    }
    return c;
}

/* ---- waiters on one client ------------------------------------------------ */

typedef struct herd herd;

typedef struct {
    herd *h;
    baton_lock *l;
    int64_t wait_ms;
    int hold_ms;
    int rc;
    int64_t granted_ns;
    uint64_t fence;
    pthread_t t;
} waiter;

struct herd {
    pthread_mutex_t mu;
    int holders, max_holders, grants;
    uint64_t fences[MAXW + 8];
    int64_t released_ns;     /* the last release (atomic) */
    int64_t worst_gap_ns;    /* the longest release -> next grant */
};

static void herd_init(herd *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
}

/* Granted: counts holders and records the fence and the gap since the last
 * release; holds HOLD_MS, then releases. */
static void *waiter_main(void *p) {
    waiter *w = p;
    herd *h = w->h;
    w->rc = baton_lock_acquire(w->l, w->wait_ms);
    w->granted_ns = now_ns();
    if (w->rc) return NULL;
    w->fence = baton_lock_fence(w->l);
    pthread_mutex_lock(&h->mu);
    if (++h->holders > h->max_holders) h->max_holders = h->holders;
    if (h->grants < MAXW + 8) h->fences[h->grants] = w->fence;
    h->grants++;
    int64_t gap = w->granted_ns - __atomic_load_n(&h->released_ns, __ATOMIC_SEQ_CST);
    if (gap > h->worst_gap_ns) h->worst_gap_ns = gap;
    pthread_mutex_unlock(&h->mu);
    if (w->hold_ms) tl_sleep_ms(w->hold_ms);
    pthread_mutex_lock(&h->mu);
    h->holders--;
    pthread_mutex_unlock(&h->mu);
    __atomic_store_n(&h->released_ns, now_ns(), __ATOMIC_SEQ_CST);
    int rc = baton_lock_release(w->l);
    if (rc) w->rc = rc;
    return NULL;
}

static void waiter_start(waiter *w, herd *h, baton_client *c, const char *name, int64_t wait_ms, int hold_ms) {
    memset(w, 0, sizeof *w);
    w->h = h;
    w->wait_ms = wait_ms;
    w->hold_ms = hold_ms;
    if (baton_lock_open(&w->l, c, name, NULL) != 0) {
        fprintf(stderr, "FATAL: lock open: %s\n", tl_lastmsg());
        exit(1);
    }
    if (pthread_create(&w->t, NULL, waiter_main, w) != 0) {
        perror("pthread_create");
        exit(1);
    }
}

static void waiter_join(waiter *w) {
    pthread_join(w->t, NULL);
    baton_lock_free(w->l);
}

static int fences_increase(herd *h) {
    int n = h->grants < MAXW + 8 ? h->grants : MAXW + 8;
    for (int i = 1; i < n; i++)
        if (h->fences[i] <= h->fences[i - 1]) return 0;
    return 1;
}

/* Holder HL (on its own client) holds NAME; N waiters on client C queue
 * behind it (started oldest first, 30 ms apart, so each has failed its first
 * attempt and is parked before the next). */
static void queue_up(waiter *ws, int n, herd *h, baton_client *c, const char *name, int64_t wait_ms) {
    for (int i = 0; i < n; i++) {
        waiter_start(&ws[i], h, c, name, wait_ms, 2);
        tl_sleep_ms(i < 4 ? 60 : 10);
    }
    tl_sleep_ms(300);
}

/* The chain of N waiters on one client on PORT; the server commands it cost
 * (from the first release to the last grant's release), -1 on failure. */
static long long chain(int port, int n, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "%schain-%s-%d", g_tag, what, n);
    baton_client *hc = open_client(port), *c = open_client(port);
    baton_lock *hl = NULL;
    CHECK_RC(baton_lock_open(&hl, hc, name, NULL), 0);
    CHECK_RC(baton_lock_acquire(hl, 5000), 0);
    uint64_t f0 = baton_lock_fence(hl);
    herd h;
    herd_init(&h);
    waiter ws[MAXW];
    queue_up(ws, n, &h, c, name, 60000);
    tl_redis_do(port, "CONFIG RESETSTAT");
    __atomic_store_n(&h.released_ns, now_ns(), __ATOMIC_SEQ_CST);
    CHECK_RC(baton_lock_release(hl), 0);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        waiter_join(&ws[i]);
        if (ws[i].rc) bad++;
    }
    tl_sleep_ms(100);
    long long calls = server_calls(port);
    CHECK(bad == 0);
    CHECK(h.grants == n);
    CHECK(h.max_holders == 1);
    CHECK(fences_increase(&h));
    CHECK(n == 0 || h.fences[0] > f0);
    CHECK(h.worst_gap_ns < HANDOFF_BOUND_NS);
    printf("measure: %s: %d waiters on one client: %lld server commands, %.1f per handoff, "
           "worst release -> grant %.1f ms\n",
           what, n, calls, n ? (double)calls / n : 0.0, h.worst_gap_ns / 1e6);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(hc);
    return bad || h.grants != n ? -1 : calls;
}

static void test_chain(void) { chain(g_port_off, 32, "off"); }

static void test_commands(void) {
    long long one = 0, many = 0;
    /* the least of two: another test's lingering channel may add a PING */
    for (int i = 0; i < 2; i++) {
        long long a = chain(g_port_off, 1, "one"), b = chain(g_port_off, 64, "many");
        if (i == 0 || (a >= 0 && a < one)) one = a;
        if (i == 0 || (b >= 0 && b < many)) many = b;
    }
    printf("measure: commands per handoff: %lld at 1 waiter, %.1f at 64 on one client\n", one, many / 64.0);
    CHECK(one > 0 && many > 0);
    CHECK(many < 3 * one * 64);
}

/* ---- woken, lost to another client, waits on ---------------------------- */

static int channel_of(int port, const char *name, char *out, size_t n) {
    redisReply *r = tl_redis_cmd(port, 5, "PUBSUB CHANNELS *lock__channel*%s*", name);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 1;
    if (ok) snprintf(out, n, "%s", r->element[0]->str);
    if (r) freeReplyObject(r);
    return ok;
}

static void test_lost_to_other(void) {
    char name[96], chan[256];
    snprintf(name, sizeof name, "%slost", g_tag);
    baton_client *hc = open_client(g_port_off), *c = open_client(g_port_off);
    baton_lock *hl = NULL;
    CHECK_RC(baton_lock_open(&hl, hc, name, NULL), 0);
    CHECK_RC(baton_lock_acquire(hl, 5000), 0);
    herd h;
    herd_init(&h);
    waiter ws[4];
    queue_up(ws, 4, &h, c, name, 20000);
    CHECK(channel_of(g_port_off, name, chan, sizeof chan));
    /* an unlock message while the lock is held (as when another client
     * takes it between the release and the woken waiter's attempt): the
     * woken waiter tries, fails, and waits on; so does everyone */
    for (int i = 0; i < 6; i++) { /* more than the waiters: every one woken and failed */
        tl_redis_do(g_port_off, "PUBLISH %s 0", chan);
        tl_sleep_ms(50);
    }
    tl_sleep_ms(100);
    CHECK(h.grants == 0);
    __atomic_store_n(&h.released_ns, now_ns(), __ATOMIC_SEQ_CST);
    CHECK_RC(baton_lock_release(hl), 0);
    for (int i = 0; i < 4; i++) {
        waiter_join(&ws[i]);
        CHECK_RC(ws[i].rc, 0);
    }
    CHECK(h.grants == 4);
    CHECK(h.max_holders == 1);
    CHECK(fences_increase(&h));
    CHECK(h.worst_gap_ns < HANDOFF_BOUND_NS);
    printf("measure: woken, lost, waits on: worst release -> grant %.1f ms\n", h.worst_gap_ns / 1e6);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(hc);
}

/* ---- the woken waiter leaves: the wake is passed on ---------------------- */

/* Rounds of: the oldest of 3 waiters on one client (A) leaves as the release
 * wakes it (canceled right after the release, or its wait running out at
 * the release); the others must be granted, each at once. */
static void leave_rounds(int by_timeout) {
    int left = 0, rounds = 12;
    int64_t worst = 0;
    for (int r = 0; r < rounds; r++) {
        char name[96];
        snprintf(name, sizeof name, "%sleave%d-%d", g_tag, by_timeout, r);
        baton_client *hc = open_client(g_port_off), *c = open_client(g_port_off);
        baton_lock *hl = NULL;
        CHECK_RC(baton_lock_open(&hl, hc, name, NULL), 0);
        CHECK_RC(baton_lock_acquire(hl, 5000), 0);
        herd h;
        herd_init(&h);
        waiter ws[3];
        /* A's wait ends about at the release (by_timeout), jittered over rounds */
        int64_t a_wait = 400 + (r % 4) * 2;
        int64_t t0 = now_ns();
        waiter_start(&ws[0], &h, c, name, by_timeout ? a_wait : 20000, 2);
        tl_sleep_ms(60);
        waiter_start(&ws[1], &h, c, name, 20000, 2);
        tl_sleep_ms(30);
        waiter_start(&ws[2], &h, c, name, 20000, 2);
        if (by_timeout) {
            int64_t until = t0 + a_wait * 1000000LL - 300000; /* the wake lands as the wait runs out */
            while (now_ns() < until) tl_sleep_ms(1);
        } else {
            tl_sleep_ms(300);
        }
        __atomic_store_n(&h.released_ns, now_ns(), __ATOMIC_SEQ_CST);
        CHECK_RC(baton_lock_release(hl), 0);
        if (!by_timeout) baton_lock_cancel(ws[0].l);
        for (int i = 0; i < 3; i++) waiter_join(&ws[i]);
        if (ws[0].rc) left++;
        CHECK(ws[0].rc == 0 || ws[0].rc == (by_timeout ? BATON_ETIMEDOUT : BATON_ECANCELED));
        CHECK_RC(ws[1].rc, 0);
        CHECK_RC(ws[2].rc, 0);
        CHECK(h.max_holders == 1);
        CHECK(fences_increase(&h));
        CHECK(h.worst_gap_ns < HANDOFF_BOUND_NS);
        if (h.worst_gap_ns > worst) worst = h.worst_gap_ns;
        baton_lock_free(hl);
        baton_client_close(c);
        baton_client_close(hc);
    }
    printf("measure: oldest waiter %s at the release in %d of %d rounds; worst release -> grant %.1f ms\n",
           by_timeout ? "timed out" : "canceled", left, rounds, worst / 1e6);
}

static void test_cancel_woken(void) { leave_rounds(0); }
static void test_timeout_woken(void) { leave_rounds(1); }

/* ---- a foreign DEL wakes a waiter (Kgx) ---------------------------------- */

static void test_foreign_del(void) {
    char name[96];
    snprintf(name, sizeof name, "%sdel", g_tag);
    baton_client *c = open_client(g_port_k);
    /* a foreign (Redisson-shaped) holder with a long lease, released by DEL
     * alone: no unlock message, only the keyspace event */
    tl_redis_do(g_port_k, "HSET %s 8f0e3b3c-0000-0000-0000-0000000000aa:1 1", name);
    tl_redis_do(g_port_k, "PEXPIRE %s 60000", name);
    herd h;
    herd_init(&h);
    waiter ws[8];
    queue_up(ws, 8, &h, c, name, 20000);
    CHECK(h.grants == 0);
    __atomic_store_n(&h.released_ns, now_ns(), __ATOMIC_SEQ_CST);
    CHECK(tl_redis_int(g_port_k, "DEL %s", name) == 1);
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        waiter_join(&ws[i]);
        bad += ws[i].rc != 0;
    }
    CHECK(bad == 0);
    CHECK(h.grants == 8);
    CHECK(h.max_holders == 1);
    CHECK(fences_increase(&h));
    CHECK(h.worst_gap_ns < HANDOFF_BOUND_NS);
    printf("measure: Kgx: foreign DEL, 8 waiters on one client: worst release -> grant %.1f ms\n",
           h.worst_gap_ns / 1e6);
    baton_client_close(c);
}

/* ---- the subscriber connection killed ------------------------------------ */

static void test_sub_killed(void) {
    char name[96];
    snprintf(name, sizeof name, "%skill", g_tag);
    baton_client *hc = open_client(g_port_off), *c = open_client(g_port_off);
    baton_lock *hl = NULL;
    CHECK_RC(baton_lock_open(&hl, hc, name, NULL), 0);
    CHECK_RC(baton_lock_acquire(hl, 5000), 0);
    uint64_t f0 = baton_lock_fence(hl);
    herd h;
    herd_init(&h);
    waiter ws[16];
    queue_up(ws, 16, &h, c, name, 20000);
    CHECK(tl_redis_int(g_port_off, "CLIENT KILL TYPE pubsub") >= 1);
    tl_sleep_ms(20);
    CHECK(h.grants == 0); /* woken to re-check, all find it held */
    __atomic_store_n(&h.released_ns, now_ns(), __ATOMIC_SEQ_CST);
    CHECK_RC(baton_lock_release(hl), 0);
    int bad = 0;
    for (int i = 0; i < 16; i++) {
        waiter_join(&ws[i]);
        bad += ws[i].rc != 0;
    }
    CHECK(bad == 0);
    CHECK(h.grants == 16);
    CHECK(h.max_holders == 1);
    CHECK(fences_increase(&h));
    CHECK(h.fences[0] > f0);
    printf("measure: subscriber killed, 16 waiters on one client: worst release -> grant %.1f ms\n",
           h.worst_gap_ns / 1e6);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(hc);
}

/* ---- the holder SIGKILLed ------------------------------------------------ */

/* A child process holds NAME with a 1 s lease and is SIGKILLed while 8
 * waiters of one client wait: nobody releases and nothing is published; the
 * waiters' TTL re-check finds the lease gone. All are granted, one at a
 * time, fences above the dead holder's. */
static void test_holder_killed(void) {
    char name[96];
    snprintf(name, sizeof name, "%sdead", g_tag);
    int fds[2];
    if (pipe(fds)) { perror("pipe"); exit(1); }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        baton_client *c = open_client(g_port_off);
        baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
        lo.lease_ms = 1000;
        baton_lock *l = NULL;
        uint64_t f = 0;
        if (baton_lock_open(&l, c, name, &lo) == 0 && baton_lock_acquire(l, 5000) == 0) f = baton_lock_fence(l);
        if (write(fds[1], &f, sizeof f) != (ssize_t)sizeof f) _exit(1);
        for (;;) pause();
    }
    close(fds[1]);
    uint64_t dead_fence = 0;
    CHECK(read(fds[0], &dead_fence, sizeof dead_fence) == (ssize_t)sizeof dead_fence);
    close(fds[0]);
    CHECK(dead_fence > 0);
    baton_client *c = open_client(g_port_off);
    herd h;
    herd_init(&h);
    waiter ws[8];
    kill(pid, SIGKILL);
    int64_t killed = now_ns();
    waitpid(pid, NULL, 0);
    __atomic_store_n(&h.released_ns, killed, __ATOMIC_SEQ_CST);
    queue_up(ws, 8, &h, c, name, 20000);
    int bad = 0;
    int64_t first = INT64_MAX;
    for (int i = 0; i < 8; i++) {
        waiter_join(&ws[i]);
        bad += ws[i].rc != 0;
        if (!ws[i].rc && ws[i].granted_ns < first) first = ws[i].granted_ns;
    }
    CHECK(bad == 0);
    CHECK(h.grants == 8);
    CHECK(h.max_holders == 1);
    CHECK(fences_increase(&h));
    CHECK(h.fences[0] > dead_fence);
    printf("measure: holder SIGKILLed (1 s lease), 8 waiters on one client: first grant %.0f ms after the kill\n",
           (first - killed) / 1e6);
    baton_client_close(c);
}

/* total_connections_received and EVALSHA calls, from one INFO (its own
 * connection counted: each read opens one). */
static void conns_scripts(int port, long long *conns, long long *evals) {
    redisReply *r = tl_redis_cmd(port, 5, "INFO all");
    *conns = *evals = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "total_connections_received:");
        if (p) *conns = atoll(p + strlen("total_connections_received:"));
        p = strstr(r->str, "cmdstat_evalsha:calls=");
        *evals = p ? atoll(p + strlen("cmdstat_evalsha:calls=")) : 0;
    }
    if (r) freeReplyObject(r);
}

static void test_idle_holder(void) {
    char name[128];
    snprintf(name, sizeof name, "%sidle", g_tag);
    baton_client *c = open_client(g_port_k);
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    lo.lease_ms = 60000; /* renewed at 20 s: after this test's window */
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, name, &lo), 0);
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    tl_sleep_ms(500); /* the subscriber (started by the grant) connects */
    long long conns, evals, conns2, evals2;
    conns_scripts(g_port_k, &conns, &evals);
    tl_sleep_ms(12500); /* past the subscriber's 10 s keepalive PING */
    conns_scripts(g_port_k, &conns2, &evals2);
    /* one new connection: the second INFO's own */
    printf("measure: idle holder over 12.5 s: %lld new connections besides the test's, %lld scripts\n",
           conns2 - conns - 1, evals2 - evals);
    CHECK(conns > 0 && conns2 - conns == 1);
    CHECK(evals2 == evals);
    CHECK(baton_lock_held(l) == 1);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir_off, sizeof g_dir_off, "%s/redis_herd-off-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
    snprintf(g_dir_k, sizeof g_dir_k, "%s/redis_herd-k-%ld", tt && *tt ? tt : "/tmp", (long)getpid());
    tl_mkdirs(g_dir_off);
    tl_mkdirs(g_dir_k);
    g_port_off = tl_server("redis", "start", g_dir_off, NULL, 1);
    g_port_k = tl_server("redis", "start", g_dir_k, "--notify-keyspace-events Kgx", 1);
    snprintf(g_tag, sizeof g_tag, "herd%ld-", (long)getpid());
    RUN(test_chain);
    RUN(test_commands);
    RUN(test_lost_to_other);
    RUN(test_cancel_woken);
    RUN(test_timeout_woken);
    RUN(test_foreign_del);
    RUN(test_sub_killed);
    RUN(test_holder_killed);
    RUN(test_idle_holder);
    tl_server_stop("redis", g_dir_off);
    tl_server_stop("redis", g_dir_k);
    return th_finish();
}
