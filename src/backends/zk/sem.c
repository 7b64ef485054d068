/*
 * Permits, in Curator's InterProcessSemaphoreV2 layout:
 *
 *   <dir>/locks/_c_<uuid>-lock-<seq>     the mutex a waiting acquirer holds
 *   <dir>/leases/_c_<uuid>-lease-<seq>   one ephemeral node per permit taken
 *   <dir>/count                          the number of permits, decimal text
 *
 * A lease node whose rank among the leases (by sequence) is below the count
 * holds a permit. Ranks only fall (older nodes leave, newer ones come after),
 * so at most count nodes ever hold one, and a holder by Curator's rule
 * (leases <= count, checked under the mutex) holds one by ours too.
 * A blocking acquire takes the mutex first, as Curator does, so a Curator
 * waiter never waits behind a baton waiter's lease node; a try skips it
 * (it only ever holds its node for one look).
 *
 * Curator keeps the count in its clients; baton keeps it in <dir>/count so
 * every client agrees (a Curator client is given the same count by hand).
 * A permit lives as long as the session that took it: lease_ms is not used.
 */
#include "zk_int.h"
#include "core/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECHECK_MS 5000

typedef struct {
    zeng *e;
    char *dir, *leases, *locks, *count;
    uint64_t slot;
    pthread_mutex_t mu;      /* one acquirer at a time per handle (it owns the slot) */
    /* The permits this handle took, with the session they live on, so a
     * renewal can say "lost" without a round trip once that session is
     * gone (the newest few; others are checked at the server only). */
    pthread_mutex_t hmu;
    struct { char id[BATON_PERMIT_ID_SIZE]; uint64_t gen; } held[16];
    unsigned nheld;
} zperm;

static void held_add(zperm *p, const char *id, uint64_t gen)
{
    pthread_mutex_lock(&p->hmu);
    unsigned i = p->nheld < 16 ? p->nheld++ : (memmove(p->held, p->held + 1, 15 * sizeof p->held[0]), 15);
    snprintf(p->held[i].id, sizeof p->held[i].id, "%s", id);
    p->held[i].gen = gen;
    pthread_mutex_unlock(&p->hmu);
}

static void held_del(zperm *p, const char *id)
{
    pthread_mutex_lock(&p->hmu);
    for (unsigned i = 0; i < p->nheld; i++)
        if (!strcmp(p->held[i].id, id)) {
            memmove(p->held + i, p->held + i + 1, (p->nheld - i - 1) * sizeof p->held[0]);
            p->nheld--;
            break;
        }
    pthread_mutex_unlock(&p->hmu);
}

/* The session generation ID was taken on by this handle; 0 when unknown. */
static uint64_t held_gen(zperm *p, const char *id)
{
    uint64_t g = 0;
    pthread_mutex_lock(&p->hmu);
    for (unsigned i = 0; i < p->nheld; i++)
        if (!strcmp(p->held[i].id, id)) g = p->held[i].gen;
    pthread_mutex_unlock(&p->hmu);
    return g;
}

int zk_permits_new(void *eng, const char *name, void **st)
{
    zeng *e = eng;
    zperm *p = calloc(1, sizeof *p);
    int rc;
    *st = NULL;
    if (!p) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    p->e = e;
    if ((rc = zk_path(e, name, NULL, &p->dir)) || (rc = zk_path(e, name, "leases", &p->leases)) ||
        (rc = zk_path(e, name, "locks", &p->locks)) || (rc = zk_path(e, name, "count", &p->count)))
        goto fail;
    if (!(p->slot = zk_slot_open(e))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->hmu, NULL);
    *st = p;
    return 0;
fail:
    free(p->dir);
    free(p->leases);
    free(p->locks);
    free(p->count);
    free(p);
    return rc;
}

void zk_permits_free(void *eng, void *st)
{
    zperm *p = st;
    (void)eng;
    if (!p) return;
    zk_slot_close(p->e, p->slot);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->hmu);
    free(p->dir);
    free(p->leases);
    free(p->locks);
    free(p->count);
    free(p);
}

