/*
 * The lease: one row per name (fence, owner, holder, lease_until, boot).
 * A claim is one short write transaction (BEGIN IMMEDIATE, so two claimants
 * never both read "free": the second waits for the write lock and then sees
 * the first's row): it reads the row and, when the lease is over, the row is
 * free, or the claimant already owns it, writes the new owner with the next
 * fence (one more than the row's, at least the wall clock in microseconds:
 * next_fence; a missing row is inserted). Renewal and release are one
 * owner- and fence-checked UPDATE each.
 *
 * Times are CLOCK_BOOTTIME milliseconds, which every process of the host
 * shares and which never jumps (wall-clock steps do not matter), with this
 * boot's id beside them: a row from another boot is expired.
 *
 * Waiting: SQLite cannot notify. A release touches the sidecar file
 * <db>-baton-wake after its commit; waiters' clients watch it with inotify
 * (wake.c) and claim again at once. A waiter also claims when the holder's
 * lease is due to end (a killed holder touches nothing) and at least every
 * recheck_ms; without a watch it backs off exponentially with jitter.
 */
#include "sq_int.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BACKOFF_MIN_MS 5         /* first sleep of a waiter without a watch */
#define BACKOFF_MAX_MS 250       /* ... growing to this (or recheck_ms when smaller) */

/* A small per-thread generator for jitter: waiters of several processes must
 * not claim in lock step. */
static uint32_t jitter_rand(void)
{
    static __thread uint32_t x;
    if (!x) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = (uint32_t)ts.tv_nsec ^ (uint32_t)getpid() << 16 ^ (uint32_t)(uintptr_t)&ts;
        if (!x) x = 1;
    }
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

/* MS scaled by a random factor in [0.75, 1.25). */
static int64_t jitter(int64_t ms)
{
    return ms * 3 / 4 + (ms > 1 ? (int64_t)(jitter_rand() % (uint32_t)(ms / 2 + 1)) : 0);
}

/* The fence of a new grant: one more than the row's, and at least the wall
 * clock in microseconds, as the file engine does. synchronous=NORMAL lets
 * a power loss take the last commits, so the stored fence may come back
 * lower than one already handed out; the clock floor keeps the next one
 * above it (unless the clock was set back meanwhile). */
uint64_t sq_next_fence(uint64_t stored)
{
    struct timespec ts;
    uint64_t floor;
    clock_gettime(CLOCK_REALTIME, &ts);
    floor = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    return stored + 1 > floor ? stored + 1 : floor;
}

/* One claim: 0 with *fence, BATON_ELOCKED with *left_ms (how long the
 * holder's lease still runs), or an error (BATON_EUNAVAILABLE when the
 * database stayed locked, BATON_ECANCELED when W was cancelled). TICKET:
 * NULL for a plain claim; for a fair one, the waiter's place in the line
 * (fairrw.c; 0 = none yet): granted only when nobody live is ahead. */
