/*
 * The semaphore suite:
 *
 *   test_prims_sem URI
 *
 * try_set / add / drain / available, acquire and release of k permits, try,
 * timed and unbounded waits woken by releases, cancel, the permit count
 * under N processes, and a waiter killed while waiting takes nothing with it.
 * "{port}" in URI is the port of its engine's test server. An engine without
 * semaphores is a skip.
 */
#include "prims.h"

static baton_semaphore *sem_on(baton_client *c, const char *name) {
    baton_semaphore *s = NULL;
    MUST(baton_semaphore_open(&s, c, name));
    return s;
}

static uint64_t avail(baton_semaphore *s) {
    uint64_t v = 999999;
    CHECK_RC(baton_semaphore_available(s, &v), 0);
    return v;
}

/* A thread running one semaphore acquire. */
typedef struct {
    baton_semaphore *s;
    uint32_t k;
    int64_t wait_ms;
    int rc;
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} sem_thread;

static void *sem_main(void *p) {
    sem_thread *t = p;
    t->rc = baton_semaphore_acquire(t->s, t->k, t->wait_ms);
    t->t_done = tl_now_ms();
    atomic_store(&t->done, 1);
    return NULL;
}

static void sem_start(sem_thread *t, baton_semaphore *s, uint32_t k, int64_t wait_ms) {
    memset(t, 0, sizeof *t);
    t->s = s;
    t->k = k;
    t->wait_ms = wait_ms;
    atomic_init(&t->done, 0);
    pthread_create(&t->th, NULL, sem_main, t);
}

static int sem_wait_done(sem_thread *t, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (!atomic_load(&t->done) && tl_now_ms() < end) tl_sleep_ms(2);
    return atomic_load(&t->done);
}

static void sem_join(sem_thread *t) {
    if (!atomic_load(&t->done)) baton_semaphore_cancel(t->s);
    if (!sem_wait_done(t, 10000)) {
        fprintf(stderr, "FATAL: a semaphore acquire ignores cancel\n");
        th_failed++;
        exit(th_finish());
    }
    pthread_join(t->th, NULL);
}

/* ---- workers ------------------------------------------------------------------------ */