/* The count (0 when never set); with a watch on it when SLOT. */
static int read_count(zsess *s, zperm *p, uint64_t slot, int64_t *out, int *exists, int64_t dl)
{
    char buf[32];
    struct Stat st;
    int len = sizeof buf - 1, zrc;
    *out = 0;
    if (exists) *exists = 0;
    zrc = zk_get(s, p->count, slot ? zk_node_watcher : NULL, slot ? ZK_SLOT_CTX(slot) : NULL, buf, &len, &st, dl);
    if (zrc == ZNONODE) {
        if (slot) zrc = zk_exists(s, p->count, zk_node_watcher, ZK_SLOT_CTX(slot), &st, dl);
        return zrc == ZNONODE || zrc == ZOK ? ZOK : zrc;
    }
    if (zrc != ZOK) return zrc;
    buf[len < 0 ? 0 : len] = 0;
    *out = strtoll(buf, NULL, 10);
    if (exists) *exists = 1;
    return ZOK;
}

/* The lease nodes, sorted; with a children watch when SLOT. */
static int list_leases(zsess *s, zperm *p, uint64_t slot, struct String_vector *sv, zchild **c, int *n, int64_t dl)
{
    int zrc = zk_get_children(s, p->leases, slot ? zk_node_watcher : NULL, slot ? ZK_SLOT_CTX(slot) : NULL, sv, dl);
    *c = NULL;
    *n = 0;
    if (zrc == ZNONODE) return ZOK;
    if (zrc != ZOK) return zrc;
    if (zk_contenders(sv, ZK_K_LEASE, c, n)) return ZSYSTEMERROR;
    return ZOK;
}

static void id_to_uuid(const char *id, char uuid[37])
{
    snprintf(uuid, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", id, id + 8, id + 12, id + 16, id + 20);
}

static int acquire(zeng *e, zperm *p, int64_t deadline_ns, baton_waiter *w, char id[BATON_PERMIT_ID_SIZE]);

int zk_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                       char id[BATON_PERMIT_ID_SIZE])
{
    zperm *p = st;
    int rc;
    (void)lease_ms; /* the session keeps the permit */
    pthread_mutex_lock(&p->mu);
    /* a free permit is taken without the mutex; only a waiter queues on it */
    rc = acquire(eng, p, 0, w, id);
    if (rc == BATON_ELOCKED && deadline_ns != 0) rc = acquire(eng, p, deadline_ns, w, id);
    pthread_mutex_unlock(&p->mu);
    /* the session that granted it, unless it died since (then a later
     * renewal finds the node under an old session's id) */
    if (rc == 0) held_add(p, id, zk_live_gen(eng));
    return rc;
}

static int acquire(zeng *e, zperm *p, int64_t deadline_ns, baton_waiter *w, char id[BATON_PERMIT_ID_SIZE])
{
    zsess *s = NULL;
    zlock *mx = NULL;
    baton_owner o;
    baton_acquire_req req;
    char prefix[64], *node = NULL;
    struct Stat nst;
    int rc, zrc, have_mutex = 0;

    if ((rc = baton__owner_init(&o))) return rc;
    if (deadline_ns != 0) {
        /* Curator's mutex: only its holder waits with a lease node */
        if ((rc = zk_lock_init(e, p->locks, ZK_LOCK, &mx))) goto out;
        memset(&req, 0, sizeof req);
        req.owner = &o;
        req.deadline_ns = deadline_ns;
        req.waiter = w;
        if ((rc = zk_lock_acquire(e, mx, &req))) goto out;
        have_mutex = 1;
    }
    {
        int64_t cd = zk_deadline_ms(e->connect_timeout_ms), dd = zk_call_deadline(e, deadline_ns);
        if ((rc = zk_sess_get(e, cd < dd ? cd : dd, &s))) goto out;
    }
    snprintf(prefix, sizeof prefix, "_c_%s-lease-", o.uuid);
    memset(&nst, 0, sizeof nst);
    if ((rc = zk_create_seq(e, s, p->leases, prefix, o.desc, &node, &nst, NULL, NULL, NULL, NULL,
                            zk_call_deadline(e, deadline_ns)))) {
        if (rc == ZK_AGAIN) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the session ended during the acquire");
        goto out;
    }
    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        uint64_t slot = deadline_ns && w ? p->slot : 0;
        struct String_vector sv = { 0, NULL };
        zchild *c = NULL;
        int64_t max = 0;
        int n = 0, rank = -1;
        int64_t cd = zk_call_deadline(e, deadline_ns);

        if (slot) zk_slot_arm(e, slot, w);
        zrc = read_count(s, p, slot, &max, NULL, cd);
        if (zrc == ZOK) zrc = list_leases(s, p, slot, &sv, &c, &n, cd);
        for (int i = 0; i < n; i++)
            if (!strcmp(c[i].name, strrchr(node, '/') + 1)) rank = i;
        free(c);
        deallocate_String_vector(&sv);
        if (zrc != ZOK) {
            if (zrc == ZCONNECTIONLOSS && baton_now_ns() < cd && zk_sess_wait(e, s, cd) == 0) continue;
            rc = zk_err(zrc, "read permits", p->dir);
            break;
        }
        if (rank < 0) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: %s: our lease node vanished (session lost)", p->dir);
            break;
        }
        if (rank < max) {
            snprintf(id, BATON_PERMIT_ID_SIZE, "%s", o.hex);
            rc = 0;
            break;
        }
        if (w && baton_waiter_canceled(w)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "zk: permit acquire canceled");
            break;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(deadline_ns ? BATON_ETIMEDOUT : BATON_ELOCKED, 0, "zk: %s: no permit free (%" PRId64
                              " of %" PRId64 " taken)", p->dir, (int64_t)n - 1, max);
            break;
        }
        if (!slot) {
            rc = baton_seterr(BATON_ELOCKED, 0, "zk: %s: no permit free", p->dir);
            break;
        }
        {
            int64_t until = baton_now_ns() + (int64_t)RECHECK_MS * 1000000LL;
            if (until > deadline_ns) until = deadline_ns;
            baton_waiter_park(w, gen, until);
        }
        if (zk_sess_dead(e, s)) {
            rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the session ended while waiting for a permit");
            break;
        }
    }
    zk_slot_arm(e, p->slot, NULL);
    if (rc && node) {
        zrc = zk_delete(s, node, -1, zk_call_deadline(e, deadline_ns));
        if (zk_retryable(zrc)) zk_orphan_add(e, node, s->gen);
    }
