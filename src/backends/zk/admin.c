/*
 * What an operator asks of the engine (baton list, baton unlock --force).
 * docs/zk-engine.md, "Operator commands".
 *
 * list: every directory below the base with contender nodes of a lock or a
 * read-write lock (any of the layouts lock.c knows: Curator's, kazoo's) is
 * a held name: its first contenders hold it.
 *
 * break: the holding nodes (the first node, or the readers at the head of
 * the line) are deleted; their owners' exists watch fires and they report
 * the loss (lock.c). A fence is the czxid of a contender node, and zxids
 * only grow, so the bumped fence is the zxid of a write made after the
 * deletes: the mzxid of setting the directory's data (its "last fence",
 * which lock_info shows). Every node created later, so every later grant,
 * has a greater czxid. A contender already queued when the lock was broken
 * was created before: its grant, next in line, carries a fence above the
 * broken holder's but below the printed one.
 */
#include "zk_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX_DIRS 100000     /* a walk looks at no more directories than this */

#define HOLDS (ZK_K_LOCK | ZK_K_READ | ZK_K_WRITE)
#define ANY_KIND (ZK_K_LOCK | ZK_K_READ | ZK_K_WRITE | ZK_K_LATCH | ZK_K_LEASE)

typedef struct {
    zeng *e;
    zsess *s;
    const char *prefix;
    size_t plen;
    int (*fn)(void *, const char *);
    void *arg;
    int64_t end;
    int dirs;
    int stop;
} walk;

/* REL ("" = the base) could hold a name with the prefix, or lead to one. */
static int wanted(const walk *w, const char *rel)
{
    size_t n = strlen(rel);
    if (n >= w->plen) return !strncmp(rel, w->prefix, w->plen);
    return !strncmp(w->prefix, rel, n) && (n == 0 || w->prefix[n] == '/');
}

static int walk_dir(walk *w, const char *rel)
{
    struct String_vector sv = { 0, NULL };
    zchild *c = NULL;
    char *abs;
    size_t bl = strlen(w->e->base), rl = strlen(rel);
    int n = 0, zrc, rc = 0;

    if (w->stop) return 0;
    if (++w->dirs > LIST_MAX_DIRS)
        return baton_seterr(BATON_EUNAVAILABLE, 0, "zk: more than %d directories below %s", LIST_MAX_DIRS,
                            *w->e->base ? w->e->base : "/");
    if (!(abs = malloc(bl + rl + 3))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    snprintf(abs, bl + rl + 3, "%s%s%s", w->e->base, *rel ? "/" : "", rel);
    if (!*abs) strcpy(abs, "/");
    zrc = zk_get_children(w->s, abs, NULL, NULL, &sv, w->end);
    if (zrc == ZNONODE) goto out;  /* gone meanwhile */
    if (zrc == ZNOAUTH && *rel) {
        /* another user's locks under an ACL we may not read: the list is of
         * what this client can see, not a failure of the whole walk (one
         * client's ACL'd tree would otherwise break `baton list` for all) */
        baton_log(BATON_LOG_INFO, "zk: list: %s is not readable with this client's credentials; skipped", abs);
        goto out;
    }
    if (zrc != ZOK) {
        rc = zk_err(zrc, "list", abs);
        goto out;
    }
    if ((rc = zk_contenders(&sv, HOLDS, &c, &n))) goto out;
    if (n > 0 && *rel && rl >= w->plen && !strncmp(rel, w->prefix, w->plen) && w->fn(w->arg, rel)) {
        w->stop = 1;
        goto out;
    }
    for (int i = 0; i < sv.count && !rc && !w->stop; i++) {
        struct String_vector one = { 1, &sv.data[i] };
        zchild *k = NULL;
        int m = 0;
        char *sub;
        if (!*rel && !*w->e->base && !strcmp(sv.data[i], "zookeeper")) continue;
        /* contender nodes are leaves */
        if ((rc = zk_contenders(&one, ANY_KIND, &k, &m))) break;
        free(k);
        if (m) continue;
        if (!(sub = malloc(rl + strlen(sv.data[i]) + 2))) {
            rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
            break;
        }
        sprintf(sub, "%s%s%s", rel, *rel ? "/" : "", sv.data[i]);
        if (wanted(w, sub)) rc = walk_dir(w, sub);
        free(sub);
    }
out:
    free(c);
    deallocate_String_vector(&sv);
    free(abs);
    return rc;
}

static int conn(zeng *e, zsess **s)
{
    return zk_sess_get(e, zk_deadline_ms(e->connect_timeout_ms < e->io_timeout_ms ? e->connect_timeout_ms
                                                                                   : e->io_timeout_ms), s);
}

int zk_lock_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    zeng *e = eng;
    walk w = { e, NULL, prefix ? prefix : "", 0, fn, arg, 0, 0, 0 };
    int rc;

    w.plen = strlen(w.prefix);
    if ((rc = conn(e, &w.s))) return rc;
    w.end = zk_deadline_ms(e->io_timeout_ms); /* the whole walk's */
    rc = walk_dir(&w, "");
    zk_sess_put(e, w.s);
    return rc;
}

