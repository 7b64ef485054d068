/*
 * Values, group membership and work queues, in four tables beside the lock
 * table (created on first use, like the latch table):
 *   <table>_value   name -> version, data, deleted: a row per value ever set;
 *                   a delete leaves a tombstone (deleted 1, data NULL) that
 *                   keeps the version, so versions strictly increase over the
 *                   value's whole life
 *   <table>_member  (grp, id) -> value, owner, lease_until, boot: a member's
 *                   lease, as a lock's (a row whose lease ran out, or of
 *                   another boot, is no member)
 *   <table>_queue   seq (AUTOINCREMENT: never reused) -> queue, data,
 *                   taken_by, lease_until, boot, fence: an item, taken while
 *                   taken_by holds a lease that runs
 *   <table>_qfence  queue -> fence: the last fence a take was given
 * Every write is one short BEGIN IMMEDIATE transaction (or one statement),
 * so a compare-and-set, a join and a take are atomic: a second writer waits
 * for the write lock and then reads the first's commit. Times are the lock
 * leases' (CLOCK_BOOTTIME ms and this boot's id, lease.c).
 *
 * Waiting (value and group watches, takers): the locks' sq_wait (lease.c).
 * Every commit that changes a value, a group or a queue touches the
 * same-host sidecar (wake.c), which wakes every waiter of every client on
 * the host (a herd: each re-reads once); a waiter also re-reads when a lease
 * it saw is due to end (a killed member or taker touches nothing) and at
 * least every recheck_ms (default 1 s): the bound on a missed wake-up.
 */
#include "sq_int.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DDL_VALUE "CREATE TABLE IF NOT EXISTS @V (name TEXT PRIMARY KEY NOT NULL, version INTEGER NOT NULL, " \
                  "data BLOB, deleted INTEGER NOT NULL DEFAULT 0)"
#define DDL_MEMBER "CREATE TABLE IF NOT EXISTS @G (grp TEXT NOT NULL, id TEXT NOT NULL, value TEXT NOT NULL, " \
                   "owner TEXT, lease_until INTEGER, boot TEXT, PRIMARY KEY (grp, id))"
#define DDL_QUEUE "CREATE TABLE IF NOT EXISTS @Q (seq INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, " \
                  "data BLOB NOT NULL, taken_by TEXT, lease_until INTEGER, boot TEXT, fence INTEGER)"
#define DDL_QINDEX "CREATE INDEX IF NOT EXISTS @I ON @Q (queue, seq)"
#define DDL_QFENCE "CREATE TABLE IF NOT EXISTS @F (queue TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL)"

/* A bound parameter: text, blob or int64 (?1, ?2 ... in order). */
typedef struct {
    char t;            /* 's' text, 'b' blob, 'i' int64 */
    const char *s;
    const void *b;
    size_t n;
    int64_t i;
} sqarg;

#define S(x) { 's', (x), NULL, 0, 0 }
#define B(x, len) { 'b', NULL, (x), (len), 0 }
#define I(x) { 'i', NULL, NULL, 0, (x) }

static int prep(sqeng *e, sqconn *c, const char *tmpl, const sqarg *a, int na, sqlite3_stmt **st)
{
    int rc = sq_prepare(e, c, tmpl, st);
    if (rc) return rc;
    for (int k = 0; k < na; k++) {
        if (a[k].t == 's') sqlite3_bind_text(*st, k + 1, a[k].s, -1, SQLITE_STATIC);
        else if (a[k].t == 'b') sqlite3_bind_blob(*st, k + 1, a[k].b ? a[k].b : "", (int)a[k].n, SQLITE_STATIC);
        else sqlite3_bind_int64(*st, k + 1, a[k].i);
    }
    return 0;
}

/* Runs a statement that returns no rows: *changes (may be NULL). */
static int exec(sqeng *e, sqconn *c, const char *tmpl, const sqarg *a, int na, int *changes, const char *what)
{
    sqlite3_stmt *st = NULL;
    int rc = prep(e, c, tmpl, a, na, &st);
    if (rc) return rc;
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : sq_err(e, c, rc, what);
    if (!rc && changes) *changes = sqlite3_changes(c->db);
    sqlite3_finalize(st);
    return rc;
}

