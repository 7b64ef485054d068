/*
 * Read-write locks: one row per holder in <table>_rw (name, owner, side,
 * holder, lease_until, fence), a lease on the server's clock in every mode
 * (no connection is held, as for group members: the core renews each side
 * every lease/3). side is 'r' (a reader), 'w' (the writer) or 'q' (a
 * writer waiting: new readers hold back while it is there, so a stream of
 * readers cannot starve it). A 'q' row's lease is short (MY_WAITER_TTL_MS at
 * most) and moved on by every try of its waiting writer, so a writer that
 * dies while waiting holds readers back that long at most.
 *
 * A try is one transaction on one connection: START TRANSACTION; lock the
 * name's counter row (a hidden row of the value table, NUL + "rw:" + NAME)
 * with an upsert that changes nothing, which serializes the tries of one
 * name; SELECT the live rows' counts; then on a grant: bump the counter
 * (the fence, LAST_INSERT_ID(expr)), upsert our row (and delete our 'q'
 * row), COMMIT: 6 round trips; refused: upsert a writer's 'q' row, COMMIT.
 * A waiter looks before each later try (one SELECT of the counts outside a
 * transaction, and a waiting writer's UPDATE of its 'q' row) and tries only
 * when the counts say it may succeed.
 * Rows whose lease passed are deleted by the next try that sees them.
 *
 * Readers are granted when no other owner writes or waits to write; the
 * write side's holder gets the read side too (downgrade); a writer when
 * no other owner reads or writes. MariaDB cannot notify: waiters try again
 * after a jittered backoff (20 ms doubling to MY_POLL_MS), at once after a
 * release through this client.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MY_WAITER_TTL_MS 3000    /* a waiting writer's 'q' row lives this long unless tried again */

