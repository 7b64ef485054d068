/*
 * Group members and queue takers: lock states (zlock) of kinds ZK_MEMBER and
 * ZK_TAKER, driven by the lock methods (lock.c dispatches acquire and
 * release here), so sessions, loss reports and orphans work as for locks.
 *
 * Groups (kazoo Party's nodes, Curator GroupMember's rule of one node per
 * member):
 *   <group_root>/NAME                    persistent (kazoo caches that it made it)
 *   <group_root>/NAME/<id>__party__      ephemeral, data = the member's value
 * kazoo's Party lists every child whose name holds "__party__" and yields
 * its data, so baton's members show there with their values; its own
 * members are "<uuid hex>__party__" holding the identifier, which baton
 * lists as id <uuid hex> with the identifier as value. Any other ephemeral
 * child (Curator GroupMember's "<id>") is listed as a member too; children
 * that are not ephemeral (a nested group's node) are not members.
 *
 * Queues (kazoo LockingQueue's layout):
 *   <queue_root>/NAME/entries/entry-100-<seq>   persistent sequential, the item
 *   <queue_root>/NAME/taken/<entry name>        ephemeral, the taker's id (hex)
 * An entry with a taken node is held; the oldest entry (by name: priority,
 * then sequence) without one is the next to take. done deletes the entry,
 * then the taken node; giving back deletes the taken node.
 */
#include "zk_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARTY "__party__"
#define ENTRY_PREFIX "entry-100-"

