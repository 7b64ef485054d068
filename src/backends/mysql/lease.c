/*
 * Lease mode, the optimistic lock as ShedLock does it: the name's row
 * (owner, fence, lease_until) is claimed by one conditional upsert that
 * succeeds only when the row is free, its lease is over, or the claimant
 * already owns it, and bumps the fence in the same statement (the new
 * fence comes back through LAST_INSERT_ID(expr)). Every time is the
 * server's (UTC_TIMESTAMP(6)), so clients' clocks and time zones never
 * matter. No connection is held: the lock survives connection drops and
 * server restarts until its lease ends (statements reconnect).
 *
 * MariaDB cannot notify: a waiter claims again after a jittered backoff
 * (20 ms doubling to 500 ms), and right after the holder's lease is due to
 * end (a crashed holder never releases).
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500
#define RETRY_DOWN_MS 200        /* a waiter whose server is away claims again this often */

/* One claim: 0 with *fence, or BATON_ELOCKED. */
static int claim(myeng *e, mylock *l, const baton_owner *o, uint32_t lease_ms, uint64_t *fence, int64_t deadline)
{
    char *owner = my_escape(o->hex), *holder = my_escape(o->desc), *sql = NULL;
    uint64_t affected = 0, id = 0;
    int rc;

    if (owner && holder)
        /* ON DUPLICATE KEY UPDATE assigns left to right and later terms see
         * earlier ones: the condition is taken once, first, into @baton_ok */
        sql = my_sql(e, "INSERT INTO @T (name, fence, owner, holder, lease_until, acquired_at) "
                        "VALUES (%s, LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND, "
                        "UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
                        "fence = IF(@baton_ok := (owner IS NULL OR lease_until IS NULL OR "
                        "lease_until <= UTC_TIMESTAMP(6) OR owner = VALUES(owner)), LAST_INSERT_ID(fence + 1), fence), "
                        "holder = IF(@baton_ok, VALUES(holder), holder), "
                        "acquired_at = IF(@baton_ok, VALUES(acquired_at), acquired_at), "
                        "lease_until = IF(@baton_ok, VALUES(lease_until), lease_until), "
                        "owner = IF(@baton_ok, VALUES(owner), owner)",
                     l->esc, owner, holder, (uint64_t)lease_ms * 1000);
    free(owner);
    free(holder);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* safe to run twice: a second run by the same owner re-claims it */
    rc = my_run_dl(e, sql, 1, NULL, &affected, &id, deadline);
    free(sql);
    if (rc) return rc;
    if (affected == 0) return baton_seterr(BATON_ELOCKED, 0, "mysql: lock '%s' is held", l->name);
    *fence = id;
    return 0;
}

/* How long the holder's lease still runs (ms, -1 unknown). */
static int64_t lease_left(myeng *e, mylock *l, int64_t deadline)
{
    MYSQL_RES *r = NULL;
    const char *v;
    int64_t left = -1;
    char *sql = my_sql(e, "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until) FROM @T WHERE name = %s",
                       l->esc);
    if (!sql) return -1;
    if (my_run_dl(e, sql, 1, &r, NULL, NULL, deadline) == 0 && (v = my_cell(r, 0))) left = strtoll(v, NULL, 10) / 1000;
    mysql_free_result(r);
    free(sql);
    return left;
}

int my_lease_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    int64_t backoff = BACKOFF_MIN_MS;
    int rc;

    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t sent = baton_now_ns(), left, until, ms;
        /* every statement of a wait ends by the wait's deadline (a frozen
         * link: cut then); one claim alone by the I/O timeout */
        int64_t dl = my_deadline_ms(e->io_timeout_ms);
        if (req->deadline_ns != 0 && req->deadline_ns < dl) dl = req->deadline_ns;

        rc = claim(e, l, req->owner, req->lease_ms, &req->fence, dl);
        if (rc == 0) {
            l->fence = req->fence;
            req->sent_ns = sent;    /* the lease started no earlier than this */
            break;
        }
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || req->deadline_ns == 0 || !req->waiter) break;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "mysql: lock '%s': wait timed out%s", l->name,
                              rc == BATON_EUNAVAILABLE ? " (the server is unavailable)" : "");
            break;
        }
        if (rc == BATON_EUNAVAILABLE) {
            /* a waiter outlives a server that is away (a restart) */
            ms = RETRY_DOWN_MS;
        } else {
            /* jitter: waiters of one release do not claim in lockstep */
            ms = backoff / 2 + (int64_t)(baton_now_ns() % (backoff / 2 + 1));
            if (backoff < BACKOFF_MAX_MS) backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
            left = lease_left(e, l, dl);
            if (left >= 0 && left + 1 < ms) ms = left + 1;    /* the holder's lease ends */
        }
        until = baton_now_ns() + ms * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "mysql: lock '%s': acquire canceled", l->name);
            break;
        }
    }
    return rc;
}