static int claim(sqeng *e, sqlock *l, baton_acquire_req *req, uint64_t *fence, int64_t *left_ms, int64_t *ticket)
{
    sqconn *c = NULL;
    sqlite3_stmt *sel = NULL, *put = NULL;
    int rc, broken = 0;
    int64_t now, until;

    *left_ms = -1;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, req->deadline_ns), req->waiter);
    if ((rc = sq_begin(e, c, req->waiter, "claim"))) goto out;
    /* the write lock is ours from BEGIN IMMEDIATE on: the clock read now is
     * the claim's moment for every process */
    now = sq_boot_ms();
    until = now + req->lease_ms;
    if (ticket && (rc = sq_fair_step(e, c, l->name, req, now, ticket, left_ms))) goto out;
    if ((rc = sq_prepare(e, c, "SELECT fence, owner, lease_until, boot FROM @T WHERE name = ?1", &sel))) goto out;
    sqlite3_bind_text(sel, 1, l->name, -1, SQLITE_STATIC);
    rc = sqlite3_step(sel);
    if (rc == SQLITE_ROW) {
        const char *owner = (const char *)sqlite3_column_text(sel, 1);
        const char *boot = (const char *)sqlite3_column_text(sel, 3);
        int64_t lu = sqlite3_column_int64(sel, 2);
        int free_row = !owner || sqlite3_column_type(sel, 2) == SQLITE_NULL || !boot || strcmp(boot, e->boot) ||
                       lu <= now;
        if (!free_row && strcmp(owner, req->owner->hex)) {
            *left_ms = lu - now;
            rc = baton_seterr(BATON_ELOCKED, 0, "sqlite: lock '%s' is held", l->name);
            /* a fair wait takes its place in the line (refreshed at least every lease/3) */
            if (ticket && req->deadline_ns != 0 && !(rc = sq_fair_join(e, c, l->name, req, now, ticket))) {
                if (*left_ms > req->lease_ms / 3 + 1) *left_ms = req->lease_ms / 3 + 1;
                rc = baton_seterr(BATON_ELOCKED, 0, "sqlite: lock '%s' is held", l->name);
            }
            goto out;
        }
        *fence = sq_next_fence((uint64_t)sqlite3_column_int64(sel, 0));
        sqlite3_reset(sel);   /* done reading (owner and boot are gone now) */
        rc = sq_prepare(e, c, "UPDATE @T SET fence = ?2, owner = ?3, holder = ?4, lease_until = ?5, boot = ?6, "
                        "acquired_at = ?7 WHERE name = ?1", &put);
    } else if (rc == SQLITE_DONE) {
        *fence = sq_next_fence(0);
        rc = sq_prepare(e, c, "INSERT INTO @T (name, fence, owner, holder, lease_until, boot, acquired_at) "
                        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", &put);
    } else {
        rc = sq_err(e, c, rc, "claim");
    }
    if (rc) goto out;
    sqlite3_bind_text(put, 1, l->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(put, 2, (sqlite3_int64)*fence);
    sqlite3_bind_text(put, 3, req->owner->hex, -1, SQLITE_STATIC);
    sqlite3_bind_text(put, 4, req->owner->desc, -1, SQLITE_STATIC);
    sqlite3_bind_int64(put, 5, until);
    sqlite3_bind_text(put, 6, e->boot, -1, SQLITE_STATIC);
    sqlite3_bind_int64(put, 7, (sqlite3_int64)time(NULL) * 1000);  /* for people reading the table */
    if ((rc = sqlite3_step(put)) != SQLITE_DONE) {
        rc = sq_err(e, c, rc, "claim");
        goto out;
    }
    if (ticket && (rc = sq_fair_granted(e, c, ticket))) goto out;
    sqlite3_finalize(sel);
    sqlite3_finalize(put);
    sel = put = NULL;
    if ((rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        rc = sq_err(e, c, rc, "commit the claim");
        broken = 1;   /* the transaction's state is unknown: do not reuse */
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(put);
    if (rc == BATON_ELOCKED && ticket && *ticket && !sqlite3_get_autocommit(c->db)) {
        /* keep the line's changes (our row, its refresh, the dead gone) */
        int crc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
        if (crc != SQLITE_OK) {
            rc = sq_err(e, c, crc, "commit the fair line");
            broken = 1;
            *ticket = 0;   /* unknown: the row's lease ends it if it was written */
        }
    }
    sq_conn_put(e, c, broken);   /* rolls back an open transaction */
    return rc;
}

int sq_wait(sqeng *e, baton_waiter *w, int64_t deadline, const char *what,
            int (*attempt)(void *arg, int64_t *left_ms), void *arg)
{
    sqwait me = { w, NULL };
    int rc, linked = 0, busy = 0;
    int64_t backoff = BACKOFF_MIN_MS;
    char why[200] = "";

    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        int64_t left = -1, until, nap;
        int watching;

        rc = attempt(arg, &left);
        if (rc == 0) break;
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || deadline == 0 || !w) break;
        /* a database locked by a long foreign transaction: keep trying until
         * the deadline, then say so */
        busy = rc == BATON_EUNAVAILABLE;
        if (busy) snprintf(why, sizeof why, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        if (!linked) {
            /* watch before the next attempt, so a release between that
             * attempt and the park still wakes us (it bumps the generation) */
            sq_wake_watch(e);
            pthread_mutex_lock(&e->mu);
            me.next = e->waits;
            e->waits = &me;
            pthread_mutex_unlock(&e->mu);
            linked = 1;
            continue;
        }
        if (deadline != INT64_MAX && baton_now_ns() >= deadline) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "sqlite: %s: wait timed out%s%s%s", what, busy ? " (last: " : "",
                              why, busy ? ")" : "");
            break;
        }
        pthread_mutex_lock(&e->mu);
        watching = e->watching;
        pthread_mutex_unlock(&e->mu);
        if (watching && !busy) {
            /* a release wakes us: try again only now and then, in case a
             * wake-up was lost (the sidecar replaced, inotify overflow) */
            nap = jitter(e->recheck_ms);
        } else {
            int64_t cap = e->recheck_ms < BACKOFF_MAX_MS ? e->recheck_ms : BACKOFF_MAX_MS;
            nap = jitter(backoff);
            backoff = backoff * 2 > cap ? cap : backoff * 2;
        }
        until = baton_now_ns() + nap * 1000000LL;
        /* the holder's lease ends: a killed holder wakes nobody. A few ms of
         * jitter spread the waiters of several processes. */
        if (left >= 0) {
            int64_t end = baton_now_ns() + (left + 1 + (int64_t)(jitter_rand() % 8)) * 1000000LL;
            if (end < until) until = end;
        }
        if (until > deadline) until = deadline;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "sqlite: %s: canceled", what);
            break;
        }
    }
    if (linked) {
        pthread_mutex_lock(&e->mu);
        for (sqwait **pp = &e->waits; *pp; pp = &(*pp)->next)
            if (*pp == &me) {
                *pp = me.next;
                break;
            }
        pthread_mutex_unlock(&e->mu);
    }
    return rc;
}

