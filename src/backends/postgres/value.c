/*
 * Values (baton_value_*): one row of <table>_value per name (coord.c),
 * (name, data bytea, version), in every mode. Each statement is one round
 * trip and atomic on the server:
 *   - set, any or create (expect 0): INSERT ... ON CONFLICT (name) DO UPDATE
 *     SET version = version + 1 [WHERE the row is a tombstone];
 *   - compare-and-set: UPDATE ... WHERE version = $expect AND data IS NOT
 *     NULL (two clients that both expect V: the second's UPDATE waits for
 *     the first's row lock, then re-checks the WHERE on the new row and
 *     changes nothing);
 *   - delete: the row is kept as a tombstone (data NULL, version + 1), so
 *     a re-created value goes on counting: versions strictly increase over
 *     the name's whole life and are never 0.
 * Every change NOTIFYs the values' channel with the name in the same
 * statement (delivered at its commit).
 *
 * watch: the waiter joins the listener's list (lease.c) before it reads the
 * version, so a change committed after that read wakes it. Notifications
 * are lost only while the listener has no LISTEN in effect (its connection
 * died: a terminated backend, a restart); when it listens again it wakes
 * every waiter, which reads again. A listener that cannot know its
 * connection died (a frozen link, until keepalives end it) is covered by a
 * re-read every RECHECK_MS (every RECHECK_DOWN_MS while the listener is
 * not listening, or the server does not answer).
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MS 5000          /* a watcher reads again at least this often */
#define RECHECK_DOWN_MS 200      /* ... while the listener is not listening */

typedef struct {
    char *name;
} pgvalue;

static const char get_sql[] = "SELECT encode(data, 'hex'), version FROM @V WHERE name = $1 AND data IS NOT NULL";

static const char version_sql[] = "SELECT version FROM @V WHERE name = $1 AND data IS NOT NULL";

/* $1 name, $2 data, $3 any (true) or only a tombstone or nothing (false), $4 channel */
static const char upsert_sql[] =
    "INSERT INTO @V AS v (name, data, version, updated_at) VALUES ($1, $2::bytea, 1, clock_timestamp()) "
    "ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data, version = v.version + 1, "
    "updated_at = EXCLUDED.updated_at WHERE $3::boolean OR v.data IS NULL "
    "RETURNING v.version, pg_notify($4, v.name)";

/* $1 name, $2 data, $3 the expected version, $4 channel */
static const char cas_sql[] =
    "UPDATE @V SET data = $2::bytea, version = version + 1, updated_at = clock_timestamp() "
    "WHERE name = $1 AND version = $3::bigint AND data IS NOT NULL RETURNING version, pg_notify($4, name)";

/* $1 name, $2 the expected version (-1: any), $3 channel; answers whether it
 * deleted, and the version before (NULL: absent) */
static const char del_sql[] =
    "WITH d AS (UPDATE @V SET data = NULL, version = version + 1, updated_at = clock_timestamp() "
    "WHERE name = $1 AND data IS NOT NULL AND ($2::bigint < 0 OR version = $2::bigint) "
    "RETURNING version, pg_notify($3, name)) "
    "SELECT (SELECT count(*) FROM d), (SELECT version FROM @V WHERE name = $1 AND data IS NOT NULL)";

static int value_new(void *eng, const char *name, void **st)
{
    pgvalue *v = calloc(1, sizeof *v);
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
    pgvalue *v = st;
    (void)eng;
    free(v->name);
    free(v);
}