int my_lease_release(myeng *e, mylock *l, const baton_owner *owner)
{
    char *o = my_escape(owner->hex), *sql = NULL, *check = NULL;
    MYSQL_RES *r = NULL;
    uint64_t affected = 0, fence = l->fence;
    int rc;

    if (o) {
        sql = my_sql(e, "UPDATE @T SET owner = NULL, holder = NULL, lease_until = NULL "
                        "WHERE name = %s AND owner = %s AND fence = %" PRIu64, l->esc, o, fence);
        check = my_sql(e, "SELECT 1 FROM @T WHERE name = %s AND owner IS NULL AND fence = %" PRIu64, l->esc, fence);
    }
    free(o);
    l->fence = 0;
    if (!sql || !check) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    /* Run again when the connection dies under it: a first run that
     * committed left the row free with our fence (nobody else frees a
     * grant of ours, and a new grant bumps the fence), which the check
     * below tells from a lease another owner took. */
    if ((rc = my_run(e, sql, 1, NULL, &affected, NULL)) || affected == 1) goto out;
    if ((rc = my_run(e, check, 1, &r, NULL, NULL))) goto out;
    if (mysql_num_rows(r) == 0)
        rc = baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': the lease had ended and another owner took it", l->name);
out:
    mysql_free_result(r);
    free(sql);
    free(check);
    return rc;
}

int my_lease_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char *o = my_escape(owner->hex), *sql = NULL, *check = NULL;
    MYSQL_RES *r = NULL;
    uint64_t affected = 0;
    int rc;

    /* the renewal ends by the lease's deadline, connecting included: a
     * frozen link or a hung server cannot hold the keeper past it */
    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    if (o) {
        sql = my_sql(e, "UPDATE @T SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND "
                        "WHERE name = %s AND owner = %s AND fence = %" PRIu64,
                     (uint64_t)lease_ms * 1000, l->esc, o, l->fence);
        check = my_sql(e, "SELECT 1 FROM @T WHERE name = %s AND owner = %s AND fence = %" PRIu64, l->esc, o, l->fence);
    }
    free(o);
    if (!sql || !check) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_run_dl(e, sql, 1, NULL, &affected, NULL, deadline_ns))) goto out;
    if (affected == 1) goto out;
    /* 0 rows changed: lost, or renewed twice within one microsecond */
    if ((rc = my_run_dl(e, check, 1, &r, NULL, NULL, deadline_ns))) goto out;
    if (mysql_num_rows(r) == 0)
        rc = baton_seterr(BATON_ELOST, 0, "mysql: lock '%s': the lease had ended and another owner took it", l->name);
out:
    mysql_free_result(r);
    free(sql);
    free(check);
    return rc;
}

int my_lease_info(myeng *e, mylock *l, baton_lockinfo *out)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *sql = my_sql(e, "SELECT fence, holder, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), lease_until), "
                          "owner IS NOT NULL AND lease_until > UTC_TIMESTAMP(6) FROM @T WHERE name = %s", l->esc);
    int rc;

    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, &r, NULL, NULL);
    free(sql);
    if (rc) return rc;
    if ((row = mysql_fetch_row(r))) {
        out->fence = row[0] ? strtoull(row[0], NULL, 10) : 0;
        out->held = row[3] && !strcmp(row[3], "1");
        if (out->held) {
            if (row[1]) snprintf(out->holder, sizeof out->holder, "%s", row[1]);
            out->remaining_ms = row[2] ? (strtoll(row[2], NULL, 10) + 999) / 1000 : -1;
            if (out->remaining_ms < 1) out->remaining_ms = 1;
        }
    }
    mysql_free_result(r);
    return 0;
}
