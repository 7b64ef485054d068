/*
 * The rate limiter suite:
 *
 *   test_prims_ratelimit URI [--rate-only]
 *
 * Admitted counts and the burst, try's retry_after, per client against
 * overall, the stored configuration (a mismatching open is ECONFLICT,
 * replace wins and is adopted by the other handles), bad options, cancel
 * and a deadline that cannot be met, inspection, a holder SIGKILLed right
 * after taking the burst does not hand out a second one, and the issue's
 * acceptance case: 8 processes competing for 10 s are admitted within 5 %
 * of the configured rate (plus the burst, which passes at once). "{port}"
 * in URI is the port of its engine's test server. An engine without rate
 * limiters is a skip.
 */
#include "prims.h"

static baton_ratelimit *rl_open(baton_client *c, const char *name, uint32_t permits, uint32_t interval_ms,
                                uint32_t burst) {
    baton_ratelimit_options o = BATON_RATELIMIT_OPTIONS_INIT;
    baton_ratelimit *r = NULL;
    o.permits = permits;
    o.interval_ms = interval_ms;
    o.burst = burst;
    MUST(baton_ratelimit_open(&r, c, name, &o));
    return r;
}

/* How many of N tries pass right now. */
static int tries(baton_ratelimit *r, int n) {
    int ok = 0;
    for (int i = 0; i < n; i++) {
        int64_t ra = -1;
        int rc = baton_ratelimit_try(r, 1, &ra);
        if (rc == 0) {
            ok++;
            CHECK(ra == 0);
        } else {
            CHECK_RC(rc, BATON_ELOCKED);
        }
    }
    return ok;
}

static void test_burst(void) {
    char n[256];
    lname(n, sizeof n, "burst");
    baton_client *c = client();
    /* 10 per second, 5 at once: the first 5 pass, the 6th is told to come
     * back within one emission interval (100 ms). */
    baton_ratelimit *r = rl_open(c, n, 10, 1000, 5);
    CHECK(tries(r, 5) == 5);
    int64_t ra = -1;
    CHECK_RC(baton_ratelimit_try(r, 1, &ra), BATON_ELOCKED);
    CHECK(ra > 0 && ra <= 100);
    /* two at once need two intervals */
    CHECK_RC(baton_ratelimit_try(r, 2, &ra), BATON_ELOCKED);
    CHECK(ra > 100 && ra <= 200);
    /* acquire waits for it */
    CHECK_RC(baton_ratelimit_acquire(r, 1, 2000), 0);
    CHECK_RC(baton_ratelimit_acquire(r, 1, 0), BATON_ELOCKED);
    /* more than the burst could never pass */
    CHECK_RC(baton_ratelimit_acquire(r, 6, 1000), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_try(r, 6, &ra), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_try(r, 0, &ra), BATON_EINVAL);
    baton_ratelimit_free(r);

    /* default burst = permits */
    lname(n, sizeof n, "burst-default");
    r = rl_open(c, n, 3, 60000, 0);
    CHECK(tries(r, 5) == 3);
    baton_ratelimit_state st;
    CHECK_RC(baton_ratelimit_state_get(r, &st), 0);
    CHECK(st.permits == 3 && st.interval_ms == 60000 && st.burst == 3);
    CHECK(st.available == 0);
    CHECK(st.next_ms > 15000 && st.next_ms <= 20000);
    baton_ratelimit_free(r);
    baton_client_close(c);
}