/* Sets DIR's data to TEXT: 0 with the write's zxid in *ZXID, or a ZooKeeper code. */
static int set_dir(zsess *s, const char *dir, const char *text, int64_t *zxid, int64_t end)
{
    int zrc;
    zcall *c = zk_start_set(s, dir, text, (int)strlen(text), -1, &zrc);
    if (!c) return zrc;
    if ((zrc = zk_call_wait(c, end)) == ZOK) *zxid = zk_call_stat(c)->mzxid;
    zk_call_put(c);
    return zrc;
}

int zk_lock_break(void *eng, const char *name, uint64_t *fence)
{
    zeng *e = eng;
    zsess *s = NULL;
    struct String_vector sv = { 0, NULL };
    zchild *c = NULL;
    char *dir = NULL, buf[24];
    int n = 0, zrc, rc, broke = 0;
    int64_t end, zxid = 0;

    *fence = 0;
    if ((rc = zk_path(e, name, NULL, &dir))) return rc;
    if ((rc = conn(e, &s))) goto out;
    end = zk_deadline_ms(e->io_timeout_ms); /* the whole call's */
    zrc = zk_get_children(s, dir, NULL, NULL, &sv, end);
    if (zrc != ZOK && zrc != ZNONODE) {
        rc = zk_err(zrc, "list", dir);
        goto out;
    }
    if ((rc = zk_contenders(&sv, HOLDS, &c, &n))) goto out;
    {
        /* the holders: the readers at the head of the line, else the first */
        int readers = 0;
        while (readers < n && c[readers].kinds == ZK_K_READ) readers++;
        for (int i = 0; i < (readers ? readers : n ? 1 : 0); i++) {
            char *p = malloc(strlen(dir) + strlen(c[i].name) + 2);
            if (!p) {
                rc = baton_seterr(BATON_ENOMEM, 0, "out of memory");
                goto out;
            }
            sprintf(p, "%s/%s", dir, c[i].name);
            zrc = zk_delete(s, p, -1, end);
            if (zrc == ZOK) broke = 1;
            else if (zrc == ZNOAUTH)
                rc = baton_seterr(BATON_EAUTH, zrc, "zk: breaking '%s': the ACL of %s does not let us delete "
                                  "the holder's node %s (connect with the holder's digest: ?auth=user:password)",
                                  name, dir, p);
            else if (zrc != ZNONODE) rc = zk_err(zrc, "delete", p); /* ZNONODE: released meanwhile */
            free(p);
            if (rc) goto out;
        }
    }
    /* the bump: a write after the deletes; its zxid is the new fence */
    zrc = set_dir(s, dir, "0", &zxid, end);
    if (zrc == ZNONODE) {
        if ((rc = zk_mkdirs(e, s, dir, end))) goto out;
        zrc = set_dir(s, dir, "0", &zxid, end);
    }
    if (zrc != ZOK) {
        rc = zrc == ZNOAUTH ? baton_seterr(BATON_EAUTH, zrc, "zk: breaking '%s': the ACL of %s does not let us "
                                           "write it", name, dir)
                            : zk_err(zrc, "set", dir);
        goto out;
    }
    *fence = (uint64_t)zxid;
    /* lock_info's "last fence" (best effort: the fence is bumped already) */
    snprintf(buf, sizeof buf, "%" PRIu64, *fence);
    set_dir(s, dir, buf, &zxid, end);
    if (!broke) rc = baton_seterr(BATON_ENOTHELD, 0, "zk: %s was not held (fence bumped to %" PRIu64 ")", dir, *fence);
out:
    free(c);
    deallocate_String_vector(&sv);
    zk_sess_put(e, s);
    free(dir);
    return rc;
}
