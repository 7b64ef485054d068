/* ---- group membership ---------------------------------------------------------
 * The members of group NAME are the files "groups/<escaped name>/m.<id>",
 * each holding "baton-member 1\n" and the member's value. A member keeps an
 * exclusive OFD lock on its file through the fd it joined with, for as long
 * as it is a member: a member is live iff its file is locked. So a member
 * whose process dies (SIGKILL included) is gone the moment the kernel closes
 * its files, with no lease to run out; leaving unlinks the file (under the
 * lock) and closes it.
 *
 * Joining writes the value into a fresh file, locks it, and renames it to
 * m.<id> without replacing anything (renameat2 RENAME_NOREPLACE): the member
 * appears whole, value included. When m.<id> is there already, it is a live
 * member's (locked: BATON_ELOCKED, never waiting) or one a dead member left
 * (not locked: the joiner locks it, removes it, and renames again). Only a
 * lock holder removes a member file, so two joiners of one id cannot both
 * win.
 *
 * Listing opens every m.* file read-only and asks the kernel whether it is
 * locked (F_OFD_GETLK: takes nothing, so a listing never disturbs a member
 * or a joiner). A dead member's file stays until its id joins again; it is
 * never listed.
 *
 * Watching: inotify on the group's folder. A join is a rename (IN_MOVED_TO),
 * a leave an unlink, and a member's death closes its file, opened for
 * writing (IN_CLOSE_WRITE, the kernel's own close at exit included). That
 * close event is sent just before the kernel drops the file's lock, so a
 * watcher that re-lists at once can still see the dying member: watchers
 * therefore also re-list every second while they wait (RELIST_NS), the bound
 * on how late a killed member's departure can be seen. */
#include "file_int.h"

#define MEMBER_HEAD "baton-member 1\n"
#define RELIST_NS 1000000000LL

typedef struct {
    file_lock base;            /* kind K_MEMBER; fd: our member file, locked; gfd: the group folder */
    char rel[220];             /* "groups/<escaped name>" */
    char mname[BATON_MEMBER_ID_MAX + 8];
} file_member;

static int group_rel(const char *name, char *out, size_t n)
{
    char esc[200];
    file__esc_name(name, esc, sizeof esc);
    return snprintf(out, n, "groups/%s", esc) >= (int)n ? -1 : 0;
}

static int member_new(void *eng, const char *name, const char *id, const baton_lock_options *opts, void **st)
{
    file_member *m = calloc(1, sizeof *m);
    (void)eng; (void)opts;
    if (!m) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    m->base.kind = K_MEMBER;
    m->base.fd = m->base.gfd = -1;
    group_rel(name, m->rel, sizeof m->rel);
    snprintf(m->mname, sizeof m->mname, "m.%s", id);
    m->base.fname = m->mname;
    *st = m;
    return 0;
}

/* A fresh file with our value, locked: its fd, or an error. */
static int member_file(file_engine *e, int dfd, const char *value, char *tname, size_t tn)
{
    static _Atomic unsigned seq;
    size_t vlen = strlen(value), hl = sizeof MEMBER_HEAD - 1;
    int fd, rc;
    snprintf(tname, tn, "t.%ld.%u.%" PRId64, (long)getpid(), ++seq, baton_now_ns());
    fd = openat(dfd, tname, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, e->fmode);
    if (fd < 0) return baton_seterr(BATON_EIO, errno, "member file %s/%s: %s", e->dir, tname, strerror(errno));
    if (e->shared && fchmod(fd, e->fmode)) {
    }
    if (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0 || pwrite(fd, MEMBER_HEAD, hl, 0) != (ssize_t)hl ||
        pwrite(fd, value, vlen, (off_t)hl) != (ssize_t)vlen) {
        rc = baton_seterr(BATON_EIO, errno, "member file %s/%s: %s", e->dir, tname, strerror(errno));
        close(fd);
        unlinkat(dfd, tname, 0);
        return rc;
    }
    return fd;
}

/* Puts the file TNAME at MNAME unless something is there: 0, or -1 with errno. */
static int place(int dfd, const char *tname, const char *mname)
{
    if (renameat2(dfd, tname, dfd, mname, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
    /* a file system without RENAME_NOREPLACE: link (fails when taken), then drop the temporary name */
    if (linkat(dfd, tname, dfd, mname, 0)) return -1;
    unlinkat(dfd, tname, 0);
    return 0;
}

/* m.<id> is there: BATON_ELOCKED when a live member holds it, else removes
 * the dead member's file (0) so the caller can try again. */
static int clear_stale(file_engine *e, int dfd, const file_member *m)
{
    int fd, rc = file__sub_open(e, dfd, m->mname, O_RDWR, "member file", &fd);
    if (rc) return rc;
    if (fd < 0) return 0;   /* it left meanwhile */
    if (file__setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
        int err = errno;
        close(fd);
        if (err == EAGAIN || err == EACCES)
            return baton_seterr(BATON_ELOCKED, 0, "a live member of this group has the id '%s'", m->mname + 2);
        return baton_seterr(BATON_EIO, err, "member file %s: %s", m->mname, strerror(err));
    }
    /* Ours now, and dead: whoever holds the lock may remove it. */
    if (file__still_linked(fd)) unlinkat(dfd, m->mname, 0);
    close(fd);
    return 0;
}

int file__member_join(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    file_member *m = (file_member *)fl;
    char tname[128];
    int dfd, fd, rc;
    if (fl->fd >= 0) return baton_seterr(BATON_EDEADLK, 0, "already a member");
    req->sent_ns = baton_now_ns();
    req->fence = 0;
    if ((rc = file__subdir(e, m->rel, 1, &dfd))) return rc;
    if ((fd = member_file(e, dfd, req->value ? req->value : "", tname, sizeof tname)) < 0) {
        close(dfd);
        return fd;
    }
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) {
            rc = file__replaced_err(e, m->mname);
            break;
        }
        if (place(dfd, tname, m->mname) == 0) {
            fl->fd = fd;
            fl->gfd = dfd;
            return 0;
        }
        if (errno != EEXIST) {
            rc = baton_seterr(BATON_EIO, errno, "member file %s/%s/%s: %s", e->dir, m->rel, m->mname, strerror(errno));
            break;
        }
        if ((rc = clear_stale(e, dfd, m))) break;
    }
    unlinkat(dfd, tname, 0);
    close(fd);
    close(dfd);
    return rc;
}

