/*
 * Contender nodes: the FIFO lock, both sides of the read-write lock, and
 * election candidates. All three are the same recipe (Curator's
 * LockInternals, kazoo's Lock): an ephemeral sequential node in the lock's
 * directory, the lowest contender holds, every other one watches only the
 * node it waits for (no herd), and a waiter that wakes looks again.
 *
 *   lock       <dir>/_c_<uuid>-lock-<seq>       Curator InterProcessMutex
 *   read side  <dir>/_c_<uuid>-__READ__<seq>    Curator InterProcessReadWriteLock
 *   write side <dir>/_c_<uuid>-__WRIT__<seq>
 *   candidate  <dir>/_c_<uuid>-latch-<seq>      Curator LeaderLatch
 *
 * kazoo's "<hex>__lock__<seq>" nodes count as lock contenders, writers and
 * candidates; its "__rlock__" nodes as readers. The fence of a grant is the
 * node's czxid: a later grant's node was created later, so its zxid is larger.
 */
#include "zk_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parked waiter looks again at least this often, watch or not. */
#define RECHECK_MS 5000
#define SEQ_DIGITS 10

static const char *const tag_of[] = { [ZK_LOCK] = "lock-", [ZK_READ] = "__READ__", [ZK_WRITE] = "__WRIT__",
                                      [ZK_LATCH] = "latch-" };

void zk_prefix(char *buf, size_t n, const char *uuid, int kind) { snprintf(buf, n, "_c_%s-%s", uuid, tag_of[kind]); }

/* NAME ends in TAG followed by the sequence number? */
static int tagged(const char *name, size_t len, const char *tag)
{
    size_t t = strlen(tag);
    return len >= t + SEQ_DIGITS && !memcmp(name + len - SEQ_DIGITS - t, tag, t);
}

static unsigned kinds_of(const char *name, long long *seq)
{
    size_t len = strlen(name);
    unsigned k = 0;
    if (len < SEQ_DIGITS || strspn(name + len - SEQ_DIGITS, "0123456789") != SEQ_DIGITS) return 0;
    *seq = strtoll(name + len - SEQ_DIGITS, NULL, 10);
    if (tagged(name, len, "-lock-")) k |= ZK_K_LOCK;
    if (tagged(name, len, "__lock__")) k |= ZK_K_LOCK | ZK_K_WRITE | ZK_K_LATCH;
    if (tagged(name, len, "__READ__") || tagged(name, len, "__rlock__")) k |= ZK_K_READ;
    if (tagged(name, len, "__WRIT__")) k |= ZK_K_WRITE;
    if (tagged(name, len, "latch-")) k |= ZK_K_LATCH;
    if (tagged(name, len, "-lease-")) k |= ZK_K_LEASE;
    return k;
}

