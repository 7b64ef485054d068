/*
 * The tables of values, groups and queues (beside the lock table, one each,
 * named after it: <table>_value, <table>_group, <table>_queue), created on
 * first use of their family, and the local wake-ups of this client's
 * watchers.
 *
 * MariaDB cannot notify another connection of a change (no LISTEN/NOTIFY),
 * so watches and queue waits re-read at a bound (MY_POLL_MS, the queue's
 * backoff). Changes made through this client wake its own parked watchers
 * and waiters at once (my_wake_local): a process that both sets and watches
 * does not wait for the poll.
 *
 * Layout and rules: docs/mysql-engine.md.
 */
#include "my_int.h"
#include "core/internal.h"
#include "util/base64.h"
#include "util/sha256.h"

#include <mysqld_error.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *what;        /* for messages */
    const char *ddl;         /* @X is the table */
    const char *probe;       /* reads every column we use: an error names the one missing */
    const char *grant;
} aux[MY_AUX_N] = {
    [MY_AUX_VALUE] = { "value",
        "CREATE TABLE @V (name VARBINARY(1024) NOT NULL PRIMARY KEY, data MEDIUMBLOB NULL, "
        "version BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
        "SELECT name, data, version FROM @V LIMIT 0", "SELECT, INSERT, UPDATE" },
    [MY_AUX_GROUP] = { "group",
        "CREATE TABLE @G (grp VARBINARY(1024) NOT NULL, id VARBINARY(128) NOT NULL, "
        "value VARBINARY(1024) NOT NULL, owner VARBINARY(64) NOT NULL, holder VARBINARY(255) NULL, "
        "expires_at DATETIME(6) NOT NULL, PRIMARY KEY (grp, id)) ENGINE=InnoDB",
        "SELECT grp, id, value, owner, holder, expires_at FROM @G LIMIT 0", "SELECT, INSERT, UPDATE, DELETE" },
    [MY_AUX_QUEUE] = { "queue",
        "CREATE TABLE @Q (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, q VARBINARY(1024) NOT NULL, "
        "data MEDIUMBLOB NOT NULL, taken_by VARBINARY(64) NULL, holder VARBINARY(255) NULL, "
        "lease_until DATETIME(6) NULL, fence BIGINT UNSIGNED NOT NULL DEFAULT 0, KEY (q, id)) ENGINE=InnoDB",
        "SELECT id, q, data, taken_by, holder, lease_until, fence FROM @Q LIMIT 0", "SELECT, INSERT, UPDATE, DELETE" },
    [MY_AUX_RW] = { "read-write lock",
        "CREATE TABLE @R (name VARBINARY(1024) NOT NULL, owner VARBINARY(64) NOT NULL, side CHAR(1) NOT NULL, "
        "holder VARBINARY(255) NULL, lease_until DATETIME(6) NOT NULL, fence BIGINT UNSIGNED NOT NULL, "
        "PRIMARY KEY (name, owner, side)) ENGINE=InnoDB",
        "SELECT name, owner, side, holder, lease_until, fence FROM @R LIMIT 0", "SELECT, INSERT, UPDATE, DELETE" },
    [MY_AUX_SEM] = { "semaphore",
        "CREATE TABLE @N (name VARBINARY(1024) NOT NULL PRIMARY KEY, permits BIGINT NOT NULL) ENGINE=InnoDB",
        "SELECT name, permits FROM @N LIMIT 0", "SELECT, INSERT, UPDATE" },
    [MY_AUX_PERM] = { "permit",
        "CREATE TABLE @P (name VARBINARY(1024) NOT NULL, id VARBINARY(32) NOT NULL, "
        "lease_until DATETIME(6) NOT NULL, PRIMARY KEY (name, id)) ENGINE=InnoDB",
        "SELECT name, id, lease_until FROM @P LIMIT 0", "SELECT, INSERT, UPDATE, DELETE" },
    [MY_AUX_FAIR] = { "fair lock queue",
        "CREATE TABLE @F (seq BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARBINARY(1024) NOT NULL, "
        "owner VARBINARY(64) NOT NULL, holder VARBINARY(255) NULL, lease_until DATETIME(6) NOT NULL, "
        "KEY (name, seq)) ENGINE=InnoDB",
        "SELECT seq, name, owner, holder, lease_until FROM @F LIMIT 0", "SELECT, INSERT, UPDATE, DELETE" },
};

static int create(myeng *e, MYSQL *c, int which)
{
    char *q = my_sql(e, "%s", aux[which].ddl);
    int rc;
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    rc = my_exec(e, c, q, NULL);
    if (rc == BATON_EAUTH)
        rc = baton_seterr(BATON_EAUTH, 0, "mysql: user '%s' may not create the %s table %s; ask a DBA to run: "
                          "%s; GRANT %s ON %s.%s TO <user>;", e->user ? e->user : "", aux[which].what,
                          e->qaux[which], q, aux[which].grant, e->db, e->qaux[which]);
    /* two clients creating it at once: the loser finds it there */
    else if (rc && baton_error_last()->native == ER_TABLE_EXISTS_ERROR)
        rc = 0;
    free(q);
    return rc;
}

