/* PostgreSQL: every engine call ends by its deadline, also against a frozen
 * link; a killed holder connection is reported before anyone else is
 * granted; the schema is set up safely by many processes at once. On a
 * server of its own ($BATON_TEST_TMP/pg_deadlines) and a loopback link that
 * the test freezes (tests/servers/link.sh: socat SIGSTOPped, sockets open,
 * nothing moves):
 *   - session mode, a holder whose link freezes: on_lost by the lease
 *     deadline (the server still holds the lock until the link thaws);
 *   - lease mode, a holder whose link freezes: on_lost by the lease deadline,
 *     before the other client's grant (the renewal returns at its deadline
 *     instead of waiting in PQcancel until the link thaws);
 *   - a waiter (session, row, lease mode) whose link freezes while it waits
 *     3 s: it returns at ~3 s, not when the link thaws;
 *   - a waiter on a paused server (postgres.sh pause) likewise;
 *   - a statement (baton_lock_info) and a client close on a frozen link end
 *     by the I/O timeout, a new client's connect by the connect timeout;
 *   - pg_terminate_backend of a row-mode holder and of a read-write lock
 *     holder: held() is already 0 when the other client is granted;
 *   - 8 processes at once on a brand-new database, in each mode: all succeed.
 * Prints "measure:" lines (how long past its deadline each call returned):
 * docs/postgres-engine.md has them. */
#include <baton.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024], g_link[1100];
static int g_port, g_lport;
static char g_tag[32];