static int cmp_child(const void *a, const void *b)
{
    const zchild *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int zk_contenders(const struct String_vector *sv, unsigned mask, zchild **out, int *n)
{
    zchild *c = malloc(((size_t)sv->count + 1) * sizeof *c);
    int m = 0;
    *out = NULL;
    *n = 0;
    if (!c) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (int i = 0; i < sv->count; i++) {
        long long seq = 0;
        unsigned k = kinds_of(sv->data[i], &seq);
        if (!(k & mask)) continue;
        c[m].name = sv->data[i];
        c[m].seq = seq;
        c[m++].kinds = k;
    }
    qsort(c, (size_t)m, sizeof *c, cmp_child);
    *out = c;
    *n = m;
    return 0;
}

/* The contenders a recipe waits among. A lock and a read-write lock of one
 * name live in one directory and exclude each other (baton(1) promises it):
 * each counts the other layout's nodes as contenders. Elections stay apart. */
static unsigned mask_of(int kind)
{
    return kind == ZK_LATCH ? ZK_K_LATCH : ZK_K_LOCK | ZK_K_READ | ZK_K_WRITE;
}

/* "_c_<uuid>-" at the start of NAME is OWNER's. */
static int owned_by(const char *name, const char *uuid)
{
    return !strncmp(name, "_c_", 3) && !strncmp(name + 3, uuid, 36) && name[39] == '-';
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---- states ------------------------------------------------------------- */

int zk_lock_init(zeng *e, const char *dir, int kind, zlock **out)
{
    zlock *l = calloc(1, sizeof *l);
    *out = NULL;
    if (!l || !(l->dir = strdup(dir))) {
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    l->e = e;
    l->kind = kind;
    if (!(l->slot = zk_slot_open(e))) {
        free(l->dir);
        free(l);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    zk_lock_link(e, l);
    *out = l;
    return 0;
}

static int state_new(zeng *e, const char *name, const baton_lock_options *opts, int kind, zlock **out)
{
    char *dir;
    int rc;
    if (opts && opts->fixed_lease)
        return baton_seterr(BATON_ENOTSUP, 0, "zk: no fixed leases: a lock lives as long as the client's session");
    if ((rc = zk_path(e, name, NULL, &dir))) return rc;
    rc = zk_lock_init(e, dir, kind, out);
    free(dir);
    return rc;
}

int zk_lock_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    return state_new(eng, name, opts, ZK_LOCK, (zlock **)st);
}

int zk_election_new(void *eng, const char *name, const baton_lock_options *opts, void **st)
{
    return state_new(eng, name, opts, ZK_LATCH, (zlock **)st);
}

int zk_rwlock_new(void *eng, const char *name, const baton_lock_options *opts, void **rd, void **wr)
{
    int rc = state_new(eng, name, opts, ZK_READ, (zlock **)rd);
    if (rc) return rc;
    if ((rc = state_new(eng, name, opts, ZK_WRITE, (zlock **)wr))) {
        zk_lock_free(eng, *rd);
        *rd = NULL;
    }
    return rc;
}

void zk_lock_free(void *eng, void *st)
{
    zeng *e = eng;
    zlock *l = st;
    if (!l) return;
    zk_lock_unlink(e, l);
    zk_slot_close(e, l->slot);
    /* a node still here is not held (the core released it): let it go */
    if (l->node) {
        if (!l->lost) zk_orphan_add(e, l->node, l->gen);
        free(l->node);
    }
    free(l->id);
    free(l->item);
    free(l->dir);
    free(l);
}

/* ---- the node ----------------------------------------------------------- */

/* Forgets our node (e->mu not held); returns it for the caller to delete or free. */
char *zk_take_node(zeng *e, zlock *l, uint64_t *gen, int *lost)
{
    char *node;
    pthread_mutex_lock(&e->mu);
    node = l->node;
    if (gen) *gen = l->gen;
    if (lost) *lost = l->lost;
    l->node = NULL;
    l->lost = 0;
    l->granted = 0;
    l->armed = 0;
    l->report_until = 0;
    pthread_mutex_unlock(&e->mu);
    return node;
}

/* Deletes our node (a contender giving up) by DEADLINE; after a connection
 * loss or at the deadline the check thread deletes it later. */
static void drop_node(zeng *e, zsess *s, zlock *l, int64_t deadline)
{
    uint64_t gen;
    int lost, zrc;
    char *node = zk_take_node(e, l, &gen, &lost);
    if (!node) return;
    if (!lost && gen == s->gen) {
        zrc = zk_delete(s, node, -1, deadline);
        if (zrc == ZCONNECTIONLOSS && zk_sess_wait(e, s, deadline) == 0) zrc = zk_delete(s, node, -1, deadline);
        if (zk_retryable(zrc)) zk_orphan_add(e, node, gen);
    }
    free(node);
}

/* Our node after a connection loss hid the create's answer: the child of
 * DIR named PREFIX<seq>, if the create happened. 1 found, 0 not, <0 error. */
static int find_own(zeng *e, zsess *s, const char *dir, const char *prefix, char *path, int plen,
                    struct Stat *st, int64_t deadline)
{
    struct String_vector sv = { 0, NULL };
    int zrc = zk_get_children(s, dir, NULL, NULL, &sv, deadline), found = 0;
    (void)e;
    if (zrc == ZNONODE) return 0;
    if (zrc != ZOK) return zk_err(zrc, "list", dir);
    for (int i = 0; i < sv.count && !found; i++)
        if (!strncmp(sv.data[i], prefix, strlen(prefix))) {
            snprintf(path, (size_t)plen, "%s/%s", dir, sv.data[i]);
            found = 1;
        }
    deallocate_String_vector(&sv);
    if (found) {
        zrc = zk_exists(s, path, NULL, NULL, st, deadline);
        if (zrc == ZNONODE) return 0;
        if (zrc != ZOK) return zk_err(zrc, "stat", path);
    }
    return found;
}

/* The create of our node and a listing of its directory, sent back to back
 * without waiting for the create's answer. ZooKeeper runs a session's
 * requests in the order they were sent (a read waits for the session's
 * earlier writes), so the listing is taken after the node exists, exactly as
 * if it had been asked for once the create answered: one round trip less.
 * Into *SV (*listed = 1 when that listing is good). Returns the create's
 * answer (ZOPERATIONTIMEOUT at DEADLINE). */
static int create_listed(zeng *e, zsess *s, const char *path, const char *dir, const char *data, char *created,
                         int plen, struct Stat *st, struct String_vector *sv, int *listed, watcher_fn lw,
                         void *lctx, int64_t deadline)
{
    zcall *cc, *lc;
    int zrc, lrc;
    *listed = 0;
    cc = zk_start_create(s, path, data, data ? (int)strlen(data) : -1, zk_acl(e), ZOO_EPHEMERAL_SEQUENTIAL, &zrc);
    if (!cc) return zrc;
    lc = zk_start_children(s, dir, lw, lctx, &lrc);
    zrc = zk_call_wait(cc, deadline);
    if (zrc == ZOK) {
        snprintf(created, (size_t)plen, "%s", zk_call_value(cc));
        if (st) *st = *zk_call_stat(cc);
    }
    zk_call_put(cc);
    if (lc) {
        if (zrc == ZOK && zk_call_wait(lc, deadline) == ZOK) {
            zk_call_strings(lc, sv);
            *listed = 1;
        }
        zk_call_put(lc);
    }
    return zrc;
}

int zk_create_seq(zeng *e, zsess *s, const char *dir, const char *prefix, const char *data, char **out,
                  struct Stat *st, struct String_vector *list, int *listed, watcher_fn lw, void *lctx,
                  int64_t deadline)
{
    char *path = join(dir, prefix), *created;
    int plen, zrc = ZOK, rc = 0;
    *out = NULL;
    if (!path) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    plen = (int)strlen(path) + 32;
    if (!(created = malloc((size_t)plen))) {
        free(path);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    if (listed) *listed = 0;
    for (int tries = 0; tries < 5; tries++) {
        if (list && tries == 0)
            zrc = create_listed(e, s, path, dir, data, created, plen, st, list, listed, lw, lctx, deadline);
        else
            zrc = zk_create(s, path, data, data ? (int)strlen(data) : -1, zk_acl(e), ZOO_EPHEMERAL_SEQUENTIAL,
                            created, plen, st, deadline);
        if (zrc == ZNONODE) {
            /* the directory is missing (first use, or a container the server
             * just removed): make it and try again */
            if ((rc = zk_mkdirs(e, s, dir, deadline))) goto out;
            continue;
        }
        if (zrc == ZOPERATIONTIMEOUT) {
            /* no answer by the deadline: the create, if it happens, deletes
             * its own node (call.c) */
            rc = zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, "create", path);
            goto out;
        }
        if (zk_retryable(zrc)) {
            int f;
            if (zk_sess_wait(e, s, deadline)) {
                rc = zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, "create", path);
                goto out;
            }
            if ((f = find_own(e, s, dir, prefix, created, plen, st, deadline)) < 0) {
                rc = f;
                goto out;
            }
            if (f) {
                zrc = ZOK;
                break;
            }
            continue;
        }
        break;
    }
    if (zrc != ZOK) {
        rc = zk_err(zrc, "create", path);
        goto out;
    }
    *out = created;
    created = NULL;
out:
    free(created);
    free(path);
    return rc;
}

static void held_dir_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* Creates our node; *SV gets the directory's children as listed right after
 * it when *LISTED (see create_listed). That listing leaves a child watch on
 * the directory: a grant it confirms needs no watch of its own (see
 * held_dir_watcher). */
static int create_node(zeng *e, zsess *s, zlock *l, const baton_owner *o, const char *data,
                       struct String_vector *sv, int *listed, int64_t deadline)
{
    char prefix[96], *node = NULL;
    struct Stat st;
    int rc;
    zk_prefix(prefix, sizeof prefix, o->uuid, l->kind);
    memset(&st, 0, sizeof st);
    pthread_mutex_lock(&e->mu);
    l->dir_fired = 0;
    pthread_mutex_unlock(&e->mu);
    if ((rc = zk_create_seq(e, s, l->dir, prefix, data, &node, &st, sv, listed, held_dir_watcher,
                            ZK_SLOT_CTX(l->slot), deadline))) {
        if (*listed) deallocate_String_vector(sv);
        *listed = 0;
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    l->node = node;
    l->gen = s->gen;
    l->fence = (uint64_t)st.czxid;
    l->lost = 0;
    l->granted = 0;
    l->armed = 0;
    /* the session may have been given up while the create was on its way:
     * then this node is already lost */
    if (s->dead) {
        l->lost = 1;
        rc = ZK_AGAIN;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* ---- a held node deleted by someone else ------------------------------ */

/* An operator (`baton unlock --force`, zkCli's delete) may delete the node of
 * a grant while its session lives on: the holder must learn of it, as of a
 * session loss. A grant arms an exists watch on its node; its deletion marks
 * the state lost and the check thread reports it (baton_host_lost). Our own
 * release forgets the node before deleting it, so it is not reported. */
#define DELETED_REPORT_MS 2000

typedef struct {
    zeng *e;
    uint64_t slot;
    char path[];
} zheld;

static void held_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx);

/* A node of L's (by slot) at PATH is gone: lost, reported by the check thread. */
static void held_gone(zeng *e, uint64_t slot, const char *path)
{
    pthread_mutex_lock(&e->mu);
    for (zlock *l = e->locks; l; l = l->next)
        if (l->slot == slot && l->node && !strcmp(l->node, path) && !l->lost) {
            baton_log(BATON_LOG_WARN, "zk: %s: our node %s was deleted by another client: the lock is lost",
                      l->dir, path);
            l->lost = 1;
            l->report_until = baton_now_ns() + DELETED_REPORT_MS * 1000000LL;
            pthread_cond_broadcast(&e->cv);
            break;
        }
    pthread_mutex_unlock(&e->mu);
}

static void held_armed(int rc, const struct Stat *st, const void *data)
{
    zheld *h = (zheld *)data;
    (void)st;
    if (rc == ZNONODE) held_gone(h->e, h->slot, h->path);
    free(h);
}

static void arm_held(zeng *e, zhandle_t *zh, uint64_t slot, const char *node)
{
    size_t n = strlen(node) + 1;
    zheld *h = malloc(sizeof *h + n);
    if (!h) return;
    h->e = e;
    h->slot = slot;
    memcpy(h->path, node, n);
    /* asynchronous: a grant costs no round trip more; a lost connection
     * here is the session's business (reported as such) */
    if (zoo_awexists(zh, node, held_watcher, ZK_SLOT_CTX(slot), held_armed, h) != ZOK) free(h);
}

void zk_arm_held(zeng *e, zsess *s, zlock *l)
{
    char *node = NULL;
    pthread_mutex_lock(&e->mu);
    if (l->node) node = strdup(l->node);
    pthread_mutex_unlock(&e->mu);
    if (node) arm_held(e, s->zh, l->slot, node);
    free(node);
}

/* The child watch that an acquire's first listing (sent right behind its
 * create) leaves on the directory. While our node holds, any change of the
 * directory's children fires it: our own release (the node is forgotten
 * first: nothing to do), a contender joining or leaving, or someone deleting
 * our node. It stands in for the exists watch of a grant until the first
 * such change, and is then replaced by that watch (which answers ZNONODE if
 * our node went meanwhile). So a free lock costs no request for the watch:
 * the exists request is made only once a second contender shows up. Before
 * the grant is confirmed it only notes that it fired (a waiter's first
 * listing: one event per contender at most, as the watch is one-shot). */
static void held_dir_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zsess *s = (zsess *)zoo_get_context(zh);
    uint64_t slot = (uint64_t)(uintptr_t)ctx;
    char *node = NULL;
    (void)state;
    if (!s || !path || type != ZOO_CHILD_EVENT) return;
    pthread_mutex_lock(&s->e->mu);
    for (zlock *l = s->e->locks; l; l = l->next)
        if (l->slot == slot && l->node && !l->lost && !strcmp(l->dir, path)) {
            if (!l->granted) {
                l->dir_fired = 1;
            } else if (!l->armed) {
                l->armed = 1; /* one exists watch per grant */
                node = strdup(l->node);
            }
            break;
        }
    pthread_mutex_unlock(&s->e->mu);
    if (node) arm_held(s->e, zh, slot, node);
    free(node);
}

static void held_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zsess *s = (zsess *)zoo_get_context(zh);
    uint64_t slot = (uint64_t)(uintptr_t)ctx;
    (void)state;
    if (!s || !path) return;
    if (type == ZOO_DELETED_EVENT) {
        held_gone(s->e, slot, path);
    } else if (type == ZOO_CHANGED_EVENT) {
        /* a proclaimed value: one-shot watches need arming again while ours */
        int mine = 0;
        pthread_mutex_lock(&s->e->mu);
        for (zlock *l = s->e->locks; l; l = l->next)
            if (l->slot == slot && l->node && !strcmp(l->node, path) && !l->lost) mine = 1;
        pthread_mutex_unlock(&s->e->mu);
        if (mine) arm_held(s->e, zh, slot, path);
    }
}

/* ---- acquire ------------------------------------------------------------ */

/* What a failed ZooKeeper call means while we wait: ZK_AGAIN when the
 * session died, 0 when the connection came back (look again), else an error. */
static int after_failure(zeng *e, zsess *s, int zrc, const char *what, const char *path, int64_t deadline)
{
    if (!zk_retryable(zrc) && zrc != ZSESSIONEXPIRED && zrc != ZINVALIDSTATE && zrc != ZCLOSING)
        return zk_err(zrc, what, path);
    if (zk_sess_dead(e, s)) return ZK_AGAIN;
    /* the wait is over: no second try (a frozen link answers nothing) */
    if (deadline != INT64_MAX && baton_now_ns() >= deadline) return zk_err(zrc, what, path);
    if (zk_sess_wait(e, s, zk_call_deadline(e, deadline)) == 0) return 0;
    return zk_sess_dead(e, s) ? ZK_AGAIN : zk_err(zrc, what, path);
}

/* A node of ours (our uuid, our recipe's tag) that is not MINE is a ghost:
 * a create of an earlier acquire of this handle whose answer never came (a
 * connection lost with it in flight; the session survived), which nobody
 * waits for. It must not hold us (or anyone) off: delete it (not waited
 * for) and leave it out of C. Returns the new count. */
static int drop_ghosts(zsess *s, zlock *l, zchild *c, int n, const char *uuid, const char *mine)
{
    const char *tag = tag_of[l->kind];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (owned_by(c[i].name, uuid) && !strncmp(c[i].name + 40, tag, strlen(tag)) && strcmp(c[i].name, mine)) {
            char *p = join(l->dir, c[i].name);
            int zrc;
            baton_log(BATON_LOG_INFO, "zk: deleting %s/%s, left by an earlier create of ours", l->dir, c[i].name);
            if (p) zk_call_put(zk_start_delete(s, p, -1, &zrc));
            free(p);
            continue;
        }
        c[m++] = c[i];
    }
    return m;
}

/* Waits until our node (l->node) leads. 0 granted, ZK_AGAIN, or an error
 * (our node deleted then). FIRST, when not NULL, is a listing of the
 * directory taken after our node was made: the first look uses it (and frees
 * it) instead of asking again. */
/* A grant confirmed. The holder learns of its node's deletion by someone
 * else through a watch: the child watch of the listing that confirmed the
 * grant when WATCHED (the acquire's first listing: a free lock) while it has
 * not fired (held_dir_watcher), else an exists watch armed now. The fence is noted in the directory's data for
 * lock_info ("the last fence granted", once nobody holds) here, not by the
 * release: sent and not waited for, it is carried out before the release's
 * delete (one session's requests run in order), so the release is one
 * delete, as in the raw create+delete cycle. A refusal (a foreign ACL on the
 * directory) loses the note only. */
static void granted(zeng *e, zsess *s, zlock *l, int watched)
{
    char *node = NULL;
    int arm;
    uint64_t fence;
    pthread_mutex_lock(&e->mu);
    l->granted = 1;
    /* a grant after waiting arms at once, as the waiter's listing that
     * confirmed it is not watched: a handoff then costs the same requests
     * whatever happens around it (the herd stays constant) */
    arm = !watched || l->dir_fired;
    if (arm) l->armed = 1;
    fence = l->fence;
    if (l->node) node = strdup(l->node);
    pthread_mutex_unlock(&e->mu);
    if (!node) return;
    if (e->fence_note && (l->kind == ZK_LOCK || l->kind == ZK_WRITE)) {
        char fbuf[24];
        int zrc;
        snprintf(fbuf, sizeof fbuf, "%" PRIu64, fence);
        zk_call_put(zk_start_set(s, l->dir, fbuf, (int)strlen(fbuf), -1, &zrc));
    }
    if (arm) arm_held(e, s->zh, l->slot, node);
    free(node);
}

static int wait_turn(zeng *e, zsess *s, zlock *l, baton_acquire_req *req, struct String_vector *first)
{
    baton_waiter *w = req->waiter;
    const char *mine = strrchr(l->node, '/') + 1;
    const char *uuid = req->owner->uuid;
    unsigned mask = mask_of(l->kind);
    int rc = 0;

    for (;;) {
        unsigned gen = w ? baton_waiter_gen(w) : 0;
        struct String_vector sv = { 0, NULL };
        zchild *c = NULL;
        int n = 0, me = -1, pred = -1, zrc;
        char *pred_path = NULL;
        struct Stat st;
        int watched = first != NULL; /* this listing left a child watch on the directory */

        if (w) zk_slot_arm(e, l->slot, w);
        if (first) {
            sv = *first;
            first->count = 0;
            first->data = NULL;
            first = NULL;
            zrc = ZOK;
        } else {
            zrc = zk_get_children(s, l->dir, NULL, NULL, &sv, zk_call_deadline(e, req->deadline_ns));
        }
        if (zrc != ZOK) {
            if (zrc == ZNONODE) { rc = ZK_AGAIN; break; } /* our node is gone with its directory */
            if ((rc = after_failure(e, s, zrc, "list", l->dir, req->deadline_ns))) break;
            continue;
        }
        if ((rc = zk_contenders(&sv, mask, &c, &n))) {
            deallocate_String_vector(&sv);
            break;
        }
        n = drop_ghosts(s, l, c, n, uuid, mine);
        for (int i = 0; i < n; i++)
            if (!strcmp(c[i].name, mine)) me = i;
        if (me >= 0) {
            if (l->kind == ZK_READ) {
                /* a reader waits for the last earlier exclusive node — a
                 * writer or a plain lock's node — that is not its own
                 * owner's (the write side's holder may read: downgrade) */
                for (int i = 0; i < me; i++) {
                    if ((c[i].kinds & ZK_K_WRITE) && owned_by(c[i].name, uuid)) continue;
                    if (c[i].kinds & (ZK_K_WRITE | ZK_K_LOCK)) pred = i;
                }
            } else {
                /* a plain lock and a writer wait for the node just before
                 * theirs, of any kind: readers ahead hold them off too */
                pred = me - 1;
            }
            if (pred >= 0 && !(pred_path = join(l->dir, c[pred].name)))
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        }
        free(c);
        deallocate_String_vector(&sv);
        if (rc) break;
        if (me < 0) {
            /* our node vanished: its session ended (or someone deleted it) */
            rc = ZK_AGAIN;
            break;
        }
        if (pred < 0) {
            /* first in line, as of a list taken after our node existed */
            if (zk_sess_dead(e, s)) {
                rc = ZK_AGAIN;
                break;
            }
            req->fence = l->fence;
            req->sent_ns = baton_now_ns();
            granted(e, s, l, watched);
            rc = 0;
            break;
        }
        if (w && baton_waiter_canceled(w)) {
            free(pred_path);
            rc = baton_seterr(BATON_ECANCELED, 0, "zk: acquire of %s canceled", l->dir);
            drop_node(e, s, l, zk_call_deadline(e, req->deadline_ns));
            break;
        }
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns) {
            rc = req->deadline_ns == 0 ? baton_seterr(BATON_ELOCKED, 0, "zk: %s is held (%s is ahead)", l->dir, pred_path)
                                       : baton_seterr(BATON_ETIMEDOUT, 0, "zk: wait for %s timed out", l->dir);
            free(pred_path);
            drop_node(e, s, l, zk_call_deadline(e, req->deadline_ns));
            break;
        }
        /* watch only the node we wait for */
        zrc = zk_exists(s, pred_path, zk_node_watcher, ZK_SLOT_CTX(l->slot), &st,
                        zk_call_deadline(e, req->deadline_ns));
        free(pred_path);
        if (zrc == ZNONODE) continue;
        if (zrc != ZOK) {
            if ((rc = after_failure(e, s, zrc, "watch", l->dir, req->deadline_ns))) break;
            continue;
        }
        {
            int64_t until = baton_now_ns() + (int64_t)RECHECK_MS * 1000000LL;
            if (until > req->deadline_ns) until = req->deadline_ns;
            if (w) baton_waiter_park(w, gen, until);
        }
        if (zk_sess_dead(e, s)) {
            rc = ZK_AGAIN;
            break;
        }
    }
    zk_slot_arm(e, l->slot, NULL);
    if (rc && rc != ZK_AGAIN && rc != BATON_ELOCKED && rc != BATON_ETIMEDOUT && rc != BATON_ECANCELED) {
        /* an error while waiting: do not leave a contender behind */
        int code = rc;
        baton_error saved = *baton_error_last();
        char msg[256];
        snprintf(msg, sizeof msg, "%s", saved.message ? saved.message : "");
        drop_node(e, s, l, zk_call_deadline(e, req->deadline_ns));
        rc = baton_seterr(code, saved.native, "%s", msg);
    }
    return rc;
}

