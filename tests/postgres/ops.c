/* engine_ops on PostgreSQL (what `baton bench` counts a handoff with), on a
 * server of its own (tests/servers/postgres.sh in $BATON_TEST_TMP/pg_ops: the
 * test restarts it to preload pg_stat_statements, which the shared fixture
 * must not see):
 *   - without pg_stat_statements: the database's xact_commit/xact_rollback,
 *     growing with the locks taken (the server publishes them late: polled,
 *     with a generous bound);
 *   - with it: statements per first keyword, exact at once: two reads with
 *     nothing between them agree (our own reads are left out), and N pairs
 *     add exactly N grants and N releases, in session and lease modes;
 *   - the statements of a lock cycle are prepared once per connection
 *     (counted by the server's plans), and not with ?prepare=0. */
#include <baton.h>
#include <baton/sys/stats.h>

#include <libpq-fe.h>
#include <string.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"
#include "../common/opcounts.h"

#define PAIRS 10

static char g_dir[1024];
static int g_port;

static void cleanup(void) {
    if (g_dir[0]) tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_dir);
}

/* One superuser statement: -1 on error, else the integer of a one-cell
 * answer, else 0. */
static int su(const char *sql) {
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

static baton_client *open_ok(const char *qs) {
    char u[256];
    baton_client *c = NULL;
    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres%s", g_port, qs);
    if (baton_client_open(&c, u, NULL)) {
        fprintf(stderr, "FAIL: open %s: %s\n", u, tl_lastmsg());
        exit(1);
    }
    return c;
}

static void pairs(baton_client *c, const char *name, int n) {
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, name, NULL), 0);
    for (int i = 0; i < n; i++) {
        CHECK_RC(baton_lock_acquire(l, 2000), 0);
        CHECK_RC(baton_lock_release(l), 0);
    }
    baton_lock_free(l);
}

/* No pg_stat_statements: the transaction counts, which grow with the pairs
 * (each statement is a transaction), once the backends have published them. */
static void test_xact_counts(void) {
    baton_client *c = open_ok("");
    tl_ops a, b;
    CHECK_RC(tl_ops_read(c, &a), 0);
    CHECK(tl_ops_get(&a, "xact_commit") > 0);
    CHECK(tl_ops_get(&a, "xact_rollback") >= 0);
    CHECK(a.k == 2);
    pairs(c, "ops-xact", PAIRS);
    /* a backend publishes its counts at most once a second, an idle one
     * within about 10 s: a generous bound, not a timing assertion */
    int64_t t0 = tl_now_ms();
    do {
        tl_sleep_ms(200);
        CHECK_RC(tl_ops_read(c, &b), 0);
    } while (tl_ops_get(&b, "xact_commit") < tl_ops_get(&a, "xact_commit") + 2 * PAIRS && tl_now_ms() - t0 < 30000);
    CHECK(tl_ops_get(&b, "xact_commit") >= tl_ops_get(&a, "xact_commit") + 2 * PAIRS);
    baton_client_close(c);
}

/* pg_stat_statements: exact counts per statement kind. */
static void test_statement_counts(void) {
    CHECK(su("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'") == 0);
    /* for test_prepared: count plans, and plan a prepared statement once */
    CHECK(su("ALTER SYSTEM SET plan_cache_mode = force_generic_plan") == 0);
    tl_server_restart("postgres", g_dir);
    CHECK(su("CREATE EXTENSION IF NOT EXISTS pg_stat_statements") == 0);
    /* known once the library is loaded; new connections see it after the reload */
    CHECK(su("ALTER SYSTEM SET pg_stat_statements.track_planning = on") == 0);
    CHECK(su("SELECT pg_reload_conf()::int") == 1);
    tl_sleep_ms(300);

    baton_client *s = open_ok(""), *l = open_ok("?mode=lease");
    tl_ops a, b, c, d;
    pairs(s, "ops-warm", 1);        /* the table is checked once per client: not in the counts below */
    pairs(l, "ops-warm-l", 1);
    CHECK_RC(tl_ops_read(s, &a), 0);
    CHECK(tl_ops_get(&a, "sql|with") > 0);
    CHECK(tl_ops_get(&a, "xact_commit") == -1);
    CHECK_RC(tl_ops_read(s, &b), 0);
    /* nothing ran between them: our own reads are not counted */
    CHECK(tl_ops_total(&a) == tl_ops_total(&b));
    CHECK(a.calls == b.calls);

    pairs(s, "ops-session", PAIRS);
    CHECK_RC(tl_ops_read(s, &c), 0);
    /* session mode: the grant (WITH ... pg_advisory_lock ... INSERT) and
     * the release (SELECT pg_advisory_unlock), once each per pair */
    CHECK(tl_ops_get(&c, "sql|with") - tl_ops_get(&b, "sql|with") == PAIRS);
    CHECK(tl_ops_get(&c, "sql|select") - tl_ops_get(&b, "sql|select") == PAIRS);
    CHECK(tl_ops_total(&c) - tl_ops_total(&b) == 2 * PAIRS);

    pairs(l, "ops-lease", PAIRS);
    CHECK_RC(tl_ops_read(l, &d), 0);
    /* lease mode: the claim (WITH c AS (INSERT ...)) and the release (UPDATE) */
    CHECK(tl_ops_get(&d, "sql|with") - tl_ops_get(&c, "sql|with") == PAIRS);
    CHECK(tl_ops_get(&d, "sql|update") - (tl_ops_get(&c, "sql|update") < 0 ? 0 : tl_ops_get(&c, "sql|update")) == PAIRS);
    CHECK(tl_ops_total(&d) - tl_ops_total(&c) == 2 * PAIRS);
    baton_client_close(s);
    baton_client_close(l);
}

/* The session grant's plans so far (pg_stat_statements.track_planning). */
static int grant_plans(void) {
    return su("SELECT coalesce(sum(plans), 0)::int FROM pg_stat_statements "
              "WHERE query LIKE 'WITH g AS (SELECT pg_advisory_lock(%'");
}

/* The statements of a lock cycle are prepared once per connection: PAIRS
 * more pairs on a warm client plan the grant no more (a generic plan, kept);
 * with ?prepare=0 each one is planned again. A bad value is refused. */
static void test_prepared(void) {
    baton_client *p = open_ok(""), *t = open_ok("?prepare=0"), *bad = NULL;
    char u[256];
    int before, after;
    pairs(p, "ops-prep", 1);
    before = grant_plans();
    CHECK(before > 0);
    pairs(p, "ops-prep", PAIRS);
    after = grant_plans();
    CHECK(after == before);
    pairs(t, "ops-text", 1);
    before = grant_plans();
    pairs(t, "ops-text", PAIRS);
    after = grant_plans();
    CHECK(after - before == PAIRS);
    baton_client_close(p);
    baton_client_close(t);
    snprintf(u, sizeof u, "postgres://baton:baton-test@127.0.0.1:%d/postgres?prepare=maybe", g_port);
    CHECK_RC(baton_client_open(&bad, u, NULL), BATON_EINVAL);
    CHECK(strstr(tl_lastmsg(), "prepare") != NULL);
    CHECK(bad == NULL);
}

int main(void) {
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pg_ops", tmp && *tmp ? tmp : "/tmp");
    tl_sh("bash '%s/postgres.sh' stop '%s' >/dev/null 2>&1; rm -rf '%s'", TL_SERVERS_DIR, g_dir, g_dir);
    atexit(cleanup);
    g_port = tl_server_start("postgres", g_dir, NULL);

    RUN(test_xact_counts);
    RUN(test_statement_counts);
    RUN(test_prepared);
    return th_finish();
}