int my_aux_ready(myeng *e, int which)
{
    MYSQL *c = NULL;
    MYSQL_RES *r = NULL;
    char *q = NULL;
    int rc, ok;

    pthread_mutex_lock(&e->mu);
    ok = e->aux_ok[which];
    pthread_mutex_unlock(&e->mu);
    if (ok) return 0;
    if ((rc = my_conn_get(e, &c))) return rc;
    /* the probe first: CREATE TABLE IF NOT EXISTS needs the CREATE
     * privilege even when the table is there */
    if (!(q = my_sql(e, "%s", aux[which].probe))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    rc = my_exec(e, c, q, &r);
    if (rc && baton_error_last()->native == ER_NO_SUCH_TABLE) {
        if (!(rc = create(e, c, which))) rc = my_exec(e, c, q, &r);
    }
    if (rc == BATON_EPROTO)
        rc = baton_seterr(BATON_EPROTO, baton_error_last()->native, "mysql: the %s table %s has another shape "
                          "(docs/mysql-engine.md has the DDL): %s", aux[which].what, e->qaux[which],
                          baton_error_last()->message);
    if (rc) goto out;
    pthread_mutex_lock(&e->mu);
    e->aux_ok[which] = 1;
    pthread_mutex_unlock(&e->mu);
out:
    mysql_free_result(r);
    my_conn_put(e, c);
    free(q);
    return rc;
}

void my_park_enter(myeng *e, mypark *p, baton_waiter *w)
{
    p->w = w;
    pthread_mutex_lock(&e->mu);
    p->next = e->parked;
    e->parked = p;
    pthread_mutex_unlock(&e->mu);
}

void my_park_leave(myeng *e, mypark *p)
{
    pthread_mutex_lock(&e->mu);
    for (mypark **pp = &e->parked; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

void my_wake_local(myeng *e)
{
    /* baton_waiter_wake never blocks and never calls back into us */
    pthread_mutex_lock(&e->mu);
    for (mypark *p = e->parked; p; p = p->next) baton_waiter_wake(p->w);
    pthread_mutex_unlock(&e->mu);
}

int64_t my_step_deadline(myeng *e, int64_t deadline)
{
    int64_t dl = my_deadline_ms(e->io_timeout_ms);
    return deadline != 0 && deadline < dl ? deadline : dl;
}

#define BACKOFF_MIN_MS 20
#define RETRY_DOWN_MS 200        /* a waiter whose server is away tries again this often */

int my_poll_wait(myeng *e, baton_waiter *w, int64_t deadline, const char *what,
                 int (*try)(void *arg, int64_t sent, int64_t dl), void *arg)
{
    int64_t backoff = BACKOFF_MIN_MS;
    mypark p;
    int rc, parked = deadline != 0 && w;

    /* a change through this client wakes the wait at once */
    if (parked) my_park_enter(e, &p, w);
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        int64_t ms, until;
        rc = try(arg, baton_now_ns(), my_step_deadline(e, deadline));
        if ((rc != BATON_ELOCKED && rc != BATON_EUNAVAILABLE) || !parked) break;
        if (deadline != INT64_MAX && baton_now_ns() >= deadline) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "mysql: %s: wait timed out%s", what,
                              rc == BATON_EUNAVAILABLE ? " (the server is unavailable)" : "");
            break;
        }
        if (rc == BATON_EUNAVAILABLE) {
            ms = RETRY_DOWN_MS;
        } else {
            /* jitter: the waiters of one release do not try in lockstep */
            ms = backoff / 2 + (int64_t)(baton_now_ns() % (backoff / 2 + 1));
            if (backoff < MY_POLL_MS) backoff = backoff * 2 > MY_POLL_MS ? MY_POLL_MS : backoff * 2;
        }
        until = baton_now_ns() + ms * 1000000LL;
        if (until > deadline) until = deadline;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "mysql: %s: wait canceled", what);
            break;
        }
    }
    if (parked) my_park_leave(e, &p);
    return rc;
}

char *my_tag_row(const char *tag, const char *name)
{
    size_t len = strlen(name), t = strlen(tag), n;
    char *row = malloc(len + t + 64), *out;
    if (!row) return NULL;
    row[0] = 0;
    memcpy(row + 1, tag, t);
    if (2 + t + len <= 1024) {
        row[1 + t] = ':';
        memcpy(row + 2 + t, name, len);
        n = 2 + t + len;
    } else {
        unsigned char d[BATON_SHA256_SIZE];
        baton__sha256(name, len, d);
        row[1 + t] = '#';
        n = 2 + t + baton__base64_encode(row + 2 + t, d, sizeof d, BATON_B64_URL | BATON_B64_NOPAD);
    }
    out = my_escape_n(row, n);
    free(row);
    return out;
}
