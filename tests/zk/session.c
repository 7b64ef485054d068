/*
 * ZooKeeper sessions and locks: what a holder learns, and what others see,
 * when the session can no longer be trusted.
 *
 *   test_zk_session            starts its own server (tests/servers/zk.sh) in
 *                              $BATON_TEST_TMP/zk_session and stops it at exit
 *
 *   (a) the server is frozen (SIGSTOP) past the session timeout: the holder's
 *       on_lost runs once and baton_lock_held turns false; after SIGCONT
 *       another client gets the lock with a higher fence; the stale holder's
 *       release answers BATON_ELOST;
 *   (b) the holder process is frozen past the session timeout: the server
 *       expires its session, another client gets the lock with a higher
 *       fence; resumed, the holder reports LOST;
 *   (c) a holder killed with SIGKILL: the lock is free again within the
 *       session timeout;
 *   (d) a server restart (ZooKeeper persists znodes and sessions) shorter than
 *       the session timeout: the lock is still held, nobody else gets it, no
 *       on_lost, and once the holder's client is connected again its release
 *       works (unless the restarting server hung its reconnect, ZOOKEEPER-5051:
 *       then the loss is checked instead); an outage longer than the session
 *       timeout: LOST, then another client gets it with a higher fence.
 *
 * Timing: only bounds that are the point of a case are asserted, and they are
 * generous (ZKT_MARGIN_MS, see below). Outcomes and order are what count.
 *
 * Worker mode (the suite re-executes itself): --worker hold URI NAME WAIT_MS.
 */
#include "zkt.h"

/* The session timeout of most cases. tickTime is 200 ms, so the server
 * grants it as asked (the range is 400 ms .. 60 s). */
#define T_MS 3000
/* Longer sessions for the short-restart case: a JVM restart takes 1-3 s. */
#define T_LONG_MS 12000
/* Slack on a bound that is a session timeout: the C client notices a silent
 * server only through missed pings (it pings every T/3 and drops a connection
 * after 2T/3 without an answer), the server expires sessions in tickTime
 * buckets and then has to notify the waiter's watch, baton's keeper decides on
 * its own period, and on a shared 2-core machine running the suite in
 * parallel any of these threads can be delayed by a second or more. The
 * point is that loss and recovery follow the session timeout (seconds), not
 * a 30 s lease or never; 6 s of slack keeps that visible and the test quiet. */
#define ZKT_MARGIN_MS 6000

static char g_dir[1024];
static char g_srv[1200];
static char g_hosts[64];

static const char *uri_t(char *buf, size_t n, int session_ms) { return zkt_uri(buf, n, g_hosts, session_ms); }

/* (a) the server frozen past the session timeout */
static void test_server_frozen(void) {
    char uri[256], name[128];
    uri_t(uri, sizeof uri, T_MS);
    zkt_name(name, sizeof name, "session", "frozen-server");
    zkt_lost lost;
    zkt_lost_init(&lost);
    baton_client *a = tl_client_open(uri);
    baton_lock *la = zkt_lock(a, name, &lost);
    CHECK_RC(baton_lock_acquire(la, 5000), 0);
    uint64_t fa = baton_lock_fence(la);
    CHECK(fa > 0);

    CHECK(zkt_srv("pause", g_srv) == 0);
    int64_t t0 = tl_now_ms();
    int n = zkt_lost_wait(&lost, T_MS + ZKT_MARGIN_MS);
    int64_t took = atomic_load(&lost.t_ms) ? atomic_load(&lost.t_ms) - t0 : -1;
    fprintf(stderr, "   server frozen: on_lost after %lld ms (session %d ms)\n", (long long)took, T_MS);
    CHECK(n == 1);
    CHECK(!baton_lock_held(la));
    CHECK(zkt_srv("resume", g_srv) == 0);

    /* The server runs again; A's session is (or soon will be) expired, its
     * lock node gone: B gets the lock. The wait covers the server expiring
     * the session T after it resumes, had A's client not closed it. */
    baton_client *b = tl_client_open(uri);
    baton_lock *lb = zkt_lock(b, name, NULL);
    CHECK_RC(baton_lock_acquire(lb, 3 * T_MS + ZKT_MARGIN_MS), 0);
    uint64_t fb = baton_lock_fence(lb);
    fprintf(stderr, "   fences: stale holder %llu, new holder %llu\n", (unsigned long long)fa,
            (unsigned long long)fb);
    CHECK(fb > fa);
    CHECK(!baton_lock_held(la));
    CHECK_RC(baton_lock_release(la), BATON_ELOST);
    CHECK(baton_lock_held(lb));           /* the stale release touched nothing */
    tl_sleep_ms(500);
    CHECK(atomic_load(&lost.count) == 1); /* once */
    CHECK_RC(baton_lock_release(lb), 0);
    /* The same handle again, on the client's new session: a fresh grant,
     * not the old loss carried over (held, releasable, no second on_lost). */
    CHECK_RC(baton_lock_acquire(la, 5000), 0);
    CHECK(baton_lock_held(la));
    CHECK(baton_lock_fence(la) > fb);
    tl_sleep_ms(500);
    CHECK(baton_lock_held(la));
    CHECK(atomic_load(&lost.count) == 1);
    CHECK_RC(baton_lock_release(la), 0);
    baton_lock_free(lb);
    baton_lock_free(la);
    baton_client_close(b);
    baton_client_close(a);
}

