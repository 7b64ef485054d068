/*
 * Read-write locks (session mode): the read side is a shared advisory lock
 * (pg_advisory_lock_shared), the write side an exclusive one, on the name's
 * key. PostgreSQL's lock manager gives the rest: many readers or one writer,
 * and a queued writer holds back new readers (a try by a new reader then
 * fails), so writers are not starved.
 *
 * Both sides of one rwlock live on one connection (pgrw.conn), taken when the
 * first side is granted and given back when neither is held. That is what
 * makes the downgrade work: the writer asks for the shared lock on the
 * session that holds the exclusive one, which PostgreSQL grants at once even
 * with other sessions queued. An upgrade (write while the read side is held)
 * is refused by the core; we refuse it too, since on one session it would
 * not wait for the other readers.
 *
 * Every grant of either side bumps the name's fence, as for plain locks.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const unlock_sql[2] = {
    "SELECT pg_advisory_unlock_shared($1::bigint)",
    "SELECT pg_advisory_unlock($1::bigint)",
};

static int side_of(const pglock *l) { return l->kind == PG_WRITE; }

/* Before rw->conn is closed (rw->mu held): neither side is watched. */
static void unwatch(pgeng *e, pgrw *rw)
{
    pg_watch_del(e, rw->side[0]);
    pg_watch_del(e, rw->side[1]);
}

/* Closes rw->conn (rw->mu held). */
static void close_conn(pgeng *e, pgrw *rw)
{
    unwatch(e, rw);
    PQfinish(rw->conn);
    rw->conn = NULL;
}

/* A statement on rw->conn (rw->mu held), with the watcher told. */
static int rw_exec(pgeng *e, pgrw *rw, const char *sql, int n, const char *const *p, int64_t deadline,
                   baton_waiter *w, PGresult **res)
{
    int64_t sent = baton_now_ns();
    int rc;
    pg_watch_busy(e, rw->conn, 1, 0);
    rc = pg_exec(e, rw->conn, sql, n, p, deadline, w, res);
    pg_watch_busy(e, rw->conn, 0, rc == 0 ? sent : 0);
    return rc;
}

/* Gives SIDE up on the server (rw->mu held): its unlock when the other side
 * keeps the connection, else the connection closed, which frees it. */
static void drop_locked(pgeng *e, pgrw *rw, int side, const char *key)
{
    if (!rw->held[side]) return;
    rw->held[side] = 0;
    pg_watch_del(e, rw->side[side]);
    if (!rw->conn) return;
    if (rw->held[!side]) {
        const char *p[1] = { key };
        PGresult *r = NULL;
        if (rw_exec(e, rw, unlock_sql[side], 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r) == 0) {
            PQclear(r);
            return;
        }
        rw->held[!side] = 0;   /* its keeper check finds the connection gone: LOST */
    }
    close_conn(e, rw);
}

void pg_rw_drop(pglock *l)
{
    pthread_mutex_lock(&l->rw->mu);
    drop_locked(l->e, l->rw, side_of(l), l->key);
    pthread_mutex_unlock(&l->rw->mu);
}

/* Runs the granting statement on C; 0 with the fence, BATON_ELOCKED, or an
 * error (then C may hold the lock: the caller closes it). */
static int grant_on(pgeng *e, pglock *l, PGconn *c, baton_acquire_req *req, int wait, int64_t deadline,
                    uint64_t *fence)
{
    pgrw *rw = l->rw;
    const char *p[4] = { l->name, l->key, req->owner->hex, req->owner->desc };
    PGresult *r = NULL;
    char *sql = pg_grant_sql(e, l->kind == PG_READ, wait);
    int rc;

    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* on the pair's connection (a downgrade) the watcher must not look at its answer */
    if (c == rw->conn) rc = rw_exec(e, rw, sql, 4, p, deadline, wait ? req->waiter : NULL, &r);
    else rc = pg_exec(e, c, sql, 4, p, deadline, wait ? req->waiter : NULL, &r);
    free(sql);
    if (rc == BATON_ETIMEDOUT && !wait)
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: lock '%s': no answer within %d ms", l->name,
                          e->io_timeout_ms);
    if (rc) return rc;
    if (PQntuples(r) == 1) *fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    else rc = baton_seterr(BATON_ELOCKED, 0, "postgres: lock '%s' is held", l->name);
    PQclear(r);
    return rc;
}