int zk_lock_acquire(void *eng, void *st, baton_acquire_req *req)
{
    zeng *e = eng;
    zlock *l = st;
    const char *data = l->kind == ZK_LATCH ? (req->value ? req->value : "") : req->owner->desc;
    char *stale;
    uint64_t gen;
    int lost, rc;

    /* a node left from a grant lost with its session */
    if ((stale = zk_take_node(e, l, &gen, &lost))) {
        if (!lost && gen == zk_live_gen(e)) zk_orphan_add(e, stale, gen);
        free(stale);
    }
    if (l->kind == ZK_MEMBER) return zk_member_acquire(e, l, req);
    if (l->kind == ZK_TAKER) return zk_taker_acquire(e, l, req);
    for (;;) {
        zsess *s;
        int64_t cd = zk_deadline_ms(e->connect_timeout_ms), dd = zk_call_deadline(e, req->deadline_ns);
        if ((rc = zk_sess_get(e, cd < dd ? cd : dd, &s))) return rc;
        struct String_vector sv = { 0, NULL };
        int listed = 0;
        rc = create_node(e, s, l, req->owner, data, &sv, &listed, zk_call_deadline(e, req->deadline_ns));
        if (rc == 0) rc = wait_turn(e, s, l, req, listed ? &sv : NULL);
        else if (listed) deallocate_String_vector(&sv);
        zk_sess_put(e, s);
        if (rc != ZK_AGAIN) return rc;
        /* The session died while we waited; our place in line went with it.
         * Queue again on a new session while time is left. */
        free(zk_take_node(e, l, NULL, NULL));
        if (req->waiter && baton_waiter_canceled(req->waiter))
            return baton_seterr(BATON_ECANCELED, 0, "zk: acquire of %s canceled", l->dir);
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
            return baton_seterr(BATON_EUNAVAILABLE, 0, "zk: the session ended while waiting for %s", l->dir);
        baton_log(BATON_LOG_INFO, "zk: session ended while waiting for %s: queueing again", l->dir);
    }
}

