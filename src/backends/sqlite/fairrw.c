/*
 * Fair (FIFO) locks and read-write locks, in two tables beside the lock
 * table (created on first use):
 *
 *   <table>_waiter  seq (AUTOINCREMENT: never reused, so it is the order of
 *                   arrival) -> name, owner, holder, lease_until, boot: one
 *                   row per fair waiter, kept alive by its waiter (every
 *                   claim it makes refreshes it; a claim is due at least
 *                   every lease/3), so a killed waiter leaves the line when
 *                   its lease ends. A fair claim (lease.c) is granted only
 *                   to the first live row of its name (or with no row at
 *                   all), in the same transaction that takes the lock row.
 *   <table>_rw      (name, owner, mode) -> fence, holder, lease_until, boot:
 *                   mode 'w' the writer, 'r' a reader, 'q' a writer waiting
 *                   (new readers hold back while a live 'q' row exists, so
 *                   writers are not starved; the row's lease is the waiting
 *                   writer's, refreshed by its claims, so a killed waiting
 *                   writer holds readers back for its lease at most). The
 *                   read side is granted to the holder of the write side
 *                   (downgrade).
 *
 * Fences: a read-write grant takes max(its counter (the row mode 'f',
 * owner ''), the plain lock's fence of the name) + 1 (at least the wall
 * clock in us), so its fences count on above the plain lock's; the lock
 * table's row is only read (its fence is its holder's owner check).
 * `baton unlock --force` (lease.c) draws a fence above both. The read-write
 * lock is otherwise a name space of its own: a plain lock of the same name
 * does not exclude it.
 *
 * Every claim, release and renewal is one short BEGIN IMMEDIATE transaction
 * (or one statement); waiting is the locks' sq_wait (lease.c), woken by the
 * sidecar after every release on the host (wake.c).
 */
#include "sq_int.h"
#include "core/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DDL_WAITER "CREATE TABLE IF NOT EXISTS @W (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, " \
                   "owner TEXT NOT NULL, holder TEXT, lease_until INTEGER NOT NULL, boot TEXT NOT NULL)"
#define DDL_WINDEX "CREATE INDEX IF NOT EXISTS @Y ON @W (name, seq)"
#define DDL_RW "CREATE TABLE IF NOT EXISTS @X (name TEXT NOT NULL, owner TEXT NOT NULL, mode TEXT NOT NULL, " \
               "fence INTEGER NOT NULL, holder TEXT, lease_until INTEGER NOT NULL, boot TEXT NOT NULL, " \
               "PRIMARY KEY (name, owner, mode))"

int sq_fairrw_tables(sqeng *e)
{
    static const char *const ddl[] = { DDL_WAITER, DDL_WINDEX, DDL_RW };
    sqconn *c = NULL;
    int rc = 0, ok;
    pthread_mutex_lock(&e->mu);
    ok = e->fairrw_ok;
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    for (size_t k = 0; k < sizeof ddl / sizeof ddl[0] && !rc; k++) {
        char *sql = sq_sql(e, ddl[k]);
        if (!sql) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        else rc = sq_exec_ddl(e, c, sql, "create the fair waiter and read-write tables");
        free(sql);
    }
    sq_conn_put(e, c, 0);
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        e->fairrw_ok = 1;
        pthread_mutex_unlock(&e->mu);
    }
    return rc;
}

/* Prepares TMPL and binds its parameters ?1.. from FMT: 's' a string, 'i'
 * an int64. */
