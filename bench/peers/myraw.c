/*
 * The round-trip bound of baton's mysql:// engine: one Connector/C
 * (libmariadb) connection over TCP with a password, as baton connects, and
 * per lock/unlock pair exactly the statements baton's engine sends, as text
 * (mysql_real_query, baton's protocol), nothing else:
 *
 *   session  the grant  INSERT ... SELECT ... FROM DUAL WHERE GET_LOCK(key, 5.000) = 1
 *                       ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), ...
 *            the release SELECT RELEASE_LOCK(key)
 *   lease    the claim  INSERT ... VALUES (...) ON DUPLICATE KEY UPDATE fence =
 *                       IF(@baton_ok := (<the lease is free or ours>), LAST_INSERT_ID(fence + 1), fence), ...
 *            the release UPDATE ... SET owner = NULL, ... WHERE name = .. AND owner = .. AND fence = <the claim's>
 *
 * (src/backends/mysql/session.c grant_sql and my_session_release, lease.c
 * claim and my_lock_release; 5.000 is the GET_LOCK chunk of baton's default
 * 5 s I/O timeout.) Strings go as hex literals, as baton sends them; the
 * name, owner and holder have the lengths baton's have. The table is
 * baton's (run baton on the server first: it creates it).
 *
 * usage: myraw HOST PORT USER DB session|lease N [NAME]   (the password in $MYSQL_PWD)
 * prints one JSON line: pairs/s over the N pairs (the connection not timed).
 */
#include <mysql.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* X'<hex>' of S into OUT (room for 2 * strlen(S) + 4). */
static char *hexlit(const char *s, char *out)
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    *o++ = 'X';
    *o++ = '\'';
    for (; *s; s++) {
        *o++ = hex[(unsigned char)*s >> 4];
        *o++ = hex[(unsigned char)*s & 15];
    }
    *o++ = '\'';
    *o = 0;
    return out;
}

static int fail(MYSQL *c, const char *what)
{
    fprintf(stderr, "myraw: %s: %s (error %u)\n", what, mysql_error(c), mysql_errno(c));
    return 1;
}

/* One statement; its result set (if any) read and freed, as baton does. */
static int run(MYSQL *c, const char *sql, size_t len, char *cell, size_t cn)
{
    MYSQL_RES *r;
    if (mysql_real_query(c, sql, len)) return fail(c, "statement failed");
    if (mysql_field_count(c) > 0) {
        MYSQL_ROW row;
        if (!(r = mysql_store_result(c))) return fail(c, "cannot read the result");
        if (cell && (row = mysql_fetch_row(r)) && row[0]) snprintf(cell, cn, "%s", row[0]);
        mysql_free_result(r);
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* baton's owner is 32 hex digits, its holder "host pid tid" */
    const char *owner = "0f1e2d3c4b5a69788796a5b4c3d2e1f0", *holder = "bench-host 12345 140234567890123";
    char name[160], ename[330], eowner[80], eholder[80], grant[2048], release[1024], cell[32];
    unsigned int ct = 2, rt = 6;    /* baton's defaults: connect 2 s, socket timeout I/O 5 s + 1 */
    const char *pw = getenv("MYSQL_PWD");
    double t0, dt, c0;
    int session, n, glen = 0, rlen = 0;
    MYSQL *c;

    if (argc < 7 || (strcmp(argv[5], "session") && strcmp(argv[5], "lease")) || (n = atoi(argv[6])) < 1) {
        fprintf(stderr, "usage: myraw HOST PORT USER DB session|lease N [NAME]  (password in $MYSQL_PWD)\n");
        return 2;
    }
    session = !strcmp(argv[5], "session");
    snprintf(name, sizeof name, "%s", argc > 7 ? argv[7] : session ? "myraw-session" : "myraw-lease");
    hexlit(name, ename);
    hexlit(owner, eowner);
    hexlit(holder, eholder);
    if (!(c = mysql_init(NULL))) return 1;
    mysql_optionsv(c, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(c, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_optionsv(c, MYSQL_OPT_WRITE_TIMEOUT, &rt);
    if (!mysql_real_connect(c, argv[1], argv[3], pw, argv[4], (unsigned)atoi(argv[2]), NULL, 0))
        return fail(c, "cannot connect");

    if (session) {
        /* the key is the name itself (at most 64 bytes): the same hex literal */
        glen = snprintf(grant, sizeof grant,
                        "INSERT INTO `baton_locks` (name, fence, owner, holder, acquired_at, lease_until) "
                        "SELECT %s, LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6), NULL FROM DUAL "
                        "WHERE GET_LOCK(%s, %s) = 1 "
                        "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), owner = VALUES(owner), "
                        "holder = VALUES(holder), acquired_at = VALUES(acquired_at), lease_until = NULL",
                        ename, eowner, eholder, ename, "5.000");
        rlen = snprintf(release, sizeof release, "SELECT RELEASE_LOCK(%s)", ename);
    } else {
        glen = snprintf(grant, sizeof grant,
                        "INSERT INTO `baton_locks` (name, fence, owner, holder, lease_until, acquired_at) "
                        "VALUES (%s, LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6) + INTERVAL %llu MICROSECOND, "
                        "UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
                        "fence = IF(@baton_ok := (owner IS NULL OR lease_until IS NULL OR "
                        "lease_until <= UTC_TIMESTAMP(6) OR owner = VALUES(owner)), LAST_INSERT_ID(fence + 1), fence), "
                        "holder = IF(@baton_ok, VALUES(holder), holder), "
                        "acquired_at = IF(@baton_ok, VALUES(acquired_at), acquired_at), "
                        "lease_until = IF(@baton_ok, VALUES(lease_until), lease_until), "
                        "owner = IF(@baton_ok, VALUES(owner), owner)",
                        ename, eowner, eholder, 30000ULL * 1000);
    }

    c0 = cpu();
    t0 = now();
    for (int i = 0; i < n; i++) {
        unsigned long long fence;
        if (run(c, grant, (size_t)glen, NULL, 0)) return 1;
        if (mysql_affected_rows(c) == 0) {
            fprintf(stderr, "myraw: the lock was not granted (is something else holding '%s'?)\n", name);
            return 1;
        }
        fence = mysql_insert_id(c);
        if (session) {
            cell[0] = 0;
            if (run(c, release, (size_t)rlen, cell, sizeof cell)) return 1;
            if (strcmp(cell, "1")) {
                fprintf(stderr, "myraw: RELEASE_LOCK answered %s\n", cell[0] ? cell : "NULL");
                return 1;
            }
        } else {
            rlen = snprintf(release, sizeof release, "UPDATE `baton_locks` SET owner = NULL, holder = NULL, "
                            "lease_until = NULL WHERE name = %s AND owner = %s AND fence = %llu", ename, eowner, fence);
            if (run(c, release, (size_t)rlen, NULL, 0)) return 1;
            if (mysql_affected_rows(c) != 1) {
                fprintf(stderr, "myraw: the lease release changed %llu rows\n", (unsigned long long)mysql_affected_rows(c));
                return 1;
            }
        }
    }
    dt = now() - t0;
    printf("{\"peer\": \"myraw\", \"workload\": \"uncontended\", \"mode\": \"%s\", \"n\": %d, \"pairs_per_s\": %.1f, "
           "\"cpu_us_per_pair\": %.2f}\n", argv[5], n, n / dt, (cpu() - c0) * 1e6 / n);
    mysql_close(c);
    return 0;
}