static int rw_side(void *eng, const char *name, int kind, mylock **out)
{
    mylock *l = calloc(1, sizeof *l);
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    l->e = eng;
    l->kind = kind;
    my_name_key(name, l->key);
    if (!(l->name = strdup(name)) || !(l->esc = my_escape(name)) || !(l->eid = my_tag_row("rw", name))) {
        free(l->name);
        free(l->esc);
        free(l->eid);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *out = l;
    return 0;
}

static void side_free(mylock *l)
{
    if (!l) return;
    free(l->name);
    free(l->esc);
    free(l->eid);
    free(l);
}

static int rw_create(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr)
{
    mylock *r = NULL, *w = NULL;
    int rc;
    (void)opts;
    *rd = *wr = NULL;
    if ((rc = rw_side(eng, name, MY_KIND_READ, &r)) || (rc = rw_side(eng, name, MY_KIND_WRITE, &w))) {
        side_free(r);
        return rc;
    }
    *rd = r;
    *wr = w;
    return 0;
}

/* SQL on C, bounded by DL; *affected when asked. */
static int step(myeng *e, MYSQL *c, int64_t dl, uint64_t *affected, const char *sql)
{
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec_dl(e, c, sql, NULL, dl);
    if (!rc && affected) *affected = mysql_affected_rows(c);
    return rc;
}

/* step, then SQL freed. */
static int step_free(myeng *e, MYSQL *c, int64_t dl, char *sql)
{
    int rc = step(e, c, dl, NULL, sql);
    free(sql);
    return rc;
}

#define LIVE "lease_until > UTC_TIMESTAMP(6)"

/* One try on C, in a transaction it starts and ends: 0 with req->fence, or
 * BATON_ELOCKED (a writer that WAITs has its 'q' row then). */
static int try_on(myeng *e, MYSQL *c, mylock *l, baton_acquire_req *req, int wait, int64_t dl)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *o = my_escape(req->owner->hex), *h = my_escape(req->owner->desc), *sql = NULL;
    int64_t n[6] = { 0 };
    int rc, write = l->kind == MY_KIND_WRITE, ok;
    uint32_t qttl = req->lease_ms < MY_WAITER_TTL_MS ? req->lease_ms : MY_WAITER_TTL_MS;

    if (!o || !h) goto oom;
    if ((rc = my_exec_dl(e, c, "START TRANSACTION", NULL, dl))) goto out;
    /* the counter row, locked until COMMIT: one try of NAME at a time */
    sql = my_sql(e, "INSERT INTO @V (name, data, version) VALUES (%s, NULL, 0) "
                    "ON DUPLICATE KEY UPDATE version = version", l->eid);
    if ((rc = step(e, c, dl, NULL, sql))) goto out;
    free(sql);
    if (!(sql = my_sql(e, "SELECT SUM(" LIVE " AND side = 'w' AND owner <> %s), SUM(" LIVE " AND side = 'r' AND "
                          "owner <> %s), SUM(" LIVE " AND side = 'q' AND owner <> %s), SUM(" LIVE " AND side = 'w' "
                          "AND owner = %s), SUM(side = 'q' AND owner = %s), SUM(NOT " LIVE ") FROM @R WHERE name = %s",
                       o, o, o, o, o, l->esc)))
        goto oom;
    if ((rc = my_exec_dl(e, c, sql, &r, dl))) goto out;
    if ((row = mysql_fetch_row(r)))
        for (int i = 0; i < 6; i++) n[i] = row[i] ? strtoll(row[i], NULL, 10) : 0;
    mysql_free_result(r);
    r = NULL;
    free(sql);
    sql = NULL;
    if (n[5] > 0) {
        sql = my_sql(e, "DELETE FROM @R WHERE name = %s AND NOT " LIVE, l->esc);
        if ((rc = step(e, c, dl, NULL, sql))) goto out;
        free(sql);
        sql = NULL;
    }
    /* readers: no other writer, no other writer waiting, unless we write
     * (downgrade); the writer: nobody else at all */
    ok = write ? n[0] == 0 && n[1] == 0 : n[0] == 0 && (n[2] == 0 || n[3] > 0);
    if (ok) {
        sql = my_sql(e, "UPDATE @V SET version = LAST_INSERT_ID(version + 1) WHERE name = %s", l->eid);
        if ((rc = step(e, c, dl, NULL, sql))) goto out;
        req->fence = mysql_insert_id(c);
        free(sql);
        sql = my_sql(e, "INSERT INTO @R (name, owner, side, holder, lease_until, fence) VALUES (%s, %s, '%c', %s, "
                        "UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND, %" PRIu64 ") ON DUPLICATE KEY UPDATE "
                        "holder = VALUES(holder), lease_until = VALUES(lease_until), fence = VALUES(fence)",
                     l->esc, o, write ? 'w' : 'r', h, (uint64_t)req->lease_ms * 1000, req->fence);
        if ((rc = step(e, c, dl, NULL, sql))) goto out;
        if (n[4] > 0) {
            free(sql);
            sql = my_sql(e, "DELETE FROM @R WHERE name = %s AND owner = %s AND side = 'q'", l->esc, o);
            if ((rc = step(e, c, dl, NULL, sql))) goto out;
        }
    } else if (write && wait) {
        /* readers that come now wait behind us */
        sql = my_sql(e, "INSERT INTO @R (name, owner, side, holder, lease_until, fence) VALUES (%s, %s, 'q', %s, "
                        "UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND, 0) ON DUPLICATE KEY UPDATE "
                        "lease_until = VALUES(lease_until)", l->esc, o, h, (uint64_t)qttl * 1000);
        if ((rc = step(e, c, dl, NULL, sql))) goto out;
    }
    if ((rc = my_exec_dl(e, c, "COMMIT", NULL, dl))) goto out;
    if (!ok)
        rc = baton_seterr(BATON_ELOCKED, 0, "mysql: read-write lock '%s' is %s", l->name,
                          n[0] ? "write-locked" : n[1] ? "read-locked" : "wanted by a waiting writer");
    goto out;
oom:
    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
out:
    mysql_free_result(r);
    free(sql);
    free(o);
    free(h);
    return rc;
}