static int bindv(sqeng *e, sqconn *c, const char *tmpl, sqlite3_stmt **st, const char *fmt, va_list ap)
{
    int rc = sq_prepare(e, c, tmpl, st);
    if (rc) return rc;
    for (int k = 0; fmt[k]; k++) {
        if (fmt[k] == 's') sqlite3_bind_text(*st, k + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else sqlite3_bind_int64(*st, k + 1, (sqlite3_int64)va_arg(ap, int64_t));
    }
    return 0;
}

static int stmt(sqeng *e, sqconn *c, const char *tmpl, sqlite3_stmt **st, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = bindv(e, c, tmpl, st, fmt, ap);
    va_end(ap);
    return rc;
}

/* Runs a statement without rows: *changes (may be NULL). */
static int run(sqeng *e, sqconn *c, const char *tmpl, int *changes, const char *fmt, ...)
{
    sqlite3_stmt *st = NULL;
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = bindv(e, c, tmpl, &st, fmt, ap);
    va_end(ap);
    if (rc) return rc;
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : sq_err(e, c, rc, "statement");
    if (!rc && changes) *changes = sqlite3_changes(c->db);
    sqlite3_finalize(st);
    return rc;
}

/* ---- fair locks: the line ---------------------------------------------------- */

/* How long a waiter that gave up (its deadline passed, or it was cancelled)
 * may still spend taking its row out: the call is already late. Past it the
 * row stays until its lease ends (the next in line waits that long). */
#define LEAVE_MS 500

static int64_t leave_deadline(sqeng *e)
{
    int64_t d = baton_now_ns() + LEAVE_MS * 1000000LL, b = sq_busy_deadline(e, 0);
    return d < b ? d : b;
}

static int64_t refresh_bound(uint32_t lease_ms)
{
    return lease_ms / 3 > 0 ? lease_ms / 3 : 1;
}

int sq_fair_step(sqeng *e, sqconn *c, const char *name, baton_acquire_req *req, int64_t now, int64_t *ticket,
                 int64_t *left_ms)
{
    sqlite3_stmt *st = NULL;
    int rc, n = 0;
    /* dead waiters (their lease ran out, or another boot's) leave the line */
    if ((rc = run(e, c, "DELETE FROM @W WHERE name = ?1 AND (boot <> ?2 OR lease_until <= ?3)", NULL, "ssi", name,
                  e->boot, now)))
        return rc;
    if (*ticket) {
        if ((rc = run(e, c, "UPDATE @W SET lease_until = ?2 WHERE seq = ?1 AND boot = ?3", &n, "iis", *ticket,
                      now + (int64_t)req->lease_ms, e->boot)))
            return rc;
        /* our row is gone (we were stopped past its lease): to the back */
        if (n == 0) *ticket = 0;
    }
    if ((rc = stmt(e, c, "SELECT seq, lease_until FROM @W WHERE name = ?1 AND (?2 = 0 OR seq < ?2) ORDER BY seq "
                   "LIMIT 1", &st, "si", name, *ticket)))
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int64_t left = sqlite3_column_int64(st, 1) - now;
        sqlite3_finalize(st);
        if (req->deadline_ns == 0) return baton_seterr(BATON_ELOCKED, 0, "sqlite: lock '%s': waiters are queued", name);
        if (!*ticket && (rc = sq_fair_join(e, c, name, req, now, ticket))) return rc;
        *left_ms = left < refresh_bound(req->lease_ms) ? left : refresh_bound(req->lease_ms);
        return baton_seterr(BATON_ELOCKED, 0, "sqlite: lock '%s': waiting in line", name);
    }
    rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "fair line");
    sqlite3_finalize(st);
    return rc;
}

int sq_fair_join(sqeng *e, sqconn *c, const char *name, baton_acquire_req *req, int64_t now, int64_t *ticket)
{
    int rc;
    if (*ticket) return 0;
    if ((rc = run(e, c, "INSERT INTO @W (name, owner, holder, lease_until, boot) VALUES (?1, ?2, ?3, ?4, ?5)", NULL,
                  "sssis", name, req->owner->hex, req->owner->desc, now + (int64_t)req->lease_ms, e->boot)))
        return rc;
    *ticket = sqlite3_last_insert_rowid(c->db);
    return 0;
}

int sq_fair_granted(sqeng *e, sqconn *c, int64_t *ticket)
{
    int rc = 0;
    if (*ticket && !(rc = run(e, c, "DELETE FROM @W WHERE seq = ?1", NULL, "i", *ticket))) *ticket = 0;
    return rc;
}

void sq_fair_leave(sqeng *e, int64_t ticket)
{
    sqconn *c = NULL;
    int n = 0;
    if (!ticket || sq_conn_get(e, &c)) return;
    sq_conn_arm(c, leave_deadline(e), NULL);
    /* best effort: a row left behind leaves the line when its lease ends */
    run(e, c, "DELETE FROM @W WHERE seq = ?1", &n, "i", ticket);
    sq_conn_put(e, c, 0);
    if (n > 0) {
        /* the next in line may be the head now */
        sq_wake_local(e);
        sq_wake_others(e);
    }
}

/* ---- read-write locks --------------------------------------------------------- */

/* The next fence of NAME's read-write lock, within the caller's
 * transaction: above both its own counter (the row mode 'f', owner '') and
 * the plain lock's (the lock table's row, read, never written: its fence
 * is its holder's owner check), kept in the 'f' row. */
