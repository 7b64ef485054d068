/*
 * Values: the data of one persistent node, <value_root>/NAME.
 *
 * The version is the node's mzxid: the zxid of its last change. zxids are
 * global and only grow, so versions strictly increase over the value's whole
 * life, a delete and re-create included, and are never 0 for a node that
 * exists. kazoo's Counter keeps its count as repr() text in the data of its
 * path, which is what baton's counter writes: Counter("/baton-values/N") and
 * baton's counter N count together (a node kazoo made empty reads as 0 on
 * both sides).
 *
 * Compare-and-set reads the node's stat and writes with the stat's data
 * version (setData/delete with a version), so the server refuses the write
 * if anything changed the node in between (BATON_ECONFLICT). The data
 * version restarts at 0 on a re-created node: a delete, a re-create and
 * exactly as many sets between our read and our write (one round trip) would
 * let a write through on a node whose mzxid is no longer the expected one.
 *
 * A nested name needs its parents: setting "a/b" makes "a" an empty value
 * (persistent, as kazoo's ensure_path makes it; a container would vanish
 * with its last child, and with it a value set there meanwhile: the server
 * does not tell a container from a persistent node in its stat).
 */
#include "zk_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A parked watcher looks again at least this often, watch or not. */
#define RECHECK_MS 5000

typedef struct {
    zeng *e;
    char *path;
    uint64_t slot;
} zvalue;

int zk_park(zeng *e, baton_waiter *w, unsigned gen, int64_t deadline, const char *what)
{
    int64_t until;
    (void)e;
    if (baton_waiter_canceled(w)) return baton_seterr(BATON_ECANCELED, 0, "zk: wait on %s canceled", what);
    if (deadline != INT64_MAX && baton_now_ns() >= deadline)
        return baton_seterr(BATON_ETIMEDOUT, 0, "zk: %s did not change in time", what);
    until = baton_now_ns() + (int64_t)RECHECK_MS * 1000000LL;
    if (until > deadline) until = deadline;
    if (baton_waiter_park(w, gen, until) == BATON_ECANCELED)
        return baton_seterr(BATON_ECANCELED, 0, "zk: wait on %s canceled", what);
    /* the deadline passed with no wake-up: nothing changed, no last look
     * (which could only fail on a slow server and turn a timeout into an error) */
    if (deadline != INT64_MAX && baton_now_ns() >= deadline && baton_waiter_gen(w) == gen)
        return baton_seterr(BATON_ETIMEDOUT, 0, "zk: %s did not change in time", what);
    return 0;
}

int zk_resession(zeng *e, zsess **s, int64_t deadline, baton_waiter *w, const char *what)
{
    /* a watcher waits out an unreachable server until its own deadline,
     * as a waiting acquire does */
    for (;;) {
        int ms = e->connect_timeout_ms;
        int64_t now = baton_now_ns(), end = now + (int64_t)ms * 1000000LL;
        int rc;
        if (deadline != INT64_MAX && end > deadline) end = deadline > now ? deadline : now;
        if ((rc = zk_sess_get(e, end, s)) == 0) return 0;
        if (w && baton_waiter_canceled(w)) return baton_seterr(BATON_ECANCELED, 0, "zk: wait on %s canceled", what);
        if (deadline == 0 || (deadline != INT64_MAX && baton_now_ns() >= deadline)) return rc;
    }
}

