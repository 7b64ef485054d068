/*
 * The count-down latch suite:
 *
 *   test_prims_latch URI
 *
 * try_set only when not set, count, count_down, await with and without
 * timeout, every waiter (threads and processes) wakes when the count reaches
 * zero, N processes counting down, reuse after zero, cancel. "{port}" in URI
 * is the port of its engine's test server. An engine without latches is a skip.
 */
#include "prims.h"

static baton_latch *latch_on(baton_client *c, const char *name) {
    baton_latch *l = NULL;
    MUST(baton_latch_open(&l, c, name));
    return l;
}

static uint64_t count_of(baton_latch *l) {
    uint64_t v = 999999;
    CHECK_RC(baton_latch_count(l, &v), 0);
    return v;
}

typedef struct {
    baton_latch *l;
    int64_t wait_ms;
    int rc;
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} await_thread;

static void *await_main(void *p) {
    await_thread *t = p;
    t->rc = baton_latch_await(t->l, t->wait_ms);
    t->t_done = tl_now_ms();
    atomic_store(&t->done, 1);
    return NULL;
}

static void await_start(await_thread *t, baton_latch *l, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->l = l;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, await_main, t);
}

static int await_done(await_thread *t, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (!atomic_load(&t->done) && tl_now_ms() < end) tl_sleep_ms(2);
    return atomic_load(&t->done);
}

static void await_join(await_thread *t) {
    if (!atomic_load(&t->done)) baton_latch_cancel(t->l);
    if (!await_done(t, 10000)) {
        fprintf(stderr, "FATAL: a latch wait ignores cancel\n");
        th_failed++;
        exit(th_finish());
    }
    pthread_join(t->th, NULL);
}

/* ---- workers ------------------------------------------------------------------------- */

static int worker_down(const char *uri, const char *name) {
    baton_client *c = tl_client_open(uri);
    baton_latch *l = latch_on(c, name);
    int rc = baton_latch_count_down(l);
    baton_latch_free(l);
    baton_client_close(c);
    return rc ? 1 : 0;
}

static int worker_await(const char *uri, const char *name) {
    baton_client *c = tl_client_open(uri);
    baton_latch *l = latch_on(c, name);
    tl_out_line("WAITING\n");
    int rc = baton_latch_await(l, 20000);
    tl_out_line("DONE %d\n", rc);
    baton_latch_free(l);
    baton_client_close(c);
    return 0;
}

/* ---- cases ------------------------------------------------------------------------------ */

