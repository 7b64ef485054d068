/*
 * The leader election suite (baton_election_*): one binary, one row per
 * engine with elections in the engine table below, run by ctest once per
 * engine (as tests/conformance is one suite run on every engine):
 *
 *   test_election zk        ctest election_zk: a server of its own in
 *                           $BATON_TEST_TMP/election_zk (it is frozen), 3 s sessions
 *   test_election etcd      ctest election_etcd: the "etcd" fixture, 2 s leases
 *   test_election file|sqlite|redis|redis_simple|postgres|postgres_lease|
 *                 postgres_row|mysql|mysql_lease
 *                           the elections the library builds on a lock plus a
 *                           value (tests/election/CMakeLists.txt says where each
 *                           server comes from); 2 s leases where leases are per lock
 *
 * An engine's row says where its server comes from (one of its own, started
 * with tests/servers/<engine>.sh, or the ctest fixture's port), its URI, the
 * session or lease time a lost leader takes to go, and which cases of the
 * case table run on it, in order.
 *
 * Cases:
 *   - two_candidates: two candidates on two clients: the first leads at once,
 *     the second waits; a third handle reads the leader's value (cut to n
 *     bytes) and fence; a campaign with wait 0 while another leads answers
 *     BATON_ELOCKED and is not left in line; observe answers at once, then
 *     waits for a change and sees it when the leader resigns; the second then
 *     leads with a higher fence; proclaim changes the value in the same term
 *     (a waiting observer sees it); a candidate that does not lead cannot
 *     proclaim; freed while leading: nobody leads;
 *   - cancel: a blocked campaign and a blocked observe are cancelled; the
 *     cancelled candidate is not left in line;
 *   - session_lost: the server is frozen past the leader's session: on_lost
 *     once, is_leader false, resign BATON_ELOST; once the server resumes a
 *     new candidate leads with a higher fence (a server of its own only);
 *   - killed_leader, frozen_leader: a leader in another process is SIGKILLed,
 *     or SIGSTOPped past its session or lease: the waiting candidate leads in
 *     a later term; resumed, the frozen one is told (on_lost), no longer
 *     leads, and its resign answers BATON_ELOST;
 *   - dead_alone: a leader in another process is SIGKILLed with nobody in line:
 *     a waiting observer is told "nobody leads" once its session or lease is
 *     gone; a new campaign leads in a later term;
 *   - listen: a listener (baton_election_listen) sees nobody, a leader, its
 *     proclaimed value, nobody, the next leader; unlisten; close and free
 *     while listening;
 *   - fifo (engines whose candidates queue in order): three candidates join
 *     behind a leader; each resign hands over to the next in arrival order;
 *   - restart: the server stops past the leader's lease and starts again:
 *     on_lost once, proclaim and resign BATON_ELOST, a new candidate leads in
 *     a later term (a server of its own only).
 *
 * Candidate mode (also used by tests/zk/interop_kazoo.py):
 *   test_election --candidate URI NAME VALUE
 *     says "CAMPAIGNING", campaigns (waiting up to 120 s), says
 *     "LEADER <fence>"; then "RESIGN" -> "RESIGNED <rc>", "LEADER?" ->
 *     "LEADER <0|1>"; EOF: exit (free resigns). From on_lost: "LOST".
 */
#include <baton.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

typedef struct {
    const char *name;       /* the engine: tests/servers/<name>.sh, its ctest fixture */
    const char *uri;        /* "{port}" = the server's port */
    int own_server;         /* start a server of its own (its cases freeze it) */
    int lease_ms;           /* the session or lease of URI: how long a lost leader lasts */
    int margin_ms;          /* slack on top of it for a loaded box */
    const char *cases;      /* the cases of the case table that run, in order */
    /* rows of the elections the library builds on a lock plus a value: */
    const char *server;     /* the fixture or tests/servers script (NULL = name) */
    int lease_opt;          /* 1 = candidates take lease_ms as their lease (the engine's leases are per lock) */
    const char *server_args; /* a server of its own: extra arguments of its start */
} engine;

