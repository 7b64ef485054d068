/*
 * The tables of values, groups and queues (value.c, group.c, queue.c),
 * beside the lock table and named after it, in every mode:
 *
 *   <table>_value  one row per value name ever set: data (NULL once
 *                  deleted: a tombstone, so that a re-created value goes on
 *                  from its last version), version
 *   <table>_group  one row per member: a lease on the server's clock
 *   <table>_queue  one row per item; a taken one carries its taker, lease
 *                  and fence (fences come from the id sequence)
 *   <table>_fair   one row per waiter of a fair lock (fair.c)
 *   <table>_sem    one row per semaphore: its available count (sem.c)
 *   <table>_permit one row per permit handed out, with its lease (sem.c)
 *
 * Each table has its NOTIFY channel, "baton:<schema>.<table>_value" and so
 * on (cut at 63 bytes, as channel names are identifiers), whose payload is
 * the name that changed. The lock table's listener thread (lease.c) LISTENs
 * on all of them on its one connection and wakes the waiters of that kind
 * and name. A table is created on first use, as the lock table is: under
 * the DDL advisory lock, in one transaction; a role that may not gets
 * BATON_EAUTH with the DDL to hand a DBA. docs/postgres-engine.md,
 * "Values, groups and queues".
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const suffix[PG_CH_N] = { NULL, "_value", "_group", "_queue", "_fair", "_sem", "_permit" };

/* The DDL of each table ("@X": the table). */
static const char *const ddl[PG_CH_N] = {
    NULL,
    "CREATE TABLE @X (name text PRIMARY KEY, data bytea, version bigint NOT NULL, updated_at timestamptz)",
    "CREATE TABLE @X (name text NOT NULL, id text NOT NULL, value text NOT NULL DEFAULT '', owner text NOT NULL, "
    "holder text, expires_at timestamptz NOT NULL, joined_at timestamptz, PRIMARY KEY (name, id))",
    "CREATE TABLE @X (id bigserial PRIMARY KEY, queue text NOT NULL, data bytea NOT NULL, taken_by text, "
    "holder text, lease_until timestamptz, fence bigint, put_at timestamptz NOT NULL DEFAULT clock_timestamp())",
    /* fair.c: one row per waiter of a fair lock, alive while its backend
     * (pid) lives and its lease is not over */
    "CREATE TABLE @X (seq bigserial PRIMARY KEY, name text NOT NULL, owner text NOT NULL, holder text, "
    "pid integer NOT NULL, lease_until timestamptz NOT NULL)",
    /* sem.c: a semaphore's available count, and the permits handed out */
    "CREATE TABLE @X (name text PRIMARY KEY, permits bigint NOT NULL)",
    "CREATE TABLE @X (name text NOT NULL, id text NOT NULL, holder text, lease_until timestamptz NOT NULL, "
    "PRIMARY KEY (name, id))",
};
/* ... what else it needs (run in the same transaction) */
static const char *const ddl2[PG_CH_N] = { NULL, NULL, NULL, "CREATE INDEX ON @X (queue, id)",
                                           "CREATE INDEX ON @X (name, seq)", NULL, NULL };
/* ... and the privileges a role needs on it */
static const char *const grants[PG_CH_N] = {
    NULL, "SELECT, INSERT, UPDATE", "SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE, DELETE",
    "SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT, UPDATE", "SELECT, INSERT, UPDATE, DELETE",
};

/* The columns we use, as format_type() names them. */
static const char *const columns[PG_CH_N][8] = {
    { NULL },
    { "name text", "data bytea", "version bigint", NULL },
    { "name text", "id text", "value text", "owner text", "holder text", "expires_at timestamp with time zone", NULL },
    { "id bigint", "queue text", "data bytea", "taken_by text", "holder text",
      "lease_until timestamp with time zone", "fence bigint", NULL },
    { "seq bigint", "name text", "owner text", "holder text", "pid integer", "lease_until timestamp with time zone",
      NULL },
    { "name text", "permits bigint", NULL },
    { "name text", "id text", "holder text", "lease_until timestamp with time zone", NULL },
};

