/*
 * Row mode, the pessimistic lock: the name's row is locked by an UPDATE in a
 * transaction kept open on the lock's own connection until release
 * (COMMIT). Waiters queue on the row lock in InnoDB; a try runs the UPDATE
 * with innodb_lock_wait_timeout = 0 (error 1205 at once when the row is
 * locked). A holder that dies takes its transaction with it: the row is
 * free at once.
 *
 * innodb_lock_wait_timeout counts whole seconds (at least 1 for a wait):
 * a wait is one UPDATE of at most chunk_s seconds (SET STATEMENT
 * innodb_lock_wait_timeout = n FOR UPDATE ...), repeated until the
 * deadline; a deadline that falls inside a second, and a cancel, are the
 * watchdog's KILL QUERY. A lock wait timeout rolls back only the statement,
 * so the transaction goes on with the next one.
 *
 * The fence comes from a sequence (<table>_fence), not from fence + 1
 * alone: the bump lives in the open transaction, and a holder that dies
 * rolls it back, so fence + 1 would hand the same fence out twice. NEXTVAL
 * is never rolled back. The row keeps GREATEST(fence + 1, NEXTVAL) at
 * commit; the value comes back through LAST_INSERT_ID(expr).
 *
 * lock_info: held = a locking read with no wait fails (1205); then a dirty
 * read (READ UNCOMMITTED) shows the holder's uncommitted fence and holder.
 */
#include "my_int.h"
#include "core/internal.h"

#include <errno.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *bump_sql(myeng *e, mylock *l, const baton_owner *o, int timeout_s)
{
    char *owner = my_escape(o->hex), *holder = my_escape(o->desc), *sql = NULL;
    if (owner && holder)
        sql = my_sql(e, "SET STATEMENT innodb_lock_wait_timeout = %d FOR UPDATE @T SET "
                        "fence = LAST_INSERT_ID(GREATEST(fence + 1, NEXTVAL(@S))), owner = %s, holder = %s, "
                        "acquired_at = UTC_TIMESTAMP(6), lease_until = NULL WHERE name = %s",
                     timeout_s, owner, holder, l->esc);
    free(owner);
    free(holder);
    return sql;
}

/* The row must exist to be locked: looked for first with a plain
 * (non-locking) read, since an INSERT that meets the row a holder has
 * updated would wait for that holder's transaction. */
static int ensure_row(myeng *e, MYSQL *c, mylock *l)
{
    MYSQL_RES *r = NULL;
    char *sql = my_sql(e, "SELECT 1 FROM @T WHERE name = %s", l->esc);
    int rc, there;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, sql, &r);
    free(sql);
    if (rc) return rc;
    there = mysql_num_rows(r) > 0;
    mysql_free_result(r);
    if (there) return 0;
    if (!(sql = my_sql(e, "INSERT IGNORE INTO @T (name, fence) VALUES (%s, 0)", l->esc)))
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, sql, NULL);
    free(sql);
    return rc;
}

static int rollback(myeng *e, MYSQL *c)
{
    return my_exec(e, c, "ROLLBACK", NULL);
}

#define RETRY_MS 200             /* a waiter whose server is away tries again this often */

static int acquire_once(myeng *e, mylock *l, baton_acquire_req *req);

int my_row_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    int rc;
    if (l->conn) {           /* the connection of a grant reported lost */
        my_watch_del(e, l);
        my_conn_close(l->conn);
        l->conn = NULL;
    }
    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t until;
        rc = acquire_once(e, l, req);
        if (rc != BATON_EUNAVAILABLE || req->deadline_ns == 0 || !req->waiter) return rc;
        /* The server went away under a waiter (a restart, a KILL): the wait
         * held nothing, so it goes on, on a new connection, until its deadline. */
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
            return baton_seterr(BATON_ETIMEDOUT, 0, "mysql: lock '%s': wait timed out (the server is unavailable)",
                                l->name);
        until = baton_now_ns() + RETRY_MS * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED)
            return baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
    }
}

