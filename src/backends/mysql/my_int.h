/*
 * Internal declarations shared by the MySQL/MariaDB backend modules:
 *   my.c       URI/options, connecting (Connector/C), the connection pool,
 *              running a statement, the watchdog that stops waits (deadline,
 *              cancel) with KILL QUERY, errors, the table, identity,
 *              describe, engine_ops and the backend table
 *   session.c  session mode: GET_LOCK on the lock's own connection
 *   row.c      row mode: the name's row locked by a transaction kept open
 *   lease.c    lease mode: a conditional upsert on the server's clock
 *   group.c    group members: rows with a lease on the server's clock (every mode)
 *   value.c    values: a row with a version and a tombstone (every mode)
 *   queue.c    work queues: item rows taken with FOR UPDATE SKIP LOCKED (every mode)
 *   rw.c       read-write locks: holder rows with leases (every mode)
 *   sem.c      semaphores and permits: a count row, permit rows with leases (every mode)
 *   fair.c     fair locks: a queue table in front of the mode's own lock (every mode)
 *   aux.c      the tables beside the lock table; local wake-ups of watchers; polled waits
 *   watch.c    the watcher thread: held connections the server ends (KILL,
 *              shutdown) are reported lost at once; statements past their
 *              deadline have their socket shut down
 *   mydl.c     Connector/C, loaded with dlopen on the first open (mydl.h)
 *
 * Layout and rules: docs/mysql-engine.md.
 */
#ifndef BATON_MY_INT_H
#define BATON_MY_INT_H

#include "baton/sys/backend.h"

#include "mydl.h" /* Connector/C, through the table loaded on the first open */
#include <pthread.h>
#include <stdint.h>

enum { MY_SESSION, MY_LEASE, MY_ROW };

/* What a lock state is (the lock methods drive all three). */
enum { MY_KIND_LOCK, MY_KIND_MEMBER, MY_KIND_TAKER, MY_KIND_READ, MY_KIND_WRITE };

/* The tables beside the lock table: <table>_value, _group, _queue, _rw,
 * _sem, _perm, _fair (my_sql's @V @G @Q @R @N @P @F). */
enum { MY_AUX_VALUE, MY_AUX_GROUP, MY_AUX_QUEUE, MY_AUX_RW, MY_AUX_SEM, MY_AUX_PERM, MY_AUX_FAIR, MY_AUX_N };

#define MY_POLL_MS 250       /* a value or group watch re-reads at least this often */

/* A watcher or queue waiter parked in this client: a change made by this
 * client wakes it at once (others' changes are seen by polling). */
typedef struct mypark {
    baton_waiter *w;
    struct mypark *next;
} mypark;

#define MY_POOL_IDLE 4       /* idle connections a client keeps for reuse */
#define MY_FRESH_MS 100      /* my_run trusts a connection pooled this recently (no liveness poll) */

/* One statement's deadline, enforced by the watcher (registered by my_exec_dl). */
typedef struct myguard {
    int fd;                  /* the statement's socket */
    int64_t deadline_ns;     /* shut down at this time */
    int cut;                 /* it was */
    struct myguard *next;
} myguard;

/* One waiting statement the watchdog looks after (registered by my_wait). */
typedef struct myrun {
    unsigned long thread_id; /* the server's connection id of the statement's connection */
    int64_t deadline_ns;     /* KILL QUERY at this time (INT64_MAX = never) */
    baton_waiter *w;         /* ... or when this is cancelled (may be NULL) */
    int why;                 /* 0, or BATON_ETIMEDOUT / BATON_ECANCELED once the KILL was decided */
    int kill_pending;        /* the watchdog is sending the KILL */
    myguard *guard;          /* the statement's deadline (moved up at a cancel) */
    struct myrun *next;
} myrun;

struct mywatch;