static int rw_fence(sqeng *e, sqconn *c, const char *name, uint64_t *fence)
{
    sqlite3_stmt *st = NULL;
    uint64_t a, b;
    int rc = stmt(e, c, "SELECT COALESCE((SELECT fence FROM @T WHERE name = ?1), 0), "
                  "COALESCE((SELECT fence FROM @X WHERE name = ?1 AND owner = '' AND mode = 'f'), 0)", &st, "s", name);
    if (rc) return rc;
    if ((rc = sqlite3_step(st)) != SQLITE_ROW) {
        rc = sq_err(e, c, rc, "read the fence");
        sqlite3_finalize(st);
        return rc;
    }
    a = (uint64_t)sqlite3_column_int64(st, 0);
    b = (uint64_t)sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    *fence = sq_next_fence(a > b ? a : b);
    return run(e, c, "INSERT OR REPLACE INTO @X (name, owner, mode, fence, holder, lease_until, boot) "
               "VALUES (?1, '', 'f', ?2, NULL, 0, '')", NULL, "si", name, (int64_t)*fence);
}

/* The soonest end of a lease among the rows of NAME, not OWNER's, whose mode
 * is in MODES ("rw", "wq"): 0 with *left_ms (-1 = none). */
static int rw_blockers(sqeng *e, sqconn *c, const char *name, const char *owner, const char *modes, int64_t now,
                       int64_t *left_ms)
{
    sqlite3_stmt *st = NULL;
    char m1[2] = { modes[0], 0 }, m2[2] = { modes[1], 0 };
    int rc = stmt(e, c, "SELECT MIN(lease_until), COUNT(*) FROM @X WHERE name = ?1 AND owner <> ?2 AND mode IN (?3, ?4)",
                  &st, "ssss", name, owner, m1, m2);
    *left_ms = -1;
    if (rc) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_int64(st, 1) > 0) *left_ms = sqlite3_column_int64(st, 0) - now;
        rc = 0;
    } else {
        rc = sq_err(e, c, rc, "read-write lock");
    }
    sqlite3_finalize(st);
    return rc;
}

/* Whether OWNER holds the write side of NAME (a live row): 1, 0, or an error. */
static int rw_writing(sqeng *e, sqconn *c, const char *name, const char *owner)
{
    sqlite3_stmt *st = NULL;
    int rc = stmt(e, c, "SELECT 1 FROM @X WHERE name = ?1 AND owner = ?2 AND mode = 'w'", &st, "ss", name, owner);
    if (rc) return rc;
    rc = sqlite3_step(st);
    rc = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "read-write lock");
    sqlite3_finalize(st);
    return rc;
}

/* One claim of a side: 0 with the grant (fence in req), BATON_ELOCKED with
 * *left_ms, or an error. A waiting writer (a wait, not a try) leaves its 'q'
 * row behind, committed. */
static int rw_claim(sqeng *e, sqlock *l, baton_acquire_req *req, int64_t *left_ms)
{
    const int write = l->kind == SQ_WRITE;
    const char *owner = req->owner->hex;
    sqconn *c = NULL;
    int rc, keep = 0, broken = 0;
    int64_t now, left;

    *left_ms = -1;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, req->deadline_ns), req->waiter);
    if ((rc = sq_begin(e, c, req->waiter, "read-write claim"))) goto out;
    now = sq_boot_ms();
    /* leases that ended (and rows of another boot) are gone */
    if ((rc = run(e, c, "DELETE FROM @X WHERE name = ?1 AND mode <> 'f' AND (boot <> ?2 OR lease_until <= ?3)", NULL,
                  "ssi", l->name, e->boot, now)))
        goto out;
    if (write) {
        if ((rc = rw_blockers(e, c, l->name, owner, "rw", now, &left))) goto out;
    } else {
        /* downgrade: the writer reads; else a writer, or a writer waiting, holds readers back */
        if ((rc = rw_writing(e, c, l->name, owner)) < 0) goto out;
        left = -1;
        if (rc == 0 && (rc = rw_blockers(e, c, l->name, owner, "wq", now, &left))) goto out;
        rc = 0;
    }
    if (left >= 0) {
        *left_ms = left;
        if (write && req->deadline_ns != 0) {
            /* queued: new readers wait behind us; refreshed by every claim */
            if ((rc = run(e, c, "INSERT OR REPLACE INTO @X (name, owner, mode, fence, holder, lease_until, boot) "
                          "VALUES (?1, ?2, 'q', 0, ?3, ?4, ?5)", NULL, "sssis", l->name, owner, req->owner->desc,
                          now + (int64_t)req->lease_ms, e->boot)))
                goto out;
            if (*left_ms > refresh_bound(req->lease_ms)) *left_ms = refresh_bound(req->lease_ms);
            keep = 1;
        }
        rc = baton_seterr(BATON_ELOCKED, 0, "sqlite: read-write lock '%s' is held", l->name);
        goto out;
    }
    if ((rc = rw_fence(e, c, l->name, &req->fence))) goto out;
    if ((rc = run(e, c, "INSERT OR REPLACE INTO @X (name, owner, mode, fence, holder, lease_until, boot) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", NULL, "sssisis", l->name, owner, write ? "w" : "r",
                  (int64_t)req->fence, req->owner->desc, now + (int64_t)req->lease_ms, e->boot)))
        goto out;
    if (write && (rc = run(e, c, "DELETE FROM @X WHERE name = ?1 AND owner = ?2 AND mode = 'q'", NULL, "ss", l->name,
                           owner)))
        goto out;
    keep = 1;
