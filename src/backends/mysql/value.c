/*
 * Values: one row per name in <table>_value (name, data, version). A
 * deletion keeps the row as a tombstone (data NULL) so the version goes on
 * increasing over the value's whole life; every change is one statement
 * that bumps it and hands the new version back through LAST_INSERT_ID(expr)
 * (the OK packet's insert id: no second round trip).
 *
 * set ANY     INSERT ... ON DUPLICATE KEY UPDATE version = version + 1
 * set 0       the same, taken only when the row is absent or a tombstone
 * set V       UPDATE ... WHERE version = V AND data IS NOT NULL
 *             (InnoDB's row lock: two of them that expect V never both
 *             change a row)
 * delete      UPDATE to a tombstone, conditioned likewise; when no row
 *             changed, one SELECT tells BATON_ENOENT from BATON_ECONFLICT
 * watch       re-reads the version every MY_POLL_MS (MariaDB cannot
 *             notify); a change made through this client wakes its
 *             watchers at once
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    myeng *e;
    char *name;
    char *esc;
} myvalue;

static int value_create(void *eng, const char *name, void **st)
{
    myvalue *v = calloc(1, sizeof *v);
    *st = NULL;
    if (!v) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    v->e = eng;
    if (!(v->name = strdup(name)) || !(v->esc = my_escape(name))) {
        free(v->name);
        free(v);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = v;
    return 0;
}

static void value_destroy(void *eng, void *st)
{
    myvalue *v = st;
    (void)eng;
    if (!v) return;
    free(v->name);
    free(v->esc);
    free(v);
}

/* The row now: *present (data not NULL), *version (the row's, tombstones
 * included; 0 without a row), and the data when OUT is given. */
static int read_value(myvalue *v, baton_value_data *out, int *present, uint64_t *version, int64_t deadline)
{
    myeng *e = v->e;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *sql;
    int rc;

    *present = 0;
    *version = 0;
    if ((rc = my_aux_ready(e, MY_AUX_VALUE))) return rc;
    sql = my_sql(e, out ? "SELECT version, data FROM @V WHERE name = %s"
                        : "SELECT version, data IS NOT NULL FROM @V WHERE name = %s", v->esc);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run_dl(e, sql, 1, &r, NULL, NULL, deadline);
    free(sql);
    if (rc) return rc;
    if ((row = mysql_fetch_row(r))) {
        unsigned long *len = mysql_fetch_lengths(r);
        *version = row[0] ? strtoull(row[0], NULL, 10) : 0;
        *present = out ? row[1] != NULL : row[1] && !strcmp(row[1], "1");
        if (out && *present) {
            if (!(out->data = malloc(len[1] + 1))) {
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto out;
            }
            memcpy(out->data, row[1], len[1]);
            out->data[len[1]] = 0;
            out->len = len[1];
            out->version = *version;
        }
    }
out:
    mysql_free_result(r);
    return rc;
}

static int value_get(void *eng, void *st, baton_value_data *out)
{
    myvalue *v = st;
    uint64_t version;
    int present, rc;
    (void)eng;
    memset(out, 0, sizeof *out);
    if ((rc = read_value(v, out, &present, &version, my_deadline_ms(v->e->io_timeout_ms)))) return rc;
    if (!present) return baton_seterr(BATON_ENOENT, 0, "mysql: value '%s' is absent", v->name);
    return 0;
}

/* No row changed: BATON_ENOENT when the value is absent (and ABSENT_IS_ENOENT), else BATON_ECONFLICT. */
static int why_not(myvalue *v, uint64_t expect, int absent_is_enoent)
{
    uint64_t version;
    int present, rc;
    if ((rc = read_value(v, NULL, &present, &version, my_deadline_ms(v->e->io_timeout_ms)))) return rc;
    if (!present && absent_is_enoent) return baton_seterr(BATON_ENOENT, 0, "mysql: value '%s' is absent", v->name);
    if (expect == 0)
        return baton_seterr(BATON_ECONFLICT, 0, "mysql: value '%s' exists (version %" PRIu64 ")", v->name, version);
    return baton_seterr(BATON_ECONFLICT, 0, "mysql: value '%s' is at version %" PRIu64 ", not %" PRIu64, v->name,
                        present ? version : 0, expect);
}