typedef struct {
    sqeng *e;
    sqlock *l;
    baton_acquire_req *req;
    int64_t ticket;          /* a fair waiter's row in the line, 0 = none */
    int64_t refreshed;       /* when its row's lease was last refreshed (sq_boot_ms) */
} claim_arg;

static int claim_attempt(void *arg, int64_t *left_ms)
{
    claim_arg *a = arg;
    int64_t sent = baton_now_ns(), before = sq_boot_ms();
    int rc;
    if (a->ticket && before - a->refreshed < (int64_t)a->req->lease_ms / 3) {
        /* behind someone live and our row fresh: a read says so, no
         * transaction (a release wakes the whole line) */
        int64_t left = -1, due = a->refreshed + a->req->lease_ms / 3 - before + 1;
        rc = sq_fair_behind(a->e, a->l->name, a->ticket, &left);
        if (rc < 0) return rc;
        if (rc == 1) {
            *left_ms = left < due ? left : due;
            return baton_seterr(BATON_ELOCKED, 0, "sqlite: lock '%s': waiting in line", a->l->name);
        }
    }
    rc = claim(a->e, a->l, a->req, &a->req->fence, left_ms, a->req->fair ? &a->ticket : NULL);
    if (rc == BATON_ELOCKED && a->ticket) a->refreshed = before;
    if (rc == 0) {
        a->l->fence = a->req->fence;
        a->req->sent_ns = sent;    /* the lease started no earlier than this */
    }
    return rc;
}

int sq_lease_acquire(sqeng *e, sqlock *l, baton_acquire_req *req)
{
    claim_arg a = { e, l, req, 0, 0 };
    char what[300];
    int rc;
    if (req->fair && (rc = sq_fairrw_tables(e))) return rc;
    snprintf(what, sizeof what, "lock '%.200s'", l->name);
    rc = sq_wait(e, req->waiter, req->deadline_ns, what, claim_attempt, &a);
    if (rc && a.ticket) sq_fair_leave(e, a.ticket);   /* gave up: out of the line at once */
    return rc;
}

/* One owner- and fence-checked UPDATE (autocommit: one short write
 * transaction). 0 with the number of rows it changed in *n. */
static int checked_update(sqeng *e, const char *tmpl, sqlock *l, const baton_owner *owner, int64_t until,
                          int64_t deadline, const char *what, int *n)
{
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, deadline, NULL);
    if ((rc = sq_prepare(e, c, tmpl, &st))) goto out;
    sqlite3_bind_text(st, 1, l->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, owner->hex, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)l->fence);
    sqlite3_bind_text(st, 4, e->boot, -1, SQLITE_STATIC);
    if (until) sqlite3_bind_int64(st, 5, until);
    if ((rc = sqlite3_step(st)) != SQLITE_DONE) {
        rc = sq_err(e, c, rc, what);
        goto out;
    }
    *n = sqlite3_changes(c->db);
    rc = 0;
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    return rc;
}

int sq_lease_release(sqeng *e, sqlock *l, const baton_owner *owner)
{
    int rc, n = 0;
    /* the row keeps its fence: the next grant counts on from it */
    rc = checked_update(e, "UPDATE @T SET owner = NULL, holder = NULL, lease_until = NULL "
                        "WHERE name = ?1 AND owner = ?2 AND fence = ?3 AND boot = ?4",
                        l, owner, 0, sq_busy_deadline(e, 0), "release", &n);
    l->fence = 0;
    if (rc) return rc;
    if (n > 0) {
        /* after the commit: a woken waiter must find the row free */
        sq_wake_local(e);
        sq_wake_others(e);
    }
    if (n == 0)
        return baton_seterr(BATON_ELOST, 0, "sqlite: lock '%s': the lease had ended and another owner took it",
                            l->name);
    return 0;
}

