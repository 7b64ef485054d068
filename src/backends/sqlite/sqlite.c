/*
 * The SQLite backend: a lease table in one database file, for processes of
 * one host. URI and options, opening the file (with clear errors for a
 * missing directory, a file we may not write, a file that is not a
 * database), the connection pool, the busy handler that bounds every wait
 * for the write lock, errors, the table, lock_info, identity, describe and
 * the backend table. The lease itself lives in lease.c, the same-host
 * wake-up in wake.c.
 *
 * URI: sqlite:///abs/path/to/file.db or sqlite://localhost/abs/path/to/file.db
 * Options: table (default baton_locks), busy_timeout_ms (default 5000),
 * recheck_ms (default 1000), mode (lease, the only one).
 *
 * Capabilities: LEASE (the core renews), INFO, NOTIFY (a release wakes
 * waiters through the sidecar file, see wake.c), FAIR and read-write locks
 * (fairrw.c), SEM, PERMITS and LATCH (permits.c), values, groups and queues
 * (coord.c).
 */
#include "sq_int.h"
#include "core/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TABLE "baton_locks"

#define DDL "CREATE TABLE IF NOT EXISTS @T (name TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL DEFAULT 0, " \
            "owner TEXT, holder TEXT, lease_until INTEGER, boot TEXT, acquired_at INTEGER)"

int64_t sq_boot_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- connections ----------------------------------------------------------- */

/* SQLite calls this while another connection holds the lock we need. Short
 * sleeps (1, 2, 4 .. 16 ms): the writers we wait for are short transactions,
 * and a long foreign one is bounded by the deadline instead. 0 = give up
 * (the statement answers SQLITE_BUSY). */
static int busy_handler(void *arg, int n)
{
    sqconn *c = arg;
    int64_t now = baton_now_ns(), ms = n < 4 ? 1 << n : 16;
    struct timespec ts;

    if (c->w && baton_waiter_canceled(c->w)) return 0;
    if (now >= c->deadline) return 0;
    if (ms * 1000000LL > c->deadline - now) ms = (c->deadline - now) / 1000000 + 1;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
    return 1;
}

void sq_conn_arm(sqconn *c, int64_t deadline, baton_waiter *w)
{
    c->deadline = deadline;
    c->w = w;
}

static void conn_close(sqconn *c)
{
    if (!c) return;
    sqlite3_close_v2(c->db);
    free(c);
}

int sq_err(sqeng *e, sqconn *c, int rc, const char *what)
{
    const char *m = c && c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
    int sys = c && c->db ? sqlite3_system_errno(c->db) : 0;

    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return baton_seterr(BATON_EUNAVAILABLE, rc, "sqlite: %s: database %s is locked by another transaction "
                            "(waited busy_timeout_ms or the deadline)", what, e->path);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
        return baton_seterr(BATON_EPROTO, rc, "sqlite: %s: %s is not a usable SQLite database (%s)", what, e->path, m);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return baton_seterr(BATON_EAUTH, rc, "sqlite: %s: %s: may not write (%s)", what, e->path, m);
    case SQLITE_CANTOPEN:
        if (sys == EACCES || sys == EPERM)
            return baton_seterr(BATON_EAUTH, rc, "sqlite: %s: %s: permission denied (%s)", what, e->path, m);
        return baton_seterr(BATON_EUNAVAILABLE, rc, "sqlite: %s: cannot open %s (%s)", what, e->path, m);
    case SQLITE_NOMEM:
        return baton_seterr(BATON_ENOMEM, rc, "out of memory");
    case SQLITE_ERROR:
        /* our statements are fixed: an SQL error means tables of another
         * shape (a column missing from the _sem or _permit table) */
        return baton_seterr(BATON_EPROTO, rc, "sqlite: %s: %s: %s (docs/sqlite-engine.md has the DDL)", what,
                            e->path, m);
    case SQLITE_IOERR:
    case SQLITE_FULL:
        return baton_seterr(BATON_EIO, rc, "sqlite: %s: %s: %s", what, e->path, m);
    default:
        return baton_seterr(BATON_EIO, rc, "sqlite: %s: %s: %s (code %d)", what, e->path, m, rc);
    }
}

