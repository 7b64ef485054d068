/*
 * Semaphores, in every mode (no connection is held):
 *   <table>_sem   (name, permits): the available count of the semaphore
 *                 NAME; may go negative through add; a row = it was set.
 *                 The plain semaphore (Redisson's RSemaphore) and the
 *                 permit-expirable one share it, as on Redis.
 *   <table>_perm  (name, id, lease_until): each permit handed out, with a
 *                 lease on the server's clock.
 *
 * The plain semaphore is one statement per operation: acquire is an
 * UPDATE ... WHERE permits >= k (atomic at the row), release and add an
 * upsert that adds, try_set an upsert that changes nothing when the row is
 * there, drain an UPDATE that reads the count through LAST_INSERT_ID(expr).
 *
 * Permits: every operation that changes them is one transaction that locks
 * the count row (SELECT ... FOR UPDATE) and first returns expired permits
 * to the count (DELETE of the ids whose lease passed), as Redisson's
 * scripts do, so no cleaner is needed: acquire is START, SELECT, DELETE,
 * UPDATE, INSERT, COMMIT (6 round trips); release the same with a DELETE
 * of the id; renew one UPDATE (a lease that ran out is not revived).
 *
 * MariaDB cannot notify: waiters try again after a jittered backoff of 20
 * ms doubling to MY_POLL_MS, at once after a release or add through this
 * client.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    myeng *e;
    char *name;
    char *esc;               /* name, escaped */
} mysem;

static int sem_create(void *eng, const char *name, void **st)
{
    mysem *s = calloc(1, sizeof *s);
    *st = NULL;
    if (!s || !(s->name = strdup(name)) || !(s->esc = my_escape(name))) {
        if (s) free(s->name);
        free(s);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    s->e = eng;
    *st = s;
    return 0;
}

static void sem_destroy(void *eng, void *st)
{
    mysem *s = st;
    (void)eng;
    if (!s) return;
    free(s->name);
    free(s->esc);
    free(s);
}

/* One statement of the semaphore on a pooled connection (RETRY: safe to run
 * twice), by the I/O timeout or DL when sooner. */
static int sem_run(mysem *s, int retry, int64_t dl, uint64_t *affected, uint64_t *id, MYSQL_RES **res,
                   const char *sql)
{
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (!dl) dl = my_deadline_ms(s->e->io_timeout_ms);
    rc = my_run_dl(s->e, sql, retry, res, affected, id, dl);
    free((char *)sql);
    return rc;
}

/* ---- the plain semaphore ----------------------------------------------------- */

typedef struct {
    mysem *s;
    uint32_t k;
} semtry;

static int sem_try(void *arg, int64_t sent, int64_t dl)
{
    semtry *t = arg;
    uint64_t affected = 0;
    int rc;
    (void)sent;
    /* not run twice: that could take 2k */
    rc = sem_run(t->s, 0, dl, &affected, NULL, NULL,
                 my_sql(t->s->e, "UPDATE @N SET permits = permits - %" PRIu32 " WHERE name = %s AND permits >= %"
                        PRIu32, t->k, t->s->esc, t->k));
    if (!rc && affected == 0)
        rc = baton_seterr(BATON_ELOCKED, 0, "mysql: semaphore '%s': fewer than %" PRIu32 " permits free",
                          t->s->name, t->k);
    return rc;
}

static int sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    mysem *s = st;
    semtry t = { s, permits };
    char what[300];
    int rc;
    if ((rc = my_aux_ready(eng, MY_AUX_SEM))) return rc;
    snprintf(what, sizeof what, "semaphore '%.200s'", s->name);
    return my_poll_wait(eng, w, deadline_ns, what, sem_try, &t);
}

/* try_set, add, available and drain of the count row of S (both kinds). */
static int count_ctl(mysem *s, int op, int64_t arg, int64_t *out)
{
    MYSQL_RES *r = NULL;
    uint64_t affected = 0, id = 0;
    const char *v;
    int rc;

    switch (op) {
    case BATON_CTL_TRY_SET:
        rc = sem_run(s, 1, 0, &affected, NULL, NULL,
                     my_sql(s->e, "INSERT INTO @N (name, permits) VALUES (%s, %" PRId64 ") "
                                  "ON DUPLICATE KEY UPDATE permits = permits", s->esc, arg));
        if (!rc && out) *out = affected == 1;
        if (!rc && affected == 1 && arg > 0) my_wake_local(s->e);
        return rc;
    case BATON_CTL_ADD:
        /* not run twice: that would add twice */
        rc = sem_run(s, 0, 0, NULL, NULL, NULL,
                     my_sql(s->e, "INSERT INTO @N (name, permits) VALUES (%s, %" PRId64 ") "
                                  "ON DUPLICATE KEY UPDATE permits = permits + VALUES(permits)", s->esc, arg));
        if (!rc && arg > 0) my_wake_local(s->e);
        return rc;
    case BATON_CTL_AVAILABLE:
        rc = sem_run(s, 1, 0, NULL, NULL, &r, my_sql(s->e, "SELECT permits FROM @N WHERE name = %s", s->esc));
        if (!rc && out) *out = (v = my_cell(r, 0)) ? strtoll(v, NULL, 10) : 0;
        mysql_free_result(r);
        return rc;
    case BATON_CTL_DRAIN:
        /* the count comes back through LAST_INSERT_ID(expr); only a positive one is taken */
        rc = sem_run(s, 0, 0, &affected, &id, NULL,
                     my_sql(s->e, "UPDATE @N SET permits = LAST_INSERT_ID(permits) * 0 WHERE name = %s AND "
                                  "permits > 0", s->esc));
        if (!rc && out) *out = affected == 1 ? (int64_t)id : 0;
        return rc;
    default:
        return baton_seterr(BATON_EINVAL, 0, "mysql: unknown semaphore operation %d", op);
    }
}