int pg_coord_configure(pgeng *e)
{
    char *qs = e->schema ? pg_quote_ident(e->schema) : NULL;
    int rc = 0;

    if (e->schema && !qs) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (int k = PG_CH_VALUE; k < PG_CH_N; k++) {
        char t[80], *qt;
        size_t n;
        /* the lock table's name is at most 57 bytes: room for the suffix */
        snprintf(t, sizeof t, "%s%s", e->table, suffix[k]);
        if (!(qt = pg_quote_ident(t))) goto nomem;
        n = (qs ? strlen(qs) + 1 : 0) + strlen(qt) + 1;
        if (!(e->ctable[k] = malloc(n))) {
            free(qt);
            goto nomem;
        }
        snprintf(e->ctable[k], n, "%s%s%s", qs ? qs : "", qs ? "." : "", qt);
        free(qt);
        /* channel names are identifiers: at most 63 bytes, cut as the lock table's is */
        {
            char ch[256];
            snprintf(ch, sizeof ch, "baton:%s%s%s", e->schema ? e->schema : "", e->schema ? "." : "", t);
            ch[63] = 0;
            if (!(e->cchannel[k] = strdup(ch))) goto nomem;
        }
    }
    goto out;
nomem:
    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
out:
    free(qs);
    return rc;
}

void pg_coord_free(pgeng *e)
{
    for (int k = 0; k < PG_CH_N; k++) {
        free(e->ctable[k]);
        free(e->cchannel[k]);
    }
    free(e->qitemseq);
}

/* TMPL with each "@<key>" replaced by its value (malloc'd). */
static char *subst(const char *tmpl, const char *const *keys, const char *const *vals, size_t nk)
{
    size_t n = 1;
    char *out, *o;
    for (const char *p = tmpl; *p; p++) {
        size_t add = 1;
        for (size_t i = 0; p[0] == '@' && i < nk; i++)
            if (p[1] == keys[i][0] && vals[i]) add = strlen(vals[i]), p++;
        n += add;
    }
    if (!(out = malloc(n))) return NULL;
    o = out;
    for (const char *p = tmpl; *p; p++) {
        int done = 0;
        for (size_t i = 0; p[0] == '@' && i < nk && !done; i++)
            if (p[1] == keys[i][0] && vals[i]) {
                size_t l = strlen(vals[i]);
                memcpy(o, vals[i], l);
                o += l;
                p++;
                done = 1;
            }
        if (!done) *o++ = *p;
    }
    *o = 0;
    return out;
}

char *pg_coord_sql(pgeng *e, const char *tmpl)
{
    static const char *const keys[] = { "V", "G", "Q", "F", "S", "P" };
    const char *vals[6] = { e->ctable[PG_CH_VALUE], e->ctable[PG_CH_GROUP], e->ctable[PG_CH_QUEUE],
                            e->ctable[PG_CH_FAIR], e->ctable[PG_CH_SEM], e->ctable[PG_CH_PERMIT] };
    return subst(tmpl, keys, vals, 6);
}

int pg_coord_run(pgeng *e, const char *tmpl, int n, const char *const *p, int retry, int64_t by, PGresult **res)
{
    char *sql = pg_coord_sql(e, tmpl);
    int rc;
    *res = NULL;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = pg_run_by(e, sql, n, p, retry, by, res);
    free(sql);
    return rc;
}

static int exec1(pgeng *e, PGconn *c, const char *sql, int n, const char *const *p, PGresult **r)
{
    *r = NULL;
    return pg_exec(e, c, sql, n, p, pg_deadline_ms(e->io_timeout_ms), NULL, r);
}

static int simple(pgeng *e, PGconn *c, const char *sql)
{
    PGresult *r = NULL;
    int rc = exec1(e, c, sql, 0, NULL, &r);
    PQclear(r);
    return rc;
}

static int exists(pgeng *e, PGconn *c, const char *rel, int *yes)
{
    const char *p[1] = { rel };
    PGresult *r = NULL;
    int rc = exec1(e, c, "SELECT to_regclass($1) IS NOT NULL", 1, p, &r);
    if (rc == 0) *yes = !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return rc;
}

/* Creates table K in one transaction under the DDL lock (see pg.c's
 * create_locked: CREATE ... IF NOT EXISTS is not safe against itself). */