/* Admissions over about a second on an exhausted limiter: the rate, not more. */
static void test_admitted_count(void) {
    char n[256];
    lname(n, sizeof n, "count");
    baton_client *c = client();
    baton_ratelimit *r = rl_open(c, n, 20, 1000, 1);
    int64_t t0 = tl_now_ms();
    int got = 0;
    while (tl_now_ms() - t0 < 1000) {
        int rc = baton_ratelimit_acquire(r, 1, 1000 - (tl_now_ms() - t0));
        if (rc == BATON_ETIMEDOUT) break;
        CHECK_RC(rc, 0);
        if (rc) break;
        got++;
    }
    fprintf(stderr, "   %d admitted in 1 s at 20/s burst 1\n", got);
    /* 1 at once, then one every 50 ms: never more than 21; at least 15 even on a loaded machine */
    CHECK(got <= 21);
    CHECK(got >= 15);
    baton_ratelimit_free(r);
    baton_client_close(c);
}

static void test_bad_options(void) {
    char n[256];
    lname(n, sizeof n, "bad");
    baton_client *c = client();
    baton_ratelimit *r = (baton_ratelimit *)1;
    baton_ratelimit_options o = BATON_RATELIMIT_OPTIONS_INIT;
    o.permits = 0;
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    CHECK(r == NULL);
    o = (baton_ratelimit_options)BATON_RATELIMIT_OPTIONS_INIT;
    o.interval_ms = 0;
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    o = (baton_ratelimit_options)BATON_RATELIMIT_OPTIONS_INIT;
    o.version = 99;
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    o = (baton_ratelimit_options)BATON_RATELIMIT_OPTIONS_INIT;
    o.scope = 7;
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    o = (baton_ratelimit_options)BATON_RATELIMIT_OPTIONS_INIT;
    o.scope = BATON_RATELIMIT_PER_CLIENT;
    o.client_id = "no spaces";
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    o.client_id = "";
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    o = (baton_ratelimit_options)BATON_RATELIMIT_OPTIONS_INIT;
    o.burst = 2000000;
    CHECK_RC(baton_ratelimit_open(&r, c, n, &o), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_open(&r, c, "", NULL), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_open(NULL, c, n, NULL), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_open(&r, NULL, n, NULL), BATON_EINVAL);
    CHECK_RC(baton_ratelimit_acquire(NULL, 1, 0), BATON_EINVAL);
    /* nothing was stored by the refused opens */
    baton_ratelimit_state st;
    CHECK_RC(baton_ratelimit_inspect(c, n, BATON_RATELIMIT_OVERALL, NULL, &st), BATON_ENOENT);
    CHECK_RC(baton_ratelimit_inspect(c, n, BATON_RATELIMIT_PER_CLIENT, NULL, &st), BATON_EINVAL);
    baton_client_close(c);
}

/* The configuration lives at the engine: the first open stores it. */
static void test_config(void) {
    char n[256];
    lname(n, sizeof n, "config");
    baton_client *c = client();
    baton_client *c2 = client();
    baton_ratelimit *a = rl_open(c, n, 2, 60000, 2);
    baton_ratelimit *b = NULL;
    baton_ratelimit_options o = BATON_RATELIMIT_OPTIONS_INIT;
    o.permits = 5;
    o.interval_ms = 60000;
    CHECK_RC(baton_ratelimit_open(&b, c2, n, &o), BATON_ECONFLICT);
    CHECK(b == NULL);
    CHECK(strstr(baton_error_last()->message, "2 per 60000 ms") != NULL);
    /* the same configuration opens fine and shares the state */
    b = rl_open(c2, n, 2, 60000, 2);
    CHECK(tries(a, 1) == 1);
    CHECK(tries(b, 3) == 1);
    baton_ratelimit_free(b);
    /* replace: 5 per minute, burst 5. The TAT is kept, so a replace hands
     * out no fresh burst: the 2 taken at 30 s apiece put it 60 s ahead,
     * which at 12 s apiece with room for 5 leaves nothing for ~12 s. */
    o.replace = 1;
    o.burst = 5;
    b = NULL;
    CHECK_RC(baton_ratelimit_open(&b, c2, n, &o), 0);
    baton_ratelimit_state st;
    CHECK_RC(baton_ratelimit_inspect(c, n, BATON_RATELIMIT_OVERALL, NULL, &st), 0);
    CHECK(st.permits == 5 && st.burst == 5 && st.available == 0);
    CHECK(st.next_ms > 10000 && st.next_ms <= 12000);
    /* the old handle adopts the stored configuration: its retry_after is the new one's */
    int64_t ra = 0;
    CHECK_RC(baton_ratelimit_try(a, 1, &ra), BATON_ELOCKED);
    CHECK(ra > 10000 && ra <= 12000);
    CHECK(tries(b, 2) == 0);
    baton_ratelimit_free(a);
    baton_ratelimit_free(b);
    baton_client_close(c);
    baton_client_close(c2);
}