/* The tables, once per client. */
static int tables(sqeng *e)
{
    static const char *const ddl[] = { DDL_VALUE, DDL_MEMBER, DDL_QUEUE, DDL_QINDEX, DDL_QFENCE };
    sqconn *c = NULL;
    int rc, ok;
    pthread_mutex_lock(&e->mu);
    ok = e->coord_ok;
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    for (size_t k = 0; k < sizeof ddl / sizeof ddl[0] && !rc; k++) {
        char *sql = sq_sql(e, ddl[k]);
        if (!sql) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        else rc = sq_exec_ddl(e, c, sql, "create the value, member and queue tables");
        free(sql);
    }
    sq_conn_put(e, c, 0);
    if (!rc) {
        pthread_mutex_lock(&e->mu);
        e->coord_ok = 1;
        pthread_mutex_unlock(&e->mu);
    }
    return rc;
}

/* A write transaction on a pooled connection. */
static int txn(sqeng *e, int64_t deadline, baton_waiter *w, sqconn **out, const char *what)
{
    int rc;
    *out = NULL;
    if ((rc = tables(e)) || (rc = sq_conn_get(e, out))) return rc;
    sq_conn_arm(*out, sq_busy_deadline(e, deadline), w);
    if ((rc = sq_begin(e, *out, w, what))) {
        sq_conn_put(e, *out, 0);
        *out = NULL;
    }
    return rc;
}

/* Commits (RC 0) or rolls back, returns the connection; a commit that
 * changed something wakes every waiter of the host. */
static int txn_end(sqeng *e, sqconn *c, int rc, int wake)
{
    int broken = 0;
    if (!rc && (rc = sq_exec(e, c, "COMMIT", "commit"))) broken = 1;
    sq_conn_put(e, c, broken);   /* rolls back an open transaction */
    if (!rc && wake) {
        sq_wake_local(e);
        sq_wake_others(e);
    }
    return rc;
}

/* A read on a pooled connection (WAL: never waits for a writer). */
static int reader(sqeng *e, sqconn **out)
{
    int rc;
    if ((rc = tables(e)) || (rc = sq_conn_get(e, out))) return rc;
    sq_conn_arm(*out, sq_busy_deadline(e, 0), NULL);
    return 0;
}

/* ---- values ---------------------------------------------------------------- */

typedef struct {
    char *name;
} sqvalue;

static int value_new(void *eng, const char *name, void **st)
{
    sqvalue *v = calloc(1, sizeof *v);
    (void)eng;
    if (!v || !(v->name = strdup(name))) {
        free(v);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = v;
    return 0;
}

static void value_free(void *eng, void *st)
{
    sqvalue *v = st;
    (void)eng;
    free(v->name);
    free(v);
}

/* The row of NAME: *version (0 absent), *deleted; DATA (may be NULL) gets a
 * malloc'd copy of the bytes. */
static int value_row(sqeng *e, sqconn *c, const char *name, uint64_t *version, int *deleted, baton_value_data *data)
{
    sqlite3_stmt *st = NULL;
    sqarg a[] = { S(name) };
    int rc = prep(e, c, "SELECT version, deleted, data FROM @V WHERE name = ?1", a, 1, &st);
    *version = 0;
    *deleted = 0;
    if (rc) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *version = (uint64_t)sqlite3_column_int64(st, 0);
        *deleted = sqlite3_column_int(st, 1) != 0;
        rc = 0;
        if (data && !*deleted) {
            const void *b = sqlite3_column_blob(st, 2);
            size_t n = (size_t)sqlite3_column_bytes(st, 2);
            if (!(data->data = malloc(n + 1))) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            else {
                if (n) memcpy(data->data, b, n);
                data->data[n] = 0;
                data->len = n;
                data->version = *version;
            }
        }
    } else {
        rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "value");
    }
    sqlite3_finalize(st);
    return rc;
}

static int value_get(void *eng, void *st, baton_value_data *out)
{
    sqeng *e = eng;
    sqvalue *v = st;
    sqconn *c = NULL;
    uint64_t ver;
    int del, rc;
    memset(out, 0, sizeof *out);
    if ((rc = reader(e, &c))) return rc;
    rc = value_row(e, c, v->name, &ver, &del, out);
    sq_conn_put(e, c, 0);
    if (!rc && (!ver || del)) rc = baton_seterr(BATON_ENOENT, 0, "sqlite: value '%.200s' is not set", v->name);
    return rc;
}

