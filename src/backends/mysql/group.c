/*
 * Group membership: one row per member in <table>_group (grp, id, value,
 * owner, holder, expires_at), a lease on the server's clock in every mode
 * (no connection is held: a member survives its connection dropping, and a
 * member that dies is gone when its lease runs out). The core renews a
 * member every lease/3 like a lease-mode lock.
 *
 * join    one upsert that takes the row only when it is free: absent, its
 *         lease over, or already ours (ShedLock's claim, as lease.c);
 * leave   DELETE, owner-checked;
 * list    one SELECT of the group's rows; rows whose lease passed are not
 *         listed, and are deleted then (one DELETE, only when there are);
 * watch   re-reads the group every MY_POLL_MS, and right after the earliest
 *         member's lease is due to end; a change made through this client
 *         wakes its watchers at once.
 */
#include "my_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int my_member_acquire(myeng *e, mylock *l, baton_acquire_req *req)
{
    char *owner = my_escape(req->owner->hex), *holder = my_escape(req->owner->desc);
    char *val = my_escape(req->value ? req->value : ""), *sql = NULL;
    uint64_t affected = 0;
    int64_t sent = baton_now_ns();
    int rc;

    if ((rc = my_aux_ready(e, MY_AUX_GROUP))) goto out;
    if (owner && holder && val)
        /* the condition is taken once, first, into @baton_ok (later terms
         * see the columns the earlier ones assigned) */
        sql = my_sql(e, "INSERT INTO @G (grp, id, value, owner, holder, expires_at) VALUES (%s, %s, %s, %s, %s, "
                        "UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND) ON DUPLICATE KEY UPDATE "
                        "value = IF(@baton_ok := (expires_at <= UTC_TIMESTAMP(6) OR owner = VALUES(owner)), "
                        "VALUES(value), value), holder = IF(@baton_ok, VALUES(holder), holder), "
                        "owner = IF(@baton_ok, VALUES(owner), owner), "
                        "expires_at = IF(@baton_ok, VALUES(expires_at), expires_at)",
                     l->esc, l->eid, val, owner, holder, (uint64_t)req->lease_ms * 1000);
    if (!sql) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    /* safe to run twice: a second run by the same owner takes it again */
    if ((rc = my_run_dl(e, sql, 1, NULL, &affected, NULL, my_step_deadline(e, req->deadline_ns)))) goto out;
    if (affected == 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "mysql: group '%s' has a live member with that id", l->name);
        goto out;
    }
    req->fence = 0;
    req->sent_ns = sent;
    my_wake_local(e);
out:
    free(owner);
    free(holder);
    free(val);
    free(sql);
    return rc;
}

int my_member_release(myeng *e, mylock *l, const baton_owner *owner)
{
    char *o = my_escape(owner->hex), *sql = NULL;
    uint64_t affected = 0;
    int rc;

    if (o) sql = my_sql(e, "DELETE FROM @G WHERE grp = %s AND id = %s AND owner = %s", l->esc, l->eid, o);
    free(o);
    if (!sql) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    /* not run twice: a second run would find nothing and say LOST */
    rc = my_run(e, sql, 0, NULL, &affected, NULL);
    free(sql);
    if (rc) return rc;
    my_wake_local(e);
    if (affected == 0)
        return baton_seterr(BATON_ELOST, 0, "mysql: group '%s': the membership had ended (its lease ran out)",
                            l->name);
    return 0;
}

int my_member_renew(myeng *e, mylock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char *o = my_escape(owner->hex), *sql = NULL, *check = NULL;
    MYSQL_RES *r = NULL;
    uint64_t affected = 0;
    int rc;

    if (deadline_ns > my_deadline_ms(e->io_timeout_ms)) deadline_ns = my_deadline_ms(e->io_timeout_ms);
    /* a lease that ran out is not revived: the member was no longer listed */
    if (o) {
        sql = my_sql(e, "UPDATE @G SET expires_at = UTC_TIMESTAMP(6) + INTERVAL %" PRIu64 " MICROSECOND "
                        "WHERE grp = %s AND id = %s AND owner = %s AND expires_at > UTC_TIMESTAMP(6)",
                     (uint64_t)lease_ms * 1000, l->esc, l->eid, o);
        check = my_sql(e, "SELECT 1 FROM @G WHERE grp = %s AND id = %s AND owner = %s AND "
                          "expires_at > UTC_TIMESTAMP(6)", l->esc, l->eid, o);
    }
    free(o);
    if (!sql || !check) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_run_dl(e, sql, 1, NULL, &affected, NULL, deadline_ns)) || affected == 1) goto out;
    /* 0 rows changed: gone, or renewed twice within one microsecond */
    if ((rc = my_run_dl(e, check, 1, &r, NULL, NULL, deadline_ns))) goto out;
    if (mysql_num_rows(r) == 0)
        rc = baton_seterr(BATON_ELOST, 0, "mysql: group '%s': the membership had ended (its lease ran out)",
                          l->name);
