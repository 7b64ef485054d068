/*
 * Row mode, the pessimistic lock: the name's row is locked by an UPDATE in a
 * transaction kept open on the lock's own connection until release (COMMIT).
 * Waiters queue on the row lock in the server; a try adds FOR UPDATE NOWAIT.
 * A holder that dies takes its transaction with it: the row is free at once.
 *
 * The fence comes from a sequence (<table>_fence), not from fence + 1 alone:
 * the bump lives in the open transaction, and a holder that crashes rolls it
 * back, so fence + 1 would hand the same fence out twice. nextval() is never
 * rolled back. The row keeps GREATEST(fence + 1, nextval) at commit.
 *
 * While the transaction is open nobody else can see the row's new fence or
 * holder, so the holding session also says them in its application_name
 * ("baton <fence> <pid> <tid> <host>", set local to the transaction):
 * lock_info finds the holder through the row's xmax, the transaction lock
 * in pg_locks and pg_stat_activity.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $1 name, $2 key, $3 owner, $4 holder, $5 the sequence, $6 application_name prefix ("baton ") and
 * suffix (" pid tid host") joined around the fence */
#define BUMP                                                                                        \
    "UPDATE @T AS t SET fence = GREATEST(t.fence + 1, nextval($5::regclass)), key = $2::bigint, owner = $3, " \
    "holder = $4, acquired_at = clock_timestamp(), lease_until = NULL %s WHERE t.name = $1%s "      \
    "RETURNING t.fence, set_config('application_name', left('baton ' || t.fence || $6, 63), true)"

/*
 * The row is locked by a FOR UPDATE subquery before the SET is evaluated,
 * in both variants. A bare "UPDATE ... SET fence = GREATEST(t.fence + 1,
 * nextval())" computes its new row (nextval included) from the version it
 * read BEFORE waiting for the row; if every transaction that updated the row
 * meanwhile rolled back (a holder terminated, or whose link died), the server
 * keeps that precomputed row: a waiter whose nextval was drawn before another
 * client's grant (a barger that found the row free after a rollback, then
 * rolled back too) was granted a fence lower than that client's ("fence went
 * back" in check-faults' postgres-row-link-freeze row). The join cannot yield
 * a row before the subquery has locked it, so nextval runs once the row is
 * ours, after every earlier grant; a stale t.fence read before the wait is
 * re-read by the server (a committed update makes it evaluate the SET again).
 */
static char *row_sql(pgeng *e, int wait)
{
    char buf[1024];
    snprintf(buf, sizeof buf, BUMP, wait ? "FROM (SELECT name FROM @T WHERE name = $1 FOR UPDATE) q"
                                         : "FROM (SELECT name FROM @T WHERE name = $1 FOR UPDATE NOWAIT) q",
             " AND t.name = q.name");
    return pg_sql(e, buf);
}

/* " pid tid host" from the owner's "host pid tid". */
static void app_suffix(const baton_owner *o, char *out, size_t n)
{
    const char *sp2 = strrchr(o->desc, ' '), *sp1 = NULL;
    for (const char *p = o->desc; sp2 && p < sp2; p++)
        if (*p == ' ') sp1 = p;
    if (!sp1) {
        snprintf(out, n, " %s", o->desc);
        return;
    }
    snprintf(out, n, " %.*s %s %.*s", (int)(sp2 - sp1 - 1), sp1 + 1, sp2 + 1, (int)(sp1 - o->desc), o->desc);
}

#define PG_ROW_RETRY_MS 200      /* a waiter whose server is away tries again this often */

static int simple(pgeng *e, PGconn *c, const char *sql)
{
    PGresult *r = NULL;
    int rc = pg_exec(e, c, sql, 0, NULL, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    PQclear(r);
    return rc;
}

static int row_once(pgeng *e, pglock *l, baton_acquire_req *req)
{
    char suffix[160];
    const char *p[6] = { l->name, l->key, req->owner->hex, req->owner->desc, e->qseq, suffix };
    PGconn *c = NULL;
    PGresult *r = NULL;
    char *ensure = NULL, *sql = NULL;
    int rc, wait = req->deadline_ns != 0;

    if (l->conn) {           /* the connection of a grant reported lost */
        pg_watch_del(e, l);
        PQfinish(l->conn);
        l->conn = NULL;
    }
    app_suffix(req->owner, suffix, sizeof suffix);
    /* only when no row is visible: an INSERT that meets the row a holder
     * has updated in its open transaction would wait for that transaction */
    ensure = pg_sql(e, "INSERT INTO @T (name, key, fence) SELECT $1, $2::bigint, 0 WHERE NOT EXISTS "
                       "(SELECT 1 FROM @T WHERE name = $1) ON CONFLICT (name) DO NOTHING");
    sql = row_sql(e, wait);
    if (!ensure || !sql) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = pg_conn_get_by(e, wait && req->deadline_ns != INT64_MAX ? req->deadline_ns + PG_WAIT_GRACE_NS
                                                                      : INT64_MAX, &c)))
        goto out;
    /* the row must exist to be locked (autocommit, before the transaction) */
    if ((rc = pg_exec(e, c, ensure, 2, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r))) goto fail;
    PQclear(r);
    r = NULL;
    if ((rc = simple(e, c, "BEGIN"))) goto fail;
    rc = pg_exec(e, c, sql, 6, p, wait ? req->deadline_ns : pg_deadline_ms(e->io_timeout_ms),
                 wait ? req->waiter : NULL, &r);
    if (rc == BATON_EIO && !wait && strstr(baton_error_last()->message, "55P03")) {
        /* NOWAIT found the row locked */
        simple(e, c, "ROLLBACK");
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: lock '%s' is held", l->name);
        goto out;
    }
    if (rc == BATON_ETIMEDOUT || rc == BATON_ECANCELED) {
        int why = rc;
        if (PQstatus(c) != CONNECTION_OK || simple(e, c, "ROLLBACK")) {
            /* dropped, or the rollback failed: closed, which rolls back */
            PQfinish(c);
            c = NULL;
        }
        rc = why == BATON_ETIMEDOUT
            ? baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': %s", l->name, wait ? "wait timed out" :
                           "no answer")
            : baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
        if (!wait && why == BATON_ETIMEDOUT) rc = BATON_EUNAVAILABLE;
        goto out;
    }
    if (rc) goto fail;
    if (PQntuples(r) != 1) {
        simple(e, c, "ROLLBACK");
        rc = baton_seterr(BATON_EPROTO, 0, "postgres: lock '%s': its row vanished", l->name);
        goto out;
    }
    if (wait && req->waiter && baton_waiter_canceled(req->waiter)) {
        if (simple(e, c, "ROLLBACK")) goto fail;
        rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
        goto out;
    }
    l->fence = req->fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    l->conn = c;
    c = NULL;
    req->sent_ns = baton_now_ns();
    /* a terminated session (its transaction, and the row lock, gone) is
     * reported at once, not at the keeper's next check */
    pg_watch_add(e, l, l->conn, req->sent_ns);
    goto out;
