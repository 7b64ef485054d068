/* Leader elections the core builds for engines with locks, lock info and
 * values but no election table of their own (file, SQLite, PostgreSQL,
 * MySQL, Redis).
 *
 * A candidate is the baton lock "baton:election:NAME" (fair where the engine
 * has fair locks, so the oldest candidate leads); the term is that lock's
 * fence. Leases, loss and on_lost are the lock's. The leader keeps a record
 * in the value of the same name: "<fence>\n<holder>\n<value>", written after each grant
 * and on proclaim, by compare-and-set so a record never goes back to an
 * older term (a deposed leader that wakes up late is refused with
 * BATON_ELOST), and deleted on resign before the lock is released.
 *
 * Who leads is the lock's info (held, fence) plus the record: a record of
 * another term than the lock's is stale (its leader is dead, or the new one
 * has not written yet) and is never reported; nobody leads while the lock is
 * free. A stale record gets STALE_NS to be replaced; after that the election
 * reads as leaderless until the leader writes. Waiting watches the record
 * (the engine's notifications) and re-reads the lock at least every
 * REREAD_NS, which is how a leader that died with no successor (its lease
 * ran out, its session or process went, the record stayed) is noticed. */
#include "election.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REREAD_NS 1000000000LL   /* a waiting observer re-reads the lock at least this often */
#define STALE_NS 2000000000LL    /* how long a new leader's record may lag its grant */
#define CAS_TRIES 100

typedef struct {
    uint64_t version;   /* of the record; 0 = absent */
    uint64_t fence;     /* the term it names; 0 = absent or not a record */
    char holder[96];    /* the leader's "host pid tid", as lock info gives it */
    char value[BATON_ELECTION_VALUE_MAX + 1];
} record;

/* "<fence>\n<holder>\n<value>"; anything else (a foreign writer's bytes) is
 * no record of a term. */
static void rec_parse(const baton_value_data *d, record *r)
{
    char *end, *nl;
    unsigned long long f;
    r->version = d->version;
    r->fence = 0;
    r->holder[0] = r->value[0] = 0;
    if (!d->data || d->len == 0) return;
    f = strtoull(d->data, &end, 10);
    if (end == d->data || *end != '\n' || !(nl = strchr(end + 1, '\n'))) return;
    r->fence = f;
    snprintf(r->holder, sizeof r->holder, "%.*s", (int)(nl - end - 1), end + 1);
    snprintf(r->value, sizeof r->value, "%s", nl + 1);
}

static int rec_read(baton_election *e, baton_value *rv, record *r)
{
    sync_obj *o = baton__value_obj(rv);
    baton_value_data d;
    int rc;
    memset(&d, 0, sizeof d);
    rc = e->c->be->value->get(e->c->eng, o->st, &d);
    if (rc == BATON_ENOENT) {
        baton_value_data_clear(&d);
        memset(r, 0, sizeof *r);
        return 0;
    }
    if (!rc) rec_parse(&d, r);
    baton_value_data_clear(&d);
    return rc;
}

/* Writes FENCE's record, never over a later term's. */
static int rec_write(baton_election *e, uint64_t fence, const char *value)
{
    sync_obj *o = baton__value_obj(e->rec);
    char buf[32 + BATON_OWNER_DESC_MAX + BATON_ELECTION_VALUE_MAX];
    int len = snprintf(buf, sizeof buf, "%" PRIu64 "\n%s\n%s", fence, e->l->owner.desc, value);
    for (int i = 0; i < CAS_TRIES; i++) {
        record r;
        uint64_t ver = 0;
        int rc = rec_read(e, e->rec, &r);
        if (rc) return rc;
        if (r.fence > fence)
            return baton_seterr(BATON_ELOST, 0, "election '%s': a later term (%" PRIu64 ") leads; this one (%" PRIu64
                                ") is over", e->name, r.fence, fence);
        rc = e->c->be->value->set(e->c->eng, o->st, buf, (size_t)len, r.version, &ver);
        if (rc != BATON_ECONFLICT) return rc;
    }
    return baton_seterr(BATON_EUNAVAILABLE, 0, "election '%s': %d compare-and-set rounds lost writing its record",
                        e->name, CAS_TRIES);
}

/* Whether lock info LI shows the term FENCE of HOLDER held now. Lock info's
 * fence is the last one handed out for the name: the holder's, or (a fair
 * lock that gives waiters their fence when they queue: Redis's) a waiter's,
 * larger; then the holder tells. */
static int holds_term(const baton_lockinfo *li, uint64_t fence, const char *holder)
{
    if (!li->held || !fence) return 0;
    return fence == li->fence || (fence < li->fence && holder[0] && !strcmp(holder, li->holder));
}

