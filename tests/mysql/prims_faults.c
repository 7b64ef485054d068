/*
 * Faults under the MySQL/MariaDB read-write locks, semaphores, permits and
 * fair locks (issue 25), on a server of its own (tests/servers/mysql.sh):
 *
 *   test_mysql_prims_faults
 *
 *   - server crash and restart (SIGKILL, down 1 s): a writer (lease 20 s)
 *     still holds and renews after it, a reader that waited across it gets
 *     the lock at the writer's release with a larger fence; a semaphore
 *     waiter outlives it and takes the permit added after it; a permit
 *     (lease 20 s) taken before it renews and releases after it; a session
 *     mode fair holder loses its GET_LOCK with its connection and is told,
 *     and its two queued waiters are granted in their order, one at a time,
 *     with increasing fences;
 *   - every connection of the user KILLed (KILL USER): the same for the fair
 *     lock in session mode (holder LOST, next waiter granted, never two at
 *     once); a read-write holder (lease rows) keeps holding;
 *   - a fair holder process SIGKILLed (session mode): the queued waiter is
 *     granted at once (the server frees the named lock), fence larger;
 *   - baton_lock_force_unlock of a read-write lock's name (every mode): the
 *     writer is gone, fences above its, ENOTHELD the second time.
 *
 * Worker: test_mysql_prims_faults fairhold URI NAME   holds, says "HELD fence", waits
 */
#include "../prims/prims.h"

static char g_dir[1024];

static void sql_root(const char *sql)
{
    tl_sh("bash '%s/mysql.sh' sql '%s' \"%s\" >/dev/null 2>&1", TL_SERVERS_DIR, g_dir, sql);
}

static baton_client *open_mode(const char *mode)
{
    char uri[1200];
    snprintf(uri, sizeof uri, "%s?mode=%s", g_uri, mode);
    return tl_client_open(uri);
}

static void count_lost(baton_lock *l, void *p)
{
    (void)l;
    atomic_fetch_add((atomic_int *)p, 1);
}

typedef struct {
    baton_semaphore *s;
    int rc;
    atomic_int done;
} semwait;

static void *sem_main(void *p)
{
    semwait *w = p;
    w->rc = baton_semaphore_acquire(w->s, 1, 60000);
    atomic_store(&w->done, 1);
    return NULL;
}

/* A fair holder (A, session mode, told when lost) and two queued waiters (B
 * then C); FAULT ends A's connection; then B, then C, one at a time. */
static void fair_after(const char *what, void (*fault)(void))
{
    char n[128];
    atomic_int lost;
    atomic_init(&lost, 0);
    snprintf(n, sizeof n, "fair-%s", what);
    baton_client *ca = open_mode("session"), *cb = open_mode("session"), *cc = open_mode("session");
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    baton_lock_options oa = o;
    oa.on_lost = count_lost;
    oa.on_lost_payload = &lost;
    baton_lock *a = lock_on(ca, n, &oa), *b = lock_on(cb, n, &o), *c = lock_on(cc, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    acq_thread tb, tc;
    acq_start(&tb, b, 60000);
    tl_sleep_ms(400);        /* B is queued first */
    acq_start(&tc, c, 60000);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&tb.done) && !atomic_load(&tc.done));
    fault();
    CHECK(acq_wait(&tb, 20000));
    CHECK_RC(tb.rc, 0);
    CHECK(tb.fence > fa);
    /* never two holders: A was told before or as B got it */
    int64_t end = tl_now_ms() + 3000;
    while (!atomic_load(&lost) && tl_now_ms() < end) tl_sleep_ms(10);
    CHECK(atomic_load(&lost) == 1);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&tc.done));   /* C waits for B */
    atomic_store(&tb.release_now, 1);
    CHECK(acq_wait(&tc, 10000));
    CHECK_RC(tc.rc, 0);
    CHECK(tc.fence > tb.fence);
    fprintf(stderr, "   %s: fences %llu (lost), %llu, %llu\n", what, (unsigned long long)fa,
            (unsigned long long)tb.fence, (unsigned long long)tc.fence);
    acq_join(&tb);
    acq_join(&tc);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(c);
    baton_client_close(ca);
    baton_client_close(cb);
    baton_client_close(cc);
}