static int acquire_once(myeng *e, mylock *l, baton_acquire_req *req)
{
    MYSQL *c = NULL;
    int rc, wait = req->deadline_ns != 0, made = 0;

    if ((rc = my_conn_get(e, &c))) return rc;
    if ((rc = my_exec(e, c, "START TRANSACTION", NULL))) goto fail;
    for (;;) {
        char *sql;
        int timeout_s = 0;
        if (wait) {
            int64_t left = req->deadline_ns == INT64_MAX ? INT64_MAX : req->deadline_ns - baton_now_ns();
            int64_t s = left == INT64_MAX ? e->chunk_s : (left + 999999999) / 1000000000;
            timeout_s = (int)(s > e->chunk_s ? e->chunk_s : s < 1 ? 1 : s);
        }
        if (!(sql = bump_sql(e, l, req->owner, timeout_s))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto fail;
        }
        rc = wait ? my_wait(e, c, sql, req->deadline_ns, req->waiter, NULL) : my_exec(e, c, sql, NULL);
        free(sql);
        if (rc == 0 && mysql_affected_rows(c) == 0) {
            /* no row yet: make it outside the transaction (autocommit),
             * then lock it in a new one */
            if (made++) {
                rc = baton_seterr(BATON_EPROTO, 0, "mysql: lock '%s': its row vanished", l->name);
                goto abort;
            }
            if ((rc = rollback(e, c)) || (rc = ensure_row(e, c, l)) ||
                (rc = my_exec(e, c, "START TRANSACTION", NULL)))
                goto fail;
            continue;
        }
        if (rc == 0) break;
        if (baton_error_last()->native == ER_LOCK_WAIT_TIMEOUT) {
            if (!wait) {
                rc = baton_seterr(BATON_ELOCKED, 0, "mysql: lock '%s' is held", l->name);
                goto abort;
            }
            if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
                rc = baton_seterr(BATON_ETIMEDOUT, 0, "mysql: lock '%s': wait timed out", l->name);
                goto abort;
            }
            continue;   /* the next second(s) of the wait */
        }
        if (rc == BATON_ETIMEDOUT || rc == BATON_ECANCELED) {
            rc = rc == BATON_ETIMEDOUT ? baton_seterr(BATON_ETIMEDOUT, 0, "mysql: lock '%s': wait timed out", l->name)
                                       : baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
            goto abort;
        }
        goto fail;
    }
    if (wait && req->waiter && baton_waiter_canceled(req->waiter)) {
        rc = baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
        goto abort;
    }
    l->fence = req->fence = mysql_insert_id(c);
    l->conn = c;
    req->sent_ns = baton_now_ns();
    my_watch_add(e, l);
    return 0;
abort:
    {
        baton_error keep = *baton_error_last();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", keep.message ? keep.message : "");
        if (rollback(e, c)) goto fail_keep;
        my_conn_put(e, c);
        return baton_seterr(keep.code, keep.native, "%s", msg);
fail_keep:
        my_conn_close(c);
        return baton_seterr(keep.code, keep.native, "%s", msg);
    }
fail:
    /* a transaction in an unknown state holds what it holds: close it */
    my_conn_close(c);
    return rc;
}

int my_row_release(myeng *e, mylock *l)
{
    MYSQL *c = l->conn;
    int rc;

    my_watch_del(e, l);
    l->conn = NULL;
    l->fence = 0;
    if (!c) return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': its connection is gone", l->name);
    /* a transaction the server ended (rolled back) held nothing since */
    rc = in_trans_or_lost(c) ? my_exec(e, c, "COMMIT", NULL) : BATON_ELOST;
    if (rc) {
        my_conn_close(c);
        return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': its transaction ended before the release", l->name);
    }
    my_conn_put(e, c);
    return 0;
}

/* The keeper's check: the connection answers and the transaction is still open. */
int my_row_renew(myeng *e, mylock *l, int64_t deadline_ns)
{
    int rc;
    if (!l->conn) return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': no connection", l->name);
    /* not confirmed by the lease's deadline (or within the I/O timeout): cut and LOST */
    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    my_watch_busy(e, l, 1);
    rc = my_exec_dl(e, l->conn, "DO 1", NULL, deadline_ns);
    if (rc == 0 && in_trans_or_lost(l->conn)) {
        my_watch_busy(e, l, 0);
        return 0;
    }
    my_watch_del(e, l);
    my_conn_close(l->conn);
    l->conn = NULL;
    return baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': its transaction ended", l->name);
}

int my_row_info(myeng *e, mylock *l, baton_lockinfo *out)
{
    MYSQL *c = NULL;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *probe = my_sql(e, "SELECT 1 FROM @T WHERE name = %s FOR UPDATE NOWAIT", l->esc);
    char *look = my_sql(e, "SELECT fence, holder FROM @T WHERE name = %s", l->esc);
    int rc, held = 0;

    if (!probe || !look) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_conn_get(e, &c))) goto out;
    if ((rc = my_exec(e, c, "START TRANSACTION", NULL))) goto out;
    rc = my_exec(e, c, probe, &r);
    mysql_free_result(r);
    r = NULL;
    if (rc && baton_error_last()->native == ER_LOCK_WAIT_TIMEOUT) held = 1;
    else if (rc) goto out;
    if ((rc = rollback(e, c))) goto out;
    /* the holder's fence and holder are not committed yet: read them dirty */
    if (held && (rc = my_exec(e, c, "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", NULL))) goto out;
    if ((rc = my_exec(e, c, look, &r))) goto out;
    out->held = held;
    if ((row = mysql_fetch_row(r))) {
        out->fence = row[0] ? strtoull(row[0], NULL, 10) : 0;
        if (held && row[1]) snprintf(out->holder, sizeof out->holder, "%s", row[1]);
    }
out:
    mysql_free_result(r);
    if (c && rc) my_conn_close(c);
    else my_conn_put(e, c);
    free(probe);
    free(look);
    return rc;
}