static void test_basic(void) {
    char n[256];
    lname(n, sizeof n, "basic");
    baton_client *c1 = client(), *c2 = client();
    baton_latch *a = latch_on(c1, n), *b = latch_on(c2, n);
    CHECK(count_of(a) == 0);
    CHECK_RC(baton_latch_await(a, 0), 0);     /* a latch never set is open */
    CHECK_RC(baton_latch_await(a, 1000), 0);
    int set = -1;
    CHECK_RC(baton_latch_try_set(a, 0, &set), BATON_EINVAL);
    CHECK_RC(baton_latch_try_set(a, 3, &set), 0);
    CHECK(set == 1);
    CHECK_RC(baton_latch_try_set(b, 5, &set), 0);
    CHECK(set == 0);
    CHECK(count_of(b) == 3);
    CHECK_RC(baton_latch_await(b, 0), BATON_ETIMEDOUT);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_latch_await(b, 300), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    CHECK_RC(baton_latch_count_down(b), 0);
    CHECK(count_of(a) == 2);
    CHECK_RC(baton_latch_count_down(a), 0);
    CHECK_RC(baton_latch_count_down(a), 0);
    CHECK(count_of(b) == 0);
    CHECK_RC(baton_latch_await(b, 0), 0);
    CHECK_RC(baton_latch_count_down(a), 0);    /* below zero: stays at zero */
    CHECK(count_of(b) == 0);
    /* at zero the latch can be set again */
    CHECK_RC(baton_latch_try_set(b, 1, &set), 0);
    CHECK(set == 1);
    CHECK(count_of(a) == 1);
    CHECK_RC(baton_latch_count_down(a), 0);
    baton_latch_free(a);
    baton_latch_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define THREADS 4

static void test_everyone_wakes(void) {
    char n[256], line[128];
    lname(n, sizeof n, "wake");
    baton_client *c[2] = { client(), client() };
    baton_latch *l = latch_on(c[0], n), *w[THREADS];
    int set;
    CHECK_RC(baton_latch_try_set(l, 2, &set), 0);
    await_thread t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = latch_on(c[i % 2], n);
        await_start(&t[i], w[i], i % 2 ? 10000 : -1);
    }
    tl_worker p;
    char *argv[] = { "test_prims_latch", "--worker", "await", g_uri, n, NULL };
    CHECK(tl_worker_spawn(&p, argv) == 0);
    CHECK(tl_expect_line(&p, "WAITING", line, sizeof line, 15000) == 0);
    tl_sleep_ms(300);
    for (int i = 0; i < THREADS; i++) CHECK(!atomic_load(&t[i].done));
    CHECK_RC(baton_latch_count_down(l), 0);
    tl_sleep_ms(200);
    for (int i = 0; i < THREADS; i++) CHECK(!atomic_load(&t[i].done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_latch_count_down(l), 0);
    for (int i = 0; i < THREADS; i++) {
        CHECK(await_done(&t[i], 5000));
        CHECK(t[i].t_done - t0 < 1500);
        await_join(&t[i]);
        CHECK_RC(t[i].rc, 0);
        baton_latch_free(w[i]);
    }
    char want[32];
    snprintf(want, sizeof want, "DONE 0");
    CHECK(tl_expect_line(&p, want, line, sizeof line, 5000) == 0);
    CHECK(tl_now_ms() - t0 < 3000);
    CHECK(tl_exited_ok(tl_worker_reap(&p, 10000)));
    baton_latch_free(l);
    baton_client_close(c[0]);
    baton_client_close(c[1]);
}

#define PROCS 5

static void test_processes(void) {
    char n[256];
    lname(n, sizeof n, "procs");
    baton_client *c = client();
    baton_latch *l = latch_on(c, n);
    int set;
    CHECK_RC(baton_latch_try_set(l, PROCS, &set), 0);
    await_thread t;
    await_start(&t, l, 30000);
    tl_worker w[PROCS];
    for (int i = 0; i < PROCS; i++) {
        char *argv[] = { "test_prims_latch", "--worker", "down", g_uri, n, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < PROCS; i++) CHECK(tl_exited_ok(tl_worker_reap(&w[i], 60000)));
    CHECK(await_done(&t, 5000));
    await_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(count_of(l) == 0);
    baton_latch_free(l);
    baton_client_close(c);
}

static void test_cancel(void) {
    char n[256];
    lname(n, sizeof n, "cancel");
    baton_client *c = client();
    baton_latch *l = latch_on(c, n);
    int set;
    CHECK_RC(baton_latch_try_set(l, 1, &set), 0);
    await_thread t;
    await_start(&t, l, -1);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_latch_cancel(l), 0);
    CHECK(await_done(&t, 3000));
    CHECK(t.t_done - t0 < 1000);
    await_join(&t);
    CHECK_RC(t.rc, BATON_ECANCELED);
    CHECK_RC(baton_latch_count_down(l), 0);
    CHECK_RC(baton_latch_await(l, 1000), 0);
    baton_latch_free(l);
    baton_client_close(c);
}

/* Redis: Redisson's layout. A Redisson count_down to zero (DEL + PUBLISH 0 on
 * redisson_countdownlatch__channel__{K}) releases a baton waiter. */
static void test_redisson_layout(void) {
    if (!g_redis_port) return;
    char n[256], ch[400];
    lname(n, sizeof n, "redisson");
    snprintf(ch, sizeof ch, "redisson_countdownlatch__channel__{%s}", n);
    baton_client *c = client();
    baton_latch *l = latch_on(c, n);
    int set;
    CHECK_RC(baton_latch_try_set(l, 2, &set), 0);
    char *r = redis_raw(g_redis_port, "GET", n, NULL);
    CHECK(r && !strcmp(r, "$1\r\n2\r\n"));
    free(r);
    await_thread t;
    await_start(&t, l, 10000);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    free(redis_raw(g_redis_port, "DEL", n, NULL));
    free(redis_raw(g_redis_port, redis_publish_cmd(), ch, "0", NULL));
    CHECK(await_done(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    await_join(&t);
    CHECK_RC(t.rc, 0);
    baton_latch_free(l);
    baton_client_close(c);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 5 && !strcmp(argv[2], "down")) return worker_down(argv[3], argv[4]);
        if (argc == 5 && !strcmp(argv[2], "await")) return worker_await(argv[3], argv[4]);
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    int rc = pr_setup("latch", argv[1]);
    if (rc) return rc;
    {
        baton_client *c = client();
        baton_latch *l = NULL;
        rc = baton_latch_open(&l, c, "probe");
        baton_latch_free(l);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no count-down latch", 1);
    }
    RUN(test_basic);
    RUN(test_everyone_wakes);
    RUN(test_processes);
    RUN(test_cancel);
    RUN(test_redisson_layout);
    return th_finish();
}