/* M times: take one permit, count ourselves in FILE (max in MAXFILE), leave. */
static int worker_sem(const char *uri, const char *name, const char *file, const char *maxfile, int m) {
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    int bad = 0;
    for (int i = 0; i < m; i++) {
        int rc = baton_semaphore_acquire(s, 1, 60000);
        if (rc) {
            fprintf(stderr, "worker: acquire %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
            break;
        }
        tl_counter_add(file, 1, maxfile);
        usleep(3000);
        tl_counter_add(file, -1, NULL);
        if (baton_semaphore_release(s, 1)) bad = 1;
    }
    baton_semaphore_free(s);
    baton_client_close(c);
    return bad;
}

static int worker_waitsem(const char *uri, const char *name) {
    baton_client *c = tl_client_open(uri);
    baton_semaphore *s = sem_on(c, name);
    tl_out_line("WAITING\n");
    int rc = baton_semaphore_acquire(s, 1, -1);
    tl_out_line("GOT %d\n", rc);
    tl_wait_for_line("EXIT");
    baton_semaphore_free(s);
    baton_client_close(c);
    return 0;
}

/* ---- cases ------------------------------------------------------------------------------ */

static void test_counts(void) {
    char n[256];
    lname(n, sizeof n, "counts");
    baton_client *c1 = client(), *c2 = client();
    baton_semaphore *s = sem_on(c1, n), *t = sem_on(c2, n);
    CHECK(avail(s) == 0);
    int set = -1;
    CHECK_RC(baton_semaphore_try_set(s, 3, &set), 0);
    CHECK(set == 1);
    CHECK_RC(baton_semaphore_try_set(t, 5, &set), 0);
    CHECK(set == 0);
    CHECK(avail(t) == 3);
    CHECK_RC(baton_semaphore_acquire(s, 2, 0), 0);
    CHECK(avail(t) == 1);
    CHECK_RC(baton_semaphore_acquire(t, 2, 0), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_acquire(t, 2, 300), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    CHECK(avail(t) == 1);
    CHECK_RC(baton_semaphore_acquire(t, 1, 0), 0);
    CHECK(avail(s) == 0);
    CHECK_RC(baton_semaphore_release(t, 3), 0); /* permits have no owners */
    CHECK(avail(s) == 3);
    CHECK_RC(baton_semaphore_add(s, 4), 0);
    CHECK(avail(t) == 7);
    CHECK_RC(baton_semaphore_add(s, -2), 0);
    CHECK(avail(t) == 5);
    uint64_t d = 0;
    CHECK_RC(baton_semaphore_drain(t, &d), 0);
    CHECK(d == 5);
    CHECK(avail(s) == 0);
    CHECK_RC(baton_semaphore_drain(t, &d), 0);
    CHECK(d == 0);
    /* below zero: available says 0, lock_info the signed count; -1 is a
     * count, not BATON_PERMITS_UNKNOWN */
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_semaphore_add(s, -1), 0);
    CHECK(avail(t) == 0);
    CHECK_RC(baton_lock_info(c2, n, &info), 0);
    CHECK(info.permits == -1);
    CHECK_RC(baton_semaphore_add(t, -1), 0);
    CHECK_RC(baton_lock_info(c1, n, &info), 0);
    CHECK(info.permits == -2);
    CHECK_RC(baton_semaphore_acquire(s, 1, 0), BATON_ELOCKED);
    CHECK_RC(baton_semaphore_add(s, 3), 0);
    CHECK(avail(t) == 1);
    CHECK_RC(baton_lock_info(c2, n, &info), 0);
    CHECK(info.permits == 1);
    CHECK_RC(baton_semaphore_acquire(t, 1, 0), 0);
    CHECK_RC(baton_semaphore_acquire(s, 0, 0), BATON_EINVAL);
    CHECK_RC(baton_semaphore_release(s, 0), BATON_EINVAL);
    /* a name never set drains nothing */
    char n2[256];
    lname(n2, sizeof n2, "counts-unset");
    baton_semaphore *u = sem_on(c1, n2);
    CHECK_RC(baton_semaphore_drain(u, &d), 0);
    CHECK(d == 0);
    CHECK_RC(baton_semaphore_acquire(u, 1, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_info(c1, n2, &info), 0);
    CHECK(info.permits == BATON_PERMITS_UNKNOWN);   /* no semaphore there: no count */
    baton_semaphore_free(u);
    baton_semaphore_free(s);
    baton_semaphore_free(t);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_wakeups(void) {
    char n[256];
    lname(n, sizeof n, "wakeups");
    baton_client *c1 = client(), *c2 = client();
    baton_semaphore *s = sem_on(c1, n), *w = sem_on(c2, n), *w2 = sem_on(c1, n);
    int set;
    CHECK_RC(baton_semaphore_try_set(s, 0, &set), 0);
    sem_thread t;
    sem_start(&t, w, 2, 10000);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done));
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done)); /* one is not enough */
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    CHECK(sem_wait_done(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    sem_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(avail(s) == 0);
    /* an unbounded wait on the same client as the releaser, woken by add */
    sem_start(&t, w2, 1, -1);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done));
    t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_add(s, 1), 0);
    CHECK(sem_wait_done(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    sem_join(&t);
    CHECK_RC(t.rc, 0);
    /* ...and by try_set on a fresh name */
    char n2[256];
    lname(n2, sizeof n2, "wakeups-set");
    baton_semaphore *f = sem_on(c1, n2), *fw = sem_on(c2, n2);
    sem_start(&t, fw, 2, 10000);
    tl_sleep_ms(200);
    t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_try_set(f, 2, &set), 0);
    CHECK(sem_wait_done(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    sem_join(&t);
    CHECK_RC(t.rc, 0);
    baton_semaphore_free(f);
    baton_semaphore_free(fw);
    baton_semaphore_free(s);
    baton_semaphore_free(w);
    baton_semaphore_free(w2);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_cancel(void) {
    char n[256];
    lname(n, sizeof n, "cancel");
    baton_client *c = client();
    baton_semaphore *s = sem_on(c, n);
    sem_thread t;
    sem_start(&t, s, 1, -1);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_cancel(s), 0);
    CHECK(sem_wait_done(&t, 3000));
    CHECK(t.t_done - t0 < 1000);
    sem_join(&t);
    CHECK_RC(t.rc, BATON_ECANCELED);
    /* the handle works afterwards */
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    CHECK_RC(baton_semaphore_acquire(s, 1, 1000), 0);
    baton_semaphore_free(s);
    baton_client_close(c);
}

#define PERMITS 2
#define PROCS 4
#define ITERS 10

static void test_processes(void) {
    char n[256], file[1200], maxfile[1200], m[16];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/inside", g_tmp);
    snprintf(maxfile, sizeof maxfile, "%s/inside.max", g_tmp);
    snprintf(m, sizeof m, "%d", ITERS);
    tl_counter_init(file, 0);
    tl_counter_init(maxfile, 0);
    baton_client *c = client();
    baton_semaphore *s = sem_on(c, n);
    int set;
    CHECK_RC(baton_semaphore_try_set(s, PERMITS, &set), 0);
    tl_worker w[PROCS];
    for (int i = 0; i < PROCS; i++) {
        char *argv[] = { "test_prims_sem", "--worker", "sem", g_uri, n, file, maxfile, m, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < PROCS; i++) CHECK(tl_exited_ok(tl_worker_reap(&w[i], 120000)));
    long mx = tl_counter_read(maxfile);
    fprintf(stderr, "   at most %ld of %d processes held a permit at once (%d permits)\n", mx, PROCS, PERMITS);
    CHECK(mx >= 1 && mx <= PERMITS);
    CHECK(tl_counter_read(file) == 0);
    CHECK(avail(s) == PERMITS);
    baton_semaphore_free(s);
    baton_client_close(c);
}

static void test_killed_waiter(void) {
    char n[256], line[128];
    lname(n, sizeof n, "killed");
    baton_client *c = client();
    baton_semaphore *s = sem_on(c, n);
    tl_worker w;
    char *argv[] = { "test_prims_sem", "--worker", "waitsem", g_uri, n, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    tl_sleep_ms(200);
    kill(w.pid, SIGKILL);
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    CHECK_RC(baton_semaphore_release(s, 1), 0);
    CHECK(avail(s) == 1);
    CHECK_RC(baton_semaphore_acquire(s, 1, 0), 0);
    baton_semaphore_free(s);
    baton_client_close(c);
}

/* Redis: Redisson's layout. A Redisson-style release (INCRBY + PUBLISH on
 * redisson_sc:{K}) wakes a baton waiter; baton's count is the plain string. */
static void test_redisson_layout(void) {
    if (!g_redis_port) return;
    char n[256], ch[400];
    lname(n, sizeof n, "redisson");
    snprintf(ch, sizeof ch, "redisson_sc:{%s}", n);
    free(redis_raw(g_redis_port, "SET", n, "0", NULL));
    baton_client *c = client();
    baton_semaphore *s = sem_on(c, n);
    sem_thread t;
    sem_start(&t, s, 1, 10000);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    free(redis_raw(g_redis_port, "INCRBY", n, "1", NULL));
    free(redis_raw(g_redis_port, redis_publish_cmd(), ch, "1", NULL));
    CHECK(sem_wait_done(&t, 5000));
    CHECK(t.t_done - t0 < 1500);
    sem_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK_RC(baton_semaphore_release(s, 2), 0);
    char *r = redis_raw(g_redis_port, "GET", n, NULL);
    CHECK(r && !strcmp(r, "$1\r\n2\r\n"));
    free(r);
    baton_semaphore_free(s);
    baton_client_close(c);
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 8 && !strcmp(argv[2], "sem")) return worker_sem(argv[3], argv[4], argv[5], argv[6], atoi(argv[7]));
        if (argc == 5 && !strcmp(argv[2], "waitsem")) return worker_waitsem(argv[3], argv[4]);
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    int rc = pr_setup("sem", argv[1]);
    if (rc) return rc;
    {
        baton_client *c = client();
        baton_semaphore *s = NULL;
        rc = baton_semaphore_open(&s, c, "probe");
        baton_semaphore_free(s);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no semaphore", 1);
    }
    RUN(test_counts);
    RUN(test_wakeups);
    RUN(test_cancel);
    RUN(test_processes);
    RUN(test_killed_waiter);
    RUN(test_redisson_layout);
    return th_finish();
}