static int64_t session_id(zsess *s)
{
    const clientid_t *cid = zoo_client_id(s->zh);
    return cid ? cid->client_id : 0;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int session(zeng *e, int64_t deadline, zsess **s)
{
    int64_t cd = zk_deadline_ms(e->connect_timeout_ms), dd = zk_call_deadline(e, deadline);
    return zk_sess_get(e, cd < dd ? cd : dd, s);
}

/* Records NODE (czxid FENCE, made on S) as L's; ZK_AGAIN when S died
 * meanwhile (the node is lost with it). Takes NODE. */
static int own(zeng *e, zsess *s, zlock *l, char *node, uint64_t fence)
{
    int rc = 0;
    pthread_mutex_lock(&e->mu);
    free(l->node);
    l->node = node;
    l->gen = s->gen;
    l->fence = fence;
    l->lost = 0;
    if (s->dead) {
        l->lost = 1;
        rc = ZK_AGAIN;
    }
    pthread_mutex_unlock(&e->mu);
    if (!rc) zk_arm_held(e, s, l);
    return rc;
}

/* Creates the ephemeral PATH holding DATA (after a lost answer, a node of
 * ours found there is taken as made): ZOK with *CZXID, ZNODEEXISTS when
 * another holds it, ZNONODE when the parent is missing, or a failure. */
static int create_ephemeral(zeng *e, zsess *s, const char *path, const char *data, int len, uint64_t *czxid,
                            int64_t deadline)
{
    int zrc = ZOK, lost = 0;
    if (zk_orphan_claim(e, path)) zk_delete(s, path, -1, deadline);
    for (int tries = 0; tries < 3; tries++) {
        struct Stat st;
        zcall *c = zk_start_create(s, path, data, len, zk_acl(e), ZOO_EPHEMERAL, &zrc);
        if (!c) return zrc;
        zrc = zk_call_wait(c, deadline);
        if (zrc == ZOK) *czxid = (uint64_t)zk_call_stat(c)->czxid;
        zk_call_put(c);
        if (zrc == ZNODEEXISTS && lost) {
            /* our first create may have been made before the loss */
            if (zk_exists(s, path, NULL, NULL, &st, deadline) == ZOK && st.ephemeralOwner == session_id(s)) {
                *czxid = (uint64_t)st.czxid;
                return ZOK;
            }
        }
        if (zrc != ZCONNECTIONLOSS || zk_sess_wait(e, s, deadline)) return zrc;
        lost = 1;
    }
    return zrc;
}

/* ---- members -------------------------------------------------------------- */

int zk_member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    zeng *e = eng;
    zlock *l = NULL;
    char *dir = NULL;
    int rc;
    (void)opts; /* a member lives as long as the session: nothing to lease */
    *st = NULL;
    if ((rc = zk_path_in(e, e->gbase, name, NULL, &dir))) return rc;
    rc = zk_lock_init(e, dir, ZK_MEMBER, &l);
    free(dir);
    if (rc) return rc;
    if (!(l->id = malloc(strlen(id) + sizeof PARTY))) {
        zk_lock_free(e, l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    sprintf(l->id, "%s%s", id, PARTY);
    *st = l;
    return 0;
}

int zk_member_acquire(zeng *e, zlock *l, baton_acquire_req *req)
{
    const char *value = req->value ? req->value : "";
    char *path = join(l->dir, l->id);
    int rc = 0;
    if (!path) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (int round = 0; round < 3; round++) {
        zsess *s = NULL;
        uint64_t czxid = 0;
        int zrc;
        int64_t end = zk_call_deadline(e, req->deadline_ns);
        if ((rc = session(e, req->deadline_ns, &s))) break;
        zrc = create_ephemeral(e, s, path, value, (int)strlen(value), &czxid, end);
        if (zrc == ZNONODE) {
            /* the group's node: persistent, as kazoo's Party makes it */
            if ((zrc = zk_mkpath(e, s, l->dir, ZOO_PERSISTENT, end)) == ZOK)
                zrc = create_ephemeral(e, s, path, value, (int)strlen(value), &czxid, end);
        }
        if (zrc == ZOK) {
            char *node = strdup(path);
            rc = node ? own(e, s, l, node, czxid) : baton_seterr(BATON_ENOMEM, 0, "out of memory");
        } else if (zrc == ZNODEEXISTS) {
            rc = baton_seterr(BATON_ELOCKED, 0, "zk: %s: a live member has this id", path);
        } else {
            rc = zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, "join", path);
        }
        zk_sess_put(e, s);
        if (rc != ZK_AGAIN) break;
        free(zk_take_node(e, l, NULL, NULL));
        rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the session ended while joining %s", l->dir);
    }
    if (rc == 0) {
        req->fence = l->fence;
        req->sent_ns = baton_now_ns();
    }
    free(path);
    return rc;
}

int zk_owned_release(zeng *e, zlock *l)
{
    zsess *s = NULL;
    uint64_t gen;
    int lost, zrc, rc = 0;
    char *node;
    struct Stat st;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);

    pthread_mutex_lock(&e->mu);
    if (e->cur && !e->cur->dead && e->cur->gen == l->gen && l->node && !l->lost) {
        s = e->cur;
        s->refs++;
    }
    pthread_mutex_unlock(&e->mu);
    node = zk_take_node(e, l, &gen, &lost);
    free(l->item);
    l->item = NULL;
    l->item_len = 0;
    if (!node || lost || !s) {
        free(node);
        zk_sess_put(e, s);
        return baton_seterr(BATON_ELOST, 0, "zk: %s was lost with its session", l->dir);
    }
    /* the name is shared (a member id, a queue entry): delete it only while
     * it is still our session's node */
    zrc = zk_exists(s, node, NULL, NULL, &st, end);
    if (zrc == ZCONNECTIONLOSS && zk_sess_wait(e, s, end) == 0) zrc = zk_exists(s, node, NULL, NULL, &st, end);
    if (zrc == ZOK && st.ephemeralOwner != session_id(s)) zrc = ZNONODE;
    if (zrc == ZOK) zrc = zk_delete(s, node, st.version, end);
    if (zrc == ZOK) {
        rc = 0;
    } else if (zrc == ZNONODE || zrc == ZBADVERSION) {
        rc = baton_seterr(BATON_ELOST, zrc, "zk: our node %s is gone", node);
    } else if (zk_sess_dead(e, s)) {
        rc = baton_seterr(BATON_ELOST, zrc, "zk: %s was lost with its session", l->dir);
    } else if (zk_retryable(zrc)) {
        zk_orphan_add(e, node, gen);
        rc = zk_err(zrc, "delete (queued again)", node);
    } else {
        rc = zk_err(zrc, "delete", node);
    }
    free(node);
    zk_sess_put(e, s);
    return rc;
}

