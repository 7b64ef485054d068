/*
 * Rate limiters on PostgreSQL (baton_ratelimit_*; docs/ratelimit.md), in
 * every mode: the table <table>_rate, one row per limiter key
 *   key text PRIMARY KEY, permits, interval_ms, burst  the configuration
 *   tat_us   the GCRA theoretical arrival time, µs on the server's clock
 *   seen_us  the server's clock at the last decision
 *   wait_us  that decision's answer (-1: configured otherwise)
 * Each decision is ONE statement, INSERT ... ON CONFLICT (key) DO UPDATE,
 * which reads clock_timestamp() once (the CTE) and decides under the row's
 * lock, so two clients never decide on the same TAT and the clients' clocks
 * play no part. The row is as durable as the table: a server restart or a
 * killed client leaves the last committed TAT (no fresh burst). The table
 * is created on a handle's first use, under the DDL advisory lock; a role
 * that may not gets BATON_EAUTH with the DDL.
 */
#include "pg_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RATE_DDL "CREATE TABLE IF NOT EXISTS %s (key text PRIMARY KEY, permits bigint NOT NULL, " \
                 "interval_ms bigint NOT NULL, burst bigint NOT NULL, tat_us bigint NOT NULL, " \
                 "seen_us bigint NOT NULL, wait_us bigint NOT NULL)"

/* $1 key, $2 permits, $3 interval_ms, $4 burst, $5 replace, $6 n, $7 reserve_us.
 * INC and TOL: n and burst emission intervals in µs (integer division, as
 * baton_gcra_step); OVER: how long n admissions would wait on the stored TAT. */
#define INC "($6::bigint * $3::bigint * 1000 / $2::bigint)"
#define TOL "($4::bigint * $3::bigint * 1000 / $2::bigint)"
#define OK "((r.permits = EXCLUDED.permits AND r.interval_ms = EXCLUDED.interval_ms AND " \
           "r.burst = EXCLUDED.burst) OR $5::boolean)"
#define BASE "greatest(r.tat_us, EXCLUDED.seen_us)"
#define OVER "greatest(0, " BASE " + " INC " - EXCLUDED.seen_us - " TOL ")"
#define FITS "($6::bigint > 0 AND $6::bigint <= $4::bigint AND " OVER " <= $7::bigint)"
static const char take_fmt[] =
    "WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now) "
    "INSERT INTO %s AS r (key, permits, interval_ms, burst, tat_us, seen_us, wait_us) "
    "SELECT $1, $2::bigint, $3::bigint, $4::bigint, "
    "CASE WHEN $6::bigint > 0 AND $6::bigint <= $4::bigint AND greatest(0, " INC " - " TOL ") <= $7::bigint "
    "THEN t.now + " INC " ELSE 0 END, t.now, "
    "CASE WHEN $6::bigint = 0 THEN 0 WHEN $6::bigint > $4::bigint THEN greatest(1, " INC " - " TOL ") "
    "ELSE greatest(0, " INC " - " TOL ") END FROM t "
    "ON CONFLICT (key) DO UPDATE SET "
    "permits = CASE WHEN " OK " THEN EXCLUDED.permits ELSE r.permits END, "
    "interval_ms = CASE WHEN " OK " THEN EXCLUDED.interval_ms ELSE r.interval_ms END, "
    "burst = CASE WHEN " OK " THEN EXCLUDED.burst ELSE r.burst END, "
    "tat_us = CASE WHEN " OK " AND " FITS " THEN " BASE " + " INC " ELSE r.tat_us END, "
    "seen_us = EXCLUDED.seen_us, "
    "wait_us = CASE WHEN NOT " OK " THEN -1 WHEN $6::bigint = 0 THEN 0 "
    "WHEN $6::bigint > $4::bigint THEN greatest(1, " OVER ") ELSE " OVER " END "
    "RETURNING r.permits, r.interval_ms, r.burst, r.wait_us";

static const char inspect_fmt[] =
    "SELECT permits, interval_ms, burst, "
    "greatest(0, tat_us - (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) FROM %s WHERE key = $1";

typedef struct {
    char *key;
    char *table;             /* "schema"."<table>_rate" */
    int ready;               /* the table exists (this handle made sure) */
} pgrate;

static void rate_free(void *eng, void *st)
{
    pgrate *r = st;
    (void)eng;
    if (!r) return;
    free(r->key);
    free(r->table);
    free(r);
}

static int rate_new(void *eng, const char *key, void **st)
{
    pgeng *e = eng;
    pgrate *r = calloc(1, sizeof *r);
    char t[80], *qt = NULL, *qs = NULL;
    size_t n;
    *st = NULL;
    if (!r || !(r->key = strdup(key))) goto nomem;
    /* the lock table's name is at most 57 bytes: room for the suffix */
    snprintf(t, sizeof t, "%s_rate", e->table);
    if (!(qt = pg_quote_ident(t)) || (e->schema && !(qs = pg_quote_ident(e->schema)))) goto nomem;
    n = (qs ? strlen(qs) + 1 : 0) + strlen(qt) + 1;
    if (!(r->table = malloc(n))) goto nomem;
    snprintf(r->table, n, "%s%s%s", qs ? qs : "", qs ? "." : "", qt);
    free(qt);
    free(qs);
    *st = r;
    return 0;
nomem:
    free(qt);
    free(qs);
    rate_free(eng, r);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static char *sql_of(const char *fmt, const char *table)
{
    size_t n = strlen(fmt) + strlen(table) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, table);
    return s;
}

