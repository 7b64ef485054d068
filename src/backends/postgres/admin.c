/*
 * What an operator asks of the engine (baton list, baton unlock --force):
 * lock_list and lock_break, in each mode. docs/postgres-engine.md, "Operator
 * commands".
 *
 * A break must give a fence above every fence granted for the name so far,
 * stored where the next grant starts from, by the acquire's own rule:
 *  - session mode: the holders' sessions are terminated and the row's fence
 *    raised by one, in one statement whose upsert locks the row until the
 *    statement commits, so a waiter granted the advisory lock as the holder
 *    dies bumps the fence after ours (its upsert waits for our row lock);
 *  - row mode: the holder's transaction is ended by terminating its session,
 *    and the fence sequence set past the holder's fence (read from its
 *    application_name) and the row's: the next grant takes nextval(), above
 *    it. The row itself is not written (the holder's transaction may still
 *    hold it for a moment), so the break never waits on a row lock;
 *  - lease mode: the owner is cleared and the fence raised by one in one
 *    statement, which NOTIFYs waiters as a release does; the old holder's
 *    owner- and fence-checked renewal then finds nothing (BATON_ELOST).
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The advisory lock of the name's key, as pg_locks shows it, in this database. */
#define ADV_OF(T)                                                                                    \
    "l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted "                                      \
    "AND l.classid = ((" T ".key >> 32) & 4294967295)::oid AND l.objid = (" T ".key & 4294967295)::oid " \
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"

/* The open transaction holding the row (row mode): its xmax's transaction lock. */
#define ROW_OF(T)                                                                                    \
    "l.locktype = 'transactionid' AND l.transactionid = " T ".xmax AND l.granted AND l.mode = 'ExclusiveLock'"

static const char list_session[] =
    "SELECT t.name FROM @T t WHERE left(t.name, length($1)) = $1 "
    "AND EXISTS (SELECT 1 FROM pg_locks l WHERE " ADV_OF("t") ")";
static const char list_row[] =
    "SELECT t.name FROM @T t WHERE left(t.name, length($1)) = $1 "
    "AND EXISTS (SELECT 1 FROM pg_locks l WHERE " ROW_OF("t") ")";
static const char list_lease[] =
    "SELECT name FROM @T WHERE left(name, length($1)) = $1 "
    "AND owner IS NOT NULL AND lease_until > clock_timestamp()";

/* $1 name, $2 key. The upsert (b) runs first: k reads it. */
static const char break_session[] =
    "WITH b AS (INSERT INTO @T AS t (name, key, fence) VALUES ($1, $2::bigint, 1) "
    "ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1, owner = NULL, holder = NULL RETURNING t.fence, t.key), "
    "k AS (SELECT DISTINCT l.pid FROM pg_locks l, b WHERE " ADV_OF("b") " AND l.pid <> pg_backend_pid()), "
    "x AS (SELECT pg_terminate_backend(pid) AS ok FROM k) "
    "SELECT (SELECT fence FROM b), (SELECT count(*) FROM x WHERE ok)";

/* $1 name, $2 the fence sequence. h: the holder, with the fence it says in
 * its application_name; x terminates it; f moves the sequence past every
 * fence the holder or the row has (after x: f reads x). */
static const char break_row[] =
    "WITH h AS (SELECT DISTINCT l.pid, substring(a.application_name FROM '^baton ([0-9]+) ')::bigint AS fence "
    "FROM @T t JOIN pg_locks l ON " ROW_OF("t") " LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE t.name = $1 AND l.pid <> pg_backend_pid()), "
    "x AS (SELECT pg_terminate_backend(pid) AS ok FROM h), "
    "f AS (SELECT setval($2::regclass, GREATEST(nextval($2::regclass), "
    "(SELECT coalesce(max(fence), 0) + 1 FROM @T WHERE name = $1), "
    "(SELECT coalesce(max(fence), 0) + 1 FROM h), (SELECT count(*) FROM x))) AS v) "
    "SELECT (SELECT v FROM f), (SELECT count(*) FROM x WHERE ok)";

/* $1 name, $2 key, $3 channel. o reads the row as it was before the upsert. */
static const char break_lease[] =
    "WITH o AS (SELECT owner IS NOT NULL AND lease_until > clock_timestamp() AS held FROM @T WHERE name = $1), "
    "b AS (INSERT INTO @T AS t (name, key, fence) VALUES ($1, $2::bigint, 1) "
    "ON CONFLICT (name) DO UPDATE SET fence = t.fence + 1, owner = NULL, holder = NULL, lease_until = NULL "
    "RETURNING t.fence, pg_notify($3, t.name)) "
    "SELECT (SELECT fence FROM b), (SELECT count(*) FROM o WHERE held)";

int pg_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    pgeng *e = eng;
    const char *p[1] = { prefix ? prefix : "" };
    PGresult *r = NULL;
    char *sql;
    int rc;

    if ((rc = pg_table_ready(e))) return rc;
    sql = pg_sql(e, e->mode == PG_SESSION ? list_session : e->mode == PG_ROW ? list_row : list_lease);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = pg_run(e, sql, 1, p, 1, &r);
    free(sql);
    if (rc) return rc;
    for (int i = 0; i < PQntuples(r); i++)
        if (fn(arg, PQgetvalue(r, i, 0))) break;
    PQclear(r);
    return 0;
}

int pg_lock_break(void *eng, const char *name, uint64_t *fence)
{
    pgeng *e = eng;
    pglock k;
    PGresult *r = NULL;
    char *sql;
    int rc;

    *fence = 0;
    if ((rc = pg_table_ready(e))) return rc;
    memset(&k, 0, sizeof k);
    pg_name_key(name, &k);
    {
        const char *ps[2] = { name, k.key };
        const char *pr[2] = { name, e->qseq };
        const char *pl[3] = { name, k.key, e->channel };
        sql = pg_sql(e, e->mode == PG_SESSION ? break_session : e->mode == PG_ROW ? break_row : break_lease);
        if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        /* not retried: a second run would bump the fence twice, harmless
         * but not what was asked */
        rc = pg_run(e, sql, e->mode == PG_LEASE ? 3 : 2, e->mode == PG_SESSION ? ps : e->mode == PG_ROW ? pr : pl,
                    0, &r);
        free(sql);
    }
    if (rc == BATON_EAUTH && e->mode != PG_LEASE) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        return baton_seterr(BATON_EAUTH, 0, "postgres: breaking '%s' ends its holder's session with "
                            "pg_terminate_backend(), which needs superuser (always, for a superuser's session), or "
                            "membership in the holder's role or in pg_signal_backend (GRANT pg_signal_backend TO "
                            "<role>); and UPDATE on %s%s%s: %s",
                            name, e->qtable, e->mode == PG_ROW ? " and USAGE on " : "",
                            e->mode == PG_ROW ? e->qseq : "", msg);
    }
    if (rc) return rc;
    if (PQntuples(r) != 1 || PQgetisnull(r, 0, 0)) {
        PQclear(r);
        return baton_seterr(BATON_EPROTO, 0, "postgres: breaking '%s': no fence came back", name);
    }
    *fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    rc = strtoll(PQgetvalue(r, 0, 1), NULL, 10) > 0
        ? 0 : baton_seterr(BATON_ENOTHELD, 0, "postgres: lock '%s' was not held (fence bumped to %llu)", name,
                           (unsigned long long)*fence);
    PQclear(r);
    return rc;
}