int sq_lease_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    int rc, n = 0;
    int64_t until = sq_boot_ms() + lease_ms;   /* read before the write lock: never later than meant */
    rc = checked_update(e, "UPDATE @T SET lease_until = ?5 WHERE name = ?1 AND owner = ?2 AND fence = ?3 AND boot = ?4",
                        l, owner, until, sq_busy_deadline(e, deadline_ns), "renew", &n);
    if (rc == BATON_EUNAVAILABLE)
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "sqlite: lock '%s': renewal: the database stayed locked by "
                          "another transaction", l->name);
    if (rc) return rc;
    if (n == 0)
        return baton_seterr(BATON_ELOST, 0, "sqlite: lock '%s': the lease had ended and another owner took it",
                            l->name);
    return 0;
}

/* ---- operators: list and break ------------------------------------------- */

/* The names of the rows whose lease runs now, on this boot (the rule the
 * claim applies: an owner, a lease_until in the future, this boot's id). A
 * read: in WAL mode it never waits for a writer. The prefix is compared in
 * C, byte for byte (SQL's LIKE and GLOB would need escaping and fold case). */
int sq_lease_list(sqeng *e, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    size_t pn = strlen(prefix);
    int rc;

    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = sq_prepare(e, c, "SELECT name FROM @T WHERE owner IS NOT NULL AND lease_until > ?1 AND boot = ?2",
                         &st)))
        goto out;
    sqlite3_bind_int64(st, 1, sq_boot_ms());
    sqlite3_bind_text(st, 2, e->boot, -1, SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (name && !strncmp(name, prefix, pn) && fn(arg, name)) break;
    }
    if (rc == SQLITE_ROW) {
        rc = 0;   /* FN stopped the walk */
        goto out;
    }
    rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "list");
    sqlite3_finalize(st);
    st = NULL;
    /* then the names whose read-write lock is held (fairrw.c) */
    if (!rc) rc = sq_rw_list(e, c, prefix, fn, arg);
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    return rc;
}

/* One write transaction: the row loses its owner and gets the next fence
 * (next_fence, as a claim would draw it), so the old holder's renewal and
 * release (owner- and fence-checked) change nothing and answer ELOST, and
 * the next claim counts on above the new fence. A missing row is inserted
 * with it. Waiters are woken as a release wakes them. */
int sq_lease_break(sqeng *e, const char *name, uint64_t *fence)
{
    sqconn *c = NULL;
    sqlite3_stmt *sel = NULL, *put = NULL;
    int rc, broken = 0, held = 0, rw = 0;

    if ((rc = sq_fairrw_tables(e))) return rc;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = sq_begin(e, c, NULL, "break"))) goto out;
    if ((rc = sq_prepare(e, c, "SELECT fence, owner, lease_until, boot FROM @T WHERE name = ?1", &sel))) goto out;
    sqlite3_bind_text(sel, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(sel);
    if (rc == SQLITE_ROW) {
        const char *boot = (const char *)sqlite3_column_text(sel, 3);
        held = sqlite3_column_type(sel, 1) != SQLITE_NULL && sqlite3_column_type(sel, 2) != SQLITE_NULL && boot &&
               !strcmp(boot, e->boot) && sqlite3_column_int64(sel, 2) > sq_boot_ms();
        *fence = sq_next_fence((uint64_t)sqlite3_column_int64(sel, 0));
        rc = sq_prepare(e, c, "UPDATE @T SET fence = ?2, owner = NULL, holder = NULL, lease_until = NULL "
                        "WHERE name = ?1", &put);
    } else if (rc == SQLITE_DONE) {
        *fence = sq_next_fence(0);
        rc = sq_prepare(e, c, "INSERT INTO @T (name, fence) VALUES (?1, ?2)", &put);
    } else {
        rc = sq_err(e, c, rc, "break");
    }
    if (rc) goto out;
    sqlite3_bind_text(put, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(put, 2, (sqlite3_int64)*fence);
    if ((rc = sqlite3_step(put)) != SQLITE_DONE) {
        rc = sq_err(e, c, rc, "break");
        goto out;
    }
    /* both sides of the read-write lock of the name end too (fairrw.c) */
    if ((rc = sq_rw_break(e, c, name, fence, &rw))) goto out;
    if (rw > 0) held = 1;
    sqlite3_finalize(sel);
    sqlite3_finalize(put);
    sel = put = NULL;
    if ((rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) {
        rc = sq_err(e, c, rc, "commit the break");
        broken = 1;
        goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(put);
    sq_conn_put(e, c, broken);
    if (rc) return rc;
    if (!held) return baton_seterr(BATON_ENOTHELD, 0, "sqlite: lock '%s' was not held; its fence was bumped", name);
    /* after the commit: a woken waiter must find the row free */
    sq_wake_local(e);
    sq_wake_others(e);
    return 0;
}
