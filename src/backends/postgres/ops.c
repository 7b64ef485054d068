/*
 * engine_ops: the server's own counts of the statements it ran, for
 * `baton bench` (what a handoff costs).
 *
 * Two sources, the first that answers, chosen once per client:
 *
 *   pg_stat_statements (when the server preloads it and the extension is
 *   created in the database): calls of every statement of this database,
 *   summed per first keyword, named "sql|with", "sql|select", "sql|update",
 *   "sql|set", "sql|listen"... (the prefix keeps them apart from Redis's
 *   command names, which `baton bench` knows). The counts are updated as each statement ends, before its client
 *   sees the answer, so they are exact at any moment. Our own reads are left
 *   out (the marker comment in their text).
 *
 *   pg_stat_database otherwise: "xact_commit" and "xact_rollback" of this
 *   database. Every statement baton sends outside row mode is a transaction
 *   of its own, so these count statements too; but a backend publishes its
 *   counts at most once a second (an idle one within about ten seconds), so
 *   over a short window they lag, and our own reads are counted (the
 *   contract allows it).
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OPS_UNKNOWN, OPS_PGSS, OPS_XACT };

/* The marker in a comment: pg_stat_statements normalizes the constant in
 * the WHERE clause to $1, but keeps the comment, so the row of this very
 * statement carries the marker and is left out. */
static const char pgss_sql[] =
    "SELECT coalesce(lower(substring(s.query FROM '^\\s*([A-Za-z_]+)')), 'other'), sum(s.calls)::bigint "
    "FROM pg_stat_statements s "
    "WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND strpos(s.query, 'baton:engine_ops') = 0 GROUP BY 1 /* baton:engine_ops */";

static const char xact_sql[] =
    "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()";

int pg_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    pgeng *e = eng;
    PGresult *r = NULL;
    int rc, src;

    pthread_mutex_lock(&e->mu);
    src = e->ops_src;
    pthread_mutex_unlock(&e->mu);
    if (src != OPS_XACT) {
        rc = pg_run(e, pgss_sql, 0, NULL, 1, &r);
        if (rc == 0) {
            src = OPS_PGSS;
        } else if (src == OPS_UNKNOWN && (rc == BATON_EPROTO || rc == BATON_EIO || rc == BATON_EAUTH)) {
            /* not created here (42P01), not preloaded (55000), or not ours to
             * read: the database's transaction counts will do */
            baton_log(BATON_LOG_DEBUG, "postgres: engine_ops: no pg_stat_statements (%s); using pg_stat_database",
                      baton_error_last()->message);
            src = OPS_XACT;
        } else {
            return rc;
        }
        pthread_mutex_lock(&e->mu);
        e->ops_src = src;
        pthread_mutex_unlock(&e->mu);
    }
    if (src == OPS_XACT && (rc = pg_run(e, xact_sql, 0, NULL, 1, &r))) return rc;

    if (src == OPS_XACT) {
        if (PQntuples(r) != 1 || PQnfields(r) != 2) {
            PQclear(r);
            return baton_seterr(BATON_EPROTO, 0, "postgres: pg_stat_database has no row for this database");
        }
        fn(arg, "xact_commit", strtoull(PQgetvalue(r, 0, 0), NULL, 10));
        fn(arg, "xact_rollback", strtoull(PQgetvalue(r, 0, 1), NULL, 10));
    } else {
        for (int i = 0; i < PQntuples(r); i++) {
            char op[64];
            snprintf(op, sizeof op, "sql|%.48s", PQgetvalue(r, i, 0));
            fn(arg, op, strtoull(PQgetvalue(r, i, 1), NULL, 10));
        }
    }
    PQclear(r);
    return 0;
}