static const engine g_engines[] = {
    /* sessions of 3 s; see tests/zk/session.c for why the slack is this large */
    { "zk", "zk://127.0.0.1:{port}?session_timeout_ms=3000", 1, 3000, 6000,
      "two_candidates cancel fifo listen session_lost killed_leader dead_alone frozen_leader", NULL, 0, NULL },
    /* etcd grants at least 1.5 s: 3/2 of its election timeout */
    { "etcd", "etcd://127.0.0.1:{port}?ttl=2", 0, 2000, 10000,
      "two_candidates cancel fifo listen killed_leader dead_alone frozen_leader", NULL, 0, NULL },
    /* built on a lock plus a value: "{tmp}" = $BATON_TEST_TMP. A killed file
     * or session-mode leader is gone at once (its process or connection);
     * leased ones take lease_ms */
    { .name = "file", .uri = "file://{tmp}/election_file", .lease_ms = 1000, .margin_ms = 5000,
      .cases = "two_candidates cancel fifo listen killed_leader dead_alone" },
    { .name = "sqlite", .uri = "sqlite://{tmp}/election_sqlite.db", .lease_ms = 2000, .margin_ms = 8000,
      .lease_opt = 1, .cases = "two_candidates cancel fifo listen killed_leader dead_alone frozen_leader" },
    /* a server of its own, restarted (its AOF keeps fences across the restart) */
    { .name = "redis", .uri = "redis://127.0.0.1:{port}/0", .own_server = 1, .lease_ms = 2000, .margin_ms = 8000,
      .lease_opt = 1, .server_args = "--appendonly yes --appendfsync always",
      .cases = "two_candidates cancel fifo listen killed_leader dead_alone frozen_leader restart" },
    { .name = "redis_simple", .server = "redis", .uri = "redis://127.0.0.1:{port}/0?layout=simple",
      .lease_ms = 2000, .margin_ms = 8000, .lease_opt = 1,
      .cases = "two_candidates cancel killed_leader dead_alone" },
    { .name = "postgres", .uri = "postgres://baton:baton-test@127.0.0.1:{port}/postgres", .own_server = 1,
      .lease_ms = 2000, .margin_ms = 8000, .lease_opt = 1,
      .cases = "two_candidates cancel fifo listen killed_leader dead_alone restart" },
    { .name = "postgres_lease", .server = "postgres",
      .uri = "postgres://baton:baton-test@127.0.0.1:{port}/postgres?mode=lease", .lease_ms = 2000,
      .margin_ms = 8000, .lease_opt = 1, .cases = "two_candidates cancel fifo killed_leader dead_alone frozen_leader" },
    { .name = "postgres_row", .server = "postgres",
      .uri = "postgres://baton:baton-test@127.0.0.1:{port}/postgres?mode=row", .lease_ms = 2000,
      .margin_ms = 8000, .lease_opt = 1, .cases = "two_candidates cancel fifo killed_leader dead_alone" },
    { .name = "mysql", .uri = "mysql://baton:baton-test@127.0.0.1:{port}/baton", .lease_ms = 2000,
      .margin_ms = 8000, .lease_opt = 1, .cases = "two_candidates cancel fifo listen killed_leader dead_alone" },
    { .name = "mysql_lease", .server = "mysql", .uri = "mysql://baton:baton-test@127.0.0.1:{port}/baton?mode=lease",
      .lease_ms = 2000, .margin_ms = 8000, .lease_opt = 1,
      .cases = "two_candidates cancel fifo killed_leader dead_alone frozen_leader" },
};

static const engine *E;
static char g_uri[1024];
static char g_prefix[96];
static char g_dir[1024];

static const char *server_of(void) { return E->server ? E->server : E->name; }

static const char *ename(char *buf, size_t n, const char *what) {
    snprintf(buf, n, "%s%s", g_prefix, what);
    return buf;
}