static void crash_restart(void)
{
    /* the fixture flushes its redo log once a second: what a kill may lose */
    tl_sleep_ms(1500);
    tl_server("mysql", "kill", g_dir, NULL, 1);
    tl_sleep_ms(1000);
    tl_server("mysql", "restart", g_dir, NULL, 1);
}

static void kill_user(void)
{
    sql_root("KILL USER baton");
}

/* rw, semaphore and permits across a crash and restart. */
static void test_restart(void)
{
    baton_client *c1 = open_mode("session"), *c2 = open_mode("lease"), *c3 = open_mode("row");
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 20000;
    baton_rwlock *w = NULL, *r = NULL;
    baton_semaphore *s = NULL;
    baton_permits *p = NULL;
    semwait sw = { 0 };
    pthread_t st;
    char id[BATON_PERMIT_ID_SIZE];
    int set = 0;
    uint64_t av = 0;

    MUST(baton_rwlock_open(&w, c1, "rw-restart", &o));
    MUST(baton_rwlock_open(&r, c2, "rw-restart", NULL));
    MUST(baton_semaphore_open(&s, c2, "sem-restart"));
    MUST(baton_permits_open(&p, c3, "permits-restart"));
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), 0);
    uint64_t fw = baton_lock_fence(baton_rwlock_write(w));
    acq_thread tr;
    acq_start(&tr, baton_rwlock_read(r), 60000);
    atomic_init(&sw.done, 0);
    sw.s = s;
    pthread_create(&st, NULL, sem_main, &sw);
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    CHECK_RC(baton_permits_acquire(p, 20000, 0, id), 0);
    crash_restart();
    tl_sleep_ms(800);        /* the waiters meet the restarted server */
    CHECK(!atomic_load(&tr.done) && !atomic_load(&sw.done));
    CHECK(baton_lock_held(baton_rwlock_write(w)) == 1);
    CHECK_RC(baton_permits_renew(p, id, 20000), 0);
    CHECK_RC(baton_permits_available(p, &av), 0);
    CHECK(av == 0);
    CHECK_RC(baton_lock_release(baton_rwlock_write(w)), 0);
    CHECK(acq_wait(&tr, 10000));
    CHECK_RC(tr.rc, 0);
    CHECK(tr.fence > fw);
    CHECK_RC(baton_semaphore_add(s, 1), 0);
    pthread_join(st, NULL);
    CHECK_RC(sw.rc, 0);
    CHECK_RC(baton_permits_release(p, id), 0);
    CHECK_RC(baton_permits_available(p, &av), 0);
    CHECK(av == 1);
    acq_join(&tr);
    baton_permits_free(p);
    baton_semaphore_free(s);
    baton_rwlock_free(r);
    baton_rwlock_free(w);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

static void test_fair_restart(void) { fair_after("restart", crash_restart); }
static void test_fair_kill(void) { fair_after("kill", kill_user); }

/* A read-write holder keeps its lock when its connections are KILLed. */
static void test_rw_kill(void)
{
    baton_client *c1 = open_mode("session"), *c2 = open_mode("session");
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 1500;
    baton_rwlock *w = NULL, *x = NULL;
    MUST(baton_rwlock_open(&w, c1, "rw-kill", &o));
    MUST(baton_rwlock_open(&x, c2, "rw-kill", NULL));
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), 0);
    kill_user();
    tl_sleep_ms(2500);       /* past its first lease: renewed on new connections */
    CHECK(baton_lock_held(baton_rwlock_write(w)) == 1);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(x), 0), BATON_ELOCKED);
    uint64_t fw = baton_lock_fence(baton_rwlock_write(w));
    CHECK_RC(baton_lock_release(baton_rwlock_write(w)), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(x), 0), 0);
    CHECK(baton_lock_fence(baton_rwlock_read(x)) > fw);
    baton_rwlock_free(w);
    baton_rwlock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* baton_lock_force_unlock on a read-write lock's name: the writer is gone
 * (its release is ELOST), the fence given is above the writer's, and the
 * next grant's is above it; a second break finds nobody (ENOTHELD). */
