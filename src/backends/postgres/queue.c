/*
 * Work queues (baton_queue_*): one row of <table>_queue per item (coord.c),
 * in every mode, ordered by its id (bigserial). A taken item carries its
 * taker's owner id, a lease on the server's clock and the take's fence
 * (nextval of the id sequence: larger than every earlier take's). A taker
 * is a lock state driven by the lock methods:
 *   - take (acquire): one statement,
 *       UPDATE ... SET taken_by, lease_until, fence = nextval(seq)
 *       WHERE id = (SELECT id ... WHERE queue = $1 AND (taken_by IS NULL OR
 *                   lease_until <= clock_timestamp())
 *                   ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
 *     so concurrent takers skip each other's rows instead of queueing on
 *     them, and an item whose taker's lease ended is taken again; when it
 *     takes nothing it says how long the earliest taken item's lease still
 *     runs, so a waiter wakes when that item comes back;
 *   - renewal (every lease/3): extends the lease, checked on id, owner and
 *     fence: BATON_ELOST once someone else took it;
 *   - release (give back): clears the taker, checked likewise; the item
 *     keeps its place (its id): it is the oldest again if it was;
 *   - done: deletes the row, checked likewise.
 * put and give-back NOTIFY the queues' channel with the queue's name; a
 * waiting taker wakes on it (every waiting taker of that queue in the
 * client: one statement each, one of them gets the item), at the earliest
 * taken item's lease end, and at least every RECHECK_MS.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MS 5000          /* a waiting taker tries again at least this often */
#define RECHECK_DOWN_MS 200      /* ... while the listener is not listening, or the server is away */

typedef struct {
    char *name;
} pgqueue;

/* $1 queue, $2 data, $3 channel */
static const char put_sql[] = "INSERT INTO @Q (queue, data) VALUES ($1, $2::bytea) RETURNING pg_notify($3, queue)";

/* $1 queue, $2 owner, $3 holder, $4 lease ms, $5 the id sequence: id, fence, data (hex) of the
 * item taken, or NULLs and the ms until the earliest taken item's lease ends */
static const char take_sql[] =
    "WITH t AS (UPDATE @Q SET taken_by = $2, holder = $3, "
    "lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond', fence = nextval($5::regclass) "
    "WHERE id = (SELECT id FROM @Q WHERE queue = $1 AND (taken_by IS NULL OR lease_until <= clock_timestamp()) "
    "ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, fence, encode(data, 'hex') AS data) "
    "SELECT (SELECT id FROM t), (SELECT fence FROM t), (SELECT data FROM t), "
    "CASE WHEN EXISTS (SELECT 1 FROM t) THEN NULL ELSE (SELECT ceil(extract(epoch FROM "
    "(min(lease_until) - clock_timestamp())) * 1000)::bigint FROM @Q WHERE queue = $1 AND taken_by IS NOT NULL "
    "AND lease_until > clock_timestamp()) END";

/* $1 id, $2 owner, $3 fence, $4 lease ms */
static const char renew_sql[] =
    "UPDATE @Q SET lease_until = clock_timestamp() + $4::bigint * interval '1 millisecond' "
    "WHERE id = $1::bigint AND taken_by = $2 AND fence = $3::bigint";

/* $1 id, $2 owner, $3 fence, $4 channel */
static const char giveback_sql[] =
    "UPDATE @Q SET taken_by = NULL, holder = NULL, lease_until = NULL "
    "WHERE id = $1::bigint AND taken_by = $2 AND fence = $3::bigint RETURNING pg_notify($4, queue)";

/* $1 id, $2 owner, $3 fence */
static const char done_sql[] = "DELETE FROM @Q WHERE id = $1::bigint AND taken_by = $2 AND fence = $3::bigint";

static const char size_sql[] =
    "SELECT count(*) FROM @Q WHERE queue = $1 AND (taken_by IS NULL OR lease_until <= clock_timestamp())";