static void cleanup(void) {
    if (g_dir[0]) tl_sh("bash '%s/%s.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, server_of(), g_dir);
}

/* ---- candidate mode ------------------------------------------------------------ */

static void cand_lost(baton_election *e, void *payload) {
    (void)e, (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

static int candidate(const char *uri, const char *name, const char *value) {
    baton_client *c = NULL;
    baton_election *e = NULL;
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    char line[128];
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR %d open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    o.on_lost = cand_lost;
    const char *lease = getenv("ELECTION_TEST_LEASE_MS");
    if (lease && *lease) o.lease_ms = (uint32_t)atoi(lease);
    if ((rc = baton_election_open(&e, c, name, &o))) {
        tl_out_line("ERR %d election_open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("CAMPAIGNING\n");
    if ((rc = baton_election_campaign(e, value, 120000))) {
        tl_out_line("ERR %d campaign: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("LEADER %llu\n", (unsigned long long)baton_election_fence(e));
    for (;;) {
        if (tl_read_line(0, line, sizeof line, 600000) < 0) break;
        if (!strcmp(line, "RESIGN")) tl_out_line("RESIGNED %d\n", baton_election_resign(e));
        else if (!strcmp(line, "LEADER?")) tl_out_line("LEADER %d\n", baton_election_is_leader(e));
    }
    baton_election_free(e);
    baton_client_close(c);
    return 0;
}

/* ---- threads, on_lost ------------------------------------------------------------- */

typedef struct {
    baton_election *e;
    const char *value;
    int64_t wait_ms;
    int rc;
    atomic_int done;
    pthread_t th;
} campaign_thread;

static void *campaign_main(void *p) {
    campaign_thread *t = p;
    t->rc = baton_election_campaign(t->e, t->value, t->wait_ms);
    atomic_store(&t->done, 1);
    return NULL;
}

static void campaign_start(campaign_thread *t, baton_election *e, const char *value, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->e = e;
    t->value = value;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, campaign_main, t);
}

static int done_within(atomic_int *done, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(done) && tl_now_ms() < end) tl_sleep_ms(10);
    return atomic_load(done);
}

typedef struct {
    baton_election *e;
    int64_t wait_ms;
    int rc;
    char value[BATON_ELECTION_VALUE_MAX + 1];
    uint64_t fence;
    atomic_int done;
    pthread_t th;
} observe_thread;

static void *observe_main(void *p) {
    observe_thread *t = p;
    t->rc = baton_election_observe(t->e, t->value, sizeof t->value, &t->fence, t->wait_ms);
    atomic_store(&t->done, 1);
    return NULL;
}

static void observe_start(observe_thread *t, baton_election *e, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->e = e;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, observe_main, t);
}

typedef struct {
    atomic_int count;
    _Atomic int64_t t_ms;     /* tl_now_ms() of the first call */
} lost_rec;

static void lost_cb(baton_election *e, void *payload) {
    (void)e;
    lost_rec *z = payload;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&z->t_ms, &zero, tl_now_ms());
    atomic_fetch_add(&z->count, 1);
}

static baton_election *election_on(baton_client *c, const char *name, lost_rec *z) {
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    if (E->lease_opt) o.lease_ms = (uint32_t)E->lease_ms;
    if (z) {
        o.on_lost = lost_cb;
        o.on_lost_payload = z;
    }
    baton_election *e = NULL;
    MUST(baton_election_open(&e, c, name, &o));
    return e;
}

/* ---- cases ------------------------------------------------------------------------- */

static void c_two_candidates(int unused) {
    (void)unused;
    char name[160], value[BATON_ELECTION_VALUE_MAX + 1], small[5];
    uint64_t fence = 0;
    ename(name, sizeof name, "two");
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri), *c3 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, NULL), *e2 = election_on(c2, name, NULL);
    baton_election *e3 = election_on(c3, name, NULL);

    /* nobody leads yet */
    CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), BATON_ENOTHELD);
    CHECK_RC(baton_election_observe(e3, value, sizeof value, &fence, 0), 0); /* the first answers at once */
    CHECK(value[0] == 0 && fence == 0);

    CHECK_RC(baton_election_campaign(e1, "node-1:8080", 10000), 0);
    CHECK(baton_election_is_leader(e1));
    uint64_t f1 = baton_election_fence(e1);
    CHECK(f1 > 0);

    campaign_thread t2;
    campaign_start(&t2, e2, "node-2:8080", -1);
    CHECK(!done_within(&t2.done, 1500)); /* the second waits while the first leads */
    CHECK(!baton_election_is_leader(e2));
    CHECK(baton_election_fence(e2) == 0);

    CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "node-1:8080"));
    CHECK(fence == f1);
    CHECK_RC(baton_election_leader(e3, small, sizeof small, NULL), 0); /* cut to n bytes */
    CHECK(!strcmp(small, "node"));

    /* a candidate that will not wait: ELOCKED, and it is not left in line */
    CHECK_RC(baton_election_campaign(e3, "node-3:8080", 0), BATON_ELOCKED);
    CHECK(!baton_election_is_leader(e3));

    /* observe: at once with the leader, then it waits for a change */
    CHECK_RC(baton_election_observe(e3, value, sizeof value, &fence, 5000), 0);
    CHECK(!strcmp(value, "node-1:8080") && fence == f1);
    observe_thread ot;
    observe_start(&ot, e3, 30000);
    CHECK(!done_within(&ot.done, 1000)); /* nothing changed yet */

    CHECK_RC(baton_election_resign(e1), 0);
    CHECK(!baton_election_is_leader(e1));
    CHECK_RC(baton_election_resign(e1), BATON_ENOTHELD);

    CHECK(done_within(&t2.done, 15000));
    pthread_join(t2.th, NULL);
    CHECK_RC(t2.rc, 0);
    CHECK(baton_election_is_leader(e2));
    uint64_t f2 = baton_election_fence(e2);
    fprintf(stderr, "   terms: %llu then %llu\n", (unsigned long long)f1, (unsigned long long)f2);
    CHECK(f2 > f1);

    /* the observer saw the change: the new leader, or first a moment with
     * nobody leading ("" and 0) and then the new leader */
    CHECK(done_within(&ot.done, 30000));
    pthread_join(ot.th, NULL);
    CHECK_RC(ot.rc, 0);
    if (ot.rc == 0 && ot.fence == 0) {
        CHECK(ot.value[0] == 0);
        CHECK_RC(baton_election_observe(e3, ot.value, sizeof ot.value, &ot.fence, 15000), 0);
    }
    CHECK(!strcmp(ot.value, "node-2:8080"));
    CHECK(ot.fence == f2);

    /* proclaim: a new value in the same term, seen by a waiting observer */
    observe_start(&ot, e3, 30000);
    CHECK(!done_within(&ot.done, 300)); /* the leader it knows is node-2:8080 */
    CHECK_RC(baton_election_proclaim(e2, "node-2:9090"), 0);
    CHECK(done_within(&ot.done, 15000));
    pthread_join(ot.th, NULL);
    CHECK_RC(ot.rc, 0);
    CHECK(!strcmp(ot.value, "node-2:9090") && ot.fence == f2);
    CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "node-2:9090") && fence == f2);
    CHECK_RC(baton_election_proclaim(e1, "not-leading"), BATON_ENOTHELD);

    /* the first candidate runs again: it waits behind the second */
    campaign_thread t1;
    campaign_start(&t1, e1, "node-1:8080", -1);
    CHECK(!done_within(&t1.done, 1000));
    CHECK_RC(baton_election_resign(e2), 0);
    CHECK(done_within(&t1.done, 15000));
    pthread_join(t1.th, NULL);
    CHECK_RC(t1.rc, 0);
    CHECK(baton_election_fence(e1) > f2);

    baton_election_free(e3);
    baton_election_free(e2);
    baton_election_free(e1); /* resigns */
    baton_election *e4 = election_on(c3, name, NULL);
    int rc;
    int64_t end = tl_now_ms() + 10000;
    while ((rc = baton_election_leader(e4, value, sizeof value, &fence)) == 0 && tl_now_ms() < end) tl_sleep_ms(50);
    CHECK_RC(rc, BATON_ENOTHELD); /* freed while leading: nobody leads */
    baton_election_free(e4);
    baton_client_close(c3);
    baton_client_close(c2);
    baton_client_close(c1);
}