static void cleanup(void) {
    if (g_link[0]) tl_sh("bash '%s/link.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_link);
    if (g_dir[0]) tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_dir);
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A URI to the server, through the link when LINKED, with options QS. */
static const char *uri(char *out, size_t n, int linked, const char *db, const char *qs) {
    snprintf(out, n, "postgres://baton:baton-test@127.0.0.1:%d/%s%s%s", linked ? g_lport : g_port, db,
             *qs ? "?" : "", qs);
    return out;
}

static void link_do(const char *what) { tl_sh("bash '%s/link.sh' %s '%s'", TL_SERVERS_DIR, what, g_link); }

/* One superuser statement; 0 when it worked (or the int of a one-value answer). */
static int su(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int su(const char *fmt, ...) {
    char conninfo[256], sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=baton password=baton-test dbname=postgres",
             g_port);
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

static baton_client *open_opts(const char *u, int connect_ms, int io_ms) {
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_client *c = NULL;
    co.connect_timeout_ms = connect_ms;
    co.io_timeout_ms = io_ms;
    MUST(baton_client_open(&c, u, &co));
    return c;
}

typedef struct {
    atomic_llong at_us;      /* when on_lost ran, 0 = not yet */
    atomic_int n;
} lost_rec;

static void on_lost(baton_lock *l, void *payload) {
    lost_rec *r = payload;
    (void)l;
    long long z = 0;
    atomic_compare_exchange_strong(&r->at_us, &z, (long long)now_us());
    atomic_fetch_add(&r->n, 1);
}

/* Lease mode: the holder's link freezes; its renewal cannot reach the server.
 * The lock must be lost on the holder's side by its lease deadline, before
 * the server's lease ends and another client is granted. */
static void test_lease_frozen_holder(void) {
    char u1[512], u2[512], n[64];
    snprintf(n, sizeof n, "lfreeze-%s", g_tag);
    baton_client *c1 = open_opts(uri(u1, sizeof u1, 1, "postgres", "mode=lease"), 1000, 5000);
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, 0, "postgres", "mode=lease"));
    lost_rec lost;
    atomic_init(&lost.at_us, 0);
    atomic_init(&lost.n, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 3000;
    o.on_lost = on_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    int64_t t0 = now_us();
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    link_do("freeze");
    CHECK_RC(baton_lock_acquire(b, 10000), 0);   /* granted when the server's lease ends (~3 s) */
    int64_t granted = now_us();
    int held_at_grant = baton_lock_held(a);
    /* the lease deadline is 3 s after the claim was sent, less a margin */
    while (!atomic_load(&lost.at_us) && now_us() - t0 < 6000000) tl_sleep_ms(10);
    int64_t lost_at = atomic_load(&lost.at_us);
    fprintf(stderr, "measure: lease holder, frozen link, lease 3000 ms: on_lost at +%lld ms, other grant at "
            "+%lld ms\n", lost_at ? (long long)(lost_at - t0) / 1000 : -1LL, (long long)(granted - t0) / 1000);
    CHECK(lost_at != 0);
    /* held() reads the core's clock: 0 from the lease deadline on, whatever
     * the keeper is doing */
    CHECK(held_at_grant == 0);
    /* on_lost runs on the keeper once the renewal returned at the deadline;
     * between that deadline and the server's lease end there are only the
     * core's 1 % + 2 ms (32 ms here), which a loaded machine's scheduling
     * can eat: the order is asserted with that slack, the time loosely
     * (before the fix it came only when the link thawed) */
    CHECK(lost_at != 0 && lost_at <= granted + 100000);
    CHECK(lost_at != 0 && lost_at - t0 < 3500000);
    CHECK(baton_lock_held(a) == 0);
    link_do("thaw");
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK(atomic_load(&lost.n) == 1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Session mode: the holder's link freezes. Nothing can confirm its
 * connection alive: it is given up by the lease deadline (on_lost, held()
 * 0), though the server still holds the advisory lock for a session it
 * cannot see end. When the link thaws, the connection's close reaches the
 * server and the other client is granted: after the loss, never before. */
static void test_session_frozen_holder(void) {
    char u1[512], u2[512], n[64];
    snprintf(n, sizeof n, "sfreeze-%s", g_tag);
    baton_client *c1 = open_opts(uri(u1, sizeof u1, 1, "postgres", ""), 1000, 5000);
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, 0, "postgres", ""));
    lost_rec lost;
    atomic_init(&lost.at_us, 0);
    atomic_init(&lost.n, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 3000;
    o.on_lost = on_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    int64_t t0 = now_us();
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    link_do("freeze");
    while (!atomic_load(&lost.at_us) && now_us() - t0 < 8000000) tl_sleep_ms(10);
    int64_t lost_at = atomic_load(&lost.at_us);
    fprintf(stderr, "measure: session holder, frozen link, lease 3000 ms: on_lost at +%lld ms\n",
            lost_at ? (long long)(lost_at - t0) / 1000 : -1LL);
    CHECK(lost_at != 0 && lost_at - t0 < 3500000);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);   /* the server still holds it for the frozen session */
    link_do("thaw");
    CHECK_RC(baton_lock_acquire(b, 5000), 0);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK(atomic_load(&lost.n) == 1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Host names go through the resolver with a deadline (dns.c): a name that
 * resolves, a list whose first name does not. */
static void test_host_names(void) {
    char u[600], n[64];
    snprintf(n, sizeof n, "names-%s", g_tag);
    const char *forms[] = { "postgres://baton:baton-test@localhost:%d/postgres",
                            "postgres://baton:baton-test@nonexistent.invalid:%d,localhost:%d/postgres" };
    for (int i = 0; i < 2; i++) {
        snprintf(u, sizeof u, forms[i], g_port, g_port);
        baton_client *c = tl_client_open(u);
        baton_lock *l = NULL;
        CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
        baton_client_close(c);
    }
    baton_client *c = NULL;
    snprintf(u, sizeof u, "postgres://baton:baton-test@nonexistent.invalid:%d/postgres", g_port);
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EUNAVAILABLE);
    CHECK(strstr(tl_lastmsg(), "resolve") != NULL);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t start_us, end_us;
    baton_lock *other;       /* when set: its held() right after the grant */
    int other_held;
} acq;

static void *acq_main(void *arg) {
    acq *a = arg;
    a->start_us = now_us();
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    a->end_us = now_us();
    if (a->other) a->other_held = baton_lock_held(a->other);
    return NULL;
}

/* A waiter whose link freezes while it waits 3 s returns at ~3 s. */
static void waiter_case(const char *mode) {
    char u1[512], u2[512], n[64], qs[64];
    snprintf(n, sizeof n, "wfreeze-%s-%s", mode, g_tag);
    snprintf(qs, sizeof qs, "mode=%s", mode);
    baton_client *c1 = tl_client_open(uri(u1, sizeof u1, 0, "postgres", qs));
    baton_client *c2 = open_opts(uri(u2, sizeof u2, 1, "postgres", qs), 1000, 5000);
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, NULL), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq t = { b, 3000, 0, 0, 0, NULL, 0 };
    pthread_t th;
    pthread_create(&th, NULL, acq_main, &t);
    tl_sleep_ms(500);
    link_do("freeze");
    /* thaw at +12 s at the latest, so a waiter stuck until then still ends */
    int64_t t0 = now_us();
    while (!t.end_us && now_us() - t0 < 11500000) tl_sleep_ms(20);
    link_do("thaw");
    pthread_join(th, NULL);
    long long past = (long long)(t.end_us - t.start_us) / 1000 - 3000;
    fprintf(stderr, "measure: %s-mode waiter, frozen link, wait 3000 ms: returned %lld ms after its deadline "
            "(%s)\n", mode, past, baton_strerror(t.rc));
    CHECK(t.rc == BATON_ETIMEDOUT || t.rc == BATON_EUNAVAILABLE);
    CHECK(past < 1500);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_session_frozen_waiter(void) { waiter_case("session"); }
static void test_row_frozen_waiter(void) { waiter_case("row"); }
static void test_lease_frozen_waiter(void) { waiter_case("lease"); }

/* The server itself is paused (SIGSTOP of the postmaster and every
 * backend) while a session-mode waiter waits 3 s on it: the waiter returns
 * at ~3 s; its cancel request would wait in the paused postmaster's
 * backlog. */
static void test_paused_server_waiter(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "paused-%s", g_tag);
    baton_client *c1 = tl_client_open(uri(u, sizeof u, 0, "postgres", ""));
    baton_client *c2 = open_opts(u, 1000, 5000);
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, NULL), 0);
    CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq t = { b, 3000, 0, 0, 0, NULL, 0 };
    pthread_t th;
    pthread_create(&th, NULL, acq_main, &t);
    tl_sleep_ms(500);
    tl_sh("bash '%s/postgres.sh' pause '%s'", TL_SERVERS_DIR, g_dir);
    int64_t t0 = now_us();
    while (!t.end_us && now_us() - t0 < 11500000) tl_sleep_ms(20);
    tl_sh("bash '%s/postgres.sh' resume '%s'", TL_SERVERS_DIR, g_dir);
    pthread_join(th, NULL);
    long long past = (long long)(t.end_us - t.start_us) / 1000 - 3000;
    fprintf(stderr, "measure: session-mode waiter, server paused, wait 3000 ms: returned %lld ms after its "
            "deadline (%s)\n", past, baton_strerror(t.rc));
    CHECK(t.rc == BATON_ETIMEDOUT || t.rc == BATON_EUNAVAILABLE);
    CHECK(past < 1500);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A statement, a new connection and a close on a frozen link, each against
 * its own deadline (I/O timeout 1000 ms, connect timeout 1000 ms). */