typedef struct {
    myeng *e;
    mylock *l;
    baton_acquire_req *req;
    int queued;              /* a 'q' row of ours may be there */
    int tried;               /* a full try was made */
} rwtry;

/* A waiter's look before a try: 0 when a try may succeed, BATON_ELOCKED
 * when the rows say it cannot (a waiting writer's 'q' row moved on then).
 * One SELECT (and one UPDATE for a writer) outside a transaction, instead
 * of a try's four statements. */
static int rw_look(rwtry *t, int64_t dl)
{
    myeng *e = t->e;
    mylock *l = t->l;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *o = my_escape(t->req->owner->hex), *sql = NULL;
    int64_t n[4] = { 0 };
    uint64_t affected = 0;
    int rc, write = l->kind == MY_KIND_WRITE;

    if (o)
        sql = my_sql(e, "SELECT SUM(side = 'w' AND owner <> %s), SUM(side = 'r' AND owner <> %s), "
                        "SUM(side = 'q' AND owner <> %s), SUM(side = 'w' AND owner = %s) FROM @R WHERE name = %s AND "
                        LIVE, o, o, o, o, l->esc);
    if (!sql) {
        free(o);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    rc = my_run_dl(e, sql, 1, &r, NULL, NULL, dl);
    free(sql);
    sql = NULL;
    if (!rc && (row = mysql_fetch_row(r)))
        for (int i = 0; i < 4; i++) n[i] = row[i] ? strtoll(row[i], NULL, 10) : 0;
    mysql_free_result(r);
    if (!rc && (write ? n[0] == 0 && n[1] == 0 : n[0] == 0 && (n[2] == 0 || n[3] > 0))) rc = 0;
    else if (!rc && write) {
        /* still waiting: our 'q' row lives on (gone: the full try puts it back) */
        uint32_t qttl = t->req->lease_ms < MY_WAITER_TTL_MS ? t->req->lease_ms : MY_WAITER_TTL_MS;
        sql = my_sql(e, "UPDATE @R SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND WHERE "
                        "name = %s AND owner = %s AND side = 'q' AND " LIVE, (uint64_t)qttl * 1000, l->esc, o);
        rc = sql ? my_run_dl(e, sql, 1, NULL, &affected, NULL, dl) : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        if (!rc && affected == 1) rc = baton_seterr(BATON_ELOCKED, 0, "mysql: read-write lock '%s' is held", l->name);
    } else if (!rc) {
        rc = baton_seterr(BATON_ELOCKED, 0, "mysql: read-write lock '%s' is held", l->name);
    }
    free(sql);
    free(o);
    return rc;
}

static int rw_try(void *arg, int64_t sent, int64_t dl)
{
    rwtry *t = arg;
    int wait = t->req->deadline_ns != 0 && t->req->waiter, rc = 0;
    /* after the first try, a look first: a waiter that cannot be granted
     * costs one or two statements a try, not a transaction */
    if (t->tried && (rc = rw_look(t, dl))) return rc;
    t->tried = 1;
    /* two first tries of a new name may deadlock on inserting its counter
     * row (InnoDB rolls one back): that one tries again */
    for (int tries = 0; tries < 3; tries++) {
        MYSQL *c = NULL;
        if ((rc = my_conn_get(t->e, &c))) break;
        rc = try_on(t->e, c, t->l, t->req, wait, dl);
        /* a connection left in its transaction (a failed step) is closed */
        my_conn_put(t->e, c);
        if (!rc || baton_error_last()->native != ER_LOCK_DEADLOCK) break;
    }
    if (t->l->kind == MY_KIND_WRITE && wait) t->queued = 1;
    if (!rc) t->req->sent_ns = sent;
    return rc;
}

int my_rw_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    rwtry t = { e, l, req, 0, 0 };
    char what[300];
    int rc;

    if ((rc = my_aux_ready(e, MY_AUX_RW)) || (rc = my_aux_ready(e, MY_AUX_VALUE))) return rc;
    snprintf(what, sizeof what, "read-write lock '%.200s'", l->name);
    rc = my_poll_wait(e, req->waiter, req->deadline_ns, what, rw_try, &t);
    if (rc == 0) {
        l->fence = req->fence;
    } else if (t.queued) {
        /* a writer that gives up stops holding readers back at once */
        char msg[512];
        long native = baton_error_last()->native;
        snprintf(msg, sizeof msg, "%s", baton_error_last()->message ? baton_error_last()->message : "");
        char *o = my_escape(req->owner->hex);
        char *sql = o ? my_sql(e, "DELETE FROM @R WHERE name = %s AND owner = %s AND side = 'q'", l->esc, o) : NULL;
        if (sql && my_run_dl(e, sql, 1, NULL, NULL, NULL, my_deadline_ms(e->io_timeout_ms)) == 0) my_wake_local(e);
        free(sql);
        free(o);
        rc = baton_seterr(rc, native, "%s", msg);
    }
    return rc;
}

