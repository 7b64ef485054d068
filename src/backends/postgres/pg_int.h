/*
 * Internal declarations shared by the PostgreSQL backend modules:
 *   pg.c       URI/options, connecting (libpq, non-blocking with our own
 *              timeout), the connection pool, running one statement with a
 *              deadline and cancellation, errors, the table, identity,
 *              describe and the backend table
 *   session.c  session mode: pg_advisory_lock on the lock's own connection
 *   lease.c    lease mode: a conditional upsert on the server's clock, the
 *              LISTEN thread that wakes waiters
 *   row.c      row mode: the row locked by a transaction kept open
 *   rw.c       read-write locks (session mode)
 *   watch.c    the watcher of held connections (session, row, read-write):
 *              a terminated session, or one not confirmed alive within the
 *              lease, is reported lost (baton_host_lost)
 *   coord.c    the tables of values, groups and queues, their channels and
 *              their waiters (shared by value.c, group.c, queue.c)
 *   value.c    values: a row per name with a version, CAS, LISTEN watches
 *   group.c    group members: lease rows, in every mode
 *   queue.c    work queues: items taken FOR UPDATE SKIP LOCKED, lease rows
 *   fair.c     fair locks: a queue table in front of each mode's grant
 *   sem.c      semaphores and permit-expirable semaphores: a count row and
 *              permit rows with leases on the server's clock
 *   dns.c      host names resolved by the connect deadline
 *   ops.c      engine_ops: the server's statement counts (baton bench)
 *   pqdl.c     libpq, loaded with dlopen on the first open (pqdl.h)
 *
 * Layout and rules: docs/postgres-engine.md.
 */
#ifndef BATON_PG_INT_H
#define BATON_PG_INT_H

#include "baton/sys/backend.h"

#include "pqdl.h" /* libpq, through the table loaded on the first open */
#include <pthread.h>
#include <stdint.h>

enum { PG_SESSION, PG_LEASE, PG_ROW };

/* The statements of a lock cycle, prepared once per connection (pg.c). */
enum { PG_PS_GRANT_WAIT, PG_PS_GRANT_TRY, PG_PS_UNLOCK,   /* session mode */
       PG_PS_CLAIM, PG_PS_RELEASE, PG_PS_RENEW,           /* lease mode */
       PG_PS_N };

/* The advisory key that serialises our DDL in a database (an xact lock:
 * held until the COMMIT), whatever the table's name: the first 8 bytes of
 * SHA-256("baton:ddl"), as session mode derives its keys. */
#define PG_DDL_KEY "6914268082749482822"

#define PG_POOL_IDLE 4
#define PG_WAIT_GRACE_NS 500000000LL /* = CANCEL_GRACE_MS: a lock wait may end this long after its deadline */       /* idle connections a client keeps for reuse */

/* What a NOTIFY is about: the channel of the lock table, or of one of the
 * tables of coord.c. */
enum { PG_CH_LOCK, PG_CH_VALUE, PG_CH_GROUP, PG_CH_QUEUE,
       PG_CH_FAIR, PG_CH_SEM, PG_CH_PERMIT, /* fair.c, sem.c */
       PG_CH_N };

/* A blocked call (a lease-mode acquire, a watch, a take), woken by a NOTIFY
 * for its name on the channel of its kind. */
typedef struct pgwait {
    int kind;                /* PG_CH_* */
    const char *name;
    baton_waiter *w;
    struct pgwait *next;
} pgwait;

