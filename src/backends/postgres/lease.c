/*
 * Lease mode, the optimistic lock as ShedLock does it: the name's row
 * (owner, fence, lease_until) is claimed by one conditional upsert that
 * succeeds only when the lease is over, the row is free, or the claimant
 * already owns it, and bumps the fence in the same statement. Every time is
 * the server's (clock_timestamp()), so clients' clocks never matter. No
 * connection is held: the lock survives connection drops and server
 * restarts until its lease ends.
 *
 * Waiting: a release NOTIFYs the table's channel with the name (in the
 * releasing statement, delivered at its commit). One listener thread per
 * client LISTENs on its own connection and wakes the waiters of that name
 * (it also LISTENs on the channels of values, groups and queues, coord.c,
 * and wakes their waiters, in every mode; when it listens again after its
 * connection ended it wakes every waiter, since what was sent meanwhile is
 * lost);
 * a waiter also wakes when the holder's lease is due to end (a crashed
 * holder never notifies), and re-checks at least every second in case a
 * notification was missed while the listener reconnected.
 */
#include "pg_int.h"
#include "core/internal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECHECK_MS 1000          /* at most this long between claims of a waiter */
#define RECHECK_DOWN_MS 200      /* ... while the listener is not listening */

static const char claim_sql[] =
    "WITH c AS (INSERT INTO @T AS l (name, key, fence, owner, holder, lease_until, acquired_at) "
    "VALUES ($1, $2::bigint, 1, $3, $4, clock_timestamp() + $5::bigint * interval '1 millisecond', "
    "clock_timestamp()) "
    "ON CONFLICT (name) DO UPDATE SET fence = l.fence + 1, owner = EXCLUDED.owner, holder = EXCLUDED.holder, "
    "lease_until = EXCLUDED.lease_until, acquired_at = EXCLUDED.acquired_at "
    "WHERE l.owner IS NULL OR l.lease_until IS NULL OR l.lease_until <= clock_timestamp() "
    "OR l.owner = EXCLUDED.owner RETURNING l.fence) "
    "SELECT (SELECT fence FROM c), (SELECT ceil(extract(epoch FROM (lease_until - clock_timestamp())) * 1000)"
    "::bigint FROM @T WHERE name = $1)";

static const char renew_sql[] =
    "UPDATE @T SET lease_until = clock_timestamp() + $3::bigint * interval '1 millisecond' "
    "WHERE name = $1 AND owner = $2 AND fence = $4::bigint";

static const char release_sql[] =
    "UPDATE @T SET owner = NULL, holder = NULL, lease_until = NULL "
    "WHERE name = $1 AND owner = $2 AND fence = $3::bigint RETURNING pg_notify($4, name)";

char *pg_lease_stmt(pgeng *e, int id)
{
    return pg_sql(e, id == PG_PS_CLAIM ? claim_sql : id == PG_PS_RELEASE ? release_sql : renew_sql);
}

/* ---- the listener --------------------------------------------------------- */

/* Wakes the waiters of NAME whose kind's channel is CHANNEL (NULL: every
 * waiter). Channel names are cut at 63 bytes, so two kinds may share one:
 * both are woken (a spurious wake is harmless). */
static void wake_name(pgeng *e, const char *channel, const char *name)
{
    int hit[PG_CH_N] = { 0 };
    for (int k = 0; channel && k < PG_CH_N; k++)
        hit[k] = !strcmp(k == PG_CH_LOCK ? e->channel : e->cchannel[k], channel);
    pthread_mutex_lock(&e->mu);
    for (pgwait *w = e->waits; w; w = w->next)
        if (!channel || (hit[w->kind] && !strcmp(w->name, name))) baton_waiter_wake(w->w);
    pthread_mutex_unlock(&e->mu);
}