static int value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    myeng *e = eng;
    myvalue *v = st;
    char *d = NULL, *sql = NULL;
    uint64_t affected = 0, id = 0;
    int rc;

    if ((rc = my_aux_ready(e, MY_AUX_VALUE))) return rc;
    if (!(d = my_escape_n(data, len))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (expect == BATON_VALUE_ANY)
        sql = my_sql(e, "INSERT INTO @V (name, data, version) VALUES (%s, %s, LAST_INSERT_ID(1)) "
                        "ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1), data = VALUES(data)",
                     v->esc, d);
    else if (expect == 0)
        sql = my_sql(e, "INSERT INTO @V (name, data, version) VALUES (%s, %s, LAST_INSERT_ID(1)) "
                        "ON DUPLICATE KEY UPDATE "
                        "version = IF(@baton_ok := (data IS NULL), LAST_INSERT_ID(version + 1), version), "
                        "data = IF(@baton_ok, VALUES(data), data)", v->esc, d);
    else
        sql = my_sql(e, "UPDATE @V SET version = LAST_INSERT_ID(version + 1), data = %s "
                        "WHERE name = %s AND version = %" PRIu64 " AND data IS NOT NULL", d, v->esc, expect);
    free(d);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* an unconditional set may run twice (a second version); a conditional
     * one may not (its second run would fail its own condition) */
    rc = my_run(e, sql, expect == BATON_VALUE_ANY, NULL, &affected, &id);
    free(sql);
    if (rc) return rc;
    if (affected == 0) return why_not(v, expect, 0);
    my_wake_local(e);
    if (version) *version = id;
    return 0;
}

static int value_del(void *eng, void *st, uint64_t expect)
{
    myeng *e = eng;
    myvalue *v = st;
    char *sql = NULL;
    uint64_t affected = 0;
    int rc;

    if ((rc = my_aux_ready(e, MY_AUX_VALUE))) return rc;
    if (expect == 0) return why_not(v, expect, 1);   /* "only if absent": nothing to delete either way */
    if (expect == BATON_VALUE_ANY)
        sql = my_sql(e, "UPDATE @V SET version = version + 1, data = NULL WHERE name = %s AND data IS NOT NULL",
                     v->esc);
    else
        sql = my_sql(e, "UPDATE @V SET version = version + 1, data = NULL WHERE name = %s AND data IS NOT NULL "
                        "AND version = %" PRIu64, v->esc, expect);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 0, NULL, &affected, NULL);
    free(sql);
    if (rc) return rc;
    if (affected == 0) return why_not(v, expect, 1);
    my_wake_local(e);
    return 0;
}

static int watch_loop(myeng *e, myvalue *v, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        uint64_t version = 0;
        int present = 0, rc;
        int64_t until;
        rc = read_value(v, NULL, &present, &version, my_step_deadline(e, deadline_ns));
        /* a watcher outlives a server that is away (a restart): it reads
         * again at the poll bound until its deadline */
        if (rc && (rc != BATON_EUNAVAILABLE || deadline_ns == 0)) return rc;
        /* an absent value (a tombstone) is version 0 to the caller */
        if (!rc && (present ? version : 0) != known) return 0;
        if (deadline_ns == 0 || baton_now_ns() >= deadline_ns)
            return baton_seterr(BATON_ETIMEDOUT, 0, "mysql: value '%s': no change%s", v->name,
                                rc ? " (the server is unavailable)" : "");
        until = baton_now_ns() + (int64_t)MY_POLL_MS * 1000000LL;
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED)
            return baton_seterr(BATON_ECANCELED, 0, "mysql: value '%s': watch canceled", v->name);
    }
}

static int value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    mypark p;
    int rc;
    my_park_enter(eng, &p, w);
    rc = watch_loop(eng, st, known, deadline_ns, w);
    my_park_leave(eng, &p);
    return rc;
}

const baton_value_methods my_value_methods = {
    .create = value_create,
    .destroy = value_destroy,
    .get = value_get,
    .set = value_set,
    .del = value_del,
    .watch = value_watch,
};