out:
    if (keep) {
        int crc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
        if (crc != SQLITE_OK) {
            rc = sq_err(e, c, crc, "commit the read-write claim");
            broken = 1;
        }
    }
    sq_conn_put(e, c, broken);   /* rolls back an open transaction */
    return rc;
}

typedef struct {
    sqeng *e;
    sqlock *l;
    baton_acquire_req *req;
    int64_t refreshed;       /* a waiting writer: when its 'q' row was last written (sq_boot_ms), 0 = never */
} rw_arg;

/* A waiter's look before its claim, a read (WAL: no write lock): 1 when a
 * live grant of another owner still blocks this side (*left_ms: the
 * soonest end of their leases), 0 when a claim may win, or an error. A
 * reader holding the write side is never blocked (downgrade). */
static int rw_look(sqeng *e, sqlock *l, const char *owner, int64_t *left_ms)
{
    const int write = l->kind == SQ_WRITE;
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int64_t now = sq_boot_ms();
    int rc;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = stmt(e, c, "SELECT MIN(lease_until), COUNT(*) FROM @X WHERE name = ?1 AND owner <> ?2 AND mode IN (?3, ?4) "
                   "AND boot = ?5 AND lease_until > ?6 AND NOT EXISTS (SELECT 1 FROM @X WHERE name = ?1 AND owner = ?2 "
                   "AND mode = 'w' AND ?7 = 0 AND boot = ?5 AND lease_until > ?6)", &st, "sssssii", l->name, owner,
                   write ? "r" : "w", write ? "w" : "q", e->boot, now, (int64_t)write)))
        goto out;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        rc = sqlite3_column_int64(st, 1) > 0;
        if (rc) *left_ms = sqlite3_column_int64(st, 0) - now;
    } else {
        rc = sq_err(e, c, rc, "read-write lock");
    }
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    return rc;
}

static int rw_attempt(void *arg, int64_t *left_ms)
{
    rw_arg *a = arg;
    int64_t sent = baton_now_ns(), before = sq_boot_ms();
    int rc;
    /* a waiter that has claimed once (a writer: its row fresh) looks with a
     * read first: a release wakes every waiter of the host */
    if (a->req->deadline_ns != 0 && (a->l->kind == SQ_READ ? a->refreshed != 0
                                     : a->refreshed && before - a->refreshed < (int64_t)a->req->lease_ms / 3)) {
        int64_t left = -1, due = a->refreshed + a->req->lease_ms / 3 - before + 1;
        if ((rc = rw_look(a->e, a->l, a->req->owner->hex, &left)) < 0) return rc;
        if (rc == 1) {
            *left_ms = a->l->kind == SQ_WRITE && due < left ? due : left;
            return baton_seterr(BATON_ELOCKED, 0, "sqlite: read-write lock '%s' is held", a->l->name);
        }
    }
    rc = rw_claim(a->e, a->l, a->req, left_ms);
    if (rc == 0) {
        a->l->fence = a->req->fence;
        a->req->sent_ns = sent;
    } else if (rc == BATON_ELOCKED) {
        a->refreshed = before;   /* a writer's 'q' row was written; a reader has claimed once */
    }
    return rc;
}

