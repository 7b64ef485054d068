/*
 * Work queues: one row per item in <table>_queue (id AUTO_INCREMENT, q,
 * data, taken_by, holder, lease_until, fence), in every mode. A taken item
 * carries its taker's owner id and a lease on the server's clock, renewed by
 * the core like a lease-mode lock; an item whose lease passed is free again
 * (its taker died, or lost it), and keeps its place: the oldest free item is
 * taken first.
 *
 * put     one INSERT;
 * take    a short transaction on one connection: START TRANSACTION;
 *         SELECT the oldest free item FOR UPDATE SKIP LOCKED (another
 *         taker's candidate is skipped, never waited for); bump the
 *         queue's fence counter (a row of the value table named NUL +
 *         "queue:" + NAME, a name no value can have); UPDATE the item to
 *         ours; COMMIT — five round trips. An empty queue is the SELECT and
 *         a ROLLBACK. Waiters take again after a jittered backoff (20 ms
 *         doubling to 500 ms) or at once after a put through this client;
 * done    DELETE, owner- and fence-checked; release: the same UPDATE back
 *         to free; renew: the lease moved on, owner- and fence-checked.
 *
 * SKIP LOCKED: MariaDB 10.6 and later, MySQL 8.0 and later.
 */
#include "my_int.h"
#include "core/internal.h"
#include "util/base64.h"
#include "util/sha256.h"

#include <inttypes.h>
#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500
#define RETRY_DOWN_MS 200        /* a waiter whose server is away takes again this often */

/* The name of the value row that counts the takes of queue NAME: NUL +
 * "queue:" + NAME (no value can have it: names are C strings), or, when
 * that would not fit the 1024 bytes of the name column, NUL + "queue#" + the
 * unpadded base64url of NAME's SHA-256. Malloc'd, *N its length. */
static char *fence_row(const char *name, size_t *n)
{
    size_t len = strlen(name);
    char *out = malloc(len + 8 > 64 ? len + 8 : 64);
    if (!out) return NULL;
    out[0] = 0;
    if (7 + len <= 1024) {
        memcpy(out + 1, "queue:", 6);
        memcpy(out + 7, name, len);
        *n = 7 + len;
    } else {
        unsigned char d[BATON_SHA256_SIZE];
        baton__sha256(name, len, d);
        memcpy(out + 1, "queue#", 6);
        *n = 7 + baton__base64_encode(out + 7, d, sizeof d, BATON_B64_URL | BATON_B64_NOPAD);
    }
    return out;
}

static int queue_create(void *eng, const char *name, void **st)
{
    myqueue *q = calloc(1, sizeof *q);
    size_t n = 0;
    char *fname = fence_row(name, &n);
    *st = NULL;
    if (!q || !fname) goto oom;
    q->e = eng;
    if (!(q->name = strdup(name)) || !(q->esc = my_escape(name)) || !(q->efence = my_escape_n(fname, n)))
        goto oom;
    free(fname);
    *st = q;
    return 0;
oom:
    if (q) {
        free(q->name);
        free(q->esc);
    }
    free(q);
    free(fname);
    return baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

static void queue_destroy(void *eng, void *st)
{
    myqueue *q = st;
    (void)eng;
    if (!q) return;
    free(q->name);
    free(q->esc);
    free(q->efence);
    free(q);
}

static int queue_put(void *eng, void *st, const void *data, size_t len)
{
    myeng *e = eng;
    myqueue *q = st;
    char *d, *sql = NULL;
    int rc;

    if ((rc = my_aux_ready(e, MY_AUX_QUEUE))) return rc;
    if ((d = my_escape_n(data, len))) sql = my_sql(e, "INSERT INTO @Q (q, data) VALUES (%s, %s)", q->esc, d);
    free(d);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* not run twice: that would be two items */
    rc = my_run(e, sql, 0, NULL, NULL, NULL);
    free(sql);
    if (!rc) my_wake_local(e);
    return rc;
}

static int queue_size(void *eng, void *st, uint64_t *waiting)
{
    myeng *e = eng;
    myqueue *q = st;
    MYSQL_RES *r = NULL;
    const char *v;
    char *sql;
    int rc;

    *waiting = 0;
    if ((rc = my_aux_ready(e, MY_AUX_QUEUE))) return rc;
    if (!(sql = my_sql(e, "SELECT COUNT(*) FROM @Q WHERE q = %s AND (taken_by IS NULL OR "
                          "lease_until <= UTC_TIMESTAMP(6))", q->esc)))
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run(e, sql, 1, &r, NULL, NULL);
    free(sql);
    if (!rc && (v = my_cell(r, 0))) *waiting = strtoull(v, NULL, 10);
    mysql_free_result(r);
    return rc;
}

static int queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    mylock *l = calloc(1, sizeof *l);
    myqueue *q = st;
    (void)opts;
    *tst = NULL;
    if (!l) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    l->e = eng;
    l->kind = MY_KIND_TAKER;
    /* copies: an item may outlive its queue handle */
    if (!(l->name = strdup(q->name)) || !(l->esc = strdup(q->esc)) || !(l->eid = strdup(q->efence))) {
        free(l->name);
        free(l->esc);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *tst = l;
    return 0;
}

static void drop_item(mylock *l)
{
    free(l->item);
    l->item = NULL;
    l->item_len = 0;
    l->item_id = 0;
    l->fence = 0;
}

void my_coord_free(mylock *l)
{
    drop_item(l);
    free(l->eid);
    l->eid = NULL;
}

static int queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    mylock *l = tst;
    (void)eng;
    if (!l->item_id) return baton_seterr(BATON_ENOTHELD, 0, "mysql: queue '%s': no item held", l->name);
    *data = l->item;
    *len = l->item_len;
    return 0;
}