static void test_frozen_calls(void) {
    char u[512], n[64];
    snprintf(n, sizeof n, "calls-%s", g_tag);
    baton_client *c = open_opts(uri(u, sizeof u, 1, "postgres", ""), 1000, 1000);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_lock_info(c, n, &info), 0);   /* a pooled connection, the table known */
    link_do("freeze");
    /* thawed at +15 s whatever happens, so a call stuck until then ends */
    tl_sh("(sleep 15; bash '%s/link.sh' thaw '%s') >/dev/null 2>&1 &", TL_SERVERS_DIR, g_link);
    int64_t t0 = now_us();
    int rc = baton_lock_info(c, n, &info);
    long long q = (long long)(now_us() - t0) / 1000 - 1000;
    fprintf(stderr, "measure: statement (lock_info), frozen link, I/O timeout 1000 ms: returned %lld ms after "
            "its deadline (%s)\n", q, baton_strerror(rc));
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_ETIMEDOUT);
    CHECK(q < 1000);
    /* a new client: its connection's start-up gets no answer */
    baton_client *c3 = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.connect_timeout_ms = 1000;
    t0 = now_us();
    rc = baton_client_open(&c3, u, &co);
    long long k = (long long)(now_us() - t0) / 1000 - 1000;
    fprintf(stderr, "measure: connect, frozen link, connect timeout 1000 ms: returned %lld ms after its deadline "
            "(%s)\n", k, baton_strerror(rc));
    CHECK_RC(rc, BATON_EUNAVAILABLE);
    CHECK(k < 1000);
    if (c3) baton_client_close(c3);
    /* close: releases the held session lock (its unlock cannot be answered) */
    t0 = now_us();
    baton_lock_free(l);
    baton_client_close(c);
    long long z = (long long)(now_us() - t0) / 1000;
    fprintf(stderr, "measure: client close holding a session lock, frozen link, I/O timeout 1000 ms: took %lld ms\n", z);
    CHECK(z < 2500);
    link_do("thaw");
}

