/* PostgreSQL faults and bad input, on a server of its own (tests/servers/postgres.sh
 * in $BATON_TEST_TMP/pg_faults: it terminates backends, restarts the server and
 * adds roles):
 *   - session mode: pg_terminate_backend of the holder's connection → on_lost
 *     once, release says LOST, another client gets it with a higher fence;
 *   - lease mode: the same termination is harmless (no connection holds the
 *     lock); a server restart under a held lease and a waiting client;
 *   - wrong password → BATON_EAUTH; unreachable (closed port, a silent
 *     listener) → BATON_EUNAVAILABLE within the connect timeout;
 *   - a table of another shape → BATON_EPROTO naming the column; a role that
 *     may not create the table → BATON_EAUTH with the DDL; the same role
 *     with the documented least-privilege grants locks in both modes.
 * The superuser side (terminations, roles, tables) uses libpq directly. */
#include <baton.h>

#include <libpq-fe.h>
#include <netinet/in.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static int g_port;
static char g_tag[32];

static void cleanup(void) {
    if (g_dir[0]) tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_dir);
}

/* A baton URI as USER:PASS with extra options QS ("" for none). */
static const char *uri(char *out, size_t n, const char *user, const char *pass, const char *qs) {
    snprintf(out, n, "postgres://%s:%s@127.0.0.1:%d/postgres%s%s", user, pass, g_port, *qs ? "?" : "", qs);
    return out;
}

/* One superuser statement; 0 when it worked. */
static int su(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int su(const char *fmt, ...) {
    char conninfo[256], sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    snprintf(conninfo, sizeof conninfo,
             "host=127.0.0.1 port=%d user=baton password=baton-test dbname=postgres", g_port);
    PGconn *c = PQconnectdb(conninfo);
    int rc = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(r);
        rc = (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) ? 0 : -1;
        if (rc) fprintf(stderr, "   su(%s): %s", sql, PQresultErrorMessage(r));
        else if (st == PGRES_TUPLES_OK && PQntuples(r) == 1 && PQnfields(r) == 1) rc = atoi(PQgetvalue(r, 0, 0));
        PQclear(r);
    } else {
        fprintf(stderr, "   su: %s", PQerrorMessage(c));
    }
    PQfinish(c);
    return rc;
}

/* Session and row modes: the holder's connection is terminated by a DBA.
 * LEASE_MS sets how often the keeper checks the connection (a third of it);
 * with a long one, only the session mode's watcher of held connections can
 * tell the holder within the wait below. */
static void terminate_case(int row, uint32_t lease_ms) {
    char u1[512], u2[512], n[64];
    snprintf(n, sizeof n, "term-%s-%d-%u", g_tag, row, lease_ms);
    baton_client *c1 = tl_client_open(uri(u1, sizeof u1, "baton", "baton-test",
                                   row ? "mode=row&application_name=holder1" : "application_name=holder1"));
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, "baton", "baton-test", row ? "mode=row" : ""));
    atomic_int lost;
    atomic_init(&lost, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    CHECK(f1 > 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    /* only the connection that holds the advisory lock, or the row (its
     * transaction renames it "baton <fence> ...") */
    int killed = row ? su("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE "
                          "state = 'idle in transaction' AND application_name LIKE 'baton %%'")
                     : su("SELECT count(pg_terminate_backend(l.pid))::int FROM pg_locks l JOIN pg_stat_activity a "
                          "USING (pid) WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'holder1'");
    CHECK(killed == 1);
    int64_t t0 = tl_now_ms();
    while (atomic_load(&lost) == 0 && tl_now_ms() - t0 < 5000) tl_sleep_ms(10);
    CHECK(atomic_load(&lost) == 1);
    /* the keeper alone: a third of the lease; the watcher: about at once */
    CHECK(tl_now_ms() - t0 < (lease_ms > 3000 ? 5000 : 1500));
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_acquire(b, 2000), 0);
    CHECK(baton_lock_fence(b) > f1);
    tl_sleep_ms(700);
    CHECK(atomic_load(&lost) == 1);   /* once */
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    /* the stale handle works again once B lets go, with a higher fence still */
    uint64_t fb = baton_lock_fence(b);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(a, 2000), 0);
    CHECK(baton_lock_fence(a) > fb);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_session_terminate(void) { terminate_case(0, 900); }
