/*
 * The PostgreSQL backend: URI and options, connections, statements with a
 * deadline, errors, the lock table, identity, describe and the backend
 * table. Session mode lives in session.c (read-write locks in rw.c), row
 * mode in row.c, lease mode in lease.c.
 *
 * URI: postgres[ql]://[user[:password]@]host[:port][,host[:port]...][/dbname][?options]
 * Our options: mode (session | row | lease), schema, table, connect_timeout_ms,
 * prepare (1 | 0).
 * Passed through to libpq: sslmode, sslrootcert, sslcert, sslkey, sslcrl,
 * sslpassword, passfile, application_name, target_session_attrs,
 * channel_binding, gssencmode, keepalives*, tcp_user_timeout, options.
 * Anything libpq finds on its own (PGPASSWORD, ~/.pgpass, PGSSLMODE, ...)
 * applies too.
 *
 * Capabilities. Caps belong to the backend table, not to a client, and one
 * table serves every mode, so the table says BATON_CAP_LEASE for all:
 *   - lease mode has a real lease, renewed by the core's keeper;
 *   - session and row modes have none (the lock lives as long as its
 *     connection, or its transaction), and their "renewal" is the check the
 *     contract asks for: every lease/3 the keeper calls lock_renew, which
 *     proves the holding connection still answers (a dead one means the
 *     server already freed the lock: ELOST). A fixed lease is refused there
 *     (nothing could end it on time).
 * BATON_CAP_RWLOCK likewise: session mode has read-write locks, the other
 * modes answer BATON_ENOTSUP from rwlock_new.
 * BATON_CAP_SESSION is not claimed: the keeper's check, and the lease's
 * deadline, stay what ends a grant; the watcher of held connections
 * (watch.c) reports a loss sooner when it sees one (baton_host_lost).
 */
#include "pg_int.h"
#include "core/internal.h"
#include "util/sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_TABLE "baton_locks"
/* after a lock wait's deadline: how long its cancel may take to be answered
 * before the connection is dropped (pg_int.h's PG_WAIT_GRACE_NS) */
#define CANCEL_GRACE_MS ((int)(PG_WAIT_GRACE_NS / 1000000LL))
#define CHECK_INTERVAL_MS "500"  /* the server looks for a vanished waiter this often */

int64_t pg_deadline_ms(int ms) { return baton_now_ns() + (int64_t)ms * 1000000LL; }

/* libpq prints notices (CREATE ... IF NOT EXISTS, a WARNING from
 * pg_advisory_unlock) to stderr by default; the library never does. */
static void quiet_notice(void *arg, const char *msg)
{
    (void)arg;
    baton_log(BATON_LOG_DEBUG, "postgres: %s", msg);
}

static int is_auth_failure(PGconn *c)
{
    const char *m = PQerrorMessage(c);
    return PQconnectionNeedsPassword(c) || strstr(m, "password authentication failed") ||
           strstr(m, "authentication failed") || strstr(m, "no password supplied") ||
           strstr(m, "no pg_hba.conf entry");
}

/* The first line of libpq's message, for ours. */
static void first_line(const char *m, char *out, size_t n)
{
    size_t k = strcspn(m ? m : "", "\n");
    if (k >= n) k = n - 1;
    memcpy(out, m ? m : "", k);
    out[k] = 0;
}

static void ps_attach(PGconn *c);

/* Appends S (and a comma before it unless first) to the malloc'd *BUF. */
static int cat(char **buf, size_t *len, const char *s, int first)
{
    size_t n = strlen(s);
    char *b = realloc(*buf, *len + n + 2);
    if (!b) return -1;
    if (!first) b[(*len)++] = ',';
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = 0;
    *buf = b;
    return 0;
}

/* libpq's keywords with the hosts' addresses resolved by us (dns.c) by
 * DEADLINE: host, hostaddr and port lists with one entry per address, the
 * other keywords as configured. *KW and *VAL are malloc'd, and so are the
 * three values at *OWNED. */
static int resolved_kw(pgeng *e, int64_t deadline, const char ***kw, const char ***val, char *owned[3])
{
    char *hosts = NULL, *addrs = NULL, *ports = NULL;
    size_t hl = 0, al = 0, pl = 0, nent = 0, k = 0;
    int rc = 0;

    for (size_t i = 0; i < e->nhost; i++) {
        char **a = NULL;
        size_t na = 0;
        int numeric = pg_host_numeric(e->hname[i]), mem = 0;
        if (!numeric && (rc = pg_resolve(e->hname[i], deadline, &a, &na))) {
            /* libpq goes on to the next host too; the error stays for the end */
            baton_log(BATON_LOG_DEBUG, "%s", baton_error_last()->message);
            continue;
        }
        for (size_t j = 0; j < (numeric ? 1 : na); j++) {
            const char *addr = numeric ? (*e->hname[i] == '/' || *e->hname[i] == '@' ? "" : e->hname[i]) : a[j];
            mem |= cat(&hosts, &hl, e->hname[i], !nent) || cat(&addrs, &al, addr, !nent) ||
                   cat(&ports, &pl, e->hport[i], !nent);
            nent++;
        }
        for (size_t j = 0; j < na; j++) free(a[j]);
        free(a);
        if (mem) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto fail;
        }
    }
    if (!nent) goto fail;   /* rc: the last resolver error */
    *kw = calloc(e->nkw + 4, sizeof **kw);
    *val = calloc(e->nkw + 4, sizeof **val);
    if (!*kw || !*val) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < e->nkw; i++) {
        if (!strcmp(e->kw[i], "host") || !strcmp(e->kw[i], "port")) continue;
        (*kw)[k] = e->kw[i];
        (*val)[k++] = e->val[i];
    }
    (*kw)[k] = "host";
    (*val)[k++] = hosts;
    (*kw)[k] = "hostaddr";
    (*val)[k++] = addrs;
    (*kw)[k] = "port";
    (*val)[k++] = ports;
    owned[0] = hosts;
    owned[1] = addrs;
    owned[2] = ports;
    return 0;
fail:
    free(*kw);
    free(*val);
    *kw = *val = NULL;
    free(hosts);
    free(addrs);
    free(ports);
    return rc ? rc : baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: no host to connect to");
}

int pg_conn_get(pgeng *e, PGconn **out) { return pg_conn_get_by(e, INT64_MAX, out); }