static int create(pgeng *e, PGconn *c, int k)
{
    static const char *const keys[] = { "X" };
    const char *vals[1] = { e->ctable[k] };
    char *sql = NULL, *sql2 = NULL;
    int rc, yes = 0;

    if ((rc = simple(e, c, "BEGIN"))) return rc;
    if ((rc = simple(e, c, "SELECT pg_advisory_xact_lock(" PG_DDL_KEY ")"))) goto fail;
    if ((rc = exists(e, c, e->ctable[k], &yes)) || yes) goto commit;
    if (!(sql = subst(ddl[k], keys, vals, 1)) || (ddl2[k] && !(sql2 = subst(ddl2[k], keys, vals, 1)))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    rc = simple(e, c, sql);
    if (rc == 0 && sql2) rc = simple(e, c, sql2);
    if (rc == BATON_EAUTH) {
        const char *u = PQuser(c);
        int seq = k == PG_CH_QUEUE || k == PG_CH_FAIR;   /* a bigserial column */
        rc = baton_seterr(BATON_EAUTH, 0, "postgres: role \"%s\" may not create the table %s; ask a DBA to run: "
                          "%s;%s%s GRANT %s ON %s TO \"%s\";%s%s%s", u ? u : "", e->ctable[k], sql,
                          sql2 ? " " : "", sql2 ? sql2 : "", grants[k], e->ctable[k], u ? u : "",
                          seq ? " GRANT USAGE ON SEQUENCE <its sequence> TO \"" : "", seq ? (u ? u : "") : "",
                          seq ? "\";" : "");
    }
    if (rc) goto fail;
commit:
    if (rc == 0) rc = simple(e, c, "COMMIT");
    if (rc == 0) goto out;
fail:
    {
        /* keep the first error: the rollback's own is of no interest */
        baton_error saved = *baton_error_last();
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        if (PQstatus(c) != CONNECTION_OK || simple(e, c, "ROLLBACK")) pg_conn_drop(c);
        baton_seterr(rc, saved.native, "%s", msg);
    }
out:
    free(sql);
    free(sql2);
    return rc;
}

/* Every column we use is there, of its type: BATON_EPROTO naming one that is not. */
static int check(pgeng *e, PGconn *c, int k)
{
    const char *p[1] = { e->ctable[k] };
    PGresult *r = NULL;
    int rc = exec1(e, c, "SELECT a.attname || ' ' || format_type(a.atttypid, NULL) FROM pg_attribute a "
                         "WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped", 1, p, &r);
    if (rc) return rc;
    for (int i = 0; columns[k][i]; i++) {
        int found = 0;
        for (int j = 0; j < PQntuples(r) && !found; j++) found = !strcmp(PQgetvalue(r, j, 0), columns[k][i]);
        if (!found) {
            rc = baton_seterr(BATON_EPROTO, 0, "postgres: table %s has no column \"%s\" "
                              "(docs/postgres-engine.md has the DDL)", e->ctable[k], columns[k][i]);
            break;
        }
    }
    PQclear(r);
    if (rc || k != PG_CH_QUEUE) return rc;
    /* the items' id sequence, which hands out the takes' fences too */
    if ((rc = exec1(e, c, "SELECT pg_get_serial_sequence($1, 'id')", 1, p, &r))) return rc;
    if (PQgetisnull(r, 0, 0)) {
        rc = baton_seterr(BATON_EPROTO, 0, "postgres: table %s: column \"id\" has no sequence (make it bigserial)",
                          e->ctable[k]);
    } else {
        char *s = strdup(PQgetvalue(r, 0, 0));
        if (!s) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        pthread_mutex_lock(&e->mu);
        if (s && !e->qitemseq) {
            e->qitemseq = s;
            s = NULL;
        }
        pthread_mutex_unlock(&e->mu);
        free(s);
    }
    PQclear(r);
    return rc;
}

int pg_coord_ready(pgeng *e, int k)
{
    PGconn *c = NULL;
    int rc, ok;

    pthread_mutex_lock(&e->mu);
    ok = e->ctable_ok[k];
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if ((rc = pg_conn_get(e, &c))) return rc;
    /* look first: CREATE needs a privilege a least-privilege role lacks */
    if ((rc = exists(e, c, e->ctable[k], &ok))) goto out;
    if (!ok && (rc = create(e, c, k))) goto out;
    if ((rc = check(e, c, k))) goto out;
    pthread_mutex_lock(&e->mu);
    e->ctable_ok[k] = 1;
    pthread_mutex_unlock(&e->mu);
out:
    pg_conn_put(e, c);
    return rc;
}

/* ---- bytea as hex ------------------------------------------------------------ */

char *pg_hex_encode(const void *data, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *d = data;
    char *out = malloc(len * 2 + 3), *o;
    if (!out) return NULL;
    o = out;
    *o++ = '\\';
    *o++ = 'x';
    for (size_t i = 0; i < len; i++) {
        *o++ = digits[d[i] >> 4];
        *o++ = digits[d[i] & 15];
    }
    *o = 0;
    return out;
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int pg_hex_decode(const char *hex, char **out, size_t *len)
{
    size_t n = strlen(hex);
    char *b;
    *out = NULL;
    *len = 0;
    if (n % 2) return baton_seterr(BATON_EPROTO, 0, "postgres: bad hex from the server");
    if (!(b = malloc(n / 2 + 1))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (size_t i = 0; i < n / 2; i++) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return baton_seterr(BATON_EPROTO, 0, "postgres: bad hex from the server");
        }
        b[i] = (char)(hi << 4 | lo);
    }
    b[n / 2] = 0;
    *out = b;
    *len = n / 2;
    return 0;
}
