/*
 * ZooKeeper semaphores (baton_semaphore_*) under faults: the count is never
 * lost or counted twice, and never more processes hold permits than there
 * are permits.
 *
 *   test_zk_semfault           starts its own server (tests/servers/zk.sh) in
 *                              $BATON_TEST_TMP/zk_semfault and stops it at exit
 *
 *   (a) restarts: PROCS processes take and give back one permit of PERMITS,
 *       ITERS times each, counting themselves in a shared file, while the
 *       server is restarted twice (its sessions and nodes survive): at most
 *       PERMITS inside at once, every acquire and release done, and the
 *       count is PERMITS again at the end (a write whose answer a restart
 *       cut off is settled by its marker, not sent again blindly);
 *   (b) a waiter's session expires while it waits (its process stopped past
 *       the session timeout) and a permit is released meanwhile: resumed on
 *       a new session, the waiter takes that permit, exactly once;
 *   (c) a write (try_set: no read goes first) sent into a frozen link
 *       (tests/servers/link.sh) whose session expires before the link is cut
 *       and started again: the write's answer is lost with its session, and
 *       it is settled on a new session (persistent markers): it answers 0,
 *       set, and the count is made exactly once. (Ephemeral markers went
 *       with the session: BATON_EUNAVAILABLE, the outcome unknown.)
 *
 * Worker mode (the suite re-executes itself):
 *   --worker loop URI NAME FILE MAXFILE ITERS
 *   --worker wait URI NAME
 */
#include "zkt.h"

#define T_LONG_MS 12000 /* sessions that ride out a restart */
#define T_MS 3000       /* the waiter's session in (b) */
#define PERMITS 3
#define PROCS 5
#define ITERS 10

static char g_dir[1024];
static char g_srv[1200];
static char g_hosts[64];

static baton_semaphore *sem_on(baton_client *c, const char *name) {
    baton_semaphore *s = NULL;
    MUST(baton_semaphore_open(&s, c, name));
    return s;
}

static int64_t count_of(baton_client *c, const char *name) {
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    int rc = baton_lock_info(c, name, &info);
    return rc ? INT64_MIN + 1 : info.permits;
}

/* Until STOP exists (at least ITERS times): one permit, counted in FILE
 * (the most at once in MAXFILE); prints "DONE <times>". An
 * acquire that fails (the server is down longer than the io timeout) is
 * tried again; a failed release is a failure (its outcome unknown). */
static int worker_loop(const char *uri, const char *name, const char *file, const char *maxfile, int iters) {
    char stop[1300];
    snprintf(stop, sizeof stop, "%s.stop", file);
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    int bad = 0, retries = 0;
    int i;
    for (i = 0; (i < iters || access(stop, F_OK) != 0) && !bad; i++) {
        int rc;
        while ((rc = baton_semaphore_acquire(s, 1, 60000)) == BATON_EUNAVAILABLE && retries++ < 20)
            fprintf(stderr, "worker %d: acquire: %s (again)\n", (int)getpid(), baton_error_last()->message);
        if (rc) {
            fprintf(stderr, "worker %d: acquire %d (%s)\n", (int)getpid(), rc, baton_error_last()->message);
            bad = 1;
            break;
        }
        tl_counter_add(file, 1, maxfile);
        usleep(10000);
        tl_counter_add(file, -1, NULL);
        if ((rc = baton_semaphore_release(s, 1))) {
            fprintf(stderr, "worker %d: release %d (%s)\n", (int)getpid(), rc, baton_error_last()->message);
            bad = 1;
        }
    }
    tl_out_line("DONE %d\n", i);
    baton_semaphore_free(s);
    baton_client_close(c);
    return bad;
}

static int worker_wait(const char *uri, const char *name) {
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    tl_out_line("WAITING\n");
    int rc = baton_semaphore_acquire(s, 1, 60000);
    tl_out_line("GOT %d\n", rc);
    tl_wait_for_line("EXIT");
    baton_semaphore_free(s);
    baton_client_close(c);
    return 0;
}

