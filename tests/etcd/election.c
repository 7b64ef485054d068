/*
 * Leader election on etcd (baton_election_*), on the "etcd" fixture:
 *
 *   test_etcd_election URI     ("{port}" = the fixture's client port)
 *
 *   - two candidates on two clients: the first leads at once, the second
 *     waits; a third handle reads the leader's value and fence; a campaign
 *     with wait 0 while another leads answers BATON_ELOCKED;
 *   - baton_election_observe answers at once, then waits for a change and
 *     sees it when the leader resigns; the second candidate then leads with
 *     a higher fence; proclaim changes the value without a new term (and the
 *     observer sees that too); a candidate that does not lead cannot proclaim;
 *   - a blocked campaign and a blocked observe are cancelled; the cancelled
 *     candidate is not left in line;
 *   - a leader in another process is SIGKILLed: the waiting candidate leads
 *     once that client's lease expires, in a later term (higher fence);
 *   - a leader in another process is SIGSTOPped past its lease: the next
 *     candidate leads with a higher fence; resumed, the old leader is told
 *     (on_lost), no longer leads, and its resign answers BATON_ELOST.
 *
 * Candidate mode: test_etcd_election --candidate URI NAME VALUE says
 * "CAMPAIGNING", campaigns, says "LEADER <fence>"; then "RESIGN" ->
 * "RESIGNED <rc>", "LEADER?" -> "LEADER <0|1>"; EOF: exit. From on_lost: "LOST".
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

static char g_uri[1024];
static char g_prefix[96];
static int g_ttl_ms;

static const char *ename(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "%s%s", g_prefix, what);
    return buf;
}

/* ---- candidate mode ------------------------------------------------------------ */

static void cand_lost(baton_election *e, void *payload)
{
    (void)e, (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

static int candidate(const char *uri, const char *name, const char *value)
{
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

/* ---- threads --------------------------------------------------------------------- */

typedef struct {
    baton_election *e;
    const char *value;
    int64_t wait_ms;
    int rc;
    atomic_int done;
    pthread_t th;
} campaign_thread;

static void *campaign_main(void *p)
{
    campaign_thread *t = p;
    t->rc = baton_election_campaign(t->e, t->value, t->wait_ms);
    atomic_store(&t->done, 1);
    return NULL;
}

static void campaign_start(campaign_thread *t, baton_election *e, const char *value, int64_t wait_ms)
{
    memset(t, 0, sizeof *t);
    t->e = e;
    t->value = value;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, campaign_main, t);
}

static int done_within(atomic_int *done, int timeout_ms)
{
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

static void *observe_main(void *p)
{
    observe_thread *t = p;
    t->rc = baton_election_observe(t->e, t->value, sizeof t->value, &t->fence, t->wait_ms);
    atomic_store(&t->done, 1);
    return NULL;
}

static void observe_start(observe_thread *t, baton_election *e, int64_t wait_ms)
{
    memset(t, 0, sizeof *t);
    t->e = e;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, observe_main, t);
}

static baton_election *election_on(baton_client *c, const char *name)
{
    baton_election *e = NULL;
    MUST(baton_election_open(&e, c, name, NULL));
    return e;
}

/* ---- cases ------------------------------------------------------------------------- */

static void test_two_candidates(void)
{
    char name[160], value[BATON_ELECTION_VALUE_MAX + 1], small[5];
    uint64_t fence = 0;
    ename(name, sizeof name, "two");
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri), *c3 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name), *e2 = election_on(c2, name), *e3 = election_on(c3, name);

    /* nobody leads yet */
    CHECK_RC(baton_election_leader(e3, value, sizeof value, &fence), BATON_ENOTHELD);
    CHECK_RC(baton_election_observe(e3, value, sizeof value, &fence, 0), 0);
    CHECK(value[0] == 0 && fence == 0);

    CHECK_RC(baton_election_campaign(e1, "node-1:8080", 10000), 0);
    CHECK(baton_election_is_leader(e1));
    uint64_t f1 = baton_election_fence(e1);
    CHECK(f1 > 0);

    campaign_thread t2;
    campaign_start(&t2, e2, "node-2:8080", -1);
    CHECK(!done_within(&t2.done, 1000)); /* the second waits while the first leads */
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
    CHECK(!done_within(&ot.done, 1000));

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

    /* the observer saw the change (maybe first a moment with nobody leading) */
    CHECK(done_within(&ot.done, 30000));
    pthread_join(ot.th, NULL);
    CHECK_RC(ot.rc, 0);
    if (ot.rc == 0 && ot.fence == 0) CHECK_RC(baton_election_observe(e3, ot.value, sizeof ot.value, &ot.fence, 15000), 0);
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
    baton_election *e4 = election_on(c3, name);
    int rc;
    int64_t end = tl_now_ms() + 10000;
    while ((rc = baton_election_leader(e4, value, sizeof value, &fence)) == 0 && tl_now_ms() < end) tl_sleep_ms(50);
    CHECK_RC(rc, BATON_ENOTHELD); /* freed while leading: nobody leads */
    baton_election_free(e4);
    baton_client_close(c3);
    baton_client_close(c2);
    baton_client_close(c1);
}