int zk_value_new(void *eng, const char *name, void **st)
{
    zeng *e = eng;
    zvalue *v = calloc(1, sizeof *v);
    int rc;
    *st = NULL;
    if (!v) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    v->e = e;
    if ((rc = zk_path_in(e, e->vbase, name, NULL, &v->path))) {
        free(v);
        return rc;
    }
    if (!(v->slot = zk_slot_open(e))) {
        free(v->path);
        free(v);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = v;
    return 0;
}

void zk_value_free(void *eng, void *st)
{
    zvalue *v = st;
    if (!v) return;
    zk_slot_close(eng, v->slot);
    free(v->path);
    free(v);
}

static uint64_t version_of(const struct Stat *st) { return (uint64_t)st->mzxid; }

static int session(zeng *e, zsess **s)
{
    int ms = e->connect_timeout_ms < e->io_timeout_ms ? e->connect_timeout_ms : e->io_timeout_ms;
    return zk_sess_get(e, zk_deadline_ms(ms), s);
}

/* After a failed request: 1 when it may be sent again (the connection came
 * back before END), else 0 (the caller reports ZRC). */
static int again(zeng *e, zsess *s, int zrc, int64_t end)
{
    return zrc == ZCONNECTIONLOSS && baton_now_ns() < end && zk_sess_wait(e, s, end) == 0;
}

int zk_value_get(void *eng, void *st, baton_value_data *out)
{
    zeng *e = eng;
    zvalue *v = st;
    zsess *s = NULL;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc, rc;

    memset(out, 0, sizeof *out);
    if ((rc = session(e, &s))) return rc;
    for (;;) {
        zcall *c = zk_start_get(s, v->path, NULL, NULL, &zrc);
        if (c) {
            zrc = zk_call_wait(c, end);
            if (zrc == ZOK) {
                int len = 0;
                if ((rc = zk_call_data_take(c, &out->data, &len)) == 0) {
                    out->len = (size_t)len;
                    out->version = version_of(zk_call_stat(c));
                }
                zk_call_put(c);
                break;
            }
            zk_call_put(c);
        }
        if (zrc == ZNONODE) {
            rc = baton_seterr(BATON_ENOENT, 0, "zk: value %s does not exist", v->path);
            break;
        }
        if (!again(e, s, zrc, end)) {
            rc = zk_err(zrc, "read", v->path);
            break;
        }
    }
    zk_sess_put(e, s);
    return rc;
}

/* Creates the value's node with DATA (and its parents): a
 * ZooKeeper code; *ST its stat on ZOK. */
static int create_node(zeng *e, zsess *s, const char *path, const char *data, int len, struct Stat *st, int64_t end)
{
    int zrc = ZOK;
    for (int tries = 0; tries < 3; tries++) {
        zcall *c = zk_start_create(s, path, data, len, zk_acl(e), ZOO_PERSISTENT, &zrc);
        if (!c) return zrc;
        zrc = zk_call_wait(c, end);
        if (zrc == ZOK) *st = *zk_call_stat(c);
        zk_call_put(c);
        if (zrc != ZNONODE) return zrc;
        {
            /* the parents are missing (first use, or the value root, a
             * container, went with its last value): the root as a
             * container, the parents below it persistent */
            size_t root = strlen(e->vbase);
            char *p = strdup(path);
            int mrc = 0;
            if (!p) return ZSYSTEMERROR;
            if (root) {
                p[root] = 0;
                mrc = zk_mkdirs(e, s, p, end);
                p[root] = '/';
            }
            for (char *sl = strchr(p + root + 1, '/'); !mrc && sl; sl = strchr(sl + 1, '/')) {
                int crc;
                *sl = 0;
                crc = zk_create(s, p, NULL, -1, zk_acl(e), ZOO_PERSISTENT, NULL, 0, NULL, end);
                if (crc != ZOK && crc != ZNODEEXISTS) mrc = -1;
                *sl = '/';
            }
            free(p);
            if (mrc) return ZNONODE;
        }
    }
    return zrc;
}

/* Writes DATA with data version DV (-1 = any): a ZooKeeper code, *ST the new stat. */
static int write_node(zsess *s, const char *path, const char *data, int len, int dv, struct Stat *st, int64_t end)
{
    int zrc;
    zcall *c = zk_start_set(s, path, data, len, dv, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, end)) == ZOK) *st = *zk_call_stat(c);
    zk_call_put(c);
    return zrc;
}

static int conflict(const char *path, uint64_t expect)
{
    return expect == 0 ? baton_seterr(BATON_ECONFLICT, 0, "zk: value %s exists", path)
                       : baton_seterr(BATON_ECONFLICT, 0, "zk: value %s is not at version %llu", path,
                                      (unsigned long long)expect);
}

/* One attempt at a set: 0, a baton error, or 1 with a ZooKeeper code to
 * look at (a lost connection) in *ZRC. */
static int set_once(zeng *e, zsess *s, zvalue *v, const char *data, int len, uint64_t expect, struct Stat *out,
                    int *zrc, int64_t end)
{
    struct Stat st;
    *zrc = ZOK;
    if (expect == 0) {
        *zrc = create_node(e, s, v->path, data, len, out, end);
        if (*zrc == ZNODEEXISTS) return conflict(v->path, 0);
        return *zrc == ZOK ? 0 : 1;
    }
    if (expect == BATON_VALUE_ANY) {
        *zrc = write_node(s, v->path, data, len, -1, out, end);
        if (*zrc == ZNONODE) *zrc = create_node(e, s, v->path, data, len, out, end);
        return *zrc == ZOK ? 0 : 1;
    }
    *zrc = zk_exists(s, v->path, NULL, NULL, &st, end);
    if (*zrc == ZNONODE || (*zrc == ZOK && version_of(&st) != expect)) return conflict(v->path, expect);
    if (*zrc != ZOK) return 1;
    *zrc = write_node(s, v->path, data, len, st.version, out, end);
    if (*zrc == ZBADVERSION || *zrc == ZNONODE) return conflict(v->path, expect);
    return *zrc == ZOK ? 0 : 1;
}