int pg_conn_get_by(pgeng *e, int64_t by, PGconn **out)
{
    PGconn *c = NULL;
    int64_t deadline;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    char msg[512];
    int64_t start = baton_now_ns();

    *out = NULL;
    /* An idle connection the server closed meanwhile (a restart, a
     * terminated backend) has something to read: its last words or EOF. */
    pthread_mutex_lock(&e->mu);
    while (e->nidle > 0 && !c) {
        PGconn *p = e->idle[--e->nidle];
        struct pollfd pfd = { PQsocket(p), POLLIN, 0 };
        if (PQstatus(p) == CONNECTION_OK && pfd.fd >= 0 && poll(&pfd, 1, 0) == 0) c = p;
        else PQfinish(p);
    }
    pthread_mutex_unlock(&e->mu);
    if (c) {
        *out = c;
        return 0;
    }

    deadline = pg_deadline_ms(e->connect_timeout_ms);
    if (by < deadline) deadline = by;
    if (e->resolve) {
        /* names are resolved here, by the deadline: libpq's own
         * getaddrinfo() would wait as long as the resolver says */
        const char **kw = NULL, **val = NULL;
        char *owned[3] = { NULL, NULL, NULL };
        int rc = resolved_kw(e, deadline, &kw, &val, owned);
        if (rc) return rc;
        c = PQconnectStartParams(kw, val, 0);   /* libpq copies them */
        free(kw);
        free(val);
        for (int i = 0; i < 3; i++) free(owned[i]);
    } else {
        c = PQconnectStartParams(e->kw, e->val, 0);
    }
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "postgres: out of memory");
    if (PQstatus(c) == CONNECTION_BAD) goto failed;
    for (;;) {
        struct pollfd pfd;
        int64_t left;
        int prc;
        if (st == PGRES_POLLING_OK) break;
        if (st == PGRES_POLLING_FAILED) goto failed;
        pfd.fd = PQsocket(c);
        pfd.events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT;
        pfd.revents = 0;
        left = (deadline - baton_now_ns()) / 1000000LL;
        if (left <= 0) {
            pg_conn_drop(c);
            PQfinish(c);
            return baton_seterr(BATON_EUNAVAILABLE, ETIMEDOUT, "postgres: no connection within %d ms",
                                (int)((deadline - start) / 1000000LL));
        }
        prc = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
        if (prc < 0 && errno != EINTR) goto failed;
        if (prc > 0) st = PQconnectPoll(c);
    }
    PQsetNoticeProcessor(c, quiet_notice, NULL);
    if (!e->no_prepare) ps_attach(c);
    if (e->mode != PG_LEASE && PQserverVersion(c) >= 140000) {
        /* A backend blocked in a lock wait does not read its socket, so a
         * waiter that died (kill -9) would stay queued, and hold back
         * readers behind a dead writer, until it would have been granted.
         * Since PostgreSQL 14 the server can look for a closed client
         * during a statement; best effort (older servers: no such setting).
         * Not in lease mode: its statements never wait on the server (a
         * waiter waits in the client), and the check arms a timer around
         * every statement, and costs a round trip per new connection. */
        PGresult *r = NULL;
        int64_t io = pg_deadline_ms(e->io_timeout_ms);
        if (pg_exec(e, c, "SET client_connection_check_interval = " CHECK_INTERVAL_MS, 0, NULL,
                    io < deadline ? io : deadline, NULL, &r) == 0)
            PQclear(r);
        if (PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            return baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: the connection dropped at its setup");
        }
    }
    *out = c;
    return 0;
failed:
    first_line(PQerrorMessage(c), msg, sizeof msg);
    if (is_auth_failure(c)) {
        PQfinish(c);
        return baton_seterr(BATON_EAUTH, 0, "postgres: authentication failed: %s", msg);
    }
    PQfinish(c);
    return baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: cannot connect: %s", msg);
}

void pg_conn_put(pgeng *e, PGconn *c)
{
    if (!c) return;
    if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) == PQTRANS_IDLE && !PQisBusy(c)) {
        pthread_mutex_lock(&e->mu);
        if (e->nidle < PG_POOL_IDLE) {
            e->idle[e->nidle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&e->mu);
    }
    if (c) PQfinish(c);
}

int pg_err(PGresult *r, PGconn *c, const char *what)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    char msg[512];
    int code = BATON_EIO;

    first_line(r ? PQresultErrorMessage(r) : PQerrorMessage(c), msg, sizeof msg);
    if (!*msg && c) first_line(PQerrorMessage(c), msg, sizeof msg);
    if (!state || (c && PQstatus(c) != CONNECTION_OK)) code = BATON_EUNAVAILABLE;
    else if (!strncmp(state, "08", 2) || !strncmp(state, "57P", 3) || !strcmp(state, "53300"))
        code = BATON_EUNAVAILABLE;      /* connection failures, shutdowns, too many clients */
    else if (!strncmp(state, "28", 2) || !strcmp(state, "42501"))
        code = BATON_EAUTH;             /* authorization, insufficient privilege */
    else if (!strcmp(state, "42P01") || !strcmp(state, "42703") || !strcmp(state, "42804") ||
             !strcmp(state, "42P10") || !strcmp(state, "23502"))
        code = BATON_EPROTO;            /* the table is not what we expect */
    return baton_seterr(code, 0, "postgres: %s: %s%s%s%s", what, msg, state ? " (SQLSTATE " : "",
                        state ? state : "", state ? ")" : "");
}

/* Waits for C's socket to be readable for at most MS; 1 readable, 0 not. */
static int wait_readable(PGconn *c, int64_t ms)
{
    struct pollfd pfd = { PQsocket(c), POLLIN, 0 };
    int prc;
    if (pfd.fd < 0) return 1;           /* let PQconsumeInput say what went wrong */
    if (ms < 0) ms = 0;
    prc = poll(&pfd, 1, ms > 1000 ? 1000 : (int)ms);
    return prc != 0;                    /* errors too: PQconsumeInput reports them */
}

void pg_conn_drop(PGconn *c)
{
    int fd = c ? PQsocket(c) : -1;
    if (fd < 0) return;
    /* Nothing libpq does on a shut-down socket can block (a send fails, a
     * read sees the end): reading that end marks the connection bad, so
     * PQfinish sends no Terminate and pg_conn_put never pools it. The
     * server ends the session (and frees its locks) when the FIN reaches
     * it, or when its own keepalives give up on us. */
    shutdown(fd, SHUT_RDWR);
    /* data that was on its way is read first, then the end (a few rounds
     * at most: nothing more can arrive) */
    for (int i = 0; i < 8 && PQstatus(c) == CONNECTION_OK; i++)
        if (!PQconsumeInput(c)) break;
}

/* ---- cancelling a statement ------------------------------------------------
 *
 * PQcancel opens a new connection and waits for the server to close it,
 * with no timeout (libpq 15 has no PQcancelPoll): on a frozen link it
 * blocks until the link thaws. It runs on a thread of its own, which owns
 * the PGcancel and touches nothing else, so the statement's caller keeps
 * its deadline: it waits CANCEL_GRACE_MS for the statement's answer, then
 * drops the connection. At most MAX_CANCELS run at once in the process (a
 * frozen link could otherwise pile them up); past that, the connection is
 * dropped at the deadline without a cancel. */

