/*
 * Rate limiters on SQLite (baton_ratelimit_*; docs/ratelimit.md): the table
 * <table>_rate (key TEXT PRIMARY KEY, permits, interval_ms, burst, tat_us),
 * created on a handle's first use. Each decision is one BEGIN IMMEDIATE
 * transaction (read the row, baton_gcra_step in C, write it back, COMMIT),
 * so two processes never decide on the same TAT. The clock is the local
 * wall clock in µs (the database outlives a reboot, so CLOCK_BOOTTIME, which
 * the leases use, would not do): a step back makes the limiter wait longer,
 * a step forward by D frees up to min(D, burst) admissions early. The row
 * is durable as the database is: a process killed at any point leaves the
 * last committed TAT, never a fresh burst.
 */
#include "sq_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char *key;
    int ready;               /* this handle created the table already */
} sqrate;

static int rate_new(void *eng, const char *key, void **st)
{
    sqrate *r = calloc(1, sizeof *r);
    (void)eng;
    if (!r || !(r->key = strdup(key))) {
        free(r);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = r;
    return 0;
}

static void rate_free(void *eng, void *st)
{
    sqrate *r = st;
    (void)eng;
    if (!r) return;
    free(r->key);
    free(r);
}

static int64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* SQL with "%s" for the table's name (a checked identifier, so quoting it
 * cannot break): malloc'd. */
static char *rate_sql(sqeng *e, const char *fmt)
{
    size_t n = strlen(fmt) + strlen(e->table) + 8;
    char *s = malloc(n);
    if (s) snprintf(s, n, fmt, e->table);
    return s;
}

static int prep(sqeng *e, sqconn *c, const char *fmt, sqlite3_stmt **st)
{
    char *sql = rate_sql(e, fmt);
    int rc;
    *st = NULL;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    free(sql);
    return rc == SQLITE_OK ? 0 : sq_err(e, c, rc, "prepare (rate limiter)");
}

static int ensure_table(sqeng *e, sqconn *c, sqrate *r)
{
    char *sql;
    int rc;
    if (r->ready) return 0;
    sql = rate_sql(e, "CREATE TABLE IF NOT EXISTS \"%s_rate\" (key TEXT PRIMARY KEY NOT NULL, permits INTEGER NOT "
                      "NULL, interval_ms INTEGER NOT NULL, burst INTEGER NOT NULL, tat_us INTEGER NOT NULL)");
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = sq_exec_ddl(e, c, sql, "create the rate limiter table");
    free(sql);
    if (!rc) r->ready = 1;
    return rc;
}

/* The row of R: 1 with it, 0 when absent, or an error. */
static int row_read(sqeng *e, sqconn *c, sqrate *r, baton_rate_cfg *cfg, int64_t *tat)
{
    sqlite3_stmt *st = NULL;
    int rc = prep(e, c, "SELECT permits, interval_ms, burst, tat_us FROM \"%s_rate\" WHERE key = ?1", &st);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        cfg->permits = (uint32_t)sqlite3_column_int64(st, 0);
        cfg->interval_ms = (uint32_t)sqlite3_column_int64(st, 1);
        cfg->burst = (uint32_t)sqlite3_column_int64(st, 2);
        *tat = sqlite3_column_int64(st, 3);
        rc = cfg->permits && cfg->interval_ms && cfg->burst ? 1
             : baton_seterr(BATON_EPROTO, 0, "sqlite: rate limiter '%.200s': its row holds a zero rate", r->key);
    } else {
        rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "read the rate limiter");
    }
    sqlite3_finalize(st);
    return rc;
}

static int row_write(sqeng *e, sqconn *c, sqrate *r, const baton_rate_cfg *cfg, int64_t tat)
{
    sqlite3_stmt *st = NULL;
    int rc = prep(e, c, "INSERT OR REPLACE INTO \"%s_rate\" (key, permits, interval_ms, burst, tat_us) VALUES "
                        "(?1, ?2, ?3, ?4, ?5)", &st);
    if (rc) return rc;
    sqlite3_bind_text(st, 1, r->key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, cfg->permits);
    sqlite3_bind_int64(st, 3, cfg->interval_ms);
    sqlite3_bind_int64(st, 4, cfg->burst);
    sqlite3_bind_int64(st, 5, tat);
    rc = sqlite3_step(st);
    rc = rc == SQLITE_DONE ? 0 : sq_err(e, c, rc, "write the rate limiter");
    sqlite3_finalize(st);
    return rc;
}

static int rate_take(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n, int64_t reserve_us,
                     int64_t *wait_us, baton_rate_cfg *stored)
{
    sqeng *e = eng;
    sqrate *r = st;
    sqconn *c = NULL;
    int64_t tat = 0, tat0;
    int rc, have, broken = 0;
    *wait_us = 0;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if ((rc = ensure_table(e, c, r)) || (rc = sq_begin(e, c, NULL, "rate limiter"))) goto out;
    if ((have = row_read(e, c, r, stored, &tat)) < 0) {
        rc = have;
        goto out;
    }
    tat0 = tat;
    if (have && (stored->permits != cfg->permits || stored->interval_ms != cfg->interval_ms ||
                 stored->burst != cfg->burst) && !replace) {
        rc = baton_seterr(BATON_ECONFLICT, 0, "sqlite: rate limiter '%.200s' is configured otherwise", r->key);
        goto out;
    }
    *stored = *cfg;
    if (n) *wait_us = baton_gcra_step(cfg, wall_us(), &tat, n, reserve_us);
    if (have != 1 || tat != tat0 || replace) {
        if ((rc = row_write(e, c, r, cfg, tat))) goto out;
    }
    if ((rc = sq_exec(e, c, "COMMIT", "commit"))) broken = 1;
out:
    sq_conn_put(e, c, broken);   /* rolls back an open transaction */
    return rc;
}

static int rate_inspect(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us)
{
    sqeng *e = eng;
    sqrate *r = st;
    sqconn *c = NULL;
    int64_t tat = 0, now;
    int rc;
    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, sq_busy_deadline(e, 0), NULL);
    if (!(rc = ensure_table(e, c, r))) rc = row_read(e, c, r, stored, &tat);
    sq_conn_put(e, c, 0);
    if (rc < 0) return rc;
    if (rc == 0) return baton_seterr(BATON_ENOENT, 0, "sqlite: no rate limiter '%.200s'", r->key);
    now = wall_us();
    *ahead_us = tat > now ? tat - now : 0;
    return 0;
}

const baton_ratelimit_methods baton__ratelimit_sqlite = {
    .create = rate_new,
    .destroy = rate_free,
    .take = rate_take,
    .inspect = rate_inspect,
};