int baton__gelect_open(baton_election *e, const baton_lock_options *lo)
{
    baton_lock_options o = *lo;
    size_t n = strlen(BATON__ELECTION_PREFIX) + strlen(e->name) + 1;
    char *lname = malloc(n);
    int rc;
    if (!lname) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(lname, n, "%s%s", BATON__ELECTION_PREFIX, e->name);
    /* fair where the engine can: the oldest candidate leads */
    o.fair = (e->c->be->caps & BATON_CAP_FAIR) != 0;
    rc = baton_lock_open(&e->l, e->c, lname, &o);
    if (rc == BATON_ENOTSUP && o.fair) {
        /* a layout without fair locks (Redis's simple one): any waiter may lead next */
        o.fair = 0;
        rc = baton_lock_open(&e->l, e->c, lname, &o);
    }
    if (!rc && (rc = baton_value_open(&e->rec, e->c, lname))) {
        baton_lock_free(e->l);
        e->l = NULL;
    }
    free(lname);
    return rc;
}

int baton__gelect_granted(baton_election *e)
{
    int rc;
    if ((rc = baton__member_enter(&e->l->cm))) return rc;
    rc = rec_write(e, baton_lock_fence(e->l), e->value);
    baton__member_leave(&e->l->cm);
    if (rc) {
        /* a leader nobody can see is no leader: the next candidate's turn */
        baton_error saved = *baton_error_last();
        char msg[512];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        baton_lock_release(e->l);
        return baton_seterr(rc, saved.native, "%s", msg);
    }
    return 0;
}

int baton__gelect_proclaim(baton_election *e, const char *value)
{
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    uint64_t fence = baton_lock_fence(e->l);
    int rc;
    if ((rc = baton__member_enter(&e->l->cm))) return rc;
    /* the engine's word, not just ours: a lease may have run out there first */
    rc = e->c->be->lock->info(e->c->eng, e->l->name, &li);
    if (!rc && !holds_term(&li, fence, e->l->owner.desc))
        rc = baton_seterr(BATON_ELOST, 0, "election '%s': this candidate's term (%" PRIu64 ") is over", e->name,
                          fence);
    if (!rc) rc = rec_write(e, fence, value);
    baton__member_leave(&e->l->cm);
    return rc;
}

void baton__gelect_clear(baton_election *e)
{
    sync_obj *o = baton__value_obj(e->rec);
    uint64_t fence = baton_lock_fence(e->l);
    if (!fence || baton__member_enter(&e->l->cm)) return;
    for (int i = 0; i < CAS_TRIES; i++) {
        record r;
        int rc = rec_read(e, e->rec, &r);
        if (rc || r.version == 0 || r.fence != fence) break;
        rc = e->c->be->value->del(e->c->eng, o->st, r.version);
        if (rc != BATON_ECONFLICT) break;
    }
    baton__member_leave(&e->l->cm);
}

/* Who leads now: *stale set when the lock is held in a term the record does
 * not name yet. */
static int state_now(baton_election *e, baton_value *rv, record *r, uint64_t *fence, int *stale)
{
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    int rc = rec_read(e, rv, r);
    if (!rc) rc = e->c->be->lock->info(e->c->eng, e->l->name, &li);
    if (rc) return rc;
    *stale = 0;
    *fence = 0;
    if (!li.held) return 0;
    if (holds_term(&li, r->fence, r->holder)) *fence = r->fence;
    else *stale = 1;
    return 0;
}

int baton__gelect_leader(baton_election *e, baton_value *rv, uint64_t known_fence, const char *known_value,
                         char *value, size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w)
{
    sync_obj *o = baton__value_obj(rv);
    int64_t stale_since = 0;
    for (;;) {
        record r;
        uint64_t f;
        int stale, rc;
        int64_t now, until;
        if ((rc = state_now(e, rv, &r, &f, &stale))) return rc;
        now = baton_now_ns();
        if (!stale) stale_since = 0;
        else if (!stale_since) stale_since = now;
        else if (now - stale_since >= STALE_NS) stale = 0;   /* f is 0: nobody, as far as anyone can see */
        if (!stale) {
            const char *v = f ? r.value : "";
            if (deadline_ns == 0 || f != known_fence || strcmp(v, known_value)) {
                snprintf(value, n, "%s", v);
                *fence = f;
                return 0;
            }
            if (deadline_ns != INT64_MAX && now >= deadline_ns)
                return baton_seterr(BATON_ETIMEDOUT, 0, "election '%s': the leader has not changed", e->name);
        } else if (deadline_ns != 0 && deadline_ns != INT64_MAX && now >= deadline_ns) {
            return baton_seterr(BATON_ETIMEDOUT, 0, "election '%s': the leader has not changed", e->name);
        }
        until = now + REREAD_NS;
        if (stale && stale_since + STALE_NS < until) until = stale_since + STALE_NS;
        if (deadline_ns != 0 && deadline_ns < until) until = deadline_ns;
        rc = e->c->be->value->watch(e->c->eng, o->st, r.version, until, w);
        if (rc && rc != BATON_ETIMEDOUT) return rc;
    }
}