static baton_ratelimit *rl_client(baton_client *c, const char *name, const char *id) {
    baton_ratelimit_options o = BATON_RATELIMIT_OPTIONS_INIT;
    baton_ratelimit *r = NULL;
    o.permits = 2;
    o.interval_ms = 60000;
    o.scope = BATON_RATELIMIT_PER_CLIENT;
    o.client_id = id;
    MUST(baton_ratelimit_open(&r, c, name, &o));
    return r;
}

static void test_per_client(void) {
    char n[256];
    lname(n, sizeof n, "perclient");
    baton_client *c = client();
    baton_ratelimit *a = rl_client(c, n, "alpha");
    baton_ratelimit *a2 = rl_client(c, n, "alpha");
    baton_ratelimit *b = rl_client(c, n, "beta");
    baton_ratelimit *rnd1 = rl_client(c, n, NULL);
    baton_ratelimit *rnd2 = rl_client(c, n, NULL);
    /* each client has the whole limit; the same id shares it */
    CHECK(tries(a, 1) + tries(a2, 3) == 2);
    CHECK(tries(b, 3) == 2);
    CHECK(tries(rnd1, 3) == 2);
    CHECK(tries(rnd2, 3) == 2);
    baton_ratelimit_state st;
    CHECK_RC(baton_ratelimit_inspect(c, n, BATON_RATELIMIT_PER_CLIENT, "alpha", &st), 0);
    CHECK(st.available == 0 && st.next_ms > 0);
    CHECK_RC(baton_ratelimit_inspect(c, n, BATON_RATELIMIT_PER_CLIENT, "gamma", &st), BATON_ENOENT);
    /* overall: two handles on two clients share one limit */
    baton_client *c2 = client();
    baton_ratelimit *o1 = rl_open(c, n, 2, 60000, 2);
    baton_ratelimit *o2 = rl_open(c2, n, 2, 60000, 2);
    CHECK(tries(o1, 1) + tries(o2, 3) == 2);
    CHECK(tries(o1, 1) == 0);
    baton_ratelimit_free(a);
    baton_ratelimit_free(a2);
    baton_ratelimit_free(b);
    baton_ratelimit_free(rnd1);
    baton_ratelimit_free(rnd2);
    baton_ratelimit_free(o1);
    baton_ratelimit_free(o2);
    baton_client_close(c);
    baton_client_close(c2);
}

typedef struct {
    baton_ratelimit *r;
    int64_t wait_ms;
    int rc;
    atomic_int done;
    pthread_t th;
} rl_thread;

static void *rl_main(void *p) {
    rl_thread *t = p;
    t->rc = baton_ratelimit_acquire(t->r, 1, t->wait_ms);
    atomic_store(&t->done, 1);
    return NULL;
}