int my_rw_release(myeng *e, mylock *l, const baton_owner *owner)
{
    char *o = my_escape(owner->hex), *sql = NULL;
    uint64_t affected = 0, fence = l->fence;
    int rc;

    l->fence = 0;
    if (o)
        sql = my_sql(e, "DELETE FROM @R WHERE name = %s AND owner = %s AND side = '%c' AND fence = %" PRIu64,
                     l->esc, o, l->kind == MY_KIND_WRITE ? 'w' : 'r', fence);
    free(o);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, NULL, &affected, NULL);
    free(sql);
    if (rc) return rc;
    my_wake_local(e);
    if (affected == 0)
        return baton_seterr(BATON_ELOST, 0, "mysql: read-write lock '%s': the lease had ended and the %s side "
                            "went to another owner", l->name, l->kind == MY_KIND_WRITE ? "write" : "read");
    return 0;
}

int my_rw_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char *o = my_escape(owner->hex), *sql = NULL, *check = NULL;
    MYSQL_RES *r = NULL;
    uint64_t affected = 0;
    char side = l->kind == MY_KIND_WRITE ? 'w' : 'r';
    int rc;

    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    if (o) {
        /* a lease that ran out is not revived: another owner may hold it */
        sql = my_sql(e, "UPDATE @R SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND WHERE "
                        "name = %s AND owner = %s AND side = '%c' AND fence = %" PRIu64 " AND " LIVE,
                     (uint64_t)lease_ms * 1000, l->esc, o, side, l->fence);
        check = my_sql(e, "SELECT 1 FROM @R WHERE name = %s AND owner = %s AND side = '%c' AND fence = %" PRIu64
                          " AND " LIVE, l->esc, o, side, l->fence);
    }
    free(o);
    if (!sql || !check) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_run_dl(e, sql, 1, NULL, &affected, NULL, deadline_ns)) || affected == 1) goto out;
    /* 0 rows changed: lost, or renewed twice within one microsecond */
    if ((rc = my_run_dl(e, check, 1, &r, NULL, NULL, deadline_ns))) goto out;
    if (mysql_num_rows(r) == 0)
        rc = baton_seterr(BATON_ELOST, 0, "mysql: read-write lock '%s': the lease had ended", l->name);
out:
    mysql_free_result(r);
    free(sql);
    free(check);
    return rc;
}