/* pg_terminate_backend of the holder's connection: when the waiting client
 * is granted, the holder's held() already answers 0. A 60 s lease: the
 * keeper's check (every 20 s) cannot be what tells it. */
static void terminate_case(int rw) {
    char u1[512], u2[512], n[64];
    snprintf(n, sizeof n, "term-%s-%s", rw ? "rw" : "row", g_tag);
    baton_client *c1 = tl_client_open(uri(u1, sizeof u1, 0, "postgres",
                                          rw ? "application_name=holder9" : "mode=row&application_name=holder9"));
    baton_client *c2 = tl_client_open(uri(u2, sizeof u2, 0, "postgres", rw ? "" : "mode=row"));
    lost_rec lost;
    atomic_init(&lost.at_us, 0);
    atomic_init(&lost.n, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 60000;
    o.on_lost = on_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = NULL, *b = NULL;
    baton_rwlock *ra = NULL, *rb = NULL;
    if (rw) {
        CHECK_RC(baton_rwlock_open(&ra, c1, n, &o), 0);
        CHECK_RC(baton_rwlock_open(&rb, c2, n, NULL), 0);
        a = baton_rwlock_write(ra);
        b = baton_rwlock_read(rb);
    } else {
        CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
        CHECK_RC(baton_lock_open(&b, c2, n, NULL), 0);
    }
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    acq t = { b, 10000, 0, 0, 0, a, -1 };
    pthread_t th;
    pthread_create(&th, NULL, acq_main, &t);
    tl_sleep_ms(400);
    CHECK(t.end_us == 0);
    int64_t t0 = now_us();
    int killed = su("SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE application_name %s",
                    rw ? "= 'holder9'" : "LIKE 'baton %'");
    CHECK(killed == 1);
    pthread_join(th, NULL);
    CHECK_RC(t.rc, 0);
    for (int i = 0; i < 100 && !atomic_load(&lost.at_us); i++) tl_sleep_ms(10);
    int64_t lost_at = atomic_load(&lost.at_us);
    fprintf(stderr, "measure: %s holder terminated: held() %d at the other grant (+%lld ms), on_lost at +%lld ms\n",
            rw ? "rwlock writer" : "row-mode", t.other_held, (long long)(t.end_us - t0) / 1000,
            lost_at ? (long long)(lost_at - t0) / 1000 : -1LL);
    /* The server frees the lock in the instant it ends the session, so the
     * other grant and our watcher's notice race: the contract bounds the
     * window (tens of ms, README item 9), it cannot close it. Under a
     * sanitizer on a loaded machine the notice came 2 ms after the grant. */
    CHECK(t.other_held == 0 || (lost_at && lost_at - t.end_us < 100000));
    CHECK(lost_at != 0 && lost_at - t0 < 1000000);
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK(atomic_load(&lost.n) == 1);
    CHECK_RC(baton_lock_release(b), 0);
    if (rw) {
        baton_rwlock_free(ra);
        baton_rwlock_free(rb);
    } else {
        baton_lock_free(a);
        baton_lock_free(b);
    }
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_row_terminate(void) { terminate_case(0); }
static void test_rw_terminate(void) { terminate_case(1); }

/* Worker of the fresh-database race: waits for START_MS (CLOCK_REALTIME),
 * opens, takes and gives back NAME. Exit 0 when all worked. */
static int race_worker(const char *u, const char *name, long long start_ms) {
    baton_client *c = NULL;
    baton_lock *l = NULL;
    int rc;
    /* connected first, so that every first acquire (which sets the table
     * up) starts within a millisecond or two of the others */
    if (!(rc = baton_client_open(&c, u, NULL)) && !(rc = baton_lock_open(&l, c, name, NULL))) {
        while ((long long)(tl_wall_us() / 1000) < start_ms) {}
        if (!(rc = baton_lock_acquire(l, 30000))) rc = baton_lock_release(l);
    }
    if (rc) {
        fprintf(stderr, "   worker %ld: %s: %s\n", (long)getpid(), baton_strerror(rc), tl_lastmsg());
        return 1;
    }
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* 8 processes on a brand-new database at once, each mode (three rounds each):
 * the first use creates the table (and row mode's sequence) concurrently. */
static void test_fresh_database_race(void) {
    static const char *const modes[] = { "session", "lease", "row" };
    for (int m = 0; m < 3; m++) {
        for (int round = 0; round < 3; round++) {
            char db[64], u[512], qs[32], start[32];
            pid_t pids[8];
            int ok = 0;
            snprintf(db, sizeof db, "fresh_%s_%s_%d", g_tag, modes[m], round);
            CHECK(su("CREATE DATABASE %s", db) == 0);
            snprintf(qs, sizeof qs, "mode=%s", modes[m]);
            uri(u, sizeof u, 0, db, qs);
            snprintf(start, sizeof start, "%lld", (long long)(tl_wall_us() / 1000) + 1500);
            for (int i = 0; i < 8; i++) {
                char *argv[] = { "test_postgres_deadlines", "race", u, "fresh", start, NULL };
                pids[i] = tl_spawn_self(argv, NULL);
            }
            for (int i = 0; i < 8; i++) {
                int st = 0;
                if (pids[i] > 0 && waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0) ok++;
            }
            fprintf(stderr, "   %s round %d: %d of 8 succeeded\n", modes[m], round, ok);
            CHECK(ok == 8);
        }
    }
}

static int start_link(void) {
    char cmd[3000], out[64] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/link.sh' start '%s' %d", TL_SERVERS_DIR, g_link, g_port);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    if (!fgets(out, sizeof out, p)) out[0] = 0;
    pclose(p);
    return atoi(out);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "race")) return race_worker(argv[2], argv[3], atoll(argv[4]));
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pg_deadlines", tmp && *tmp ? tmp : "/tmp");
    snprintf(g_link, sizeof g_link, "%s/link", g_dir);
    tl_sh("bash '%s/link.sh' stop '%s' >/dev/null 2>&1; bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'",
          TL_SERVERS_DIR, g_link, TL_SERVERS_DIR, g_dir, g_dir);
    atexit(cleanup);
    g_port = tl_server_start("postgres", g_dir, NULL);
    if (tl_sh("command -v socat >/dev/null") != 0) tl_skip("socat is not installed (scripts/install-deps.sh)", 1);
    g_lport = start_link();
    if (g_lport <= 0) {
        fprintf(stderr, "FATAL: link.sh start failed\n");
        return 1;
    }
    snprintf(g_tag, sizeof g_tag, "%ld", (long)getpid());

    const char *only = argc > 1 ? argv[1] : NULL;
#define RUN1(fn) do { if (!only || strstr(#fn, only)) RUN(fn); } while (0)
    RUN1(test_fresh_database_race);
    RUN1(test_row_terminate);
    RUN1(test_rw_terminate);
    RUN1(test_lease_frozen_holder);
    RUN1(test_session_frozen_holder);
    RUN1(test_session_frozen_waiter);
    RUN1(test_row_frozen_waiter);
    RUN1(test_lease_frozen_waiter);
    RUN1(test_paused_server_waiter);
    RUN1(test_frozen_calls);
    RUN1(test_host_names);
    return th_finish();
}
