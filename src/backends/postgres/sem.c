/*
 * Semaphores, in every mode (rows, not sessions): the counting one
 * (baton_semaphore_*, Redisson's RSemaphore) and the permit-expirable one
 * (baton_permits_*, RPermitExpirableSemaphore), in two tables beside the
 * lock table (coord.c); a name used both ways shares its count, as on Redis
 * and SQLite:
 *   <table>_sem     name -> permits, the available count (add may make it
 *                   negative); a row = the semaphore was set
 *   <table>_permit  (name, id) -> lease_until (server clock), holder: each
 *                   permit handed out
 * Every operation is one statement. Those that take permits or drain first
 * lock the count row (SELECT ... FOR UPDATE in a CTE) and return expired
 * permits to the count (DELETE ... RETURNING, each counted by exactly one
 * statement), so no cleaner is needed and two takers never see the same
 * count: the second waits on the row lock and reads the first's result.
 *
 * Waiting: a release, an add or a try_set NOTIFYs the semaphores' channel
 * with the name; the client's listener (lease.c) wakes its waiters of the
 * name, each of which tries again (one statement). A permit whose lease
 * ends sends nothing: a permit waiter also wakes when the first lease of
 * the name is due to end, as its last try said. Every waiter re-checks at
 * least every RECHECK_MS (a foreign client's UPDATE without NOTIFY).
 */
#include "pg_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MS 5000          /* a waiter tries again at least this often */
#define RECHECK_DOWN_MS 200      /* ... while the listener or the server is away */

typedef struct {
    char *name;
} pgsem;

/* The count row locked, expired permits deleted, and what is available
 * then (g.avail; no row when the semaphore was never set). $1 name. */
#define RECLAIM                                                                                        \
    "WITH s AS (SELECT permits FROM @S WHERE name = $1 FOR UPDATE), "                                 \
    "x AS (DELETE FROM @P WHERE name = $1 AND lease_until <= clock_timestamp() AND EXISTS (SELECT 1 FROM s) " \
    "RETURNING 1), "                                                                                   \
    "g AS (SELECT s.permits + (SELECT count(*) FROM x) AS avail FROM s) "

/* $1 name, $2 permits wanted, $3 permit id (NULL: a plain semaphore), $4
 * holder, $5 lease ms: (granted, ms until the first lease ends or NULL) */
static const char take_sql[] =
    RECLAIM
    ", u AS (UPDATE @S t SET permits = g.avail - CASE WHEN g.avail >= $2::bigint THEN $2::bigint ELSE 0 END "
    "FROM g WHERE t.name = $1 AND (g.avail >= $2::bigint OR g.avail <> t.permits)) "
    ", i AS (INSERT INTO @P (name, id, holder, lease_until) SELECT $1, $3, $4, clock_timestamp() + "
    "$5::bigint * interval '1 millisecond' FROM g WHERE g.avail >= $2::bigint AND $3::text IS NOT NULL) "
    "SELECT coalesce((SELECT avail >= $2::bigint FROM g), false), "
    "(SELECT ceil(extract(epoch FROM (min(lease_until) - clock_timestamp())) * 1000)::bigint FROM @P "
    "WHERE name = $1 AND lease_until > clock_timestamp())";

/* $1 name, $2 permits, $3 channel: anyone may release (a semaphore never set is set by it) */
static const char add_sql[] =
    "INSERT INTO @S AS t (name, permits) VALUES ($1, $2::bigint) "
    "ON CONFLICT (name) DO UPDATE SET permits = t.permits + EXCLUDED.permits RETURNING pg_notify($3, t.name)";

/* $1 name, $2 permits, $3 channel */
static const char try_set_sql[] =
    "INSERT INTO @S (name, permits) VALUES ($1, $2::bigint) ON CONFLICT (name) DO NOTHING "
    "RETURNING pg_notify($3, name)";

/* $1 name: the count, expired permits counted back without writing */
static const char avail_sql[] =
    "SELECT s.permits + (SELECT count(*) FROM @P p WHERE p.name = s.name AND p.lease_until <= clock_timestamp()) "
    "FROM @S s WHERE s.name = $1";

/* $1 name: what was available (0 when none or below zero) */
static const char drain_sql[] =
    RECLAIM
    ", u AS (UPDATE @S t SET permits = CASE WHEN g.avail > 0 THEN 0 ELSE g.avail END FROM g WHERE t.name = $1) "
    "SELECT coalesce((SELECT greatest(avail, 0) FROM g), 0)";

/* $1 name, $2 id, $3 channel: one row when the permit was ours and live */
static const char release_sql[] =
    "WITH d AS (DELETE FROM @P WHERE name = $1 AND id = $2 AND lease_until > clock_timestamp() RETURNING 1) "
    "UPDATE @S SET permits = permits + 1 WHERE name = $1 AND EXISTS (SELECT 1 FROM d) "
    "RETURNING pg_notify($3, name)";