out:
    if (have_mutex) zk_lock_release(e, mx, &o);
    if (mx) zk_lock_free(e, mx);
    free(node);
    zk_sess_put(e, s);
    return rc;
}

/* The lease node of permit ID: 1 and *path, 0 when none. */
static int find_lease(zsess *s, zperm *p, const char *id, char **path, int64_t dl)
{
    char uuid[37], prefix[64];
    struct String_vector sv = { 0, NULL };
    int zrc, found = 0;
    *path = NULL;
    id_to_uuid(id, uuid);
    snprintf(prefix, sizeof prefix, "_c_%s-lease-", uuid);
    zrc = zk_get_children(s, p->leases, NULL, NULL, &sv, dl);
    if (zrc == ZNONODE) return 0;
    if (zrc != ZOK) return zk_err(zrc, "list", p->leases);
    for (int i = 0; i < sv.count && !found; i++)
        if (!strncmp(sv.data[i], prefix, strlen(prefix))) {
            size_t n = strlen(p->leases) + strlen(sv.data[i]) + 2;
            if (!(*path = malloc(n))) {
                deallocate_String_vector(&sv);
                return baton_seterr(BATON_ENOMEM, 0, "out of memory");
            }
            snprintf(*path, n, "%s/%s", p->leases, sv.data[i]);
            found = 1;
        }
    deallocate_String_vector(&sv);
    return found;
}

int zk_permits_release(void *eng, void *st, const char *id)
{
    zeng *e = eng;
    zperm *p = st;
    zsess *s;
    char *path = NULL;
    int rc, zrc;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) return rc;
    rc = find_lease(s, p, id, &path, end);
    if (rc == 0) {
        rc = baton_seterr(BATON_ENOTOWNER, 0, "zk: %s: no permit %s (released, or its session ended)", p->dir, id);
    } else if (rc > 0) {
        zrc = zk_delete(s, path, -1, end);
        if (zrc == ZOK || zrc == ZNONODE) held_del(p, id);
        rc = zrc == ZOK ? 0
           : zrc == ZNONODE ? baton_seterr(BATON_ENOTOWNER, zrc, "zk: %s: permit %s is gone", p->dir, id)
                            : zk_err(zrc, "delete", path);
    }
    free(path);
    zk_sess_put(e, s);
    return rc;
}

