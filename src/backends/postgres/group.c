/*
 * Group members (baton_group_*): one row of <table>_group per member (coord.c),
 * a lease on the server's clock in EVERY mode (session and row modes too: a
 * member is not tied to a connection, so it survives the connection dropping
 * and a killed member is gone when its lease ends, lease_ms after its last
 * renewal). A member is a lock state driven by the lock methods:
 *   - join (acquire): one upsert that inserts the row, or takes over one
 *     whose lease ended (or that this owner holds); a live member with the
 *     id leaves it alone: BATON_ELOCKED. It also deletes the group's rows
 *     whose lease ended more than a minute ago (crashed members' leftovers).
 *   - renewal (every lease/3, by the keeper): extends the lease when owner
 *     matches and the lease has not ended; else BATON_ELOST.
 *   - leave (release): deletes the row, owner-checked.
 * Join and leave NOTIFY the groups' channel with the group's name. A
 * member whose lease ends sends nothing: a watcher wakes at the earliest
 * member's end, as the listing told it, and reads again.
 *
 * list reads the members whose lease has not ended, sorted by id; its token
 * is a 64-bit FNV-1a hash of the ids and values, which watch compares.
 */
#include "pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MS 5000          /* a watcher reads again at least this often */
#define RECHECK_DOWN_MS 200      /* ... while the listener is not listening */

/* $1 group, $2 id, $3 value, $4 owner, $5 holder, $6 lease ms, $7 channel */
static const char join_sql[] =
    "WITH gc AS (DELETE FROM @G WHERE name = $1 AND id <> $2 "
    "AND expires_at < clock_timestamp() - interval '1 minute') "
    "INSERT INTO @G AS m (name, id, value, owner, holder, expires_at, joined_at) "
    "VALUES ($1, $2, $3, $4, $5, clock_timestamp() + $6::bigint * interval '1 millisecond', clock_timestamp()) "
    "ON CONFLICT (name, id) DO UPDATE SET value = EXCLUDED.value, owner = EXCLUDED.owner, "
    "holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, joined_at = EXCLUDED.joined_at "
    "WHERE m.expires_at <= clock_timestamp() OR m.owner = EXCLUDED.owner "
    "RETURNING pg_notify($7, m.name)";

/* $1 group, $2 id, $3 owner, $4 lease ms */
static const char renew_sql[] =
    "UPDATE @G SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond' "
    "WHERE name = $1 AND id = $2 AND owner = $3 AND expires_at > clock_timestamp()";

/* $1 group, $2 id, $3 owner, $4 channel */
static const char leave_sql[] =
    "DELETE FROM @G WHERE name = $1 AND id = $2 AND owner = $3 "
    "RETURNING expires_at > clock_timestamp(), pg_notify($4, name)";

/* $1 group: the live members, and how long each still has (ms) */
static const char list_sql[] =
    "SELECT id, value, ceil(extract(epoch FROM (expires_at - clock_timestamp())) * 1000)::bigint "
    "FROM @G WHERE name = $1 AND expires_at > clock_timestamp() ORDER BY id COLLATE \"C\"";

static int member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    pglock *l = calloc(1, sizeof *l);
    if (!l || !(l->name = strdup(name)) || !(l->mid = strdup(id))) {
        if (l) free(l->name);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->e = eng;
    l->kind = PG_MEMBER;
    l->lease_ms = opts && opts->lease_ms ? opts->lease_ms : 30000;
    *st = l;
    return 0;
}

int pg_member_acquire(pgeng *e, pglock *l, baton_acquire_req *req)
{
    char ms[16];
    const char *p[7] = { l->name, l->mid, req->value ? req->value : "", req->owner->hex, req->owner->desc, ms,
                         e->cchannel[PG_CH_GROUP] };
    PGresult *r = NULL;
    int64_t sent;
    int rc;

    if ((rc = pg_coord_ready(e, PG_CH_GROUP))) return rc;
    snprintf(ms, sizeof ms, "%u", req->lease_ms ? req->lease_ms : l->lease_ms);
    sent = baton_now_ns();
    /* safe to run twice: the same owner takes its own row again */
    if ((rc = pg_coord_run(e, join_sql, 7, p, 1, INT64_MAX, &r))) return rc;
    if (PQntuples(r) == 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "postgres: group '%s': a live member is '%s' already", l->name, l->mid);
    } else {
        req->fence = 0;          /* members have no fences */
        req->sent_ns = sent;     /* the lease started no earlier than this */
    }
    PQclear(r);
    return rc;
}