typedef struct pgeng {
    pthread_mutex_t mu;
    int mode;                /* PG_SESSION or PG_LEASE */
    const char **kw, **val;  /* libpq connection keywords, NULL-terminated */
    size_t nkw;
    char **hname, **hport;   /* the URI's hosts and ports, for dns.c */
    size_t nhost;
    int resolve;             /* some host is a name: resolved by us, with a deadline */
    int connect_timeout_ms;
    int io_timeout_ms;
    int no_prepare;          /* ?prepare=0: statements sent as text every time */
    char *schema, *table;    /* as given (schema NULL = the search_path's) */
    char *qtable;            /* quoted, qualified: "schema"."table" */
    char *qseq;              /* row mode's fence sequence: "schema"."table_fence" */
    char *channel;           /* NOTIFY channel of this table (lease mode) */
    /* coord.c: [PG_CH_VALUE..PG_CH_QUEUE] the tables "<table>_value",
     * "_group", "_queue" (quoted, qualified) and their channels */
    char *ctable[PG_CH_N], *cchannel[PG_CH_N];
    char *qitemseq;          /* the queue table's id sequence (fences too), once known */
    char *ident;             /* identity() */
    char *ps_sql[PG_PS_N];   /* the text of each prepared statement */
    /* guarded by mu */
    PGconn *idle[PG_POOL_IDLE];
    int nidle;
    int table_ok;            /* the table exists and has our shape */
    int ctable_ok[PG_CH_N];  /* coord.c's tables likewise */
    int ops_src;             /* engine_ops' source, once known (ops.c) */
    pgwait *waits;
    int listening;           /* the listener's LISTEN is in effect */
    int stop;
    pthread_t thr;
    int thr_started;
    int wake[2];             /* self-pipe: stops the listener */
    /* session mode's watcher of held connections (watch.c); guarded by mu */
    baton_host *host;
    struct pgwatch *wl;
    size_t wn, wcap;
    int wpipe[2];            /* self-pipe: the watch list changed, or stop */
    pthread_t wthr;
    int wthr_started;
} pgeng;

enum { PG_LOCK, PG_READ, PG_WRITE, PG_MEMBER, PG_TAKER };

/* The two sides of a read-write lock share one connection (one session):
 * the holder of the write side takes the read side on the same session
 * (a downgrade), which PostgreSQL grants at once. */
typedef struct pgrw {
    pthread_mutex_t mu;      /* one statement at a time on conn (a side's keeper check vs the other side) */
    PGconn *conn;            /* while either side is held */
    int held[2];             /* [0] read side, [1] write side */
    int refs;                /* lock states still using it */
    struct pglock *side[2];  /* the read and write sides (watch entries to drop with conn) */
} pgrw;

/* One lock state. */
typedef struct pglock {
    pgeng *e;
    int kind;                /* PG_LOCK, PG_READ or PG_WRITE */
    pgrw *rw;                /* PG_READ and PG_WRITE: the pair */
    char *name;
    char key[24];            /* the advisory key, decimal (int8) */
    char classid[16], objid[16]; /* its halves as pg_locks shows them */
    PGconn *conn;            /* session and row modes: the connection holding the lock */
    uint32_t lease_ms;       /* the lock's lease: a held connection is confirmed alive this often */
    uint64_t fence;          /* of the current grant, 0 when none */
    int fair;                /* acquired as a fair lock (fair.c): a release wakes the queue */
    /* PG_MEMBER: name is the group, mid the member id. PG_TAKER: name is
     * the queue; item, data and dlen the item held (item 0: none). */
    char *mid;
    long long item;
    char *data;
    size_t dlen;
} pglock;

/* ---- pg.c ---------------------------------------------------------------- */

int64_t pg_deadline_ms(int ms);
/* A connection from the pool, or a new one (within the connect timeout).
 * BATON_EUNAVAILABLE, BATON_EAUTH. */
int pg_conn_get(pgeng *e, PGconn **out);
/* pg_conn_get, connected by BY (monotonic ns) at the latest too. */
int pg_conn_get_by(pgeng *e, int64_t by, PGconn **out);
/* Gives C up without waiting on it: its socket is shut down (nothing on it
 * can block any more) and libpq marks it bad; PQfinish it (or pg_conn_put,
 * which closes it). */
void pg_conn_drop(PGconn *c);
/* Back to the pool when it is healthy and idle, else closed. NULL is fine. */
void pg_conn_put(pgeng *e, PGconn *c);
/* Runs SQL (text parameters) on C. Never returns later than DEADLINE
 * (monotonic ns, INT64_MAX = no limit) plus, for a lock wait, a grace:
 *  - without W, the statement only waits for the server: at DEADLINE the
 *    connection is dropped (pg_conn_drop) and the answer is
 *    BATON_EUNAVAILABLE;
 *  - with W, it is a lock wait that stops at DEADLINE or when W is
 *    cancelled: the statement is cancelled on the server (PQcancel, on a
 *    thread of its own) and BATON_ETIMEDOUT or BATON_ECANCELED returned once
 *    the server confirms, or CANCEL_GRACE_MS (500) later with the
 *    connection dropped.
 * 0 with *res (free it with PQclear); BATON_EUNAVAILABLE when the
 * connection broke or the server does not answer (C is then unusable:
 * pg_conn_put closes it); or the server's error as a baton code. */