static int queue_new(void *eng, const char *name, void **st)
{
    pgqueue *q = calloc(1, sizeof *q);
    (void)eng;
    if (!q || !(q->name = strdup(name))) {
        free(q);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = q;
    return 0;
}

static void queue_free(void *eng, void *st)
{
    pgqueue *q = st;
    (void)eng;
    free(q->name);
    free(q);
}

static int queue_put(void *eng, void *st, const void *data, size_t len)
{
    pgeng *e = eng;
    pgqueue *q = st;
    const char *p[3] = { q->name, NULL, e->cchannel[PG_CH_QUEUE] };
    PGresult *r = NULL;
    char *hex;
    int rc;

    if ((rc = pg_coord_ready(e, PG_CH_QUEUE))) return rc;
    if (!(hex = pg_hex_encode(data, len))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    p[1] = hex;
    /* not retried: a put that committed, run again, would put the item twice */
    rc = pg_coord_run(e, put_sql, 3, p, 0, INT64_MAX, &r);
    free(hex);
    PQclear(r);
    return rc;
}

static int queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    pgqueue *q = st;
    pglock *l = calloc(1, sizeof *l);
    if (!l || !(l->name = strdup(q->name))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->e = eng;
    l->kind = PG_TAKER;
    l->lease_ms = opts && opts->lease_ms ? opts->lease_ms : 30000;
    *tst = l;
    return 0;
}

static void drop_item(pglock *l)
{
    free(l->data);
    l->data = NULL;
    l->dlen = 0;
    l->item = 0;
    l->fence = 0;
}

/* One take: 0 with the item in L, BATON_ELOCKED with *left_ms (the
 * earliest taken item's lease, -1 none), or an error. */
static int take_once(pgeng *e, pglock *l, baton_acquire_req *req, int64_t by, int64_t *left_ms)
{
    char ms[16];
    const char *p[5] = { l->name, req->owner->hex, req->owner->desc, ms, NULL };
    PGresult *r = NULL;
    int rc;

    snprintf(ms, sizeof ms, "%u", req->lease_ms ? req->lease_ms : l->lease_ms);
    pthread_mutex_lock(&e->mu);
    p[4] = e->qitemseq;      /* set by pg_coord_ready, never changed after */
    pthread_mutex_unlock(&e->mu);
    /* not retried: run twice, it would take two items */
    if ((rc = pg_coord_run(e, take_sql, 5, p, 0, by, &r))) return rc;
    *left_ms = PQgetisnull(r, 0, 3) ? -1 : strtoll(PQgetvalue(r, 0, 3), NULL, 10);
    if (PQgetisnull(r, 0, 0)) {
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: queue '%s' is empty", l->name);
    } else if ((rc = pg_hex_decode(PQgetvalue(r, 0, 2), &l->data, &l->dlen)) == 0) {
        l->item = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        l->fence = strtoull(PQgetvalue(r, 0, 1), NULL, 10);
    }
    PQclear(r);
    return rc;
}

int pg_taker_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    pgwait me = { PG_CH_QUEUE, l->name, req->waiter, NULL };
    int rc, linked = 0;

    if ((rc = pg_coord_ready(e, PG_CH_QUEUE))) return rc;
    drop_item(l);            /* an item reported lost: not ours any more */
    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t sent = baton_now_ns(), left = -1, until;
        int down;

        rc = take_once(e, l, req,
                       req->deadline_ns == 0 || req->deadline_ns == INT64_MAX ? INT64_MAX
                                                                              : req->deadline_ns + PG_WAIT_GRACE_NS,
                       &left);
        if (rc == 0) {
            req->fence = l->fence;
            req->sent_ns = sent;     /* the lease started no earlier than this */
            break;
        }
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || req->deadline_ns == 0 || !req->waiter) break;
        down = rc == BATON_EUNAVAILABLE;
        if (!linked) {
            /* listen before the next take, so a put between it and the
             * park still wakes us (it bumps the generation) */
            if ((rc = pg_wait_link(e, &me))) break;
            linked = 1;
            continue;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: queue '%s': take timed out%s", l->name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        until = baton_now_ns() + (int64_t)(pg_listening(e) && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        /* a taken item comes back when its taker's lease ends */
        if (left >= 0 && baton_now_ns() + (left + 1) * 1000000LL < until)
            until = baton_now_ns() + (left + 1) * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: queue '%s': take canceled", l->name);
            break;
        }
    }
    if (linked) pg_wait_unlink(e, &me);
    return rc;
}

/* The owner-checked statement SQL on the item L holds (4th parameter
 * EXTRA); the item is dropped from L either way. */
static int on_item(pgeng *e, pglock *l, const baton_owner *owner, const char *sql, const char *extra, int64_t by,
                   const char *what)
{
    char id[24], fence[24];
    const char *p[4] = { id, owner->hex, fence, extra };
    PGresult *r = NULL;
    int rc;

    if (!l->item) return baton_seterr(BATON_ELOST, 0, "postgres: queue '%s': no item held", l->name);
    snprintf(id, sizeof id, "%lld", l->item);
    snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    /* not retried: a second run after a first that committed would say LOST */
    rc = pg_coord_run(e, sql, extra ? 4 : 3, p, 0, by, &r);
    if (rc == BATON_ETIMEDOUT) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: %s timed out", what);
    if (rc == 0 && strcmp(PQcmdTuples(r), "1"))
        rc = baton_seterr(BATON_ELOST, 0, "postgres: queue '%s': item %lld: its lease had ended and another "
                          "taker took it (or it was done)", l->name, l->item);
    PQclear(r);
    return rc;
}

int pg_taker_release(pgeng *e, pglock *l, const baton_owner *owner)
{
    int rc = on_item(e, l, owner, giveback_sql, e->cchannel[PG_CH_QUEUE], INT64_MAX, "giving back");
    drop_item(l);
    return rc;
}

int pg_taker_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%u", lease_ms);
    /* by the lease deadline, connecting included (as lease mode's renewal) */
    return on_item(e, l, owner, renew_sql, ms, deadline_ns, "renewal");
}

static int queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    pglock *l = tst;
    (void)eng;
    if (!l->item) return baton_seterr(BATON_ENOTHELD, 0, "postgres: queue '%s': no item held", l->name);
    *data = l->data;
    *len = l->dlen;
    return 0;
}

static int queue_done(void *eng, void *tst, const baton_owner *owner)
{
    pglock *l = tst;
    int rc = on_item(eng, l, owner, done_sql, NULL, INT64_MAX, "done");
    drop_item(l);
    return rc;
}

static int queue_size(void *eng, void *st, uint64_t *waiting)
{
    pgeng *e = eng;
    pgqueue *q = st;
    const char *p[1] = { q->name };
    PGresult *r = NULL;
    int rc;

    if ((rc = pg_coord_ready(e, PG_CH_QUEUE))) return rc;
    if ((rc = pg_coord_run(e, size_sql, 1, p, 1, INT64_MAX, &r))) return rc;
    *waiting = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return 0;
}

const baton_queue_methods pg_queue_methods = {
    .create = queue_new,
    .destroy = queue_free,
    .put = queue_put,
    .taker = queue_taker,
    .item = queue_item,
    .done = queue_done,
    .size = queue_size,
};
