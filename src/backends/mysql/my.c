/*
 * The MySQL/MariaDB backend: URI and options, connections, statements, the
 * watchdog that stops waits, errors, the lock table, identity, describe,
 * engine_ops and the backend table. Session mode lives in session.c, row
 * mode in row.c, lease mode in lease.c.
 *
 * URI: mysql://[user[:password]@]host[:port]/database[?options] (or mariadb://)
 * Options: mode (session | row | lease), table, connect_timeout_ms, passfile,
 * socket, and TLS: ssl-ca, ssl-capath, ssl-cert, ssl-key, ssl-cipher,
 * ssl-mode (DISABLED | PREFERRED | REQUIRED | VERIFY_CA | VERIFY_IDENTITY),
 * ssl-verify-server-cert (0 | 1); underscores may stand for the dashes.
 * The password: baton_client_options.password, else the URI's, else the
 * first line of ?passfile=, else $MYSQL_PWD.
 *
 * Capabilities, as for PostgreSQL: the table serves every mode, so it says
 * BATON_CAP_LEASE for all. Lease mode has a real lease renewed by the
 * core's keeper; session and row modes have none (the lock lives as long
 * as its connection, or its transaction) and their "renewal" is the check
 * the contract asks for: every lease/3 the keeper calls lock_renew, which
 * asks the holding connection whether it still holds the lock (a dead
 * connection: the server already freed it, ELOST). No BATON_CAP_NOTIFY:
 * MariaDB cannot notify, lease-mode waiters poll (lease.c).
 *
 * Statements carry every string as a hex literal (X'...'): binary-safe and
 * never in need of escaping, whatever the server's sql_mode.
 */
#include "my_int.h"
#include "core/internal.h"
#include "util/base64.h"
#include "util/sha256.h"

#include <errno.h>
#include <errmsg.h>
#include <inttypes.h>
#include <mysqld_error.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TABLE "baton_locks"
#define WATCH_MS 20              /* the watchdog looks at cancelled waiters this often */
#define LINGER_MS 1000           /* ... and keeps looking this long after the last wait began */
#define KILL_MS 1000             /* a KILL QUERY (connecting included) is given up after this */
#define GRACE_MS 250             /* a wait still running this long after its deadline (the KILL
                                  * did not reach the server: a frozen link) is cut */

int64_t my_deadline_ms(int ms) { return baton_now_ns() + (int64_t)ms * 1000000LL; }

/* ---- errors --------------------------------------------------------------- */

static int code_of(unsigned int n)
{
    switch (n) {
    case ER_ACCESS_DENIED_ERROR: case ER_DBACCESS_DENIED_ERROR: case ER_TABLEACCESS_DENIED_ERROR:
    case ER_COLUMNACCESS_DENIED_ERROR: case ER_SPECIFIC_ACCESS_DENIED_ERROR: case ER_PASSWORD_NO_MATCH:
    case 1698: /* ER_ACCESS_DENIED_NO_PASSWORD_ERROR */
    case 1862: /* ER_MUST_CHANGE_PASSWORD_LOGIN */
        return BATON_EAUTH;
    case ER_NO_SUCH_TABLE: case ER_BAD_FIELD_ERROR: case ER_NO_DEFAULT_FOR_FIELD:
    case ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: case ER_DATA_TOO_LONG: case ER_BAD_DB_ERROR:
        return BATON_EPROTO;
    case ER_CON_COUNT_ERROR: case ER_SERVER_SHUTDOWN: case ER_NET_READ_ERROR: case ER_NET_READ_INTERRUPTED:
    case ER_NET_ERROR_ON_WRITE: case ER_NET_WRITE_INTERRUPTED: case ER_TOO_MANY_USER_CONNECTIONS:
    case 1927: /* ER_CONNECTION_KILLED */
    case 4031: /* ER_CLIENT_INTERACTION_TIMEOUT */
        return BATON_EUNAVAILABLE;
    default:
        /* 2000-2999: the client library's own (no connection, lost it, TLS) */
        return n >= 2000 && n < 3000 ? BATON_EUNAVAILABLE : BATON_EIO;
    }
}

int my_err(MYSQL *c, const char *what)
{
    unsigned int n = mysql_errno(c);
    return baton_seterr(n ? code_of(n) : BATON_EIO, (long)n, "mysql: %s: %s (error %u)", what,
                        n ? mysql_error(c) : "no answer", n);
}

/* ---- strings -------------------------------------------------------------- */

char *my_escape_n(const void *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = p;
    char *out = malloc(2 * n + 4), *o = out;
    if (!out) return NULL;
    *o++ = 'X';
    *o++ = '\'';
    for (size_t i = 0; i < n; i++) {
        *o++ = hex[s[i] >> 4];
        *o++ = hex[s[i] & 15];
    }
    *o++ = '\'';
    *o = 0;
    return out;
}

char *my_escape(const char *s) { return my_escape_n(s, strlen(s)); }

/* The quoted identifier "@X" stands for in my_sql, NULL for none. */
static const char *subst(myeng *e, char c)
{
    switch (c) {
    case 'T': return e->qtable;
    case 'S': return e->qseq;
    case 'V': return e->qaux[MY_AUX_VALUE];
    case 'G': return e->qaux[MY_AUX_GROUP];
    case 'Q': return e->qaux[MY_AUX_QUEUE];
    case 'R': return e->qaux[MY_AUX_RW];
    case 'N': return e->qaux[MY_AUX_SEM];
    case 'P': return e->qaux[MY_AUX_PERM];
    case 'F': return e->qaux[MY_AUX_FAIR];
    default: return NULL;
    }
}

