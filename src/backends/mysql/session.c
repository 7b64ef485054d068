/*
 * Session mode: the lock is the server's named lock, GET_LOCK(key), held by
 * the connection that took it and freed by the server when that connection
 * ends. Each held lock therefore has a connection of its own (l->conn),
 * taken from the client's pool at acquire and given back at release (named
 * locks nest per connection, so a connection never serves two locks).
 *
 * The grant and the fence are one statement: an INSERT ... SELECT whose
 * WHERE takes the named lock, so the name's row is upserted (fence + 1)
 * only when the lock was granted; the fence comes back in the OK packet
 * through LAST_INSERT_ID(expr) (mysql_insert_id), without a second round
 * trip. The row also tells `baton status` who holds the lock.
 *
 * Named locks are not transactional: a statement that fails after GET_LOCK
 * may have granted it. Such a connection is closed, never pooled: closing
 * it frees whatever it held.
 *
 * A wait is one statement GET_LOCK(key, t) with t at most chunk_s seconds
 * (below the socket timeout), repeated until the deadline; the watchdog
 * KILLs it (KILL QUERY) at the deadline or when the acquire is cancelled.
 * GET_LOCK takes fractional seconds: t is the time left, rounded up to the
 * millisecond.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_MS 200             /* a waiter whose server is away tries again this often */

static char *grant_sql(myeng *e, mylock *l, const baton_owner *o, const char *timeout)
{
    char *owner = my_escape(o->hex), *holder = my_escape(o->desc), *sql = NULL;
    if (owner && holder)
        sql = my_sql(e, "INSERT INTO @T (name, fence, owner, holder, acquired_at, lease_until) "
                        "SELECT %s, LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6), NULL FROM DUAL "
                        "WHERE GET_LOCK(%s, %s) = 1 "
                        "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), owner = VALUES(owner), "
                        "holder = VALUES(holder), acquired_at = VALUES(acquired_at), lease_until = NULL",
                     l->esc, owner, holder, l->ekey, timeout);
    free(owner);
    free(holder);
    return sql;
}

/* One grant statement on a pooled connection: 0 granted, BATON_ELOCKED not
 * (this time), or an error. */
static int grant_once(myeng *e, mylock *l, baton_acquire_req *req, int wait)
{
    char t[32];
    char *sql;
    MYSQL *c = NULL;
    int rc;
    uint64_t affected;

    if (wait) {
        int64_t left = req->deadline_ns == INT64_MAX ? INT64_MAX : req->deadline_ns - baton_now_ns();
        int64_t ms = left == INT64_MAX ? (int64_t)e->chunk_s * 1000 : (left + 999999) / 1000000;
        if (ms > (int64_t)e->chunk_s * 1000) ms = (int64_t)e->chunk_s * 1000;
        if (ms < 1) ms = 1;
        snprintf(t, sizeof t, "%" PRId64 ".%03d", ms / 1000, (int)(ms % 1000));
    } else {
        snprintf(t, sizeof t, "0");
    }
    if (!(sql = grant_sql(e, l, req->owner, t))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = my_conn_get(e, &c))) goto out;
    rc = wait ? my_wait(e, c, sql, req->deadline_ns, req->waiter, NULL) : my_exec(e, c, sql, NULL);
    if (rc) {
        /* it may have been granted before the failure: close, never pool */
        my_conn_close(c);
        c = NULL;
        goto out;
    }
    affected = mysql_affected_rows(c);
    if (affected == 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "mysql: lock '%s' is held", l->name);
        goto out;
    }
    if (wait && req->waiter && baton_waiter_canceled(req->waiter)) {
        /* granted as the cancel went out: the caller asked to stop */
        my_conn_close(c);
        c = NULL;
        rc = baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
        goto out;
    }
    l->fence = req->fence = mysql_insert_id(c);
    l->conn = c;
    c = NULL;
    my_watch_add(e, l);
    /* nothing expires a named lock: it is as fresh as the answer */
    req->sent_ns = baton_now_ns();
out:
    my_conn_put(e, c);
    free(sql);
    return rc;
}