/* $1 name, $2 id, $3 lease ms */
static const char renew_sql[] =
    "UPDATE @P SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' "
    "WHERE name = $1 AND id = $2 AND lease_until > clock_timestamp()";

static int ready(pgeng *e)
{
    int rc = pg_coord_ready(e, PG_CH_SEM);
    return rc ? rc : pg_coord_ready(e, PG_CH_PERMIT);
}

static int sem_new(void *eng, const char *name, void **st)
{
    pgsem *s;
    (void)eng;
    if (!(s = calloc(1, sizeof *s)) || !(s->name = strdup(name))) {
        free(s);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = s;
    return 0;
}

static void sem_free(void *eng, void *st)
{
    pgsem *s = st;
    (void)eng;
    free(s->name);
    free(s);
}

/* One try: 0, or BATON_ELOCKED with *left_ms (until the first lease of the
 * name ends; -1 none). ID NULL: N permits of the plain semaphore. */
static int take(pgeng *e, pgsem *s, uint32_t n, const char *id, const char *holder, uint32_t lease_ms, int64_t by,
                int64_t *left_ms)
{
    char k[16], ms[16];
    const char *p[5] = { s->name, k, id, holder, ms };
    PGresult *r = NULL;
    int rc;

    snprintf(k, sizeof k, "%" PRIu32, n);
    snprintf(ms, sizeof ms, "%" PRIu32, lease_ms);
    /* not retried: a first run that committed took permits */
    if ((rc = pg_coord_run(e, take_sql, 5, p, 0, by, &r))) return rc;
    *left_ms = PQgetisnull(r, 0, 1) ? -1 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    if (strcmp(PQgetvalue(r, 0, 0), "t"))
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: semaphore '%s': fewer than %" PRIu32 " permits free",
                          s->name, n);
    PQclear(r);
    return rc;
}

/* Tries until granted, the deadline or a cancel, parked between tries. */
static int take_wait(pgeng *e, pgsem *s, uint32_t n, const char *id, const char *holder, uint32_t lease_ms,
                     int64_t deadline_ns, baton_waiter *w)
{
    pgwait me = { PG_CH_SEM, s->name, w, NULL };
    int rc, linked = 0;
    int64_t by = deadline_ns == 0 || deadline_ns == INT64_MAX ? INT64_MAX : deadline_ns + PG_WAIT_GRACE_NS;

    if ((rc = ready(e))) return rc;
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        int64_t left = -1, until;
        int down;

        rc = take(e, s, n, id, holder, lease_ms, by, &left);
        if (rc == 0 || (rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || deadline_ns == 0 || !w) break;
        down = rc == BATON_EUNAVAILABLE;
        if (!linked) {
            /* watch before the next try: a release in between bumps gen */
            if ((rc = pg_wait_link(e, &me))) break;
            linked = 1;
            continue;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: semaphore '%s': wait timed out%s", s->name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        until = baton_now_ns() + (int64_t)(pg_listening(e) && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        if (left >= 0 && baton_now_ns() + (left + 1) * 1000000LL < until)
            until = baton_now_ns() + (left + 1) * 1000000LL;   /* a permit's lease ends */
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: semaphore '%s': acquire canceled", s->name);
            break;
        }
    }
    if (linked) pg_wait_unlink(e, &me);
    return rc;
}

static int sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    return take_wait(eng, st, permits, NULL, NULL, 0, deadline_ns, w);
}

static int sem_release(void *eng, void *st, uint32_t permits)
{
    pgeng *e = eng;
    pgsem *s = st;
    char k[16];
    const char *p[3] = { s->name, k, e->cchannel[PG_CH_SEM] };
    PGresult *r = NULL;
    int rc;
    if ((rc = ready(e))) return rc;
    snprintf(k, sizeof k, "%" PRIu32, permits);
    if ((rc = pg_coord_run(e, add_sql, 3, p, 0, INT64_MAX, &r))) return rc;
    PQclear(r);
    return 0;
}

