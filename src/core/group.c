/* Group membership, and the double barrier built on a group plus a value.
 * A membership is a lock on the engine's member state (renewal, loss and
 * on_lost come from the lock); the group handle itself holds no engine
 * state, only a client membership so list and watch calls are gated and
 * cancellable like every other call. */
#include "sync.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct baton_group {
    sync_obj o;                 /* first: sync.c frees the handle through it */
    baton_group_options opts;
    pthread_mutex_t mu;         /* guards l and id against is_member/id readers */
    baton_lock *l;              /* the membership, from join until leave or free */
    char id[BATON_MEMBER_ID_MAX + 1];
    char value[BATON_MEMBER_VALUE_MAX + 1];
    baton_members last;         /* what watch reported last */
    int watched;
};

struct baton_barrier {
    baton_group *g;
    baton_value *ready;
    uint32_t count;
};

void baton_members_clear(baton_members *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->members[i].id);
        free(m->members[i].value);
    }
    free(m->members);
    memset(m, 0, sizeof *m);
}

/* No engine state: the handle is a gate and a parking spot. */
static int no_state(void *eng, const char *name, void **st)
{
    (void)eng;
    (void)name;
    *st = NULL;
    return 0;
}

static void no_free(void *eng, void *st)
{
    (void)eng;
    (void)st;
}

static void group_on_free(sync_obj *o)
{
    baton_group *g = (baton_group *)o;
    if (g->l) baton_lock_free(g->l);
    baton_members_clear(&g->last);
    pthread_mutex_destroy(&g->mu);
}

int baton_group_open(baton_group **out, baton_client *c, const char *name, const baton_group_options *opts)
{
    static const size_t sizes[] = { sizeof(baton_group_options) };
    baton_group_options o = BATON_GROUP_OPTIONS_INIT;
    baton_group *g;
    int rc;
    NEED(out, "baton_group_open");
    *out = NULL;
    if ((rc = baton__opts_copy(&o, opts, sizes, BATON_GROUP_OPTIONS_VERSION, "group options"))) return rc;
    if (!(g = calloc(1, sizeof *g))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    g->opts = o;
    if ((rc = baton__sync_open(&g->o, c, name, c ? c->be->group : NULL, no_state, no_free, "group membership"))) {
        pthread_mutex_destroy(&g->mu);
        free(g);
        return rc;
    }
    g->o.on_free = group_on_free;
    *out = g;
    return 0;
}

static int id_check(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > BATON_MEMBER_ID_MAX)
        return baton_seterr(BATON_EINVAL, 0, "a member id is 1 to %d bytes", BATON_MEMBER_ID_MAX);
    if (strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n)
        return baton_seterr(BATON_EINVAL, 0, "member id '%s': only letters, digits, '.', '_' and '-'", id);
    return 0;
}

static void group_lost(baton_lock *l, void *payload)
{
    baton_group *g = payload;
    (void)l;
    if (g->opts.on_lost) g->opts.on_lost(g, g->opts.on_lost_payload);
}

int baton_group_join(baton_group *g, const char *id, const char *value)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    char rid[BATON_MEMBER_ID_MAX + 1];
    void *st = NULL;
    int rc;
    NEED(g, "baton_group_join");
    if (!value) value = "";
    if (strlen(value) > BATON_MEMBER_VALUE_MAX)
        return baton_seterr(BATON_EINVAL, 0, "a member's value is %zu bytes; the limit is %d", strlen(value),
                            BATON_MEMBER_VALUE_MAX);
    if (id) {
        if ((rc = id_check(id))) return rc;
        snprintf(rid, sizeof rid, "%s", id);
    } else {
        baton_owner o;
        if ((rc = baton__owner_init(&o))) return rc;
        snprintf(rid, sizeof rid, "%s", o.hex);
    }
    pthread_mutex_lock(&g->mu);
    if (g->l) {
        pthread_mutex_unlock(&g->mu);
        return baton_seterr(BATON_EDEADLK, 0, "group '%s': this handle is a member already (leave first)",
                            g->o.name);
    }
    pthread_mutex_unlock(&g->mu);
    ENTER(&g->o);
    lo.lease_ms = g->opts.lease_ms;
    lo.on_lost = group_lost;
    lo.on_lost_payload = g;
    if ((rc = g->o.c->be->group->create(g->o.c->eng, g->o.name, rid, &lo, &st))) LEAVE(&g->o, rc);
    if ((rc = baton__lock_create(&l, g->o.c, g->o.name, &lo, st))) {
        g->o.c->be->lock->destroy(g->o.c->eng, st);
        LEAVE(&g->o, rc);
    }
    snprintf(g->value, sizeof g->value, "%s", value);
    l->value = g->value;
    baton__member_leave(&g->o.cm);
    /* A join never waits for other members: one attempt. */
    if ((rc = baton_lock_acquire(l, 0))) {
        if (rc == BATON_ELOCKED)
            rc = baton_seterr(BATON_ELOCKED, 0, "group '%s': a live member has the id '%s'", g->o.name, rid);
        baton_lock_free(l);
        return rc;
    }
    pthread_mutex_lock(&g->mu);
    g->l = l;
    snprintf(g->id, sizeof g->id, "%s", rid);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int baton_group_leave(baton_group *g)
{
    baton_lock *l;
    int rc;
    NEED(g, "baton_group_leave");
    pthread_mutex_lock(&g->mu);
    l = g->l;
    g->l = NULL;
    pthread_mutex_unlock(&g->mu);
    if (!l) return baton_seterr(BATON_ENOTHELD, 0, "group '%s': this handle is not a member", g->o.name);
    rc = baton_lock_release(l);
    if (rc == BATON_ENOTHELD)
        rc = baton_seterr(BATON_ELOST, 0, "group '%s': the membership was lost before this leave", g->o.name);
    baton_lock_free(l);
    return rc;
}