static void test_row_terminate(void) { terminate_case(1, 900); }
/* a 60 s lease: the keeper checks every 20 s, the watcher at once */
static void test_session_terminate_watched(void) { terminate_case(0, 60000); }

/* Lease mode: the lock is a row, not a connection; every connection of the
 * holder is terminated and it still holds, renews and releases. */
static void test_lease_survives_terminate(void) {
    char u1[512], u2[512], n[64];
    snprintf(n, sizeof n, "lterm-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u1, sizeof u1, "baton", "baton-test", "mode=lease&application_name=holder2"));
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, "baton", "baton-test", "mode=lease"));
    atomic_int lost;
    atomic_init(&lost, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 1500;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    for (int i = 0; i < 3; i++) {
        su("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name = 'holder2'");
        tl_sleep_ms(1000);
    }
    CHECK(atomic_load(&lost) == 0);
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    atomic_int done;
} acq;

static void *acq_main(void *arg) {
    acq *a = arg;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    atomic_store(&a->done, 1);
    return NULL;
}

/* Row mode: a waiter's fence is drawn after it has the row, not before.
 * W's grant statement starts waiting behind H; its backend is stopped
 * (SIGSTOP) while H's transaction is aborted (terminated), so X finds the
 * row free and is granted a fence; X's transaction is aborted too, then W's
 * backend runs on and W is granted. W's fence must be above X's: a fence
 * computed before the wait (the UPDATE's SET evaluated on the row version
 * read before waiting, kept when the versions in between were rolled back)
 * went back below X's (issue: "fence went back" in check-faults'
 * postgres-row-link-freeze row, where X's abort was its frozen link's end). */
static void test_row_fence_after_wait(void) {
    char u1[512], u2[512], u3[512], n[64];
    snprintf(n, sizeof n, "rowfence-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u1, sizeof u1, "baton", "baton-test", "mode=row"));
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, "baton", "baton-test", "mode=row&application_name=rf-waiter"));
    baton_client *c3 = tl_client_open(uri(u3, sizeof u3, "baton", "baton-test", "mode=row"));
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 60000;          /* only the statements below end transactions */
    baton_lock *h = NULL, *w = NULL, *x = NULL;
    CHECK_RC(baton_lock_open(&h, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&w, c2, n, &o), 0);
    CHECK_RC(baton_lock_open(&x, c3, n, &o), 0);
    CHECK_RC(baton_lock_acquire(h, 0), 0);
    uint64_t fh = baton_lock_fence(h);

    acq a = { .l = w, .wait_ms = 20000 };
    atomic_init(&a.done, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, acq_main, &a) == 0);
    /* W's backend, once it waits for the row */
    int pid = 0;
    for (int i = 0; i < 500 && pid <= 0; i++) {
        pid = su("SELECT coalesce(max(pid), 0)::int FROM pg_stat_activity WHERE application_name = 'rf-waiter' "
                 "AND state = 'active' AND wait_event_type = 'Lock'");
        if (pid <= 0) tl_sleep_ms(10);
    }
    CHECK(pid > 0);
    int stopped = pid > 0 && kill(pid, SIGSTOP) == 0;
    if (pid > 0 && !stopped) printf("   (cannot stop the server's backend %d: %s; case skipped)\n", pid, strerror(errno));
    if (stopped) {
        /* H's transaction rolled back; X finds the row free */
        CHECK(su("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE "
                 "state = 'idle in transaction' AND application_name LIKE 'baton %%'") == 1);
        tl_sleep_ms(100);
        int rx = baton_lock_acquire(x, 3000);
        uint64_t fx = rx == 0 ? baton_lock_fence(x) : 0;
        printf("   H fence %llu, X: rc %d fence %llu\n", (unsigned long long)fh, rx, (unsigned long long)fx);
        if (rx == 0) {
            CHECK(fx > fh);
            /* X's transaction rolled back too */
            CHECK(su("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE "
                     "state = 'idle in transaction' AND application_name LIKE 'baton %%'") == 1);
        }
        kill(pid, SIGCONT);
        pthread_join(t, NULL);
        CHECK_RC(a.rc, 0);
        uint64_t fw = baton_lock_fence(w);
        printf("   W fence %llu\n", (unsigned long long)fw);
        CHECK(fw > fh);
        CHECK(fw > fx);
        if (a.rc == 0) CHECK_RC(baton_lock_release(w), 0);
        baton_lock_release(x);
    } else {
        baton_lock_release(h);
        pthread_join(t, NULL);
        if (a.rc == 0) baton_lock_release(w);
    }
    baton_lock_release(h);
    baton_lock_free(h);
    baton_lock_free(w);
    baton_lock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* Lease mode: the server restarts while A holds and B waits; A keeps it
 * (renewals reconnect), B gets it when A releases, fence higher. */