char *my_sql(myeng *e, const char *fmt, ...)
{
    va_list ap;
    char *body = NULL, *out, *o;
    const char *q;
    size_t n = 1;
    int len;

    va_start(ap, fmt);
    len = vasprintf(&body, fmt, ap);
    va_end(ap);
    if (len < 0) return NULL;
    /* hex literals and numbers never hold '@'; @baton_ok is no table */
    for (const char *p = body; *p; p++)
        n += (p[0] == '@' && (q = subst(e, p[1]))) ? strlen(q) : 1;
    if (!(out = malloc(n))) {
        free(body);
        return NULL;
    }
    o = out;
    for (const char *p = body; *p; p++) {
        if (p[0] == '@' && (q = subst(e, p[1]))) {
            size_t ql = strlen(q);
            memcpy(o, q, ql);
            o += ql;
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    free(body);
    return out;
}

const char *my_cell(MYSQL_RES *r, int col)
{
    MYSQL_ROW row;
    if (!r || (int)mysql_num_fields(r) <= col) return NULL;
    mysql_data_seek(r, 0);
    row = mysql_fetch_row(r);
    return row ? row[col] : NULL;
}

/* ---- connections ---------------------------------------------------------- */

void my_conn_close(MYSQL *c)
{
    if (c) mysql_close(c);
}

int in_trans_or_lost(MYSQL *c)
{
    unsigned int st = 0;
    if (mariadb_get_infov(c, MARIADB_CONNECTION_SERVER_STATUS, &st)) return 1;
    return (st & SERVER_STATUS_IN_TRANS) != 0;
}

static MYSQL *new_handle(myeng *e, int64_t deadline)
{
    MYSQL *c = mysql_init(NULL);
    int64_t ms = e->connect_timeout_ms, left = deadline == INT64_MAX ? INT64_MAX : (deadline - baton_now_ns()) / 1000000;
    unsigned int ct, rt = (unsigned int)e->read_timeout_s;
    /* Connector/C counts whole seconds (and each step of the handshake
     * anew): the connect timeout, cut to what the caller has left */
    if (left < ms) ms = left;
    ct = (unsigned int)(ms <= 0 ? 1 : (ms + 999) / 1000);
    my_bool yes = 1;
    if (!c) return NULL;
    /* connect_until waits for the connect itself */
    mysql_optionsv(c, MYSQL_OPT_NONBLOCK, 0);
    mysql_optionsv(c, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(c, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_optionsv(c, MYSQL_OPT_WRITE_TIMEOUT, &rt);
    if (e->ssl_ca) mysql_optionsv(c, MYSQL_OPT_SSL_CA, e->ssl_ca);
    if (e->ssl_capath) mysql_optionsv(c, MYSQL_OPT_SSL_CAPATH, e->ssl_capath);
    if (e->ssl_cert) mysql_optionsv(c, MYSQL_OPT_SSL_CERT, e->ssl_cert);
    if (e->ssl_key) mysql_optionsv(c, MYSQL_OPT_SSL_KEY, e->ssl_key);
    if (e->ssl_cipher) mysql_optionsv(c, MYSQL_OPT_SSL_CIPHER, e->ssl_cipher);
    if (e->ssl_enforce) mysql_optionsv(c, MYSQL_OPT_SSL_ENFORCE, &yes);
    if (e->ssl_verify >= 0) {
        my_bool v = e->ssl_verify > 0;
        mysql_optionsv(c, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &v);
    }
    return c;
}

/* mysql_real_connect, ended by DEADLINE (or the connect timeout, the
 * earlier): Connector/C's non-blocking connect, waited for here, so the TCP
 * connect, the handshake and TLS end on time against a frozen peer (its own
 * timeouts count whole seconds, each step anew). Name resolution runs inside
 * the first call and is the resolver's. Later statements use the blocking
 * calls on the same handle (Connector/C switches the socket back). NULL on
 * failure, with the handle's error set. */
static MYSQL *connect_until(myeng *e, MYSQL *c, int64_t deadline)
{
    MYSQL *ret = NULL;
    int64_t dl = my_deadline_ms(e->connect_timeout_ms);
    int st, over = 0;

    if (deadline < dl) dl = deadline;
    st = mysql_real_connect_start(&ret, c, e->unix_socket ? NULL : e->host, e->user, e->password, e->db,
                                  (unsigned int)e->port, e->unix_socket, 0);
    while (st) {
        struct pollfd p = { (int)mysql_get_socket(c), 0, 0 };
        int64_t now = baton_now_ns(), ms = (dl - now + 999999) / 1000000;
        int ev = 0, r;
        if (over || now >= dl) {
            /* the deadline: the socket is shut down and the connect told it
             * timed out, which ends it with an error (closing a suspended
             * connect would leak its half-made connection) */
            if (!over && p.fd >= 0) shutdown(p.fd, SHUT_RDWR);
            over = 1;
            st = mysql_real_connect_cont(&ret, c, MYSQL_WAIT_TIMEOUT);
            continue;
        }
        if (st & MYSQL_WAIT_TIMEOUT) {
            int64_t lib = (int64_t)mysql_get_timeout_value_ms(c);
            if (lib < ms) ms = lib;
        }
        if (st & MYSQL_WAIT_READ) p.events |= POLLIN;
        if (st & MYSQL_WAIT_WRITE) p.events |= POLLOUT;
        if (st & MYSQL_WAIT_EXCEPT) p.events |= POLLPRI;
        r = poll(&p, p.fd >= 0 ? 1 : 0, (int)(ms > INT32_MAX ? INT32_MAX : ms));
        if (r < 0 && errno != EINTR) over = 1;
        if (r <= 0) {
            /* Connector/C's own timeout passed, else our deadline is looked at above */
            if ((st & MYSQL_WAIT_TIMEOUT) && baton_now_ns() < dl && r == 0) ev = MYSQL_WAIT_TIMEOUT;
            else continue;
        } else {
            if (p.revents & (POLLIN | POLLHUP | POLLERR)) ev |= MYSQL_WAIT_READ;
            if (p.revents & (POLLOUT | POLLHUP | POLLERR)) ev |= MYSQL_WAIT_WRITE;
            if (p.revents & POLLPRI) ev |= MYSQL_WAIT_EXCEPT;
        }
        st = mysql_real_connect_cont(&ret, c, ev);
    }
    return ret;
}

static int connect_new(myeng *e, MYSQL **out, int64_t deadline)
{
    MYSQL *c = new_handle(e, deadline);
    int rc;
    *out = NULL;
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "mysql: out of memory");
    if (!connect_until(e, c, deadline)) {
        unsigned int n = mysql_errno(c);
        rc = code_of(n);
        /* a database that does not exist is EUNAVAILABLE, as on PostgreSQL
         * (the server refuses to serve what the URI names: baton exits 69) */
        if (rc != BATON_EAUTH) rc = BATON_EUNAVAILABLE;
        rc = baton_seterr(rc, (long)n, "mysql: %s: %s (error %u)",
                          rc == BATON_EAUTH ? "authentication failed" : "cannot connect", mysql_error(c), n);
        mysql_close(c);
        return rc;
    }
    /* Connector/C 3.3 lets MYSQL_OPT_SSL_ENFORCE alone (no verification)
     * fall back to plain text when the server has no TLS: look ourselves */
    if (e->ssl_enforce && !mysql_get_ssl_cipher(c)) {
        mysql_close(c);
        return baton_seterr(BATON_EUNAVAILABLE, 0, "mysql: cannot connect: ssl-mode asks for TLS, but the "
                            "connection to %s:%d is not encrypted (the server has no TLS)", e->host, e->port);
    }
    *out = c;
    return 0;
}

/* TRUST_FRESH: a connection back in the pool for less than MY_FRESH_MS is
 * taken without the liveness poll (one system call per statement saved;
 * for statements that are run again on a checked connection when this one
 * turns out dead: my_run's RETRY). */
static int conn_get(myeng *e, MYSQL **out, int trust_fresh, int64_t deadline)
{
    MYSQL *c = NULL;
    int64_t fresh = trust_fresh ? baton_now_ns() - MY_FRESH_MS * 1000000LL : INT64_MAX;
    *out = NULL;
    /* An idle connection the server closed meanwhile (a restart, a KILL)
     * has something to read: its last words or EOF. */
    pthread_mutex_lock(&e->mu);
    while (e->nidle > 0 && !c) {
        MYSQL *p = e->idle[--e->nidle];
        struct pollfd pfd = { (int)mysql_get_socket(p), POLLIN, 0 };
        if (pfd.fd >= 0 && (e->idle_at[e->nidle] > fresh || poll(&pfd, 1, 0) == 0)) c = p;
        else mysql_close(p);
    }
    pthread_mutex_unlock(&e->mu);
    if (c) {
        *out = c;
        return 0;
    }
    return connect_new(e, out, deadline);
}

int my_conn_get(myeng *e, MYSQL **out) { return conn_get(e, out, 0, INT64_MAX); }

void my_conn_put(myeng *e, MYSQL *c)
{
    unsigned int n;
    if (!c) return;
    n = mysql_errno(c);
    if (!(n >= 2000 && n < 3000) && code_of(n) != BATON_EUNAVAILABLE && !in_trans_or_lost(c)) {
        pthread_mutex_lock(&e->mu);
        if (e->nidle < MY_POOL_IDLE && !e->stop) {
            e->idle_at[e->nidle] = baton_now_ns();
            e->idle[e->nidle++] = c;
            c = NULL;
        }
        pthread_mutex_unlock(&e->mu);
    }
    if (c) mysql_close(c);
}

/* ---- statements ----------------------------------------------------------- */

/* The statement under G (registered, or NULL: no deadline), which is
 * unregistered here. */
static int exec_guarded(myeng *e, MYSQL *c, const char *sql, MYSQL_RES **res, myguard *g)
{
    MYSQL_RES *r = NULL;
    int rc = 0;
    if (mysql_real_query(c, sql, strlen(sql))) {
        rc = my_err(c, "statement failed");
    } else if (mysql_field_count(c) > 0) {
        if (!(r = mysql_store_result(c))) rc = my_err(c, "cannot read the result");
    }
    if (g && my_guard_del(e, g)) {
        /* cut at its deadline, maybe right after it succeeded: the
         * connection is gone either way */
        mysql_free_result(r);
        return baton_seterr(BATON_EUNAVAILABLE, 2013, "mysql: the server did not answer within the deadline "
                            "(the connection was dropped)");
    }
    if (rc) return rc;
    if (res) *res = r;
    else mysql_free_result(r);
    return 0;
}

int my_exec_dl(myeng *e, MYSQL *c, const char *sql, MYSQL_RES **res, int64_t deadline)
{
    myguard g;
    int rc;
    if (res) *res = NULL;
    if (baton_now_ns() >= deadline)
        return baton_seterr(BATON_EUNAVAILABLE, 0, "mysql: no time left for the statement");
    if (deadline == INT64_MAX) return exec_guarded(e, c, sql, res, NULL);
    if ((rc = my_guard_add(e, &g, (int)mysql_get_socket(c), deadline))) return rc;
    return exec_guarded(e, c, sql, res, &g);
}

int my_exec(myeng *e, MYSQL *c, const char *sql, MYSQL_RES **res)
{
    return my_exec_dl(e, c, sql, res, my_deadline_ms(e->io_timeout_ms));
}

int my_run(myeng *e, const char *sql, int retry, MYSQL_RES **res, uint64_t *affected, uint64_t *insert_id)
{
    return my_run_dl(e, sql, retry, res, affected, insert_id, my_deadline_ms(e->io_timeout_ms));
}

int my_run_dl(myeng *e, const char *sql, int retry, MYSQL_RES **res, uint64_t *affected, uint64_t *insert_id,
              int64_t deadline)
{
    for (int attempt = 0;; attempt++) {
        MYSQL *c;
        /* a statement that may run twice trusts a fresh pooled connection
         * (its retry takes a checked one); the others always check */
        int rc = conn_get(e, &c, retry && attempt == 0, deadline);
        if (rc) return rc;
        rc = my_exec_dl(e, c, sql, res, deadline);
        if (rc == 0) {
            if (affected) *affected = mysql_affected_rows(c);
            if (insert_id) *insert_id = mysql_insert_id(c);
        }
        my_conn_put(e, c);
        if (rc != BATON_EUNAVAILABLE || !retry || attempt > 0 || baton_now_ns() >= deadline) return rc;
    }
}

/* The watchdog: one thread per client, started by the first wait. It KILLs
 * (KILL QUERY, on a connection of its own) a waiting statement whose
 * deadline passed or whose waiter was cancelled: the server then ends the
 * wait and the statement answers at once. Statements that do not wait
 * never meet it (the socket timeout bounds them).
 *
 * A wait registers without waking the watchdog when it will look soon
 * enough anyway: for LINGER_MS after the last wait began it looks every
 * WATCH_MS even with nothing to watch. Waking it at every acquire (every
 * grant statement is a wait) cost a futex wake and a context switch per
 * lock/unlock pair, a fifth of the pair's CPU. */
static void abs_time(struct timespec *ts, int64_t ns)
{
    ts->tv_sec = (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

static void send_kill(myeng *e, unsigned long id)
{
    char q[64];
    if (!e->killer && connect_new(e, &e->killer, my_deadline_ms(KILL_MS))) {
        baton_log(BATON_LOG_WARN, "mysql: cannot connect to stop a wait: %s", baton_error_last()->message);
        return;
    }
    snprintf(q, sizeof q, "KILL QUERY %lu", id);
    /* bounded: on a frozen link the KILL cannot arrive either, and the
     * watchdog must go on to the next wait (the waits' own deadlines cut
     * their connections) */
    if (my_exec_dl(e, e->killer, q, NULL, my_deadline_ms(KILL_MS))) {
        unsigned int n = mysql_errno(e->killer);
        if (n != ER_NO_SUCH_THREAD) {
            baton_log(BATON_LOG_WARN, "mysql: %s: %s", q, baton_error_last()->message);
            mysql_close(e->killer);
            e->killer = NULL;
        }
    }
}

static void *watchdog(void *arg)
{
    myeng *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        int64_t now = baton_now_ns(), next = INT64_MAX;
        myrun *hit = NULL;
        struct timespec ts;
        for (myrun *r = e->runs; r; r = r->next) {
            if (r->why) continue;
            if (now >= r->deadline_ns) r->why = BATON_ETIMEDOUT;
            else if (r->w && baton_waiter_canceled(r->w)) r->why = BATON_ECANCELED;
            if (r->why) {
                hit = r;
                break;
            }
            if (r->deadline_ns < next) next = r->deadline_ns;
            if (r->w && now + WATCH_MS * 1000000LL < next) next = now + WATCH_MS * 1000000LL;
        }
        if (hit) {
            unsigned long id = hit->thread_id;
            hit->kill_pending = 1;
            /* if the KILL cannot end it (a frozen link), the connection is
             * cut a little later */
            if (hit->guard) my_guard_sooner(e, hit->guard, now + GRACE_MS * 1000000LL);
            pthread_mutex_unlock(&e->mu);
            send_kill(e, id);
            pthread_mutex_lock(&e->mu);
            /* a wait whose connection was cut meanwhile has not waited for
             * this KILL and may be gone: only a run still listed is told */
            for (myrun *r = e->runs; r; r = r->next)
                if (r == hit) r->kill_pending = 0;
            pthread_cond_broadcast(&e->kill_cv);
            continue;
        }
        if (!e->runs && now - e->wd_last < LINGER_MS * 1000000LL) next = now + WATCH_MS * 1000000LL;
        e->wd_next = next;
        if (next == INT64_MAX) {
            pthread_cond_wait(&e->wd_cv, &e->mu);
        } else {
            abs_time(&ts, next);
            pthread_cond_timedwait(&e->wd_cv, &e->mu, &ts);
        }
        e->wd_next = 0;     /* awake: the loop looks at every run before it sleeps again */
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void run_unlist(myeng *e, myrun *run)
{
    pthread_mutex_lock(&e->mu);
    for (myrun **pp = &e->runs; *pp; pp = &(*pp)->next)
        if (*pp == run) {
            *pp = run->next;
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

int my_wait(myeng *e, MYSQL *c, const char *sql, int64_t deadline, baton_waiter *w, MYSQL_RES **res)
{
    myguard g;
    myrun run;
    int64_t now = baton_now_ns(), look;
    int rc;

    memset(&run, 0, sizeof run);
    run.thread_id = mysql_thread_id(c);
    run.deadline_ns = deadline;
    run.w = w;
    /* when the watchdog must look at this run first */
    look = w && now + WATCH_MS * 1000000LL < deadline ? now + WATCH_MS * 1000000LL : deadline;
    pthread_mutex_lock(&e->mu);
    if (!e->wd_started) {
        if (pthread_create(&e->wd, NULL, watchdog, e)) {
            pthread_mutex_unlock(&e->mu);
            return baton_seterr(BATON_EIO, 0, "mysql: cannot start the watchdog thread");
        }
        e->wd_started = 1;
    }
    run.next = e->runs;
    e->runs = &run;
    e->wd_last = now;
    if (e->wd_next > look) pthread_cond_signal(&e->wd_cv);
    pthread_mutex_unlock(&e->mu);

    /* The KILL ends the wait at its deadline or cancel; on a frozen link it
     * cannot arrive, and the connection is cut GRACE_MS later (the watchdog
     * moves the guard's deadline up at a cancel). A chunk of a longer wait
     * ends on the server by itself, within the socket timeout. */
    if (res) *res = NULL;
    {
        int64_t hard = deadline == INT64_MAX || deadline > now + (int64_t)e->chunk_s * 1000000000LL
                           ? now + (int64_t)e->read_timeout_s * 1000000000LL
                           : deadline + GRACE_MS * 1000000LL;
        if ((rc = my_guard_add(e, &g, (int)mysql_get_socket(c), hard))) {
            run_unlist(e, &run);
            return rc;
        }
        pthread_mutex_lock(&e->mu);
        run.guard = &g;
        pthread_mutex_unlock(&e->mu);
        rc = exec_guarded(e, c, sql, res, &g);
    }

    pthread_mutex_lock(&e->mu);
    /* a KILL on its way must land before the connection runs anything else;
     * a connection that failed (cut at its deadline: the KILL could not
     * arrive either) is closed by the caller, and the wait ends now */
    while (run.kill_pending && rc != BATON_EUNAVAILABLE) pthread_cond_wait(&e->kill_cv, &e->mu);
    run.guard = NULL;
    pthread_mutex_unlock(&e->mu);
    run_unlist(e, &run);
    if (rc && run.why && code_of(mysql_errno(c)) != BATON_EUNAVAILABLE)
        rc = baton_seterr(run.why, 0, "mysql: %s", run.why == BATON_ETIMEDOUT ? "wait timed out" : "wait canceled");
    else if (rc == 0 && run.why == BATON_ECANCELED)
        rc = 0;   /* it finished first: the caller looks at the result */
    return rc;
}

/* ---- the table ------------------------------------------------------------ */

#define DDL "CREATE TABLE @T (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL " \
            "DEFAULT 0, owner VARBINARY(64) NULL, holder VARBINARY(255) NULL, lease_until DATETIME(6) NULL, " \
            "acquired_at DATETIME(6) NULL) ENGINE=InnoDB"

/* The columns we use, and the types we accept for them. */
static const struct {
    const char *col, *types;
} shape[] = {
    { "name", " varbinary binary varchar char " },
    { "fence", " bigint " },
    { "owner", " varbinary binary varchar char " },
    { "holder", " varbinary binary varchar char text blob " },
    { "lease_until", " datetime " },
    { "acquired_at", " datetime " },
};

static int check_shape(myeng *e, MYSQL *c, const char *etab)
{
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *q;
    int rc, found[sizeof shape / sizeof shape[0]] = { 0 };

    q = my_sql(e, "SELECT COLUMN_NAME, DATA_TYPE, COALESCE(COLLATION_NAME, '') FROM information_schema.COLUMNS "
                  "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s", etab);
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, q, &r);
    free(q);
    if (rc) return rc;
    while ((row = mysql_fetch_row(r))) {
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
            char t[80];
            if (!row[0] || strcasecmp(row[0], shape[k].col)) continue;
            found[k] = 1;
            snprintf(t, sizeof t, " %s ", row[1] ? row[1] : "");
            for (char *p = t; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
            if (!strstr(shape[k].types, t)) {
                rc = baton_seterr(BATON_EPROTO, 0, "mysql: table %s: column \"%s\" is %s, expected one of%s"
                                  "(docs/mysql-engine.md has the DDL)", e->qtable, shape[k].col, row[1],
                                  shape[k].types);
                goto out;
            }
            /* a case-insensitive name column would make "A" and "a" one row */
            if (!strcmp(shape[k].col, "name") && (!strcmp(t, " varchar ") || !strcmp(t, " char ")) &&
                (!row[2] || !strstr(row[2], "_bin"))) {
                rc = baton_seterr(BATON_EPROTO, 0, "mysql: table %s: column \"name\" has the collation %s; "
                                  "it must compare bytes (VARBINARY, or a _bin collation)", e->qtable, row[2]);
                goto out;
            }
        }
    }
    for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++)
        if (!found[k]) {
            rc = baton_seterr(BATON_EPROTO, 0, "mysql: table %s has no column \"%s\" (%s) "
                              "(docs/mysql-engine.md has the DDL)", e->qtable, shape[k].col, shape[k].types + 1);
            goto out;
        }
    mysql_free_result(r);
    r = NULL;
    /* ON DUPLICATE KEY UPDATE needs a unique index on name alone */
    q = my_sql(e, "SELECT 1 FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s "
                  "GROUP BY INDEX_NAME HAVING MAX(NON_UNIQUE) = 0 AND COUNT(*) = 1 AND MAX(COLUMN_NAME) = 'name'",
               etab);
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, q, &r);
    free(q);
    if (rc) goto out;
    if (mysql_num_rows(r) == 0)
        rc = baton_seterr(BATON_EPROTO, 0, "mysql: table %s: column \"name\" has no unique index "
                          "(make it the primary key)", e->qtable);
out:
    mysql_free_result(r);
    return rc;
}

/* Row mode's fence sequence: created when missing, and moved above every
 * fence the table holds (another mode may have granted some). */
static int sequence_ready(myeng *e, MYSQL *c)
{
    char *q = NULL;
    int rc;

    /* Look first: CREATE SEQUENCE IF NOT EXISTS waits for the metadata
     * lock every open transaction that used the sequence holds (every row
     * mode holder) */
    {
        MYSQL_RES *r = NULL;
        char *es = my_escape(e->seq);
        int there;
        q = es ? my_sql(e, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND "
                           "TABLE_NAME = %s AND TABLE_TYPE = 'SEQUENCE'", es) : NULL;
        free(es);
        if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        rc = my_exec(e, c, q, &r);
        free(q);
        if (rc) return rc;
        there = mysql_num_rows(r) > 0;
        mysql_free_result(r);
        if (there) return 0;
    }
    q = my_sql(e, "CREATE SEQUENCE IF NOT EXISTS @S NOCACHE");
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, q, NULL);
    free(q);
    if (rc == BATON_EAUTH) {
        return baton_seterr(BATON_EAUTH, 0, "mysql: user '%s' may not create row mode's fence sequence %s; "
                            "ask a DBA to run: CREATE SEQUENCE %s NOCACHE; GRANT SELECT, INSERT ON %s.%s TO <user>;",
                            e->user ? e->user : "", e->qseq, e->qseq, e->db, e->qseq);
    }
    if (rc) return rc;
    /* SETVAL takes a constant, and never moves a sequence back */
    {
        MYSQL_RES *r = NULL;
        const char *v;
        uint64_t max = 0;
        if (!(q = my_sql(e, "SELECT COALESCE(MAX(fence), 0) FROM @T")))
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        rc = my_exec(e, c, q, &r);
        free(q);
        if (rc) return rc;
        if ((v = my_cell(r, 0))) max = strtoull(v, NULL, 10);
        mysql_free_result(r);
        if (!(q = my_sql(e, "SELECT SETVAL(@S, %" PRIu64 ")", max)))
            return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        rc = my_exec(e, c, q, NULL);
        free(q);
    }
    return rc;
}

int my_table_ready(myeng *e)
{
    MYSQL *c = NULL;
    MYSQL_RES *r = NULL;
    char *q = NULL, *etab = NULL;
    const char *v;
    int rc, ok;

    pthread_mutex_lock(&e->mu);
    ok = e->table_ok;
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if (!(etab = my_escape(e->table))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = my_conn_get(e, &c))) goto out;
    /* Look first: CREATE TABLE IF NOT EXISTS needs the CREATE privilege even
     * when the table is there, which a least-privilege user does not have. */
    if (!(q = my_sql(e, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                        "AND TABLE_NAME = %s", etab))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_exec(e, c, q, &r))) goto out;
    free(q);
    q = NULL;
    if (mysql_num_rows(r) == 0) {
        if (!(q = my_sql(e, "%s", DDL))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto out;
        }
        rc = my_exec(e, c, q + 0, NULL);
        if (rc == BATON_EAUTH) {
            rc = baton_seterr(BATON_EAUTH, 0, "mysql: user '%s' may not create the lock table %s; ask a DBA "
                              "to run: %s; GRANT SELECT, INSERT, UPDATE ON %s.%s TO <user>;", e->user ? e->user : "",
                              e->qtable, q, e->db, e->qtable);
            goto out;
        }
        /* two clients creating it at once: the loser finds it there */
        if (rc && baton_error_last()->native == ER_TABLE_EXISTS_ERROR) rc = 0;
        if (rc) goto out;
    } else if ((v = my_cell(r, 0)) && strcasecmp(v, "InnoDB")) {
        rc = baton_seterr(BATON_EPROTO, 0, "mysql: table %s uses the %s engine; it must be InnoDB (transactions, "
                          "row locks)", e->qtable, v);
        goto out;
    }
    if ((rc = check_shape(e, c, etab))) goto out;
    if (e->mode == MY_ROW && (rc = sequence_ready(e, c))) goto out;
    pthread_mutex_lock(&e->mu);
    e->table_ok = 1;
    pthread_mutex_unlock(&e->mu);
out:
    mysql_free_result(r);
    my_conn_put(e, c);
    free(q);
    free(etab);
    return rc;
}

/* ---- open / close --------------------------------------------------------- */

static int set_str(char **dst, const char *v)
{
    free(*dst);
    if (!(*dst = strdup(v))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    return 0;
}

/* "ssl_ca" and "ssl-ca" are one option. */
static void wipe(char *s)
{
    if (s) memset(s, 0, strlen(s));
    free(s);
}

static void eng_free(myeng *e)
{
    /* after the watchdog (its KILLs are guarded), before the connections */
    my_watch_stop(e);
    for (int i = 0; i < e->nidle; i++) mysql_close(e->idle[i]);
    if (e->killer) mysql_close(e->killer);
    free(e->host);
    free(e->user);
    wipe(e->password);
    free(e->db);
    free(e->unix_socket);
    free(e->ssl_ca);
    free(e->ssl_capath);
    free(e->ssl_cert);
    free(e->ssl_key);
    free(e->ssl_cipher);
    free(e->table);
    free(e->qtable);
    free(e->seq);
    free(e->qseq);
    for (int i = 0; i < MY_AUX_N; i++) free(e->qaux[i]);
    free(e->ident);
    pthread_cond_destroy(&e->wd_cv);
    pthread_cond_destroy(&e->kill_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int read_passfile(myeng *e, const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    size_t n;
    if (!f) return baton_seterr(BATON_EINVAL, errno, "mysql: passfile %s: %s", path, strerror(errno));
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    buf[strcspn(buf, "\r\n")] = 0;
    n = strlen(buf);
    if (!n) return baton_seterr(BATON_EINVAL, 0, "mysql: passfile %s holds no password", path);
    e->password = strdup(buf);
    memset(buf, 0, sizeof buf);
    return e->password ? 0 : baton_seterr(BATON_ENOMEM, 0, "out of memory");
}

/* A backquoted identifier (backquotes doubled). */
static char *quote_ident(const char *s)
{
    size_t n = 3;
    char *out, *o;
    for (const char *p = s; *p; p++) n += *p == '`' ? 2 : 1;
    if (!(out = malloc(n))) return NULL;
    o = out;
    *o++ = '`';
    for (const char *p = s; *p; p++) {
        if (*p == '`') *o++ = '`';
        *o++ = *p;
    }
    *o++ = '`';
    *o = 0;
    return out;
}

static int configure(myeng *e, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    const char *mode = "session", *passfile = NULL, *sslmode = NULL;
    int rc = 0;

    e->connect_timeout_ms = opts && opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 2000;
    e->io_timeout_ms = opts && opts->io_timeout_ms > 0 ? opts->io_timeout_ms : 5000;
    e->ssl_verify = -1;
    static const struct { const char *opt; size_t off; } strs[] = {
        { "table", offsetof(myeng, table) },         { "socket", offsetof(myeng, unix_socket) },
        { "ssl-ca", offsetof(myeng, ssl_ca) },       { "ssl-capath", offsetof(myeng, ssl_capath) },
        { "ssl-cert", offsetof(myeng, ssl_cert) },   { "ssl-key", offsetof(myeng, ssl_key) },
        { "ssl-cipher", offsetof(myeng, ssl_cipher) },
    };
    mode = baton_opts_str(uo, "mode");
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (baton_opts_given(uo, strs[i].opt) &&
            (rc = set_str((char **)((char *)e + strs[i].off), baton_opts_str(uo, strs[i].opt))))
            return rc;
    if (baton_opts_given(uo, "connect_timeout_ms")) e->connect_timeout_ms = (int)baton_opts_int(uo, "connect_timeout_ms");
    passfile = baton_opts_str(uo, "passfile");
    if (baton_opts_given(uo, "ssl-mode")) sslmode = baton_opts_str(uo, "ssl-mode");
    if (baton_opts_given(uo, "ssl-verify-server-cert")) e->ssl_verify = baton_opts_bool(uo, "ssl-verify-server-cert");
    if (!strcmp(mode, "session")) e->mode = MY_SESSION;
    else if (!strcmp(mode, "lease")) e->mode = MY_LEASE;
    else if (!strcmp(mode, "row")) e->mode = MY_ROW;
    else return baton_seterr(BATON_EINVAL, 0, "mysql: mode must be session, row or lease, not '%s'", mode);
    if (sslmode) {
        if (!strcasecmp(sslmode, "DISABLED") || !strcasecmp(sslmode, "PREFERRED")) {
            /* Connector/C speaks TLS when a certificate option asks for it */
        } else if (!strcasecmp(sslmode, "REQUIRED")) {
            e->ssl_enforce = 1;
            if (e->ssl_verify < 0) e->ssl_verify = 0;
        } else if (!strcasecmp(sslmode, "VERIFY_CA") || !strcasecmp(sslmode, "VERIFY_IDENTITY")) {
            e->ssl_enforce = 1;
            e->ssl_verify = 1;
        } else {
            return baton_seterr(BATON_EINVAL, 0, "mysql: ssl-mode must be DISABLED, PREFERRED, REQUIRED, VERIFY_CA "
                                "or VERIFY_IDENTITY, not '%s'", sslmode);
        }
    }
    if (u->nhosts > 1) return baton_seterr(BATON_EINVAL, 0, "mysql: one host only in the URI");
    if (!u->path || !*u->path || strchr(u->path, '/'))
        return baton_seterr(BATON_EINVAL, 0, "mysql: the URI must name a database: mysql://host[:port]/database");
    if (!e->table && !(e->table = strdup(DEFAULT_TABLE))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* 58: room for row mode's "<table>_fence" in MariaDB's 64-character names */
    if (!*e->table || strlen(e->table) > 58 || strlen(u->path) > 64)
        return baton_seterr(BATON_EINVAL, 0, "mysql: table names are 1 to 58 bytes, database names 1 to 64");
    if ((rc = set_str(&e->db, u->path))) return rc;
    if ((rc = set_str(&e->host, u->host && *u->host ? u->host : "127.0.0.1"))) return rc;
    e->port = u->port ? u->port : 3306;
    if (u->user && *u->user && (rc = set_str(&e->user, u->user))) return rc;
    if (opts && opts->password) rc = set_str(&e->password, opts->password);
    else if (u->password) rc = set_str(&e->password, u->password);
    else if (passfile) rc = read_passfile(e, passfile);
    else if (getenv("MYSQL_PWD")) rc = set_str(&e->password, getenv("MYSQL_PWD"));
    else rc = 0;
    if (rc) return rc;
    /* every connection's socket timeout; a wait is cut into statements that
     * each end (on the server) a second before it */
    e->read_timeout_s = (e->io_timeout_ms + 999) / 1000 + 1;
    e->chunk_s = e->read_timeout_s - 1;

    e->qtable = quote_ident(e->table);
    if (!(e->seq = malloc(strlen(e->table) + 8))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    sprintf(e->seq, "%s_fence", e->table);
    e->qseq = quote_ident(e->seq);
    if (!e->qtable || !e->qseq) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* 58 + 6 bytes: within MariaDB's 64 */
    {
        static const char *const suffix[MY_AUX_N] = { "_value", "_group", "_queue", "_rw", "_sem", "_perm",
                                                                   "_fair" };
        char name[80];
        for (int i = 0; i < MY_AUX_N; i++) {
            snprintf(name, sizeof name, "%s%s", e->table, suffix[i]);
            if (!(e->qaux[i] = quote_ident(name))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
    }
    return 0;
}

static int my_open(void **eng, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    myeng *e;
    pthread_condattr_t ca;
    MYSQL *c = NULL;
    MYSQL_RES *r = NULL;
    int rc;

    *eng = NULL;
    /* Connector/C is loaded (and initialised) here, not linked: programs
     * that never open a mysql:// engine do not pay its start-up (mydl.h) */
    if ((rc = baton__my_load())) return rc;
    if (!(e = calloc(1, sizeof *e))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    e->wpipe[0] = e->wpipe[1] = -1;
    e->w_next = INT64_MAX;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->wd_cv, &ca);
    pthread_cond_init(&e->kill_cv, NULL);
    pthread_condattr_destroy(&ca);
    if ((rc = configure(e, u, uo, opts))) goto fail;
    /* Connect now: a wrong password or an unreachable server is an open
     * error, not a surprise at the first lock. The connection is pooled. */
    if ((rc = my_conn_get(e, &c))) goto fail;
    if ((rc = my_exec(e, c, "SELECT @@hostname, @@port, DATABASE(), VERSION()", &r))) goto fail;
    {
        MYSQL_ROW row = mysql_fetch_row(r);
        char buf[1200];
        if (!row) {
            rc = baton_seterr(BATON_EPROTO, 0, "mysql: the server answered no row");
            goto fail;
        }
        snprintf(buf, sizeof buf, "mysql://%s:%s/%s#%s", row[0] ? row[0] : "", row[1] ? row[1] : "",
                 row[2] ? row[2] : "", e->table);
        if (!(e->ident = strdup(buf))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            goto fail;
        }
        snprintf(e->server, sizeof e->server, "%.40s at %.32s:%d", row[3] ? row[3] : "?", e->host, e->port);
    }
    mysql_free_result(r);
    my_conn_put(e, c);
    *eng = e;
    return 0;
fail:
    mysql_free_result(r);
    if (c) mysql_close(c);
    eng_free(e);
    return rc;
}

static void my_close(void *eng)
{
    myeng *e = eng;
    int started;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    started = e->wd_started;
    pthread_cond_broadcast(&e->wd_cv);
    pthread_mutex_unlock(&e->mu);
    if (started) pthread_join(e->wd, NULL);
    eng_free(e);
}

/* ---- locks ---------------------------------------------------------------- */

/* GET_LOCK's name for NAME: the name itself when it is at most 64 bytes
 * (MySQL's limit) and does not start with "sha256:"; else "sha256:" and the
 * unpadded base64url of its SHA-256 (50 characters). Never a truncation, so
 * two names are never one lock. */
void my_name_key(const char *name, char key[72])
{
    unsigned char d[BATON_SHA256_SIZE];
    size_t n = strlen(name);
    if (n <= 64 && strncmp(name, "sha256:", 7)) {
        memcpy(key, name, n + 1);
        return;
    }
    baton__sha256(name, n, d);
    memcpy(key, "sha256:", 7);
    baton__base64_encode(key + 7, d, sizeof d, BATON_B64_URL | BATON_B64_NOPAD);
}

static int my_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    myeng *e = eng;
    mylock *l;
    if (e->mode != MY_LEASE && opts && opts->fixed_lease)
        return baton_seterr(BATON_ENOTSUP, 0, "mysql: no fixed leases in %s mode: a lock lives as long as its "
                            "connection (use ?mode=lease)", e->mode == MY_ROW ? "row" : "session");
    if (!(l = calloc(1, sizeof *l))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    l->e = e;
    my_name_key(name, l->key);
    if (!(l->name = strdup(name)) || !(l->esc = my_escape(name)) || !(l->ekey = my_escape(l->key))) {
        free(l->name);
        free(l->esc);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = l;
    return 0;
}

static void my_lock_free(void *eng, void *st)
{
    mylock *l = st;
    (void)eng;
    /* first: the watcher must not look at this state or its socket again */
    my_watch_del(eng, l);
    /* a connection still here belongs to a grant that was lost: closing it
     * makes sure the server holds nothing for it */
    if (l->conn) mysql_close(l->conn);
    my_coord_free(l);
    free(l->name);
    free(l->esc);
    free(l->ekey);
    free(l);
}

static int my_lock_acquire(void *eng, void *st, baton_acquire_req *req)
{
    myeng *e = eng;
    mylock *l = st;
    int rc;
    /* members and takers are lease rows in every mode */
    if (l->kind == MY_KIND_MEMBER) return my_member_acquire(e, l, req);
    if (l->kind == MY_KIND_TAKER) return my_taker_acquire(e, l, req);
    if (l->kind == MY_KIND_READ || l->kind == MY_KIND_WRITE) return my_rw_acquire(e, l, req);
    if ((rc = my_table_ready(e))) return rc;
    if (req->fair) return my_fair_acquire(e, l, req);
    if (e->mode == MY_ROW) return my_row_acquire(e, st, req);
    return e->mode == MY_SESSION ? my_session_acquire(e, st, req) : my_lease_acquire(e, st, req);
}

static int my_lock_release(void *eng, void *st, const baton_owner *owner)
{
    myeng *e = eng;
    mylock *l = st;
    if (l->kind == MY_KIND_MEMBER) return my_member_release(e, l, owner);
    if (l->kind == MY_KIND_TAKER) return my_taker_release(e, l, owner);
    if (l->kind == MY_KIND_READ || l->kind == MY_KIND_WRITE) return my_rw_release(e, l, owner);
    if (e->mode == MY_ROW) return my_row_release(e, st);
    return e->mode == MY_SESSION ? my_session_release(e, st) : my_lease_release(e, st, owner);
}

static int my_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    myeng *e = eng;
    mylock *l = st;
    if (l->kind == MY_KIND_MEMBER) return my_member_renew(e, l, owner, lease_ms, deadline_ns);
    if (l->kind == MY_KIND_TAKER) return my_taker_renew(e, l, owner, lease_ms, deadline_ns);
    if (l->kind == MY_KIND_READ || l->kind == MY_KIND_WRITE) return my_rw_renew(e, l, owner, lease_ms, deadline_ns);
    if (e->mode == MY_ROW) return my_row_renew(e, st, deadline_ns);
    return e->mode == MY_SESSION ? my_session_renew(e, st, deadline_ns)
                                 : my_lease_renew(e, st, owner, lease_ms, deadline_ns);
}

static int my_lock_info(void *eng, const char *name, baton_lockinfo *out)
{
    myeng *e = eng;
    mylock *l = NULL;
    int rc;
    if ((rc = my_table_ready(e))) return rc;
    if ((rc = my_lock_new(eng, name, NULL, (void **)&l))) return rc;
    rc = e->mode == MY_ROW ? my_row_info(e, l, out) : e->mode == MY_SESSION ? my_session_info(e, l, out)
                                                                           : my_lease_info(e, l, out);
    /* the name may be a read-write lock's */
    if (!rc && !out->held) rc = my_rw_info(e, l, out);
    if (!rc) rc = my_sem_info(e, l->esc, out);
    my_lock_free(eng, l);
    return rc;
}

static int my_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    myeng *e = eng;
    int rc;
    if ((rc = my_table_ready(e))) return rc;
    return my_admin_list(e, prefix, fn, arg);
}

static int my_lock_break(void *eng, const char *name, uint64_t *fence)
{
    myeng *e = eng;
    mylock *l = NULL;
    int rc;
    *fence = 0;
    if ((rc = my_table_ready(e))) return rc;
    if ((rc = my_lock_new(eng, name, NULL, (void **)&l))) return rc;
    rc = my_admin_break(e, l, fence);
    my_lock_free(eng, l);
    return rc;
}

static int my_identity(void *eng, char *buf, size_t n)
{
    myeng *e = eng;
    snprintf(buf, n, "%s", e->ident);
    return 0;
}

static int my_describe(void *eng, char *buf, size_t n)
{
    myeng *e = eng;
    snprintf(buf, n, "%s mode, table %s.%s, server %s as %s", e->mode == MY_SESSION ? "session" :
             e->mode == MY_LEASE ? "lease" : "row", e->db, e->qtable, e->server, e->user ? e->user : "(default user)");
    return 0;
}

/* The server's statement counters (SHOW GLOBAL STATUS): Com_* of the
 * statements the engine sends, as lower-case statement names. Not
 * Questions: it counts this SHOW too, so it would never settle. */
static int my_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg)
{
    myeng *e = eng;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    int rc = my_run(e, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Com_select', 'Com_insert', 'Com_insert_select', "
                       "'Com_update', 'Com_delete', 'Com_commit', 'Com_begin', 'Com_rollback', 'Com_kill', 'Com_do')",
                    1, &r, NULL, NULL);
    if (rc) return rc;
    while ((row = mysql_fetch_row(r))) {
        char op[64];
        const char *k = row[0] ? row[0] : "";
        if (!strncasecmp(k, "Com_", 4)) k += 4;
        snprintf(op, sizeof op, "%s", k);
        for (char *p = op; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
        fn(arg, op, row[1] ? strtoull(row[1], NULL, 10) : 0);
    }
    mysql_free_result(r);
    return 0;
}

static const baton_lock_methods my_lock_methods = {
    .create = my_lock_new,
    .destroy = my_lock_free,
    .acquire = my_lock_acquire,
    .release = my_lock_release,
    .renew = my_lock_renew,
    .info = my_lock_info,
    .list = my_lock_list,
    .force_unlock = my_lock_break,
};

static const baton_services my_services_methods = {
    .identity = my_identity,
    .engine_ops = my_engine_ops,
    .describe = my_describe,
    .attach = my_watch_attach,
    .secret_env = "MYSQL_PWD",
};

const baton_backend baton__backend_mysql = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_mysql,
    .caps = BATON_CAP_LEASE | BATON_CAP_FAIR,
    .open = my_open,
    .close = my_close,
    .lock = &my_lock_methods,
    .rw = &my_rw_methods,
    .sem = &my_sem_methods,
    .permits = &my_permits_methods,
    .value = &my_value_methods,
    .group = &my_group_methods,
    .queue = &my_queue_methods,
    .services = &my_services_methods,
};