/* read_group: the group's node appeared between the listing and the
 * exists watch (look again). */
#define ZK_GROUP_MADE (ZOPERATIONTIMEOUT - 1000)

/* Lists the members of DIR (watching its children with SLOT when nonzero):
 * FN per member, *TOKEN = the largest zxid seen (the children's last change,
 * every member's last change), 0 when the group's node is absent. */
static int read_group(zsess *s, const char *dir, uint64_t slot,
                      void (*fn)(void *arg, const char *id, const char *value), void *arg, uint64_t *token,
                      int64_t end)
{
    struct String_vector sv = { 0, NULL };
    zcall *lc, **gc = NULL;
    int zrc, rc = 0;
    watcher_fn wf = slot ? zk_node_watcher : NULL;
    void *ctx = slot ? ZK_SLOT_CTX(slot) : NULL;

    *token = 0;
    if (!(lc = zk_start_children2(s, dir, wf, ctx, &zrc))) return zrc;
    zrc = zk_call_wait(lc, end);
    if (zrc == ZOK) {
        *token = (uint64_t)zk_call_stat(lc)->pzxid;
        zk_call_strings(lc, &sv);
    }
    zk_call_put(lc);
    if (zrc == ZNONODE && slot) {
        /* no group yet: wake when its node is made */
        struct Stat st;
        zrc = zk_exists(s, dir, wf, ctx, &st, end);
        return zrc == ZNONODE ? ZOK : zrc == ZOK ? ZK_GROUP_MADE : zrc;
    }
    if (zrc == ZNONODE) return ZOK;
    if (zrc != ZOK) return zrc;
    if (sv.count > 0 && !(gc = calloc((size_t)sv.count, sizeof *gc))) {
        deallocate_String_vector(&sv);
        return ZSYSTEMERROR;
    }
    /* every member's data, all asked for before the first answer */
    for (int i = 0; i < sv.count; i++) {
        char *p = join(dir, sv.data[i]);
        int grc;
        if (p) gc[i] = zk_start_get(s, p, NULL, NULL, &grc);
        free(p);
    }
    for (int i = 0; i < sv.count; i++) {
        const struct Stat *st;
        char *data = NULL, *id;
        size_t n;
        int len = 0, grc;
        if (!gc[i]) {
            rc = ZSYSTEMERROR;
            continue;
        }
        grc = zk_call_wait(gc[i], end);
        if (grc == ZNONODE) continue; /* left meanwhile: the children's change says so */
        if (grc != ZOK) {
            if (!rc) rc = grc;
            continue;
        }
        st = zk_call_stat(gc[i]);
        if (!ZK_IS_EPHEMERAL(st)) continue; /* a nested group's node, not a member */
        if ((uint64_t)st->mzxid > *token) *token = (uint64_t)st->mzxid;
        if (rc || !fn || zk_call_data_take(gc[i], &data, &len)) continue;
        id = sv.data[i];
        n = strlen(id);
        if (n > strlen(PARTY) && !strcmp(id + n - strlen(PARTY), PARTY)) id[n - strlen(PARTY)] = 0;
        fn(arg, id, data);
        free(data);
    }
    for (int i = 0; i < sv.count; i++) zk_call_put(gc[i]);
    free(gc);
    deallocate_String_vector(&sv);
    return rc;
}

int zk_group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value), void *arg,
                  uint64_t *token)
{
    zeng *e = eng;
    zsess *s = NULL;
    char *dir = NULL;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc, rc;

    *token = 0;
    if ((rc = zk_path_in(e, e->gbase, name, NULL, &dir))) return rc;
    if ((rc = session(e, 0, &s))) goto out;
    for (;;) {
        zrc = read_group(s, dir, 0, fn, arg, token, end);
        if (zrc == ZOK) break;
        if (zrc == ZCONNECTIONLOSS && baton_now_ns() < end && zk_sess_wait(e, s, end) == 0) continue;
        rc = zk_err(zrc, "list", dir);
        break;
    }
out:
    zk_sess_put(e, s);
    free(dir);
    return rc;
}