/* One compare-and-set transaction: set (DEL 0) or delete (DEL 1). */
static int value_cas(sqeng *e, sqvalue *v, int del, const void *data, size_t len, uint64_t expect, uint64_t *out)
{
    sqconn *c = NULL;
    uint64_t ver;
    int deleted, rc, present;
    if ((rc = txn(e, 0, NULL, &c, "value"))) return rc;
    if ((rc = value_row(e, c, v->name, &ver, &deleted, NULL))) goto out;
    present = ver && !deleted;
    if (del && !present) {
        rc = baton_seterr(BATON_ENOENT, 0, "sqlite: value '%.200s' is not set", v->name);
        goto out;
    }
    if (expect != BATON_VALUE_ANY && (expect == 0 ? present : !present || ver != expect)) {
        rc = baton_seterr(BATON_ECONFLICT, 0, "sqlite: value '%.200s' is at version %llu, not %llu", v->name,
                          (unsigned long long)(present ? ver : 0), (unsigned long long)expect);
        goto out;
    }
    if (ver >= (uint64_t)INT64_MAX) {
        rc = baton_seterr(BATON_EIO, 0, "sqlite: value '%.200s': versions exhausted", v->name);
        goto out;
    }
    {
        sqarg a[] = { S(v->name), I((int64_t)ver + 1), B(data, del ? 0 : len), I(del) };
        rc = exec(e, c, del ? "INSERT OR REPLACE INTO @V (name, version, data, deleted) VALUES (?1, ?2, NULL, ?4)"
                            : "INSERT OR REPLACE INTO @V (name, version, data, deleted) VALUES (?1, ?2, ?3, ?4)",
                  a, 4, NULL, "set value");
    }
    if (!rc && out) *out = ver + 1;
out:
    return txn_end(e, c, rc, 1);
}

static int value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    return value_cas(eng, st, 0, data, len, expect, version);
}

static int value_del(void *eng, void *st, uint64_t expect)
{
    return value_cas(eng, st, 1, NULL, 0, expect, NULL);
}

typedef struct {
    sqeng *e;
    const char *name;
    uint64_t known;
} value_watch_arg;

static int value_changed(void *arg, int64_t *left_ms)
{
    value_watch_arg *a = arg;
    sqconn *c = NULL;
    uint64_t ver;
    int del, rc;
    (void)left_ms;
    if ((rc = reader(a->e, &c))) return rc;
    rc = value_row(a->e, c, a->name, &ver, &del, NULL);
    sq_conn_put(a->e, c, 0);
    if (rc) return rc;
    if ((del ? 0 : ver) == a->known) return BATON_ELOCKED;
    return 0;
}

static int value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    sqvalue *v = st;
    value_watch_arg a = { eng, v->name, known };
    char what[300];
    int rc;
    snprintf(what, sizeof what, "value '%.200s'", v->name);
    rc = sq_wait(eng, w, deadline_ns, what, value_changed, &a);
    if (rc == BATON_ELOCKED) rc = baton_seterr(BATON_ETIMEDOUT, 0, "sqlite: %s: unchanged", what);
    return rc;
}

const baton_value_methods sq__value_methods = {
    .create = value_new,
    .destroy = value_free,
    .get = value_get,
    .set = value_set,
    .del = value_del,
    .watch = value_watch,
};

/* ---- groups ---------------------------------------------------------------- */

static int member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    sqlock *l = calloc(1, sizeof *l);
    (void)eng; (void)opts;
    if (!l || !(l->name = strdup(name)) || !(l->id = strdup(id))) {
        if (l) free(l->name);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->kind = SQ_MEMBER;
    *st = l;
    return 0;
}

/* Joins: never waits for other members. */
int sq_member_join(sqeng *e, sqlock *l, baton_acquire_req *req)
{
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc;
    int64_t now;
    req->fence = 0;
    req->sent_ns = baton_now_ns();
    if ((rc = txn(e, 0, req->waiter, &c, "join"))) return rc;
    now = sq_boot_ms();
    {
        sqarg a[] = { S(l->name), S(l->id), I(now), S(e->boot), S(req->owner->hex) };
        if ((rc = prep(e, c, "SELECT 1 FROM @G WHERE grp = ?1 AND id = ?2 AND owner IS NOT NULL AND owner <> ?5 "
                       "AND lease_until > ?3 AND boot = ?4", a, 5, &st)))
            goto out;
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) rc = baton_seterr(BATON_ELOCKED, 0, "sqlite: group '%.200s': a live member has the id '%s'",
                                            l->name, l->id);
    else rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "join");
    sqlite3_finalize(st);
    if (rc) goto out;
    {
        sqarg a[] = { S(l->name), S(l->id), S(req->value ? req->value : ""), S(req->owner->hex),
                      I(now + req->lease_ms), S(e->boot) };
        rc = exec(e, c, "INSERT OR REPLACE INTO @G (grp, id, value, owner, lease_until, boot) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6)", a, 6, NULL, "join");
    }