#define MAX_CANCELS 8
static atomic_int cancels_running;

static void *cancel_main(void *arg)
{
    PGcancel *cn = arg;
    char eb[256];
    PQcancel(cn, eb, sizeof eb);
    PQfreeCancel(cn);
    atomic_fetch_sub(&cancels_running, 1);
    return NULL;
}

/* 0 when a cancel of C's statement is on its way. */
static int cancel_async(PGconn *c)
{
    PGcancel *cn;
    pthread_attr_t a;
    pthread_t t;
    int rc;

    if (atomic_fetch_add(&cancels_running, 1) >= MAX_CANCELS) goto busy;
    if (!(cn = PQgetCancel(c))) goto busy;
    if (pthread_attr_init(&a)) {
        PQfreeCancel(cn);
        goto busy;
    }
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&t, &a, cancel_main, cn);
    pthread_attr_destroy(&a);
    if (rc == 0) return 0;
    PQfreeCancel(cn);
busy:
    atomic_fetch_sub(&cancels_running, 1);
    return -1;
}

/* The answer to the one command sent on C: waits (deadline, cancel) as
 * pg_exec says. */
static int wait_result(PGconn *c, int64_t deadline, baton_waiter *w, PGresult **res)
{
    int stopped = 0;                    /* BATON_ETIMEDOUT / BATON_ECANCELED once we cancelled */
    int64_t grace = 0;
    PGresult *r, *keep = NULL;
    int rc;

    *res = NULL;
    while (PQisBusy(c)) {
        int64_t now = baton_now_ns(), until = stopped ? grace : deadline;
        /* a waiter is looked at every 50 ms: cancel wakes the waiter's
         * condition variable, which poll() cannot watch */
        int64_t ms = until == INT64_MAX ? 1000 : (until - now + 999999) / 1000000LL;
        if (w && ms > 50) ms = 50;
        if (!stopped && ((deadline != INT64_MAX && now >= deadline) || (w && baton_waiter_canceled(w)))) {
            stopped = w && baton_waiter_canceled(w) ? BATON_ECANCELED : BATON_ETIMEDOUT;
            /* A statement without a waiter waits only for the server's
             * answer, and its deadline is the caller's (an I/O timeout, a
             * lease deadline): past it the server is silent or away, and
             * the connection is given up at once. A lock wait is asked to
             * stop, and may take CANCEL_GRACE_MS more to say it did. */
            if (!w || cancel_async(c)) {
                pg_conn_drop(c);
                return baton_seterr(stopped == BATON_ECANCELED ? BATON_ECANCELED : BATON_EUNAVAILABLE, ETIMEDOUT,
                                    stopped == BATON_ECANCELED ? "postgres: canceled (the connection was dropped)"
                                                               : "postgres: no answer by the deadline (the "
                                                                 "connection was dropped)");
            }
            grace = now + (int64_t)CANCEL_GRACE_MS * 1000000LL;
            continue;
        }
        if (stopped && now >= grace) {
            pg_conn_drop(c);
            /* the wait was over anyway: its caller hears that it timed out */
            return baton_seterr(stopped, ETIMEDOUT, "postgres: %s (the cancel was not answered within %d ms: "
                                "the connection was dropped)", stopped == BATON_ECANCELED ? "canceled" : "timed out",
                                CANCEL_GRACE_MS);
        }
        if (wait_readable(c, ms) && !PQconsumeInput(c)) return pg_err(NULL, c, "connection lost");
    }
    /* one statement: one result, then NULL (keep the first, drain the rest) */
    while ((r = PQgetResult(c))) {
        if (!keep) keep = r;
        else PQclear(r);
    }
    if (!keep) return pg_err(NULL, c, "no answer");
    switch (PQresultStatus(keep)) {
    case PGRES_TUPLES_OK:
    case PGRES_COMMAND_OK:
        *res = keep;
        return 0;
    default:
        break;
    }
    {
        const char *state = PQresultErrorField(keep, PG_DIAG_SQLSTATE);
        if (stopped && state && (!strcmp(state, "57014") || !strcmp(state, "55P03"))) {
            PQclear(keep);
            return baton_seterr(stopped, 0, stopped == BATON_ECANCELED ? "postgres: canceled"
                                                                       : "postgres: timed out");
        }
    }
    rc = pg_err(keep, c, "statement failed");
    PQclear(keep);
    return rc;
}

int pg_exec(pgeng *e, PGconn *c, const char *sql, int n, const char *const *params, int64_t deadline,
            baton_waiter *w, PGresult **res)
{
    (void)e;
    *res = NULL;
    if (!PQsendQueryParams(c, sql, n, NULL, params, NULL, NULL, 0))
        return pg_err(NULL, c, "cannot send a statement");
    return wait_result(c, deadline, w, res);
}

/* ---- prepared statements ---------------------------------------------------
 *
 * The statements of every lock cycle are parsed and planned once per
 * connection (PQprepare), then only bound and run: a pair costs the server
 * half as much (docs/PERFORMANCE.md, PostgreSQL). Which ones a connection
 * has prepared is its libpq instance data (a bit per statement), freed with
 * the connection. */

static const char *const ps_name[PG_PS_N] = { "baton_grant_wait", "baton_grant_try", "baton_unlock",
                                                "baton_claim", "baton_release", "baton_renew" };

static int ps_event(PGEventId id, void *info, void *pass)
{
    (void)pass;
    if (id == PGEVT_CONNDESTROY) {
        PGEventConnDestroy *d = info;
        free(PQinstanceData(d->conn, ps_event));
    } else if (id == PGEVT_CONNRESET) {
        /* a reset connection is a new session: nothing is prepared there */
        PGEventConnReset *d = info;
        unsigned *bits = PQinstanceData(d->conn, ps_event);
        if (bits) *bits = 0;
    }
    return 1;
}

/* Prepared-statement bookkeeping for a new connection; best effort (without
 * it, pg_exec_ps sends the text each time). */
static void ps_attach(PGconn *c)
{
    unsigned *bits = calloc(1, sizeof *bits);
    if (!bits) return;
    if (!PQregisterEventProc(c, ps_event, "baton", NULL) || !PQsetInstanceData(c, ps_event, bits)) free(bits);
}