typedef struct myeng {
    pthread_mutex_t mu;
    int mode;                /* MY_SESSION, MY_ROW or MY_LEASE */
    char *host, *user, *password, *db, *unix_socket;
    int port;
    char *ssl_ca, *ssl_cert, *ssl_key, *ssl_capath, *ssl_cipher;
    int ssl_enforce, ssl_verify;
    int connect_timeout_ms;
    int io_timeout_ms;
    int read_timeout_s;      /* the socket timeout of every connection (I/O timeout + 1 s) */
    int chunk_s;             /* a wait is one statement of at most this long (< read_timeout_s) */
    char *table;             /* as given */
    char *qtable;            /* quoted: `table` (in the URI's database) */
    char *seq;               /* row mode's fence sequence, unquoted: <table>_fence */
    char *qseq;              /* quoted */
    char *qaux[MY_AUX_N];    /* quoted `<table>_value`, `<table>_group`, `<table>_queue` */
    char *ident;             /* identity() */
    char server[96];         /* "10.11.19-MariaDB at host:port" (describe) */
    /* guarded by mu */
    MYSQL *idle[MY_POOL_IDLE];
    int64_t idle_at[MY_POOL_IDLE]; /* when each went back to the pool */
    int nidle;
    int table_ok;            /* the table exists and has our shape */
    int aux_ok[MY_AUX_N];    /* ... and each of the others, once used */
    mypark *parked;          /* watchers and queue waiters of this client */
    myrun *runs;             /* waits under watch */
    int stop;
    int wd_started;
    int64_t wd_next;         /* when the watchdog looks at the runs next (0: it is looking now;
                              * INT64_MAX: not before it is signalled) */
    int64_t wd_last;         /* when the last wait was registered */
    pthread_t wd;
    pthread_cond_t wd_cv;    /* a new run, or stop */
    pthread_cond_t kill_cv;  /* a KILL was sent */
    MYSQL *killer;           /* the watchdog's own connection (only the watchdog uses it) */
    /* the watcher (watch.c); guarded by mu */
    baton_host *bhost;       /* attach(): where losses are reported */
    struct mywatch *wl;      /* held connections */
    size_t wn, wcap;
    myguard *guards;         /* statements under way, with their deadlines */
    int wpipe[2];            /* self-pipe: an earlier deadline, or stop */
    int wthr_started;
    int64_t w_next;          /* when the watcher looks next (INT64_MAX: not running) */
    pthread_t wthr;
} myeng;

/* One lock state. */
typedef struct mylock {
    myeng *e;
    char *name;              /* as given */
    char *esc;               /* name, escaped for a string literal */
    char key[72];            /* GET_LOCK name: the name, or "sha256:" + base64url of its SHA-256 */
    char *ekey;              /* key, escaped */
    MYSQL *conn;             /* session and row modes: the connection holding the lock */
    uint64_t fence;          /* of the current grant, 0 when none */
    int kind;                /* MY_KIND_* */
    /* members: name and esc are the group's; takers: the queue's */
    char *eid;               /* members: the member id, escaped; takers: the queue's fence row's name */
    uint64_t item_id;        /* takers: the item held, 0 when none */
    char *item;              /* its bytes (NUL-terminated) */
    size_t item_len;
    int fair;                /* plain locks: FIFO (fair.c) */
} mylock;

/* A queue handle. */
typedef struct myqueue {
    myeng *e;
    char *name;
    char *esc;               /* name, escaped */
    char *efence;            /* the value row that counts its takes, escaped */
} myqueue;

/* ---- my.c ----------------------------------------------------------------- */

int64_t my_deadline_ms(int ms);
/* A connection from the pool, or a new one. BATON_EUNAVAILABLE, BATON_EAUTH. */
int my_conn_get(myeng *e, MYSQL **out);
/* Back to the pool when healthy and not in a transaction, else closed. NULL is fine. */
void my_conn_put(myeng *e, MYSQL *c);
void my_conn_close(MYSQL *c);
/* 1 when C is in a transaction (or its status cannot be read). */
int in_trans_or_lost(MYSQL *c);
/* Runs SQL on C (bounded by the connection's socket timeout). 0 with *res
 * (NULL for statements without a result set; free it with
 * mysql_free_result), or the server's or the connection's error as a
 * baton code (my_err). */