out:
    return txn_end(e, c, rc, 1);
}

int sq_member_leave(sqeng *e, sqlock *l, const baton_owner *owner)
{
    sqconn *c = NULL;
    int rc, n = 0;
    sqarg a[] = { S(l->name), S(l->id), S(owner->hex), S(e->boot) };
    if ((rc = txn(e, 0, NULL, &c, "leave"))) return rc;
    rc = exec(e, c, "DELETE FROM @G WHERE grp = ?1 AND id = ?2 AND owner = ?3 AND boot = ?4", a, 4, &n, "leave");
    rc = txn_end(e, c, rc, 1);
    if (!rc && !n)
        rc = baton_seterr(BATON_ELOST, 0, "sqlite: group '%.200s': member '%s' had expired", l->name, l->id);
    return rc;
}

int sq_member_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    sqconn *c = NULL;
    int rc, n = 0;
    int64_t until = sq_boot_ms() + lease_ms;
    sqarg a[] = { S(l->name), S(l->id), S(owner->hex), S(e->boot), I(until), I(sq_boot_ms()) };
    if ((rc = tables(e)) || (rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, deadline_ns), NULL);
    /* only a lease that still runs: one that ran out may have been joined by
     * another member of the id meanwhile (then the owner differs anyway) */
    rc = exec(e, c, "UPDATE @G SET lease_until = ?5 WHERE grp = ?1 AND id = ?2 AND owner = ?3 AND boot = ?4 "
              "AND lease_until > ?6", a, 6, &n, "renew membership");
    sq_conn_put(e, c, 0);
    if (!rc && !n)
        rc = baton_seterr(BATON_ELOST, 0, "sqlite: group '%.200s': member '%s' had expired", l->name, l->id);
    return rc;
}

static uint64_t mix(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = a; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *p = b; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* FN per live member; *token their fingerprint; *left_ms until the first
 * of their leases ends (-1 none). */
static int members(sqeng *e, const char *grp, void (*fn)(void *, const char *, const char *), void *arg,
                   uint64_t *token, int64_t *left_ms)
{
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int64_t now = sq_boot_ms(), first = -1;
    uint64_t sum = 0, n = 0;
    int rc;
    sqarg a[] = { S(grp), I(now), S(e->boot) };
    if ((rc = reader(e, &c))) return rc;
    if ((rc = prep(e, c, "SELECT id, value, lease_until FROM @G WHERE grp = ?1 AND owner IS NOT NULL AND "
                   "lease_until > ?2 AND boot = ?3", a, 3, &st)))
        goto out;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *id = (const char *)sqlite3_column_text(st, 0);
        const char *value = (const char *)sqlite3_column_text(st, 1);
        int64_t left = sqlite3_column_int64(st, 2) - now;
        if (!id) continue;
        if (!value) value = "";
        if (fn) fn(arg, id, value);
        sum += mix(id, value);
        n++;
        if (first < 0 || left < first) first = left;
    }
    rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "list members");
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    if (token) *token = (sum ^ (n * 0x2545f4914f6cdd1dull)) + n;
    if (left_ms) *left_ms = first;
    return rc;
}

static int group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                      void *arg, uint64_t *token)
{
    return members(eng, name, fn, arg, token, NULL);
}

typedef struct {
    sqeng *e;
    const char *name;
    uint64_t token;
} group_watch_arg;

static int group_changed(void *arg, int64_t *left_ms)
{
    group_watch_arg *a = arg;
    uint64_t now;
    int rc = members(a->e, a->name, NULL, NULL, &now, left_ms);
    if (rc) return rc;
    return now == a->token ? BATON_ELOCKED : 0;
}

static int group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    group_watch_arg a = { eng, name, token };
    char what[300];
    int rc;
    snprintf(what, sizeof what, "group '%.200s'", name);
    rc = sq_wait(eng, w, deadline_ns, what, group_changed, &a);
    if (rc == BATON_ELOCKED) rc = baton_seterr(BATON_ETIMEDOUT, 0, "sqlite: %s: unchanged", what);
    return rc;
}

const baton_group_methods sq__group_methods = {
    .create = member_new,
    .list = group_list,
    .watch = group_watch,
};