int pg_exec(pgeng *e, PGconn *c, const char *sql, int n, const char *const *params, int64_t deadline,
            baton_waiter *w, PGresult **res);
/* pg_exec of the prepared statement ID (e->ps_sql[ID]), prepared on C
 * first if it is not yet. */
int pg_exec_ps(pgeng *e, PGconn *c, int id, int n, const char *const *params, int64_t deadline, baton_waiter *w,
               PGresult **res);
/* pg_run of the prepared statement ID. */
int pg_run_ps(pgeng *e, int id, int n, const char *const *params, int retry, PGresult **res);
/* pg_run_ps that also ends by BY (monotonic ns; INT64_MAX = the I/O timeout
 * alone), connecting included; not retried unless BY is INT64_MAX. */
int pg_run_ps_by(pgeng *e, int id, int n, const char *const *params, int retry, int64_t by, PGresult **res);
/* pg_exec on a pooled connection within the I/O timeout; RETRY = the
 * statement may run twice (tried again once on a fresh connection when a
 * pooled one turns out to be dead). */
int pg_run(pgeng *e, const char *sql, int n, const char *const *params, int retry, PGresult **res);
/* pg_run that also ends by BY (monotonic ns; INT64_MAX = the I/O timeout
 * alone), connecting included; not retried unless BY is INT64_MAX. */
int pg_run_by(pgeng *e, const char *sql, int n, const char *const *params, int retry, int64_t by, PGresult **res);
/* The table exists (created when missing) and has the columns we use:
 * BATON_EPROTO naming a wrong column, BATON_EAUTH with the DDL to run when
 * we may not create it. Checked once per client. */
int pg_table_ready(pgeng *e);
/* A statement's text with every "@T" replaced by the quoted table name
 * (malloc'd; NULL when out of memory). */
char *pg_sql(pgeng *e, const char *tmpl);
/* A result's error (or the connection's) as a baton code, with the message. */
int pg_err(PGresult *r, PGconn *c, const char *what);

/* ---- dns.c ----------------------------------------------------------------- */

/* 1 when H needs no resolving (an address, a unix socket directory, ""). */
int pg_host_numeric(const char *h);
/* The addresses of NAME (malloc'd strings in a malloc'd array), resolved by
 * DEADLINE (monotonic ns) at the latest: BATON_EUNAVAILABLE after it. */
int pg_resolve(const char *name, int64_t deadline, char ***addrs, size_t *n);

/* ---- session.c / lease.c ------------------------------------------------- */

/* The granting statement: the advisory lock (SHARED or exclusive; a try,
 * or a WAIT) and, when granted, the name's row upserted with fence + 1;
 * parameters name, key, owner hex, holder; returns the fence, or no row. */
char *pg_grant_sql(pgeng *e, int shared, int wait);
/* The text of prepared statement ID (malloc'd), from session.c or lease.c. */
char *pg_session_stmt(pgeng *e, int id);
char *pg_lease_stmt(pgeng *e, int id);
int pg_session_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_session_release(pgeng *e, pglock *l);
int pg_session_renew(pgeng *e, pglock *l, int64_t deadline_ns);
/* The read or write side of a read-write lock (session mode). */
int pg_rw_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_rw_release(pgeng *e, pglock *l);
int pg_rw_renew(pgeng *e, pglock *l, int64_t deadline_ns);
/* A side freed while the server may still hold it (a grant reported lost). */
void pg_rw_drop(pglock *l);

int pg_row_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_row_release(pgeng *e, pglock *l);
int pg_row_renew(pgeng *e, pglock *l, int64_t deadline_ns);
int pg_row_info(pgeng *e, const char *name, baton_lockinfo *out);

int pg_lease_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_lease_release(pgeng *e, pglock *l, const baton_owner *owner);
int pg_lease_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
/* Stops the listener thread (close). */
void pg_listener_stop(pgeng *e);
/* W joins the waiters the listener wakes (the listener started first when
 * it is not running); unlink takes it out again. */