/* (a) */
static void test_restarts(void) {
    char uri[256], name[128], file[1200], maxfile[1200], it[16];
    snprintf(uri, sizeof uri, "zk://%s?session_timeout_ms=%d&lost_after_ms=%d", g_hosts, T_LONG_MS, T_LONG_MS * 2 / 3);
    zkt_name(name, sizeof name, "semfault", "restarts");
    snprintf(file, sizeof file, "%s/inside", g_dir);
    snprintf(maxfile, sizeof maxfile, "%s/inside.max", g_dir);
    snprintf(it, sizeof it, "%d", ITERS);
    tl_counter_init(file, 0);
    tl_counter_init(maxfile, 0);
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    int set = 0;
    CHECK_RC(baton_semaphore_try_set(s, PERMITS, &set), 0);
    CHECK(set == 1);

    tl_worker w[PROCS];
    for (int i = 0; i < PROCS; i++) {
        char *argv[] = { "test_zk_semfault", "--worker", "loop", uri, name, file, maxfile, it, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int r = 0; r < 2; r++) {
        tl_sleep_ms(700);
        int64_t t0 = tl_now_ms();
        /* the second one a SIGKILL: requests logged but never answered */
        if (r == 1) CHECK(zkt_srv("kill", g_srv) == 0);
        CHECK(zkt_srv("restart", g_srv) == 0);
        fprintf(stderr, "   server restart %d took %lld ms\n", r + 1, (long long)(tl_now_ms() - t0));
    }
    /* the workers were at it all along (each loops until told to stop) */
    for (int i = 0; i < PROCS; i++) CHECK(waitpid(w[i].pid, NULL, WNOHANG) == 0);
    tl_sleep_ms(500);
    {
        char stop[1300];
        snprintf(stop, sizeof stop, "%s.stop", file);
        tl_counter_init(stop, 0);
    }
    long total = 0;
    for (int i = 0; i < PROCS; i++) {
        char line[64];
        CHECK(tl_expect_line(&w[i], "DONE", line, sizeof line, 120000) == 0);
        total += atol(line + 5);
        CHECK(tl_exited_ok(tl_worker_reap(&w[i], 60000)));
    }
    fprintf(stderr, "   %ld acquire/release pairs across two restarts\n", total);
    long mx = tl_counter_read(maxfile);
    fprintf(stderr, "   at most %ld of %d processes held a permit at once (%d permits)\n", mx, PROCS, PERMITS);
    CHECK(mx >= 1 && mx <= PERMITS);
    CHECK(tl_counter_read(file) == 0);
    int64_t n = count_of(c, name);
    fprintf(stderr, "   count at the end: %lld (want %d)\n", (long long)n, PERMITS);
    CHECK(n == PERMITS);
    baton_semaphore_free(s);
    baton_client_close(c);
}

/* (b) */
static void test_waiter_expired(void) {
    char uri[256], name[128], line[128];
    zkt_uri(uri, sizeof uri, g_hosts, T_MS);
    zkt_name(name, sizeof name, "semfault", "expired");
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    tl_worker w;
    char *argv[] = { "test_zk_semfault", "--worker", "wait", uri, name, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    tl_sleep_ms(500); /* parked on its exists watch (never set: no node) */
    CHECK(kill(w.pid, SIGSTOP) == 0);
    /* past the session timeout: the server expires the waiter's session
     * (and its watch); the release comes while it cannot hear of it */
    tl_sleep_ms(T_MS + 2000);
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    CHECK(count_of(c, name) == 1);
    CHECK(kill(w.pid, SIGCONT) == 0);
    CHECK(tl_expect_line(&w, "GOT", line, sizeof line, 20000) == 0);
    CHECK(atoi(line + 4) == 0);
    CHECK(count_of(c, name) == 0); /* taken once */
    CHECK_RC(baton_semaphore_acquire(s, 1, 0), BATON_ELOCKED);
    tl_send_line(&w, "EXIT\n");
    CHECK(tl_exited_ok(tl_worker_reap(&w, 15000)));
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    CHECK(count_of(c, name) == 1);
    baton_semaphore_free(s);
    baton_client_close(c);
}

/* (c) */
static char g_link_dir[1200];

static int link_start(int target) {
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/link.sh' start '%s' %d", TL_SERVERS_DIR, g_link_dir, target);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    if (!fgets(out, sizeof out, p)) out[0] = 0;
    int st = pclose(p);
    return st == 0 ? atoi(out) : 0;
}

static int link_cmd(const char *cmd) {
    return tl_sh("bash '%s/link.sh' %s '%s' >/dev/null 2>&1", TL_SERVERS_DIR, cmd, g_link_dir);
}

typedef struct {
    baton_semaphore *s;
    int rc, set;
    char msg[256];
    int64_t ms;
    atomic_int done;
} rel_arg;

static void *release_main(void *p) {
    rel_arg *a = p;
    int64_t t0 = tl_now_ms();
    a->rc = baton_semaphore_try_set(a->s, 1, &a->set); /* one write: no read goes first */
    a->ms = tl_now_ms() - t0;
    if (a->rc) snprintf(a->msg, sizeof a->msg, "%s", baton_error_last()->message);
    atomic_store(&a->done, 1);
    return NULL;
}

static void test_write_across_expiry(void) {
    char uri[256], direct[256], name[128];
    snprintf(g_link_dir, sizeof g_link_dir, "%s/link", g_dir);
    int lport = link_start(atoi(strchr(g_hosts, ':') + 1));
    CHECK(lport > 0);
    if (lport <= 0) return;
    snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=%d", lport, T_MS);
    zkt_uri(direct, sizeof direct, g_hosts, 0);
    zkt_name(name, sizeof name, "semfault", "frozen-release");
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    o.io_timeout_ms = 20000; /* the call outlives its session: settling is the point */
    baton_client *a = NULL, *d = tl_client_open(direct);
    MUST(baton_client_open(&a, uri, &o));
    baton_semaphore *sa = sem_on(a, name), *sd = sem_on(d, name);
    uint64_t n = 99;
    CHECK_RC(baton_semaphore_available(sa, &n), 0); /* A's session is up, through the link */
    CHECK(n == 0);
    CHECK(link_cmd("freeze") == 0);
    rel_arg r;
    memset(&r, 0, sizeof r);
    r.s = sa;
    atomic_init(&r.done, 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, release_main, &r) == 0);
    tl_sleep_ms(T_MS + 2500); /* past the session: the server expires it */
    /* cut, not thaw: the bytes stuck in the frozen link are dropped, so the
     * write never reaches the server on the old connection (a thaw let it
     * through, answered: the old code passed then), and the link comes back
     * on the same port for new connections */
    CHECK(link_cmd("cut") == 0);
    CHECK(link_start(atoi(strchr(g_hosts, ':') + 1)) == lport);
    pthread_join(th, NULL);
    fprintf(stderr, "   try_set across the expired session: %d (set %d) after %lld ms %s\n", r.rc, r.set,
            (long long)r.ms, r.msg);
    CHECK_RC(r.rc, 0);
    CHECK(r.set == 1);
    CHECK_RC(baton_semaphore_available(sd, &n), 0);
    fprintf(stderr, "   count after it: %llu (want 1)\n", (unsigned long long)n);
    CHECK(n == 1);
    baton_semaphore_free(sa);
    baton_semaphore_free(sd);
    baton_client_close(a);
    baton_client_close(d);
    link_cmd("stop");
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
        if (argc == 8 && !strcmp(argv[2], "loop")) return worker_loop(argv[3], argv[4], argv[5], argv[6], atoi(argv[7]));
        if (argc == 5 && !strcmp(argv[2], "wait")) return worker_wait(argv[3], argv[4]);
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(g_dir, sizeof g_dir, "%s", zkt_dir("semfault"));
    snprintf(g_srv, sizeof g_srv, "%s/srv", g_dir);
    zkt_cleanup_at_exit(g_dir);
    int port = tl_server("zk", "start", g_srv, NULL, 1);
    snprintf(g_hosts, sizeof g_hosts, "127.0.0.1:%d", port);
    fprintf(stderr, "zk semfault: server on %s\n", g_hosts);

    RUN(test_restarts);
    RUN(test_waiter_expired);
    RUN(test_write_across_expiry);

    zkt_srv("stop", g_srv);
    return th_finish();
}