static int simple(pgeng *e, PGconn *c, const char *sql)
{
    PGresult *res = NULL;
    int rc = pg_exec(e, c, sql, 0, NULL, pg_deadline_ms(e->io_timeout_ms), NULL, &res);
    PQclear(res);
    return rc;
}

/* CREATE TABLE IF NOT EXISTS races with itself (the type's unique index):
 * one transaction under the engine's DDL advisory lock, as coord.c does. */
static int ensure_table(pgeng *e, pgrate *r)
{
    PGconn *c = NULL;
    char *ddl;
    int rc;
    if (r->ready) return 0;
    if (!(ddl = sql_of(RATE_DDL, r->table))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = pg_conn_get(e, &c))) {
        free(ddl);
        return rc;
    }
    if (!(rc = simple(e, c, "BEGIN")) && !(rc = simple(e, c, "SELECT pg_advisory_xact_lock(" PG_DDL_KEY ")")) &&
        !(rc = simple(e, c, ddl)))
        rc = simple(e, c, "COMMIT");
    if (rc) {
        baton_error saved = *baton_error_last();
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        if (PQstatus(c) != CONNECTION_OK || simple(e, c, "ROLLBACK")) pg_conn_drop(c);
        if (rc == BATON_EAUTH)
            baton_seterr(rc, saved.native, "postgres: may not create the rate limiter table; ask a DBA to run: %s; "
                         "GRANT SELECT, INSERT, UPDATE ON %s TO <role>", ddl, r->table);
        else
            baton_seterr(rc, saved.native, "%s", msg);
    } else {
        r->ready = 1;
    }
    pg_conn_put(e, c);
    free(ddl);
    return rc;
}

static int rate_take(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n, int64_t reserve_us,
                     int64_t *wait_us, baton_rate_cfg *stored)
{
    pgeng *e = eng;
    pgrate *r = st;
    char p2[16], p3[16], p4[16], p6[16], p7[24], *sql;
    const char *p[7] = { r->key, p2, p3, p4, replace ? "true" : "false", p6, p7 };
    PGresult *res = NULL;
    long long w;
    int rc;
    *wait_us = 0;
    if ((rc = ensure_table(e, r))) return rc;
    snprintf(p2, sizeof p2, "%" PRIu32, cfg->permits);
    snprintf(p3, sizeof p3, "%" PRIu32, cfg->interval_ms);
    snprintf(p4, sizeof p4, "%" PRIu32, cfg->burst);
    snprintf(p6, sizeof p6, "%" PRIu32, n);
    snprintf(p7, sizeof p7, "%" PRId64, reserve_us);
    if (!(sql = sql_of(take_fmt, r->table))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* retry: a statement run twice (its first answer lost with a dead pooled
     * connection) takes a second slot nobody uses: fewer admissions, never more */
    rc = pg_run(e, sql, 7, p, 1, &res);
    free(sql);
    if (rc) return rc;
    if (PQntuples(res) != 1 || PQnfields(res) != 4) {
        PQclear(res);
        return baton_seterr(BATON_EPROTO, 0, "postgres: the rate limiter statement returned no row");
    }
    stored->permits = (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
    stored->interval_ms = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
    stored->burst = (uint32_t)strtoul(PQgetvalue(res, 0, 2), NULL, 10);
    w = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    PQclear(res);
    if (w < 0)
        return baton_seterr(BATON_ECONFLICT, 0, "postgres: rate limiter '%.200s' is configured otherwise", r->key);
    *wait_us = w;
    return 0;
}

static int rate_inspect(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us)
{
    pgeng *e = eng;
    pgrate *r = st;
    const char *p[1] = { r->key };
    PGresult *res = NULL;
    char *sql;
    int rc;
    if ((rc = ensure_table(e, r))) return rc;
    if (!(sql = sql_of(inspect_fmt, r->table))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = pg_run(e, sql, 1, p, 1, &res);
    free(sql);
    if (rc) return rc;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return baton_seterr(BATON_ENOENT, 0, "postgres: no rate limiter '%.200s'", r->key);
    }
    stored->permits = (uint32_t)strtoul(PQgetvalue(res, 0, 0), NULL, 10);
    stored->interval_ms = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
    stored->burst = (uint32_t)strtoul(PQgetvalue(res, 0, 2), NULL, 10);
    *ahead_us = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    PQclear(res);
    return 0;
}

const baton_ratelimit_methods baton__ratelimit_postgres = {
    .create = rate_new,
    .destroy = rate_free,
    .take = rate_take,
    .inspect = rate_inspect,
};
