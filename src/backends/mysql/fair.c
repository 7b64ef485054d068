/*
 * Fair (FIFO) locks, in every mode: a queue table, <table>_fair (seq
 * AUTO_INCREMENT, name, owner, holder, lease_until), in front of the mode's
 * own lock. A waiter appends its entry (one INSERT: its seq is its place),
 * then at every try moves its entry's short lease on (one UPDATE), reads
 * the head (one SELECT: the smallest live seq of the name) and, only when
 * it is the head, tries the mode's lock once (GET_LOCK(name, 0), the row
 * lock without waiting, or the lease claim); granted, it deletes its entry.
 * A fair try (deadline 0) is refused while anyone is queued: it never jumps
 * the queue.
 *
 * An entry's lease is the lock's lease, held between 1 s and
 * MY_WAITER_TTL_MS: a waiter that dies (SIGKILL, a lost connection) stops
 * moving it, and the queue goes on past it when it ends; the next try that
 * sees such entries deletes them. A waiter that was paused past its entry's
 * lease finds its entry gone and queues again at the tail. A waiter that
 * gives up (timeout, cancel) deletes its entry at once.
 *
 * Non-fair acquires of the same name do not look at the queue (they may
 * barge in, as with Redisson's fair and plain locks on one name). MariaDB
 * cannot notify: waiters try again after a jittered backoff (20 ms doubling
 * to MY_POLL_MS), at once after a release through this client.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MY_WAITER_TTL_MS 3000    /* a queue entry's lease, at most */
#define MY_WAITER_TTL_MIN 1000   /* ... and at least (several tries fit in it) */

typedef struct {
    myeng *e;
    mylock *l;
    baton_acquire_req *req;
    uint64_t seq;            /* our queue entry, 0 when none */
    char *owner, *holder;    /* escaped */
    uint32_t ttl_ms;
} fairtry;

/* The mode's lock, tried once. */
static int mode_try(myeng *e, mylock *l, baton_acquire_req *req)
{
    baton_acquire_req one = *req;
    int rc;
    one.deadline_ns = 0;
    if (e->mode == MY_ROW) rc = my_row_acquire(e, l, &one);
    else if (e->mode == MY_SESSION) rc = my_session_acquire(e, l, &one);
    else rc = my_lease_acquire(e, l, &one);
    if (rc == 0) {
        req->fence = one.fence;
        req->sent_ns = one.sent_ns;
    }
    return rc;
}

static int run(fairtry *t, int64_t dl, uint64_t *affected, uint64_t *id, MYSQL_RES **res, char *sql)
{
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run_dl(t->e, sql, res ? 1 : 0, res, affected, id, dl);
    free(sql);
    return rc;
}

static int fair_try(void *arg, int64_t sent, int64_t dl)
{
    fairtry *t = arg;
    myeng *e = t->e;
    mylock *l = t->l;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    uint64_t affected = 0, head = 0, expired = 0;
    int rc;
    (void)sent;

    if (t->req->deadline_ns == 0 || !t->req->waiter) {
        /* a try: only when nobody is queued */
        rc = run(t, dl, NULL, NULL, &r, my_sql(e, "SELECT COUNT(*) FROM @F WHERE name = %s AND lease_until > "
                                                  "UTC_TIMESTAMP(6)", l->esc));
        if (!rc && my_cell(r, 0) && strtoull(my_cell(r, 0), NULL, 10) > 0)
            rc = baton_seterr(BATON_ELOCKED, 0, "mysql: fair lock '%s' has waiters", l->name);
        mysql_free_result(r);
        return rc ? rc : mode_try(e, l, t->req);
    }
    if (t->seq) {
        /* 0 rows: our entry's lease ended (we were paused): it is not
         * revived, we queue again at the tail */
        rc = run(t, dl, &affected, NULL, NULL,
                 my_sql(e, "UPDATE @F SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND "
                           "WHERE seq = %" PRIu64 " AND lease_until > UTC_TIMESTAMP(6)", (uint64_t)t->ttl_ms * 1000, t->seq));
        if (rc) return rc;
        if (affected == 0) t->seq = 0;
    }
    if (!t->seq) {
        /* not run twice: that would be two entries */
        rc = run(t, dl, NULL, &t->seq, NULL,
                 my_sql(e, "INSERT INTO @F (name, owner, holder, lease_until) VALUES (%s, %s, %s, UTC_TIMESTAMP(6) "
                           "+ INTERVAL %" PRIu64 " MICROSECOND)", l->esc, t->owner, t->holder,
                           (uint64_t)t->ttl_ms * 1000));
        if (rc) return rc;
    }
    rc = run(t, dl, NULL, NULL, &r,
             my_sql(e, "SELECT MIN(IF(lease_until > UTC_TIMESTAMP(6), seq, NULL)), SUM(lease_until <= "
                       "UTC_TIMESTAMP(6)) FROM @F WHERE name = %s", l->esc));
    if (!rc && (row = mysql_fetch_row(r))) {
        head = row[0] ? strtoull(row[0], NULL, 10) : 0;
        expired = row[1] ? strtoull(row[1], NULL, 10) : 0;
    }
    mysql_free_result(r);
    if (rc) return rc;
    if (expired > 0)
        (void)run(t, dl, NULL, NULL, NULL, my_sql(e, "DELETE FROM @F WHERE name = %s AND lease_until <= "
                                                     "UTC_TIMESTAMP(6)", l->esc));
    if (head != t->seq)
        return baton_seterr(BATON_ELOCKED, 0, "mysql: fair lock '%s': waiting behind entry %" PRIu64, l->name, head);
    return mode_try(e, l, t->req);
}

int my_fair_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    fairtry t = { e, l, req, 0, my_escape(req->owner->hex), my_escape(req->owner->desc), 0 };
    char what[300];
    int rc;

    t.ttl_ms = req->lease_ms < MY_WAITER_TTL_MS ? req->lease_ms : MY_WAITER_TTL_MS;
    if (t.ttl_ms < MY_WAITER_TTL_MIN) t.ttl_ms = MY_WAITER_TTL_MIN;
    if (!t.owner || !t.holder) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_aux_ready(e, MY_AUX_FAIR))) goto out;
    snprintf(what, sizeof what, "fair lock '%.200s'", l->name);
    rc = my_poll_wait(e, req->waiter, req->deadline_ns, what, fair_try, &t);
    if (t.seq) {
        /* granted, or given up: out of the queue at once (the next in line
         * goes on without waiting for the entry's lease) */
        char msg[512];
        long native = baton_error_last()->native;
        char *sql = my_sql(e, "DELETE FROM @F WHERE seq = %" PRIu64, t.seq);
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        if (sql && my_run_dl(e, sql, 1, NULL, NULL, NULL, my_deadline_ms(e->io_timeout_ms)) == 0 && rc)
            my_wake_local(e);
        free(sql);
        if (rc) rc = baton_seterr(rc, native, "%s", msg);
    }
out:
    free(t.owner);
    free(t.holder);
    return rc;
}
