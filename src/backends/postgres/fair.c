/*
 * Fair (FIFO) locks, in every mode: a queue table, <table>_fair (coord.c),
 * in front of the mode's own grant. A fair acquire
 *   1. enqueues: one INSERT of (name, owner, pid, lease_until) on a
 *      connection it keeps for the whole wait; seq (bigserial) is its place;
 *   2. waits until it is the head: no live entry of the name has a smaller
 *      seq. An entry is live while its backend (pid, in pg_stat_activity)
 *      lives AND its lease (FAIR_TTL_MS, renewed by the waiter at every
 *      re-check) is not over: a killed waiter's connection ends with it, so
 *      its entry is dead at once; a waiter whose link froze is passed over
 *      when its lease ends;
 *   3. as the head, tries the mode's grant (session: pg_try_advisory_lock,
 *      lease: the claim, row: FOR UPDATE NOWAIT), so fences and holders are
 *      the mode's, and parks again when the lock is held;
 *   4. leaves the queue (DELETE + NOTIFY) when granted, timed out or
 *      cancelled: the next waiter is the head at once.
 * Only the head tries, so a waiter behind it never barges; a try
 * (deadline 0) is refused while any live waiter is queued.
 *
 * Wake-ups: the DELETE of step 4 and a fair lock's release NOTIFY the fair
 * table's channel with the name (a lease-mode release NOTIFYs the lock
 * channel, which waiters also watch); every waiter of the name in a client
 * wakes and runs one statement (the head check), so a handoff costs one
 * statement per waiter: a herd, bounded by the queue's length. Nothing
 * notifies when a holder or waiter dies, or when a plain (unfair) holder
 * releases in session or row mode: waiters re-check every RECHECK_MS.
 * Server restart: waiters' connections end; each re-enqueues on a new one
 * (the order among them is the order of re-enqueueing).
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIR_TTL_MS 5000         /* a waiter's entry lives this long past its last re-check */
#define RECHECK_MS 1000          /* a waiter re-checks at least this often */
#define RECHECK_DOWN_MS 200      /* ... while the listener or the server is away */

/* An entry that still counts: its backend lives and its lease is not over. */
#define LIVE(f) "(" f ".lease_until > clock_timestamp() AND EXISTS (SELECT 1 FROM pg_stat_activity a " \
                "WHERE a.pid = " f ".pid))"

/* $1 name, $2 owner, $3 holder, $4 ttl ms; dead entries of the name go first */
static const char enqueue_sql[] =
    "WITH gc AS (DELETE FROM @F f WHERE f.name = $1 AND NOT " LIVE("f") ") "
    "INSERT INTO @F (name, owner, holder, pid, lease_until) VALUES ($1, $2, $3, pg_backend_pid(), "
    "clock_timestamp() + $4::bigint * interval '1 millisecond') RETURNING seq";

/* $1 name, $2 seq, $3 ttl ms: renews our entry; (entry still there, head) */
static const char head_sql[] =
    "WITH me AS (UPDATE @F SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' "
    "WHERE seq = $2::bigint RETURNING seq) "
    "SELECT (SELECT count(*) FROM me), NOT EXISTS (SELECT 1 FROM @F f WHERE f.name = $1 AND f.seq < $2::bigint "
    "AND " LIVE("f") ")";

/* $1 seq, $2 channel */
static const char dequeue_sql[] = "DELETE FROM @F WHERE seq = $1::bigint RETURNING pg_notify($2, name)";

/* $1 name: nobody waits (a try may go ahead) */
static const char empty_sql[] = "SELECT NOT EXISTS (SELECT 1 FROM @F f WHERE f.name = $1 AND " LIVE("f") ")";

/* $1 channel, $2 name */
static const char notify_sql[] = "SELECT pg_notify($1, $2)";

/* One statement on the waiter's own connection C: by the I/O timeout and,
 * for a waiter, BY (its deadline plus the lock wait's grace). */
static int qexec(pgeng *e, PGconn *c, const char *tmpl, int n, const char *const *p, int64_t by, PGresult **r)
{
    char *sql = pg_coord_sql(e, tmpl);
    int64_t io = pg_deadline_ms(e->io_timeout_ms);
    int rc;
    *r = NULL;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = pg_exec(e, c, sql, n, p, by < io ? by : io, NULL, r);
    free(sql);
    if (rc == BATON_ETIMEDOUT) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: no answer in time");
    return rc;
}

/* The mode's own grant, as a try. */
static int mode_try(pgeng *e, pglock *l, baton_acquire_req *req)
{
    baton_acquire_req t = *req;
    int rc;
    t.deadline_ns = 0;
    rc = e->mode == PG_ROW       ? pg_row_acquire(e, l, &t)
         : e->mode == PG_SESSION ? pg_session_acquire(e, l, &t)
                                 : pg_lease_acquire(e, l, &t);
    req->fence = t.fence;
    req->sent_ns = t.sent_ns;
    return rc;
}