int sq_rw_acquire(sqeng *e, sqlock *l, baton_acquire_req *req)
{
    rw_arg a = { e, l, req, 0 };
    char what[300];
    int rc;
    if ((rc = sq_fairrw_tables(e))) return rc;
    snprintf(what, sizeof what, "read-write lock '%.200s' (%s side)", l->name, l->kind == SQ_WRITE ? "write" : "read");
    rc = sq_wait(e, req->waiter, req->deadline_ns, what, rw_attempt, &a);
    if (rc && l->kind == SQ_WRITE && req->deadline_ns != 0) {
        /* a writer that gives up stops holding readers back, at once */
        sqconn *c = NULL;
        int n = 0;
        if (!sq_conn_get(e, &c)) {
            sq_conn_arm(c, leave_deadline(e), NULL);
            run(e, c, "DELETE FROM @X WHERE name = ?1 AND owner = ?2 AND mode = 'q'", &n, "ss", l->name,
                req->owner->hex);
            sq_conn_put(e, c, 0);
        }
        if (n > 0) {
            sq_wake_local(e);
            sq_wake_others(e);
        }
    }
    return rc;
}

/* One owner-, side- and fence-checked statement: 0 with *n changed rows. */
static int rw_checked(sqeng *e, sqlock *l, const char *tmpl, const baton_owner *owner, int64_t until,
                      int64_t deadline, int *n)
{
    sqconn *c = NULL;
    int rc;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, deadline, NULL);
    rc = run(e, c, tmpl, n, "sssisi", l->name, owner->hex, l->kind == SQ_WRITE ? "w" : "r", (int64_t)l->fence,
             e->boot, until);
    sq_conn_put(e, c, 0);
    return rc;
}

int sq_rw_release(sqeng *e, sqlock *l, const baton_owner *owner)
{
    int rc, n = 0;
    if (!l->fence) return baton_seterr(BATON_ENOTHELD, 0, "not held");
    rc = rw_checked(e, l, "DELETE FROM @X WHERE name = ?1 AND owner = ?2 AND mode = ?3 AND fence = ?4 AND boot = ?5 "
                    "AND ?6 = 0", owner, 0, sq_busy_deadline(e, 0), &n);
    l->fence = 0;
    if (rc) return rc;
    if (n == 0)
        return baton_seterr(BATON_ELOST, 0, "sqlite: read-write lock '%s': the lease had ended and it was taken",
                            l->name);
    /* after the commit: a woken waiter must find it free */
    sq_wake_local(e);
    sq_wake_others(e);
    return 0;
}

int sq_rw_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    int rc, n = 0;
    int64_t until = sq_boot_ms() + lease_ms;
    rc = rw_checked(e, l, "UPDATE @X SET lease_until = ?6 WHERE name = ?1 AND owner = ?2 AND mode = ?3 AND fence = ?4 "
                    "AND boot = ?5", owner, until, sq_busy_deadline(e, deadline_ns), &n);
    if (rc) return rc;
    if (n == 0)
        return baton_seterr(BATON_ELOST, 0, "sqlite: read-write lock '%s': the lease had ended and it was taken",
                            l->name);
    return 0;
}

/* For `baton unlock --force` (lease.c, in its transaction, after it drew
 * *FENCE for the lock table's row): every grant of NAME's read-write lock
 * ends, and *FENCE is raised above the read-write counter when that one ran
 * ahead (the lock table's row then gets it too), so the next grant of
 * either kind counts on above it. 0 with *n grants ended. */
int sq_rw_break(sqeng *e, sqconn *c, const char *name, uint64_t *fence, int *n)
{
    sqlite3_stmt *st = NULL;
    int rc = stmt(e, c, "SELECT fence FROM @X WHERE name = ?1 AND owner = '' AND mode = 'f'", &st, "s", name);
    if (rc) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW && (uint64_t)sqlite3_column_int64(st, 0) >= *fence) {
        *fence = sq_next_fence((uint64_t)sqlite3_column_int64(st, 0));
        rc = SQLITE_DONE;
        sqlite3_finalize(st);
        if ((rc = run(e, c, "UPDATE @T SET fence = ?2 WHERE name = ?1", NULL, "si", name, (int64_t)*fence)))
            return rc;
    } else {
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "break");
        sqlite3_finalize(st);
        if (rc) return rc;
    }
    /* every row, not only live ones: one whose lease ended but that nobody
     * purged yet must not take a late renewal */
    return run(e, c, "DELETE FROM @X WHERE name = ?1 AND mode IN ('r', 'w')", n, "s", name);
}