int zk_value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    zeng *e = eng;
    zvalue *v = st;
    zsess *s = NULL;
    struct Stat out;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc = ZOK, rc;

    if (version) *version = 0;
    if (len > INT_MAX) return baton_seterr(BATON_EINVAL, 0, "zk: value too long");
    if ((rc = session(e, &s))) return rc;
    for (int tries = 0; tries < 8; tries++) {
        memset(&out, 0, sizeof out);
        rc = set_once(e, s, v, data, (int)len, expect, &out, &zrc, end);
        if (rc == 0) {
            if (version) *version = version_of(&out);
            break;
        }
        if (rc < 0) break; /* a baton error */
        if (zrc == ZNODEEXISTS && expect == BATON_VALUE_ANY) continue; /* created meanwhile: set it */
        if (expect != BATON_VALUE_ANY && zk_retryable(zrc)) {
            /* a conditional write whose answer was lost may have been made:
             * sending it again would report our own write as a conflict */
            rc = baton_seterr(BATON_EUNAVAILABLE, zrc, "zk: set %s: %s (it may have been made)", v->path,
                              zerror(zrc));
            break;
        }
        if (!again(e, s, zrc, end)) {
            rc = zk_err(zrc, "set", v->path);
            break;
        }
    }
    if (rc > 0) rc = baton_seterr(BATON_EUNAVAILABLE, 0, "zk: value %s changes too fast to set", v->path);
    zk_sess_put(e, s);
    return rc;
}

int zk_value_del(void *eng, void *st, uint64_t expect)
{
    zeng *e = eng;
    zvalue *v = st;
    zsess *s = NULL;
    int64_t end = zk_deadline_ms(e->io_timeout_ms);
    int zrc, rc;

    if ((rc = session(e, &s))) return rc;
    for (int tries = 0;; tries++) {
        struct Stat cur;
        zrc = zk_exists(s, v->path, NULL, NULL, &cur, end);
        if (zrc == ZNONODE) {
            rc = baton_seterr(BATON_ENOENT, 0, "zk: value %s does not exist", v->path);
            break;
        }
        if (zrc == ZOK && expect != BATON_VALUE_ANY && version_of(&cur) != expect) {
            rc = conflict(v->path, expect);
            break;
        }
        if (zrc == ZOK) zrc = zk_delete(s, v->path, cur.version, end);
        if (zrc == ZOK) {
            rc = 0;
            break;
        }
        if (zrc == ZNOTEMPTY) {
            rc = baton_seterr(BATON_EINVAL, zrc, "zk: value %s has values below it (%s/...): delete those first",
                              v->path, v->path);
            break;
        }
        if (zrc == ZBADVERSION && expect != BATON_VALUE_ANY) {
            rc = conflict(v->path, expect);
            break;
        }
        if ((zrc == ZBADVERSION || zrc == ZNONODE) && tries < 8) continue; /* changed meanwhile: look again */
        if (expect != BATON_VALUE_ANY && zk_retryable(zrc)) {
            rc = baton_seterr(BATON_EUNAVAILABLE, zrc, "zk: delete %s: %s (it may have been made)", v->path,
                              zerror(zrc));
            break;
        }
        if (tries >= 8 || !again(e, s, zrc, end)) {
            rc = zk_err(zrc, "delete", v->path);
            break;
        }
    }
    zk_sess_put(e, s);
    return rc;
}

/* The version now, with a watch on the node when W (armed on the slot). */
static int look(zeng *e, zsess *s, zvalue *v, int watch, uint64_t *ver, int64_t end)
{
    struct Stat st;
    int zrc = zk_exists(s, v->path, watch ? zk_node_watcher : NULL, watch ? ZK_SLOT_CTX(v->slot) : NULL, &st, end);
    (void)e;
    if (zrc == ZOK) *ver = version_of(&st);
    else if (zrc == ZNONODE) *ver = 0;
    return zrc == ZNONODE ? ZOK : zrc;
}

int zk_value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    zeng *e = eng;
    zvalue *v = st;
    zsess *s = NULL;
    int rc;

    if ((rc = session(e, &s))) return rc;
    for (;;) {
        int watch = deadline_ns != 0 && w;
        unsigned gen = watch ? baton_waiter_gen(w) : 0;
        uint64_t ver = 0;
        int zrc;
        if (watch) zk_slot_arm(e, v->slot, w);
        zrc = look(e, s, v, watch, &ver, zk_call_deadline(e, deadline_ns));
        if (zrc != ZOK) {
            if (zk_retryable(zrc) && !zk_sess_dead(e, s) && deadline_ns != 0 &&
                (deadline_ns == INT64_MAX || baton_now_ns() < deadline_ns) &&
                zk_sess_wait(e, s, zk_call_deadline(e, deadline_ns)) == 0)
                continue;
            if (zrc == ZOPERATIONTIMEOUT && watch && deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
                /* a last look past the deadline that the server did not answer in time */
                rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: value %s: no change seen in time", v->path);
                break;
            }
            if (!zk_sess_dead(e, s) || deadline_ns == 0) {
                rc = zk_err(zrc, "watch", v->path);
                break;
            }
        } else if (ver != known) {
            rc = 0;
            break;
        } else if (!watch) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "zk: value %s has not changed", v->path);
            break;
        } else if ((rc = zk_park(e, w, gen, deadline_ns, v->path))) {
            break;
        }
        if (zk_sess_dead(e, s)) {
            /* its watches died with the session: a new one, and a change
             * meanwhile is seen by the next look */
            zk_sess_put(e, s);
            s = NULL;
            if ((rc = zk_resession(e, &s, deadline_ns, w, v->path))) break;
        }
    }
    zk_slot_arm(e, v->slot, NULL);
    zk_sess_put(e, s);
    return rc;
}