static void test_lease_server_restart(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "restart-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u, sizeof u, "baton", "baton-test", "mode=lease"));
    baton_client *c2 = tl_client_open(u);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 4000;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    acq t = { b, 20000, 0, 0 };
    pthread_t th;
    pthread_create(&th, NULL, acq_main, &t);
    tl_sleep_ms(300);
    tl_server_restart("postgres", g_dir);
    tl_sleep_ms(2500);           /* past a renewal period on the new server */
    CHECK(!atomic_load(&t.done));
    CHECK(baton_lock_held(a) == 1);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    pthread_join(th, NULL);
    CHECK_RC(t.rc, 0);
    CHECK(tl_now_ms() - t0 < 1500);  /* woken by the NOTIFY (the listener reconnected), not a lease */
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Session mode: the server restarts while A holds and B waits: A is told
 * LOST (its session is gone), B's wait goes on and gets it, fence higher. */
static void test_session_server_restart(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "srestart-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u, sizeof u, "baton", "baton-test", ""));
    baton_client *c2 = tl_client_open(u);
    atomic_int lost;
    atomic_init(&lost, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 900;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    acq t = { b, 20000, 0, 0 };
    pthread_t th;
    pthread_create(&th, NULL, acq_main, &t);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    tl_server_restart("postgres", g_dir);
    pthread_join(th, NULL);
    CHECK_RC(t.rc, 0);
    CHECK(tl_now_ms() - t0 < 5000);
    CHECK(baton_lock_fence(b) > f1);
    while (atomic_load(&lost) == 0 && tl_now_ms() - t0 < 5000) tl_sleep_ms(10);
    CHECK(atomic_load(&lost) == 1);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Lease mode: a waiter is woken by the release's NOTIFY, long before its
 * once-a-second re-check or the holder's 30 s lease would. */
static void test_lease_notify_wakes(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "notify-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u, sizeof u, "baton", "baton-test", "mode=lease"));
    baton_client *c2 = tl_client_open(u);
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, NULL), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    for (int round = 0; round < 3; round++) {
        CHECK_RC(baton_lock_acquire(a, 0), 0);
        acq t = { b, 20000, 0, 0 };
        pthread_t th;
        pthread_create(&th, NULL, acq_main, &t);
        tl_sleep_ms(1300);          /* past the waiter's first re-check: it is parked */
        CHECK(!atomic_load(&t.done));
        int64_t t0 = tl_now_ms();
        CHECK_RC(baton_lock_release(a), 0);
        pthread_join(th, NULL);
        int64_t el = tl_now_ms() - t0;
        CHECK_RC(t.rc, 0);
        CHECK(el < 400);
        if (el >= 400) fprintf(stderr, "   round %d: woken after %lld ms\n", round, (long long)el);
        CHECK_RC(baton_lock_release(b), 0);
    }
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_wrong_password(void) {
    char u[512];
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri(u, sizeof u, "baton", "wrong", ""), NULL), BATON_EAUTH);
    CHECK(c == NULL);
    CHECK(strstr(tl_lastmsg(), "wrong") == NULL);   /* never echo the password */
    /* baton_client_options.password overrides the URI's */
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.password = "baton-test";
    CHECK_RC(baton_client_open(&c, u, &co), 0);
    baton_client_close(c);
    /* PGPASSWORD (libpq's environment) when the URI has none */
    char nopw[512];
    snprintf(nopw, sizeof nopw, "postgres://baton@127.0.0.1:%d/postgres", g_port);
    setenv("PGPASSWORD", "baton-test", 1);
    CHECK_RC(baton_client_open(&c, nopw, NULL), 0);
    baton_client_close(c);
    setenv("PGPASSWORD", "nope", 1);
    CHECK_RC(baton_client_open(&c, nopw, NULL), BATON_EAUTH);
    unsetenv("PGPASSWORD");
    /* TLS options reach libpq: this server has no TLS */
    char tls[600];
    snprintf(tls, sizeof tls, "%s?sslmode=require", u);
    CHECK_RC(baton_client_open(&c, tls, &co), BATON_EUNAVAILABLE);
    CHECK(strstr(tl_lastmsg(), "SSL") != NULL);
    snprintf(tls, sizeof tls, "%s?sslmode=disable", u);
    CHECK_RC(baton_client_open(&c, tls, &co), 0);
    baton_client_close(c);
    /* ?passfile= */
    char pf[1200];
    snprintf(pf, sizeof pf, "%s/pgpass", g_dir);
    FILE *f = fopen(pf, "w");
    if (f) {
        fprintf(f, "127.0.0.1:%d:*:baton:baton-test\n", g_port);
        fclose(f);
        chmod(pf, 0600);
        char withpf[2400];
        snprintf(withpf, sizeof withpf, "%s?passfile=%s", nopw, pf);
        CHECK_RC(baton_client_open(&c, withpf, NULL), 0);
        baton_client_close(c);
    }
}

/* A listener that never answers (accepts nothing; the kernel completes the
 * handshake into the backlog). */
static int silent_listener(int *port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16) ||
        getsockname(s, (struct sockaddr *)&a, &al))
        return -1;
    *port = ntohs(a.sin_port);
    return s;
}