/* ---- queues ---------------------------------------------------------------- */

static int queue_new(void *eng, const char *name, void **st)
{
    return value_new(eng, name, st);   /* a queue's state is its name, as a value's */
}

static int queue_put(void *eng, void *st, const void *data, size_t len)
{
    sqeng *e = eng;
    sqvalue *q = st;
    sqconn *c = NULL;
    int rc;
    sqarg a[] = { S(q->name), B(data, len) };
    if ((rc = txn(e, 0, NULL, &c, "put"))) return rc;
    rc = exec(e, c, "INSERT INTO @Q (queue, data) VALUES (?1, ?2)", a, 2, NULL, "put");
    return txn_end(e, c, rc, 1);
}

static int queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    sqvalue *q = st;
    sqlock *l = calloc(1, sizeof *l);
    (void)eng; (void)opts;
    if (!l || !(l->name = strdup(q->name))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->kind = SQ_TAKER;
    *tst = l;
    return 0;
}

/* The next fence of queue NAME (in the take's transaction): one more than
 * the last, at least the wall clock in microseconds (as lock fences). */
static int next_fence(sqeng *e, sqconn *c, const char *name, uint64_t *fence)
{
    sqlite3_stmt *st = NULL;
    struct timespec ts;
    uint64_t stored = 0, floor;
    sqarg a[] = { S(name) };
    int rc = prep(e, c, "SELECT fence FROM @F WHERE queue = ?1", a, 1, &st);
    if (rc) return rc;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) stored = (uint64_t)sqlite3_column_int64(st, 0);
    rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "queue fence");
    sqlite3_finalize(st);
    if (rc) return rc;
    clock_gettime(CLOCK_REALTIME, &ts);
    floor = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    *fence = stored + 1 > floor ? stored + 1 : floor;
    {
        sqarg b[] = { S(name), I((int64_t)*fence) };
        return exec(e, c, "INSERT OR REPLACE INTO @F (queue, fence) VALUES (?1, ?2)", b, 2, NULL, "queue fence");
    }
}

typedef struct {
    sqeng *e;
    sqlock *l;
    baton_acquire_req *req;
} take_arg;

/* One take: 0, or BATON_ELOCKED with *left_ms until the first taken item's
 * lease ends (-1 none). */
static int take_once(void *arg, int64_t *left_ms)
{
    take_arg *a = arg;
    sqeng *e = a->e;
    sqlock *l = a->l;
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int64_t now, seq = -1;
    int rc;
    *left_ms = -1;
    a->req->sent_ns = baton_now_ns();
    if ((rc = txn(e, a->req->deadline_ns, a->req->waiter, &c, "take"))) return rc;
    now = sq_boot_ms();
    {
        sqarg q[] = { S(l->name), I(now), S(e->boot) };
        if ((rc = prep(e, c, "SELECT seq, data FROM @Q WHERE queue = ?1 AND (taken_by IS NULL OR lease_until <= ?2 "
                       "OR boot <> ?3) ORDER BY seq LIMIT 1", q, 3, &st)))
            goto out;
    }
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(st, 1);
        const void *b = sqlite3_column_blob(st, 1);
        seq = sqlite3_column_int64(st, 0);
        free(l->data);
        if (!(l->data = malloc(n + 1))) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        else {
            if (n) memcpy(l->data, b, n);
            l->data[n] = 0;
            l->len = n;
            rc = 0;
        }
    } else if (rc == SQLITE_DONE) {
        sqlite3_finalize(st);
        st = NULL;
        /* nothing free: when does the first taken item's lease end? */
        sqarg q[] = { S(l->name), I(now), S(e->boot) };
        if (!(rc = prep(e, c, "SELECT min(lease_until) FROM @Q WHERE queue = ?1 AND taken_by IS NOT NULL AND "
                        "lease_until > ?2 AND boot = ?3", q, 3, &st)) &&
            sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
            *left_ms = sqlite3_column_int64(st, 0) - now;
        if (!rc) rc = BATON_ELOCKED;
    } else {
        rc = sq_err(e, c, rc, "take");
    }
    sqlite3_finalize(st);
    if (rc) goto out;
    if ((rc = next_fence(e, c, l->name, &a->req->fence))) goto out;
    {
        sqarg u[] = { I(seq), S(a->req->owner->hex), I(now + a->req->lease_ms), S(e->boot), I((int64_t)a->req->fence) };
        rc = exec(e, c, "UPDATE @Q SET taken_by = ?2, lease_until = ?3, boot = ?4, fence = ?5 WHERE seq = ?1", u, 5,
                  NULL, "take");
    }
out:
    rc = txn_end(e, c, rc, 0);
    if (!rc) {
        l->seq = seq;
        l->fence = a->req->fence;
    }
    return rc;
}