static void rw_force_unlock(const char *mode)
{
    char n[64];
    snprintf(n, sizeof n, "rw-break-%s", mode);
    baton_client *c1 = open_mode(mode), *c2 = open_mode(mode);
    baton_rwlock *w = NULL, *x = NULL;
    uint64_t f = 0, f2 = 0;
    MUST(baton_rwlock_open(&w, c1, n, NULL));
    MUST(baton_rwlock_open(&x, c2, n, NULL));
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(w), 0), 0);
    uint64_t fw = baton_lock_fence(baton_rwlock_write(w));
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(x), 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_force_unlock(c2, n, &f), 0);
    CHECK(f > fw);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(x), 0), 0);
    CHECK(baton_lock_fence(baton_rwlock_read(x)) > f);
    CHECK_RC(baton_lock_release(baton_rwlock_write(w)), BATON_ELOST);
    CHECK_RC(baton_lock_release(baton_rwlock_read(x)), 0);
    CHECK_RC(baton_lock_force_unlock(c2, n, &f2), BATON_ENOTHELD);
    CHECK(f2 > f);
    baton_rwlock_free(w);
    baton_rwlock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_rw_force_unlock(void)
{
    rw_force_unlock("session");
    rw_force_unlock("lease");
    rw_force_unlock("row");
}

static int worker_fairhold(const char *uri, const char *name)
{
    baton_client *c = tl_client_open(uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    baton_lock *l = lock_on(c, name, &o);
    int rc = baton_lock_acquire(l, 30000);
    if (rc) {
        tl_out_line("ERR %d\n", rc);
        return 2;
    }
    tl_out_line("HELD %llu\n", (unsigned long long)baton_lock_fence(l));
    tl_wait_for_line("EXIT");
    return 0;
}

static void test_fair_holder_killed(void)
{
    char uri[1200], line[128];
    snprintf(uri, sizeof uri, "%s?mode=session", g_uri);
    char *argv[] = { "test_mysql_prims_faults", "fairhold", uri, "fair-sigkill", NULL };
    tl_worker w;
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "HELD", line, sizeof line, 15000) == 0);
    uint64_t f1 = strtoull(line + 5, NULL, 10);
    baton_client *c = open_mode("session");
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    baton_lock *b = lock_on(c, "fair-sigkill", &o);
    acq_thread t;
    acq_start(&t, b, 30000);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&t.done));
    kill(w.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    CHECK(WIFSIGNALED(tl_worker_reap(&w, 10000)));
    CHECK(acq_wait(&t, 10000));
    CHECK_RC(t.rc, 0);
    CHECK(t.fence > f1);
    fprintf(stderr, "   the queued waiter got it %lld ms after the holder's SIGKILL\n", (long long)(t.t_done - t0));
    CHECK(t.t_done - t0 < 2000);
    acq_join(&t);
    baton_lock_free(b);
    baton_client_close(c);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && !strcmp(argv[1], "fairhold")) return worker_fairhold(argv[2], argv[3]);
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/mysql_prims_faults", tmp ? tmp : "/tmp");
    tl_server_stop("mysql", g_dir);
    int port = tl_server("mysql", "start", g_dir, NULL, 1);
    snprintf(g_uri, sizeof g_uri, "mysql://baton:baton-test@127.0.0.1:%d/baton", port);
    RUN(test_rw_force_unlock);
    RUN(test_fair_holder_killed);
    RUN(test_rw_kill);
    RUN(test_fair_kill);
    RUN(test_restart);
    RUN(test_fair_restart);
    tl_server_stop("mysql", g_dir);
    return th_finish();
}