out:
    mysql_free_result(r);
    free(sql);
    free(check);
    return rc;
}

/* FNV-1a, 64 bits */
static uint64_t mix(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return (h ^ 0xff) * 0x100000001b3ULL;   /* a separator no byte string ends in */
}

/* One read of NAME's members: FN for each live one (may be NULL), *TOKEN a
 * hash of the live ids and values (never 0), *NEXT_MS when the earliest
 * live lease ends (INT64_MAX: none). Rows whose lease passed are deleted. */
static int read_group(myeng *e, const char *name, void (*fn)(void *, const char *, const char *), void *arg,
                      uint64_t *token, int64_t *next_ms, int64_t deadline)
{
    char *esc = my_escape(name), *sql = NULL;
    MYSQL_RES *r = NULL;
    MYSQL_ROW row;
    uint64_t h = 0xcbf29ce484222325ULL;
    int64_t next = INT64_MAX;
    int rc, stale = 0;

    if ((rc = my_aux_ready(e, MY_AUX_GROUP))) goto out;
    if (esc)
        sql = my_sql(e, "SELECT id, value, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM @G "
                        "WHERE grp = %s ORDER BY id", esc);
    if (!sql) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = my_run_dl(e, sql, 1, &r, NULL, NULL, deadline))) goto out;
    while ((row = mysql_fetch_row(r))) {
        unsigned long *len = mysql_fetch_lengths(r);
        int64_t left = row[2] ? strtoll(row[2], NULL, 10) : 0;
        if (!row[0] || !row[1] || left <= 0) {
            stale = 1;
            continue;
        }
        h = mix(mix(h, row[0], len[0]), row[1], len[1]);
        if (left / 1000 < next) next = left / 1000;
        if (fn) fn(arg, row[0], row[1]);
    }
    if (token) *token = h ? h : 1;
    if (next_ms) *next_ms = next;
    if (stale) {
        /* lazily: whoever sees them first; a live member's renewal never
         * matches a row past its lease, so nothing live is deleted */
        free(sql);
        if ((sql = my_sql(e, "DELETE FROM @G WHERE grp = %s AND expires_at <= UTC_TIMESTAMP(6)", esc)))
            (void)my_run_dl(e, sql, 1, NULL, NULL, NULL, deadline);
    }
out:
    mysql_free_result(r);
    free(sql);
    free(esc);
    return rc;
}

static int group_create(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    mylock *l;
    (void)opts;
    *st = NULL;
    if (!(l = calloc(1, sizeof *l))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    l->e = eng;
    l->kind = MY_KIND_MEMBER;
    if (!(l->name = strdup(name)) || !(l->esc = my_escape(name)) || !(l->eid = my_escape(id))) {
        free(l->name);
        free(l->esc);
        free(l->eid);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = l;
    return 0;
}

static int group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                      void *arg, uint64_t *token)
{
    myeng *e = eng;
    return read_group(e, name, fn, arg, token, NULL, my_deadline_ms(e->io_timeout_ms));
}

static int watch_loop(myeng *e, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        uint64_t now_token = 0;
        int64_t next_ms = INT64_MAX, until;
        int rc = read_group(e, name, NULL, NULL, &now_token, &next_ms, my_step_deadline(e, deadline_ns));
        /* a watcher outlives a server that is away (a restart): it reads
         * again at the poll bound until its deadline */
        if (rc && (rc != BATON_EUNAVAILABLE || deadline_ns == 0)) return rc;
        if (!rc && now_token != token) return 0;
        if (deadline_ns == 0 || baton_now_ns() >= deadline_ns)
            return baton_seterr(BATON_ETIMEDOUT, 0, "mysql: group '%s': no change%s", name,
                                rc ? " (the server is unavailable)" : "");
        /* the next look: the poll bound, or just after the earliest lease ends */
        until = baton_now_ns() + (int64_t)MY_POLL_MS * 1000000LL;
        if (!rc && next_ms != INT64_MAX && baton_now_ns() + (next_ms + 1) * 1000000LL < until)
            until = baton_now_ns() + (next_ms + 1) * 1000000LL;
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED)
            return baton_seterr(BATON_ECANCELED, 0, "mysql: group '%s': watch canceled", name);
    }
}

static int group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    mypark p;
    int rc;
    my_park_enter(eng, &p, w);
    rc = watch_loop(eng, name, token, deadline_ns, w);
    my_park_leave(eng, &p);
    return rc;
}

const baton_group_methods my_group_methods = {
    .create = group_create,
    .list = group_list,
    .watch = group_watch,
};