int pg_exec_ps(pgeng *e, PGconn *c, int id, int n, const char *const *params, int64_t deadline, baton_waiter *w,
               PGresult **res)
{
    unsigned *bits = PQinstanceData(c, ps_event);
    PGresult *r = NULL;
    int rc;

    *res = NULL;
    if (!bits) return pg_exec(e, c, e->ps_sql[id], n, params, deadline, w, res);
    for (int attempt = 0;; attempt++) {
        const char *state;
        if (!(*bits & 1u << id)) {
            /* one more round trip, once per connection */
            if (!PQsendPrepare(c, ps_name[id], e->ps_sql[id], n, NULL))
                return pg_err(NULL, c, "cannot send a statement");
            int64_t io = pg_deadline_ms(e->io_timeout_ms);
            if ((rc = wait_result(c, io < deadline ? io : deadline, NULL, &r))) return rc;
            PQclear(r);
            *bits |= 1u << id;
        }
        if (!PQsendQueryPrepared(c, ps_name[id], n, params, NULL, NULL, 0))
            return pg_err(NULL, c, "cannot send a statement");
        rc = wait_result(c, deadline, w, res);
        state = rc ? baton_error_last()->message : NULL;
        /* The server forgot it (DISCARD ALL, a pooler's new session): it
         * did not run, so prepare it again and run it once more. */
        if (rc && attempt == 0 && state && strstr(state, "SQLSTATE 26000") && PQstatus(c) == CONNECTION_OK) {
            *bits &= ~(1u << id);
            continue;
        }
        return rc;
    }
}

/* A pooled connection for ONE statement, run by RUN(e, c, arg, res): tried
 * again once on a fresh connection when RETRY and a pooled one turns out to
 * be dead. */
static int run_pooled(pgeng *e, int retry, int64_t by, PGresult **res,
                      int (*run)(pgeng *e, PGconn *c, const void *arg, PGresult **res), const void *arg)
{
    for (int attempt = 0;; attempt++) {
        PGconn *c;
        int rc = pg_conn_get_by(e, by, &c);
        if (rc) return rc;
        rc = run(e, c, arg, res);
        pg_conn_put(e, c);
        /* the I/O timeout is the server's silence, not a lock wait (not
         * retried: a second try would only wait as long again) */
        if (rc == BATON_ETIMEDOUT)
            return baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: no answer within %d ms", e->io_timeout_ms);
        /* a retry is for a pooled connection found dead, not for a
         * server that stayed silent until the deadline (it would only wait
         * as long again) */
        if (rc != BATON_EUNAVAILABLE || !retry || attempt > 0 || baton_error_last()->native == ETIMEDOUT) return rc;
    }
}

typedef struct {
    const char *sql;
    int id, n;
    const char *const *params;
    int64_t by;              /* a deadline before the I/O timeout, or INT64_MAX */
} run_args;

static int64_t io_by(pgeng *e, int64_t by)
{
    int64_t io = pg_deadline_ms(e->io_timeout_ms);
    return by < io ? by : io;
}

static int run_text(pgeng *e, PGconn *c, const void *arg, PGresult **res)
{
    const run_args *a = arg;
    return pg_exec(e, c, a->sql, a->n, a->params, io_by(e, a->by), NULL, res);
}

static int run_ps(pgeng *e, PGconn *c, const void *arg, PGresult **res)
{
    const run_args *a = arg;
    return pg_exec_ps(e, c, a->id, a->n, a->params, io_by(e, a->by), NULL, res);
}

int pg_run(pgeng *e, const char *sql, int n, const char *const *params, int retry, PGresult **res)
{
    run_args a = { sql, 0, n, params, INT64_MAX };
    return run_pooled(e, retry, INT64_MAX, res, run_text, &a);
}

int pg_run_by(pgeng *e, const char *sql, int n, const char *const *params, int retry, int64_t by, PGresult **res)
{
    run_args a = { sql, 0, n, params, by };
    /* a retry only when there is time left for it */
    return run_pooled(e, retry && by == INT64_MAX, by, res, run_text, &a);
}

int pg_run_ps(pgeng *e, int id, int n, const char *const *params, int retry, PGresult **res)
{
    return pg_run_ps_by(e, id, n, params, retry, INT64_MAX, res);
}

int pg_run_ps_by(pgeng *e, int id, int n, const char *const *params, int retry, int64_t by, PGresult **res)
{
    run_args a = { NULL, id, n, params, by };
    /* a retry only when there is time left for it */
    return run_pooled(e, retry && by == INT64_MAX, by, res, run_ps, &a);
}

char *pg_sql(pgeng *e, const char *tmpl)
{
    size_t n = 1, tl = strlen(e->qtable);
    char *out, *o;
    for (const char *p = tmpl; *p; p++) n += (p[0] == '@' && p[1] == 'T') ? tl : 1;
    if (!(out = malloc(n))) return NULL;
    o = out;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '@' && p[1] == 'T') {
            memcpy(o, e->qtable, tl);
            o += tl;
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

/* ---- the table ------------------------------------------------------------ */

/* The columns we use, and the types we accept for them. */
static const struct {
    const char *col, *type, *alt;
} shape[] = {
    { "name", "text", "character varying" },
    { "key", "bigint", NULL },
    { "fence", "bigint", NULL },
    { "owner", "text", "character varying" },
    { "holder", "text", "character varying" },
    { "lease_until", "timestamp with time zone", NULL },
    { "acquired_at", "timestamp with time zone", NULL },
};

#define DDL "CREATE TABLE @T (name text PRIMARY KEY, key bigint NOT NULL, fence bigint NOT NULL DEFAULT 0, " \
            "owner text, holder text, lease_until timestamptz, acquired_at timestamptz)"

static int check_shape(pgeng *e, PGconn *c, const char *reg)
{
    const char *p[1] = { reg };
    PGresult *r = NULL;
    int rc, found[sizeof shape / sizeof shape[0]] = { 0 };

    rc = pg_exec(e, c, "SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a "
                 "WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped",
                 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    if (rc) return rc;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *col = PQgetvalue(r, i, 0), *type = PQgetvalue(r, i, 1);
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
            if (strcmp(col, shape[k].col)) continue;
            found[k] = 1;
            if (strcmp(type, shape[k].type) && !(shape[k].alt && !strncmp(type, shape[k].alt, strlen(shape[k].alt)))) {
                rc = baton_seterr(BATON_EPROTO, 0, "postgres: table %s: column \"%s\" is %s, expected %s "
                                  "(docs/postgres-engine.md has the DDL)", e->qtable, col, type, shape[k].type);
                goto out;
            }
        }
    }
    for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++)
        if (!found[k]) {
            rc = baton_seterr(BATON_EPROTO, 0, "postgres: table %s has no column \"%s\" (%s) "
                              "(docs/postgres-engine.md has the DDL)", e->qtable, shape[k].col, shape[k].type);
            goto out;
        }
    PQclear(r);
    r = NULL;
    /* ON CONFLICT (name) needs a unique index on name alone */
    rc = pg_exec(e, c, "SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                 "AND a.attnum = i.indkey[0] WHERE i.indrelid = $1::regclass AND i.indisunique "
                 "AND i.indnkeyatts = 1 AND a.attname = 'name'",
                 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    if (rc) return rc;
    if (PQntuples(r) == 0)
        rc = baton_seterr(BATON_EPROTO, 0, "postgres: table %s: column \"name\" has no unique index "
                          "(make it the primary key)", e->qtable);
out:
    PQclear(r);
    return rc;
}

