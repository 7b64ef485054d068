/* ---- values -----------------------------------------------------------------
 * A value NAME is the file "values/v.<escaped name>" (names escaped as lock
 * names are): a fixed header with its version and a deleted mark, then the
 * bytes. It is only ever replaced whole, by writing "t.<escaped name>" and
 * renaming it over, so a reader (which takes no lock) sees the old file or
 * the new one, never a mix. Writers (set, delete) take turns on an OFD lock
 * of "l.<escaped name>", which is never replaced, and do their
 * compare-and-set under it: read the version, check, write, rename.
 *
 * Deleting writes a tombstone (deleted 1, no bytes) that keeps the version,
 * so versions strictly increase over the value's whole life. A file a power
 * loss damaged (the header unreadable) restarts its versions from the wall
 * clock in microseconds, above every version handed out before, as lock
 * fences do (lock.c). The files are not fsync'd (a value is as durable as
 * the lock dir's file system without it; a lock dir in /run is not at all).
 *
 * Watching: inotify on the values folder, woken only by renames onto (and
 * removals of) this value's file, so a watcher of one value is not woken by
 * another's changes; every watcher of one value wakes on its change. No
 * polling: a rename always makes an event, and the watch is set before the
 * version is read, so a change in between is seen. */
#include "file_int.h"
#include <sys/uio.h>

#define VAL_FMT "baton-value 1\nversion %020" PRIu64 "\ndeleted %d\n"
#define VAL_HEAD_LEN 53   /* strlen of VAL_FMT printed */

typedef struct {
    char esc[200];
    char vname[210], lname[210], tname[210];
} file_value;

/* What a value file says. */
typedef struct {
    int exists;         /* a file is there */
    int intact;         /* its header reads */
    int deleted;
    uint64_t version;
    char *buf;          /* the whole file (free it), data at buf + VAL_HEAD_LEN */
    size_t len;         /* of the data */
} vread;

static int value_read(file_engine *e, int dfd, const file_value *fv, vread *r)
{
    char what[300];
    size_t n;
    int fd, rc;
    memset(r, 0, sizeof *r);
    if (dfd < 0) return 0;
    snprintf(what, sizeof what, "value file values/%s", fv->vname);
    if ((rc = file__sub_open(e, dfd, fv->vname, O_RDONLY, "value file", &fd))) return rc;
    if (fd < 0) return 0;
    r->exists = 1;
    rc = file__slurp(fd, BATON_VALUE_MAX + VAL_HEAD_LEN, &r->buf, &n, what);
    close(fd);
    if (rc) return rc;
    if (n >= VAL_HEAD_LEN && !memcmp(r->buf, "baton-value 1\nversion ", 22) && r->buf[42] == '\n' &&
        !memcmp(r->buf + 43, "deleted ", 8) && (r->buf[51] == '0' || r->buf[51] == '1') &&
        r->buf[VAL_HEAD_LEN - 1] == '\n') {
        uint64_t v = 0;
        int ok = 1;
        for (int i = 22; i < 42 && ok; i++) {
            unsigned d = (unsigned)(r->buf[i] - '0');
            if (d > 9 || v > (UINT64_MAX - d) / 10) ok = 0;
            else v = v * 10 + d;
        }
        if (ok && v) {
            r->intact = 1;
            r->version = v;
            r->deleted = r->buf[51] == '1';
            r->len = r->deleted ? 0 : n - VAL_HEAD_LEN;
        }
    }
    return 0;
}

static int value_new(void *eng, const char *name, void **st)
{
    file_value *fv = calloc(1, sizeof *fv);
    (void)eng;
    if (!fv) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    file__esc_name(name, fv->esc, sizeof fv->esc);
    snprintf(fv->vname, sizeof fv->vname, "v.%s", fv->esc);
    snprintf(fv->lname, sizeof fv->lname, "l.%s", fv->esc);
    snprintf(fv->tname, sizeof fv->tname, "t.%s", fv->esc);
    *st = fv;
    return 0;
}

static void value_free(void *eng, void *st)
{
    (void)eng;
    free(st);
}

static int value_get(void *eng, void *st, baton_value_data *out)
{
    file_engine *e = eng;
    file_value *fv = st;
    vread r;
    int dfd, rc;
    memset(out, 0, sizeof *out);
    if ((rc = file__subdir(e, "values", 0, &dfd))) return rc;
    rc = value_read(e, dfd, fv, &r);
    if (dfd >= 0) close(dfd);
    if (rc) return rc;
    if (r.exists && !r.intact) {
        free(r.buf);
        return baton_seterr(BATON_EPROTO, 0, "value file %s/values/%s is damaged (a power loss?); set the value "
                            "again", e->dir, fv->vname);
    }
    if (!r.exists || r.deleted) {
        free(r.buf);
        return baton_seterr(BATON_ENOENT, 0, "no value");
    }
    memmove(r.buf, r.buf + VAL_HEAD_LEN, r.len);
    r.buf[r.len] = 0;
    out->data = r.buf;
    out->len = r.len;
    out->version = r.version;
    return 0;
}

/* Replaces the value file (under the writers' lock): DATA, or a tombstone
 * when DEL. */
