/* Fair locks, semaphores and permits on PostgreSQL under faults (issue 25),
 * on a server of its own ($BATON_TEST_TMP/pg_prims_faults; restarted with
 * its data and port). Fair locks in every mode:
 *   - the holder SIGKILLed: the head waiter gets it (session and row modes
 *     at once, lease mode when the dead holder's lease ends), the waiter
 *     behind it only after the head's release; fences increase;
 *   - the head waiter's backend ended by pg_terminate_backend: it queues
 *     again behind the other waiter, which is granted first; both are
 *     granted in turn, never two at once;
 *   - the server restarted under a holder and two waiters: both waiters are
 *     granted in turn, never two at once, with fences above the holder's.
 * Semaphore: a waiter blocked across a restart is granted by a release made
 * after it; the count outlives the restart. Permits: a SIGKILLed holder's
 * permit comes back when its lease ends, not before; a permit outlives a
 * restart (renewable after it) and still expires by its lease. */
#include <baton.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static int g_port;
static char g_uri[512];
static const char *g_mode = "session";

static void cleanup(void)
{
    if (g_dir[0]) tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_dir);
}

/* One superuser statement: -1 on error, else the integer of a one-cell
 * answer, else 0. */
static int su(const char *sql)
{
    char conninfo[256];
    int rc = -1;
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=baton password=baton-test dbname=postgres",
             g_port);
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        rc = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : -1;
        if (rc) fprintf(stderr, "   su(%s): %s", sql, PQresultErrorMessage(r));
        else if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQnfields(r) == 1)
            rc = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
    } else {
        fprintf(stderr, "   su: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

static baton_lock *fair_lock(baton_client *c, const char *name, uint32_t lease_ms)
{
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    o.fair = 1;
    if (lease_ms) o.lease_ms = lease_ms;
    if (baton_lock_open(&l, c, name, &o)) {
        fprintf(stderr, "FAIL: lock_open: %s\n", tl_lastmsg());
        exit(1);
    }
    return l;
}

/* ---- workers ---------------------------------------------------------------- */

/* Takes the fair lock NAME (lease LEASE ms), says GOT <fence>, holds until killed. */
static int worker_hold(const char *uri, const char *name, uint32_t lease)
{
    baton_client *c = tl_client_open(uri);
    baton_lock *l = fair_lock(c, name, lease);
    int rc = baton_lock_acquire(l, 30000);
    if (rc) {
        tl_out_line("ERR %d\n", rc);
        return 2;
    }
    tl_out_line("GOT %llu\n", (unsigned long long)baton_lock_fence(l));
    tl_wait_for_line("RELEASE");
    return 0;
}

/* Takes a permit of NAME (lease LEASE ms), says GOT, holds until killed. */
static int worker_permit(const char *uri, const char *name, uint32_t lease)
{
    baton_client *c = tl_client_open(uri);
    baton_permits *p = NULL;
    char id[BATON_PERMIT_ID_SIZE];
    if (baton_permits_open(&p, c, name) || baton_permits_acquire(p, lease, 30000, id)) {
        tl_out_line("ERR %s\n", tl_lastmsg());
        return 2;
    }
    tl_out_line("GOT %s\n", id);
    tl_wait_for_line("RELEASE");
    return 0;
}

/* ---- a waiter thread: acquire, note the grant, hold a while, release -------- */

static atomic_int g_holders, g_overlap;

typedef struct {
    baton_lock *l;
    int hold_ms;
    int rc;
    uint64_t fence;
    int64_t t_grant;
    atomic_int done;
    pthread_t th;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    w->rc = baton_lock_acquire(w->l, 60000);
    w->t_grant = tl_now_ms();
    if (w->rc == 0) {
        w->fence = baton_lock_fence(w->l);
        if (atomic_fetch_add(&g_holders, 1) != 0) atomic_fetch_add(&g_overlap, 1);
        tl_sleep_ms(w->hold_ms);
        atomic_fetch_sub(&g_holders, 1);
        baton_lock_release(w->l);
    }
    atomic_store(&w->done, 1);
    return NULL;
}

static void waiter_start(waiter *w, baton_lock *l, int hold_ms)
{
    memset(w, 0, sizeof *w);
    w->l = l;
    w->hold_ms = hold_ms;
    pthread_create(&w->th, NULL, waiter_main, w);
}

/* ---- fair locks ---------------------------------------------------------------- */

static void test_fair_holder_killed(void)
{
    const uint32_t lease = 2000;
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *a = fair_lock(c1, "hk", lease), *b = fair_lock(c2, "hk", lease);
    char ls[16], line[128];
    tl_worker wk;
    waiter wa, wb;
    uint64_t f0;
    int64_t t0;

    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_postgres_prims_faults", "--worker", "hold", g_uri, "hk", ls, NULL };
    CHECK(tl_worker_spawn(&wk, argv) == 0);
    CHECK(tl_expect_line(&wk, "GOT ", line, sizeof line, 15000) == 0);
    f0 = strtoull(line + 4, NULL, 10);
    atomic_store(&g_holders, 0);
    atomic_store(&g_overlap, 0);
    waiter_start(&wa, a, 1500);
    tl_sleep_ms(400);                   /* a is queued first */
    waiter_start(&wb, b, 100);
    tl_sleep_ms(400);
    CHECK(!atomic_load(&wa.done) && !atomic_load(&wb.done));
    kill(wk.pid, SIGKILL);
    t0 = tl_now_ms();
    CHECK(WIFSIGNALED(tl_worker_reap(&wk, 10000)));
    pthread_join(wa.th, NULL);
    pthread_join(wb.th, NULL);
    CHECK_RC(wa.rc, 0);
    CHECK_RC(wb.rc, 0);
    fprintf(stderr, "   measure: %s: head waiter granted %lld ms after the holder's SIGKILL (lease %u ms)\n", g_mode,
            (long long)(wa.t_grant - t0), lease);
    CHECK(wa.t_grant - t0 < (int64_t)lease + 3000);
    CHECK(wa.t_grant < wb.t_grant);     /* FIFO: a first */
    CHECK(f0 > 0 && wa.fence > f0 && wb.fence > wa.fence);
    CHECK(atomic_load(&g_overlap) == 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_fair_waiter_terminated(void)
{
    baton_client *c0 = tl_client_open(g_uri), *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *h = fair_lock(c0, "wt", 0), *a = fair_lock(c1, "wt", 0), *b = fair_lock(c2, "wt", 0);
    char q[512];
    waiter wa, wb;
    uint64_t fh;

    CHECK_RC(baton_lock_acquire(h, 0), 0);
    fh = baton_lock_fence(h);
    atomic_store(&g_holders, 1);
    atomic_store(&g_overlap, 0);
    waiter_start(&wa, a, 300);
    tl_sleep_ms(400);
    waiter_start(&wb, b, 300);
    tl_sleep_ms(400);
    /* the head's queue connection (its entry's pid) ended by the server */
    snprintf(q, sizeof q, "SELECT count(pg_terminate_backend(pid))::int FROM (SELECT pid FROM pf_%s_fair "
             "WHERE name = 'wt' ORDER BY seq LIMIT 1) f", g_mode);
    CHECK(su(q) == 1);
    tl_sleep_ms(1500);                  /* a notices at its next re-check and queues again, behind b */
    CHECK(!atomic_load(&wa.done) && !atomic_load(&wb.done));
    atomic_store(&g_holders, 0);
    CHECK_RC(baton_lock_release(h), 0);
    pthread_join(wa.th, NULL);
    pthread_join(wb.th, NULL);
    CHECK_RC(wa.rc, 0);
    CHECK_RC(wb.rc, 0);
    CHECK(wb.t_grant < wa.t_grant);     /* b was the head once a left */
    CHECK(wb.fence > fh && wa.fence > wb.fence);
    CHECK(atomic_load(&g_overlap) == 0);
    baton_lock_free(h);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c0);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_fair_restart(void)
{
    baton_client *c0 = tl_client_open(g_uri), *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_lock *h = fair_lock(c0, "rs", 4000), *a = fair_lock(c1, "rs", 4000), *b = fair_lock(c2, "rs", 4000);
    waiter wa, wb;
    uint64_t fh;

    CHECK_RC(baton_lock_acquire(h, 0), 0);
    fh = baton_lock_fence(h);
    atomic_store(&g_holders, 0);
    atomic_store(&g_overlap, 0);
    waiter_start(&wa, a, 500);
    tl_sleep_ms(300);
    waiter_start(&wb, b, 500);
    tl_sleep_ms(300);
    tl_server_restart("postgres", g_dir);
    tl_sleep_ms(1000);
    /* session and row modes: the holder's session died with the server (its
     * lock is lost); lease mode: its lease row outlived it, it releases */
    if (!strcmp(g_mode, "lease")) {
        CHECK(!atomic_load(&wa.done) && !atomic_load(&wb.done));
        CHECK_RC(baton_lock_release(h), 0);
    } else {
        CHECK(baton_lock_held(h) == 0);
    }
    pthread_join(wa.th, NULL);
    pthread_join(wb.th, NULL);
    CHECK_RC(wa.rc, 0);
    CHECK_RC(wb.rc, 0);
    CHECK(wa.fence > fh && wb.fence > fh && wa.fence != wb.fence);
    CHECK(atomic_load(&g_overlap) == 0);
    fprintf(stderr, "   %s: after the restart: fences %llu then %llu (holder's %llu)\n", g_mode,
            (unsigned long long)(wa.t_grant < wb.t_grant ? wa.fence : wb.fence),
            (unsigned long long)(wa.t_grant < wb.t_grant ? wb.fence : wa.fence), (unsigned long long)fh);
    CHECK(wa.t_grant < wb.t_grant ? wb.fence > wa.fence : wa.fence > wb.fence);
    baton_lock_free(h);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c0);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* ---- semaphore and permits ----------------------------------------------------- */

typedef struct {
    baton_semaphore *s;
    int rc;
    int64_t t_done;
} semw;

static void *semw_main(void *arg)
{
    semw *w = arg;
    w->rc = baton_semaphore_acquire(w->s, 1, 30000);
    w->t_done = tl_now_ms();
    return NULL;
}

static void test_sem_restart(void)
{
    baton_client *c1 = tl_client_open(g_uri), *c2 = tl_client_open(g_uri);
    baton_semaphore *s1 = NULL, *s2 = NULL;
    semw w = { 0 };
    pthread_t th;
    uint64_t av = 99;
    int set = 0;
    int64_t t0;

    CHECK_RC(baton_semaphore_open(&s1, c1, "sr"), 0);
    CHECK_RC(baton_semaphore_open(&s2, c2, "sr"), 0);
    if (!s1 || !s2) return;
    CHECK_RC(baton_semaphore_try_set(s1, 1, &set), 0);
    CHECK_RC(baton_semaphore_acquire(s1, 1, 0), 0);
    w.s = s2;
    pthread_create(&th, NULL, semw_main, &w);
    tl_sleep_ms(300);
    tl_server_restart("postgres", g_dir);
    tl_sleep_ms(1500);
    CHECK(w.t_done == 0);               /* still waiting: the count (0) outlived the restart */
    t0 = tl_now_ms();
    CHECK_RC(baton_semaphore_release(s1, 1), 0);
    pthread_join(th, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   measure: semaphore waiter granted %lld ms after a release made after a restart\n",
            (long long)(w.t_done - t0));
    CHECK_RC(baton_semaphore_available(s1, &av), 0);
    CHECK(av == 0);
    baton_semaphore_free(s1);
    baton_semaphore_free(s2);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_permits_faults(void)
{
    const uint32_t lease = 1500;
    baton_client *c = tl_client_open(g_uri);
    baton_permits *p = NULL;
    char id[BATON_PERMIT_ID_SIZE], id2[BATON_PERMIT_ID_SIZE], ls[16], line[128];
    tl_worker wk;
    uint64_t av = 99;
    int set = 0;
    int64_t t0, el;

    CHECK_RC(baton_permits_open(&p, c, "pf"), 0);
    if (!p) return;
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    /* a SIGKILLed holder's permit comes back when its lease ends */
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_postgres_prims_faults", "--worker", "permit", g_uri, "pf", ls, NULL };
    CHECK(tl_worker_spawn(&wk, argv) == 0);
    CHECK(tl_expect_line(&wk, "GOT ", line, sizeof line, 15000) == 0);
    t0 = tl_now_ms();
    kill(wk.pid, SIGKILL);
    CHECK(WIFSIGNALED(tl_worker_reap(&wk, 10000)));
    CHECK_RC(baton_permits_acquire(p, 3000, 0, id), BATON_ELOCKED);
    CHECK_RC(baton_permits_acquire(p, 3000, 10000, id), 0);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   measure: a SIGKILLed holder's permit came back %lld ms after (lease %u ms)\n",
            (long long)el, lease);
    CHECK(el >= (int64_t)lease - 300 && el < (int64_t)lease + 3000);

    /* a permit outlives a restart: still out, renewable, then it expires */
    tl_server_restart("postgres", g_dir);
    tl_sleep_ms(500);
    CHECK_RC(baton_permits_available(p, &av), 0);
    CHECK(av == 0);
    CHECK_RC(baton_permits_renew(p, id, 1500), 0);
    t0 = tl_now_ms();
    CHECK_RC(baton_permits_acquire(p, 3000, 10000, id2), 0);
    el = tl_now_ms() - t0;
    CHECK(el >= 1200);
    CHECK_RC(baton_permits_release(p, id), BATON_ENOTOWNER);   /* expired */
    CHECK_RC(baton_permits_release(p, id2), 0);
    CHECK_RC(baton_permits_available(p, &av), 0);
    CHECK(av == 1);
    baton_permits_free(p);
    baton_client_close(c);
}

static void run_mode(const char *mode)
{
    g_mode = mode;
    snprintf(g_uri, sizeof g_uri, "postgres://baton:baton-test@127.0.0.1:%d/postgres?mode=%s&table=pf_%s", g_port,
             mode, mode);
    RUN(test_fair_holder_killed);
    RUN(test_fair_waiter_terminated);
    RUN(test_fair_restart);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 6 && !strcmp(argv[1], "--worker")) {
        if (!strcmp(argv[2], "hold")) return worker_hold(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        if (!strcmp(argv[2], "permit")) return worker_permit(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        return 2;
    }
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pg_prims_faults", tmp && *tmp ? tmp : "/tmp");
    tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'", TL_SERVERS_DIR, g_dir, g_dir);
    atexit(cleanup);
    g_port = tl_server_start("postgres", g_dir, NULL);
    run_mode("session");
    run_mode("lease");
    run_mode("row");
    /* semaphores and permits are rows in every mode: once is enough */
    g_mode = "session";
    RUN(test_sem_restart);
    RUN(test_permits_faults);
    return th_finish();
}