int pg_wait_link(pgeng *e, pgwait *w);
void pg_wait_unlink(pgeng *e, pgwait *w);
/* 1 while the listener's LISTEN is in effect. */
int pg_listening(pgeng *e);

/* ---- watch.c: held connections (session, row, read-write) --------------- */

/* After a grant (L->fence set) on CONN, confirmed alive at CONFIRMED_NS
 * (when the granting statement was sent, or answered): its socket is
 * watched, the server ending the session reports the grant lost at once,
 * and so does a connection not confirmed again within L's lease. */
void pg_watch_add(pgeng *e, pglock *l, PGconn *conn, int64_t confirmed_ns);
/* Before L's connection is closed or pooled. */
void pg_watch_del(pgeng *e, pglock *l);
/* Around any statement on a watched CONN (every entry of it): BUSY 1
 * before, 0 after; CONFIRMED_NS (0 = none) when the statement, sent then,
 * was answered: the connection is alive. */
void pg_watch_busy(pgeng *e, PGconn *conn, int busy, int64_t confirmed_ns);
void pg_watch_attach(void *eng, baton_host *h);
/* At close, after pg_listener_stop. */
void pg_watch_stop(pgeng *e);

/* The advisory key of NAME into L's key, classid and objid (pg.c). */
void pg_name_key(const char *name, pglock *l);

/* ---- coord.c, value.c, group.c, queue.c ----------------------------------- */

/* Names the tables and channels of coord.c (configure, at open). */
int pg_coord_configure(pgeng *e);
/* An identifier, double-quoted for SQL (malloc'd; NULL when out of memory). */
char *pg_quote_ident(const char *s);
/* The table of kind K (PG_CH_VALUE...) exists (created under the DDL lock
 * when missing) and has the columns we use; checked once per client. */
int pg_coord_ready(pgeng *e, int k);
/* A coord.c statement's text: "@V", "@G", "@Q" replaced by the tables
 * (malloc'd; NULL when out of memory). */
char *pg_coord_sql(pgeng *e, const char *tmpl);
/* pg_run of a coord.c statement template. */
int pg_coord_run(pgeng *e, const char *tmpl, int n, const char *const *p, int retry, int64_t by, PGresult **res);
/* LEN bytes as bytea's hex input ("\x..."), malloc'd; and hex text (as
 * encode(x, 'hex') gives it) back into malloc'd, NUL-terminated bytes. */
char *pg_hex_encode(const void *data, size_t len);
int pg_hex_decode(const char *hex, char **out, size_t *len);
void pg_coord_free(pgeng *e);

extern const baton_value_methods pg_value_methods;
extern const baton_group_methods pg_group_methods;
extern const baton_queue_methods pg_queue_methods;
/* The lock methods for member and taker states (group.c, queue.c). */
int pg_member_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_member_release(pgeng *e, pglock *l, const baton_owner *owner);
int pg_member_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
int pg_taker_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
int pg_taker_release(pgeng *e, pglock *l, const baton_owner *owner);
int pg_taker_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);

/* ---- fair.c, sem.c ------------------------------------------------------------ */

/* A fair acquire (req->fair) of a plain lock, in any mode. */
int pg_fair_acquire(pgeng *e, pglock *l, baton_acquire_req *req);
/* After a fair lock's release in session and row modes: wakes the queue. */
void pg_fair_released(pgeng *e, pglock *l);
/* A fair queue's entry that still counts: its backend lives and its lease
 * is not over (F: the entry's alias). */
#define PG_FAIR_LIVE(f) "(" f ".lease_until > clock_timestamp() AND EXISTS (SELECT 1 FROM pg_stat_activity a " \
                        "WHERE a.pid = " f ".pid))"
/* lock_info's extras: OUT's permits (the semaphore's signed count) and
 * queue_length (live fair waiters), where those tables exist. */
int pg_prims_info(pgeng *e, const char *name, baton_lockinfo *out);
extern const baton_sem_methods pg_sem_methods;
extern const baton_permits_methods pg_permits_methods;

/* ---- admin.c: baton list, baton unlock --force ---------------------------- */

int pg_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
int pg_lock_break(void *eng, const char *name, uint64_t *fence);

/* ---- ops.c ------------------------------------------------------------------ */

int pg_engine_ops(void *eng, void (*fn)(void *arg, const char *op, uint64_t count), void *arg);

#endif