int file__member_leave(file_lock *fl)
{
    file_member *m = (file_member *)fl;
    struct stat a, b;
    if (fl->fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "not a member");
    /* remove our own file only: one a cleaner removed may have been joined anew */
    if (fstat(fl->fd, &a) == 0 && fstatat(fl->gfd, m->mname, &b, AT_SYMLINK_NOFOLLOW) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        unlinkat(fl->gfd, m->mname, 0);
    close(fl->fd);
    close(fl->gfd);
    fl->fd = fl->gfd = -1;
    return 0;
}

void file__member_free(file_lock *fl)
{
    if (fl->fd >= 0) file__member_leave(fl);
    free(fl);
}

/* A listing's fingerprint: the same for the same members and values
 * whatever the order the folder gives them in. */
static uint64_t mix(const char *a, const char *b)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = a; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
    for (const char *p = b; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* FN once per live member of the folder DFD; *token: their fingerprint. */
static int list_dir(file_engine *e, int dfd, void (*fn)(void *, const char *, const char *), void *arg,
                    uint64_t *token)
{
    const size_t hl = sizeof MEMBER_HEAD - 1;
    uint64_t sum = 0, n = 0;
    struct dirent *d;
    int rc = 0, dup_fd = dup(dfd);
    DIR *dir = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;   /* a dup shares dfd's position: rewound below */
    if (!dir) {
        rc = baton_seterr(BATON_EIO, errno, "group folder in %s: %s", e->dir, strerror(errno));
        if (dup_fd >= 0) close(dup_fd);
        return rc;
    }
    rewinddir(dir);
    while ((d = readdir(dir))) {
        char *buf = NULL;
        size_t len;
        int fd, live;
        if (strncmp(d->d_name, "m.", 2)) continue;
        fd = openat(dfd, d->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) continue;   /* left meanwhile, or not a file */
        live = file__locked_by_other(fd);
        if (live == 1 && file__slurp(fd, hl + BATON_MEMBER_VALUE_MAX, &buf, &len, "member file") == 0 &&
            len >= hl && !memcmp(buf, MEMBER_HEAD, hl)) {
            if (fn) fn(arg, d->d_name + 2, buf + hl);
            sum += mix(d->d_name + 2, buf + hl);
            n++;
        }
        free(buf);
        close(fd);
    }
    closedir(dir);
    *token = (sum ^ (n * 0x2545f4914f6cdd1dull)) + n;
    return rc;
}

static int group_list(void *eng, const char *name, void (*fn)(void *arg, const char *id, const char *value),
                      void *arg, uint64_t *token)
{
    file_engine *e = eng;
    char rel[220];
    int dfd, rc;
    uint64_t tok = 0;
    group_rel(name, rel, sizeof rel);
    if ((rc = file__subdir(e, rel, 0, &dfd))) return rc;
    if (dfd >= 0) {
        rc = list_dir(e, dfd, fn, arg, &tok);
        close(dfd);
    }
    if (token) *token = tok;
    return rc;
}

static int group_watch(void *eng, const char *name, uint64_t token, int64_t deadline_ns, baton_waiter *w)
{
    file_engine *e = eng;
    char rel[220], path[4096 + 240];
    watch_reg reg;
    int watching = 0, rc, dfd;
    group_rel(name, rel, sizeof rel);
    snprintf(path, sizeof path, "%s/%s", e->dir, rel);
    if ((rc = file__subdir(e, rel, 1, &dfd))) return rc;
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        uint64_t now;
        int64_t until;
        if ((rc = list_dir(e, dfd, NULL, NULL, &now))) break;
        if (now != token) break;
        if (deadline_ns == 0 || (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns)) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "group watch timed out");
            break;
        }
        if (!watching) {
            if ((rc = file__watch_add(e, path, IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CLOSE_WRITE |
                                      IN_MOVE_SELF | IN_DELETE_SELF | IN_ONLYDIR, NULL, &reg, w)))
                break;
            watching = 1;
            continue;
        }
        until = baton_now_ns() + RELIST_NS;
        if (deadline_ns < until) until = deadline_ns;
        if ((rc = baton_waiter_park(w, gen, until))) {
            rc = baton_seterr(rc, 0, "group watch canceled");
            break;
        }
        /* the folder anew, as value watches do (value.c) */
        file__watch_remove(e, &reg);
        watching = 0;
        close(dfd);
        if ((rc = file__subdir(e, rel, 1, &dfd))) return rc;
    }
    if (watching) file__watch_remove(e, &reg);
    close(dfd);
    return rc;
}

const baton_group_methods file__group_methods = {
    .create = member_new,
    .list = group_list,
    .watch = group_watch,
};