static int sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    pgeng *e = eng;
    pgsem *s = st;
    char a[24];
    const char *p[3] = { s->name, a, e->cchannel[PG_CH_SEM] };
    const char *sql;
    PGresult *r = NULL;
    int rc, n;

    switch (op) {
    case BATON_CTL_TRY_SET: sql = try_set_sql; n = 3; break;
    case BATON_CTL_ADD: sql = add_sql; n = 3; break;
    case BATON_CTL_DRAIN: sql = drain_sql; n = 1; break;
    case BATON_CTL_AVAILABLE: sql = avail_sql; n = 1; break;
    default: return baton_seterr(BATON_EINVAL, 0, "postgres: unknown semaphore operation %d", op);
    }
    if (op == BATON_CTL_TRY_SET && arg < 0) return baton_seterr(BATON_EINVAL, 0, "postgres: negative permit count");
    if ((rc = ready(e))) return rc;
    snprintf(a, sizeof a, "%" PRId64, arg);
    /* the writes are not retried (an add that committed would add twice) */
    if ((rc = pg_coord_run(e, sql, n, p, op == BATON_CTL_AVAILABLE, INT64_MAX, &r))) return rc;
    if (out) {
        if (op == BATON_CTL_TRY_SET) *out = PQntuples(r) > 0;
        else if (op == BATON_CTL_ADD) *out = 0;
        else *out = PQntuples(r) > 0 ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    }
    PQclear(r);
    return 0;
}

int pg_prims_info(pgeng *e, const char *name, baton_lockinfo *out)
{
    const char *p[2] = { name, NULL };
    PGresult *r = NULL;
    char sql[512];
    int rc, sem, fair;

    out->permits = BATON_PERMITS_UNKNOWN;
    pthread_mutex_lock(&e->mu);
    sem = e->ctable_ok[PG_CH_SEM];
    fair = e->ctable_ok[PG_CH_FAIR];
    pthread_mutex_unlock(&e->mu);
    if (!sem || !fair) {
        /* this client never made the tables: are they there? */
        const char *q[2] = { e->ctable[PG_CH_SEM], e->ctable[PG_CH_FAIR] };
        if ((rc = pg_run(e, "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL", 2, q, 1, &r)))
            return rc;
        sem = !strcmp(PQgetvalue(r, 0, 0), "t");
        fair = !strcmp(PQgetvalue(r, 0, 1), "t");
        PQclear(r);
    }
    if (!sem && !fair) return 0;
    /* the count is signed: add may have taken it below zero (expired
     * permits are not counted back here: the next take or available does) */
    snprintf(sql, sizeof sql, "SELECT %s, %s",
             sem ? "(SELECT permits FROM @S WHERE name = $1)" : "NULL::bigint",
             fair ? "(SELECT count(*) FROM @F f WHERE f.name = $1 AND " PG_FAIR_LIVE("f") ")" : "NULL::bigint");
    if ((rc = pg_coord_run(e, sql, 1, p, 1, INT64_MAX, &r))) return rc;
    if (!PQgetisnull(r, 0, 0)) out->permits = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    if (!PQgetisnull(r, 0, 1)) out->queue_length = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    PQclear(r);
    return 0;
}

/* ---- permits -------------------------------------------------------------- */

static int permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                           char id[BATON_PERMIT_ID_SIZE])
{
    baton_owner o;
    int rc;
    /* the id: 128 random bits; the holder: who took it */
    if ((rc = baton__owner_init(&o))) return rc;
    if ((rc = take_wait(eng, st, 1, o.hex, o.desc, lease_ms, deadline_ns, w))) return rc;
    memcpy(id, o.hex, BATON_PERMIT_ID_SIZE);
    return 0;
}

static int permits_release(void *eng, void *st, const char *id)
{
    pgeng *e = eng;
    pgsem *s = st;
    const char *p[3] = { s->name, id, e->cchannel[PG_CH_SEM] };
    PGresult *r = NULL;
    int rc;
    if ((rc = ready(e))) return rc;
    if ((rc = pg_coord_run(e, release_sql, 3, p, 0, INT64_MAX, &r))) return rc;
    if (PQntuples(r) == 0)
        rc = baton_seterr(BATON_ENOTOWNER, 0, "postgres: semaphore '%s': no permit %s (released, expired or never "
                          "given)", s->name, id);
    PQclear(r);
    return rc;
}

static int permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    pgeng *e = eng;
    pgsem *s = st;
    char ms[16];
    const char *p[3] = { s->name, id, ms };
    PGresult *r = NULL;
    int rc;
    if ((rc = ready(e))) return rc;
    snprintf(ms, sizeof ms, "%" PRIu32, lease_ms);
    if ((rc = pg_coord_run(e, renew_sql, 3, p, 1, INT64_MAX, &r))) return rc;
    if (strcmp(PQcmdTuples(r), "1"))
        rc = baton_seterr(BATON_ENOTOWNER, 0, "postgres: semaphore '%s': no permit %s (released or expired)",
                          s->name, id);
    PQclear(r);
    return rc;
}

const baton_sem_methods pg_sem_methods = {
    .create = sem_new,
    .destroy = sem_free,
    .acquire = sem_acquire,
    .release = sem_release,
    .ctl = sem_ctl,
};

const baton_permits_methods pg_permits_methods = {
    .create = sem_new,
    .destroy = sem_free,
    .acquire = permits_acquire,
    .release = permits_release,
    .renew = permits_renew,
    .ctl = sem_ctl,
};