int baton_group_is_member(const baton_group *g)
{
    int m;
    if (!g) return 0;
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    m = g->l && baton_lock_held(g->l);
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
    return m;
}

const char *baton_group_id(const baton_group *g)
{
    return g && g->id[0] ? g->id : NULL;
}

int baton_group_deadline(const baton_group *g, int64_t *mono_ns)
{
    int rc;
    NEED(g, "baton_group_deadline");
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    rc = g->l ? baton_lock_deadline(g->l, mono_ns)
              : baton_seterr(BATON_ENOTHELD, 0, "group '%s': this handle is not a member", g->o.name);
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
    return rc;
}

/* ---- listing ---- */

typedef struct {
    baton_members m;
    size_t cap;
    int err;
} collect;

static void collect_one(void *arg, const char *id, const char *value)
{
    collect *k = arg;
    if (k->err) return;
    if (k->m.n == k->cap) {
        size_t nc = k->cap ? k->cap * 2 : 8;
        baton_member *nm = realloc(k->m.members, nc * sizeof *nm);
        if (!nm) {
            k->err = 1;
            return;
        }
        k->m.members = nm;
        k->cap = nc;
    }
    k->m.members[k->m.n].id = strdup(id ? id : "");
    k->m.members[k->m.n].value = strdup(value ? value : "");
    if (!k->m.members[k->m.n].id || !k->m.members[k->m.n].value) {
        free(k->m.members[k->m.n].id);
        free(k->m.members[k->m.n].value);
        k->err = 1;
        return;
    }
    k->m.n++;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const baton_member *)a)->id, ((const baton_member *)b)->id);
}

static int list_members(baton_group *g, baton_members *out, uint64_t *token)
{
    collect k;
    int rc;
    memset(&k, 0, sizeof k);
    rc = g->o.c->be->group->list(g->o.c->eng, g->o.name, collect_one, &k, token);
    if (!rc && k.err) rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (rc) {
        baton_members_clear(&k.m);
        return rc;
    }
    if (k.m.n > 1) qsort(k.m.members, k.m.n, sizeof *k.m.members, by_id);
    *out = k.m;
    return 0;
}

int baton_group_members(baton_group *g, baton_members *out)
{
    uint64_t token = 0;
    NEED(g && out, "baton_group_members");
    memset(out, 0, sizeof *out);
    ENTER(&g->o);
    LEAVE(&g->o, list_members(g, out, &token));
}

static int same_members(const baton_members *a, const baton_members *b)
{
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->members[i].id, b->members[i].id) || strcmp(a->members[i].value, b->members[i].value))
            return 0;
    return 1;
}