int zk_group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    zeng *e = eng;
    zsess *s = NULL;
    char *dir = NULL;
    uint64_t slot = 0;
    int rc;

    if ((rc = zk_path_in(e, e->gbase, name, NULL, &dir))) return rc;
    if (deadline_ns && w && !(slot = zk_slot_open(e))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = session(e, 0, &s))) goto out;
    for (;;) {
        unsigned gen = slot ? baton_waiter_gen(w) : 0;
        uint64_t now = 0;
        int zrc;
        if (slot) zk_slot_arm(e, slot, w);
        zrc = read_group(s, dir, slot, NULL, NULL, &now, zk_call_deadline(e, deadline_ns));
        if (zrc == ZK_GROUP_MADE) continue;
        if (zrc != ZOK) {
            if (zk_retryable(zrc) && slot && (deadline_ns == INT64_MAX || baton_now_ns() < deadline_ns) &&
                !zk_sess_dead(e, s) && zk_sess_wait(e, s, zk_call_deadline(e, deadline_ns)) == 0)
                continue;
            if (zrc == ZOPERATIONTIMEOUT && slot && deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
                rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: the members of %s: no change seen in time", dir);
                break;
            }
            if (!zk_sess_dead(e, s) || !slot) {
                rc = zk_err(zrc, "watch", dir);
                break;
            }
        } else if (now != token) {
            rc = 0;
            break;
        } else if (!slot) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: the members of %s have not changed", dir);
            break;
        } else if ((rc = zk_park(e, w, gen, deadline_ns, dir))) {
            break;
        }
        if (zk_sess_dead(e, s)) {
            /* the watch died with the session; members may have changed */
            zk_sess_put(e, s);
            s = NULL;
            if ((rc = zk_resession(e, &s, deadline_ns, w, dir))) break;
        }
    }
out:
    if (slot) zk_slot_close(e, slot);
    zk_sess_put(e, s);
    free(dir);
    return rc;
}

/* ---- queues --------------------------------------------------------------- */

typedef struct {
    zeng *e;
    char *dir;
} zqueue;

int zk_queue_new(void *eng, const char *name, void **st)
{
    zeng *e = eng;
    zqueue *q = calloc(1, sizeof *q);
    int rc;
    *st = NULL;
    if (!q) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    q->e = e;
    if ((rc = zk_path_in(e, e->qbase, name, NULL, &q->dir))) {
        free(q);
        return rc;
    }
    *st = q;
    return 0;
}

void zk_queue_free(void *eng, void *st)
{
    zqueue *q = st;
    (void)eng;
    if (!q) return;
    free(q->dir);
    free(q);
}

/* entries/ and taken/: persistent, as kazoo's LockingQueue makes them (it
 * remembers having made them, so they must not vanish as containers would). */
static int make_queue(zeng *e, zsess *s, const char *dir, int64_t end)
{
    char *en = join(dir, "entries"), *tk = join(dir, "taken");
    int zrc = en && tk ? zk_mkpath(e, s, en, ZOO_PERSISTENT, end) : ZSYSTEMERROR;
    if (zrc == ZOK) zrc = zk_mkpath(e, s, tk, ZOO_PERSISTENT, end);
    free(en);
    free(tk);
    return zrc;
}