int my_exec(myeng *e, MYSQL *c, const char *sql, MYSQL_RES **res);
/* my_exec for a statement that waits on the server (GET_LOCK, a row lock):
 * the watchdog KILLs the statement (KILL QUERY) when DEADLINE passes or W
 * is cancelled; then BATON_ETIMEDOUT or BATON_ECANCELED, unless the
 * statement had succeeded first (0: look at its result). */
int my_wait(myeng *e, MYSQL *c, const char *sql, int64_t deadline, baton_waiter *w, MYSQL_RES **res);
/* my_exec on a pooled connection; RETRY = the statement may run twice
 * (tried again once on a fresh connection when a pooled one is dead; the
 * first try then takes a connection pooled less than MY_FRESH_MS ago
 * without the liveness poll). */
int my_run(myeng *e, const char *sql, int retry, MYSQL_RES **res, uint64_t *affected, uint64_t *insert_id);
/* The connection's last error as a baton code, with the message. */
int my_err(MYSQL *c, const char *what);
/* The table exists (created when missing) and has the columns we use. */
int my_table_ready(myeng *e);
/* A statement from a printf format, with every "@T" replaced by the quoted
 * table and "@S" by the quoted sequence (malloc'd; NULL when out of memory). */
char *my_sql(myeng *e, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* S escaped for a string literal in quotes (malloc'd). */
char *my_escape(const char *s);
/* N bytes of P as a hex literal (malloc'd). */
char *my_escape_n(const void *p, size_t n);
/* The first column of the first row, as text (NULL when SQL NULL or no row). */
const char *my_cell(MYSQL_RES *r, int col);

/* my_exec bounded by DEADLINE (monotonic ns): a statement still running
 * then has its connection cut (the watcher shuts its socket down) and
 * answers BATON_EUNAVAILABLE; the caller closes the connection. */
int my_exec_dl(myeng *e, MYSQL *c, const char *sql, MYSQL_RES **res, int64_t deadline);
/* my_run bounded by DEADLINE (connecting included). */
int my_run_dl(myeng *e, const char *sql, int retry, MYSQL_RES **res, uint64_t *affected, uint64_t *insert_id,
              int64_t deadline);

/* The GET_LOCK name of NAME: the name, or "sha256:" + base64url of its SHA-256. */
void my_name_key(const char *name, char key[72]);

/* ---- admin.c: baton list, baton unlock --force ------------------------------ */

int my_admin_list(myeng *e, const char *prefix, int (*fn)(void *arg, const char *name), void *arg);
/* L: a lock state of the name (not held by this client). */
int my_admin_break(myeng *e, mylock *l, uint64_t *fence);

/* ---- aux.c: the tables of values, groups and queues ------------------------ */

/* The table WHICH (MY_AUX_*) exists (created when missing) and has the columns we use. */
int my_aux_ready(myeng *e, int which);
/* W is woken by this client's own changes (my_wake_local) from enter to
 * leave: enter before the first read of a wait (a change between the read
 * and baton_waiter_park bumps W's generation), leave before returning. */
void my_park_enter(myeng *e, mypark *p, baton_waiter *w);
void my_park_leave(myeng *e, mypark *p);
/* After a change this client made: every parked watcher and waiter looks again. */
void my_wake_local(myeng *e);
/* The statement deadline of one step of a wait that ends at DEADLINE (0 = a try). */
int64_t my_step_deadline(myeng *e, int64_t deadline);
/* A wait by polling: TRY(ARG, SENT, DL) once (DL: its statements' deadline,
 * SENT: when it started), again after a jittered backoff of 20 ms doubling
 * to MY_POLL_MS while it answers BATON_ELOCKED (or BATON_EUNAVAILABLE: a
 * server away), at once after a change through this client; until DEADLINE
 * (0 = one try; BATON_ETIMEDOUT) or W's cancel (BATON_ECANCELED). WHAT
 * names the thing waited for in those errors. */
int my_poll_wait(myeng *e, baton_waiter *w, int64_t deadline, const char *what,
                 int (*try)(void *arg, int64_t sent, int64_t dl), void *arg);
/* The escaped name of a hidden row of the value table for TAG and NAME: NUL +
 * TAG + ":" + NAME (no value can have it: value names are C strings), or NUL
 * + TAG + "#" + the base64url SHA-256 of NAME when that would not fit the
 * 1024 bytes of the name column. Malloc'd. */
char *my_tag_row(const char *tag, const char *name);

/* ---- group.c, queue.c: members and takers, driven by the lock methods --------- */

int my_member_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_member_release(myeng *e, mylock *l, const baton_owner *owner);
int my_member_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
int my_taker_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_taker_release(myeng *e, mylock *l, const baton_owner *owner);
int my_taker_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
/* Frees what a member or taker state has beyond a lock's. */
void my_coord_free(mylock *l);

extern const baton_group_methods my_group_methods;
extern const baton_value_methods my_value_methods;
extern const baton_queue_methods my_queue_methods;

/* ---- rw.c, fair.c, sem.c ---------------------------------------------------- */

extern const baton_rw_methods my_rw_methods;
extern const baton_sem_methods my_sem_methods;
extern const baton_permits_methods my_permits_methods;
int my_rw_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_rw_release(myeng *e, mylock *l, const baton_owner *owner);
int my_rw_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
/* lock info: a live read or write side of NAME fills OUT (held stays 0 when none). */
int my_rw_info(myeng *e, mylock *l, baton_lockinfo *out);
/* force_unlock, after the mode's own: every read and write holder of L's
 * name is gone, and *FENCE (in: the mode's new fence) raised above every
 * read-write fence of the name, where the next grant of either kind starts
 * from; *HELD set when a holder was there. Nothing when the name never was
 * a read-write lock. */
int my_rw_break(myeng *e, mylock *l, uint64_t *fence, int *held);
/* lock info: the signed count of the semaphore of L's name, when there is one. */
int my_sem_info(myeng *e, const char *esc, baton_lockinfo *out);
/* A fair lock: the mode's own acquire, taken in the order of <table>_fair. */
int my_fair_acquire(myeng *e, mylock *l, baton_acquire_req *req);

/* ---- watch.c ---------------------------------------------------------------- */

/* A statement on socket FD must end by DEADLINE_NS: registered (the watcher
 * is started when needed), 0 or BATON_EIO. */
int my_guard_add(myeng *e, myguard *g, int fd, int64_t deadline_ns);
/* e->mu held: G is cut at DEADLINE_NS already, if that is sooner. */
void my_guard_sooner(myeng *e, myguard *g, int64_t deadline_ns);
/* Unregistered; 1 when the watcher had cut it. */
int my_guard_del(myeng *e, myguard *g);
/* After a grant (L->conn, L->fence set): the connection is watched, and the
 * server ending it is reported as the loss of that grant. */
void my_watch_add(myeng *e, mylock *l);
/* Before L->conn is used for anything else, given back or closed, and
 * before L is freed. */
void my_watch_del(myeng *e, mylock *l);
/* Around a statement on L->conn (the keeper's check). */
void my_watch_busy(myeng *e, mylock *l, int busy);
void my_watch_attach(void *eng, baton_host *h);
/* At close: the thread ends. */
void my_watch_stop(myeng *e);

/* ---- modes ---------------------------------------------------------------- */

int my_session_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_session_release(myeng *e, mylock *l);
int my_session_renew(myeng *e, mylock *l, int64_t deadline_ns);
int my_session_info(myeng *e, mylock *l, baton_lockinfo *out);

int my_row_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_row_release(myeng *e, mylock *l);
int my_row_renew(myeng *e, mylock *l, int64_t deadline_ns);
int my_row_info(myeng *e, mylock *l, baton_lockinfo *out);

int my_lease_acquire(myeng *e, mylock *l, baton_acquire_req *req);
int my_lease_release(myeng *e, mylock *l, const baton_owner *owner);
int my_lease_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns);
int my_lease_info(myeng *e, mylock *l, baton_lockinfo *out);

#endif
