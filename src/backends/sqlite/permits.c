/*
 * Semaphores: the permit-expirable one (Redisson's RPermitExpirableSemaphore)
 * and the plain counting one (RSemaphore), in two tables beside the lock
 * table; a name used both ways shares its count, as on Redis:
 *   <table>_sem     name -> permits: the available count (may go negative
 *                   through add); a row = the semaphore was set
 *   <table>_permit  (name, id) -> lease_until, boot: each permit handed out
 * Every operation is one BEGIN IMMEDIATE transaction that first returns
 * expired permits (lease over, or another boot) to the count, as Redisson's
 * scripts do, so no cleaner is needed. Waiting is the locks' (lease.c
 * sq_wait): a release or an add wakes waiters through the sidecar; a waiter
 * also tries again when the first permit's lease ends.
 */
#include "sq_int.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DDL_SEM "CREATE TABLE IF NOT EXISTS @S (name TEXT PRIMARY KEY NOT NULL, permits INTEGER NOT NULL)"
#define DDL_PERMIT "CREATE TABLE IF NOT EXISTS @P (name TEXT NOT NULL, id TEXT NOT NULL, " \
                   "lease_until INTEGER NOT NULL, boot TEXT NOT NULL, PRIMARY KEY (name, id))"

/* One statement with up to four parameters (?1, ?2 text, NULL = unbound;
 * ?3 int64 when BIND_N; ?4 this boot's id, where the statement has it) run
 * to completion. *changes = rows it changed; *val = the
 * first column of its first row (unchanged when there is none). */
static int run(sqeng *e, sqconn *c, const char *tmpl, const char *a, const char *b, int64_t n, int bind_n,
               int *changes, int64_t *val, int *got_row)
{
    sqlite3_stmt *st = NULL;
    int rc;
    if ((rc = sq_prepare(e, c, tmpl, &st))) return rc;
    if (a) sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
    if (b) sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
    if (bind_n) sqlite3_bind_int64(st, 3, n);
    if (sqlite3_bind_parameter_count(st) >= 4) sqlite3_bind_text(st, 4, e->boot, -1, SQLITE_STATIC);
    if (got_row) *got_row = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (got_row && !*got_row && val && sqlite3_column_type(st, 0) != SQLITE_NULL) {
            *val = sqlite3_column_int64(st, 0);
            *got_row = 1;
        }
    }
    rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "permits");
    if (!rc && changes) *changes = sqlite3_changes(c->db);
    sqlite3_finalize(st);
    return rc;
}

/* Expired permits of NAME back to the count: *n of them. */
static int reclaim(sqeng *e, sqconn *c, const char *name, int *n)
{
    int rc = run(e, c, "DELETE FROM @P WHERE name = ?1 AND (boot <> ?2 OR lease_until <= ?3)", name, e->boot,
                 sq_boot_ms(), 1, n, NULL, NULL);
    if (rc || !*n) return rc;
    return run(e, c, "UPDATE @S SET permits = permits + ?3 WHERE name = ?1", name, NULL, *n, 1, NULL, NULL, NULL);
}

/* A transaction on a pooled connection: begin + reclaim. */
static int txn_open(sqeng *e, const char *name, int64_t deadline, baton_waiter *w, sqconn **out, int *reclaimed)
{
    sqconn *c = NULL;
    int rc;
    *out = NULL;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, deadline), w);
    if ((rc = sq_begin(e, c, w, "permits")) || (rc = reclaim(e, c, name, reclaimed))) {
        sq_conn_put(e, c, 0);   /* rolls back */
        return rc;
    }
    *out = c;
    return 0;
}

/* Commits (RC 0) or rolls back, returns the connection; wakes waiters when
 * permits came back. */
static int txn_close(sqeng *e, sqconn *c, int rc, int wake)
{
    int broken = 0;
    if (rc == 0 && (rc = sq_exec(e, c, "COMMIT", "permits: commit"))) broken = 1;
    sq_conn_put(e, c, broken);
    if (rc == 0 && wake) {
        sq_wake_local(e);
        sq_wake_others(e);
    }
    return rc;
}