static int fair_try(pgeng *e, pglock *l, baton_acquire_req *req)
{
    const char *p[1] = { l->name };
    PGresult *r = NULL;
    int rc, empty;
    if ((rc = pg_coord_run(e, empty_sql, 1, p, 1, INT64_MAX, &r))) return rc;
    empty = !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    if (!empty) return baton_seterr(BATON_ELOCKED, 0, "postgres: lock '%s': fair waiters are queued", l->name);
    return mode_try(e, l, req);
}

/* Step 1 on a new connection: *c and *seq, or an error (*c NULL). */
static int enqueue(pgeng *e, pglock *l, baton_acquire_req *req, int64_t by, PGconn **c, char seq[24])
{
    char ttl[16];
    const char *p[4] = { l->name, req->owner->hex, req->owner->desc, ttl };
    PGresult *r = NULL;
    int rc;

    snprintf(ttl, sizeof ttl, "%d", FAIR_TTL_MS);
    if ((rc = pg_conn_get_by(e, by, c))) {
        *c = NULL;
        return rc;
    }
    if ((rc = qexec(e, *c, enqueue_sql, 4, p, by, &r)) == 0) snprintf(seq, 24, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    if (rc) {
        pg_conn_put(e, *c);
        *c = NULL;
    }
    return rc;
}

/* Leaves the queue (and wakes it); a connection that fails is closed,
 * which ends the entry as well. */
static void dequeue(pgeng *e, PGconn *c, const char *seq)
{
    const char *p[2] = { seq, e->cchannel[PG_CH_FAIR] };
    PGresult *r = NULL;
    if (qexec(e, c, dequeue_sql, 2, p, INT64_MAX, &r)) pg_conn_drop(c);
    PQclear(r);
    pg_conn_put(e, c);
}

/* Step 2: 0 with *head; the connection's failure as an error. *gone: our
 * entry was reaped (its lease ended while we could not renew it). */
static int head_check(pgeng *e, PGconn *c, pglock *l, const char *seq, int64_t by, int *head, int *gone)
{
    char ttl[16];
    const char *p[3] = { l->name, seq, ttl };
    PGresult *r = NULL;
    int rc;
    snprintf(ttl, sizeof ttl, "%d", FAIR_TTL_MS);
    if ((rc = qexec(e, c, head_sql, 3, p, by, &r))) return rc;
    *gone = !strcmp(PQgetvalue(r, 0, 0), "0");
    *head = !strcmp(PQgetvalue(r, 0, 1), "t");
    PQclear(r);
    return 0;
}

int pg_fair_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    pgwait wf = { PG_CH_FAIR, l->name, req->waiter, NULL }, wl = { PG_CH_LOCK, l->name, req->waiter, NULL };
    PGconn *c = NULL;
    char seq[24] = "";
    int rc, linked = 0;
    int64_t by = req->deadline_ns == INT64_MAX ? INT64_MAX : req->deadline_ns + PG_WAIT_GRACE_NS;

    if ((rc = pg_coord_ready(e, PG_CH_FAIR))) return rc;
    if (req->deadline_ns == 0 || !req->waiter) {
        if ((rc = fair_try(e, l, req)) == 0) l->fair = 1;
        return rc;
    }
    /* wakes are watched before we enqueue: none is missed */
    if ((rc = pg_wait_link(e, &wf))) return rc;
    if ((rc = pg_wait_link(e, &wl))) {
        pg_wait_unlink(e, &wf);
        return rc;
    }
    linked = 1;
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        int head = 0, gone = 0, down = 0;
        int64_t until;

        if (!c) rc = enqueue(e, l, req, by, &c, seq);
        else rc = 0;
        if (rc == 0 && (rc = head_check(e, c, l, seq, by, &head, &gone))) {
            /* the waiter's connection ended (terminated, a restart): its
             * entry went with it; enqueue again on a new one */
            PQfinish(c);
            c = NULL;
        } else if (rc == 0 && gone) {
            pg_conn_put(e, c);
            c = NULL;
            continue;
        }
        if (rc == 0 && head) {
            rc = mode_try(e, l, req);
            if (rc == 0) break;
        }
        if (rc && rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) break;
        down = rc == BATON_EUNAVAILABLE;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': wait timed out%s", l->name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        until = baton_now_ns() +
                (int64_t)(pg_listening(e) && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
            break;
        }
    }
    if (c) dequeue(e, c, seq);
    if (linked) {
        pg_wait_unlink(e, &wl);
        pg_wait_unlink(e, &wf);
    }
    if (rc == 0) l->fair = 1;
    return rc;
}

void pg_fair_released(pgeng *e, pglock *l)
{
    const char *p[2] = { e->cchannel[PG_CH_FAIR], l->name };
    PGresult *r = NULL;
    /* best effort: a waiter that misses it re-checks within RECHECK_MS */
    if (pg_run(e, notify_sql, 2, p, 1, &r) == 0) PQclear(r);
}
