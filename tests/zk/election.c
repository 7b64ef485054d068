/*
 * Leader election on ZooKeeper (baton_election_*):
 *
 *   test_zk_election           starts its own server in $BATON_TEST_TMP/zk_election
 *
 *   - two candidates on two clients: the first leads at once, the second
 *     waits; a third handle (a third client) reads the leader's value and
 *     fence with baton_election_leader; campaign with wait 0 while another
 *     leads answers BATON_ELOCKED;
 *   - baton_election_observe sees the change when the leader resigns; the
 *     second candidate then leads with a higher fence; proclaim changes the
 *     value without a new term;
 *   - the leader's session is lost (the server frozen past the session
 *     timeout): on_lost runs once, is_leader turns false, resign answers
 *     BATON_ELOST, and after the server resumes nobody (or a new candidate)
 *     leads with a higher fence.
 *
 * Candidate mode (used by tests/zk/interop_kazoo.py too):
 *   test_zk_election --candidate URI NAME VALUE
 *     says "CAMPAIGNING", campaigns (waiting up to 120 s), says
 *     "LEADER <fence>"; then "RESIGN" -> "RESIGNED <rc>", "LEADER?" ->
 *     "LEADER <0|1>"; EOF: exit (free resigns). From on_lost: "LOST".
 */
#include "zkt.h"

/* See tests/zk/session.c for why the slack is this large. */
#define T_MS 3000
#define ZKT_MARGIN_MS 6000

static char g_dir[1024];
static char g_srv[1200];
static char g_uri[256];