static int value_write(file_engine *e, int dfd, file_value *fv, uint64_t version, int del, const void *data,
                       size_t len)
{
    char head[VAL_HEAD_LEN + 1];
    int fd, rc;
    struct iovec iov[2];
    ssize_t w;
    if (snprintf(head, sizeof head, VAL_FMT, version, del) != VAL_HEAD_LEN)
        return baton_seterr(BATON_EIO, 0, "value file: cannot format the header");
    if ((rc = file__sub_open(e, dfd, fv->tname, O_WRONLY | O_CREAT | O_TRUNC, "value file", &fd))) return rc;
    iov[0].iov_base = head;
    iov[0].iov_len = VAL_HEAD_LEN;
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = del ? 0 : len;
    w = pwritev(fd, iov, 2, 0);
    if (w != (ssize_t)(VAL_HEAD_LEN + iov[1].iov_len)) {
        rc = baton_seterr(BATON_EIO, w < 0 ? errno : ENOSPC, "value file values/%s: write: %s", fv->tname,
                          strerror(w < 0 ? errno : ENOSPC));
        close(fd);
        unlinkat(dfd, fv->tname, 0);
        return rc;
    }
    close(fd);
    if (renameat(dfd, fv->tname, dfd, fv->vname))
        return baton_seterr(BATON_EIO, errno, "value file values/%s: rename: %s", fv->vname, strerror(errno));
    return 0;
}

/* One compare-and-set: set (DEL 0) or delete (DEL 1). */
static int value_cas(file_engine *e, file_value *fv, int del, const void *data, size_t len, uint64_t expect,
                     uint64_t *version)
{
    int dfd, lfd = -1, rc, present;
    uint64_t next;
    vread r = { 0 };
    if ((rc = file__subdir(e, "values", 1, &dfd))) return rc;
    if ((rc = file__sub_open(e, dfd, fv->lname, O_RDWR | O_CREAT, "value lock file", &lfd))) goto out;
    if ((rc = file__lock_short(e, lfd, "value lock file"))) goto out;
    if ((rc = value_read(e, dfd, fv, &r))) goto out;
    present = r.intact && !r.deleted;
    if (del && !present) {
        rc = baton_seterr(BATON_ENOENT, 0, "no value");
        goto out;
    }
    if (expect != BATON_VALUE_ANY && (expect == 0 ? present : !present || r.version != expect)) {
        rc = baton_seterr(BATON_ECONFLICT, 0, "the value's version is %" PRIu64 ", not %" PRIu64,
                          present ? r.version : 0, expect);
        goto out;
    }
    if (r.intact) next = r.version + 1;
    else if (r.exists) next = file__wall_us();   /* damaged: above every version it had */
    else next = 1;
    if (r.intact && r.version == UINT64_MAX - 1) {
        rc = baton_seterr(BATON_EIO, 0, "value versions exhausted");
        goto out;
    }
    if ((rc = value_write(e, dfd, fv, next, del, data, len))) goto out;
    if (version) *version = next;
out:
    free(r.buf);
    if (lfd >= 0) close(lfd);   /* also unlocks */
    close(dfd);
    return rc;
}

static int value_set(void *eng, void *st, const void *data, size_t len, uint64_t expect, uint64_t *version)
{
    return value_cas(eng, st, 0, data, len, expect, version);
}

static int value_del(void *eng, void *st, uint64_t expect)
{
    return value_cas(eng, st, 1, NULL, 0, expect, NULL);
}

static int value_watch(void *eng, void *st, uint64_t known, int64_t deadline_ns, baton_waiter *w)
{
    file_engine *e = eng;
    file_value *fv = st;
    char path[4096 + 16];
    watch_reg reg;
    int watching = 0, rc, dfd;
    snprintf(path, sizeof path, "%s/values", e->dir);
    if ((rc = file__subdir(e, "values", 1, &dfd))) return rc;
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        vread r;
        uint64_t now;
        if ((rc = value_read(e, dfd, fv, &r))) break;
        now = r.intact && !r.deleted ? r.version : 0;
        free(r.buf);
        if (now != known || (r.exists && !r.intact)) break;   /* a damaged file: let the caller's get say so */
        if (deadline_ns == 0 || (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns)) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "value watch timed out");
            break;
        }
        if (!watching) {
            /* watch first, then read again: a change in between is seen */
            if ((rc = file__watch_add(e, path, IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_MOVE_SELF | IN_DELETE_SELF | IN_ONLYDIR, fv->vname,
                                      &reg, w)))
                break;
            watching = 1;
            continue;
        }
        if ((rc = baton_waiter_park(w, gen, deadline_ns))) {
            rc = baton_seterr(rc, 0, "value watch canceled");
            break;
        }
        /* Woken: open the folder and set the watch again, so a folder that a
         * cleaner removed and a writer made anew (the old watch then ends
         * with IN_IGNORED, which wakes us) is the one watched and read. */
        file__watch_remove(e, &reg);
        watching = 0;
        close(dfd);
        if ((rc = file__subdir(e, "values", 1, &dfd))) return rc;
    }
    if (watching) file__watch_remove(e, &reg);
    close(dfd);
    return rc;
}

const baton_value_methods file__value_methods = {
    .create = value_new,
    .destroy = value_free,
    .get = value_get,
    .set = value_set,
    .del = value_del,
    .watch = value_watch,
};