/* LISTEN on every channel of the client (the lock table's and coord.c's). */
static int listen_all(pgeng *e, PGconn *c)
{
    for (int k = 0; k < PG_CH_N; k++) {
        const char *ch = k == PG_CH_LOCK ? e->channel : e->cchannel[k];
        char *q = NULL, *chan = PQescapeIdentifier(c, ch, strlen(ch));
        PGresult *r = NULL;
        int rc = BATON_ENOMEM;
        if (chan && (q = malloc(strlen(chan) + 8))) {
            sprintf(q, "LISTEN %s", chan);
            rc = pg_exec(e, c, q, 0, NULL, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
        }
        PQclear(r);
        PQfreemem(chan);
        free(q);
        if (rc) return rc;
    }
    return 0;
}

static int stopping(pgeng *e)
{
    int s;
    pthread_mutex_lock(&e->mu);
    s = e->stop;
    pthread_mutex_unlock(&e->mu);
    return s;
}

/* Sleeps MS unless stopped first (the self-pipe). */
static void nap(pgeng *e, int ms)
{
    struct pollfd pfd = { e->wake[0], POLLIN, 0 };
    poll(&pfd, 1, ms);
}

static void *listener(void *arg)
{
    pgeng *e = arg;
    while (!stopping(e)) {
        PGconn *c = NULL;
        if (pg_conn_get(e, &c)) {
            nap(e, 200);
            continue;
        }
        if (listen_all(e, c)) {
            PQfinish(c);
            nap(e, 200);
            continue;
        }
        pthread_mutex_lock(&e->mu);
        e->listening = 1;
        pthread_mutex_unlock(&e->mu);
        /* notifications sent while nobody listened are gone: everyone looks again */
        wake_name(e, NULL, NULL);
        while (!stopping(e)) {
            struct pollfd pfd[2] = { { PQsocket(c), POLLIN, 0 }, { e->wake[0], POLLIN, 0 } };
            PGnotify *n;
            if (poll(pfd, 2, 1000) < 0 && errno != EINTR) break;
            if (pfd[1].revents) break;
            if (pfd[0].revents && !PQconsumeInput(c)) break;
            while ((n = PQnotifies(c))) {
                wake_name(e, n->relname, n->extra);
                PQfreemem(n);
            }
            if (PQstatus(c) != CONNECTION_OK) break;
        }
        pthread_mutex_lock(&e->mu);
        e->listening = 0;
        pthread_mutex_unlock(&e->mu);
        PQfinish(c);  /* never pooled: it listens */
    }
    return NULL;
}

static int listener_start(pgeng *e)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    if (!e->thr_started && !e->stop) {
        if (pthread_create(&e->thr, NULL, listener, e) == 0) e->thr_started = 1;
        else rc = baton_seterr(BATON_EIO, 0, "postgres: cannot start the listener thread");
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int pg_wait_link(pgeng *e, pgwait *w)
{
    int rc = listener_start(e);
    if (rc) return rc;
    pthread_mutex_lock(&e->mu);
    w->next = e->waits;
    e->waits = w;
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void pg_wait_unlink(pgeng *e, pgwait *w)
{
    pthread_mutex_lock(&e->mu);
    for (pgwait **pp = &e->waits; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

int pg_listening(pgeng *e)
{
    int l;
    pthread_mutex_lock(&e->mu);
    l = e->listening;
    pthread_mutex_unlock(&e->mu);
    return l;
}

void pg_listener_stop(pgeng *e)
{
    int started;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    started = e->thr_started;
    pthread_mutex_unlock(&e->mu);
    if (!started) return;
    if (write(e->wake[1], "x", 1) < 0) { /* the listener also checks stop every second */ }
    pthread_join(e->thr, NULL);
}

/* ---- the lock ------------------------------------------------------------- */

/* One claim: 0 with *fence, or BATON_ELOCKED with *left_ms (how long the
 * holder's lease still runs; -1 unknown). */
static int claim(pgeng *e, pglock *l, const baton_owner *o, uint32_t lease_ms, int64_t by, uint64_t *fence,
                 int64_t *left_ms)
{
    char ms[16];
    const char *p[5] = { l->name, l->key, o->hex, o->desc, ms };
    PGresult *r = NULL;
    int rc;

    snprintf(ms, sizeof ms, "%u", lease_ms);
    /* safe to run twice: a second run by the same owner re-claims it */
    if ((rc = pg_run_ps_by(e, PG_PS_CLAIM, 5, p, 1, by, &r))) return rc;
    *left_ms = PQgetisnull(r, 0, 1) ? -1 : strtoll(PQgetvalue(r, 0, 1), NULL, 10);
    if (PQgetisnull(r, 0, 0)) {
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: lock '%s' is held", l->name);
    } else {
        *fence = strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    }
    PQclear(r);
    return rc;
}

int pg_lease_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    pgwait me = { PG_CH_LOCK, l->name, req->waiter, NULL };
    int rc, linked = 0;

    for (;;) {
        unsigned gen = req->waiter ? baton_waiter_gen(req->waiter) : 0;
        int64_t sent = baton_now_ns(), left = -1, until;
        int listening, down;

        /* a waiter's claim ends with its wait (and the grace a lock wait
         * has after its deadline), a try's with the I/O timeout */
        rc = claim(e, l, req->owner, req->lease_ms,
                   req->deadline_ns == 0 || req->deadline_ns == INT64_MAX ? INT64_MAX
                                                                          : req->deadline_ns + PG_WAIT_GRACE_NS,
                   &req->fence, &left);
        if (rc == 0) {
            l->fence = req->fence;
            req->sent_ns = sent;    /* the lease started no earlier than this */
            break;
        }
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || req->deadline_ns == 0 || !req->waiter) break;
        /* a waiter outlives a server that is away (a restart): it claims
         * again soon, until its deadline */
        down = rc == BATON_EUNAVAILABLE;
        if (!linked) {
            /* listen before the next claim, so a release between that claim
             * and the park still wakes us (it bumps the generation) */
            if ((rc = pg_wait_link(e, &me))) break;
            linked = 1;
            continue;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: lock '%s': wait timed out%s", l->name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        listening = pg_listening(e);
        until = baton_now_ns() + (int64_t)(listening && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        if (left >= 0 && baton_now_ns() + (left + 1) * 1000000LL < until)
            until = baton_now_ns() + (left + 1) * 1000000LL;   /* the holder's lease ends */
        if (until > req->deadline_ns) until = req->deadline_ns;
        if (baton_waiter_park(req->waiter, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: lock '%s': acquire canceled", l->name);
            break;
        }
    }
    if (linked) pg_wait_unlink(e, &me);
    return rc;
}

int pg_lease_release(pgeng *e, pglock *l, const baton_owner *owner)
{
    char fence[24];
    const char *p[4] = { l->name, owner->hex, fence, e->channel };
    PGresult *r = NULL;
    int rc;

    snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    l->fence = 0;
    /* not retried: a second run after a first that committed would say LOST */
    if ((rc = pg_run_ps(e, PG_PS_RELEASE, 4, p, 0, &r))) return rc;
    if (PQntuples(r) == 0)
        rc = baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': the lease had ended and another owner took it",
                          l->name);
    PQclear(r);
    return rc;
}

int pg_lease_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char ms[16], fence[24];
    const char *p[4] = { l->name, owner->hex, ms, fence };
    PGresult *r = NULL;
    PGconn *c = NULL;
    int64_t io = pg_deadline_ms(e->io_timeout_ms);
    int rc;

    snprintf(ms, sizeof ms, "%u", lease_ms);
    snprintf(fence, sizeof fence, "%llu", (unsigned long long)l->fence);
    /* by the lease deadline at the latest, connecting included: past it,
     * the connection is dropped (pg_exec) and the lock is the core's to
     * declare lost */
    if ((rc = pg_conn_get_by(e, deadline_ns, &c))) goto out;
    rc = pg_exec_ps(e, c, PG_PS_RENEW, 4, p, deadline_ns < io ? deadline_ns : io, NULL, &r);
    if (rc == BATON_ETIMEDOUT) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: renewal timed out");
    if (rc) goto out;
    if (strcmp(PQcmdTuples(r), "1"))
        rc = baton_seterr(BATON_ELOST, 0, "postgres: lock '%s': the lease had ended and another owner took it",
                          l->name);
out:
    PQclear(r);
    pg_conn_put(e, c);
    return rc;
}