/* lock_info's part: the read-write lock's readers, writer and waiting
 * writers and the fair line's length (live rows only); when no plain lock
 * holds NAME, the holder of its read-write lock (the writer, else the
 * reader whose lease runs longest). Reads; nothing when the tables were
 * never made. */
int sq_rw_info(sqeng *e, sqconn *c, const char *name, baton_lockinfo *out)
{
    static const char *const q[] = {
        "SELECT TOTAL(mode = 'r'), TOTAL(mode = 'w'), TOTAL(mode = 'q') FROM @X WHERE name = ?1 AND boot = ?2 AND "
        "lease_until > ?3",
        "SELECT COUNT(*) FROM @W WHERE name = ?1 AND boot = ?2 AND lease_until > ?3",
        "SELECT fence, holder, lease_until FROM @X WHERE name = ?1 AND mode IN ('r', 'w') AND boot = ?2 AND "
        "lease_until > ?3 ORDER BY mode = 'w' DESC, lease_until DESC LIMIT 1",
    };
    int64_t now = sq_boot_ms();
    int rc = 0;
    for (int k = 0; k < 3 && !rc; k++) {
        char *sql;
        sqlite3_stmt *st = NULL;
        if (k == 2 && out->held) break;   /* the plain lock's holder is the one to show */
        if (!(sql = sq_sql(e, q[k]))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
        free(sql);
        if (rc != SQLITE_OK) {   /* the table was never made: nothing there */
            rc = 0;
            continue;
        }
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, e->boot, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 3, now);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && k == 0) {
            out->readers = sqlite3_column_int64(st, 0);
            out->writer = sqlite3_column_int64(st, 1) > 0;
            out->waiting_writers = sqlite3_column_int64(st, 2);
        } else if (rc == SQLITE_ROW && k == 1) {
            out->queue_length = sqlite3_column_int64(st, 0);
        } else if (rc == SQLITE_ROW) {
            const char *holder = (const char *)sqlite3_column_text(st, 1);
            out->held = 1;
            if ((uint64_t)sqlite3_column_int64(st, 0) > out->fence) out->fence = (uint64_t)sqlite3_column_int64(st, 0);
            snprintf(out->holder, sizeof out->holder, "%s", holder ? holder : "");
            out->remaining_ms = sqlite3_column_int64(st, 2) - now;
        }
        rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "lock info");
        sqlite3_finalize(st);
    }
    return rc;
}

/* A waiter's look before its claim: 1 when a live row of NAME is ahead of
 * TICKET (*left_ms: how long its lease runs), 0 when not, or an error. A
 * read (WAL: it never waits for a writer and takes no write lock), so a
 * release that wakes a long line costs one transaction for the head and a
 * read for each of the others. */
int sq_fair_behind(sqeng *e, const char *name, int64_t ticket, int64_t *left_ms)
{
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int64_t now = sq_boot_ms();
    int rc;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = stmt(e, c, "SELECT lease_until FROM @W WHERE name = ?1 AND seq < ?2 AND boot = ?3 AND lease_until > ?4 "
                   "ORDER BY seq LIMIT 1", &st, "sisi", name, ticket, e->boot, now)))
        goto out;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *left_ms = sqlite3_column_int64(st, 0) - now;
        rc = 1;
    } else {
        rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "fair line");
    }
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    return rc;
}

/* lock_list's part: the names whose read-write lock is held now (a live 'r'
 * or 'w' row), once each. A read; nothing when the table was never made. */
int sq_rw_list(sqeng *e, sqconn *c, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    char *sql = sq_sql(e, "SELECT DISTINCT name FROM @X WHERE mode IN ('r', 'w') AND boot = ?1 AND lease_until > ?2");
    sqlite3_stmt *st = NULL;
    size_t pn = strlen(prefix);
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = sqlite3_prepare_v2(c->db, sql, -1, &st, NULL);
    free(sql);
    if (rc != SQLITE_OK) return 0;   /* no read-write table: nothing held */
    sqlite3_bind_text(st, 1, e->boot, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, sq_boot_ms());
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        if (name && !strncmp(name, prefix, pn) && fn(arg, name)) break;
    }
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "list");
    sqlite3_finalize(st);
    return rc;
}