/* (b) the holder process frozen past the session timeout */
static void test_client_frozen(void) {
    char uri[256], name[128], line[256];
    uri_t(uri, sizeof uri, T_MS);
    zkt_name(name, sizeof name, "session", "frozen-client");
    tl_worker w;
    uint64_t fw = zkt_spawn_holder(&w, uri, name, 5000, 20000);
    CHECK(fw > 0);
    if (!fw) return;

    CHECK(kill(w.pid, SIGSTOP) == 0);
    /* The server expires the frozen holder's session after T; B is waiting
     * by then and is woken by its watch. */
    baton_client *b = tl_client_open(uri);
    baton_lock *lb = zkt_lock(b, name, NULL);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(lb, T_MS + ZKT_MARGIN_MS), 0);
    uint64_t fb = baton_lock_fence(lb);
    fprintf(stderr, "   frozen holder: granted to another after %lld ms; fences %llu -> %llu\n",
            (long long)(tl_now_ms() - t0), (unsigned long long)fw, (unsigned long long)fb);
    CHECK(fb > fw);

    /* Resumed, the worker learns it lost the lock (its client is told the
     * session expired, or its own deadline has long passed). */
    CHECK(kill(w.pid, SIGCONT) == 0);
    CHECK(tl_expect_line(&w, "LOST", line, sizeof line, T_MS + ZKT_MARGIN_MS) == 0);
    tl_send_line(&w, "HELD?\n");
    CHECK(tl_expect_line(&w, "HELD 0", line, sizeof line, 10000) == 0);
    tl_send_line(&w, "RELEASE\n");
    CHECK(tl_expect_line(&w, "RELEASED", line, sizeof line, 15000) == 0);
    CHECK(atoi(line + 9) == BATON_ELOST);
    CHECK(baton_lock_held(lb)); /* the stale release touched nothing */
    close(w.to);
    w.to = -1;
    CHECK(tl_exited_ok(tl_worker_reap(&w, 15000)));
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(lb);
    baton_client_close(b);
}

/* (c) a holder killed with SIGKILL */
static void test_holder_killed(void) {
    char uri[256], name[128];
    uri_t(uri, sizeof uri, T_MS);
    zkt_name(name, sizeof name, "session", "killed");
    tl_worker w;
    uint64_t fw = zkt_spawn_holder(&w, uri, name, 5000, 20000);
    CHECK(fw > 0);
    if (!fw) return;
    baton_client *b = tl_client_open(uri);
    baton_lock *lb = zkt_lock(b, name, NULL);
    CHECK_RC(baton_lock_acquire(lb, 0), BATON_ELOCKED);

    CHECK(kill(w.pid, SIGKILL) == 0);
    int64_t t0 = tl_now_ms();
    tl_worker_reap(&w, 5000);
    /* Free within the session timeout (the server ends the session, and so
     * the ephemeral lock node, T after it last heard from the dead client). */
    CHECK_RC(baton_lock_acquire(lb, T_MS + ZKT_MARGIN_MS), 0);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   killed holder: lock free after %lld ms (session %d ms)\n", (long long)took, T_MS);
    CHECK(took <= T_MS + ZKT_MARGIN_MS);
    CHECK(baton_lock_fence(lb) > fw);
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(lb);
    baton_client_close(b);
}