int my_rw_info(myeng *e, mylock *l, baton_lockinfo *out)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *sql = my_sql(e, "SELECT SUM(side = 'r'), SUM(side = 'w'), SUM(side = 'q'), "
                          "COALESCE(MAX(IF(side = 'w', holder, NULL)), MAX(IF(side = 'r', holder, NULL))), "
                          "MAX(IF(side <> 'q', fence, 0)), TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), "
                          "MAX(IF(side <> 'q', lease_until, NULL))) FROM @R WHERE name = %s AND " LIVE, l->esc);
    int64_t readers, writers;
    int rc;

    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, &r, NULL, NULL);
    free(sql);
    /* no read-write lock was ever used here, or this user may not read its table */
    if (rc && (baton_error_last()->native == ER_NO_SUCH_TABLE ||
               baton_error_last()->native == ER_TABLEACCESS_DENIED_ERROR))
        return 0;
    if (rc) return rc;
    if ((row = mysql_fetch_row(r)) && row[0]) {
        readers = strtoll(row[0], NULL, 10);
        writers = row[1] ? strtoll(row[1], NULL, 10) : 0;
        out->readers = readers;
        out->writer = writers > 0;
        out->waiting_writers = row[2] ? strtoll(row[2], NULL, 10) : 0;
        if (readers + writers > 0) {
            out->held = 1;
            if (row[3]) snprintf(out->holder, sizeof out->holder, "%s", row[3]);
            if (row[4] && strtoull(row[4], NULL, 10) > out->fence) out->fence = strtoull(row[4], NULL, 10);
            out->remaining_ms = row[5] ? (strtoll(row[5], NULL, 10) + 999) / 1000 : -1;
            if (out->remaining_ms < 1) out->remaining_ms = 1;
        }
    }
    mysql_free_result(r);
    return 0;
}

const baton_rw_methods my_rw_methods = {
    .create = rw_create,
};

/* One statement on C whose first cell (NULL = "") goes to OUT. */
static int cell_of(myeng *e, MYSQL *c, char *sql, char *out, size_t n, int64_t dl)
{
    MYSQL_RES *r = NULL;
    const char *v;
    int rc;
    *out = 0;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec_dl(e, c, sql, &r, dl);
    free(sql);
    if (rc) return rc;
    if ((v = my_cell(r, 0))) snprintf(out, n, "%s", v);
    mysql_free_result(r);
    return 0;
}

int my_rw_break(myeng *e, mylock *l, uint64_t *fence, int *held)
{
    MYSQL *c = NULL;
    char *eid = my_tag_row("rw", l->name), v[64];
    int64_t dl = my_deadline_ms(e->io_timeout_ms);
    uint64_t ver, next, live = 0;
    int rc;

    if (!eid) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = my_conn_get(e, &c))) goto out;
    /* a name never used as a read-write lock has no counter row */
    rc = cell_of(e, c, my_sql(e, "SELECT 1 FROM @V WHERE name = %s", eid), v, sizeof v, dl);
    if (rc && baton_error_last()->native == ER_NO_SUCH_TABLE) {
        rc = 0;
        goto out;
    }
    if (rc || !*v) goto out;
    if ((rc = my_exec_dl(e, c, "START TRANSACTION", NULL, dl)) ||
        (rc = cell_of(e, c, my_sql(e, "SELECT version FROM @V WHERE name = %s FOR UPDATE", eid), v, sizeof v, dl)))
        goto out;
    ver = strtoull(v, NULL, 10);
    if ((rc = cell_of(e, c, my_sql(e, "SELECT COUNT(*) FROM @R WHERE name = %s AND side IN ('r', 'w') AND " LIVE,
                                   l->esc), v, sizeof v, dl)))
        goto out;
    live = strtoull(v, NULL, 10);
    /* above every fence of the name, plain or read-write; the next grant of either kind starts above it */
    next = (ver > *fence ? ver : *fence) + 1;
    if ((rc = step_free(e, c, dl, my_sql(e, "DELETE FROM @R WHERE name = %s AND side IN ('r', 'w')", l->esc))) ||
        (rc = step_free(e, c, dl, my_sql(e, "UPDATE @V SET version = %" PRIu64 " WHERE name = %s", next, eid))) ||
        (rc = step_free(e, c, dl, my_sql(e, "UPDATE @T SET fence = GREATEST(fence, %" PRIu64 ") WHERE name = %s",
                                          next, l->esc))) ||
        (rc = my_exec_dl(e, c, "COMMIT", NULL, dl)))
        goto out;
    *fence = next;
    if (live) *held = 1;
    my_wake_local(e);
out:
    my_conn_put(e, c);
    free(eid);
    return rc;
}