int sq_exec(sqeng *e, sqconn *c, const char *sql, const char *what)
{
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : sq_err(e, c, rc, what);
}

int sq_exec_ddl(sqeng *e, sqconn *c, const char *sql, const char *what)
{
    int rc;
    /* Several processes creating a table in one fresh file at once: a
     * create that meets another's commit between its read and its write
     * answers SQLITE_BUSY(_SNAPSHOT) at once, without the busy handler (its
     * snapshot is stale: waiting cannot help); the next try finds the table
     * (IF NOT EXISTS). Until the connection's busy deadline. */
    for (int n = 0;; n++) {
        rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
        if (((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) || !busy_handler(c, n)) break;
    }
    return rc == SQLITE_OK ? 0 : sq_err(e, c, rc, what);
}

int sq_begin(sqeng *e, sqconn *c, baton_waiter *w, const char *what)
{
    int rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc == SQLITE_OK) return 0;
    if (w && baton_waiter_canceled(w)) return baton_seterr(BATON_ECANCELED, 0, "sqlite: %s: canceled", what);
    return sq_err(e, c, rc, what);
}

int64_t sq_busy_deadline(sqeng *e, int64_t deadline)
{
    int64_t b = baton_now_ns() + (int64_t)e->busy_timeout_ms * 1000000LL;
    return deadline > 0 && deadline < b ? deadline : b;
}

/* "@T" the lock table, "@S" the semaphores' counts (<table>_sem), "@P" the
 * permits (<table>_permit), "@L" the latches (<table>_latch), "@V" the
 * values, "@G" the members, "@Q" the queues' items, "@F" their fences and
 * "@I" the items' index (coord.c). At most 7 bytes each (sq_sql). */
static const char *sql_suffix(char c)
{
    switch (c) {
    case 'T': return "";
    case 'S': return "_sem";
    case 'P': return "_permit";
    case 'L': return "_latch";
    case 'V': return "_value";
    case 'G': return "_member";
    case 'Q': return "_queue";
    case 'F': return "_qfence";
    case 'I': return "_qseq";
    case 'W': return "_waiter";   /* fair locks' line (fairrw.c) */
    case 'Y': return "_wseq";
    case 'X': return "_rw";       /* read-write locks (fairrw.c) */
    default: return NULL;
    }
}