int zk_queue_put(void *eng, void *st, const void *data, size_t len)
{
    zeng *e = eng;
    zqueue *q = st;
    zsess *s = NULL;
    char *path = join(q->dir, "entries/" ENTRY_PREFIX);
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc = ZOK, rc;

    if (!path) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    if (len > INT_MAX) {
        free(path);
        return baton_seterr(BATON_EINVAL, 0, "zk: item too long");
    }
    if ((rc = session(e, 0, &s))) {
        free(path);
        return rc;
    }
    for (int tries = 0; tries < 3; tries++) {
        zrc = zk_create(s, path, data, (int)len, zk_acl(e), ZOO_PERSISTENT_SEQUENTIAL, NULL, 0, NULL, end);
        if (zrc != ZNONODE) break;
        if ((zrc = make_queue(e, s, q->dir, end)) != ZOK) break;
    }
    if (zrc == ZOK) rc = 0;
    else if (zk_retryable(zrc)) /* not sent again: the item may be in the queue already */
        rc = baton_seterr(BATON_EUNAVAILABLE, zrc, "zk: put to %s: %s (the item may have been added)", q->dir,
                          zerror(zrc));
    else rc = zk_err(zrc, "put to", q->dir);
    zk_sess_put(e, s);
    free(path);
    return rc;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The entries (sorted: kazoo's order) and the taken names (sorted), listed
 * back to back; with SLOT, both watched. A queue not made yet is empty. */
static int listing(zsess *s, const char *dir, uint64_t slot, struct String_vector *en, struct String_vector *tk,
                   int64_t end)
{
    char *ep = join(dir, "entries"), *tp = join(dir, "taken");
    watcher_fn wf = slot ? zk_node_watcher : NULL;
    void *ctx = slot ? ZK_SLOT_CTX(slot) : NULL;
    zcall *ec = NULL, *tc = NULL;
    int zrc = ZSYSTEMERROR, trc = ZSYSTEMERROR;

    en->count = tk->count = 0;
    en->data = tk->data = NULL;
    if (ep && tp) {
        ec = zk_start_children(s, ep, wf, ctx, &zrc);
        tc = zk_start_children(s, tp, wf, ctx, &trc);
    }
    if (ec) zrc = zk_call_wait(ec, end);
    if (tc) trc = zk_call_wait(tc, end);
    if (zrc == ZOK) zk_call_strings(ec, en);
    if (trc == ZOK) zk_call_strings(tc, tk);
    zk_call_put(ec);
    zk_call_put(tc);
    if (zrc == ZNONODE && slot) {
        /* no queue yet: wake when entries/ is made */
        struct Stat st;
        zrc = zk_exists(s, ep, wf, ctx, &st, end);
        if (zrc == ZNONODE) zrc = ZOK;
        else if (zrc == ZOK) zrc = ZK_GROUP_MADE;
    } else if (zrc == ZNONODE) {
        zrc = ZOK;
    }
    if (zrc == ZOK && trc != ZOK && trc != ZNONODE) zrc = trc;
    if (zrc != ZOK) {
        deallocate_String_vector(en);
        deallocate_String_vector(tk);
    } else {
        if (en->count > 1) qsort(en->data, (size_t)en->count, sizeof *en->data, cmp_name);
        if (tk->count > 1) qsort(tk->data, (size_t)tk->count, sizeof *tk->data, cmp_name);
    }
    free(ep);
    free(tp);
    return zrc;
}

static int is_taken(const struct String_vector *tk, const char *name)
{
    return tk->count > 0 && bsearch(&name, tk->data, (size_t)tk->count, sizeof *tk->data, cmp_name) != NULL;
}

int zk_queue_size(void *eng, void *st, uint64_t *waiting)
{
    zeng *e = eng;
    zqueue *q = st;
    zsess *s = NULL;
    struct String_vector en, tk;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc, rc;

    *waiting = 0;
    if ((rc = session(e, 0, &s))) return rc;
    zrc = listing(s, q->dir, 0, &en, &tk, end);
    if (zrc == ZCONNECTIONLOSS && zk_sess_wait(e, s, end) == 0) zrc = listing(s, q->dir, 0, &en, &tk, end);
    if (zrc == ZOK) {
        for (int i = 0; i < en.count; i++)
            if (!is_taken(&tk, en.data[i])) (*waiting)++;
        deallocate_String_vector(&en);
        deallocate_String_vector(&tk);
    } else {
        rc = zk_err(zrc, "size of", q->dir);
    }
    zk_sess_put(e, s);
    return rc;
}

int zk_queue_taker(void *eng, void *st, const baton_lock_options *opts, void **tst)
{
    zqueue *q = st;
    (void)opts; /* a taken item lives as long as the session: nothing to lease */
    return zk_lock_init(eng, q->dir, ZK_TAKER, (zlock **)tst);
}

int zk_queue_item(void *eng, void *tst, const char **data, size_t *len)
{
    zlock *l = tst;
    (void)eng;
    if (!l->item) return baton_seterr(BATON_ENOTHELD, 0, "zk: %s: this taker holds no item", l->dir);
    *data = l->item;
    *len = (size_t)l->item_len;
    return 0;
}

/* take_one: the entry is another taker's, or gone: try the next. */
#define TAKE_NEXT 2

/* Takes entry NAME: 0 (L holds it), TAKE_NEXT, ZK_AGAIN (the session
 * died), or an error. */
static int take_one(zeng *e, zsess *s, zlock *l, baton_acquire_req *req, const char *name, int64_t end)
{
    char *tdir = join(l->dir, "taken"), *tp = join(tdir ? tdir : "", name), *ep = join(l->dir, "entries");
    char *item = NULL, *entry = NULL;
    uint64_t czxid = 0;
    int zrc, len = 0, rc = TAKE_NEXT;

    if (!tdir || !tp || !ep) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    zrc = create_ephemeral(e, s, tp, req->owner->hex, 32, &czxid, end);
    if (zrc == ZNONODE && (zrc = zk_mkpath(e, s, tdir, ZOO_PERSISTENT, end)) == ZOK)
        zrc = create_ephemeral(e, s, tp, req->owner->hex, 32, &czxid, end);
    if (zrc == ZNODEEXISTS) goto out; /* another taker's */
    if (zrc != ZOK) {
        rc = zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, "take", tp);
        goto out;
    }
    {
        char *p = join(ep, name);
        zcall *c = p ? zk_start_get(s, p, NULL, NULL, &zrc) : NULL;
        free(p);
        if (c && (zrc = zk_call_wait(c, end)) == ZOK && zk_call_data_take(c, &item, &len)) zrc = ZSYSTEMERROR;
        zk_call_put(c);
    }
    if (zrc != ZOK) {
        /* done by its holder between our listing and our create: let go */
        int drc = zk_delete(s, tp, -1, end);
        if (zk_retryable(drc)) zk_orphan_add(e, tp, zk_live_gen(e));
        if (zrc != ZNONODE) rc = zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, "read", name);
        goto out;
    }
    if (!(entry = strdup(name))) {
        zk_delete(s, tp, -1, end);
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    free(l->id);
    l->id = entry;
    free(l->item);
    l->item = item;
    l->item_len = len;
    item = NULL;
    rc = own(e, s, l, tp, czxid);
    tp = NULL;
    if (rc == 0) {
        req->fence = czxid;
        req->sent_ns = baton_now_ns();
    }
out:
    free(item);
    free(tdir);
    free(tp);
    free(ep);
    return rc;
}

/* The first entry nobody holds, taken: as take_one, TAKE_NEXT when none could be. */
static int take_first(zeng *e, zsess *s, zlock *l, baton_acquire_req *req, const struct String_vector *en,
                      const struct String_vector *tk, int64_t end)
{
    for (int i = 0; i < en->count; i++) {
        int rc;
        if (is_taken(tk, en->data[i])) continue;
        if ((rc = take_one(e, s, l, req, en->data[i], end)) != TAKE_NEXT) return rc;
    }
    return TAKE_NEXT;
}

int zk_taker_acquire(zeng *e, zlock *l, baton_acquire_req *req)
{
    baton_waiter *w = req->waiter;
    uint64_t slot = req->deadline_ns && w ? l->slot : 0;
    zsess *s = NULL;
    int rc;

    free(zk_take_node(e, l, NULL, NULL));
    free(l->item);
    l->item = NULL;
    if ((rc = session(e, req->deadline_ns, &s))) return rc;
    for (;;) {
        unsigned gen = slot ? baton_waiter_gen(w) : 0;
        struct String_vector en, tk;
        int64_t end = zk_call_deadline(e, req->deadline_ns);
        int zrc;
        if (slot) zk_slot_arm(e, slot, w);
        zrc = listing(s, l->dir, slot, &en, &tk, end);
        if (zrc == ZK_GROUP_MADE) continue;
        if (zrc == ZOK) {
            rc = take_first(e, s, l, req, &en, &tk, end);
            deallocate_String_vector(&en);
            deallocate_String_vector(&tk);
            if (rc <= 0) break;
            if (rc == TAKE_NEXT && !slot) {
                rc = baton_seterr(BATON_ELOCKED, 0, "zk: queue %s has no item to take", l->dir);
                break;
            }
            if (rc == TAKE_NEXT && (rc = zk_park(e, w, gen, req->deadline_ns, l->dir))) break;
        } else if (!zk_sess_dead(e, s)) {
            if (zk_retryable(zrc) && slot && (req->deadline_ns == INT64_MAX || baton_now_ns() < req->deadline_ns) &&
                zk_sess_wait(e, s, end) == 0)
                continue;
            rc = zk_err(zrc, "list", l->dir);
            break;
        }
        if (zk_sess_dead(e, s)) {
            /* its watches (and a take made on it) died with the session */
            free(zk_take_node(e, l, NULL, NULL));
            zk_sess_put(e, s);
            s = NULL;
            if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
                rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the session ended while taking from %s", l->dir);
                break;
            }
            if ((rc = session(e, req->deadline_ns, &s))) break;
        }
    }
    if (slot) zk_slot_arm(e, slot, NULL);
    zk_sess_put(e, s);
    return rc;
}