int pg_member_release(pgeng *e, pglock *l, const baton_owner *owner)
{
    const char *p[4] = { l->name, l->mid, owner->hex, e->cchannel[PG_CH_GROUP] };
    PGresult *r = NULL;
    int rc;

    /* not retried: a second run after a first that committed would say LOST */
    if ((rc = pg_coord_run(e, leave_sql, 4, p, 0, INT64_MAX, &r))) return rc;
    if (PQntuples(r) == 0 || strcmp(PQgetvalue(r, 0, 0), "t"))
        rc = baton_seterr(BATON_ELOST, 0, "postgres: group '%s': member '%s': its lease had ended", l->name, l->mid);
    PQclear(r);
    return rc;
}

int pg_member_renew(pgeng *e, pglock *l, const baton_owner *owner, uint32_t lease_ms, int64_t deadline_ns)
{
    char ms[16];
    const char *p[4] = { l->name, l->mid, owner->hex, ms };
    PGresult *r = NULL;
    int rc;

    snprintf(ms, sizeof ms, "%u", lease_ms);
    /* by the lease deadline, connecting included (as lease mode's renewal) */
    rc = pg_coord_run(e, renew_sql, 4, p, 0, deadline_ns, &r);
    if (rc == BATON_ETIMEDOUT) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "postgres: renewal timed out");
    if (rc == 0 && strcmp(PQcmdTuples(r), "1"))
        rc = baton_seterr(BATON_ELOST, 0, "postgres: group '%s': member '%s': its lease had ended", l->name, l->mid);
    PQclear(r);
    return rc;
}

/* FNV-1a over S and its NUL. */
static uint64_t fnv(uint64_t h, const char *s)
{
    do {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    } while (*s++);
    return h;
}

/* The live members: FN for each (when FN), *TOKEN their hash, *LEFT_MS
 * the shortest lease left among them (-1 when none). */
static int members(pgeng *e, const char *name, void (*fn)(void *arg, const char *id, const char *value), void *arg,
                   uint64_t *token, int64_t *left_ms)
{
    const char *p[1] = { name };
    PGresult *r = NULL;
    uint64_t h = 14695981039346656037ULL;
    int rc;

    if ((rc = pg_coord_ready(e, PG_CH_GROUP))) return rc;
    if ((rc = pg_coord_run(e, list_sql, 1, p, 1, INT64_MAX, &r))) return rc;
    *left_ms = -1;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t left = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        h = fnv(fnv(h, PQgetvalue(r, i, 0)), PQgetvalue(r, i, 1));
        if (*left_ms < 0 || left < *left_ms) *left_ms = left;
        if (fn) fn(arg, PQgetvalue(r, i, 0), PQgetvalue(r, i, 1));
    }
    PQclear(r);
    if (token) *token = h;
    return 0;
}

static int group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                      void *arg, uint64_t *token)
{
    int64_t left;
    return members(eng, name, fn, arg, token, &left);
}

static int group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    pgeng *e = eng;
    pgwait me = { PG_CH_GROUP, name, w, NULL };
    int rc, linked = 0;

    if ((rc = pg_coord_ready(e, PG_CH_GROUP))) return rc;
    if (deadline_ns != 0 && w) {
        /* listen before the first read: a join or leave after it wakes us */
        if ((rc = pg_wait_link(e, &me))) return rc;
        linked = 1;
    }
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        uint64_t now_t = 0;
        int64_t left = -1, until;
        int down;
        rc = members(e, name, NULL, NULL, &now_t, &left);
        if (rc == 0 && now_t != token) break;
        if (rc && rc != BATON_EUNAVAILABLE) break;
        down = rc == BATON_EUNAVAILABLE;
        if (deadline_ns == 0 || !w) {
            if (!down) rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: group '%s' unchanged", name);
            break;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "postgres: group '%s': watch timed out%s", name,
                              down ? " (the server is unavailable)" : "");
            break;
        }
        until = baton_now_ns() + (int64_t)(pg_listening(e) && !down ? RECHECK_MS : RECHECK_DOWN_MS) * 1000000LL;
        /* a member whose lease ends sends nothing: look again then */
        if (left >= 0 && baton_now_ns() + (left + 1) * 1000000LL < until)
            until = baton_now_ns() + (left + 1) * 1000000LL;
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until) == BATON_ECANCELED) {
            rc = baton_seterr(BATON_ECANCELED, 0, "postgres: group '%s': watch canceled", name);
            break;
        }
    }
    if (linked) pg_wait_unlink(e, &me);
    return rc;
}

const baton_group_methods pg_group_methods = {
    .create = member_new,
    .list = group_list,
    .watch = group_watch,
};