char *sq_sql(sqeng *e, const char *tmpl)
{
    size_t n = 1, tl = strlen(e->table) + 2 + 7;
    char *out, *o;
    for (const char *p = tmpl; *p; p++) n += (p[0] == '@' && p[1] && sql_suffix(p[1])) ? tl : 1;
    if (!(out = malloc(n))) return NULL;
    o = out;
    for (const char *p = tmpl; *p; p++) {
        if (p[0] == '@' && p[1] && sql_suffix(p[1])) {
            /* the table name is a checked identifier: quoting cannot break */
            o += sprintf(o, "\"%s%s\"", e->table, sql_suffix(p[1]));
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
    return out;
}

int sq_prepare(sqeng *e, sqconn *c, const char *tmpl, sqlite3_stmt **st)
{
    char *sql = sq_sql(e, tmpl);
    int rc;
    *st = NULL;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    free(sql);
    return rc == SQLITE_OK ? 0 : sq_err(e, c, rc, "prepare");
}

/* A new connection: WAL, synchronous=NORMAL, our busy handler. The first
 * read of the file happens here, so "not a database" is found at once. */
static int conn_open(sqeng *e, sqconn **out)
{
    sqconn *c = calloc(1, sizeof *c);
    sqlite3_stmt *st = NULL;
    int rc;

    *out = NULL;
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* FULLMUTEX: a connection is used by one thread at a time (the pool), but
     * the serialized mode costs little and protects us if that changes */
    rc = sqlite3_open_v2(e->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = sq_err(e, c, rc, "open");
        goto fail;
    }
    sqlite3_extended_result_codes(c->db, 0);
    sqlite3_busy_handler(c->db, busy_handler, c);
    sq_conn_arm(c, baton_now_ns() + (int64_t)e->busy_timeout_ms * 1000000LL, NULL);
    if (sqlite3_db_readonly(c->db, "main") == 1) {
        rc = baton_seterr(BATON_EAUTH, 0, "sqlite: %s: opened read-only: may not write it", e->path);
        goto fail;
    }
    /* WAL: readers (lock_info) never wait for a writer, and a commit is one
     * append. journal_mode is persistent: the first client switches the file
     * (it needs the write lock for that, hence the busy handler). SQLite
     * answers SQLITE_BUSY without calling the busy handler where waiting
     * could deadlock (a read lock to upgrade, another process switching the
     * same fresh file at once): try again until the busy deadline. */
    for (int n = 0;; n++) {
        rc = sqlite3_prepare_v2(c->db, "PRAGMA journal_mode=WAL", -1, &st, NULL);
        if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
            const unsigned char *m = sqlite3_column_text(st, 0);
            pthread_mutex_lock(&e->mu);
            snprintf(e->journal, sizeof e->journal, "%s", m ? (const char *)m : "?");
            pthread_mutex_unlock(&e->mu);
            rc = SQLITE_OK;
        }
        sqlite3_finalize(st);
        st = NULL;
        if (((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) || !busy_handler(c, n)) break;
    }
    if (rc != SQLITE_OK) {
        rc = sq_err(e, c, rc, "journal_mode=WAL");
        goto fail;
    }
    /* NORMAL in WAL mode: a commit is durable against a crash of the
     * process, and consistent (never corrupt) after a power loss, which may
     * take the last commits (docs/sqlite-engine.md) */
    if ((rc = sq_exec(e, c, "PRAGMA synchronous=NORMAL", "synchronous=NORMAL"))) goto fail;
    *out = c;
    return 0;
fail:
    conn_close(c);
    return rc;
}

int sq_conn_get(sqeng *e, sqconn **out)
{
    pthread_mutex_lock(&e->mu);
    if (e->nidle) {
        *out = e->idle[--e->nidle];
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    pthread_mutex_unlock(&e->mu);
    return conn_open(e, out);
}

void sq_conn_put(sqeng *e, sqconn *c, int broken)
{
    if (!c) return;
    sq_conn_arm(c, 0, NULL);
    /* a transaction left open (an error between BEGIN and COMMIT) must not
     * keep the write lock while the connection idles */
    if (!broken && !sqlite3_get_autocommit(c->db))
        broken = sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL) != SQLITE_OK;
    pthread_mutex_lock(&e->mu);
    if (!broken && e->nidle < SQ_POOL_IDLE) {
        e->idle[e->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    conn_close(c);
}

/* ---- the table ------------------------------------------------------------- */

static const struct {
    const char *col, *affinity;  /* SQLite's type affinity the column must have */
} shape[] = {
    { "name", "TEXT" }, { "fence", "INTEGER" }, { "owner", "TEXT" }, { "holder", "TEXT" },
    { "lease_until", "INTEGER" }, { "boot", "TEXT" }, { "acquired_at", "INTEGER" },
};

/* The affinity SQLite gives a declared type (its documented rules). */
static const char *affinity(const char *t)
{
    char u[64];
    size_t i;
    for (i = 0; t[i] && i < sizeof u - 1; i++) u[i] = (char)(t[i] >= 'a' && t[i] <= 'z' ? t[i] - 32 : t[i]);
    u[i] = 0;
    if (strstr(u, "INT")) return "INTEGER";
    if (strstr(u, "CHAR") || strstr(u, "CLOB") || strstr(u, "TEXT")) return "TEXT";
    if (!*u || strstr(u, "BLOB")) return "BLOB";
    if (strstr(u, "REAL") || strstr(u, "FLOA") || strstr(u, "DOUB")) return "REAL";
    return "NUMERIC";
}

/* Created when missing; an existing table must have our columns, with name
 * as its primary key (the claim relies on one row per name). */
static int table_ready(sqeng *e, sqconn *c)
{
    sqlite3_stmt *st = NULL;
    int rc, found[sizeof shape / sizeof shape[0]] = { 0 }, npk = 0, name_pk = 0;
    char *ddl = sq_sql(e, DDL);

    if (!ddl) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* look first: CREATE TABLE IF NOT EXISTS wants the write lock even when
     * the table is there, and a client must open while another writer
     * works (a read never waits in WAL mode) */
    if ((rc = sq_prepare(e, c, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", &st))) goto out;
    sqlite3_bind_text(st, 1, e->table, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    st = NULL;
    if (rc == SQLITE_DONE) {
        rc = sq_exec_ddl(e, c, ddl, "create the lock table");
    } else {
        rc = rc == SQLITE_ROW ? 0 : sq_err(e, c, rc, "look for the lock table");
    }
    if (rc) goto out;
    if ((rc = sq_prepare(e, c, "PRAGMA table_info(@T)", &st))) goto out;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *col = (const char *)sqlite3_column_text(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        int pk = sqlite3_column_int(st, 5);
        if (!col) continue;
        if (pk) npk++;
        if (pk && !strcmp(col, "name")) name_pk = 1;
        for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++) {
            if (strcmp(col, shape[k].col)) continue;
            found[k] = 1;
            if (strcmp(affinity(type ? type : ""), shape[k].affinity)) {
                rc = baton_seterr(BATON_EPROTO, 0, "sqlite: %s: table \"%s\": column \"%s\" is %s, expected %s "
                                  "(docs/sqlite-engine.md has the DDL)", e->path, e->table, col,
                                  type && *type ? type : "untyped", shape[k].affinity);
                goto out;
            }
        }
    }
    if (rc != SQLITE_DONE) {
        rc = sq_err(e, c, rc, "read the table's columns");
        goto out;
    }
    rc = 0;
    for (size_t k = 0; k < sizeof shape / sizeof shape[0]; k++)
        if (!found[k]) {
            rc = baton_seterr(BATON_EPROTO, 0, "sqlite: %s: table \"%s\" has no column \"%s\" (%s) "
                              "(docs/sqlite-engine.md has the DDL)", e->path, e->table, shape[k].col,
                              shape[k].affinity);
            goto out;
        }
    if (!name_pk || npk != 1)
        rc = baton_seterr(BATON_EPROTO, 0, "sqlite: %s: table \"%s\": column \"name\" must be the primary key "
                          "(docs/sqlite-engine.md has the DDL)", e->path, e->table);
out:
    sqlite3_finalize(st);
    free(ddl);
    return rc;
}

/* ---- open / close ---------------------------------------------------------- */

static int valid_ident(const char *s)
{
    if (!*s || strlen(s) > 63 || !((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_')) return 0;
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

static int configure(sqeng *e, const baton_uri *u, const baton_opts *o)
{
    const char *mode, *table;

    if (u->user || u->password || u->port || u->nhosts > 1)
        return baton_seterr(BATON_EINVAL, 0, "sqlite: the URI names a file on this host: sqlite:///abs/path.db "
                            "(no user, password or port)");
    if (u->host && *u->host && strcmp(u->host, "localhost"))
        return baton_seterr(BATON_EINVAL, 0, "sqlite: '%s' is not a path: the URI is sqlite:///abs/path.db "
                            "(an absolute path; the host may only be localhost: SQLite locks are for one host)",
                            u->host);
    if (!u->path || !*u->path)
        return baton_seterr(BATON_EINVAL, 0, "sqlite: no database file in the URI: sqlite:///abs/path.db");
    mode = baton_opts_str(o, "mode");
    table = baton_opts_str(o, "table");
    e->busy_timeout_ms = (int)baton_opts_int(o, "busy_timeout_ms");
    e->recheck_ms = (int)baton_opts_int(o, "recheck_ms");
    if (!strcmp(mode, "session") || !strcmp(mode, "row"))
        return baton_seterr(BATON_ENOTSUP, 0, "sqlite: no %s mode: SQLite has no session or row locks that "
                            "outlive one short transaction; the engine has lease mode only (?mode=lease)", mode);
    if (strcmp(mode, "lease"))
        return baton_seterr(BATON_EINVAL, 0, "sqlite: mode must be lease, not '%s'", mode);
    if (!valid_ident(table))
        return baton_seterr(BATON_EINVAL, 0, "sqlite: table must be 1 to 63 letters, digits or '_' (not starting "
                            "with a digit), not '%s'", table);
    if (!(e->table = strdup(table))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* the parser drops the path's leading '/'; the path is always absolute */
    if (!(e->path = malloc(strlen(u->path) + 2))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    sprintf(e->path, "/%s", u->path);
    if (e->path[strlen(e->path) - 1] == '/')
        return baton_seterr(BATON_EINVAL, 0, "sqlite: %s names a directory, not a database file", e->path);
    return 0;
}

/* Clear errors before SQLite's own ("unable to open database file"): the
 * directory must exist and be writable (SQLite creates the -wal and -shm
 * files next to the database), the file readable and writable. Permission
 * problems are BATON_EAUTH, as for the file engine; a missing directory is
 * BATON_EUNAVAILABLE. */
static int check_path(sqeng *e)
{
    struct stat sb;
    char *dir = strdup(e->path), *slash;
    int rc = 0;

    if (!dir) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    slash = strrchr(dir, '/');
    if (slash == dir) slash[1] = 0;
    else *slash = 0;
    if (stat(dir, &sb) != 0) {
        rc = baton_seterr(errno == EACCES ? BATON_EAUTH : BATON_EUNAVAILABLE, errno,
                          "sqlite: directory %s of the database: %s", dir, strerror(errno));
        goto out;
    }
    if (!S_ISDIR(sb.st_mode)) {
        rc = baton_seterr(BATON_EUNAVAILABLE, ENOTDIR, "sqlite: %s is not a directory", dir);
        goto out;
    }
    if (stat(e->path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            rc = baton_seterr(BATON_EUNAVAILABLE, EISDIR, "sqlite: %s is a directory, not a database file", e->path);
            goto out;
        }
        if (access(e->path, R_OK | W_OK) != 0) {
            rc = baton_seterr(BATON_EAUTH, errno, "sqlite: %s: %s (the engine writes the database)", e->path,
                              strerror(errno));
            goto out;
        }
    } else if (errno != ENOENT) {
        rc = baton_seterr(errno == EACCES ? BATON_EAUTH : BATON_EUNAVAILABLE, errno, "sqlite: %s: %s", e->path,
                          strerror(errno));
        goto out;
    }
    if (access(dir, W_OK | X_OK) != 0)
        rc = baton_seterr(BATON_EAUTH, errno, "sqlite: directory %s: %s (SQLite creates the database's -wal and "
                          "-shm files there)", dir, strerror(errno));
out:
    free(dir);
    return rc;
}

/* This boot's id: a lease row written in another boot has expired, whatever
 * its lease_until says (CLOCK_BOOTTIME starts again from zero). */
static void read_boot_id(sqeng *e)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    size_t n = 0;
    if (f) {
        n = fread(e->boot, 1, sizeof e->boot - 1, f);
        fclose(f);
    }
    e->boot[n] = 0;
    e->boot[strcspn(e->boot, "\n")] = 0;
    if (!*e->boot) {
        snprintf(e->boot, sizeof e->boot, "unknown");
        baton_log(BATON_LOG_WARN, "sqlite: no /proc/sys/kernel/random/boot_id: leases of a previous boot are "
                  "recognised by their lease_until only");
    }
}

static void eng_free(sqeng *e)
{
    for (int i = 0; i < e->nidle; i++) conn_close(e->idle[i]);
    free(e->path);
    free(e->real);
    free(e->table);
    free(e->wakepath);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int sq_open(void **eng, const baton_uri *u, const baton_opts *uo, const baton_client_options *opts)
{
    sqeng *e = calloc(1, sizeof *e);
    sqconn *c = NULL;
    char real[PATH_MAX];
    int rc;

    (void)opts;
    *eng = NULL;
    if (!e) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&e->mu, NULL);
    e->ino_fd = e->stop_pipe[0] = e->stop_pipe[1] = -1;
    if ((rc = configure(e, u, uo))) goto fail;
    if ((rc = check_path(e))) goto fail;
    read_boot_id(e);
    /* open now: a file that is not a database, a table of another shape, are
     * open errors, not surprises at the first lock */
    if ((rc = conn_open(e, &c))) goto fail;
    if ((rc = table_ready(e, c))) goto fail;
    if (!realpath(e->path, real)) snprintf(real, sizeof real, "%s", e->path);
    if (!(e->real = strdup(real)) || !(e->wakepath = malloc(strlen(real) + 16))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    sprintf(e->wakepath, "%s-baton-wake", real);
    sq_conn_put(e, c, 0);
    *eng = e;
    return 0;
fail:
    if (c) conn_close(c);
    eng_free(e);
    return rc;
}

static void sq_close(void *eng)
{
    sqeng *e = eng;
    sq_wake_stop(e);
    eng_free(e);
}

/* ---- locks ----------------------------------------------------------------- */

static int sq_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    sqlock *l;
    (void)eng;
    (void)opts;
    if (!(l = calloc(1, sizeof *l)) || !(l->name = strdup(name))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = l;
    return 0;
}

static void sq_lock_free(void *eng, void *st)
{
    sqlock *l = st;
    (void)eng;
    free(l->name);
    free(l->id);
    free(l->data);
    free(l);
}

/* Locks, group members and queue takers (coord.c) are all lock states. */
static int sq_lock_acquire(void *eng, void *st, baton_acquire_req *req)
{
    sqlock *l = st;
    if (l->kind == SQ_MEMBER) return sq_member_join(eng, l, req);
    if (l->kind == SQ_TAKER) return sq_taker_take(eng, l, req);
    if (l->kind == SQ_READ || l->kind == SQ_WRITE) return sq_rw_acquire(eng, l, req);
    return sq_lease_acquire(eng, st, req);
}

static int sq_lock_release(void *eng, void *st, const baton_owner *owner)
{
    sqlock *l = st;
    if (l->kind == SQ_MEMBER) return sq_member_leave(eng, l, owner);
    if (l->kind == SQ_TAKER) return sq_taker_release(eng, l, owner);
    if (l->kind == SQ_READ || l->kind == SQ_WRITE) return sq_rw_release(eng, l, owner);
    return sq_lease_release(eng, st, owner);
}

static int sq_lock_renew(void *eng, void *st, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    sqlock *l = st;
    if (l->kind == SQ_MEMBER) return sq_member_renew(eng, l, owner, lease_ms, deadline_ns);
    if (l->kind == SQ_TAKER) return sq_taker_renew(eng, l, owner, lease_ms, deadline_ns);
    if (l->kind == SQ_READ || l->kind == SQ_WRITE) return sq_rw_renew(eng, l, owner, lease_ms, deadline_ns);
    return sq_lease_renew(eng, st, owner, lease_ms, deadline_ns);
}

/* The read and write sides of a read-write lock (fairrw.c). */
static int sq_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr)
{
    sqlock *r = NULL, *w = NULL;
    int rc;
    if ((rc = sq_lock_new(eng, name, opts, (void **)&r))) return rc;
    if ((rc = sq_lock_new(eng, name, opts, (void **)&w))) {
        sq_lock_free(eng, r);
        return rc;
    }
    r->kind = SQ_READ;
    w->kind = SQ_WRITE;
    *rd = r;
    *wr = w;
    return 0;
}

/* A read: in WAL mode it never waits for a writer. */
static int sq_lock_info(void *eng, const char *name, baton_lockinfo *out)
{
    sqeng *e = eng;
    sqconn *c = NULL;
    sqlite3_stmt *st = NULL;
    int rc;

    if ((rc = sq_conn_get(e, &c))) return rc;
    sq_conn_arm(c, baton_now_ns() + (int64_t)e->busy_timeout_ms * 1000000LL, NULL);
    if ((rc = sq_prepare(e, c, "SELECT fence, holder, owner, lease_until, boot FROM @T WHERE name = ?1", &st)))
        goto out;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    out->held = 0;
    out->fence = 0;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *holder = (const char *)sqlite3_column_text(st, 1);
        const char *boot = (const char *)sqlite3_column_text(st, 4);
        int64_t left = sqlite3_column_int64(st, 3) - sq_boot_ms();
        out->fence = (uint64_t)sqlite3_column_int64(st, 0);
        out->held = sqlite3_column_type(st, 2) != SQLITE_NULL && sqlite3_column_type(st, 3) != SQLITE_NULL &&
                    boot && !strcmp(boot, e->boot) && left > 0;
        if (out->held) {
            snprintf(out->holder, sizeof out->holder, "%s", holder ? holder : "");
            out->remaining_ms = left;   /* > 0 */
        }
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = sq_err(e, c, rc, "lock info");
    }
    sqlite3_finalize(st);
    st = NULL;
    if (!rc) rc = sq_rw_info(e, c, name, out);
    if (!rc) rc = sq_permits_info(e, c, name, &out->permits);
out:
    sqlite3_finalize(st);
    sq_conn_put(e, c, 0);
    return rc;
}

static int sq_identity(void *eng, char *buf, size_t n)
{
    sqeng *e = eng;
    snprintf(buf, n, "sqlite://%s#%s", e->real, e->table);
    return 0;
}

static int sq_describe(void *eng, char *buf, size_t n)
{
    sqeng *e = eng;
    int watching, failed;
    char journal[sizeof e->journal];
    pthread_mutex_lock(&e->mu);
    watching = e->watching;
    failed = e->watch_failed;
    memcpy(journal, e->journal, sizeof journal);
    pthread_mutex_unlock(&e->mu);
    snprintf(buf, n, "lease mode, table %s in %s (journal %s, synchronous normal), SQLite %s; wake-up: %s",
             e->table, e->real, journal, sqlite3_libversion(),
             watching ? "inotify on the -baton-wake file" : failed ? "unavailable (waiters back off)"
                                                               : "inotify once a wait starts");
    return 0;
}

static int sq_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    return sq_lease_list(eng, prefix, fn, arg);
}

static int sq_break(void *eng, const char *name, uint64_t *fence)
{
    return sq_lease_break(eng, name, fence);
}

static const baton_lock_methods sq_lock_methods = {
    .create = sq_lock_new,
    .destroy = sq_lock_free,
    .acquire = sq_lock_acquire,
    .release = sq_lock_release,
    .renew = sq_lock_renew,
    .info = sq_lock_info,
    .list = sq_list,
    .force_unlock = sq_break,
};

static const baton_rw_methods sq_rw_methods = {
    .create = sq_rwlock_new,
};

static const baton_sem_methods sq_sem_methods = {
    .create = sq_permits_new,
    .destroy = sq_permits_free,
    .acquire = sq_sem_acquire,
    .release = sq_sem_release,
    .ctl = sq_permits_ctl,
};

static const baton_permits_methods sq_permits_methods = {
    .create = sq_permits_new,
    .destroy = sq_permits_free,
    .acquire = sq_permits_acquire,
    .release = sq_permits_release,
    .renew = sq_permits_renew,
    .ctl = sq_permits_ctl,
};

static const baton_latch_methods sq_latch_methods = {
    .create = sq_latch_new,
    .destroy = sq_permits_free,
    .ctl = sq_latch_ctl,
    .await = sq_latch_await,
};

static const baton_services sq_services_methods = {
    .identity = sq_identity,
    .describe = sq_describe,
};

const baton_backend baton__backend_sqlite = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_sqlite,
    .caps = BATON_CAP_LEASE | BATON_CAP_NOTIFY | BATON_CAP_FAIR,
    .open = sq_open,
    .close = sq_close,
    .lock = &sq_lock_methods,
    .rw = &sq_rw_methods,
    .sem = &sq_sem_methods,
    .permits = &sq_permits_methods,
    .latch = &sq_latch_methods,
    .value = &sq__value_methods,
    .group = &sq__group_methods,
    .queue = &sq__queue_methods,
    .ratelimit = &baton__ratelimit_sqlite,
    .services = &sq_services_methods,
};