static void test_cancel_deadline(void) {
    char n[256];
    lname(n, sizeof n, "cancel");
    baton_client *c = client();
    baton_ratelimit *r = rl_open(c, n, 1, 60000, 1);
    CHECK(tries(r, 1) == 1);
    /* the next admission lies a minute away: a 2 s wait ends at once */
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_ratelimit_acquire(r, 1, 2000), BATON_ETIMEDOUT);
    fprintf(stderr, "   ETIMEDOUT after %lld ms\n", (long long)(tl_now_ms() - t0));
    CHECK(tl_now_ms() - t0 < 1500);
    /* an unbounded wait ends on cancel */
    rl_thread t;
    memset(&t, 0, sizeof t);
    t.r = r;
    t.wait_ms = -1;
    atomic_init(&t.done, 0);
    pthread_create(&t.th, NULL, rl_main, &t);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_ratelimit_cancel(r), 0);
    int64_t end = tl_now_ms() + 10000;
    while (!atomic_load(&t.done) && tl_now_ms() < end) tl_sleep_ms(5);
    CHECK(atomic_load(&t.done));
    if (!atomic_load(&t.done)) exit(th_finish());
    pthread_join(t.th, NULL);
    CHECK_RC(t.rc, BATON_ECANCELED);
    /* a cancel with nothing in flight is kept for the next call */
    CHECK_RC(baton_ratelimit_cancel(r), 0);
    CHECK_RC(baton_ratelimit_acquire(r, 1, -1), BATON_ECANCELED);
    CHECK_RC(baton_ratelimit_acquire(r, 1, 0), BATON_ELOCKED);
    baton_ratelimit_free(r);
    baton_client_close(c);
}

/* ---- processes ---------------------------------------------------------------------- */

/* Takes the whole burst, says so, and waits to be killed. */
static int worker_burst(const char *uri, const char *name) {
    baton_client *c = tl_client_open(uri);
    baton_ratelimit *r = rl_open(c, name, 4, 60000, 4);
    int got = tries(r, 4);
    tl_out_line("TOOK %d\n", got);
    tl_wait_for_line("EXIT");
    baton_ratelimit_free(r);
    baton_client_close(c);
    return 0;
}

/* The fault case: the process that took the burst is SIGKILLed; the state
 * is the engine's, so a new client is not handed a second burst. */
static void test_killed_holder(void) {
    char n[256], line[128];
    lname(n, sizeof n, "killed");
    tl_worker w;
    char *argv[] = { "test_prims_ratelimit", "--worker", "burst", g_uri, n, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "TOOK 4", line, sizeof line, 15000) == 0);
    kill(w.pid, SIGKILL);
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    baton_client *c = client();
    baton_ratelimit *r = rl_open(c, n, 4, 60000, 4);
    int64_t ra = 0;
    CHECK_RC(baton_ratelimit_try(r, 1, &ra), BATON_ELOCKED);
    CHECK(ra > 10000);
    baton_ratelimit_free(r);
    baton_client_close(c);
}

#define RATE_PROCS 8
#define RATE_PER_S 100
#define RATE_BURST 20
#define RATE_SECS 10

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* From wall-clock START to END: acquire one permit at a time; report the count. */
static int worker_rate(const char *uri, const char *name, int64_t start, int64_t end) {
    baton_client *c = tl_client_open(uri);
    baton_ratelimit *r = rl_open(c, name, RATE_PER_S, 1000, RATE_BURST);
    long got = 0, errs = 0;
    while (wall_ms() < start) tl_sleep_ms(1);
    for (;;) {
        int64_t left = end - wall_ms();
        if (left <= 0) break;
        int rc = baton_ratelimit_acquire(r, 1, left);
        if (rc == BATON_ETIMEDOUT) break;
        if (rc) {
            fprintf(stderr, "worker: acquire %d (%s): %s\n", rc, baton_strerror(rc), baton_error_last()->message);
            errs++;
            break;
        }
        if (wall_ms() <= end) got++;
    }
    tl_out_line("COUNT %ld %ld\n", got, errs);
    baton_ratelimit_free(r);
    baton_client_close(c);
    return errs ? 1 : 0;
}