/* Whether relation NAME (quoted, qualified) exists: 0 with *yes. */
static int rel_exists(pgeng *e, PGconn *c, const char *name, int *yes)
{
    const char *p[1] = { name };
    PGresult *r = NULL;
    int rc = pg_exec(e, c, "SELECT to_regclass($1) IS NOT NULL", 1, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    if (rc) return rc;
    *yes = !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return 0;
}

static int simple_exec(pgeng *e, PGconn *c, const char *sql, int n, const char *const *p)
{
    PGresult *r = NULL;
    int rc = pg_exec(e, c, sql, n, p, pg_deadline_ms(e->io_timeout_ms), NULL, &r);
    PQclear(r);
    return rc;
}

#define DDL_KEY PG_DDL_KEY

/* Creates what is missing of the table and (row mode) its fence sequence,
 * in one transaction that first takes the DDL lock: "CREATE ... IF NOT
 * EXISTS" is not safe against itself (two sessions both find nothing and
 * both create: 42710 on the table's row type, 23505 on pg_class), so the
 * second process waits for the first one's COMMIT, then finds it all there. */
static int create_locked(pgeng *e, PGconn *c)
{
    char *create = NULL, *ddl = NULL;
    int rc, yes = 0;

    if ((rc = simple_exec(e, c, "BEGIN", 0, NULL))) return rc;
    if ((rc = simple_exec(e, c, "SELECT pg_advisory_xact_lock(" DDL_KEY ")", 0, NULL))) goto fail;
    if ((rc = rel_exists(e, c, e->qtable, &yes))) goto fail;
    if (!yes) {
        if (!(create = pg_sql(e, "CREATE TABLE IF NOT EXISTS @T (name text PRIMARY KEY, key bigint NOT NULL, "
                                 "fence bigint NOT NULL DEFAULT 0, owner text, holder text, "
                                 "lease_until timestamptz, acquired_at timestamptz)")) ||
            !(ddl = pg_sql(e, DDL))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto fail;
        }
        rc = simple_exec(e, c, create, 0, NULL);
        if (rc == BATON_EAUTH) {
            const char *u = PQuser(c);
            rc = baton_seterr(BATON_EAUTH, 0, "postgres: role \"%s\" may not create the lock table %s; "
                              "ask a DBA to run: %s; GRANT SELECT, INSERT, UPDATE ON %s TO \"%s\";",
                              u ? u : "", e->qtable, ddl, e->qtable, u ? u : "");
        }
        if (rc) goto fail;
        free(create);
        free(ddl);
        create = ddl = NULL;
    }
    if (e->mode == PG_ROW) {
        /* Row mode's fence sequence, starting above every fence the table
         * already holds (another mode may have granted some). */
        if ((rc = rel_exists(e, c, e->qseq, &yes))) goto fail;
        if (!yes) {
            size_t n = strlen(e->qseq) * 2 + strlen(e->qtable) + 200;
            const char *q[1] = { e->qseq };
            char *sv;
            if (!(create = malloc(n)) || !(ddl = malloc(n))) {
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto fail;
            }
            snprintf(ddl, n, "CREATE SEQUENCE %s; SELECT setval('%s', (SELECT coalesce(max(fence), 0) + 1 FROM %s))",
                     e->qseq, e->qseq, e->qtable);
            snprintf(create, n, "CREATE SEQUENCE IF NOT EXISTS %s", e->qseq);
            rc = simple_exec(e, c, create, 0, NULL);
            if (rc == BATON_EAUTH) {
                const char *u = PQuser(c);
                rc = baton_seterr(BATON_EAUTH, 0, "postgres: role \"%s\" may not create row mode's fence sequence "
                                  "%s; ask a DBA to run: %s; GRANT USAGE ON SEQUENCE %s TO \"%s\";", u ? u : "",
                                  e->qseq, ddl, e->qseq, u ? u : "");
            }
            if (rc) goto fail;
            if (!(sv = pg_sql(e, "SELECT setval($1::regclass, (SELECT coalesce(max(fence), 0) + 1 FROM @T))"))) {
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto fail;
            }
            rc = simple_exec(e, c, sv, 1, q);
            free(sv);
            if (rc) goto fail;
        }
    }
    rc = simple_exec(e, c, "COMMIT", 0, NULL);
    goto out;
fail:
    {
        /* keep the first error: the rollback's own is of no interest */
        baton_error saved = *baton_error_last();
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        if (PQstatus(c) != CONNECTION_OK || simple_exec(e, c, "ROLLBACK", 0, NULL)) pg_conn_drop(c);
        baton_seterr(rc, saved.native, "%s", msg);
    }
out:
    free(create);
    free(ddl);
    return rc;
}

int pg_table_ready(pgeng *e)
{
    PGconn *c = NULL;
    int rc, ok, yes = 1;

    pthread_mutex_lock(&e->mu);
    ok = e->table_ok;
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if ((rc = pg_conn_get(e, &c))) return rc;
    /* Look first: CREATE TABLE IF NOT EXISTS needs the CREATE privilege on
     * the schema even when the table is there, which a least-privilege
     * role does not have. */
    if ((rc = rel_exists(e, c, e->qtable, &ok))) goto out;
    if (ok && e->mode == PG_ROW && (rc = rel_exists(e, c, e->qseq, &yes))) goto out;
    if ((!ok || !yes) && (rc = create_locked(e, c))) goto out;
    if ((rc = check_shape(e, c, e->qtable))) goto out;
    pthread_mutex_lock(&e->mu);
    e->table_ok = 1;
    pthread_mutex_unlock(&e->mu);
out:
    pg_conn_put(e, c);
    return rc;
}

/* ---- open / close --------------------------------------------------------- */

static const char *const passthrough[] = {
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword", "passfile",
    "application_name", "target_session_attrs", "channel_binding", "gssencmode", "keepalives",
    "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout", "options", NULL,
};

static const char *const tcp_defaults[][2] = {
    { "keepalives", "1" }, { "keepalives_idle", "10" }, { "keepalives_interval", "3" },
    { "keepalives_count", "3" }, { "tcp_user_timeout", "10000" },
};

static int add_kw(pgeng *e, const char *k, const char *v)
{
    char *kk = strdup(k), *vv = strdup(v);
    if (!kk || !vv) {
        free(kk);
        free(vv);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    e->kw[e->nkw] = kk;
    e->val[e->nkw] = vv;
    e->nkw++;
    return 0;
}

/* An identifier, double-quoted for SQL (a NUL-free string; quotes doubled). */
char *pg_quote_ident(const char *s)
{
    size_t n = 3;
    char *out, *o;
    for (const char *p = s; *p; p++) n += *p == '"' ? 2 : 1;
    if (!(out = malloc(n))) return NULL;
    o = out;
    *o++ = '"';
    for (const char *p = s; *p; p++) {
        if (*p == '"') *o++ = '"';
        *o++ = *p;
    }
    *o++ = '"';
    *o = 0;
    return out;
}

static void eng_free(pgeng *e)
{
    for (int i = 0; i < e->nidle; i++) PQfinish(e->idle[i]);
    if (e->kw)
        for (size_t i = 0; i < e->nkw; i++) {
            free((char *)e->kw[i]);
            if (e->val[i]) memset((char *)e->val[i], 0, strlen(e->val[i])); /* a password among them */
            free((char *)e->val[i]);
        }
    free(e->kw);
    free(e->val);
    for (size_t i = 0; i < e->nhost; i++) {
        free(e->hname[i]);
        free(e->hport[i]);
    }
    free(e->hname);
    free(e->hport);
    free(e->schema);
    free(e->table);
    free(e->qtable);
    free(e->qseq);
    free(e->channel);
    free(e->ident);
    for (int i = 0; i < PG_PS_N; i++) free(e->ps_sql[i]);
    pg_coord_free(e);
    if (e->wake[0] >= 0) close(e->wake[0]);
    if (e->wake[1] >= 0) close(e->wake[1]);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int configure(pgeng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    char hosts[1024] = "", ports[512] = "";
    const char *mode, *app;
    int rc;

    e->connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 2000;
    e->io_timeout_ms = opts && opts->io_timeout_ms > 0 ? opts->io_timeout_ms : 5000;
    /* keywords: hosts, ports, user, password, dbname, application_name + passthrough */
    e->kw = calloc(u->nparams + 16, sizeof *e->kw);
    e->val = calloc(u->nparams + 16, sizeof *e->val);
    if (!e->kw || !e->val) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    mode = baton_opts_str(uo, "mode");
    if (baton_opts_given(uo, "schema") && !(e->schema = strdup(baton_opts_str(uo, "schema"))))
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (!(e->table = strdup(baton_opts_str(uo, "table")))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (baton_opts_given(uo, "connect_timeout_ms")) e->connect_timeout_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    /* prepare=0: statements as text every time (a pooler in transaction
     * mode that cannot keep prepared statements) */
    e->no_prepare = !baton_opts_bool(uo, "prepare");
    for (const char *const *p = passthrough; *p; p++)
        if (baton_opts_given(uo, *p) && (rc = add_kw(e, *p, baton_opts_str(uo, *p)))) return rc;
    app = baton_opts_str(uo, "application_name");
    /* libpq skips a passfile it cannot read and the login then fails as
     * if the password were wrong: say what is wrong instead, as MariaDB's
     * engine does */
    if (baton_opts_given(uo, "passfile") && access(baton_opts_str(uo, "passfile"), R_OK))
        return baton_seterr(BATON_EINVAL, errno, "postgres: passfile %s: %s", baton_opts_str(uo, "passfile"),
                            strerror(errno));
    if (!strcmp(mode, "session")) e->mode = PG_SESSION;
    else if (!strcmp(mode, "lease")) e->mode = PG_LEASE;
    else if (!strcmp(mode, "row")) e->mode = PG_ROW;
    else return baton_seterr(BATON_EINVAL, 0, "postgres: mode must be session, lease or row, not '%s'", mode);
    if (!e->table && !(e->table = strdup(DEFAULT_TABLE))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* 57: room for row mode's "<table>_fence" in PostgreSQL's 63-byte names */
    if (!*e->table || strlen(e->table) > 57 || (e->schema && (!*e->schema || strlen(e->schema) > 63)))
        return baton_seterr(BATON_EINVAL, 0, "postgres: table names are 1 to 57 bytes, schema names 1 to 63");

    for (size_t i = 0; i < u->nhosts; i++) {
        const char *h = u->hosts[i].host ? u->hosts[i].host : "";
        char p[16];
        if (strchr(h, ','))
            return baton_seterr(BATON_EINVAL, 0, "postgres: bad host in the URI");
        snprintf(p, sizeof p, "%d", u->hosts[i].port ? u->hosts[i].port : 5432);
        if (!e->hname && (!(e->hname = calloc(u->nhosts, sizeof *e->hname)) ||
                          !(e->hport = calloc(u->nhosts, sizeof *e->hport))))
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        if (!(e->hname[i] = strdup(h)) || !(e->hport[i] = strdup(p)))
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        e->nhost = i + 1;
        if (!pg_host_numeric(h)) e->resolve = 1;
        if (strlen(hosts) + strlen(h) + 2 > sizeof hosts || strlen(ports) + strlen(p) + 2 > sizeof ports)
            return baton_seterr(BATON_EINVAL, 0, "postgres: too many hosts in the URI");
        if (i) {
            strcat(hosts, ",");
            strcat(ports, ",");
        }
        strcat(hosts, h);
        strcat(ports, p);
    }
    if (*hosts && (rc = add_kw(e, "host", hosts))) return rc;
    if (*ports && (rc = add_kw(e, "port", ports))) return rc;
    if (u->user && *u->user && (rc = add_kw(e, "user", u->user))) return rc;
    if (opts && opts->password) rc = add_kw(e, "password", opts->password);
    else if (u->password) rc = add_kw(e, "password", u->password);
    else rc = 0;
    if (rc) return rc;
    if (u->path && *u->path && (rc = add_kw(e, "dbname", u->path))) return rc;
    if (!app && (rc = add_kw(e, "application_name", "baton"))) return rc;
    /* A peer that vanished (a partition, a dead host) must not keep a
     * socket of ours, or the server's session, alive for the kernel's two
     * hours: keepalives probe an idle connection (a held lock's) after 10 s,
     * every 3 s, 3 times, and data left unacknowledged for 10 s ends the
     * connection (tcp_user_timeout). The URI overrides each. They bound
     * what the kernel does; our deadlines (pg_exec) bound every call. */
    for (size_t i = 0; i < sizeof tcp_defaults / sizeof tcp_defaults[0]; i++)
        if (!baton_uri_get(u, tcp_defaults[i][0]) && (rc = add_kw(e, tcp_defaults[i][0], tcp_defaults[i][1])))
            return rc;

    /* "schema"."table", and the NOTIFY channel named after it */
    {
        char *qs = e->schema ? pg_quote_ident(e->schema) : NULL, *qt = pg_quote_ident(e->table);
        size_t n = (qs ? strlen(qs) + 1 : 0) + (qt ? strlen(qt) : 0) + 1;
        if ((e->schema && !qs) || !qt || !(e->qtable = malloc(n))) {
            free(qs);
            free(qt);
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
        snprintf(e->qtable, n, "%s%s%s", qs ? qs : "", qs ? "." : "", qt);
        free(qt);
        {
            char seq[80];
            snprintf(seq, sizeof seq, "%s_fence", e->table);
            qt = pg_quote_ident(seq);
            n = (qs ? strlen(qs) + 1 : 0) + (qt ? strlen(qt) : 0) + 1;
            if (!qt || !(e->qseq = malloc(n))) {
                free(qs);
                free(qt);
                return baton_seterr(BATON_ENOMEM, 0, "out of memory");
            }
            snprintf(e->qseq, n, "%s%s%s", qs ? qs : "", qs ? "." : "", qt);
        }
        free(qs);
        free(qt);
        /* channel names are identifiers: at most 63 bytes */
        if (!(e->channel = malloc(64))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        snprintf(e->channel, 64, "baton:%s%s%s", e->schema ? e->schema : "", e->schema ? "." : "", e->table);
    }
    for (int i = 0; i < PG_PS_N; i++) {
        e->ps_sql[i] = i <= PG_PS_UNLOCK ? pg_session_stmt(e, i) : pg_lease_stmt(e, i);
        if (!e->ps_sql[i]) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    return pg_coord_configure(e);
}

static int pg_open(void **eng, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    pgeng *e;
    int rc;

    *eng = NULL;
    /* libpq is loaded here, not linked: programs that never open a
     * postgres:// engine do not pay its start-up (pqdl.h) */
    if ((rc = baton__pq_load())) return rc;
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    e->wake[0] = e->wake[1] = -1;
    e->wpipe[0] = e->wpipe[1] = -1;
    pthread_mutex_init(&e->mu, NULL);
    if ((rc = configure(e, u, uo, opts))) goto fail;
    if (pipe(e->wake) != 0) {
        rc = baton_seterr(BATON_EIO, errno, "postgres: pipe: %s", strerror(errno));
        goto fail;
    }
    /* Connect now: a wrong password or an unreachable server is an open
     * error, not a surprise at the first lock. The connection is pooled. */
    {
        PGconn *c;
        char buf[1300];
        if ((rc = pg_conn_get(e, &c))) goto fail;
        snprintf(buf, sizeof buf, "postgres://%s:%s/%s#%s", PQhost(c) ? PQhost(c) : "",
                 PQport(c) ? PQport(c) : "", PQdb(c) ? PQdb(c) : "", e->qtable);
        pg_conn_put(e, c);
        if (!(e->ident = strdup(buf))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto fail;
        }
    }
    *eng = e;
    return 0;
fail:
    eng_free(e);
    return rc;
}

static void pg_close(void *eng)
{
    pgeng *e = eng;
    pg_listener_stop(e);
    pg_watch_stop(e);
    eng_free(e);
}

/* ---- locks ---------------------------------------------------------------- */

/* The advisory key of NAME: the first 8 bytes of SHA-256(NAME), big-endian,
 * as a signed int8 (docs/postgres-engine.md). */
void pg_name_key(const char *name, pglock *l)
{
    unsigned char d[BATON_SHA256_SIZE];
    uint64_t k = 0;
    baton__sha256(name, strlen(name), d);
    for (int i = 0; i < 8; i++) k = k << 8 | d[i];
    snprintf(l->key, sizeof l->key, "%" PRId64, (int64_t)k);
    /* pg_locks shows an int8 key as classid (high half) and objid (low half) */
    snprintf(l->classid, sizeof l->classid, "%" PRIu32, (uint32_t)(k >> 32));
    snprintf(l->objid, sizeof l->objid, "%" PRIu32, (uint32_t)k);
}

static int pg_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    pgeng *e = eng;
    pglock *l;
    if (e->mode != PG_LEASE && opts && opts->fixed_lease)
        return baton_seterr(BATON_ENOTSUP, 0, "postgres: no fixed leases in %s mode: a lock lives as "
                            "long as its connection (use ?mode=lease)", e->mode == PG_ROW ? "row" : "session");
    if (!(l = calloc(1, sizeof *l)) || !(l->name = strdup(name))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->e = e;
    l->lease_ms = opts && opts->lease_ms ? opts->lease_ms : 30000;
    pg_name_key(name, l);
    *st = l;
    return 0;
}

static void pg_lock_free(void *eng, void *st)
{
    pglock *l = st;
    free(l->mid);       /* members and takers (group.c, queue.c) */
    free(l->data);
    /* first: the watcher must not look at this state or its socket again */
    pg_watch_del(eng, l);
    /* a connection still here belongs to a grant that was lost: closing it
     * makes sure the server holds nothing for it */
    if (l->conn) PQfinish(l->conn);
    if (l->rw) {
        int last;
        pg_rw_drop(l);
        pthread_mutex_lock(&l->rw->mu);
        l->rw->side[l->kind == PG_WRITE] = NULL;
        last = --l->rw->refs == 0;
        pthread_mutex_unlock(&l->rw->mu);
        if (last) {
            pthread_mutex_destroy(&l->rw->mu);
            free(l->rw);
        }
    }
    free(l->name);
    free(l);
}

static int pg_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr)
{
    pgeng *e = eng;
    pglock *r = NULL, *w = NULL;
    pgrw *rw;
    int rc;

    if (e->mode != PG_SESSION)
        return baton_seterr(BATON_ENOTSUP, 0, "postgres: read-write locks exist in session mode only");
    if (!(rw = calloc(1, sizeof *rw))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = pg_lock_new(eng, name, opts, (void **)&r))) goto fail;
    if ((rc = pg_lock_new(eng, name, opts, (void **)&w))) goto fail;
    pthread_mutex_init(&rw->mu, NULL);
    rw->refs = 2;
    r->kind = PG_READ;
    w->kind = PG_WRITE;
    r->rw = w->rw = rw;
    rw->side[0] = r;
    rw->side[1] = w;
    *rd = r;
    *wr = w;
    return 0;
fail:
    if (r) pg_lock_free(eng, r);
    free(rw);
    return rc;
}

static int pg_lock_acquire(void *eng, void *st, baton_acquire_req *req)
{
    pgeng *e = eng;
    int rc, kind = ((pglock *)st)->kind;
    /* members and takers are lease rows of their own tables, in every mode */
    if (kind == PG_MEMBER) return pg_member_acquire(e, st, req);
    if (kind == PG_TAKER) return pg_taker_acquire(e, st, req);
    if ((rc = pg_table_ready(e))) return rc;
    if (((pglock *)st)->rw) return pg_rw_acquire(e, st, req);
    if (req->fair) return pg_fair_acquire(e, st, req);
    if (e->mode == PG_ROW) return pg_row_acquire(e, st, req);
    return e->mode == PG_SESSION ? pg_session_acquire(e, st, req) : pg_lease_acquire(e, st, req);
}

static int pg_lock_release(void *eng, void *st, const baton_owner *owner)
{
    pgeng *e = eng;
    pglock *l = st;
    int rc;
    if (l->kind == PG_MEMBER) return pg_member_release(e, st, owner);
    if (l->kind == PG_TAKER) return pg_taker_release(e, st, owner);
    if (l->rw) return pg_rw_release(e, st);
    if (e->mode == PG_ROW) rc = pg_row_release(e, st);
    else rc = e->mode == PG_SESSION ? pg_session_release(e, st) : pg_lease_release(e, st, owner);
    /* lease mode's release NOTIFYs already; the others wake a fair queue here */
    if (l->fair && e->mode != PG_LEASE) pg_fair_released(e, l);
    l->fair = 0;
    return rc;
}

static int pg_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    pgeng *e = eng;
    if (((pglock *)st)->kind == PG_MEMBER) return pg_member_renew(e, st, owner, lease_ms, deadline_ns);
    if (((pglock *)st)->kind == PG_TAKER) return pg_taker_renew(e, st, owner, lease_ms, deadline_ns);
    if (((pglock *)st)->rw) return pg_rw_renew(e, st, deadline_ns);
    if (e->mode == PG_ROW) return pg_row_renew(e, st, deadline_ns);
    return e->mode == PG_SESSION ? pg_session_renew(e, st, deadline_ns)
                                 : pg_lease_renew(e, st, owner, lease_ms, deadline_ns);
}

static int pg_lock_info(void *eng, const char *name, baton_lockinfo *out)
{
    pgeng *e = eng;
    pglock k;
    PGresult *r = NULL;
    char *sql;
    int rc;

    if ((rc = pg_table_ready(e))) return rc;
    /* a semaphore's count and a fair queue's length where there are; a role
     * that may not read those tables still gets the lock's own answer, a
     * server that does not answer ends the call (within one I/O timeout) */
    if ((rc = pg_prims_info(e, name, out))) {
        if (rc != BATON_EAUTH && rc != BATON_EPROTO && rc != BATON_EIO) return rc;
        out->permits = BATON_PERMITS_UNKNOWN;
        out->queue_length = -1;
    }
    if (e->mode == PG_ROW) return pg_row_info(e, name, out);
    memset(&k, 0, sizeof k);
    pg_name_key(name, &k);
    {
        const char *p[3] = { name, k.classid, k.objid };
        /* session mode: held = the server holds the advisory lock (whoever
         * takes it); lease mode: held = the lease has not run out */
        sql = pg_sql(e, e->mode == PG_SESSION
            ? "WITH k AS (SELECT mode, granted FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
              "AND classid = $2::oid AND objid = $3::oid "
              "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) "
              "SELECT t.fence, coalesce(t.holder, ''), -1, EXISTS (SELECT 1 FROM k WHERE granted), "
              "(SELECT count(*) FROM k WHERE granted AND mode = 'ShareLock'), "
              "EXISTS (SELECT 1 FROM k WHERE granted AND mode = 'ExclusiveLock'), "
              "(SELECT count(*) FROM k WHERE NOT granted AND mode = 'ExclusiveLock') "
              "FROM (SELECT $1::text AS n) q LEFT JOIN @T t ON t.name = q.n"
            : "SELECT t.fence, coalesce(t.holder, ''), coalesce(ceil(extract(epoch FROM "
              "(t.lease_until - clock_timestamp())) * 1000)::bigint, -1), "
              "coalesce(t.owner IS NOT NULL AND t.lease_until > clock_timestamp(), false) "
              "FROM (SELECT $1::text AS n, $2::text AS a, $3::text AS b) q LEFT JOIN @T t ON t.name = q.n");
        if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        rc = pg_run(e, sql, 3, p, 1, &r);
        free(sql);
    }
    if (rc) return rc;
    out->held = !strcmp(PQgetvalue(r, 0, 3), "t");
    if (e->mode == PG_SESSION) {
        /* a plain lock is the exclusive mode too: it shows as a writer */
        out->readers = strtoll(PQgetvalue(r, 0, 4), NULL, 10);
        out->writer = !strcmp(PQgetvalue(r, 0, 5), "t");
        out->waiting_writers = strtoll(PQgetvalue(r, 0, 6), NULL, 10);
    }
    out->fence = PQgetisnull(r, 0, 0) ? 0 : strtoull(PQgetvalue(r, 0, 0), NULL, 10);
    if (out->held) {
        snprintf(out->holder, sizeof out->holder, "%s", PQgetvalue(r, 0, 1));
        if (e->mode == PG_LEASE) {
            out->remaining_ms = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
            if (out->remaining_ms < 1) out->remaining_ms = 1;
        }
    }
    PQclear(r);
    return 0;
}

static int pg_identity(void *eng, char *buf, size_t n)
{
    pgeng *e = eng;
    snprintf(buf, n, "%s", e->ident);
    return 0;
}

static int pg_describe(void *eng, char *buf, size_t n)
{
    pgeng *e = eng;
    PGconn *c;
    int rc = pg_conn_get(e, &c), v;
    if (rc) return rc;
    v = PQserverVersion(c);
    snprintf(buf, n, "%s mode, table %s, server %d.%d at %s:%s database %s as %s",
             e->mode == PG_SESSION ? "session" : e->mode == PG_LEASE ? "lease" : "row", e->qtable, v / 10000, v % 10000,
             PQhost(c) ? PQhost(c) : "", PQport(c) ? PQport(c) : "", PQdb(c) ? PQdb(c) : "",
             PQuser(c) ? PQuser(c) : "");
    pg_conn_put(e, c);
    return 0;
}

static const baton_lock_methods pg_lock_methods = {
    .create = pg_lock_new,
    .destroy = pg_lock_free,
    .acquire = pg_lock_acquire,
    .release = pg_lock_release,
    .renew = pg_lock_renew,
    .info = pg_lock_info,
    .list = pg_lock_list,
    .force_unlock = pg_lock_break,
};

static const baton_rw_methods pg_rw_methods = {
    .create = pg_rwlock_new,
};

static const baton_services pg_services_methods = {
    .attach = pg_watch_attach,
    .identity = pg_identity,
    .describe = pg_describe,
    .engine_ops = pg_engine_ops,
    .secret_env = "PGPASSWORD",
};

const baton_backend baton__backend_postgres = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_postgres,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_FAIR,
    .open = pg_open,
    .close = pg_close,
    .lock = &pg_lock_methods,
    .rw = &pg_rw_methods,
    .value = &pg_value_methods,
    .group = &pg_group_methods,
    .queue = &pg_queue_methods,
    .ratelimit = &baton__ratelimit_postgres,
    .sem = &pg_sem_methods,
    .permits = &pg_permits_methods,
    .services = &pg_services_methods,
};