/* One take on C (in a transaction it starts and ends): 0 with the item in
 * L, or BATON_ELOCKED for an empty queue. */
static int take_on(myeng *e, MYSQL *c, mylock *l, baton_acquire_req *req, int64_t dl)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *owner = my_escape(req->owner->hex), *holder = my_escape(req->owner->desc), *sql = NULL;
    uint64_t id = 0, fence = 0;
    int rc;

    if (!owner || !holder) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_exec_dl(e, c, "START TRANSACTION", NULL, dl))) goto out;
    if (!(sql = my_sql(e, "SELECT id, data FROM @Q WHERE q = %s AND (taken_by IS NULL OR lease_until <= "
                          "UTC_TIMESTAMP(6)) ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED", l->esc)))
        goto oom;
    if ((rc = my_exec_dl(e, c, sql, &r, dl))) goto out;
    if (!(row = mysql_fetch_row(r))) {
        rc = my_exec_dl(e, c, "ROLLBACK", NULL, dl);
        if (!rc) rc = baton_seterr(BATON_ELOCKED, 0, "mysql: queue '%s' is empty", l->name);
        goto out;
    }
    id = strtoull(row[0], NULL, 10);
    {
        unsigned long *len = mysql_fetch_lengths(r);
        drop_item(l);
        if (!(l->item = malloc(len[1] + 1))) goto oom;
        memcpy(l->item, row[1], len[1]);
        l->item[len[1]] = 0;
        l->item_len = len[1];
    }
    free(sql);
    /* the counter row stays locked until COMMIT: fences follow commit order */
    if (!(sql = my_sql(e, "INSERT INTO @V (name, data, version) VALUES (%s, NULL, LAST_INSERT_ID(1)) "
                          "ON DUPLICATE KEY UPDATE version = LAST_INSERT_ID(version + 1)", l->eid)))
        goto oom;
    if ((rc = my_exec_dl(e, c, sql, NULL, dl))) goto out;
    fence = mysql_insert_id(c);
    free(sql);
    if (!(sql = my_sql(e, "UPDATE @Q SET taken_by = %s, holder = %s, lease_until = UTC_TIMESTAMP(6) + INTERVAL %"
                          PRIu64 " MICROSECOND, fence = %" PRIu64 " WHERE id = %" PRIu64,
                       owner, holder, (uint64_t)req->lease_ms * 1000, fence, id)))
        goto oom;
    if ((rc = my_exec_dl(e, c, sql, NULL, dl))) goto out;
    if ((rc = my_exec_dl(e, c, "COMMIT", NULL, dl))) goto out;
    l->item_id = id;
    l->fence = req->fence = fence;
    goto out;
oom:
    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
out:
    if (rc && !l->item_id) drop_item(l);
    mysql_free_result(r);
    free(sql);
    free(owner);
    free(holder);
    return rc;
}

