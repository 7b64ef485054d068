/*
 * Session mode: the lock is PostgreSQL's own session-level advisory lock on
 * the name's 64-bit key, so it lives exactly as long as the connection that
 * took it. Each held lock therefore has a connection of its own (l->conn),
 * taken from the client's pool at acquire and given back at release.
 *
 * The grant and the fence are one statement: the advisory lock is taken in
 * a CTE and the row of the name is upserted (fence + 1, holder) only when it
 * was granted, so a grant always comes with a new fence, and the row tells
 * `baton status` who holds the key.
 *
 * Session-level advisory locks survive a rolled-back statement. So a
 * statement that fails or is cancelled after the lock may have been granted
 * leaves the connection closed, never pooled: closing it frees whatever it
 * held.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRANT_TAIL                                                                                   \
    " INSERT INTO @T AS l (name, key, fence, owner, holder, acquired_at) "                           \
    "SELECT $1, $2::bigint, 1, $3, $4, clock_timestamp() FROM g%s "                                  \
    "ON CONFLICT (name) DO UPDATE SET fence = l.fence + 1, key = EXCLUDED.key, owner = EXCLUDED.owner, " \
    "holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at, lease_until = NULL RETURNING l.fence"

#define RETRY_MS 200             /* a waiter whose server is away tries again this often */

char *pg_grant_sql(pgeng *e, int shared, int wait)
{
    char buf[1024];
    snprintf(buf, sizeof buf, wait ? "WITH g AS (SELECT pg_advisory_lock%s($2::bigint))" GRANT_TAIL
                                   : "WITH g AS (SELECT pg_try_advisory_lock%s($2::bigint) AS ok)" GRANT_TAIL,
             shared ? "_shared" : "", wait ? "" : " WHERE g.ok");
    return pg_sql(e, buf);
}

char *pg_session_stmt(pgeng *e, int id)
{
    if (id == PG_PS_UNLOCK) return strdup("SELECT pg_advisory_unlock($1::bigint)");
    return pg_grant_sql(e, 0, id == PG_PS_GRANT_WAIT);
}

/* One grant attempt on a connection of the pool. */
static int grant_once(pgeng *e, pglock *l, baton_acquire_req *req, int wait)
{
    const char *p[4] = { l->name, l->key, req->owner->hex, req->owner->desc };
    PGconn *c = NULL;
    PGresult *r = NULL;
    int rc;

    if ((rc = pg_conn_get_by(e, wait && req->deadline_ns != INT64_MAX ? req->deadline_ns + PG_WAIT_GRACE_NS
                                                                      : INT64_MAX, &c)))
        return rc;
    /* the server queues waiters itself: one statement blocks until the
     * grant, the deadline (PQcancel) or baton_lock_cancel */
    rc = pg_exec_ps(e, c, wait ? PG_PS_GRANT_WAIT : PG_PS_GRANT_TRY, 4, p,
                    wait ? req->deadline_ns : pg_deadline_ms(e->io_timeout_ms), wait ? req->waiter : NULL, &r);
    if (rc) {
        /* it may have been granted before the failure: close, never pool */
        PQfinish(c);
        c = NULL;
        if (rc == BATON_ETIMEDOUT && wait)
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': wait timed out", l->name);
        else if (rc == BATON_ETIMEDOUT)  /* a try that outlived the I/O timeout: a slow server */
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: lock '%s': no answer within %d ms", l->name,
                              e->io_timeout_ms);
        goto out;
    }
    if (PQntuples(r) != 1) {
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: lock '%s' is held", l->name);
        goto out;
    }
    if (wait && req->waiter && baton_waiter_canceled(req->waiter)) {
        /* granted as the cancel went out: the caller asked to stop */
        PQfinish(c);
        c = NULL;
        rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
        goto out;
    }
    l->fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    l->conn = c;
    c = NULL;
    req->fence = l->fence;
    /* nothing expires a session lock: it is as fresh as the answer */
    req->sent_ns = baton_now_ns();
out:
    PQclear(r);
    pg_conn_put(e, c);
    return rc;
}

int pg_session_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    int rc, wait = req->deadline_ns != 0;

    if (l->conn) {
        /* the connection of a grant reported lost: it holds nothing we want */
        pg_watch_del(e, l);
        PQfinish(l->conn);
        l->conn = NULL;
    }
    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t until;
        rc = grant_once(e, l, req, wait);
        if (!rc) pg_watch_add(e, l, l->conn, req->sent_ns);
        if (rc != BATON_EUNAVAILABLE || !wait || !req->waiter) break;
        /* The server went away under a waiter (a restart, a terminated
         * backend): the wait held nothing, so it goes on, on a new
         * connection, until its deadline. */
        until = baton_now_ns() + RETRY_MS * 1000000LL;
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

int pg_session_release(pgeng *e, pglock *l)
{
    const char *p[1] = { l->key };
    PGresult *r = NULL;
    PGconn *c = l->conn;
    int rc;

    pg_watch_del(e, l);
    l->conn = NULL;
    l->fence = 0;
    if (!c) return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection is gone", l->name);
    rc = pg_exec_ps(e, c, PG_PS_UNLOCK, 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    if (rc) {
        /* a dead connection took the lock with it; a live one that cannot
         * answer is closed, which frees the lock on the server */
        PQfinish(c);
        return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection failed before the release",
                            l->name);
    }
    rc = strcmp(PQgetvalue(r, 0, 0), "t") ? baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': the server "
                                                         "no longer held it", l->name) : 0;
    PQclear(r);
    pg_conn_put(e, c);
    return rc;
}

/* The keeper's check of a session lock (every lease/3): the connection still
 * answers, so its session, and the lock with it, lives. Any failure ends the
 * grant at once: the connection is closed (so the server frees the lock if
 * it still had it) and the lock is reported LOST. */
int pg_session_renew(pgeng *e, pglock *l, int64_t deadline_ns)
{
    PGresult *r = NULL;
    int64_t io = pg_deadline_ms(e->io_timeout_ms), sent = baton_now_ns();
    int rc;

    if (!l->conn) return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': no connection", l->name);
    pg_watch_busy(e, l->conn, 1, 0);
    rc = pg_exec(e, l->conn, "SELECT 1", 0, NULL, deadline_ns < io ? deadline_ns : io, NULL, &r);
    PQclear(r);
    if (rc == 0) {
        pg_watch_busy(e, l->conn, 0, sent);
        return 0;
    }
    pg_watch_del(e, l);
    PQfinish(l->conn);
    l->conn = NULL;
    return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection died (%s)", l->name,
                        baton_strerror(rc));
}