int sq_permits_new(void *eng, const char *name, void **st)
{
    sqeng *e = eng;
    sqconn *c = NULL;
    sqlock *p;
    int rc, ok;

    pthread_mutex_lock(&e->mu);
    ok = e->permits_ok;
    pthread_mutex_unlock(&e->mu);
    if (!ok) {
        /* created on first use only: a lock-only database keeps one table */
        if ((rc = sq_conn_get(e, &c))) return rc;
        sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
        {
            char *a = sq_sql(e, DDL_SEM), *b = sq_sql(e, DDL_PERMIT);
            if (!a || !b) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            else if (!(rc = sq_exec_ddl(e, c, a, "create the semaphore table")))
                rc = sq_exec_ddl(e, c, b, "create the permit table");
            free(a);
            free(b);
        }
        sq_conn_put(e, c, 0);
        if (rc) return rc;
        pthread_mutex_lock(&e->mu);
        e->permits_ok = 1;
        pthread_mutex_unlock(&e->mu);
    }
    if (!(p = calloc(1, sizeof *p)) || !(p->name = strdup(name))) {
        free(p);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = p;
    return 0;
}

void sq_permits_free(void *eng, void *st)
{
    sqlock *p = st;
    (void)eng;
    free(p->name);
    free(p);
}

typedef struct {
    sqeng *e;
    sqlock *p;
    uint32_t lease_ms;
    int64_t deadline;
    baton_waiter *w;
    char *id;
} take_arg;

/* One try: a permit, or BATON_ELOCKED with the time until the first
 * permit's lease ends. */
static int take(void *arg, int64_t *left_ms)
{
    take_arg *a = arg;
    sqeng *e = a->e;
    sqconn *c = NULL;
    int64_t v = 0, first = 0;
    int rc, n = 0, row = 0, frow = 0;
    baton_owner o;

    if ((rc = baton__owner_init(&o))) return rc;   /* 128 random bits for the id */
    if ((rc = txn_open(e, a->p->name, a->deadline, a->w, &c, &n))) return rc;
    rc = run(e, c, "SELECT permits FROM @S WHERE name = ?1", a->p->name, NULL, 0, 0, NULL, &v, &row);
    if (!rc && row && v >= 1) {
        rc = run(e, c, "UPDATE @S SET permits = permits - 1 WHERE name = ?1", a->p->name, NULL, 0, 0, NULL, NULL,
                 NULL);
        if (!rc)
            rc = run(e, c, "INSERT INTO @P (name, id, lease_until, boot) VALUES (?1, ?2, ?3, ?4)", a->p->name,
                     o.hex, sq_boot_ms() + a->lease_ms, 1, NULL, NULL, NULL);
        if ((rc = txn_close(e, c, rc, n > 0))) return rc;
        memcpy(a->id, o.hex, BATON_PERMIT_ID_SIZE);
        return 0;
    }
    if (!rc)
        rc = run(e, c, "SELECT min(lease_until) - ?3 FROM @P WHERE name = ?1", a->p->name, NULL, sq_boot_ms(), 1,
                 NULL, &first, &frow);
    /* commit the reclaim even when nothing is free */
    if ((rc = txn_close(e, c, rc, n > 0))) return rc;
    *left_ms = frow ? (first > 0 ? first : 0) : -1;
    return baton_seterr(BATON_ELOCKED, 0, "sqlite: semaphore '%s': no permit free", a->p->name);
}

int sq_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                       char id[BATON_PERMIT_ID_SIZE])
{
    sqlock *p = st;
    take_arg a = { eng, p, lease_ms, deadline_ns, w, id };
    char what[300];
    snprintf(what, sizeof what, "semaphore '%.200s'", p->name);
    return sq_wait(eng, w, deadline_ns, what, take, &a);
}

int sq_permits_release(void *eng, void *st, const char *id)
{
    sqeng *e = eng;
    sqlock *p = st;
    sqconn *c = NULL;
    int rc, n = 0, gone = 0;

    if ((rc = txn_open(e, p->name, 0, NULL, &c, &n))) return rc;
    rc = run(e, c, "DELETE FROM @P WHERE name = ?1 AND id = ?2", p->name, id, 0, 0, &gone, NULL, NULL);
    if (!rc && gone)
        rc = run(e, c, "UPDATE @S SET permits = permits + 1 WHERE name = ?1", p->name, NULL, 0, 0, NULL, NULL, NULL);
    if ((rc = txn_close(e, c, rc, gone || n))) return rc;
    if (!gone)
        return baton_seterr(BATON_ENOTOWNER, 0, "sqlite: semaphore '%s': no permit %s (released, expired or never "
                            "given)", p->name, id);
    return 0;
}

int sq_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    sqeng *e = eng;
    sqlock *p = st;
    sqconn *c = NULL;
    int rc, n = 0, hit = 0;

    if ((rc = txn_open(e, p->name, 0, NULL, &c, &n))) return rc;
    rc = run(e, c, "UPDATE @P SET lease_until = ?3 WHERE name = ?1 AND id = ?2", p->name, id,
             sq_boot_ms() + lease_ms, 1, &hit, NULL, NULL);
    if ((rc = txn_close(e, c, rc, n > 0))) return rc;
    if (!hit)
        return baton_seterr(BATON_ENOTOWNER, 0, "sqlite: semaphore '%s': no permit %s (released or expired)",
                            p->name, id);
    return 0;
}