static int value_get(void *eng, void *st, baton_value_data *out)
{
    pgeng *e = eng;
    pgvalue *v = st;
    const char *p[1] = { v->name };
    PGresult *r = NULL;
    int rc;

    memset(out, 0, sizeof *out);
    if ((rc = pg_coord_ready(e, PG_CH_VALUE))) return rc;
    if ((rc = pg_coord_run(e, get_sql, 1, p, 1, INT64_MAX, &r))) return rc;
    if (PQntuples(r) == 0) {
        rc = baton_seterr(BATON_ENOENT, 0, "postgres: value '%s' does not exist", v->name);
    } else if ((rc = pg_hex_decode(PQgetvalue(r, 0, 0), &out->data, &out->len)) == 0) {
        out->version = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    return rc;
}

static int value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    pgeng *e = eng;
    pgvalue *v = st;
    char ex[24], *hex;
    const char *p[4];
    PGresult *r = NULL;
    int rc, cas = expect != BATON_VALUE_ANY && expect != 0;

    if ((rc = pg_coord_ready(e, PG_CH_VALUE))) return rc;
    /* no version is that large: it cannot hold */
    if (cas && expect > INT64_MAX)
        return baton_seterr(BATON_ECONFLICT, 0, "postgres: value '%s' is not at version %llu", v->name,
                            (unsigned long long)expect);
    if (!(hex = pg_hex_encode(data, len))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(ex, sizeof ex, "%llu", (unsigned long long)expect);
    p[0] = v->name;
    p[1] = hex;
    p[2] = cas ? ex : expect == BATON_VALUE_ANY ? "true" : "false";
    p[3] = e->cchannel[PG_CH_VALUE];
    /* not retried: a set that committed, run again, would conflict with itself */
    rc = pg_coord_run(e, cas ? cas_sql : upsert_sql, 4, p, 0, INT64_MAX, &r);
    free(hex);
    if (rc) return rc;
    if (PQntuples(r) == 0) {
        rc = expect == 0 ? baton_seterr(BATON_ECONFLICT, 0, "postgres: value '%s' exists", v->name)
                         : baton_seterr(BATON_ECONFLICT, 0, "postgres: value '%s' is not at version %llu",
                                        v->name, (unsigned long long)expect);
    } else if (version) {
        *version = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    }
    PQclear(r);
    return rc;
}

static int value_del(void *eng, void *st, uint64_t expect)
{
    pgeng *e = eng;
    pgvalue *v = st;
    char ex[24];
    const char *p[3] = { v->name, ex, e->cchannel[PG_CH_VALUE] };
    PGresult *r = NULL;
    int rc;

    if ((rc = pg_coord_ready(e, PG_CH_VALUE))) return rc;
    if (expect == BATON_VALUE_ANY) snprintf(ex, sizeof ex, "-1");
    else if (expect > INT64_MAX) snprintf(ex, sizeof ex, "0");      /* never holds */
    else snprintf(ex, sizeof ex, "%llu", (unsigned long long)expect);
    if ((rc = pg_coord_run(e, del_sql, 3, p, 0, INT64_MAX, &r))) return rc;
    if (strcmp(PQgetvalue(r, 0, 0), "0")) rc = 0;
    /* With any version, nothing deleted means absent: a concurrent delete
     * that committed while this one waited for the row is not in the
     * statement's snapshot, which still shows the row's old version. */
    else if (PQgetisnull(r, 0, 1) || expect == BATON_VALUE_ANY) rc = baton_seterr(BATON_ENOENT, 0, "postgres: value '%s' does not exist", v->name);
    else rc = baton_seterr(BATON_ECONFLICT, 0, "postgres: value '%s' is at version %s, not %llu", v->name,
                           PQgetvalue(r, 0, 1), (unsigned long long)expect);
    PQclear(r);
    return rc;
}

/* The version now (0: absent). */
static int version_now(pgeng *e, pgvalue *v, uint64_t *version)
{
    const char *p[1] = { v->name };
    PGresult *r = NULL;
    int rc = pg_coord_run(e, version_sql, 1, p, 1, INT64_MAX, &r);
    if (rc) return rc;
    *version = PQntuples(r) ? strtoull(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    PQclear(r);
    return 0;
}

static int value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    pgeng *e = eng;
    pgvalue *v = st;
    pgwait me = { PG_CH_VALUE, v->name, w, NULL };
    int rc, linked = 0;

    if ((rc = pg_coord_ready(e, PG_CH_VALUE))) return rc;
    if (deadline_ns != 0 && w) {
        /* listen before the first read: a change after it wakes us */
        if ((rc = pg_wait_link(e, &me))) return rc;
        linked = 1;
    }
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        uint64_t now_v = 0;
        int64_t until;
        int down;
        rc = version_now(e, v, &now_v);
        if (rc == 0 && now_v != known) break;
        if (rc && rc != BATON_EUNAVAILABLE) break;
        /* a server that is away (a restart) is waited out, as lock waiters do */
        down = rc == BATON_EUNAVAILABLE;
        if (deadline_ns == 0 || !w) {
            if (!down) rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: value '%s' unchanged", v->name);
            break;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: value '%s': watch timed out%s", v->name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        until = baton_now_ns() + (int64_t)(pg_listening(e) && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: value '%s': watch canceled", v->name);
            break;
        }
    }
    if (linked) pg_wait_unlink(e, &me);
    return rc;
}

const baton_value_methods pg_value_methods = {
    .create = value_new,
    .destroy = value_free,
    .get = value_get,
    .set = value_set,
    .del = value_del,
    .watch = value_watch,
};