int zk_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    zeng *e = eng;
    zperm *p = st;
    zsess *s;
    char *path = NULL;
    int rc;
    (void)lease_ms; /* the session keeps it: nothing to extend */
    /* Taken by this handle on a session that is no longer the live one: it
     * was given up (or expired), so the permit is gone or about to be,
     * whatever the server says later. Said at once, without a round trip. */
    uint64_t g = held_gen(p, id);
    if (g && g != zk_live_gen(e))
        return baton_seterr(BATON_ELOST, 0, "zk: %s: permit %s: its session was lost", p->dir, id);
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) return rc;
    rc = find_lease(s, p, id, &path, end);
    if (rc == 0) {
        rc = baton_seterr(BATON_ENOTOWNER, 0, "zk: %s: no permit %s (released, or its session ended)", p->dir, id);
    } else if (rc > 0) {
        /* The node may still be there from an earlier session of ours that
         * was given up but not yet expired by the server: not ours now. */
        struct Stat st;
        const clientid_t *cid = zoo_client_id(s->zh);
        int zrc = zk_exists(s, path, NULL, NULL, &st, end);
        if (zrc == ZNONODE)
            rc = baton_seterr(BATON_ENOTOWNER, 0, "zk: %s: no permit %s (released, or its session ended)", p->dir, id);
        else if (zrc != ZOK)
            rc = zk_err(zrc, "exists", path);
        else if (zk_old_session(e, st.ephemeralOwner) && !(cid && st.ephemeralOwner == cid->client_id))
            rc = baton_seterr(BATON_ELOST, 0, "zk: %s: permit %s belongs to a lost session", p->dir, id);
        else
            rc = 0;
    }
    free(path);
    zk_sess_put(e, s);
    return rc;
}

/* Creates the count node with V; ZNODEEXISTS when it is there. */
static int create_count(zeng *e, zsess *s, zperm *p, int64_t v, int64_t dl)
{
    char buf[32];
    int zrc;
    snprintf(buf, sizeof buf, "%" PRId64, v);
    zrc = zk_create(s, p->count, buf, (int)strlen(buf), zk_acl(e), ZOO_PERSISTENT, NULL, 0, NULL, dl);
    if (zrc == ZNONODE) {
        if (zk_mkdirs(e, s, p->dir, dl)) return ZSYSTEMERROR;
        zrc = zk_create(s, p->count, buf, (int)strlen(buf), zk_acl(e), ZOO_PERSISTENT, NULL, 0, NULL, dl);
    }
    return zrc;
}

int zk_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    zeng *e = eng;
    zperm *p = st;
    zsess *s;
    int rc = 0, zrc = ZOK;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */

    if (op != BATON_CTL_TRY_SET && op != BATON_CTL_ADD && op != BATON_CTL_AVAILABLE)
        return baton_seterr(BATON_ENOTSUP, 0, "zk: permits cannot do that");
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) return rc;
    switch (op) {
    case BATON_CTL_TRY_SET:
        zrc = create_count(e, s, p, arg, end);
        if (out) *out = zrc == ZOK;
        if (zrc == ZNODEEXISTS) zrc = ZOK;
        break;
    case BATON_CTL_ADD:
        /* compare-and-set on the node's version */
        for (int tries = 0; tries < 100; tries++) {
            char buf[32];
            struct Stat nst;
            int len = sizeof buf - 1;
            zrc = zk_get(s, p->count, NULL, NULL, buf, &len, &nst, end);
            if (zrc == ZNONODE) {
                zrc = create_count(e, s, p, arg, end);
                if (zrc == ZNODEEXISTS) continue;
                break;
            }
            if (zrc != ZOK) break;
            buf[len < 0 ? 0 : len] = 0;
            int64_t cur = (int64_t)strtoll(buf, NULL, 10);
            /* past int64 is refused, the count unchanged: never a wrap */
            if ((arg > 0 && cur > INT64_MAX - arg) || (arg < 0 && cur < INT64_MIN - arg)) {
                rc = baton_seterr(BATON_EINVAL, 0, "zk: permits of %s: %" PRId64 " %+" PRId64 " is out of range",
                                  p->count, cur, arg);
                zk_sess_put(e, s);
                return rc;
            }
            snprintf(buf, sizeof buf, "%" PRId64, cur + arg);
            zrc = zk_set(s, p->count, buf, (int)strlen(buf), nst.version, end);
            if (zrc != ZBADVERSION) break;
        }
        break;
    case BATON_CTL_AVAILABLE: {
        struct String_vector sv = { 0, NULL };
        zchild *c = NULL;
        int64_t max = 0;
        int n = 0;
        zrc = read_count(s, p, 0, &max, NULL, end);
        if (zrc == ZOK) zrc = list_leases(s, p, 0, &sv, &c, &n, end);
        free(c);
        deallocate_String_vector(&sv);
        if (zrc == ZOK && out) *out = max - n;
        break;
    }
    }
    if (zrc != ZOK) rc = zk_err(zrc, "permits", p->count);
    zk_sess_put(e, s);
    return rc;
}