/* ---- release ------------------------------------------------------------ */

int zk_lock_release(void *eng, void *st, const baton_owner *owner)
{
    zeng *e = eng;
    zlock *l = st;
    zsess *s = NULL;
    uint64_t gen;
    int lost, zrc, rc = 0;
    char *node;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole release's */
    (void)owner; /* our node carries the owner's uuid: it is ours by construction */

    if (l->kind == ZK_MEMBER || l->kind == ZK_TAKER) return zk_owned_release(e, l);

    pthread_mutex_lock(&e->mu);
    if (e->cur && !e->cur->dead && e->cur->gen == l->gen && l->node && !l->lost) {
        s = e->cur;
        s->refs++;
    }
    pthread_mutex_unlock(&e->mu);
    node = zk_take_node(e, l, &gen, &lost);
    if (!node) return baton_seterr(BATON_ELOST, 0, "zk: %s: no contender node to release", l->dir);
    if (lost || !s) {
        /* the session that held it is gone; never touch the new session's nodes */
        free(node);
        zk_sess_put(e, s);
        return baton_seterr(BATON_ELOST, 0, "zk: %s was lost with its session", l->dir);
    }

    for (int tries = 0; tries < 2; tries++) {
        /* one delete: the fence was noted in the directory at the grant */
        zrc = zk_delete(s, node, -1, end);
        if (zrc == ZNONODE && tries > 0) zrc = ZOK; /* our first try went through */
        /* one more try after a connection loss, within the same deadline */
        if (zrc != ZCONNECTIONLOSS || baton_now_ns() >= end || zk_sess_wait(e, s, end)) break;
    }
    if (zrc == ZNONODE) {
        rc = baton_seterr(BATON_ELOST, zrc, "zk: %s: our node %s is gone", l->dir, node);
    } else if (zk_retryable(zrc) || zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) {
        if (zk_sess_dead(e, s)) {
            rc = baton_seterr(BATON_ELOST, zrc, "zk: %s was lost with its session", l->dir);
        } else {
            zk_orphan_add(e, node, gen);
            rc = zk_err(zrc, "delete (queued again)", node);
        }
    } else if (zrc != ZOK) {
        rc = zk_err(zrc, "delete", node);
    }
    free(node);
    zk_sess_put(e, s);
    return rc;
}