fail:
    /* a transaction in an unknown state holds what it holds: close it */
    PQfinish(c);
    c = NULL;
out:
    PQclear(r);
    pg_conn_put(e, c);   /* only ever an idle, healthy connection (pg_conn_put checks) */
    free(ensure);
    free(sql);
    return rc;
}

int pg_row_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    int rc, wait = req->deadline_ns != 0;

    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t until;
        rc = row_once(e, l, req);
        if (rc != BATON_EUNAVAILABLE || !wait || !req->waiter) break;
        /* The server went away under a waiter (a restart, a terminated
         * backend): its transaction held nothing, so the wait goes on, on
         * a new connection, until its deadline, as in session mode. */
        until = baton_now_ns() + PG_ROW_RETRY_MS * 1000000LL;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': wait timed out (the server is "
                              "unavailable)", l->name);
            break;
        }
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
            break;
        }
    }
    return rc;
}

int pg_row_release(pgeng *e, pglock *l)
{
    PGconn *c = l->conn;
    PGresult *r = NULL;
    int rc;

    pg_watch_del(e, l);
    l->conn = NULL;
    l->fence = 0;
    if (!c) return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection is gone", l->name);
    rc = pg_exec(e, c, "COMMIT", 0, NULL, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    /* a transaction that had failed answers COMMIT with ROLLBACK: it held nothing since */
    if (rc == 0 && strcmp(PQcmdStatus(r), "COMMIT")) rc = BATON_ELOST;
    PQclear(r);
    if (rc) {
        PQfinish(c);
        return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its transaction ended before the release",
                            l->name);
    }
    pg_conn_put(e, c);
    return 0;
}

/* The keeper's check: the connection answers and the transaction is still
 * open and healthy. */
int pg_row_renew(pgeng *e, pglock *l, int64_t deadline_ns)
{
    int64_t io = pg_deadline_ms(e->io_timeout_ms), sent = baton_now_ns();
    PGresult *r = NULL;
    int rc;

    if (!l->conn) return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': no connection", l->name);
    pg_watch_busy(e, l->conn, 1, 0);
    rc = pg_exec(e, l->conn, "SELECT 1", 0, NULL, deadline_ns < io ? deadline_ns : io, NULL, &r);
    PQclear(r);
    if (rc == 0 && PQtransactionStatus(l->conn) == PQTRANS_INTRANS) {
        pg_watch_busy(e, l->conn, 0, sent);
        return 0;
    }
    pg_watch_del(e, l);
    PQfinish(l->conn);
    l->conn = NULL;
    return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its transaction ended", l->name);
}

/* lock_info in row mode: see the top of this file. */
int pg_row_info(pgeng *e, const char *name, baton_lockinfo *out)
{
    const char *p[1] = { name };
    PGresult *r = NULL;
    char *sql = pg_sql(e, "SELECT t.fence, a.application_name, l.pid IS NOT NULL FROM @T t "
                          "LEFT JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = t.xmax "
                          "AND l.granted AND l.mode = 'ExclusiveLock' "
                          "LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE t.name = $1");
    int rc;

    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = pg_run(e, sql, 1, p, 1, &r);
    free(sql);
    if (rc) return rc;
    if (PQntuples(r) >= 1) {
        const char *app = PQgetvalue(r, 0, 1);
        unsigned long long fence = 0;
        char pid[32], tid[32];
        int used = 0;
        out->fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
        out->held = !strcmp(PQgetvalue(r, 0, 2), "t");
        if (out->held && sscanf(app, "baton %llu %31s %31s %n", &fence, pid, tid, &used) == 3 && used > 0) {
            /* back to "host pid tid" */
            out->fence = fence;
            snprintf(out->holder, sizeof out->holder, "%s %s %s", app + used, pid, tid);
        }
    }
    PQclear(r);
    return 0;
}