static void test_unreachable(void) {
    char u[512];
    baton_client *c = NULL;
    /* a closed port: refused at once */
    int s = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    bind(s, (struct sockaddr *)&a, sizeof a);
    getsockname(s, (struct sockaddr *)&a, &al);
    port = ntohs(a.sin_port);
    close(s);
    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres", port);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 1000);
    /* a server that never answers: given up at the connect timeout */
    int ls = silent_listener(&port);
    CHECK(ls >= 0);
    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres?connect_timeout_ms=400", port);
    t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EUNAVAILABLE);
    int64_t took = tl_now_ms() - t0;
    CHECK(took >= 350 && took < 1400);
    if (took >= 1400) fprintf(stderr, "   took %lld ms\n", (long long)took);
    /* baton_client_options.connect_timeout_ms likewise */
    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres", port);
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.connect_timeout_ms = 300;
    t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, u, &co), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 1300);
    if (ls >= 0) close(ls);
}

static void test_bad_shape(void) {
    char u[512], n[64], qs[128];
    snprintf(n, sizeof n, "shape-%s", g_tag);
    /* fence is an integer: a counter that could wrap */
    CHECK(su("CREATE TABLE shape_int_%s (name text PRIMARY KEY, key bigint, fence integer, owner text, "
             "holder text, lease_until timestamptz, acquired_at timestamptz)", g_tag) == 0);
    snprintf(qs, sizeof qs, "table=shape_int_%s", g_tag);
    baton_client *c = tl_client_open(uri(u, sizeof u, "baton", "baton-test", qs));
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EPROTO);
    CHECK(strstr(tl_lastmsg(), "\"fence\"") != NULL);
    fprintf(stderr, "   said: %s\n", tl_lastmsg());
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_lock_info(c, n, &info), BATON_EPROTO);
    baton_lock_free(l);
    baton_client_close(c);
    /* lease_until missing, in lease mode */
    CHECK(su("CREATE TABLE shape_miss_%s (name text PRIMARY KEY, key bigint, fence bigint, owner text, "
             "holder text, acquired_at timestamptz)", g_tag) == 0);
    snprintf(qs, sizeof qs, "mode=lease&table=shape_miss_%s", g_tag);
    c = tl_client_open(uri(u, sizeof u, "baton", "baton-test", qs));
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EPROTO);
    CHECK(strstr(tl_lastmsg(), "\"lease_until\"") != NULL);
    baton_lock_free(l);
    baton_client_close(c);
    /* no unique index on name */
    CHECK(su("CREATE TABLE shape_nopk_%s (name text, key bigint, fence bigint, owner text, "
             "holder text, lease_until timestamptz, acquired_at timestamptz)", g_tag) == 0);
    snprintf(qs, sizeof qs, "table=shape_nopk_%s", g_tag);
    c = tl_client_open(uri(u, sizeof u, "baton", "baton-test", qs));
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EPROTO);
    CHECK(strstr(tl_lastmsg(), "unique") != NULL);
    baton_lock_free(l);
    baton_client_close(c);
}