/* ---- info --------------------------------------------------------------- */

static int get_data(zsess *s, const char *path, char *buf, int cap, struct Stat *st, int64_t deadline)
{
    int len = cap - 1, zrc = zk_get(s, path, NULL, NULL, buf, &len, st, deadline);
    if (zrc == ZOK) buf[len < 0 ? 0 : len] = 0;
    return zrc;
}

/* DIR's children, and its stat as of that listing (pzxid: see lock_info). */
static int list_stat(zsess *s, const char *dir, struct String_vector *sv, struct Stat *st, int64_t deadline)
{
    int zrc;
    zcall *c = zk_start_children2(s, dir, NULL, NULL, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, deadline)) == ZOK) {
        zk_call_strings(c, sv);
        *st = *zk_call_stat(c);
    }
    zk_call_put(c);
    return zrc;
}

int zk_lock_info(void *eng, const char *name, baton_lockinfo *out)
{
    zeng *e = eng;
    zsess *s = NULL;
    char *dir = NULL, buf[512];
    struct String_vector sv = { 0, NULL };
    zchild *c = NULL;
    struct Stat st;
    int n = 0, zrc, rc;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */

    if ((rc = zk_path(e, name, NULL, &dir))) return rc;
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms < e->io_timeout_ms ? e->connect_timeout_ms
                                                                                      : e->io_timeout_ms), &s)))
        goto out;
    out->remaining_ms = -1;
    for (int tries = 0; tries < 5; tries++) {
        uint64_t last = 0;
        int readers = 0, writers = 0, writer = 0, holders, any_rw = 0;
        free(c);
        c = NULL;
        deallocate_String_vector(&sv);
        zrc = get_data(s, dir, buf, sizeof buf, &st, end);
        if (zrc == ZNONODE) {
            out->held = 0;
            out->fence = 0;
            out->queue_length = 0;
            rc = 0;
            goto out;
        }
        if (zrc != ZOK) {
            rc = zk_err(zrc, "read", dir);
            goto out;
        }
        last = strtoull(buf, NULL, 10);
        if ((zrc = list_stat(s, dir, &sv, &st, end)) == ZNONODE) continue;
        if (zrc != ZOK) {
            rc = zk_err(zrc, "list", dir);
            goto out;
        }
        if ((rc = zk_contenders(&sv, ZK_K_LOCK | ZK_K_READ | ZK_K_WRITE, &c, &n))) goto out;
        /* kazoo's "__lock__" is both a lock and a writer: count read-write
         * fields only when a read-write lock is in use here */
        for (int i = 0; i < n; i++)
            if ((c[i].kinds & ZK_K_READ) || ((c[i].kinds & ZK_K_WRITE) && !(c[i].kinds & ZK_K_LOCK))) any_rw = 1;
        /* one line for locks, readers and writers of this name (they exclude
         * each other): the readers at its head hold together, else its
         * first node holds alone */
        while (readers < n && c[readers].kinds == ZK_K_READ) readers++;
        for (int i = 0; i < n; i++)
            if (c[i].kinds & ZK_K_WRITE) writers++;
        writer = n > 0 && !readers && (c[0].kinds & ZK_K_WRITE);
        if (any_rw) {
            out->readers = readers;
            out->writer = writer;
            out->waiting_writers = writers - writer;
        }
        if (n == 0) {
            out->held = 0;
            /* without notes (fence_note=0): the zxid of the directory's last
             * child change. Every node ever made in it was made at or before
             * it, every later one after it: at or above the last fence
             * granted, below the next one */
            out->fence = e->fence_note ? last : (last > (uint64_t)st.pzxid ? last : (uint64_t)st.pzxid);
            out->queue_length = 0;
            rc = 0;
            goto out;
        }
        holders = readers ? readers : 1;
        {
            char *p = join(dir, c[0].name);
            if (!p) {
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto out;
            }
            zrc = get_data(s, p, out->holder, sizeof out->holder, &st, end);
            free(p);
            if (zrc == ZNONODE) continue; /* released meanwhile: look again */
            if (zrc != ZOK) {
                rc = zk_err(zrc, "read", dir);
                goto out;
            }
            out->held = 1;
            out->fence = (uint64_t)st.czxid;
            out->queue_length = n - holders;
            rc = 0;
            goto out;
        }
    }
    rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: %s changes too fast to describe", dir);