int zk_queue_done(void *eng, void *tst, const baton_owner *owner)
{
    zeng *e = eng;
    zlock *l = tst;
    zsess *s = NULL;
    struct Stat st;
    char *node = NULL, *ep = NULL;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc, rc = 0;
    (void)owner; /* the taken node holds it, and is our session's */

    pthread_mutex_lock(&e->mu);
    if (e->cur && !e->cur->dead && e->cur->gen == l->gen && l->node && !l->lost) {
        s = e->cur;
        s->refs++;
        node = strdup(l->node);
    }
    pthread_mutex_unlock(&e->mu);
    if (!s) {
        rc = baton_seterr(BATON_ELOST, 0, "zk: the item taken from %s was lost with its session", l->dir);
        goto out;
    }
    if (!node || !l->id || !(ep = malloc(strlen(l->dir) + strlen(l->id) + 10))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    sprintf(ep, "%s/entries/%s", l->dir, l->id);
    /* still ours? then the entry goes, and our taken node behind it (should
     * we die in between, the taken node goes with our session) */
    zrc = zk_exists(s, node, NULL, NULL, &st, end);
    if (zrc == ZCONNECTIONLOSS && zk_sess_wait(e, s, end) == 0) zrc = zk_exists(s, node, NULL, NULL, &st, end);
    if (zrc == ZOK && st.ephemeralOwner != session_id(s)) zrc = ZNONODE;
    if (zrc == ZNONODE) {
        rc = baton_seterr(BATON_ELOST, zrc, "zk: %s is no longer ours", node);
        goto out;
    }
    if (zrc == ZOK) {
        zcall *d1, *d2 = NULL;
        /* forgotten first: our own delete is no loss to report */
        free(zk_take_node(e, l, NULL, NULL));
        d1 = zk_start_delete(s, ep, -1, &zrc);
        int trc = ZOK;
        if (d1) {
            d2 = zk_start_delete(s, node, st.version, &trc);
            zrc = zk_call_wait(d1, end);
            if (d2) trc = zk_call_wait(d2, end);
        }
        zk_call_put(d1);
        zk_call_put(d2);
        if (zrc == ZNONODE) zrc = ZOK; /* removed by someone else: gone all the same */
        if (zrc == ZOK && trc != ZOK && trc != ZNONODE && zk_retryable(trc)) zk_orphan_add(e, node, l->gen);
    }
    if (zrc != ZOK) {
        if (zk_sess_dead(e, s)) {
            rc = baton_seterr(BATON_ELOST, zrc, "zk: the item taken from %s was lost with its session", l->dir);
        } else {
            /* still ours (the entry may be gone or not): done may be tried again */
            rc = zk_err(zrc, "done", ep);
            pthread_mutex_lock(&e->mu);
            if (!l->node) {
                l->node = node;
                node = NULL;
            }
            pthread_mutex_unlock(&e->mu);
        }
        goto out;
    }
    free(l->item);
    l->item = NULL;
    l->item_len = 0;
out:
    free(node);
    free(ep);
    zk_sess_put(e, s);
    return rc;
}