int sq_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    sqeng *e = eng;
    sqlock *p = st;
    sqconn *c = NULL;
    int rc, n = 0, ch = 0, row = 0, wake;
    int64_t v = 0;

    if (op != BATON_CTL_TRY_SET && op != BATON_CTL_ADD && op != BATON_CTL_AVAILABLE && op != BATON_CTL_DRAIN)
        return baton_seterr(BATON_EINVAL, 0, "sqlite: unknown semaphore operation %d", op);
    if ((rc = txn_open(e, p->name, 0, NULL, &c, &n))) return rc;
    wake = n > 0;
    switch (op) {
    case BATON_CTL_TRY_SET:
        rc = run(e, c, "INSERT OR IGNORE INTO @S (name, permits) VALUES (?1, ?3)", p->name, NULL, arg, 1, &ch, NULL,
                 NULL);
        if (!rc && out) *out = ch;
        wake |= ch && arg > 0;
        break;
    case BATON_CTL_ADD:
        rc = run(e, c, "INSERT INTO @S (name, permits) VALUES (?1, ?3) "
                 "ON CONFLICT (name) DO UPDATE SET permits = permits + excluded.permits", p->name, NULL, arg, 1,
                 NULL, NULL, NULL);
        wake |= arg > 0;
        break;
    case BATON_CTL_AVAILABLE:
        rc = run(e, c, "SELECT permits FROM @S WHERE name = ?1", p->name, NULL, 0, 0, NULL, &v, &row);
        if (!rc && out) *out = row ? v : 0;
        break;
    case BATON_CTL_DRAIN:
        rc = run(e, c, "SELECT permits FROM @S WHERE name = ?1", p->name, NULL, 0, 0, NULL, &v, &row);
        if (!rc && row && v > 0)
            rc = run(e, c, "UPDATE @S SET permits = 0 WHERE name = ?1", p->name, NULL, 0, 0, NULL, NULL, NULL);
        if (!rc && out) *out = row && v > 0 ? v : 0;
        break;
    }
    return txn_close(e, c, rc, wake);
}

int sq_permits_info(sqeng *e, sqconn *c, const char *name, int64_t *out)
{
    int64_t v = 0;
    int rc, row = 0, ok;
    pthread_mutex_lock(&e->mu);
    ok = e->permits_ok;
    pthread_mutex_unlock(&e->mu);
    *out = BATON_PERMITS_UNKNOWN;
    if (!ok) {
        /* this client never made the tables: are they there? */
        if ((rc = run(e, c, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1 || '_sem'", e->table,
                      NULL, 0, 0, NULL, &v, &row)))
            return rc;
        if (!row) return 0;
    }
    row = 0;
    /* a read: expired permits are counted back without writing */
    rc = run(e, c, "SELECT s.permits + (SELECT count(*) FROM @P p WHERE p.name = s.name AND "
             "(p.boot <> ?2 OR p.lease_until <= ?3)) FROM @S s WHERE s.name = ?1",
             name, e->boot, sq_boot_ms(), 1, NULL, &v, &row);
    if (!rc && row) *out = v;
    return rc;
}

/* ---- the plain semaphore ------------------------------------------------- */

typedef struct {
    sqeng *e;
    sqlock *s;
    uint32_t permits;
    int64_t deadline;
    baton_waiter *w;
} sem_arg;

static int sem_take(void *arg, int64_t *left_ms)
{
    sem_arg *a = arg;
    sqeng *e = a->e;
    sqconn *c = NULL;
    int64_t v = 0;
    int rc, n = 0, row = 0, took = 0;

    (void)left_ms;   /* no lease ends here: a release or an add wakes us */
    if ((rc = txn_open(e, a->s->name, a->deadline, a->w, &c, &n))) return rc;
    rc = run(e, c, "SELECT permits FROM @S WHERE name = ?1", a->s->name, NULL, 0, 0, NULL, &v, &row);
    if (!rc && row && v >= (int64_t)a->permits) {
        rc = run(e, c, "UPDATE @S SET permits = permits - ?3 WHERE name = ?1", a->s->name, NULL, a->permits, 1,
                 NULL, NULL, NULL);
        took = 1;
    }
    if ((rc = txn_close(e, c, rc, n > 0))) return rc;
    if (!took)
        return baton_seterr(BATON_ELOCKED, 0, "sqlite: semaphore '%s': fewer than %u permits free", a->s->name,
                            a->permits);
    return 0;
}

int sq_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    sqlock *s = st;
    sem_arg a = { eng, s, permits, deadline_ns, w };
    char what[300];
    snprintf(what, sizeof what, "semaphore '%.200s'", s->name);
    return sq_wait(eng, w, deadline_ns, what, sem_take, &a);
}