/* A blocked campaign and a blocked observe can be cancelled. */
static void c_cancel(int unused) {
    (void)unused;
    char name[160], value[64];
    uint64_t fence;
    ename(name, sizeof name, "cancel");
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, NULL), *e2 = election_on(c2, name, NULL);
    CHECK_RC(baton_election_campaign(e1, "one", 10000), 0);
    campaign_thread t;
    campaign_start(&t, e2, "two", -1);
    CHECK(!done_within(&t.done, 500));
    CHECK_RC(baton_election_cancel(e2), 0);
    CHECK(done_within(&t.done, 10000));
    pthread_join(t.th, NULL);
    CHECK_RC(t.rc, BATON_ECANCELED);
    CHECK(!baton_election_is_leader(e2));

    CHECK_RC(baton_election_observe(e2, value, sizeof value, &fence, 0), 0);
    observe_thread ot;
    observe_start(&ot, e2, -1);
    CHECK(!done_within(&ot.done, 500));
    CHECK_RC(baton_election_cancel(e2), 0);
    CHECK(done_within(&ot.done, 10000));
    pthread_join(ot.th, NULL);
    CHECK_RC(ot.rc, BATON_ECANCELED);

    /* the cancelled candidate is not in line: when the first resigns, nobody leads */
    CHECK_RC(baton_election_resign(e1), 0);
    tl_sleep_ms(500);
    CHECK(!baton_election_is_leader(e2));
    CHECK_RC(baton_election_leader(e2, value, sizeof value, &fence), BATON_ENOTHELD);
    baton_election_free(e2);
    baton_election_free(e1);
    baton_client_close(c2);
    baton_client_close(c1);
}

/* The leader's session is lost (its server frozen past the session): on_lost
 * once. */
static void c_session_lost(int unused) {
    (void)unused;
    char name[160], value[64];
    uint64_t fence;
    ename(name, sizeof name, "lost");
    lost_rec lost;
    atomic_init(&lost.count, 0);
    atomic_init(&lost.t_ms, 0);
    baton_client *c1 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, &lost);
    CHECK_RC(baton_election_campaign(e1, "doomed", 10000), 0);
    uint64_t f1 = baton_election_fence(e1);

    CHECK(tl_sh("bash '%s/%s.sh' pause '%s' >/dev/null", TL_SERVERS_DIR, server_of(), g_dir) == 0);
    int64_t t0 = tl_now_ms();
    int64_t end = t0 + E->lease_ms + E->margin_ms;
    while (atomic_load(&lost.count) == 0 && tl_now_ms() < end) tl_sleep_ms(20);
    int n = atomic_load(&lost.count);
    fprintf(stderr, "   server frozen: election on_lost after %lld ms (session %d ms)\n",
            (long long)(atomic_load(&lost.t_ms) ? atomic_load(&lost.t_ms) - t0 : -1), E->lease_ms);
    CHECK(n == 1);
    CHECK(!baton_election_is_leader(e1));
    CHECK(baton_election_fence(e1) == 0);
    CHECK(tl_sh("bash '%s/%s.sh' resume '%s' >/dev/null", TL_SERVERS_DIR, server_of(), g_dir) == 0);
    CHECK_RC(baton_election_resign(e1), BATON_ELOST);

    /* Another candidate leads once the old session is gone, in a later term. */
    baton_client *c2 = tl_client_open(g_uri);
    baton_election *e2 = election_on(c2, name, NULL);
    CHECK_RC(baton_election_campaign(e2, "next", 3 * E->lease_ms + E->margin_ms), 0);
    CHECK(baton_election_fence(e2) > f1);
    CHECK_RC(baton_election_leader(e2, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "next"));
    tl_sleep_ms(500);
    CHECK(atomic_load(&lost.count) == 1); /* once */
    baton_election_free(e2);
    baton_election_free(e1);
    baton_client_close(c2);
    baton_client_close(c1);
}