static int sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    int rc;
    if ((rc = my_aux_ready(eng, MY_AUX_SEM))) return rc;
    return count_ctl(st, op, arg, out);
}

static int sem_release(void *eng, void *st, uint32_t permits)
{
    /* anyone may release; a semaphore never set is set by it */
    return sem_ctl(eng, st, BATON_CTL_ADD, permits, NULL);
}

const baton_sem_methods my_sem_methods = {
    .create = sem_create,
    .destroy = sem_destroy,
    .acquire = sem_acquire,
    .release = sem_release,
    .ctl = sem_ctl,
};

/* ---- permits ----------------------------------------------------------------- */

/* A transaction on its own connection: START, lock the count row, return
 * expired permits to it. *present: the row is there; *count: the count
 * with the expired permits back (written at the end by txn_end). */
typedef struct {
    MYSQL *c;
    int64_t dl;
    int present;
    int64_t count, reclaimed;
} ptxn;

static int txn_exec(mysem *s, ptxn *t, uint64_t *affected, char *sql)
{
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec_dl(s->e, t->c, sql, NULL, t->dl);
    if (!rc && affected) *affected = mysql_affected_rows(t->c);
    free(sql);
    return rc;
}

static int txn_begin(mysem *s, ptxn *t, int64_t dl)
{
    MYSQL_RES *r = NULL;
    const char *v;
    uint64_t n = 0;
    char *sql;
    int rc;

    memset(t, 0, sizeof *t);
    t->dl = dl;
    if ((rc = my_conn_get(s->e, &t->c))) return rc;
    if ((rc = my_exec_dl(s->e, t->c, "START TRANSACTION", NULL, dl))) return rc;
    if (!(sql = my_sql(s->e, "SELECT permits FROM @N WHERE name = %s FOR UPDATE", s->esc)))
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec_dl(s->e, t->c, sql, &r, dl);
    free(sql);
    if (rc) return rc;
    if ((v = my_cell(r, 0))) {
        t->present = 1;
        t->count = strtoll(v, NULL, 10);
    }
    mysql_free_result(r);
    if (!t->present) return 0;
    if ((rc = txn_exec(s, t, &n, my_sql(s->e, "DELETE FROM @P WHERE name = %s AND lease_until <= UTC_TIMESTAMP(6)",
                                        s->esc))))
        return rc;
    t->reclaimed = (int64_t)n;
    t->count += (int64_t)n;
    return 0;
}

/* Writes the count when it changed by DELTA or by reclaimed permits, then
 * COMMIT (RC 0) or ROLLBACK; the connection goes back (closed when in a
 * transaction still). */
static int txn_end(mysem *s, ptxn *t, int rc, int64_t delta)
{
    if (!rc && t->present && (delta || t->reclaimed))
        rc = txn_exec(s, t, NULL, my_sql(s->e, "UPDATE @N SET permits = permits + %" PRId64 " WHERE name = %s",
                                         delta + t->reclaimed, s->esc));
    if (!rc) rc = my_exec_dl(s->e, t->c, "COMMIT", NULL, t->dl);
    my_conn_put(s->e, t->c);
    t->c = NULL;
    if (!rc && (delta > 0 || t->reclaimed > 0)) my_wake_local(s->e);
    return rc;
}

typedef struct {
    mysem *s;
    uint32_t lease_ms;
    char *id;
} permtry;

static int perm_try(void *arg, int64_t sent, int64_t dl)
{
    permtry *a = arg;
    mysem *s = a->s;
    baton_owner o;
    ptxn t;
    int rc, took = 0;
    (void)sent;

    if ((rc = baton__owner_init(&o))) return rc;   /* 128 random bits for the id */
    if (!(rc = txn_begin(s, &t, dl)) && t.present && t.count >= 1) {
        char *eid = my_escape(o.hex);
        rc = txn_exec(s, &t, NULL, eid ? my_sql(s->e, "INSERT INTO @P (name, id, lease_until) VALUES (%s, %s, "
                                                      "UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND)",
                                                s->esc, eid, (uint64_t)a->lease_ms * 1000) : NULL);
        free(eid);
        took = !rc;
    }
    if ((rc = txn_end(s, &t, rc, took ? -1 : 0))) return rc;
    if (!took) return baton_seterr(BATON_ELOCKED, 0, "mysql: semaphore '%s': no permit free", s->name);
    memcpy(a->id, o.hex, BATON_PERMIT_ID_SIZE);
    return 0;
}