int sq_taker_take(sqeng *e, sqlock *l, baton_acquire_req *req)
{
    take_arg a = { e, l, req };
    char what[300];
    if (l->seq) return baton_seterr(BATON_EDEADLK, 0, "sqlite: this taker holds an item already");
    snprintf(what, sizeof what, "queue '%.200s'", l->name);
    return sq_wait(e, req->waiter, req->deadline_ns, what, take_once, &a);
}

/* The item's row, owner- and fence-checked: DEL removes it (done), else it
 * is given back (release) or, with LEASE_MS, renewed. */
static int item_update(sqeng *e, sqlock *l, const baton_owner *owner, int op, uint32_t lease_ms, int64_t deadline_ns)
{
    static const char *const sql[] = {
        "DELETE FROM @Q WHERE seq = ?1 AND taken_by = ?2 AND fence = ?3 AND boot = ?4",
        "UPDATE @Q SET taken_by = NULL, lease_until = NULL WHERE seq = ?1 AND taken_by = ?2 AND fence = ?3 AND "
        "boot = ?4",
        "UPDATE @Q SET lease_until = ?5 WHERE seq = ?1 AND taken_by = ?2 AND fence = ?3 AND boot = ?4 AND "
        "lease_until > ?6",
    };
    sqconn *c = NULL;
    int rc, n = 0;
    sqarg a[] = { I(l->seq), S(owner->hex), I((int64_t)l->fence), S(e->boot), I(sq_boot_ms() + lease_ms),
                  I(sq_boot_ms()) };
    if (!l->seq) return baton_seterr(BATON_ENOTHELD, 0, "sqlite: no item taken");
    if ((rc = tables(e)) || (rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, deadline_ns), NULL);
    rc = exec(e, c, sql[op], a, op == 2 ? 6 : 4, &n, "queue item");
    sq_conn_put(e, c, 0);
    if (op != 2) {
        l->seq = 0;
        l->fence = 0;
        if (!rc && op == 1 && n) {
            sq_wake_local(e);
            sq_wake_others(e);
        }
    }
    if (!rc && !n)
        rc = baton_seterr(BATON_ELOST, 0, "sqlite: queue '%.200s': the item's lease had ended and it went back",
                          l->name);
    return rc;
}

int sq_taker_release(sqeng *e, sqlock *l, const baton_owner *owner)
{
    return item_update(e, l, owner, 1, 0, 0);
}

int sq_taker_renew(sqeng *e, sqlock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    return item_update(e, l, owner, 2, lease_ms, deadline_ns);
}

static int queue_done(void *eng, void *tst, const baton_owner *owner)
{
    return item_update(eng, tst, owner, 0, 0, 0);
}

static int queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    sqlock *l = tst;
    (void)eng;
    if (!l->seq || !l->data) return baton_seterr(BATON_ENOTHELD, 0, "sqlite: no item taken");
    *data = l->data;
    *len = l->len;
    return 0;
}

static int queue_size(void *eng, void *st, uint64_t *waiting)
{
    sqeng *e = eng;
    sqvalue *q = st;
    sqconn *c = NULL;
    sqlite3_stmt *s = NULL;
    int rc;
    sqarg a[] = { S(q->name), I(sq_boot_ms()), S(e->boot) };
    *waiting = 0;
    if ((rc = reader(e, &c))) return rc;
    if (!(rc = prep(e, c, "SELECT count(*) FROM @Q WHERE queue = ?1 AND (taken_by IS NULL OR lease_until <= ?2 OR "
                    "boot <> ?3)", a, 3, &s))) {
        if ((rc = sqlite3_step(s)) == SQLITE_ROW) *waiting = (uint64_t)sqlite3_column_int64(s, 0);
        rc = rc == SQLITE_ROW ? 0 : sq_err(e, c, rc, "queue size");
    }
    sqlite3_finalize(s);
    sq_conn_put(e, c, 0);
    return rc;
}

const baton_queue_methods sq__queue_methods = {
    .create = queue_new,
    .destroy = value_free,
    .put = queue_put,
    .taker = queue_taker,
    .item = queue_item,
    .done = queue_done,
    .size = queue_size,
};