/* A leader in another process, killed (SIG = SIGKILL) or frozen (SIGSTOP)
 * while a candidate here waits: the candidate leads once the leader's
 * session or lease is gone, in a later term. */
static void c_dead_leader(int sig) {
    char name[160], line[128], value[64];
    uint64_t fence;
    tl_worker w;
    ename(name, sizeof name, sig == SIGKILL ? "killed" : "frozen");
    char *argv[] = { "test_election", "--candidate", g_uri, name, "old", NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    if (tl_expect_line(&w, "CAMPAIGNING", line, sizeof line, 15000) ||
        tl_expect_line(&w, "LEADER ", line, sizeof line, 15000)) {
        CHECK(0);
        kill(w.pid, SIGKILL);
        tl_worker_reap(&w, 5000);
        return;
    }
    uint64_t f1 = strtoull(line + 7, NULL, 10);
    CHECK(f1 > 0);
    baton_client *c = tl_client_open(g_uri);
    baton_election *e = election_on(c, name, NULL);
    CHECK_RC(baton_election_campaign(e, "new", 0), BATON_ELOCKED);
    campaign_thread t;
    campaign_start(&t, e, "new", 3 * E->lease_ms + E->margin_ms);
    CHECK(!done_within(&t.done, 500));
    kill(w.pid, sig);
    int64_t t0 = tl_now_ms();
    /* generous: the session or lease plus the server's expiry pass, on a loaded box */
    CHECK(done_within(&t.done, 3 * E->lease_ms + E->margin_ms));
    pthread_join(t.th, NULL);
    fprintf(stderr, "   %s leader: the next candidate led after %lld ms (session or lease %d ms)\n",
            sig == SIGKILL ? "killed" : "frozen", (long long)(tl_now_ms() - t0), E->lease_ms);
    CHECK_RC(t.rc, 0);
    CHECK(baton_election_is_leader(e));
    CHECK(baton_election_fence(e) > f1);
    CHECK_RC(baton_election_leader(e, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "new") && fence == baton_election_fence(e));
    if (sig == SIGKILL) {
        CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    } else {
        /* resumed: it learns it lost, does not lead, and cannot resign */
        kill(w.pid, SIGCONT);
        CHECK(tl_expect_line(&w, "LOST", line, sizeof line, 5000) == 0);
        tl_send_line(&w, "LEADER?\n");
        CHECK(tl_expect_line(&w, "LEADER 0", line, sizeof line, 5000) == 0);
        tl_send_line(&w, "RESIGN\n");
        snprintf(value, sizeof value, "RESIGNED %d", BATON_ELOST);
        CHECK(tl_expect_line(&w, value, line, sizeof line, 5000) == 0);
        close(w.to);
        w.to = -1;
        CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));
        /* the old leader leaving did not touch the new one */
        CHECK(baton_election_is_leader(e));
        CHECK_RC(baton_election_leader(e, value, sizeof value, &fence), 0);
        CHECK(!strcmp(value, "new"));
    }
    CHECK_RC(baton_election_resign(e), 0);
    baton_election_free(e);
    baton_client_close(c);
}

/* ---- listeners ---------------------------------------------------------------- */

#define MAX_EVENTS 64

typedef struct {
    pthread_mutex_t mu;
    int n;
    int ev[MAX_EVENTS];
    uint64_t fence[MAX_EVENTS];
    char value[MAX_EVENTS][64];
} listen_rec;

static void listen_cb(baton_election *e, int event, const char *value, uint64_t fence, void *payload) {
    (void)e;
    listen_rec *r = payload;
    pthread_mutex_lock(&r->mu);
    if (r->n < MAX_EVENTS) {
        r->ev[r->n] = event;
        r->fence[r->n] = fence;
        snprintf(r->value[r->n], sizeof r->value[r->n], "%s", value);
    }
    r->n++;
    pthread_mutex_unlock(&r->mu);
}

/* Waits until the listener has told event number I (0-based); 1 when it has,
 * with what it said. */
static int listen_wait(listen_rec *r, int i, int *ev, uint64_t *fence, char *value, size_t n, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int have = r->n > i && i < MAX_EVENTS;
        if (have) {
            *ev = r->ev[i];
            *fence = r->fence[i];
            snprintf(value, n, "%s", r->value[i]);
        }
        pthread_mutex_unlock(&r->mu);
        if (have) return 1;
        if (tl_now_ms() >= end) return 0;
        tl_sleep_ms(10);
    }
}