out:
    if (rc == 0) {
        /* the semaphore of this name, if there is one (a node of its own) */
        int64_t v = 0;
        int exists = 0;
        if ((rc = zk_sem_count(e, s, name, &v, &exists, end)) == 0)
            out->permits = exists ? v : BATON_PERMITS_UNKNOWN;
    }
    free(c);
    deallocate_String_vector(&sv);
    zk_sess_put(e, s);
    free(dir);
    return rc;
}

/* ---- election ----------------------------------------------------------- */

int zk_election_leader(void *eng, const char *name, uint64_t known_fence, const char *known_value,
                       char *value, size_t n, uint64_t *fence, int64_t deadline_ns, baton_waiter *w)
{
    zeng *e = eng;
    zsess *s = NULL;
    char *dir = NULL, *v = NULL;
    uint64_t slot = 0;
    int rc;

    if (value && n) value[0] = 0;
    *fence = 0;
    if ((rc = zk_path(e, name, NULL, &dir))) return rc;
    if (!(v = malloc(BATON_ELECTION_VALUE_MAX + 1))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if (deadline_ns && w && !(slot = zk_slot_open(e))) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) goto out;
    for (;;) {
        int watch = slot != 0;
        unsigned gen = watch ? baton_waiter_gen(w) : 0;
        struct String_vector sv = { 0, NULL };
        zchild *c = NULL;
        struct Stat st;
        uint64_t f = 0;
        int m = 0, zrc;

        v[0] = 0;
        if (watch) zk_slot_arm(e, slot, w);
        int64_t cd = zk_call_deadline(e, deadline_ns);
        zrc = zk_get_children(s, dir, watch ? zk_node_watcher : NULL, watch ? ZK_SLOT_CTX(slot) : NULL, &sv, cd);
        if (zrc == ZNONODE && watch) {
            /* no election yet: watch for its directory instead */
            zrc = zk_exists(s, dir, zk_node_watcher, ZK_SLOT_CTX(slot), &st, cd);
            if (zrc == ZOK) continue; /* created meanwhile */
            if (zrc == ZNONODE) zrc = ZOK;
        } else if (zrc == ZNONODE) {
            zrc = ZOK;
        } else if (zrc == ZOK) {
            if ((rc = zk_contenders(&sv, ZK_K_LATCH, &c, &m))) {
                deallocate_String_vector(&sv);
                break;
            }
            if (m > 0) {
                char *p = join(dir, c[0].name);
                int len = BATON_ELECTION_VALUE_MAX;
                if (!p) {
                    free(c);
                    deallocate_String_vector(&sv);
                    rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                    break;
                }
                /* the leader's data: its value may change without a new term */
                zrc = zk_get(s, p, watch ? zk_node_watcher : NULL, watch ? ZK_SLOT_CTX(slot) : NULL, v, &len, &st,
                             cd);
                free(p);
                if (zrc == ZOK) {
                    v[len < 0 ? 0 : len] = 0;
                    f = (uint64_t)st.czxid;
                }
            }
            free(c);
            deallocate_String_vector(&sv);
            if (zrc == ZNONODE) continue; /* the leader left while we looked */
        }
        if (zrc != ZOK) {
            if (!zk_retryable(zrc) || baton_now_ns() >= cd || zk_sess_wait(e, s, cd)) {
                rc = zk_err(zrc, "read election", dir);
                break;
            }
            continue;
        }
        if (!deadline_ns || f != known_fence || strcmp(v, known_value ? known_value : "")) {
            *fence = f;
            if (value && n) snprintf(value, n, "%s", v);
            rc = 0;
            break;
        }
        if (!w) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: the leader of %s has not changed", dir);
            break;
        }
        if (baton_waiter_canceled(w)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "zk: observing %s canceled", dir);
            break;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: the leader of %s has not changed", dir);
            break;
        }
        {
            int64_t until = baton_now_ns() + (int64_t)RECHECK_MS * 1000000LL;
            if (until > deadline_ns) until = deadline_ns;
            baton_waiter_park(w, gen, until);
        }
        if (zk_sess_dead(e, s)) {
            /* watches died with the session: look again on a new one */
            zk_sess_put(e, s);
            s = NULL;
            if ((rc = zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms), &s))) break;
        }
    }