int sq_sem_release(void *eng, void *st, uint32_t permits)
{
    /* anyone may release; a semaphore never set is set by it */
    return sq_permits_ctl(eng, st, BATON_CTL_ADD, permits, NULL);
}

/* ---- the count-down latch ------------------------------------------------- */

/* <table>_latch: name -> count; a row = the latch is set and not yet at
 * zero (the count-down to zero deletes it, as Redisson's does). */
#define DDL_LATCH "CREATE TABLE IF NOT EXISTS @L (name TEXT PRIMARY KEY NOT NULL, count INTEGER NOT NULL)"

int sq_latch_new(void *eng, const char *name, void **st)
{
    sqeng *e = eng;
    sqconn *c = NULL;
    sqlock *l;
    int rc, ok;

    pthread_mutex_lock(&e->mu);
    ok = e->latch_ok;
    pthread_mutex_unlock(&e->mu);
    if (!ok) {
        char *ddl = sq_sql(e, DDL_LATCH);
        if (!ddl) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        if ((rc = sq_conn_get(e, &c))) {
            free(ddl);
            return rc;
        }
        sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
        rc = sq_exec_ddl(e, c, ddl, "create the latch table");
        free(ddl);
        sq_conn_put(e, c, 0);
        if (rc) return rc;
        pthread_mutex_lock(&e->mu);
        e->latch_ok = 1;
        pthread_mutex_unlock(&e->mu);
    }
    if (!(l = calloc(1, sizeof *l)) || !(l->name = strdup(name))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = l;
    return 0;
}

int sq_latch_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    sqeng *e = eng;
    sqlock *l = st;
    sqconn *c = NULL;
    int rc, ch = 0, row = 0, zero = 0;
    int64_t v = 0;

    if (op != BATON_CTL_TRY_SET && op != BATON_CTL_COUNT_DOWN && op != BATON_CTL_AVAILABLE)
        return baton_seterr(BATON_EINVAL, 0, "sqlite: unknown latch operation %d", op);
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = sq_begin(e, c, NULL, "latch"))) goto out;
    switch (op) {
    case BATON_CTL_TRY_SET:
        rc = run(e, c, "INSERT OR IGNORE INTO @L (name, count) VALUES (?1, ?3)", l->name, NULL, arg, 1, &ch, NULL,
                 NULL);
        if (!rc && out) *out = ch;
        break;
    case BATON_CTL_COUNT_DOWN:
        rc = run(e, c, "SELECT count FROM @L WHERE name = ?1", l->name, NULL, 0, 0, NULL, &v, &row);
        if (!rc && row) {
            zero = v <= 1;
            rc = zero ? run(e, c, "DELETE FROM @L WHERE name = ?1", l->name, NULL, 0, 0, NULL, NULL, NULL)
                      : run(e, c, "UPDATE @L SET count = count - 1 WHERE name = ?1", l->name, NULL, 0, 0, NULL, NULL,
                            NULL);
        }
        break;
    case BATON_CTL_AVAILABLE:
        rc = run(e, c, "SELECT count FROM @L WHERE name = ?1", l->name, NULL, 0, 0, NULL, &v, &row);
        if (!rc && out) *out = row && v > 0 ? v : 0;
        break;
    }
    if (!rc && (rc = sq_exec(e, c, "COMMIT", "latch: commit"))) {
        sq_conn_put(e, c, 1);
        return rc;
    }
out:
    sq_conn_put(e, c, 0);
    if (!rc && zero) {
        sq_wake_local(e);
        sq_wake_others(e);
    }
    return rc;
}

static int latch_zero(void *arg, int64_t *left_ms)
{
    sqeng *e = ((void **)arg)[0];
    sqlock *l = ((void **)arg)[1];
    sqconn *c = NULL;
    int64_t v = 0;
    int rc, row = 0;
    (void)left_ms;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    /* a read: never waits for a writer in WAL mode */
    rc = run(e, c, "SELECT count FROM @L WHERE name = ?1", l->name, NULL, 0, 0, NULL, &v, &row);
    sq_conn_put(e, c, 0);
    if (rc) return rc;
    if (row && v > 0) return baton_seterr(BATON_ELOCKED, 0, "sqlite: latch '%s': count %lld", l->name, (long long)v);
    return 0;
}

int sq_latch_await(void *eng, void *st, int64_t deadline_ns, baton_waiter *w)
{
    sqlock *l = st;
    void *arg[2] = { eng, l };
    char what[300];
    int rc;
    snprintf(what, sizeof what, "latch '%.200s'", l->name);
    rc = sq_wait(eng, w, deadline_ns, what, latch_zero, arg);
    if (rc == BATON_ELOCKED) rc = baton_seterr(BATON_ETIMEDOUT, 0, "sqlite: %s: not at zero", what);
    return rc;
}