int pg_rw_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    pgrw *rw = l->rw;
    int side = side_of(l), wait = req->deadline_ns != 0, rc;
    uint64_t fence = 0;
    PGconn *c = NULL;

    pthread_mutex_lock(&rw->mu);
    drop_locked(e, rw, side, l->key);          /* a grant reported lost: gone for good now */
    if (rw->conn) {
        /* the other side is held: this session already has the key */
        if (side == 1) {
            pthread_mutex_unlock(&rw->mu);
            return baton_seterr(BATON_EDEADLK, 0, "postgres: lock '%s': the read side is held; a read lock "
                                "cannot be upgraded", l->name);
        }
        /* the downgrade: granted at once on the writer's session (the wait
         * form, since a try fails while other sessions queue for the key) */
        rc = grant_on(e, l, rw->conn, req, 1, pg_deadline_ms(e->io_timeout_ms), &fence);
        if (rc == 0) {
            rw->held[side] = 1;
            l->fence = fence;
            pg_watch_add(e, l, rw->conn, baton_now_ns());
        } else if (rc != BATON_ELOCKED) {
            /* the session is in doubt: close it; the write side is LOST at its next check */
            close_conn(e, rw);
            rw->held[0] = rw->held[1] = 0;
        }
        pthread_mutex_unlock(&rw->mu);
        goto done;
    }
    pthread_mutex_unlock(&rw->mu);

    /* neither side held: a connection of our own, and the server's queue */
    if ((rc = pg_conn_get_by(e, wait && req->deadline_ns != INT64_MAX ? req->deadline_ns + PG_WAIT_GRACE_NS
                                                                      : INT64_MAX, &c)))
        return rc;
    rc = grant_on(e, l, c, req, wait, wait ? req->deadline_ns : pg_deadline_ms(e->io_timeout_ms), &fence);
    if (rc == 0 && wait && req->waiter && baton_waiter_canceled(req->waiter))
        rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
    if (rc) {
        if (rc == BATON_ELOCKED) pg_conn_put(e, c);
        else PQfinish(c);                    /* it may hold the lock: never pooled */
        if (rc == BATON_ETIMEDOUT)
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': wait timed out", l->name);
        return rc;
    }
    pthread_mutex_lock(&rw->mu);
    if (rw->conn) {
        /* both sides granted at once from two threads: the core's one-owner
         * rule excludes it; give this grant back rather than keep two sessions */
        pthread_mutex_unlock(&rw->mu);
        PQfinish(c);
        return baton_seterr(BATON_EINVAL, 0, "postgres: lock '%s': both sides acquired at once", l->name);
    }
    rw->conn = c;
    rw->held[side] = 1;
    l->fence = fence;
    /* a terminated session is reported at once, not at the next check */
    pg_watch_add(e, l, c, baton_now_ns());
    pthread_mutex_unlock(&rw->mu);
done:
    if (rc == 0) {
        l->fence = req->fence = fence;
        req->sent_ns = baton_now_ns();
    }
    return rc;
}

int pg_rw_release(pgeng *e, pglock *l)
{
    pgrw *rw = l->rw;
    int side = side_of(l), rc = 0;
    const char *p[1] = { l->key };
    PGresult *r = NULL;

    l->fence = 0;
    pthread_mutex_lock(&rw->mu);
    if (!rw->held[side] || !rw->conn) {
        rw->held[side] = 0;
        pthread_mutex_unlock(&rw->mu);
        return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection is gone", l->name);
    }
    rw->held[side] = 0;
    pg_watch_del(e, l);
    if (rw_exec(e, rw, unlock_sql[side], 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r)) {
        close_conn(e, rw);
        rw->held[!side] = 0;
        rc = baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection failed before the release",
                          l->name);
    } else {
        if (strcmp(PQgetvalue(r, 0, 0), "t"))
            rc = baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': the server no longer held it", l->name);
        PQclear(r);
        if (!rw->held[!side]) {
            pg_conn_put(e, rw->conn);
            rw->conn = NULL;
        }
    }
    pthread_mutex_unlock(&rw->mu);
    return rc;
}

int pg_rw_renew(pgeng *e, pglock *l, int64_t deadline_ns)
{
    pgrw *rw = l->rw;
    int side = side_of(l), rc;
    int64_t io = pg_deadline_ms(e->io_timeout_ms);
    PGresult *r = NULL;

    pthread_mutex_lock(&rw->mu);
    if (!rw->held[side] || !rw->conn) {
        pthread_mutex_unlock(&rw->mu);
        return baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': no connection", l->name);
    }
    rc = rw_exec(e, rw, "SELECT 1", 0, NULL, deadline_ns < io ? deadline_ns : io, NULL, &r);
    PQclear(r);
    if (rc) {
        close_conn(e, rw);
        rw->held[0] = rw->held[1] = 0;
    }
    pthread_mutex_unlock(&rw->mu);
    return rc ? baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': its connection died", l->name) : 0;
}