static void test_cancel(void)
{
    char name[160], value[64];
    uint64_t fence;
    ename(name, sizeof name, "cancel");
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_election *e1 = election_on(c1, name), *e2 = election_on(c2, name);
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

/* A leader in another process, killed (SIG = SIGKILL) or frozen (SIGSTOP)
 * while a candidate here waits: the candidate leads once the leader's lease
 * is gone, in a later term. */
static void dead_leader_case(int sig)
{
    char name[160], line[128], value[64];
    uint64_t fence;
    tl_worker w;
    ename(name, sizeof name, sig == SIGKILL ? "killed" : "frozen");
    char *argv[] = { "test_etcd_election", "--candidate", g_uri, name, "old", NULL };
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
    baton_election *e = election_on(c, name);
    CHECK_RC(baton_election_campaign(e, "new", 0), BATON_ELOCKED);
    campaign_thread t;
    campaign_start(&t, e, "new", 3 * g_ttl_ms + 10000);
    CHECK(!done_within(&t.done, 500));
    kill(w.pid, sig);
    int64_t t0 = tl_now_ms();
    /* generous: the lease (TTL) plus the server's expiry pass, on a loaded box */
    CHECK(done_within(&t.done, 3 * g_ttl_ms + 10000));
    pthread_join(t.th, NULL);
    fprintf(stderr, "   %s leader: the next candidate led after %lld ms (TTL %d ms)\n",
            sig == SIGKILL ? "killed" : "frozen", (long long)(tl_now_ms() - t0), g_ttl_ms);
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

static void test_killed_leader(void) { dead_leader_case(SIGKILL); }
static void test_frozen_leader(void) { dead_leader_case(SIGSTOP); }

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--candidate")) {
        if (argc == 5) return candidate(argv[2], argv[3], argv[4]);
        fprintf(stderr, "usage: %s --candidate URI NAME VALUE\n", argv[0]);
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0)
        return tl_skip_status("no test etcd server (no port file)", 1);
    const char *p = strstr(g_uri, "ttl=");
    g_ttl_ms = 1000 * (p ? atoi(p + 4) : 30);
    snprintf(g_prefix, sizeof g_prefix, "election-test/%ld-%ld/", (long)getpid(), (long)(time(NULL) % 100000));
    fprintf(stderr, "etcd election: %s (names %s*)\n", g_uri, g_prefix);

    baton_client *c = tl_client_open(g_uri);
    baton_election *e = NULL;
    int rc = baton_election_open(&e, c, "probe", NULL);
    if (e) baton_election_free(e);
    baton_client_close(c);
    if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no leader election", 1);

    RUN(test_two_candidates);
    RUN(test_cancel);
    RUN(test_killed_leader);
    RUN(test_frozen_leader);
    return th_finish();
}