/* Redis: the server's count of EVALSHA calls. */
static long long redis_evalsha(void) {
    if (!g_redis_port) return -1;
    rcli rc;
    if (rcli_open(&rc, g_redis_port)) return -1;
    const char *argv[] = { "INFO", "commandstats" };
    char *r = rcli_cmd(&rc, 2, argv, NULL);
    long long v = -1;
    const char *p = r ? strstr(r, "cmdstat_evalsha:calls=") : NULL;
    if (p) v = atoll(p + strlen("cmdstat_evalsha:calls="));
    free(r);
    rcli_close(&rc);
    return v;
}

/* The acceptance case of issue 25: 8 competing processes over 10 s are
 * admitted within 5 % of the configured rate. The burst passes at once at
 * the start and is subtracted; burst 20 (200 ms of slack) keeps a waiter
 * that wakes a little late from losing its slot on a loaded machine. */
static void test_rate(void) {
    char n[256], line[128], sstart[32], send[32];
    lname(n, sizeof n, "rate");
    baton_client *c = client();
    baton_ratelimit *r = rl_open(c, n, RATE_PER_S, 1000, RATE_BURST);
    int64_t start = wall_ms() + 1500, end = start + RATE_SECS * 1000;
    snprintf(sstart, sizeof sstart, "%lld", (long long)start);
    snprintf(send, sizeof send, "%lld", (long long)end);
    long long ev0 = redis_evalsha();
    tl_worker w[RATE_PROCS];
    for (int i = 0; i < RATE_PROCS; i++) {
        char *argv[] = { "test_prims_ratelimit", "--worker", "rate", g_uri, n, sstart, send, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    long total = 0, minp = -1, maxp = 0;
    for (int i = 0; i < RATE_PROCS; i++) {
        long got = 0, errs = 0;
        if (tl_expect_line(&w[i], "COUNT", line, sizeof line, (RATE_SECS + 60) * 1000) == 0 &&
            sscanf(line, "COUNT %ld %ld", &got, &errs) == 2) {
            CHECK(errs == 0);
            total += got;
            if (minp < 0 || got < minp) minp = got;
            if (got > maxp) maxp = got;
        } else {
            CHECK(!"a rate worker reported");
        }
        CHECK(tl_exited_ok(tl_worker_reap(&w[i], 30000)));
    }
    long long ev1 = redis_evalsha();
    long want = RATE_PER_S * RATE_SECS;
    long paced = total - RATE_BURST;
    fprintf(stderr, "   %s: %ld admitted in %d s by %d processes (%ld..%ld each): %ld after the burst of %d, "
            "configured %ld (%+.2f %%)\n", g_backend, total, RATE_SECS, RATE_PROCS, minp, maxp, paced, RATE_BURST, want,
            100.0 * (double)(paced - want) / (double)want);
    if (ev0 >= 0 && ev1 >= 0 && total > 0)
        fprintf(stderr, "   redis: %lld EVALSHA for %ld admissions: %.2f per admission (GCRA bound: 1)\n", ev1 - ev0,
                total, (double)(ev1 - ev0) / (double)total);
    CHECK(paced >= want - want / 20 && paced <= want + want / 20);
    /* never more than the rate allows, whatever the machine's load */
    CHECK(total <= want + RATE_BURST + 1);
    baton_ratelimit_free(r);
    baton_client_close(c);
}

/* ---- server restarts (servers of their own) ------------------------------------------- */

static char g_srv_dir[1024];
static const char *g_srv_engine;

static void srv_cleanup(void) {
    if (g_srv_dir[0]) tl_server_stop(g_srv_engine, g_srv_dir);
}

/* The fault case on the server side: the burst is taken, the server
 * restarts. Where the state persists (PostgreSQL, MariaDB, ZooKeeper,
 * etcd; Redis with an append-only file) the limiter is not reset into a
 * second burst; Redis
 * without persistence forgets it, as docs/ratelimit.md says, and this
 * checks that too (a fresh burst, and the configuration stored anew). */
static int run_restart(const char *kind) {
    const char *tmp = getenv("BATON_TEST_TMP");
    char uri[512], n[] = "prims/ratelimit/restart";
    int persists = strcmp(kind, "redis-volatile") != 0, port;
    g_srv_engine = !strncmp(kind, "redis", 5) ? "redis" : kind;
    snprintf(g_srv_dir, sizeof g_srv_dir, "%s/rl_restart_%s_%ld", tmp && *tmp ? tmp : "/tmp", kind, (long)getpid());
    tl_sh("rm -rf '%s'", g_srv_dir);
    atexit(srv_cleanup);
    port = tl_server_start(g_srv_engine, g_srv_dir,
                           !strcmp(kind, "redis") ? "--save \"\" --appendonly yes --appendfsync always" : NULL);
    if (!strcmp(g_srv_engine, "postgres"))
        snprintf(uri, sizeof uri, "postgres://baton:baton-test@127.0.0.1:%d/postgres", port);
    else if (!strcmp(g_srv_engine, "mysql"))
        snprintf(uri, sizeof uri, "mysql://baton:baton-test@127.0.0.1:%d/baton", port);
    else if (!strcmp(g_srv_engine, "zk"))
        snprintf(uri, sizeof uri, "zk://127.0.0.1:%d?session_timeout_ms=4000", port);
    else if (!strcmp(g_srv_engine, "etcd"))
        snprintf(uri, sizeof uri, "etcd://127.0.0.1:%d?ttl=2", port);
    else
        snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", port);
    snprintf(g_uri, sizeof g_uri, "%s", uri);
    th_current = kind;
    baton_client *c = tl_client_open(uri);
    baton_ratelimit *r = rl_open(c, n, 4, 60000, 4);
    CHECK(tries(r, 4) == 4);
    baton_ratelimit_free(r);
    baton_client_close(c);
    CHECK(tl_server_restart(g_srv_engine, g_srv_dir) == port);
    c = tl_client_open(uri);
    baton_ratelimit_state st;
    int rc = baton_ratelimit_inspect(c, n, BATON_RATELIMIT_OVERALL, NULL, &st);
    if (persists) {
        CHECK_RC(rc, 0);
        CHECK(st.available == 0 && st.next_ms > 10000);
        r = rl_open(c, n, 4, 60000, 4);
        CHECK(tries(r, 4) == 0);
    } else {
        CHECK_RC(rc, BATON_ENOENT);
        r = rl_open(c, n, 4, 60000, 4);
        CHECK(tries(r, 5) == 4);
    }
    fprintf(stderr, "   %s: after the restart the limiter %s\n", kind, persists ? "kept its TAT" : "was forgotten");
    baton_ratelimit_free(r);
    baton_client_close(c);
    return th_finish();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 5 && !strcmp(argv[2], "burst")) return worker_burst(argv[3], argv[4]);
        if (argc == 7 && !strcmp(argv[2], "rate"))
            return worker_rate(argv[3], argv[4], atoll(argv[5]), atoll(argv[6]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc == 3 && !strcmp(argv[1], "--restart")) return run_restart(argv[2]);
    if (argc < 2) {
        fprintf(stderr, "usage: test_prims_ratelimit URI [--rate-only] | --restart redis|redis-volatile|postgres|mysql|zk|etcd\n");
        return 2;
    }
    int st = pr_setup("ratelimit", argv[1]);
    if (st) return st;
    {
        baton_client *c = client();
        baton_ratelimit *r = NULL;
        int rc = baton_ratelimit_open(&r, c, "prims/ratelimit/probe", NULL);
        baton_ratelimit_free(r);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no rate limiter", 1);
    }
    if (argc >= 3 && !strcmp(argv[2], "--rate-only")) {
        RUN(test_rate);
        return th_finish();
    }
    RUN(test_burst);
    RUN(test_admitted_count);
    RUN(test_bad_options);
    RUN(test_config);
    RUN(test_per_client);
    RUN(test_cancel_deadline);
    RUN(test_killed_holder);
    return th_finish();
}