out:
    if (slot) zk_slot_close(e, slot);
    zk_sess_put(e, s);
    free(v);
    free(dir);
    return rc;
}

int zk_election_proclaim(void *eng, void *st, const baton_owner *owner, const char *value)
{
    zeng *e = eng;
    zlock *l = st;
    zsess *s = NULL;
    struct String_vector sv = { 0, NULL };
    zchild *c = NULL;
    char *node = NULL;
    int n = 0, zrc, rc = 0;
    int64_t end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */
    (void)owner;

    pthread_mutex_lock(&e->mu);
    if (l->node && !l->lost && e->cur && !e->cur->dead && e->cur->gen == l->gen) {
        s = e->cur;
        s->refs++;
        node = strdup(l->node);
    }
    pthread_mutex_unlock(&e->mu);
    if (!s) return baton_seterr(BATON_ELOST, 0, "zk: %s: this candidate's session is gone", l->dir);
    if (!node) {
        rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
        goto out;
    }
    /* owner-checked: our node must exist and lead */
    if ((zrc = zk_get_children(s, l->dir, NULL, NULL, &sv, end)) != ZOK) {
        rc = zrc == ZNONODE ? baton_seterr(BATON_ELOST, zrc, "zk: %s is gone", l->dir) : zk_err(zrc, "list", l->dir);
        goto out;
    }
    if ((rc = zk_contenders(&sv, ZK_K_LATCH, &c, &n))) goto out;
    if (n == 0 || strcmp(c[0].name, strrchr(node, '/') + 1)) {
        rc = baton_seterr(BATON_ELOST, 0, "zk: %s: this candidate no longer leads", l->dir);
        goto out;
    }
    zrc = zk_set(s, node, value, (int)strlen(value), -1, end);
    if (zrc == ZNONODE) rc = baton_seterr(BATON_ELOST, zrc, "zk: %s: this candidate's node is gone", l->dir);
    else if (zrc != ZOK) rc = zk_err(zrc, "proclaim on", node);
out:
    free(c);
    deallocate_String_vector(&sv);
    free(node);
    zk_sess_put(e, s);
    return rc;
}