static int listen_count(listen_rec *r) {
    pthread_mutex_lock(&r->mu);
    int n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* A listener sees nobody, a leader, its proclaimed value, nobody again when
 * it resigns and the next leader in a later term, in that order (each step
 * waits for the listener, so none is skipped); unlisten stops it; a listener
 * still running when its client closes and its handle is freed ends cleanly. */
static void c_listen(int unused) {
    (void)unused;
    char name[160], v[64];
    uint64_t f = 0;
    int ev = 0;
    ename(name, sizeof name, "listen");
    listen_rec r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri), *c3 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, NULL), *e2 = election_on(c2, name, NULL);
    baton_election *e3 = election_on(c3, name, NULL);

    CHECK_RC(baton_election_unlisten(e3), BATON_ENOTHELD);
    CHECK_RC(baton_election_listen(e3, listen_cb, &r), 0);
    CHECK_RC(baton_election_listen(e3, listen_cb, &r), BATON_EINVAL); /* one per handle */
    CHECK(listen_wait(&r, 0, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_NONE && f == 0 && v[0] == 0);

    CHECK_RC(baton_election_campaign(e1, "alpha", 10000), 0);
    uint64_t f1 = baton_election_fence(e1);
    CHECK(listen_wait(&r, 1, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_LEADER && f == f1 && !strcmp(v, "alpha"));

    CHECK_RC(baton_election_proclaim(e1, "beta"), 0);
    CHECK(listen_wait(&r, 2, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_VALUE && f == f1 && !strcmp(v, "beta"));

    CHECK_RC(baton_election_resign(e1), 0);
    CHECK(listen_wait(&r, 3, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_NONE && f == 0 && v[0] == 0);

    CHECK_RC(baton_election_campaign(e2, "gamma", 10000), 0);
    uint64_t f2 = baton_election_fence(e2);
    CHECK(f2 > f1);
    CHECK(listen_wait(&r, 4, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_LEADER && f == f2 && !strcmp(v, "gamma"));

    /* unlisten: nothing more is told */
    CHECK_RC(baton_election_unlisten(e3), 0);
    int n = listen_count(&r);
    CHECK_RC(baton_election_proclaim(e2, "delta"), 0);
    tl_sleep_ms(1500);
    CHECK(listen_count(&r) == n);
    CHECK(n == 5);

    /* listening while the client closes, then freed; and freed while listening */
    listen_rec r2;
    memset(&r2, 0, sizeof r2);
    pthread_mutex_init(&r2.mu, NULL);
    CHECK_RC(baton_election_listen(e3, listen_cb, &r2), 0);
    CHECK(listen_wait(&r2, 0, &ev, &f, v, sizeof v, 15000));
    CHECK(ev == BATON_ELECTION_LEADER && f == f2 && !strcmp(v, "delta"));
    CHECK_RC(baton_election_listen(e1, listen_cb, &r), 0);
    int64_t t0 = tl_now_ms();
    baton_client_close(c3); /* wakes the listener's wait */
    fprintf(stderr, "   close with a listener: %lld ms\n", (long long)(tl_now_ms() - t0));
    baton_election_free(e3);
    baton_election_free(e1); /* stops its listener */
    baton_election_free(e2);
    baton_client_close(c2);
    baton_client_close(c1);
    pthread_mutex_destroy(&r.mu);
    pthread_mutex_destroy(&r2.mu);
}

/* The server of the leader stops past the leader's lease and starts again:
 * the leader is told once (on_lost), can neither proclaim nor resign
 * (BATON_ELOST), and a new candidate leads in a later term. */
static void c_restart(int unused) {
    (void)unused;
    char name[160], value[64];
    uint64_t fence = 0;
    ename(name, sizeof name, "restart");
    lost_rec lost;
    atomic_init(&lost.count, 0);
    atomic_init(&lost.t_ms, 0);
    baton_client *c1 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, &lost);
    CHECK_RC(baton_election_campaign(e1, "before", 10000), 0);
    uint64_t f1 = baton_election_fence(e1);

    tl_server(server_of(), "stop", g_dir, NULL, 0);
    int64_t t0 = tl_now_ms();
    int64_t end = t0 + E->lease_ms + E->margin_ms;
    while (atomic_load(&lost.count) == 0 && tl_now_ms() < end) tl_sleep_ms(20);
    fprintf(stderr, "   server stopped: on_lost after %lld ms (lease %d ms)\n",
            (long long)(atomic_load(&lost.t_ms) ? atomic_load(&lost.t_ms) - t0 : -1), E->lease_ms);
    CHECK(atomic_load(&lost.count) == 1);
    CHECK(!baton_election_is_leader(e1));
    tl_server(server_of(), "restart", g_dir, NULL, 0);
    CHECK_RC(baton_election_proclaim(e1, "still-me"), BATON_ELOST);
    CHECK_RC(baton_election_resign(e1), BATON_ELOST);

    baton_client *c2 = tl_client_open(g_uri);
    baton_election *e2 = election_on(c2, name, NULL);
    CHECK_RC(baton_election_campaign(e2, "after", 3 * E->lease_ms + E->margin_ms), 0);
    CHECK(baton_election_fence(e2) > f1);
    CHECK_RC(baton_election_leader(e2, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "after") && fence == baton_election_fence(e2));
    /* the old candidate, its client reconnected, reads the new leader */
    CHECK_RC(baton_election_leader(e1, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "after"));
    CHECK(atomic_load(&lost.count) == 1); /* once */
    baton_election_free(e2);
    baton_election_free(e1);
    baton_client_close(c2);
    baton_client_close(c1);
}

/* A leader in another process is SIGKILLed with nobody in line: an observer
 * that knows it is told "nobody leads" (fence 0) once its session or lease
 * is gone, though no candidate comes to replace it (the elections on a lock
 * plus a value re-read the lock at least every second; the record the dead
 * leader left is not reported). */
static void c_dead_alone(int unused) {
    (void)unused;
    char name[160], line[128], value[64];
    uint64_t fence = 0;
    tl_worker w;
    ename(name, sizeof name, "alone");
    char *argv[] = { "test_election", "--candidate", g_uri, name, "lonely", NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    if (tl_expect_line(&w, "CAMPAIGNING", line, sizeof line, 15000) ||
        tl_expect_line(&w, "LEADER ", line, sizeof line, 15000)) {
        CHECK(0);
        kill(w.pid, SIGKILL);
        tl_worker_reap(&w, 5000);
        return;
    }
    uint64_t f1 = strtoull(line + 7, NULL, 10);
    baton_client *c = tl_client_open(g_uri);
    baton_election *e = election_on(c, name, NULL);
    CHECK_RC(baton_election_observe(e, value, sizeof value, &fence, 0), 0);
    CHECK(!strcmp(value, "lonely") && fence == f1);
    observe_thread ot;
    observe_start(&ot, e, 3 * E->lease_ms + E->margin_ms);
    CHECK(!done_within(&ot.done, 300));
    kill(w.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    CHECK(done_within(&ot.done, 3 * E->lease_ms + E->margin_ms + 5000));
    pthread_join(ot.th, NULL);
    fprintf(stderr, "   killed leader, nobody in line: seen gone after %lld ms (session or lease %d ms)\n",
            (long long)(tl_now_ms() - t0), E->lease_ms);
    CHECK_RC(ot.rc, 0);
    CHECK(ot.fence == 0 && ot.value[0] == 0);
    CHECK_RC(baton_election_leader(e, value, sizeof value, &fence), BATON_ENOTHELD);
    /* a new campaign leads at once, in a later term */
    CHECK_RC(baton_election_campaign(e, "next", 10000), 0);
    CHECK(baton_election_fence(e) > f1);
    CHECK_RC(baton_election_resign(e), 0);
    baton_election_free(e);
    baton_client_close(c);
}

/* The oldest candidate leads (engines whose candidates queue in order): three
 * candidates join, half a second apart, behind a leader; each resign hands
 * over to the next in the order they came, in increasing terms. */
static void c_fifo(int unused) {
    (void)unused;
    char name[160], want[16];
    enum { N = 3 };
    ename(name, sizeof name, "fifo");
    baton_client *c0 = tl_client_open(g_uri), *cs[N];
    baton_election *e0 = election_on(c0, name, NULL), *es[N];
    campaign_thread ts[N];
    CHECK_RC(baton_election_campaign(e0, "first", 10000), 0);
    uint64_t last = baton_election_fence(e0);
    for (int i = 0; i < N; i++) {
        cs[i] = tl_client_open(g_uri);
        es[i] = election_on(cs[i], name, NULL);
        campaign_start(&ts[i], es[i], i == 0 ? "c0" : i == 1 ? "c1" : "c2", 60000);
        tl_sleep_ms(500); /* queued before the next one comes */
    }
    CHECK_RC(baton_election_resign(e0), 0);
    for (int i = 0; i < N; i++) {
        CHECK(done_within(&ts[i].done, 20000));
        for (int j = i + 1; j < N; j++) CHECK(!atomic_load(&ts[j].done)); /* the later ones still wait */
        pthread_join(ts[i].th, NULL);
        CHECK_RC(ts[i].rc, 0);
        char value[64];
        uint64_t fence = 0;
        CHECK_RC(baton_election_leader(es[i], value, sizeof value, &fence), 0);
        snprintf(want, sizeof want, "c%d", i);
        CHECK(!strcmp(value, want));
        /* proclaim while others wait in line (their places can carry fences of their own) */
        CHECK_RC(baton_election_proclaim(es[i], "proclaimed"), 0);
        CHECK_RC(baton_election_leader(es[0], value, sizeof value, &fence), 0);
        CHECK(!strcmp(value, "proclaimed") && fence == baton_election_fence(es[i]));
        CHECK(baton_election_fence(es[i]) > last);
        last = baton_election_fence(es[i]);
        tl_sleep_ms(300);
        CHECK_RC(baton_election_resign(es[i]), 0);
    }
    for (int i = 0; i < N; i++) {
        baton_election_free(es[i]);
        baton_client_close(cs[i]);
    }
    baton_election_free(e0);
    baton_client_close(c0);
}

/* ---- the case table --------------------------------------------------------- */

typedef struct {
    const char *name;
    void (*fn)(int arg);
    int arg;
} election_case;

static const election_case g_cases[] = {
    { "two_candidates", c_two_candidates, 0 },
    { "cancel", c_cancel, 0 },
    { "session_lost", c_session_lost, 0 },
    { "killed_leader", c_dead_leader, SIGKILL },
    { "frozen_leader", c_dead_leader, SIGSTOP },
    { "listen", c_listen, 0 },
    { "dead_alone", c_dead_alone, 0 },
    { "fifo", c_fifo, 0 },
    { "restart", c_restart, 0 },
};

static const election_case *find_case(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++)
        if (strlen(g_cases[i].name) == len && !strncmp(g_cases[i].name, name, len)) return &g_cases[i];
    return NULL;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--candidate")) {
        if (argc == 5) return candidate(argv[2], argv[3], argv[4]);
        fprintf(stderr, "usage: %s --candidate URI NAME VALUE\n", argv[0]);
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s ENGINE\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < sizeof g_engines / sizeof g_engines[0]; i++)
        if (!strcmp(g_engines[i].name, argv[1])) E = &g_engines[i];
    if (!E) {
        fprintf(stderr, "no election engine \"%s\"\n", argv[1]);
        return 2;
    }
    /* every case of the engine's list exists (a typo is a failure, not a skip) */
    for (const char *p = E->cases; *p;) {
        size_t len = strcspn(p, " ");
        if (len && !find_case(p, len)) {
            fprintf(stderr, "FAIL: no case \"%.*s\"\n", (int)len, p);
            printf("0 passed, 1 failed\n");
            return 1;
        }
        p += len;
        p += strspn(p, " ");
    }

    const char *tmp = getenv("BATON_TEST_TMP");
    if (!tmp || !*tmp) tmp = "/tmp";
    if (E->lease_opt) {
        char ms[16];
        snprintf(ms, sizeof ms, "%d", E->lease_ms);
        setenv("ELECTION_TEST_LEASE_MS", ms, 1); /* the candidates of --candidate */
    }
    if (strstr(E->uri, "{tmp}")) {
        const char *ph = strstr(E->uri, "{tmp}");
        snprintf(g_uri, sizeof g_uri, "%.*s%s%s", (int)(ph - E->uri), E->uri, tmp, ph + 5);
    } else if (E->own_server) {
        snprintf(g_dir, sizeof g_dir, "%s/election_%s", tmp, E->name);
        tl_sh("bash '%s/%s.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'", TL_SERVERS_DIR, server_of(), g_dir, g_dir);
        atexit(cleanup);
        int port = tl_server(server_of(), "start", g_dir, E->server_args, 1);
        char ps[16];
        snprintf(ps, sizeof ps, "%d", port);
        const char *ph = strstr(E->uri, "{port}");
        snprintf(g_uri, sizeof g_uri, "%.*s%s%s", (int)(ph - E->uri), E->uri, ps, ph + 6);
    } else if (tl_uri_with_port(g_uri, sizeof g_uri, E->uri, server_of()) != 0) {
        char why[128];
        snprintf(why, sizeof why, "no test %s server (no port file)", server_of());
        return tl_skip_status(why, 1);
    }
    snprintf(g_prefix, sizeof g_prefix, "election-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "election: %s (names %s*)\n", g_uri, g_prefix);

    /* An engine without elections is a skip (not expected for these). */
    baton_client *c = tl_client_open(g_uri);
    baton_election *e = NULL;
    int rc = baton_election_open(&e, c, "probe", NULL);
    if (e) baton_election_free(e);
    baton_client_close(c);
    if (rc == BATON_ENOTSUP) {
        /* every row's engine has elections: their absence is a failure */
        fprintf(stderr, "FAIL: the %s engine has no leader election\n", E->name);
        printf("0 passed, 1 failed\n");
        return 1;
    }

    const char *only = getenv("ELECTION_ONLY");
    for (const char *p = E->cases; *p;) {
        size_t len = strcspn(p, " ");
        const election_case *ec = len ? find_case(p, len) : NULL;
        p += len;
        p += strspn(p, " ");
        if (!ec || (only && !strstr(ec->name, only))) continue;
        th_current = ec->name;
        fprintf(stderr, "-- %s\n", ec->name);
        ec->fn(ec->arg);
    }
    return th_finish();
}