static int copy_members(baton_members *dst, const baton_members *src)
{
    collect k;
    memset(&k, 0, sizeof k);
    for (size_t i = 0; i < src->n; i++) collect_one(&k, src->members[i].id, src->members[i].value);
    if (k.err) {
        baton_members_clear(&k.m);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *dst = k.m;
    return 0;
}

/* Lists until the members differ from KNOWN (NULL: answer at once). */
static int watch_members(baton_group *g, const baton_members *known, baton_members *out, int64_t deadline)
{
    for (;;) {
        uint64_t token = 0;
        int rc = list_members(g, out, &token);
        if (rc) return rc;
        if (!known || !same_members(known, out)) return 0;
        baton_members_clear(out);
        if (deadline == 0 || (deadline != INT64_MAX && baton_now_ns() >= deadline))
            return baton_seterr(BATON_ETIMEDOUT, 0, "group '%s' did not change", g->o.name);
        rc = g->o.c->be->group->watch(g->o.c->eng, g->o.name, token, deadline, &g->o.w);
        if (rc && rc != BATON_ETIMEDOUT) return rc;
    }
}

int baton_group_watch(baton_group *g, baton_members *out, int64_t wait_ms)
{
    int64_t d;
    int rc;
    NEED(g && out, "baton_group_watch");
    memset(out, 0, sizeof *out);
    ENTER(&g->o);
    if (!(rc = baton__sync_begin(&g->o, wait_ms, &d))) {
        rc = baton__sync_end(&g->o, watch_members(g, g->watched ? &g->last : NULL, out, d));
        if (!rc) {
            baton_members copy;
            if (!(rc = copy_members(&copy, out))) {
                baton_members_clear(&g->last);
                g->last = copy;
                g->watched = 1;
            } else {
                baton_members_clear(out);
            }
        }
    }
    LEAVE(&g->o, rc);
}

int baton_group_cancel(baton_group *g)
{
    NEED(g, "baton_group_cancel");
    baton__waiter_cancel(&g->o.w);
    return 0;
}

void baton_group_free(baton_group *g)
{
    if (!g) return;
    /* the membership is a client member of its own: free leaves it */
    baton__member_free(&g->o.cm);
}

/* ---- double barrier ---- */

int baton_barrier_open(baton_barrier **out, baton_client *c, const char *name, uint32_t count,
                       const baton_group_options *opts)
{
    baton_barrier *b;
    int rc;
    NEED(out, "baton_barrier_open");
    *out = NULL;
    if (count == 0) return baton_seterr(BATON_EINVAL, 0, "a barrier needs at least one member");
    if (!(b = calloc(1, sizeof *b))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    b->count = count;
    if ((rc = baton_group_open(&b->g, c, name, opts))) goto fail;
    if ((rc = baton_value_open(&b->ready, c, name))) goto fail;
    *out = b;
    return 0;
fail:
    if (rc == BATON_ENOTSUP && c)
        rc = baton_seterr(rc, 0, "the %s backend has no double barrier (it needs groups and values)",
                          c->be->info->name);
    baton_group_free(b->g);
    free(b);
    return rc;
}

static int ready_now(baton_barrier *b, int *ready)
{
    baton_value_data d;
    int rc = baton_value_get(b->ready, &d);
    *ready = rc == 0;
    baton_value_data_clear(&d);
    return rc == BATON_ENOENT ? 0 : rc;
}

#define BARRIER_LOOK_MS 1000

/* Waits (on the group's watch) until DONE says the barrier is passed. */
static int barrier_wait(baton_barrier *b, int entering, int64_t wait_ms)
{
    baton_members m;
    int64_t deadline;
    int rc, first = 1;
    baton__wait_deadline_ns(wait_ms, &deadline);
    for (;;) {
        int64_t left = -1;
        int ready = 0;
        if (!first && deadline != INT64_MAX) {
            int64_t now = baton_now_ns();
            if (deadline == 0 || now >= deadline) return baton_seterr(BATON_ETIMEDOUT, 0, "barrier wait timed out");
            left = (deadline - now + 999999) / 1000000;   /* round up: never a 0 that means "try once" */
        }
        /* entering: the last party may set the mark and leave again before
         * this one's watch sees it among the members (a polling engine's
         * watch does not return for a member that came and went), so the
         * mark is looked at every BARRIER_LOOK_MS too */
        if (entering && !first && (left < 0 || left > BARRIER_LOOK_MS)) left = BARRIER_LOOK_MS;
        rc = baton_group_watch(b->g, &m, first ? 0 : left);
        first = 0;
        if (rc == BATON_ETIMEDOUT && entering) {
            if ((rc = ready_now(b, &ready))) return rc;
            if (ready) return 0;
            continue;
        }
        if (rc == BATON_ETIMEDOUT) continue;
        if (rc) return rc;
        if (entering) {
            /* enough have entered, or they did and some left already: the mark says so */
            if (m.n >= b->count) {
                rc = baton_value_set(b->ready, "ready", 5, BATON_VALUE_ANY, NULL);
                ready = 1;
            } else {
                rc = ready_now(b, &ready);
            }
        } else if (m.n == 0) {
            rc = baton_value_delete(b->ready, BATON_VALUE_ANY);
            if (rc == BATON_ENOENT) rc = 0;
            ready = 1;
        }
        baton_members_clear(&m);
        if (rc) return rc;
        if (ready) return 0;
        if (deadline == 0) return baton_seterr(BATON_ETIMEDOUT, 0, "barrier not passed");
    }
}

int baton_barrier_enter(baton_barrier *b, int64_t wait_ms)
{
    int rc;
    NEED(b, "baton_barrier_enter");
    if ((rc = baton_group_join(b->g, NULL, ""))) return rc;
    if ((rc = barrier_wait(b, 1, wait_ms))) baton_group_leave(b->g);
    return rc;
}

int baton_barrier_leave(baton_barrier *b, int64_t wait_ms)
{
    int rc;
    NEED(b, "baton_barrier_leave");
    if ((rc = baton_group_leave(b->g))) return rc;
    return barrier_wait(b, 0, wait_ms);
}

int baton_barrier_cancel(baton_barrier *b)
{
    NEED(b, "baton_barrier_cancel");
    return baton_group_cancel(b->g);
}

void baton_barrier_free(baton_barrier *b)
{
    if (!b) return;
    baton_group_free(b->g);
    baton_value_free(b->ready);
    free(b);
}