static void cand_lost(baton_election *e, void *payload) {
    (void)e, (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

static int candidate(const char *uri, const char *name, const char *value) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR %d open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    o.on_lost = cand_lost;
    baton_election *e = NULL;
    if ((rc = baton_election_open(&e, c, name, &o)) != 0) {
        tl_out_line("ERR %d election_open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("CAMPAIGNING\n");
    if ((rc = baton_election_campaign(e, value, 120000)) != 0) {
        tl_out_line("ERR %d campaign: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("LEADER %llu\n", (unsigned long long)baton_election_fence(e));
    char line[128];
    for (;;) {
        if (tl_read_line(0, line, sizeof line, 600000) < 0) break;
        if (!strcmp(line, "RESIGN")) tl_out_line("RESIGNED %d\n", baton_election_resign(e));
        else if (!strcmp(line, "LEADER?")) tl_out_line("LEADER %d\n", baton_election_is_leader(e));
    }
    baton_election_free(e);
    baton_client_close(c);
    return 0;
}

/* ---- threads ------------------------------------------------------------------ */

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

static baton_election *election_on(baton_client *c, const char *name, zkt_lost *z) {
    baton_election_options o = BATON_ELECTION_OPTIONS_INIT;
    if (z) {
        o.on_lost = zkt_election_lost_cb;
        o.on_lost_payload = z;
    }
    baton_election *e = NULL;
    MUST(baton_election_open(&e, c, name, &o));
    return e;
}

/* ---- cases ------------------------------------------------------------------- */

static void test_two_candidates(void) {
    char name[128], value[BATON_ELECTION_VALUE_MAX + 1];
    uint64_t fence = 0;
    zkt_name(name, sizeof name, "election", "two");
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
    /* the second waits while the first leads */
    CHECK(!done_within(&t2.done, 1500));
    CHECK(!baton_election_is_leader(e2));
    CHECK(baton_election_fence(e2) == 0);

    CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), 0);
    CHECK(!strcmp(value, "node-1:8080"));
    CHECK(fence == f1);
    /* the leader's value, cut to n bytes */
    char small[5];
    CHECK_RC(baton_election_leader(e3, small, sizeof small, NULL), 0);
    CHECK(!strcmp(small, "node"));

    /* a third candidate that will not wait: ELOCKED, and its candidacy is withdrawn */
    CHECK_RC(baton_election_campaign(e3, "node-3:8080", 0), BATON_ELOCKED);
    CHECK(!baton_election_is_leader(e3));

    /* observe: answers at once with the current leader, then waits for a change */
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

    /* proclaim: a new value, the same term */
    int rc = baton_election_proclaim(e2, "node-2:9090");
    CHECK(rc == 0 || rc == BATON_ENOTSUP);
    if (rc == 0) {
        CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), 0);
        CHECK(!strcmp(value, "node-2:9090"));
        CHECK(fence == f2);
        CHECK_RC(baton_election_observe(e3, value, sizeof value, &fence, 10000), 0);
        CHECK(!strcmp(value, "node-2:9090") && fence == f2);
    }
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
    /* freed while leading: nobody leads now */
    baton_election *e4 = election_on(c3, name, NULL);
    int64_t end = tl_now_ms() + 10000;
    while ((rc = baton_election_leader(e4, value, sizeof value, &fence)) == 0 && tl_now_ms() < end) tl_sleep_ms(50);
    CHECK_RC(rc, BATON_ENOTHELD);
    baton_election_free(e4);
    baton_client_close(c3);
    baton_client_close(c2);
    baton_client_close(c1);
}

/* A blocked campaign and a blocked observe can be cancelled. */
static void test_cancel(void) {
    char name[128];
    zkt_name(name, sizeof name, "election", "cancel");
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

    char value[64];
    uint64_t fence;
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

/* The leader's session is lost: on_lost once. */
static void test_session_lost(void) {
    char name[128], value[64];
    uint64_t fence;
    zkt_name(name, sizeof name, "election", "lost");
    zkt_lost lost;
    zkt_lost_init(&lost);
    baton_client *c1 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name, &lost);
    CHECK_RC(baton_election_campaign(e1, "doomed", 10000), 0);
    uint64_t f1 = baton_election_fence(e1);

    CHECK(zkt_srv("pause", g_srv) == 0);
    int64_t t0 = tl_now_ms();
    int n = zkt_lost_wait(&lost, T_MS + ZKT_MARGIN_MS);
    fprintf(stderr, "   server frozen: election on_lost after %lld ms (session %d ms)\n",
            (long long)(atomic_load(&lost.t_ms) ? atomic_load(&lost.t_ms) - t0 : -1), T_MS);
    CHECK(n == 1);
    CHECK(!baton_election_is_leader(e1));
    CHECK(baton_election_fence(e1) == 0);
    CHECK(zkt_srv("resume", g_srv) == 0);
    CHECK_RC(baton_election_resign(e1), BATON_ELOST);

    /* Another candidate leads once the old session is gone, in a later term. */
    baton_client *c2 = tl_client_open(g_uri);
    baton_election *e2 = election_on(c2, name, NULL);
    CHECK_RC(baton_election_campaign(e2, "next", 3 * T_MS + ZKT_MARGIN_MS), 0);
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

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--candidate")) {
        if (argc == 5) return candidate(argv[2], argv[3], argv[4]);
        fprintf(stderr, "usage: %s --candidate URI NAME VALUE\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("election"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    zkt_cleanup_at_exit(g_dir);
    int port = tl_server("zk", "start", g_srv, NULL, 1);
    char hosts[64];
    snprintf(hosts, sizeof hosts, "127.0.0.1:%d", port);
    zkt_uri(g_uri, sizeof g_uri, hosts, T_MS);
    fprintf(stderr, "zk election: %s\n", g_uri);

    /* An engine without elections is a skip (not expected for zk). */
    baton_client *c = tl_client_open(g_uri);
    baton_election *e = NULL;
    int rc = baton_election_open(&e, c, "probe", NULL);
    if (e) baton_election_free(e);
    baton_client_close(c);
    if (rc == BATON_ENOTSUP) {
        zkt_srv("stop", g_srv);
        return tl_skip_status("this engine has no leader election", 1);
    }

    RUN(test_two_candidates);
    RUN(test_cancel);
    RUN(test_session_lost);

    zkt_srv("stop", g_srv);
    return th_finish();
}
