/*
 * What an operator asks of the engine (baton list, baton unlock --force):
 * lock_list and lock_break, in each mode. docs/mysql-engine.md, "Operator
 * commands".
 *
 * A break gives a fence above every fence granted for the name so far, by
 * the acquire's own rule, and stores it in the name's row inside a
 * transaction that holds the row until the holder is gone:
 *  - session mode: the row is bumped (fence + 1) and locked, the named
 *    lock's owner (IS_USED_LOCK) KILLed, then COMMIT: a waiter granted the
 *    named lock as the holder dies upserts the row after our commit, so its
 *    fence is above ours;
 *  - row mode: the holder's transaction is found by a probe that waits for
 *    the row (INNODB_LOCK_WAITS names the transaction it waits for), its
 *    connection KILLed; the probe then holds the row itself and sets
 *    GREATEST(fence + 1, NEXTVAL(seq), the holder's fence + 1);
 *  - lease mode: the owner is cleared and the fence raised by one; the old
 *    holder's owner- and fence-checked renewal then finds nothing.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <mysqld_error.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define LIST_BATCH 64            /* IS_USED_LOCK checks per statement */
/* The row-mode probe's wait is looked for this often. Above 100 ms: InnoDB
 * refreshes its INNODB_TRX / INNODB_LOCK_WAITS cache only when it has not
 * been read for 100 ms, so faster polls would read a stale cache forever. */
#define PROBE_POLL_MS 150

/* A LIKE pattern (as a hex literal) for names starting with PREFIX. */
static char *prefix_like(const char *prefix)
{
    size_t n = strlen(prefix);
    char *raw = malloc(2 * n + 2), *o = raw, *out;
    if (!raw) return NULL;
    for (const char *p = prefix; *p; p++) {
        if (*p == '%' || *p == '_' || *p == '\\') *o++ = '\\';
        *o++ = *p;
    }
    *o++ = '%';
    *o = 0;
    out = my_escape(raw);
    free(raw);
    return out;
}

/* Every name of the table starting with the prefix (LIKE: a range of the
 * primary key). */
static int names_with(myeng *e, MYSQL *c, const char *like, const char *tail, MYSQL_RES **r)
{
    char *sql = my_sql(e, "SELECT name FROM @T WHERE name LIKE %s%s", like, tail);
    int rc;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, sql, r);
    free(sql);
    return rc;
}