/* A role without CREATE on the schema: told the DDL; with the documented
 * grants it locks in both modes. */
static void test_privileges(void) {
    char u[512], n[64], qs[128], role[64];
    snprintf(n, sizeof n, "priv-%s", g_tag);
    snprintf(role, sizeof role, "lowpriv_%s", g_tag);
    CHECK(su("CREATE ROLE %s LOGIN PASSWORD 'low-pw'", role) == 0);
    snprintf(qs, sizeof qs, "table=priv_%s", g_tag);
    baton_client *c = tl_client_open(uri(u, sizeof u, role, "low-pw", qs));
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EAUTH);
    CHECK(strstr(tl_lastmsg(), "CREATE TABLE") != NULL && strstr(tl_lastmsg(), "GRANT") != NULL);
    fprintf(stderr, "   said: %s\n", tl_lastmsg());
    baton_lock_free(l);
    baton_client_close(c);
    /* the DBA runs the DDL of docs/postgres-engine.md */
    CHECK(su("CREATE TABLE priv_%s (name text PRIMARY KEY, key bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, "
             "owner text, holder text, lease_until timestamptz, acquired_at timestamptz); "
             "GRANT SELECT, INSERT, UPDATE ON priv_%s TO %s", g_tag, g_tag, role) == 0);
    /* row mode also needs its fence sequence */
    snprintf(qs, sizeof qs, "table=priv_%s&mode=row", g_tag);
    c = tl_client_open(uri(u, sizeof u, role, "low-pw", qs));
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EAUTH);
    CHECK(strstr(tl_lastmsg(), "CREATE SEQUENCE") != NULL && strstr(tl_lastmsg(), "GRANT USAGE") != NULL);
    fprintf(stderr, "   said: %s\n", tl_lastmsg());
    baton_lock_free(l);
    baton_client_close(c);
    CHECK(su("CREATE SEQUENCE priv_%s_fence; GRANT USAGE ON SEQUENCE priv_%s_fence TO %s", g_tag, g_tag, role) == 0);
    for (int mode = 0; mode < 3; mode++) {
        snprintf(qs, sizeof qs, "table=priv_%s%s", g_tag, mode == 1 ? "&mode=lease" : mode == 2 ? "&mode=row" : "");
        c = tl_client_open(uri(u, sizeof u, role, "low-pw", qs));
        CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        if (baton_lock_fence(l) == 0) fprintf(stderr, "   mode %d: %s\n", mode, tl_lastmsg());
        baton_lockinfo info = BATON_LOCK_INFO_INIT;
        CHECK_RC(baton_lock_info(c, n, &info), 0);
        CHECK(info.held == 1 && info.fence == baton_lock_fence(l));
        CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
        baton_client_close(c);
    }
}

/* Two names with one key would share one advisory lock; the key is the
 * documented hash: check it against the server's own SHA-256. */
static void test_key_is_documented_hash(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "keyhash-%s", g_tag);
    baton_client *c = tl_client_open(uri(u, sizeof u, "baton", "baton-test", ""));
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    int same = su("SELECT count(*)::int FROM baton_locks WHERE name = '%s' AND key = "
                  "('x' || encode(substr(sha256(convert_to('%s', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint "
                  "AND EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                  "AND ((classid::bigint << 32) | objid::bigint) = key)", n, n);
    CHECK(same == 1);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

int main(void) {
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pg_faults", tmp && *tmp ? tmp : "/tmp");
    tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'", TL_SERVERS_DIR, g_dir, g_dir);
    atexit(cleanup);
    g_port = tl_server_start("postgres", g_dir, NULL);
    snprintf(g_tag, sizeof g_tag, "%ld", (long)getpid());

    RUN(test_session_terminate);
    RUN(test_session_terminate_watched);
    RUN(test_row_terminate);
    RUN(test_row_fence_after_wait);
    RUN(test_lease_survives_terminate);
    RUN(test_lease_server_restart);
    RUN(test_session_server_restart);
    RUN(test_lease_notify_wakes);
    RUN(test_wrong_password);
    RUN(test_unreachable);
    RUN(test_bad_shape);
    RUN(test_privileges);
    RUN(test_key_is_documented_hash);
    return th_finish();
}