static int take_loop(myeng *e, mylock *l, baton_acquire_req *req)
{
    int64_t backoff = BACKOFF_MIN_MS;
    int rc;

    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t sent = baton_now_ns(), ms, until;
        int64_t dl = my_step_deadline(e, req->deadline_ns);
        MYSQL *c = NULL;

        /* two first takes of a new queue may deadlock on inserting its
         * counter row (InnoDB rolls one back): that one takes again */
        for (int tries = 0; tries < 3; tries++) {
            if ((rc = my_conn_get(e, &c))) break;
            rc = take_on(e, c, l, req, dl);
            /* a connection left in its transaction (a failed step) is closed */
            my_conn_put(e, c);
            c = NULL;
            if (!rc || baton_error_last()->native != ER_LOCK_DEADLOCK) break;
        }
        if (rc == 0) {
            req->sent_ns = sent;
            break;
        }
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || req->deadline_ns == 0 || !req->waiter) break;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "mysql: queue '%s': take timed out%s", l->name,
                              rc == BATON_EUNAVAILABLE ? " (the server is unavailable)" : "");
            break;
        }
        if (rc == BATON_EUNAVAILABLE) {
            ms = RETRY_DOWN_MS;
        } else {
            /* jitter: the waiters of one put do not take in lockstep */
            ms = backoff / 2 + (int64_t)(baton_now_ns() % (backoff / 2 + 1));
            if (backoff < BACKOFF_MAX_MS) backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        until = baton_now_ns() + ms * 1000000LL;
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "mysql: queue '%s': take canceled", l->name);
            break;
        }
    }
    return rc;
}

int my_taker_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    mypark p;
    int rc;
    if ((rc = my_aux_ready(e, MY_AUX_QUEUE)) || (rc = my_aux_ready(e, MY_AUX_VALUE))) return rc;
    drop_item(l);
    /* a put through this client wakes a waiting take at once */
    if (!req->waiter || req->deadline_ns == 0) return take_loop(e, l, req);
    my_park_enter(e, &p, req->waiter);
    rc = take_loop(e, l, req);
    my_park_leave(e, &p);
    return rc;
}

/* An owner- and fence-checked statement on the item L holds: 0, or BATON_ELOST when no row matched. */
static int on_item(myeng *e, mylock *l, const baton_owner *owner, const char *fmt, int64_t deadline)
{
    char *o = my_escape(owner->hex), *sql = NULL;
    uint64_t affected = 0;
    int rc;

    if (!l->item_id) return 0;
    if (o) {
        char *where = NULL;
        if (asprintf(&where, "WHERE id = %" PRIu64 " AND taken_by = %s AND fence = %" PRIu64, l->item_id, o,
                     l->fence) >= 0) {
            sql = my_sql(e, fmt, where);
            free(where);
        }
    }
    free(o);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_run_dl(e, sql, 0, NULL, &affected, NULL, deadline);
    free(sql);
    if (rc) return rc;
    if (affected == 0)
        return baton_seterr(BATON_ELOST, 0, "mysql: queue '%s': the item's lease had ended and it went back",
                            l->name);
    return 0;
}

int my_taker_release(myeng *e, mylock *l, const baton_owner *owner)
{
    int rc = on_item(e, l, owner, "UPDATE @Q SET taken_by = NULL, holder = NULL, lease_until = NULL %s",
                     my_deadline_ms(e->io_timeout_ms));
    drop_item(l);
    if (!rc) my_wake_local(e);
    return rc;
}

static int queue_done(void *eng, void *tst, const baton_owner *owner)
{
    myeng *e = eng;
    mylock *l = tst;
    int rc = on_item(e, l, owner, "DELETE FROM @Q %s", my_deadline_ms(e->io_timeout_ms));
    drop_item(l);
    return rc;
}

int my_taker_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char fmt[160];
    int rc;
    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    /* a lease that ran out is not revived: the item may be free already.
     * Renewed twice within a microsecond changes nothing: the lease is
     * moved on by at least the microseconds between the renewals, so the
     * keeper's lease/3 period never meets it. */
    snprintf(fmt, sizeof fmt, "UPDATE @Q SET lease_until = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64
             " MICROSECOND %%s AND lease_until > UTC_TIMESTAMP(6)", (uint64_t)lease_ms * 1000);
    rc = on_item(e, l, owner, fmt, deadline_ns);
    return rc;
}

const baton_queue_methods my_queue_methods = {
    .create = queue_create,
    .destroy = queue_destroy,
    .put = queue_put,
    .taker = queue_taker,
    .item = queue_item,
    .done = queue_done,
    .size = queue_size,
};