int my_session_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    int rc, wait = req->deadline_ns != 0;

    if (l->conn) {
        /* the connection of a grant reported lost: it holds nothing we want */
        my_watch_del(e, l);
        my_conn_close(l->conn);
        l->conn = NULL;
    }
    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t until;
        rc = grant_once(e, l, req, wait);
        if (rc == 0 || !wait) break;
        if (req->waiter && baton_waiter_canceled(req->waiter)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
            break;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "mysql: lock '%s': wait timed out%s", l->name,
                              rc == BATON_EUNAVAILABLE ? " (the server is unavailable)" : "");
            break;
        }
        if (rc == BATON_ELOCKED || rc == BATON_ETIMEDOUT) continue;   /* the next chunk of the wait */
        if (rc != BATON_EUNAVAILABLE || !req->waiter) break;
        /* The server went away under a waiter (a restart, a KILL): the wait
         * held nothing, so it goes on, on a new connection, until its deadline. */
        until = baton_now_ns() + RETRY_MS * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
            break;
        }
    }
    return rc;
}

int my_session_release(myeng *e, mylock *l)
{
    MYSQL *c = l->conn;
    MYSQL_RES *r = NULL;
    char *sql;
    const char *v;
    int rc;

    my_watch_del(e, l);
    l->conn = NULL;
    l->fence = 0;
    if (!c) return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': its connection is gone", l->name);
    if (!(sql = my_sql(e, "SELECT RELEASE_LOCK(%s)", l->ekey))) {
        my_conn_close(c);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    rc = my_exec(e, c, sql, &r);
    free(sql);
    if (rc) {
        /* a dead connection took the lock with it; a live one that cannot
         * answer is closed, which frees the lock on the server */
        my_conn_close(c);
        return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': its connection failed before the release", l->name);
    }
    v = my_cell(r, 0);
    rc = v && !strcmp(v, "1") ? 0 : baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': the server no longer held it",
                                                 l->name);
    mysql_free_result(r);
    if (rc) my_conn_close(c);
    else my_conn_put(e, c);
    return rc;
}

/* The keeper's check of a named lock (every lease/3; the watcher reports
 * a connection the server ends at once): the holding
 * connection still answers and still holds it. Any failure ends the grant
 * at once: the connection is closed (so the server frees the lock if it
 * still had it) and the lock is reported LOST. */
int my_session_renew(myeng *e, mylock *l, int64_t deadline_ns)
{
    MYSQL_RES *r = NULL;
    char *sql;
    const char *v;
    int rc, ok;

    if (!l->conn) return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': no connection", l->name);
    if (!(sql = my_sql(e, "SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", l->ekey)))
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* a connection that cannot be confirmed by the lease's deadline (or
     * within the I/O timeout) is given up: cut, and the lock LOST */
    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    my_watch_busy(e, l, 1);
    rc = my_exec_dl(e, l->conn, sql, &r, deadline_ns);
    free(sql);
    v = rc ? NULL : my_cell(r, 0);
    ok = v && !strcmp(v, "1");
    mysql_free_result(r);
    if (rc == 0 && ok) {
        my_watch_busy(e, l, 0);
        return 0;
    }
    my_watch_del(e, l);
    my_conn_close(l->conn);
    l->conn = NULL;
    return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': %s", l->name,
                        rc ? "its connection died" : "its connection no longer holds it");
}

/* held = the server holds the named lock (whoever took it); the row gives
 * the last grant's fence and holder. */
int my_session_info(myeng *e, mylock *l, baton_lockinfo *out)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *sql = my_sql(e, "SELECT IS_USED_LOCK(%s) IS NOT NULL, t.fence, t.holder FROM (SELECT 1) d "
                          "LEFT JOIN @T t ON t.name = %s", l->ekey, l->esc);
    int rc;

    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, &r, NULL, NULL);
    free(sql);
    if (rc) return rc;
    if ((row = mysql_fetch_row(r))) {
        out->held = row[0] && !strcmp(row[0], "1");
        out->fence = row[1] ? strtoull(row[1], NULL, 10) : 0;
        if (out->held && row[2]) snprintf(out->holder, sizeof out->holder, "%s", row[2]);
    }
    mysql_free_result(r);
    return 0;
}