static int perm_ready(myeng *e)
{
    int rc;
    if ((rc = my_aux_ready(e, MY_AUX_SEM))) return rc;
    return my_aux_ready(e, MY_AUX_PERM);
}

static int perm_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                        char id[BATON_PERMIT_ID_SIZE])
{
    mysem *s = st;
    permtry a = { s, lease_ms, id };
    char what[300];
    int rc;
    if ((rc = perm_ready(eng))) return rc;
    snprintf(what, sizeof what, "semaphore '%.200s'", s->name);
    return my_poll_wait(eng, w, deadline_ns, what, perm_try, &a);
}

static int perm_release(void *eng, void *st, const char *id)
{
    mysem *s = st;
    uint64_t gone = 0;
    char *eid;
    ptxn t;
    int rc;

    if ((rc = perm_ready(eng))) return rc;
    if (!(eid = my_escape(id))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* expired permits (this one too) go back first: its release is then refused */
    if (!(rc = txn_begin(s, &t, my_deadline_ms(s->e->io_timeout_ms))) && t.present)
        rc = txn_exec(s, &t, &gone, my_sql(s->e, "DELETE FROM @P WHERE name = %s AND id = %s", s->esc, eid));
    free(eid);
    if ((rc = txn_end(s, &t, rc, (int64_t)gone))) return rc;
    if (!gone)
        return baton_seterr(BATON_ENOTOWNER, 0, "mysql: semaphore '%s': no permit %s (released, expired or never "
                            "given)", s->name, id);
    return 0;
}

static int perm_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    mysem *s = st;
    uint64_t hit = 0;
    char *eid;
    int rc;

    if ((rc = perm_ready(eng))) return rc;
    if (!(eid = my_escape(id))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* a lease that ran out is not revived: the permit may be counted back already */
    rc = sem_run(s, 1, 0, &hit, NULL, NULL,
                 my_sql(s->e, "UPDATE @P SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND "
                              "WHERE name = %s AND id = %s AND lease_until > UTC_TIMESTAMP(6)",
                        (uint64_t)lease_ms * 1000, s->esc, eid));
    free(eid);
    if (!rc && !hit)
        rc = baton_seterr(BATON_ENOTOWNER, 0, "mysql: semaphore '%s': no permit %s (released or expired)", s->name,
                          id);
    return rc;
}

static int perm_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    mysem *s = st;
    MYSQL_RES *r = NULL;
    const char *v;
    ptxn t;
    int rc;

    if ((rc = perm_ready(eng))) return rc;
    switch (op) {
    case BATON_CTL_TRY_SET:
    case BATON_CTL_ADD:
        return count_ctl(s, op, arg, out);
    case BATON_CTL_AVAILABLE:
        /* a read: expired permits are counted back without writing */
        rc = sem_run(s, 1, 0, NULL, NULL, &r,
                     my_sql(s->e, "SELECT s.permits + (SELECT COUNT(*) FROM @P p WHERE p.name = s.name AND "
                                  "p.lease_until <= UTC_TIMESTAMP(6)) FROM @N s WHERE s.name = %s", s->esc));
        if (!rc && out) *out = (v = my_cell(r, 0)) ? strtoll(v, NULL, 10) : 0;
        mysql_free_result(r);
        return rc;
    case BATON_CTL_DRAIN: {
        int64_t took = 0;
        if (!(rc = txn_begin(s, &t, my_deadline_ms(s->e->io_timeout_ms))) && t.present && t.count > 0) took = t.count;
        if ((rc = txn_end(s, &t, rc, -took))) return rc;
        if (out) *out = took;
        return 0;
    }
    default:
        return baton_seterr(BATON_EINVAL, 0, "mysql: unknown semaphore operation %d", op);
    }
}

const baton_permits_methods my_permits_methods = {
    .create = sem_create,
    .destroy = sem_destroy,
    .acquire = perm_acquire,
    .release = perm_release,
    .renew = perm_renew,
    .ctl = perm_ctl,
};

/* lock info: the count of the semaphore NAME, when there is one. */
int my_sem_info(myeng *e, const char *esc, baton_lockinfo *out)
{
    MYSQL_RES *r = NULL;
    const char *v;
    char *sql = my_sql(e, "SELECT permits FROM @N WHERE name = %s", esc);
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, &r, NULL, NULL);
    free(sql);
    /* no semaphore was ever used here, or this user may not read its table */
    if (rc && (baton_error_last()->native == ER_NO_SUCH_TABLE ||
               baton_error_last()->native == ER_TABLEACCESS_DENIED_ERROR))
        return 0;
    if (!rc && (v = my_cell(r, 0))) out->permits = strtoll(v, NULL, 10);
    mysql_free_result(r);
    return rc;
}