/* 1 once client C answers a request on the session that holds L (a
 * lock_info through C), 0 when L was lost first or MS passed. After a server
 * restart the C client is usually connected again within a few hundred ms;
 * but ZooKeeper 3.8's server can leave a connection made while it starts
 * accepted and never answered (closing it throws a NullPointerException
 * before the database is loaded, ZOOKEEPER-5051, apache/zookeeper#2391),
 * and the C client gives such a connection up only 2T/3 later. Until then
 * every request of the holder, its release included, waits; a release sent
 * then answers BATON_EUNAVAILABLE at its io timeout (zk_session failed so
 * once in CI). */
static int holder_back(baton_client *c, baton_lock *l, const char *name, zkt_lost *lost, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (tl_now_ms() < end && atomic_load(&lost->count) == 0) {
        baton_lockinfo info = BATON_LOCK_INFO_INIT;
        if (baton_lock_info(c, name, &info) == 0)
            return atomic_load(&lost->count) == 0 && baton_lock_held(l) && info.held;
        tl_sleep_ms(100);
    }
    return 0;
}

/* (d1) a server restart shorter than the session timeout: the session and
 * the lock survive. */
static void test_restart_short(void) {
    char uri[256], name[128];
    /* lost_after_ms at 2/3 of the session, as docs/zk-engine.md advises to
     * ride out restarts: at its default (a third) a reconnect slowed by a
     * loaded machine (ASan, two cores) gave the session up before it came
     * back (seen once in CI), and this case is about the server keeping the
     * session, not about how fast the client finds it again */
    snprintf(uri, sizeof uri, "zk://%s?session_timeout_ms=%d&lost_after_ms=%d", g_hosts, T_LONG_MS, T_LONG_MS * 2 / 3);
    zkt_name(name, sizeof name, "session", "restart-short");
    zkt_lost lost;
    zkt_lost_init(&lost);
    baton_client *a = tl_client_open(uri);
    baton_lock *la = zkt_lock(a, name, &lost);
    CHECK_RC(baton_lock_acquire(la, 5000), 0);
    uint64_t fa = baton_lock_fence(la);

    /* the server's log from here on (zk.sh appends to it) */
    char logf[1300];
    struct stat lst;
    snprintf(logf, sizeof logf, "%s/zookeeper.log", g_srv);
    long long log_at = stat(logf, &lst) == 0 ? (long long)lst.st_size : 0;
    int64_t t0 = tl_now_ms();
    CHECK(zkt_srv("restart", g_srv) == 0);
    int64_t took = tl_now_ms() - t0;
    fprintf(stderr, "   server restart took %lld ms (session %d ms)\n", (long long)took, T_LONG_MS);
    if (took > T_LONG_MS / 2) {
        /* Too slow a machine for the point of this case: say so, do not fail. */
        fprintf(stderr, "   (restart too slow to prove a session survives it; case skipped)\n");
        baton_lock_free(la);
        baton_client_close(a);
        return;
    }
    /* Nobody else gets it: the lock node and its session came back with the server. */
    baton_client *b = tl_client_open(uri);
    baton_lock *lb = zkt_lock(b, name, NULL);
    CHECK_RC(baton_lock_acquire(lb, 0), BATON_ELOCKED);
    /* The holder reconnects to its session; it never lost the lock. Wait a
     * little past the restart so a wrong LOST would have shown. */
    tl_sleep_ms(2000);
    CHECK(atomic_load(&lost.count) == 0);
    CHECK(baton_lock_held(la));
    CHECK(baton_lock_fence(la) == fa);
    CHECK_RC(baton_lock_acquire(lb, 0), BATON_ELOCKED);
    /* The release must reach the server: wait until the holder's client is
     * connected again (B's connection says nothing about A's). */
    if (!holder_back(a, la, name, &lost, T_LONG_MS)) {
        /* Only the server's known startup hang excuses it; then what a
         * loss promises is checked instead: reported once, the release
         * says so, and B gets the lock with a higher fence. */
        int known = tl_sh("tail -c +%lld '%s/zookeeper.log' | grep -A12 'ZooKeeperServer not running' | "
                          "grep -q 'because \"this.zkDb\" is null'", log_at + 1, g_srv) == 0;
        fprintf(stderr, "   the restarting server left the holder's reconnect unanswered (ZOOKEEPER-5051: %s); "
                        "the session was given up, its loss is checked instead\n", known ? "in its log" : "NOT in its log");
        CHECK(known);
        CHECK(atomic_load(&lost.count) == 1);
        CHECK_RC(baton_lock_release(la), BATON_ELOST);
        CHECK_RC(baton_lock_acquire(lb, T_LONG_MS + ZKT_MARGIN_MS), 0);
        CHECK(baton_lock_fence(lb) > fa);
        CHECK_RC(baton_lock_release(lb), 0);
        baton_lock_free(lb);
        baton_lock_free(la);
        baton_client_close(b);
        baton_client_close(a);
        return;
    }
    CHECK_RC(baton_lock_release(la), 0);
    CHECK_RC(baton_lock_acquire(lb, 10000), 0);
    CHECK(baton_lock_fence(lb) > fa);
    CHECK_RC(baton_lock_release(lb), 0);
    CHECK(atomic_load(&lost.count) == 0);
    baton_lock_free(lb);
    baton_lock_free(la);
    baton_client_close(b);
    baton_client_close(a);
}

