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
 * Wake-ups, no herd: a fair lock's release NOTIFYs the fair table's channel
 * with the name (a lease-mode release NOTIFYs the lock channel), which only
 * the head watches; the DELETE of step 4 NOTIFYs "#<its seq>", which only
 * the waiter right behind it watches (the head check names that entry). So
 * a handoff costs the same whatever the queue's length: the head's check,
 * grant and dequeue, the next waiter's check and try. Nothing notifies when
 * a holder or waiter dies, or when a plain (unfair) holder releases in
 * session or row mode: waiters re-check every RECHECK_MS.
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

#define LIVE PG_FAIR_LIVE

/* $1 name, $2 owner, $3 holder, $4 ttl ms; dead entries of the name go first */
static const char enqueue_sql[] =
    "WITH gc AS (DELETE FROM @F f WHERE f.name = $1 AND NOT " LIVE("f") ") "
    "INSERT INTO @F (name, owner, holder, pid, lease_until) VALUES ($1, $2, $3, pg_backend_pid(), "
    "clock_timestamp() + $4::bigint * interval '1 millisecond') RETURNING seq";

/* $1 name, $2 seq, $3 ttl ms: renews our entry; (entry still there, the
 * live entry just ahead of ours: NULL = we are the head, that entry is the
 * head) */
static const char head_sql[] =
    "WITH me AS (UPDATE @F SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' "
    "WHERE seq = $2::bigint RETURNING seq) "
    "SELECT (SELECT count(*) FROM me), p.seq, p.seq IS NOT NULL AND NOT EXISTS (SELECT 1 FROM @F f "
    "WHERE f.name = $1 AND f.seq < p.seq AND " LIVE("f") ") "
    "FROM (SELECT max(f.seq) AS seq FROM @F f WHERE f.name = $1 AND f.seq < $2::bigint AND " LIVE("f") ") p";

/* $1 seq, $2 channel: the payload "#<seq>" wakes the waiter behind us only */
static const char dequeue_sql[] = "DELETE FROM @F WHERE seq = $1::bigint RETURNING pg_notify($2, '#' || seq)";

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

/* Step 2: 0 with *head, or PRED the seq of the live entry ahead; the
 * connection's failure as an error. *gone: our entry was reaped (its lease
 * ended while we could not renew it). */
static int head_check(pgeng *e, PGconn *c, pglock *l, const char *seq, int64_t by, int *head, char pred[24],
                      int *second, int *gone)
{
    char ttl[16];
    const char *p[3] = { l->name, seq, ttl };
    PGresult *r = NULL;
    int rc;
    snprintf(ttl, sizeof ttl, "%d", FAIR_TTL_MS);
    if ((rc = qexec(e, c, head_sql, 3, p, by, &r))) return rc;
    *gone = !strcmp(PQgetvalue(r, 0, 0), "0");
    *head = PQgetisnull(r, 0, 1);
    snprintf(pred, 24, "%s", *head ? "" : PQgetvalue(r, 0, 1));
    *second = !strcmp(PQgetvalue(r, 0, 2), "t");
    PQclear(r);
    return 0;
}

/* What a waiter watches: as the head, its name on the fair channel (a fair
 * release) and on the lock channel (a lease-mode release); behind it,
 * "#<seq>" of the entry just ahead (that entry leaving), and the second in
 * line the name too (a release finds a head that died). A handoff wakes two
 * waiters, not the whole queue. */
typedef struct {
    pgwait f, n, l;          /* "#<seq>" and the name on the fair channel; the name on the lock channel */
    int linked[3];
    char key[32];
} watch;

static void watch_link(pgeng *e, watch *w, int i, int on, int *rc)
{
    pgwait *pw = i == 0 ? &w->f : i == 1 ? &w->n : &w->l;
    if (w->linked[i] && !on) pg_wait_unlink(e, pw);
    if (!w->linked[i] && on && !*rc && !(*rc = pg_wait_link(e, pw))) w->linked[i] = 1;
    if (!on) w->linked[i] = 0;
}

/* Watches what a waiter at its place waits for (HEAD, or behind PRED,
 * SECOND when PRED is the head); 1 when that changed. */
static int watch_set(pgeng *e, watch *w, int head, const char *pred, int second, int *rc)
{
    char want[32];
    int behind = !head, name = head || second;
    snprintf(want, sizeof want, "#%s", pred);
    if (w->linked[0] == behind && w->linked[1] == name && w->linked[2] == name &&
        (!behind || !strcmp(w->key, want)))
        return 0;
    watch_link(e, w, 0, 0, rc);
    memcpy(w->key, want, sizeof want);
    watch_link(e, w, 0, behind, rc);
    watch_link(e, w, 1, name, rc);
    watch_link(e, w, 2, name, rc);
    return 1;
}

int pg_fair_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    watch w = { { PG_CH_FAIR, w.key, req->waiter, NULL }, { PG_CH_FAIR, l->name, req->waiter, NULL },
                { PG_CH_LOCK, l->name, req->waiter, NULL }, { 0, 0, 0 }, "" };
    PGconn *c = NULL;
    char seq[24] = "";
    int rc;
    int64_t by = req->deadline_ns == INT64_MAX ? INT64_MAX : req->deadline_ns + PG_WAIT_GRACE_NS;

    if ((rc = pg_coord_ready(e, PG_CH_FAIR))) return rc;
    if (req->deadline_ns == 0 || !req->waiter) {
        if ((rc = fair_try(e, l, req)) == 0) l->fair = 1;
        return rc;
    }
    /* until the first head check: the name (never missed: the check runs after) */
    watch_set(e, &w, 1, "", 0, &rc);
    if (rc) goto out;
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        int head = 0, second = 0, gone = 0, down = 0, moved = 0;
        char pred[24] = "";
        int64_t until;

        if (!c) rc = enqueue(e, l, req, by, &c, seq);
        else rc = 0;
        if (rc == 0 && (rc = head_check(e, c, l, seq, by, &head, pred, &second, &gone))) {
            /* the waiter's connection ended (terminated, a restart): its
             * entry went with it; enqueue again on a new one */
            PQfinish(c);
            c = NULL;
        } else if (rc == 0 && gone) {
            pg_conn_put(e, c);
            c = NULL;
            continue;
        }
        /* watch what we wait for now; behind a new entry, check again
         * first (it may have left before we watched it) */
        if (rc == 0) moved = watch_set(e, &w, head, pred, second, &rc);
        if (rc == 0 && moved && !head) continue;
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
out:
    for (int i = 0; i < 3; i++) {
        int ignore = 0;
        watch_link(e, &w, i, 0, &ignore);
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