/* Session mode: the names whose named lock is in use, LIST_BATCH at a time. */
static int list_session(myeng *e, MYSQL *c, MYSQL_RES *names, int (*fn)(void *, const char *), void *arg)
{
    my_ulonglong n = mysql_num_rows(names);
    char **nm = calloc(n ? n : 1, sizeof *nm);
    MYSQL_ROW row;
    size_t k = 0;
    int rc = 0, stop = 0;

    if (!nm) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    while ((row = mysql_fetch_row(names)) && k < n)
        if (row[0]) nm[k++] = row[0];
    for (size_t i = 0; i < k && !stop && !rc; i += LIST_BATCH) {
        size_t m = k - i < LIST_BATCH ? k - i : LIST_BATCH, len = 64, at = 0;
        char *sql, **ek = calloc(m, sizeof *ek);
        MYSQL_RES *r = NULL;
        if (!ek) { rc = baton_seterr(BATON_ENOMEM, 0, "out of memory"); break; }
        for (size_t j = 0; j < m; j++) {
            char key[72];
            my_name_key(nm[i + j], key);
            if (!(ek[j] = my_escape(key))) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            else len += strlen(ek[j]) + 64;
        }
        if (!rc && !(sql = malloc(len))) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        if (!rc) {
            for (size_t j = 0; j < m; j++)
                at += (size_t)snprintf(sql + at, len - at, "%sSELECT %zu, IS_USED_LOCK(%s) IS NOT NULL",
                                       j ? " UNION ALL " : "", j, ek[j]);
            rc = my_exec(e, c, sql, &r);
            free(sql);
        }
        for (size_t j = 0; j < m; j++) free(ek[j]);
        free(ek);
        if (rc) break;
        while (!stop && (row = mysql_fetch_row(r)))
            if (row[0] && row[1] && !strcmp(row[1], "1")) stop = fn(arg, nm[i + strtoul(row[0], NULL, 10)]);
        mysql_free_result(r);
    }
    free(nm);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Row mode: the names whose row a transaction holds = every name minus the
 * ones SKIP LOCKED can lock (READ COMMITTED: no gap locks; the free rows are
 * held for the instant of the statement, then rolled back). */
static int list_row(myeng *e, MYSQL *c, const char *like, int (*fn)(void *, const char *), void *arg)
{
    MYSQL_RES *all = NULL, *fr = NULL;
    MYSQL_ROW row;
    char **freen = NULL;
    size_t nf = 0;
    int rc;

    if ((rc = my_exec(e, c, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED", NULL)) ||
        (rc = my_exec(e, c, "START TRANSACTION", NULL)))
        return rc;
    if ((rc = names_with(e, c, like, " FOR UPDATE SKIP LOCKED", &fr))) goto out;
    if ((rc = my_exec(e, c, "ROLLBACK", NULL))) goto out;
    if ((rc = names_with(e, c, like, "", &all))) goto out;
    if (!(freen = calloc(mysql_num_rows(fr) + 1, sizeof *freen))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    while ((row = mysql_fetch_row(fr)))
        if (row[0]) freen[nf++] = row[0];
    if (nf) qsort(freen, nf, sizeof *freen, cmp_str);
    while ((row = mysql_fetch_row(all)))
        if (row[0] && !(nf && bsearch(&row[0], freen, nf, sizeof *freen, cmp_str)) && fn(arg, row[0])) break;
out:
    free(freen);
    mysql_free_result(fr);
    mysql_free_result(all);
    return rc;
}

int my_admin_list(myeng *e, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    MYSQL *c = NULL;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    char *like = prefix_like(prefix ? prefix : "");
    int rc;

    if (!like) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = my_conn_get(e, &c))) goto out;
    if (e->mode == MY_ROW) {
        rc = list_row(e, c, like, fn, arg);
    } else if (e->mode == MY_SESSION) {
        if (!(rc = names_with(e, c, like, "", &r))) rc = list_session(e, c, r, fn, arg);
    } else if (!(rc = names_with(e, c, like, " AND owner IS NOT NULL AND lease_until > UTC_TIMESTAMP(6)", &r))) {
        while ((row = mysql_fetch_row(r)))
            if (row[0] && fn(arg, row[0])) break;
    }
out:
    mysql_free_result(r);
    if (c && rc) my_conn_close(c);
    else my_conn_put(e, c);
    free(like);
    return rc;
}

/* The first cell of SQL's answer on C (NULL text = ""), into OUT. */
static int cell(myeng *e, MYSQL *c, const char *sql, char *out, size_t n)
{
    MYSQL_RES *r = NULL;
    const char *v;
    int rc;
    *out = 0;
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if ((rc = my_exec(e, c, sql, &r))) return rc;
    if ((v = my_cell(r, 0))) snprintf(out, n, "%s", v);
    mysql_free_result(r);
    return 0;
}

static int run_free(myeng *e, MYSQL *c, char *sql, char *out, size_t n)
{
    int rc = cell(e, c, sql, out, n);
    free(sql);
    return rc;
}

/* KILL CONNECTION ID, with a message naming the privilege it needs. */
static int kill_conn(myeng *e, MYSQL *c, const char *name, const char *id)
{
    char sql[64];
    int rc;
    snprintf(sql, sizeof sql, "KILL CONNECTION %lu", strtoul(id, NULL, 10));
    rc = my_exec(e, c, sql, NULL);
    if (rc == BATON_EIO && baton_error_last()->native == ER_NO_SUCH_THREAD) return 0; /* gone already */
    if (rc && (baton_error_last()->native == ER_KILL_DENIED_ERROR || rc == BATON_EAUTH))
        return baton_seterr(BATON_EAUTH, baton_error_last()->native,
                            "mysql: breaking '%s' KILLs its holder's connection %s, which needs the CONNECTION "
                            "ADMIN (or SUPER) privilege unless the holder connected as the same user: %s",
                            name, id, baton_error_last()->message);
    return rc;
}

/* Row mode's probe: waits for the row on its own connection (a thread of
 * its own) while the caller looks for the transaction it waits for. */
typedef struct {
    myeng *e;
    MYSQL *c;
    char *sql;
    int rc;
} probe_job;

static void *probe_main(void *arg)
{
    probe_job *j = arg;
    MYSQL_RES *r = NULL;
    j->rc = my_exec(j->e, j->c, j->sql, &r);
    mysql_free_result(r);
    return NULL;
}

/* Row mode: 0 with the probe (on C, in a transaction) holding the row, and
 * *HELD, *HF (the holder's fence, 0 unknown). */
static int row_take(myeng *e, MYSQL *c, mylock *l, int *held, uint64_t *hf)
{
    MYSQL *b = NULL;
    char v[64], *sql;
    probe_job j = { e, c, NULL, 0 };
    pthread_t t;
    int rc, wait_s = e->io_timeout_ms / 1000 + 1;
    int64_t until;

    *held = 0;
    *hf = 0;
    if ((rc = my_exec(e, c, "START TRANSACTION", NULL))) return rc;
    rc = run_free(e, c, my_sql(e, "SELECT 1 FROM @T WHERE name = %s FOR UPDATE NOWAIT", l->esc), v, sizeof v);
    if (!rc) return 0;                       /* free (or no row): ours now */
    if (baton_error_last()->native != ER_LOCK_WAIT_TIMEOUT) return rc;
    *held = 1;
    /* the waiting probe in a transaction of its own */
    if ((rc = my_exec(e, c, "ROLLBACK", NULL)) || (rc = my_exec(e, c, "START TRANSACTION", NULL))) return rc;
    if ((rc = my_conn_get(e, &b))) return rc;
    /* the holder's fence, not committed yet: read dirty */
    if ((rc = my_exec(e, b, "SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", NULL)) ||
        (rc = run_free(e, b, my_sql(e, "SELECT fence FROM @T WHERE name = %s", l->esc), v, sizeof v)))
        goto out;
    *hf = strtoull(v, NULL, 10);
    /* a no-op UPDATE: it waits for the row's X lock, and holds it once granted */
    if (!(j.sql = my_sql(e, "SET STATEMENT innodb_lock_wait_timeout = %d FOR UPDATE @T SET fence = fence "
                            "WHERE name = %s", wait_s, l->esc))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if (pthread_create(&t, NULL, probe_main, &j)) {
        rc = baton_seterr(BATON_EIO, 0, "mysql: cannot start a thread");
        goto out;
    }
    if (!(sql = my_sql(e, "SELECT GROUP_CONCAT(DISTINCT t.trx_mysql_thread_id) FROM information_schema.INNODB_LOCK_WAITS w "
                          "JOIN information_schema.INNODB_TRX t ON t.trx_id = w.blocking_trx_id "
                          "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                          "WHERE r.trx_mysql_thread_id = %lu", mysql_thread_id(c))))
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* the probe's wait shows up as soon as it has begun; KILL whoever it waits for */
    until = my_deadline_ms(e->io_timeout_ms);
    *v = 0;
    while (!rc && !*v && baton_now_ns() < until) {
        struct timespec ts = { 0, PROBE_POLL_MS * 1000000L };
        if ((rc = cell(e, b, sql, v, sizeof v))) break;
        if (!*v) nanosleep(&ts, NULL);
    }
    free(sql);
    if (!rc && *v) {
        for (char *id = strtok(v, ","); id && !rc; id = strtok(NULL, ",")) rc = kill_conn(e, b, l->name, id);
    } else if (!rc) {
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "mysql: breaking '%s': the transaction holding its row was not "
                          "found in INNODB_LOCK_WAITS within %d ms (it needs the PROCESS privilege)", l->name,
                          e->io_timeout_ms);
    }
    /* ends the probe's wait at once (C is closed by the caller) */
    if (rc) shutdown(mysql_get_socket(c), SHUT_RDWR);
    pthread_join(t, NULL);
    if (!rc && j.rc) rc = j.rc;
out:
    free(j.sql);
    my_conn_close(b);    /* never pooled: its session reads dirty */
    return rc;
}

int my_admin_break(myeng *e, mylock *l, uint64_t *fence)
{
    MYSQL *c = NULL;
    char v[64], hs[32];
    int rc, held = 0;
    uint64_t hf = 0;

    *fence = 0;
    if ((rc = my_conn_get(e, &c))) return rc;
    if (e->mode == MY_ROW) {
        if ((rc = row_take(e, c, l, &held, &hf))) goto out;
        snprintf(hs, sizeof hs, "%" PRIu64, hf + 1);
        if ((rc = run_free(e, c, my_sql(e, "INSERT INTO @T (name, fence) VALUES (%s, GREATEST(NEXTVAL(@S), %s)) "
                                           "ON DUPLICATE KEY UPDATE fence = GREATEST(fence + 1, NEXTVAL(@S), %s), "
                                           "owner = NULL, holder = NULL, lease_until = NULL", l->esc, hs, hs),
                           v, sizeof v)))
            goto out;
    } else {
        if ((rc = my_exec(e, c, "START TRANSACTION", NULL))) goto out;
        /* lease mode: held = a lease not run out, read under the row lock */
        if (e->mode == MY_LEASE &&
            (rc = run_free(e, c, my_sql(e, "SELECT owner IS NOT NULL AND lease_until > UTC_TIMESTAMP(6) FROM @T "
                                           "WHERE name = %s FOR UPDATE", l->esc), v, sizeof v)))
            goto out;
        held = !strcmp(v, "1");
        if ((rc = run_free(e, c, my_sql(e, "INSERT INTO @T (name, fence) VALUES (%s, 1) ON DUPLICATE KEY UPDATE "
                                           "fence = fence + 1, owner = NULL, holder = NULL, lease_until = NULL",
                                        l->esc), v, sizeof v)))
            goto out;
        if (e->mode == MY_SESSION) {
            /* the row stays locked until COMMIT: a waiter granted the
             * named lock when its holder dies bumps the fence after us */
            if ((rc = run_free(e, c, my_sql(e, "SELECT IS_USED_LOCK(%s)", l->ekey), v, sizeof v))) goto out;
            held = *v != 0;
            if (held && (rc = kill_conn(e, c, l->name, v))) goto out;
        }
    }
    if ((rc = run_free(e, c, my_sql(e, "SELECT fence FROM @T WHERE name = %s", l->esc), v, sizeof v)) ||
        (rc = my_exec(e, c, "COMMIT", NULL)))
        goto out;
    *fence = strtoull(v, NULL, 10);
    /* either side of a read-write lock of the name too */
    my_conn_put(e, c);
    c = NULL;
    if ((rc = my_rw_break(e, l, fence, &held))) goto out;
    if (!held) rc = baton_seterr(BATON_ENOTHELD, 0, "mysql: lock '%s' was not held (fence bumped to %" PRIu64 ")",
                                 l->name, *fence);
out:
    if (c && rc && rc != BATON_ENOTHELD) my_conn_close(c);
    else my_conn_put(e, c);
    return rc;
}