/* (d2) a server outage longer than the session timeout: LOST. */
static void test_outage_long(void) {
    char uri[256], name[128];
    uri_t(uri, sizeof uri, T_MS);
    zkt_name(name, sizeof name, "session", "outage-long");
    zkt_lost lost;
    zkt_lost_init(&lost);
    baton_client *a = tl_client_open(uri);
    baton_lock *la = zkt_lock(a, name, &lost);
    CHECK_RC(baton_lock_acquire(la, 5000), 0);
    uint64_t fa = baton_lock_fence(la);

    CHECK(zkt_srv("stop", g_srv) == 0);
    int64_t t0 = tl_now_ms();
    int n = zkt_lost_wait(&lost, T_MS + ZKT_MARGIN_MS);
    fprintf(stderr, "   server down: on_lost after %lld ms (session %d ms)\n",
            (long long)(atomic_load(&lost.t_ms) ? atomic_load(&lost.t_ms) - t0 : -1), T_MS);
    CHECK(n == 1);
    CHECK(!baton_lock_held(la));
    /* Down past the session timeout for sure before it comes back. */
    int64_t down = tl_now_ms() - t0;
    if (down < T_MS + 1000) tl_sleep_ms((int)(T_MS + 1000 - down));
    CHECK(zkt_srv("restart", g_srv) == 0);

    baton_client *b = tl_client_open(uri);
    baton_lock *lb = zkt_lock(b, name, NULL);
    /* The restarted server may have reloaded A's session with a fresh
     * timeout (A's close could not reach it): up to T more. */
    CHECK_RC(baton_lock_acquire(lb, 3 * T_MS + ZKT_MARGIN_MS), 0);
    CHECK(baton_lock_fence(lb) > fa);
    CHECK_RC(baton_lock_release(la), BATON_ELOST);
    CHECK(baton_lock_held(lb));
    CHECK(atomic_load(&lost.count) == 1);
    CHECK_RC(baton_lock_release(lb), 0);
    baton_lock_free(lb);
    baton_lock_free(la);
    baton_client_close(b);
    baton_client_close(a);
}

/* The engine's warnings and notes in the test's output: a session given up
 * says why. */
static void show_log(int level, const char *message, void *payload) {
    (void)payload;
    if (level <= BATON_LOG_INFO) fprintf(stderr, "   [baton] %s\n", message);
}

int main(int argc, char **argv) {
    baton_log_set(show_log, NULL);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 6 && !strcmp(argv[2], "hold")) return zkt_worker_hold(argv[3], argv[4], atoll(argv[5]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("session"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    zkt_cleanup_at_exit(g_dir);
    int port = tl_server("zk", "start", g_srv, NULL, 1);
    snprintf(g_hosts, sizeof g_hosts, "127.0.0.1:%d", port);
    fprintf(stderr, "zk session: server on %s\n", g_hosts);

    RUN(test_holder_killed);
    RUN(test_client_frozen);
    RUN(test_server_frozen);
    RUN(test_restart_short);
    RUN(test_outage_long);

    zkt_srv("stop", g_srv);
    return th_finish();
}
