/*
 * The embedded file backend: one lock file per name in a private directory
 * (see check_dir for who may write it), locked with open file description
 * (OFD) locks. A name that is an absolute path is that file instead, locked
 * with flock(2) so flock(1) users are excluded too (see "path locks").
 *
 * OFD locks belong to the open file description, not the process, so two
 * handles in one process exclude each other, and the kernel drops the lock the
 * moment the holder dies. There is no lease: a lock is held until released or
 * until its holder exits. The fence is a counter inside the lock file, bumped
 * while the lock is held, so it survives every client; each new fence is
 * also at least the wall clock in microseconds, so it stays above every
 * fence handed out before even when a power loss takes the counter with it
 * (see next_fence).
 *
 * Waiting uses F_OFD_SETLKW (flock(2) for a path) on a helper thread, so the
 * kernel queues the waiter and grants it the instant the holder lets go (no
 * polling). A wait that times out or is cancelled interrupts its helper with a
 * signal and joins it (see wait_main).
 *
 * Semaphores keep a counter file; permit-expirable semaphores keep one lock
 * file per permit (see their sections below).
 */
#include "core/internal.h"
#include "sha256.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <limits.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The record at the start of every lock file; fixed width so it is rewritten in place. */
#define REC_SIZE 256
#define REC_FMT "baton-lock 1\nfence %020" PRIu64 "\nheld %d\nholder %-200.200s\n"

/* One waiter on a semaphore file, woken by the inotify watcher. */
typedef struct watch_reg {
    int wd;
    baton_waiter *w;
    struct watch_reg *next;
} watch_reg;

typedef struct {
    int dirfd;
    char dir[4096];
    int shared;          /* ?shared=group: a directory shared with a group on purpose */
    mode_t fmode;        /* files we create: 0600, or 0660 in a group-shared dir */
    /* The inotify watcher: started by the first semaphore wait. */
    pthread_mutex_t wmu;
    int ino_fd, stop_pipe[2];
    pthread_t wth;
    int wth_started;
    watch_reg *regs;
} file_engine;

enum { K_PLAIN, K_READ, K_WRITE };

struct file_lock;

/* What the two sides of a read-write lock share. */
typedef struct {
    pthread_mutex_t mu;
    int wr_fd;                 /* the write side's fd while it is held, else -1 */
    int wr_gfd;                /* path locks: the write side's fence file (gate held), else -1 */
    int rd_borrows;            /* the read side rides on wr_fd (a downgrade) */
    struct file_lock *rd;
    int refs;
} file_rw;

typedef struct file_lock {
    char fname[256];
    int fd;          /* open and locked while held, else -1 */
    int kind;
    file_rw *rw;
    char *path;      /* a name that is an absolute path: that very file, locked with flock(2); else NULL */
    int gfd;         /* path locks: the fence file in the lock dir, kept while the write side holds
                      * (its gate byte holds new readers back), else -1 */
} file_lock;

static int resolve_dir(const baton_uri *u, char *out, size_t n, int *shared)
{
    const char *env;
    *shared = 0;
    if (u->host && strcmp(u->host, "localhost"))
        return baton_seterr(BATON_EINVAL, 0, "file URI: host '%s' is not allowed; use file:///abs/dir", u->host);
    for (size_t i = 0; i < u->nparams; i++) {
        if (strcmp(u->params[i].key, "shared"))
            return baton_seterr(BATON_EINVAL, 0, "file URI: unknown option '%s'", u->params[i].key);
        if (strcmp(u->params[i].value, "group"))
            return baton_seterr(BATON_EINVAL, 0, "file URI: shared=%s: the only value is 'group' "
                                "(a lock directory an administrator shares with one group)", u->params[i].value);
        *shared = 1;
    }
    if (u->path && *u->path) {
        if (u->path[0] != '/')
            return baton_seterr(BATON_EINVAL, 0, "file URI: the directory must be absolute");
        snprintf(out, n, "%s", u->path);
    } else if ((env = getenv("BATON_DIR")) && *env) {
        if (env[0] != '/')
            return baton_seterr(BATON_EINVAL, 0, "BATON_DIR must be an absolute path");
        snprintf(out, n, "%s", env);
    } else if ((env = getenv("XDG_RUNTIME_DIR")) && env[0] == '/') {
        snprintf(out, n, "%s/baton", env);
    } else {
        snprintf(out, n, "/tmp/baton-%lu", (unsigned long)geteuid());
    }
    return 0;
}

/* What lstat finds at a path we refused to open, in words. */
static const char *kind_of(const struct stat *st)
{
    if (S_ISLNK(st->st_mode)) return "a symbolic link";
    if (S_ISDIR(st->st_mode)) return "a directory";
    if (S_ISFIFO(st->st_mode)) return "a named pipe (FIFO)";
    if (S_ISSOCK(st->st_mode)) return "a socket";
    if (S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode)) return "a device";
    if (S_ISREG(st->st_mode)) return "a regular file";
    return "something unknown";
}

/* " (to TARGET)" for a symbolic link at NAME under dirfd (AT_FDCWD: a path), else "". */
static void link_target(int dirfd, const char *name, char *buf, size_t n)
{
    char t[1024];
    ssize_t len = readlinkat(dirfd, name, t, sizeof t - 1);
    buf[0] = 0;
    if (len < 0) return;
    t[len] = 0;
    snprintf(buf, n, " (to %.900s)", t);
}

static int in_group(gid_t g)
{
    gid_t *list;
    int n, found = 0;
    if (getegid() == g) return 1;
    if ((n = getgroups(0, NULL)) <= 0 || !(list = calloc((size_t)n, sizeof *list))) return 0;
    n = getgroups(n, list);
    for (int i = 0; i < n && !found; i++) found = list[i] == g;
    free(list);
    return found;
}

/* The rules for the lock directory, checked on the open directory itself (so
 * nothing can be swapped in between the check and its use).
 *
 * Whoever can create entries in it can pre-create a lock file of theirs (then
 * hold it, or keep us from opening it) or plant something at a lock file's
 * path. So, by default, it must be ours and nobody else may write to it: no
 * group or world write bit. With ?shared=group an administrator's directory
 * shared with one group is accepted: owned by us or root, group-writable,
 * setgid (so lock files created by any member belong to the group, and
 * members can open each other's), never world-writable. World-writable
 * directories are refused always, sticky bit or not: the sticky bit stops
 * others from removing our files, not from creating theirs under our names.
 * A refused directory is BATON_EIO, as a planted file or a link at the
 * directory is (the lock store refused: `baton` exits 74), not BATON_EAUTH:
 * nobody lacks a permission here, the store is unsafe to use. Not being in
 * a shared directory's group is a permission we lack: BATON_EAUTH, as
 * EACCES on the directory is. */
static int check_dir(const char *dir, const struct stat *st, int shared)
{
    mode_t m = st->st_mode & 07777;
    uid_t me = geteuid();
    if (m & S_IWOTH) {
        /* A sticky world-writable dir is a shared one like /tmp: never suggest closing it. */
        int mine = st->st_uid == me && !(m & S_ISVTX);
        return baton_seterr(BATON_EIO, 0, "lock dir %s is writable by every user (mode %04o): anyone could "
                            "create or hold its lock files; refusing it. Use a private directory instead (e.g. "
                            "file://%s/baton-%lu, which baton creates mode 0700)%s%s", dir, (unsigned)m,
                            strcmp(dir, "/") ? dir : "", (unsigned long)me,
                            mine ? ", or if the directory is yours alone: chmod 700 " : "", mine ? dir : "");
    }
    if (!shared) {
        if (st->st_uid != me)
            return baton_seterr(BATON_EIO, 0, "lock dir %s is owned by someone else (uid %lu); refusing it. "
                                "Use a directory of your own (for one an administrator shares with a group, "
                                "add ?shared=group to the URI)", dir, (unsigned long)st->st_uid);
        if (m & S_IWGRP)
            return baton_seterr(BATON_EIO, 0, "lock dir %s is writable by its group (mode %04o): another user "
                                "could create or hold its lock files; refusing it. Run chmod 700 %s (or use a "
                                "private directory); for a directory shared with a group on purpose, add "
                                "?shared=group to the URI and make it setgid (chmod 2770)", dir, (unsigned)m, dir);
        return 0;
    }
    if (st->st_uid != me && st->st_uid != 0)
        return baton_seterr(BATON_EIO, 0, "lock dir %s (shared=group) is owned by uid %lu: a shared lock "
                            "directory must belong to root or to you, since its owner can change its mode at will; "
                            "refusing it", dir, (unsigned long)st->st_uid);
    if ((m & S_IWGRP) && !(m & S_ISGID))
        return baton_seterr(BATON_EIO, 0, "lock dir %s (shared=group) is not setgid (mode %04o): lock files "
                            "its members create would not belong to its group, so other members could not "
                            "open them. Run chmod g+s %s (mode 2770)", dir, (unsigned)m, dir);
    if (me != 0 && st->st_uid != me && !in_group(st->st_gid))
        return baton_seterr(BATON_EAUTH, 0, "lock dir %s (shared=group) belongs to group %lu, which you are not "
                            "in; refusing it", dir, (unsigned long)st->st_gid);
    return 0;
}

/* Opens the lock directory without following a link at its last component:
 * a symbolic link there could be re-pointed at any time (and /tmp/baton-<uid>
 * is a name anyone can take first). The components above may be links. */
static int open_dir(const char *dir, int *fdout)
{
    struct stat st;
    char to[1100];
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        *fdout = fd;
        return 0;
    }
    if ((errno == ENOTDIR || errno == ELOOP) && lstat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        if (S_ISLNK(st.st_mode)) {
            link_target(AT_FDCWD, dir, to, sizeof to);
            return baton_seterr(BATON_EIO, 0, "lock dir %s is a symbolic link%s; refusing it (baton does not follow "
                                "a link at the lock directory itself): name the real directory instead", dir, to);
        }
        return baton_seterr(BATON_EIO, 0, "lock dir %s is %s, not a directory; refusing it", dir, kind_of(&st));
    }
    if (errno == EACCES && stat(dir, &st) == 0)
        return baton_seterr(BATON_EAUTH, EACCES, "lock dir %s: permission denied (owner uid %lu, group %lu, "
                            "mode %04o)", dir, (unsigned long)st.st_uid, (unsigned long)st.st_gid,
                            (unsigned)(st.st_mode & 07777));
    return baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
}

static int file_open(void **eng, const baton_uri *u, const baton_client_options *o)
{
    char dir[4096];
    struct stat st;
    file_engine *e;
    int rc, fd = -1, shared;
    (void)o;

    if ((rc = resolve_dir(u, dir, sizeof dir, &shared))) return rc;
    if (mkdir(dir, 0700) && errno != EEXIST)
        return baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
    if ((rc = open_dir(dir, &fd))) return rc;
    if (fstat(fd, &st)) {
        rc = baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
        close(fd);
        return rc;
    }
    if ((rc = check_dir(dir, &st, shared))) {
        close(fd);
        return rc;
    }
    e = calloc(1, sizeof *e);
    if (!e) { close(fd); return baton_seterr(BATON_ENOMEM, 0, "out of memory"); }
    e->dirfd = fd;
    snprintf(e->dir, sizeof e->dir, "%s", dir);
    e->shared = shared;
    e->fmode = shared ? 0660 : 0600;
    e->ino_fd = e->stop_pipe[0] = e->stop_pipe[1] = -1;
    pthread_mutex_init(&e->wmu, NULL);
    *eng = e;
    return 0;
}

/* Refuses what was found at a file's place in the lock dir: not a plain file
 * of ours but a link, directory, pipe, socket or device (planted, or left by
 * a mistake), or a file with more than one name (possibly a hard link to a
 * file elsewhere, which we would write our record into). It is reported for
 * what it is, as a lock store we refuse, not as an engine we cannot reach. */
static int planted(file_engine *e, const char *what, const char *fname, const struct stat *found)
{
    struct stat st;
    char to[1100] = "";
    if (!found) {
        if (fstatat(e->dirfd, fname, &st, AT_SYMLINK_NOFOLLOW))
            return baton_seterr(BATON_EIO, errno, "%s %s/%s: %s", what, e->dir, fname, strerror(errno));
        found = &st;
    }
    if (S_ISLNK(found->st_mode)) link_target(e->dirfd, fname, to, sizeof to);
    if (S_ISREG(found->st_mode))
        return baton_seterr(BATON_EIO, 0, "%s %s/%s has %lu hard links (baton's own files have one; another may "
                            "be a file elsewhere linked in); refusing it. Remove it if nothing should be there",
                            what, e->dir, fname, (unsigned long)found->st_nlink);
    return baton_seterr(BATON_EIO, 0, "%s %s/%s is %s%s, not a lock file; refusing it (baton never follows or "
                        "uses such a thing in its lock directory). Remove it if nothing should be there",
                        what, e->dir, fname, kind_of(found), to);
}

/* Opens FNAME in the lock dir (flags: O_RDWR or O_RDONLY, maybe O_CREAT).
 * 0 with the fd in *fdout; 0 with *fdout = -1 when it does not exist and
 * O_CREAT was not asked; or an error. Only a regular file with one link is
 * accepted (see planted). O_NONBLOCK keeps a planted FIFO from blocking the
 * open; it changes nothing for regular files or their locks.
 *
 * In a group-shared dir a new file is made 0660 whatever the umask, so every
 * member can open it for writing (OFD write locks need that). Between
 * another member's create and its chmod, our open can fail with EACCES: a
 * short retry rides that out. */
static int dir_open(file_engine *e, const char *fname, int flags, const char *what, int *fdout)
{
    struct stat st;
    int fd, err;
    *fdout = -1;
    for (int tries = 0;; tries++) {
        fd = openat(e->dirfd, fname, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, e->fmode);
        if (fd >= 0) break;
        err = errno;
        if (err == ENOENT && !(flags & O_CREAT)) return 0;
        if (err == ELOOP || err == EISDIR || err == ENXIO || err == ENODEV || err == ETXTBSY)
            return planted(e, what, fname, NULL);
        if (err == EACCES && e->shared && tries < 50) {
            struct timespec ts = { 0, 2000000 };
            nanosleep(&ts, NULL);
            continue;
        }
        if (err == EACCES && fstatat(e->dirfd, fname, &st, AT_SYMLINK_NOFOLLOW) == 0)
            return baton_seterr(BATON_EIO, err, "%s %s/%s: %s (mode %04o, owner uid %lu, group %lu%s)", what, e->dir,
                                fname, strerror(err), (unsigned)(st.st_mode & 07777), (unsigned long)st.st_uid,
                                (unsigned long)st.st_gid, e->shared ? "; in a shared dir lock files must be "
                                "mode 0660 and in the directory's group" : "");
        return baton_seterr(BATON_EIO, err, "%s %s/%s: %s", what, e->dir, fname, strerror(err));
    }
    if (fstat(fd, &st)) {
        err = errno;
        close(fd);
        return baton_seterr(BATON_EIO, err, "%s %s/%s: %s", what, e->dir, fname, strerror(err));
    }
    /* nlink 0 is a file removed under us: the callers check for that and retry */
    if (!S_ISREG(st.st_mode) || st.st_nlink > 1) {
        close(fd);
        return planted(e, what, fname, &st);
    }
    /* Undo the umask on a file we made; should it fail, the other members'
     * EACCES message shows the mode. */
    if (e->shared && st.st_uid == geteuid() && (st.st_mode & 0777) != e->fmode && fchmod(fd, e->fmode)) {
    }
    *fdout = fd;
    return 0;
}

static void file_close(void *eng)
{
    file_engine *e = eng;
    if (e->wth_started) {
        char c = 'q';
        if (write(e->stop_pipe[1], &c, 1) < 0) { /* the thread also stops on POLLHUP */ }
        pthread_join(e->wth, NULL);
    }
    if (e->ino_fd >= 0) close(e->ino_fd);
    if (e->stop_pipe[0] >= 0) { close(e->stop_pipe[0]); close(e->stop_pipe[1]); }
    pthread_mutex_destroy(&e->wmu);
    close(e->dirfd);
    free(e);
}

/* The engine instance is the lock directory itself, however the URI or
 * BATON_DIR spelled it: its real path (no ".", "..", symlinks or doubled
 * slashes), so every client of one directory orders multilock members the
 * same way. A path too long for buf keeps its head and ends in a hash of the
 * whole (128 bits of SHA-256), which stays stable and distinct. */
static int file_identity(void *eng, char *buf, size_t n)
{
    file_engine *e = eng;
    char real[PATH_MAX];
    int len;
    if (!realpath(e->dir, real))
        return baton_seterr(BATON_EIO, errno, "lock dir %s: %s", e->dir, strerror(errno));
    len = snprintf(buf, n, "file:%s", real);
    if (len >= 0 && (size_t)len >= n) {
        char tail[34];
        tail[0] = '#';
        baton__sha256_hex(real, 16, tail + 1);
        if (n <= sizeof tail + 5)
            return baton_seterr(BATON_EINVAL, 0, "identity buffer of %zu bytes is too small", n);
        memcpy(buf + n - sizeof tail, tail, sizeof tail);
    }
    return 0;
}

/* Any name maps to one file name inside the dir: bytes outside [A-Za-z0-9_-]
 * become %XX (so '/', '.', ".." cannot survive), and long names are cut and
 * suffixed with ".<the first 128 bits of the SHA-256 of the whole name, in
 * hex>". Names may come from someone else (a job name, a request field), so
 * the hash must be collision-resistant: with a non-cryptographic one (FNV,
 * as before) two names could be crafted to share one lock file. A short
 * name's file has no '.' after "lock." (it is escaped), so it never equals a
 * long name's. */
int baton__file_name(const char *name, char *out, size_t n)
{
    static const char hx[] = "0123456789ABCDEF";
    size_t o = 0;
    int cut = 0;
    o += (size_t)snprintf(out, n, "lock.");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (o + 4 > 160) { cut = 1; break; }
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-') {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hx[*p >> 4];
            out[o++] = hx[*p & 15];
        }
    }
    out[o] = 0;
    if (cut) {
        char hex[33];
        baton__sha256_hex(name, 16, hex);
        snprintf(out + o, n - o, ".%s", hex);
    }
    return 0;
}

static int file_lock_new(void *eng, const char *name, const baton_lock_options *o, void **st)
{
    file_lock *fl = calloc(1, sizeof *fl);
    (void)eng; (void)o;
    if (!fl) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fl->fname, sizeof fl->fname);
    fl->fd = fl->gfd = -1;
    if (name[0] == '/' && !(fl->path = strdup(name))) {
        free(fl);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = fl;
    return 0;
}

static void file_lock_free(void *eng, void *st)
{
    file_lock *fl = st;
    (void)eng;
    if (fl->fd >= 0) close(fl->fd);
    if (fl->gfd >= 0) close(fl->gfd);
    if (fl->rw) {
        int last;
        pthread_mutex_lock(&fl->rw->mu);
        if (fl->rw->rd == fl) fl->rw->rd = NULL;
        last = --fl->rw->refs == 0;
        pthread_mutex_unlock(&fl->rw->mu);
        if (last) {
            pthread_mutex_destroy(&fl->rw->mu);
            free(fl->rw);
        }
    }
    free(fl->path);
    free(fl);
}

static int file_rwlock_new(void *eng, const char *name, const baton_lock_options *o, void **rd, void **wr)
{
    file_lock *r = NULL, *w = NULL;
    file_rw *rw = calloc(1, sizeof *rw);
    if (!rw || file_lock_new(eng, name, o, (void **)&r) || file_lock_new(eng, name, o, (void **)&w)) {
        if (r) file_lock_free(eng, r);
        if (w) file_lock_free(eng, w);
        free(rw);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    pthread_mutex_init(&rw->mu, NULL);
    rw->wr_fd = rw->wr_gfd = -1;
    rw->rd = r;
    rw->refs = 2;
    r->kind = K_READ;
    w->kind = K_WRITE;
    r->rw = w->rw = rw;
    *rd = r;
    *wr = w;
    return 0;
}

/* Byte ranges: a plain lock covers the whole file; a read-write lock uses a
 * gate byte (writers hold it while they wait for readers to leave, so new
 * readers queue behind a waiting writer) and a data byte (shared by readers,
 * exclusive for the writer). A plain lock therefore excludes both sides. */
#define WHOLE 0, 0
#define GATE 0, 1
#define DATA 1, 1
#define COUNTER 2, 1   /* serializes fence bumps by concurrent readers */

static int setlk_range(int fd, int cmd, short type, off_t start, off_t len)
{
    struct flock f;
    memset(&f, 0, sizeof f);
    f.l_type = type;
    f.l_whence = SEEK_SET;
    f.l_start = start;
    f.l_len = len;
    return fcntl(fd, cmd, &f);
}

static int setlk(int fd, int cmd, short type)
{
    return setlk_range(fd, cmd, type, WHOLE);
}

/* Reads the record. Returns 1 when the fence counter is intact, 0 when it is
 * lost: an empty file (created, or emptied by a power loss before its data
 * reached the disk), a torn write, zeros or bytes that are not ours. Only
 * the exact layout REC_FMT writes counts, so a cut-off counter never reads as
 * a smaller number. */
static int read_rec(int fd, uint64_t *fence, int *held, char *holder, size_t hn)
{
    static const char head[] = "baton-lock 1\nfence ";
    const size_t hl = sizeof head - 1;
    char buf[REC_SIZE + 1];
    ssize_t n = pread(fd, buf, REC_SIZE, 0);
    uint64_t v = 0;
    char *p;
    *fence = 0;
    *held = 0;
    if (holder) *holder = 0;
    if (n < (ssize_t)(hl + 21)) return 0;
    buf[n] = 0;
    if (memcmp(buf, head, hl) || buf[hl + 20] != '\n') return 0;
    for (size_t i = hl; i < hl + 20; i++) {
        unsigned d = (unsigned)(buf[i] - '0');
        if (d > 9 || v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *fence = v;
    if ((p = strstr(buf, "\nheld "))) *held = atoi(p + 6);
    if (holder && (p = strstr(buf, "\nholder "))) {
        size_t i = 0;
        p += 8;
        while (*p && *p != '\n' && i + 1 < hn) holder[i++] = *p++;
        while (i && holder[i - 1] == ' ') i--;
        holder[i] = 0;
    }
    return 1;
}

static int write_rec(int fd, uint64_t fence, int held, const char *holder)
{
    char buf[REC_SIZE + 64];
    int n = snprintf(buf, sizeof buf, REC_FMT, fence, held, holder ? holder : "");
    ssize_t w;
    if (n < 0) return baton_seterr(BATON_EIO, 0, "lock file: cannot format the record");
    w = pwrite(fd, buf, (size_t)n, 0);
    if (w < 0) return baton_seterr(BATON_EIO, errno, "lock file: write: %s", strerror(errno));
    if (w != n) return baton_seterr(BATON_EIO, 0, "lock file: short write (%zd of %d bytes; disk full?)", w, n);
    return 0;
}

/* The wall clock in microseconds. */
static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* The fence of a new grant: max(counter + 1, wall clock in us). The counter
 * is written without fsync, and a power loss can leave the file empty, short,
 * zeroed or at an older value. The clock floor keeps the new fence above
 * every fence handed out before all the same, on two assumptions, the same
 * the Redis engine makes: the wall clock does not step back across the loss,
 * and no name sees more than a million grants a second (so the counter never
 * runs ahead of the clock). A lost counter restarts from the floor, never
 * from 0. */
static uint64_t next_fence(uint64_t stored, int intact)
{
    uint64_t floor = wall_us();
    if (intact && stored < UINT64_MAX && stored + 1 > floor) return stored + 1;
    return floor;
}

/* Bumps the fence of a lock file whose exclusive (or counter) range we hold,
 * writing it back before the grant is reported.
 *
 * No fdatasync, on measurement: on ext4 an uncontended acquire+release went
 * from about 13 us to about 240 us with it (some 18 times slower), far more
 * than the counter is worth now that the clock floor covers a lost write. */
static int bump_fence(int fd, const char *desc, uint64_t *fence)
{
    uint64_t stored;
    int held, intact = read_rec(fd, &stored, &held, NULL, 0);
    uint64_t f = next_fence(stored, intact);
    int rc = write_rec(fd, f, 1, desc);
    if (rc) return rc;
    *fence = f;
    return 0;
}

/* The helper that blocks in F_OFD_SETLKW (or, for a path lock, flock(2))
 * for one wait, so the kernel queues us and grants the lock the instant it
 * is free. Giving up (deadline or cancel) interrupts the helper with a signal
 * of our own (a real-time signal whose disposition was the default, given a
 * handler that does nothing and no SA_RESTART: both calls then fail with
 * EINTR), joins it, and closes the fd: nothing of an abandoned wait outlives
 * the call. Only the helper thread ever unblocks that signal. */
typedef struct {
    pthread_mutex_t mu;
    baton_waiter *w;
    int fd, done, granted, err, abandon;
    int how;            /* flock(2): LOCK_EX or LOCK_SH; 0: the OFD range below */
    short type;
    off_t start, len;
} file_wait;

/* One attempt at the lock a wait is for; block: wait in the kernel. */
static int lock_once(const file_wait *fw, int block)
{
    if (fw->how) return flock(fw->fd, fw->how | (block ? 0 : LOCK_NB));
    return setlk_range(fw->fd, block ? F_OFD_SETLKW : F_OFD_SETLK, fw->type, fw->start, fw->len);
}

static int g_intr_sig;
static pthread_once_t g_sig_once = PTHREAD_ONCE_INIT;

static void intr_handler(int sig) { (void)sig; }

static void sig_init(void)
{
    for (int sig = SIGRTMIN + 4; sig <= SIGRTMAX - 4; sig++) {
        struct sigaction old, sa;
        if (sigaction(sig, NULL, &old) || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = intr_handler;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0) {
            g_intr_sig = sig;
            return;
        }
    }
}

static void *wait_main(void *arg)
{
    file_wait *fw = arg;
    int r = -1, err = 0, abandon;
    if (g_intr_sig) {
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, g_intr_sig);
        pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    }
    for (int backoff_us = 500;;) {
        pthread_mutex_lock(&fw->mu);
        abandon = fw->abandon;
        pthread_mutex_unlock(&fw->mu);
        if (abandon) break;
        if (g_intr_sig) {
            r = lock_once(fw, 1);
        } else {
            /* No signal to spare: poll with capped backoff instead. */
            r = lock_once(fw, 0);
            if (r < 0 && (errno == EAGAIN || errno == EACCES)) {
                usleep((useconds_t)backoff_us);
                if (backoff_us < 20000) backoff_us *= 2;
                errno = EINTR;
            }
        }
        if (r == 0 || errno != EINTR) break;
    }
    if (r < 0 && !abandon && errno != EINTR) err = errno;
    pthread_mutex_lock(&fw->mu);
    fw->done = 1;
    fw->granted = r == 0;
    fw->err = err;
    baton_waiter_wake(fw->w);
    pthread_mutex_unlock(&fw->mu);
    return NULL;
}

/* Blocks until fd is locked as fw0 says (a range, or flock(2)), the deadline
 * passes or the call is cancelled. On failure fd is closed. WHAT names the
 * file in messages ("lock file lock.x", "lock path /var/lock/job"). */
static int wait_lock(int fd, const file_wait *fw0, baton_acquire_req *req, const char *what)
{
    file_wait fw;
    pthread_attr_t at;
    pthread_t th;
    sigset_t all, old;
    int e, rc = 0, granted;

    pthread_once(&g_sig_once, sig_init);
    memset(&fw, 0, sizeof fw);
    pthread_mutex_init(&fw.mu, NULL);
    fw.w = req->waiter;
    fw.fd = fd;
    fw.how = fw0->how;
    fw.type = fw0->type;
    fw.start = fw0->start;
    fw.len = fw0->len;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    e = pthread_create(&th, &at, wait_main, &fw);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (e) {
        pthread_mutex_destroy(&fw.mu);
        close(fd);
        return baton_seterr(BATON_ENOMEM, e, "cannot start a wait thread");
    }
    for (;;) {
        unsigned gen = baton_waiter_gen(req->waiter);
        int done;
        pthread_mutex_lock(&fw.mu);
        done = fw.done;
        pthread_mutex_unlock(&fw.mu);
        if (done) break;
        if (req->deadline_ns != INT64_MAX && baton_now_ns() >= req->deadline_ns)
            rc = BATON_ETIMEDOUT;
        else
            rc = baton_waiter_park(req->waiter, gen, req->deadline_ns);
        if (rc) break;
    }
    if (rc) {
        /* Give up: interrupt the helper until it has left fcntl. */
        pthread_mutex_lock(&fw.mu);
        fw.abandon = 1;
        while (!fw.done) {
            pthread_mutex_unlock(&fw.mu);
            if (g_intr_sig) pthread_kill(th, g_intr_sig);
            usleep(200);
            pthread_mutex_lock(&fw.mu);
        }
        pthread_mutex_unlock(&fw.mu);
    }
    pthread_join(th, NULL);
    pthread_mutex_destroy(&fw.mu);
    granted = fw.granted;
    if (rc || !granted) {
        close(fd);   /* also hands back a grant that came as we gave up */
        if (rc == BATON_ECANCELED) return baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
        if (rc) return baton_seterr(BATON_ETIMEDOUT, 0, "lock wait timed out");
        return baton_seterr(BATON_EIO, fw.err, "%s: %s", what, strerror(fw.err));
    }
    return 0;
}

/* Takes the lock fw says on fd: at once, or by waiting when the request
 * allows it. On failure fd is closed. */
static int take_lock(int fd, file_wait *fw, baton_acquire_req *req, const char *what)
{
    int rc;
    fw->fd = fd;
    if (lock_once(fw, 0) == 0)
        return 0;
    if (errno != EAGAIN && errno != EACCES) {
        rc = baton_seterr(BATON_EIO, errno, "%s: %s", what, strerror(errno));
        close(fd);
        return rc;
    }
    if (req->deadline_ns == 0) {
        close(fd);
        return baton_seterr(BATON_ELOCKED, 0, "%s is held", what);
    }
    return wait_lock(fd, fw, req, what);
}

/* Takes a range of fd (see take_lock). */
static int take_range(int fd, short type, off_t start, off_t len, baton_acquire_req *req, const char *fname)
{
    file_wait fw;
    char what[300];
    memset(&fw, 0, sizeof fw);
    fw.type = type;
    fw.start = start;
    fw.len = len;
    snprintf(what, sizeof what, "lock file %s", fname);
    return take_lock(fd, &fw, req, what);
}

static int open_lock_file(file_engine *e, const char *fname)
{
    int fd, rc = dir_open(e, fname, O_RDWR | O_CREAT, "lock file", &fd);
    return rc ? rc : fd;
}

/* Whether the file under fd is still in the lock dir. baton never removes a
 * lock file, but a tmp cleaner or a user may, and then whoever opens the name
 * next creates a new file: a lock won on the old one (opened before the
 * removal, or granted after a wait on it) excludes nobody. Removing the name
 * or renaming another file over it both leave the old file with no link;
 * asking the fd for that costs a fraction of looking the name up again. */
static int still_linked(int fd)
{
    struct stat a;
    return fstat(fd, &a) == 0 && a.st_nlink > 0;
}

/* A lock file that is replaced again on every try is someone else's doing;
 * give up after a few with a clear error rather than loop. */
#define RELINK_TRIES 8

static int replaced_err(file_engine *e, const char *fname)
{
    return baton_seterr(BATON_EIO, 0, "lock file %s/%s keeps being removed or replaced while it is locked; "
                        "is something cleaning the lock directory?", e->dir, fname);
}

/* The write side: the gate first (new readers now queue behind us), then the
 * data byte once the readers inside have left. */
static int rw_acquire_write(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    int fd, rc;
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return replaced_err(e, fl->fname);
        if ((fd = open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = take_range(fd, F_WRLCK, GATE, req, fl->fname))) return rc;
        if ((rc = take_range(fd, F_WRLCK, DATA, req, fl->fname))) return rc;   /* closing fd drops the gate */
        if (still_linked(fd)) break;
        close(fd);
    }
    if ((rc = bump_fence(fd, req->owner->desc, &req->fence))) { close(fd); return rc; }
    fl->fd = fd;
    pthread_mutex_lock(&fl->rw->mu);
    fl->rw->wr_fd = fd;
    pthread_mutex_unlock(&fl->rw->mu);
    return 0;
}

/* The read side: pass the gate (waiting behind any writer), share the data
 * byte, leave the gate. */
static int rw_acquire_read(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    int fd, rc;
    pthread_mutex_lock(&fl->rw->mu);
    if (fl->rw->wr_fd >= 0) {
        /* Downgrade: the write side's own data lock turns shared in place.
         * The gate stays ours, so no other reader can enter before a failed
         * fence write turns it back. */
        int wfd = fl->rw->wr_fd;
        if (setlk_range(wfd, F_OFD_SETLK, F_RDLCK, DATA) < 0) {
            rc = baton_seterr(BATON_EIO, errno, "downgrade: %s", strerror(errno));
        } else if ((rc = bump_fence(wfd, req->owner->desc, &req->fence))) {
            setlk_range(wfd, F_OFD_SETLK, F_WRLCK, DATA);
        } else {
            fl->rw->rd_borrows = 1;
            req->sent_ns = baton_now_ns();
        }
        pthread_mutex_unlock(&fl->rw->mu);
        return rc;
    }
    pthread_mutex_unlock(&fl->rw->mu);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return replaced_err(e, fl->fname);
        if ((fd = open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = take_range(fd, F_RDLCK, GATE, req, fl->fname))) return rc;
        if ((rc = take_range(fd, F_RDLCK, DATA, req, fl->fname))) return rc;
        if (still_linked(fd)) break;
        close(fd);
    }
    setlk_range(fd, F_OFD_SETLK, F_UNLCK, GATE);
    /* Every grant gets a new fence, readers too; readers bump it one at a
     * time. A reader that cannot serialize its bump must not race another. */
    while ((rc = setlk_range(fd, F_OFD_SETLKW, F_WRLCK, COUNTER)) < 0 && errno == EINTR) {}
    if (rc < 0) {
        rc = baton_seterr(BATON_EIO, errno, "lock file %s: fence lock: %s", fl->fname, strerror(errno));
        close(fd);
        return rc;
    }
    rc = bump_fence(fd, req->owner->desc, &req->fence);
    setlk_range(fd, F_OFD_SETLK, F_UNLCK, COUNTER);
    if (rc) { close(fd); return rc; }
    fl->fd = fd;
    return 0;
}

/* Marks the record released, keeping the fence; a damaged record is left
 * for the next grant to replace (it reads as a lost counter). */
static void mark_released(int fd)
{
    uint64_t fence;
    int held;
    if (read_rec(fd, &fence, &held, NULL, 0))
        write_rec(fd, fence, 0, "");
}

static int rw_release(file_lock *fl)
{
    file_rw *rw = fl->rw;
    pthread_mutex_lock(&rw->mu);
    if (fl->kind == K_WRITE) {
        mark_released(fl->fd);
        if (rw->rd_borrows && rw->rd) {
            /* Finish a downgrade: the read side keeps the fd and its shared data lock. */
            setlk_range(fl->fd, F_OFD_SETLK, F_UNLCK, GATE);
            rw->rd->fd = fl->fd;
            rw->rd_borrows = 0;
        } else {
            setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
            close(fl->fd);
        }
        rw->wr_fd = -1;
        fl->fd = -1;
    } else if (rw->rd_borrows) {
        /* The read side leaves first: the writer's data lock is exclusive again.
         * Nobody else can hold it meanwhile: the gate is still ours. */
        setlk_range(rw->wr_fd, F_OFD_SETLK, F_WRLCK, DATA);
        rw->rd_borrows = 0;
    } else {
        setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
        close(fl->fd);
        fl->fd = -1;
    }
    pthread_mutex_unlock(&rw->mu);
    return 0;
}

/* ---- path locks ---------------------------------------------------------
 * A lock name that is an absolute path is that very file, as for flock(1):
 * it is opened (created 0666 less the umask if missing, as flock(1) does;
 * its directory must exist) and locked with flock(2), LOCK_EX for a plain
 * lock or a write side, LOCK_SH for a read side, so `baton run /var/lock/job`
 * and `flock /var/lock/job` exclude each other. The path is followed like
 * flock(1) follows it (links included): it is the user's own choice, not
 * baton's directory. The file is never written.
 *
 * The fence lives in baton's lock dir instead, in "path.<the file's real
 * path, mapped like a name>", with the same max(counter + 1, clock) rule.
 * Its bytes also order baton's own clients: a writer holds its gate byte
 * while it waits and holds (new baton readers queue behind it, as on lock
 * files; flock(1) -s readers do not see the gate), and readers take its
 * counter byte one at a time to bump the fence. A file a fence file is kept
 * for is one inode: the real path names it however the lock path was
 * spelled. */

/* Opens the file PATH names, creating it if missing. Only a regular file or
 * a directory is opened at all (opening a device or a FIFO can block or have
 * effects). */
static int path_open(const char *path, int *fdout)
{
    struct stat st;
    int fd, err;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
        return baton_seterr(BATON_EINVAL, 0, "lock path %s is %s; baton locks only regular files and "
                            "directories there", path, kind_of(&st));
    fd = open(path, O_RDONLY | O_CREAT | O_NOCTTY | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EISDIR)   /* flock(1) locks directories too */
        fd = open(path, O_RDONLY | O_DIRECTORY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return baton_seterr(BATON_EINVAL, err, "lock path %s: %s (a lock name that starts with '/' is that "
                                "file; its directory must exist)", path, strerror(err));
        if (err == EACCES || err == EPERM)
            return baton_seterr(BATON_EAUTH, err, "lock path %s: %s", path, strerror(err));
        return baton_seterr(BATON_EIO, err, "lock path %s: %s", path, strerror(err));
    }
    if (fstat(fd, &st) || (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
        close(fd);
        return baton_seterr(BATON_EINVAL, 0, "lock path %s is not a regular file or directory", path);
    }
    *fdout = fd;
    return 0;
}

/* Whether fd is still the file at PATH: not removed, nor replaced by another
 * (a lock on a file nobody opens by that path any more excludes nobody). */
static int path_still_there(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && a.st_nlink > 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* The fence file of the file open on fd (or, with fd < 0, at PATH). */
static void path_fence_name(int fd, const char *path, char *out, size_t n)
{
    char link[64], real[PATH_MAX];
    ssize_t len = -1;
    if (fd >= 0) {
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        len = readlink(link, real, sizeof real - 1);
    }
    if (len > 0 && real[0] == '/') real[len] = 0;
    else if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    baton__file_name(real, out, n);
    memcpy(out, "path.", 5);   /* "lock." -> "path.": its own name space */
}

/* Bumps the fence in the fence file, one bumper at a time (readers share
 * the lock they were granted). */
static int path_bump(int gfd, const char *fname, const char *desc, uint64_t *fence)
{
    int rc;
    while ((rc = setlk_range(gfd, F_OFD_SETLKW, F_WRLCK, COUNTER)) < 0 && errno == EINTR) {}
    if (rc < 0) return baton_seterr(BATON_EIO, errno, "fence file %s: %s", fname, strerror(errno));
    rc = bump_fence(gfd, desc, fence);
    setlk_range(gfd, F_OFD_SETLK, F_UNLCK, COUNTER);
    return rc;
}

static int path_acquire(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    const int shared = fl->kind == K_READ;
    char fname[256], what[1100];
    file_wait fw;
    int fd = -1, gfd = -1, rc;

    if (shared) {
        pthread_mutex_lock(&fl->rw->mu);
        if (fl->rw->wr_fd >= 0) {
            /* Downgrade: ride on the write side's exclusive lock (nobody else
             * may read while it is held); its release turns it shared. */
            path_fence_name(fl->rw->wr_fd, fl->path, fname, sizeof fname);
            rc = path_bump(fl->rw->wr_gfd, fname, req->owner->desc, &req->fence);
            if (!rc) {
                fl->rw->rd_borrows = 1;
                req->sent_ns = baton_now_ns();
            }
            pthread_mutex_unlock(&fl->rw->mu);
            return rc;
        }
        pthread_mutex_unlock(&fl->rw->mu);
    }
    snprintf(what, sizeof what, "lock path %s", fl->path);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES)
            return baton_seterr(BATON_EIO, 0, "lock path %s keeps being removed or replaced while it is locked",
                                fl->path);
        if ((rc = path_open(fl->path, &fd))) return rc;
        path_fence_name(fd, fl->path, fname, sizeof fname);
        if ((rc = dir_open(e, fname, O_RDWR | O_CREAT, "fence file", &gfd))) {
            close(fd);
            return rc;
        }
        req->sent_ns = baton_now_ns();
        /* the gate, in the fence file: held by a baton writer of this file */
        memset(&fw, 0, sizeof fw);
        fw.type = shared ? F_RDLCK : F_WRLCK;
        fw.start = 0;
        fw.len = 1;
        if ((rc = take_lock(gfd, &fw, req, what))) {
            close(fd);
            return rc;
        }
        memset(&fw, 0, sizeof fw);
        fw.how = shared ? LOCK_SH : LOCK_EX;
        if ((rc = take_lock(fd, &fw, req, what))) {
            close(gfd);
            return rc;
        }
        if (path_still_there(fd, fl->path) && still_linked(gfd)) break;
        close(fd);
        close(gfd);
    }
    if (shared) setlk_range(gfd, F_OFD_SETLK, F_UNLCK, GATE);
    if ((rc = path_bump(gfd, fname, req->owner->desc, &req->fence))) {
        close(fd);
        close(gfd);
        return rc;
    }
    if (shared) {
        close(gfd);
        gfd = -1;
    }
    fl->fd = fd;
    fl->gfd = gfd;
    if (fl->kind == K_WRITE) {
        pthread_mutex_lock(&fl->rw->mu);
        fl->rw->wr_fd = fd;
        fl->rw->wr_gfd = gfd;
        pthread_mutex_unlock(&fl->rw->mu);
    }
    return 0;
}

static int path_release(file_lock *fl)
{
    file_rw *rw = fl->rw;
    int rc = 0;
    if (rw) pthread_mutex_lock(&rw->mu);
    if (fl->kind == K_READ && rw->rd_borrows) {
        rw->rd_borrows = 0;   /* the write side still holds the file */
        goto out;
    }
    if (fl->fd < 0) {
        rc = baton_seterr(BATON_ENOTHELD, 0, "not held");
        goto out;
    }
    if (fl->kind == K_WRITE && rw->rd_borrows && rw->rd) {
        /* Finish a downgrade: the exclusive lock turns shared in place (it
         * never waits: nobody else holds the file), then the gate opens. */
        if (flock(fl->fd, LOCK_SH | LOCK_NB)) {
            rc = baton_seterr(BATON_EIO, errno, "lock path %s: downgrade: %s", fl->path, strerror(errno));
            goto out;
        }
        rw->rd->fd = fl->fd;
        rw->rd_borrows = 0;
    } else {
        if (fl->gfd >= 0) mark_released(fl->gfd);
        flock(fl->fd, LOCK_UN);
        close(fl->fd);
    }
    if (fl->gfd >= 0) close(fl->gfd);   /* also opens the gate */
    fl->fd = fl->gfd = -1;
    if (fl->kind == K_WRITE) rw->wr_fd = rw->wr_gfd = -1;
out:
    if (rw) pthread_mutex_unlock(&rw->mu);
    return rc;
}

/* What /proc/locks says about the path locks on PATH's file, and the fence
 * from its fence file. Creates nothing and takes no lock, so a status query
 * never disturbs a holder (or a flock -n that runs at the same moment). */
static int path_info(file_engine *e, const char *path, baton_lockinfo *out)
{
    char fname[256], line[512], rec_holder[256];
    struct stat st;
    long wpid = -1;
    int64_t readers = 0;
    int gfd, rc, rheld = 0;
    FILE *f;

    if (stat(path, &st)) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        return baton_seterr(BATON_EIO, errno, "lock path %s: %s", path, strerror(errno));
    }
    f = fopen("/proc/locks", "re");
    if (!f) return baton_seterr(BATON_EIO, errno, "/proc/locks: %s", strerror(errno));
    while (fgets(line, sizeof line, f)) {
        /* "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters are "1: -> FLOCK ..." */
        char type[16];
        unsigned maj, min;
        unsigned long ino;
        long pid;
        if (sscanf(line, "%*d: FLOCK %*s %15s %ld %x:%x:%lu", type, &pid, &maj, &min, &ino) != 5) continue;
        if (maj != major(st.st_dev) || min != minor(st.st_dev) || ino != (unsigned long)st.st_ino) continue;
        if (!strcmp(type, "WRITE")) wpid = pid;
        else readers++;
    }
    fclose(f);
    out->held = wpid >= 0 || readers > 0;
    out->writer = wpid >= 0;
    out->readers = readers;
    out->remaining_ms = -1;
    path_fence_name(-1, path, fname, sizeof fname);
    if ((rc = dir_open(e, fname, O_RDONLY, "fence file", &gfd))) return rc;
    if (gfd < 0) rec_holder[0] = 0;
    else {
        read_rec(gfd, &out->fence, &rheld, rec_holder, sizeof rec_holder);
        close(gfd);
    }
    if (wpid >= 0) {
        /* The record names the last baton holder; it is this one if the pids agree. */
        long rpid = -1;
        if (rheld && sscanf(rec_holder, "%*s %ld", &rpid) == 1 && rpid == wpid)
            snprintf(out->holder, sizeof out->holder, "%s", rec_holder);
        else
            snprintf(out->holder, sizeof out->holder, "pid %ld", wpid);
    }
    return 0;
}

static int file_acquire(void *eng, void *st, baton_acquire_req *req)
{
    file_engine *e = eng;
    file_lock *fl = st;
    int fd, rc;

    if (fl->path) return path_acquire(e, fl, req);
    if (fl->kind == K_WRITE) return rw_acquire_write(e, fl, req);
    if (fl->kind == K_READ) return rw_acquire_read(e, fl, req);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return replaced_err(e, fl->fname);
        if ((fd = open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = take_range(fd, F_WRLCK, WHOLE, req, fl->fname))) return rc;
        if (still_linked(fd)) break;
        close(fd);
    }
    if ((rc = bump_fence(fd, req->owner->desc, &req->fence))) {
        close(fd);
        return rc;
    }
    fl->fd = fd;
    return 0;
}

static int file_release(void *eng, void *st, const baton_owner *o)
{
    file_lock *fl = st;
    (void)eng; (void)o;
    if (fl->path) return path_release(fl);
    if (fl->rw) return rw_release(fl);
    if (fl->fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "not held");
    mark_released(fl->fd);
    setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
    close(fl->fd);
    fl->fd = -1;
    return 0;
}

static int permits_info(file_engine *e, const char *name, int64_t *out);

static int file_info(void *eng, const char *name, baton_lockinfo *out)
{
    /* A semaphore of this name: its permits. */
    {
        char sname[256], buf[128];
        baton__file_name(name, sname, sizeof sname);
        memcpy(sname, "sem.", 4);
        int sfd, rc = dir_open(eng, sname, O_RDONLY, "semaphore file", &sfd);
        if (rc) return rc;
        if (sfd >= 0) {
            ssize_t n = pread(sfd, buf, sizeof buf - 1, 0);
            char *p;
            if (n > 0) {
                buf[n] = 0;
                if ((p = strstr(buf, "\npermits "))) out->permits = strtoll(p + 9, NULL, 10);
            }
            close(sfd);
        }
    }
    /* Else a permit-expirable semaphore of this name: its free permits. */
    if (out->permits == BATON_PERMITS_UNKNOWN) {
        int rc = permits_info(eng, name, &out->permits);
        if (rc) return rc;
    }
    file_engine *e = eng;
    char fname[256];
    struct flock f;
    int fd, held, rc;

    if (name[0] == '/') return path_info(e, name, out);

    baton__file_name(name, fname, sizeof fname);
    if ((rc = dir_open(e, fname, O_RDONLY, "lock file", &fd))) return rc;
    if (fd < 0) return 0;
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    if (fcntl(fd, F_OFD_GETLK, &f) < 0) {
        int err = errno;
        close(fd);
        return baton_seterr(BATON_EIO, err, "lock file %s: %s", fname, strerror(err));
    }
    out->held = f.l_type != F_UNLCK;
    read_rec(fd, &out->fence, &held, out->holder, sizeof out->holder);
    if (!out->held) out->holder[0] = 0;   /* a dead holder leaves its record behind */
    out->remaining_ms = -1;
    close(fd);
    return 0;
}

/* ---- semaphore ----------------------------------------------------------
 * A counter in its own file ("sem.<name>"), changed under a short exclusive
 * lock. Waiters are woken by inotify when the file changes, not by polling;
 * like Redisson's RSemaphore, permits have no owner, so a crashed holder's
 * permits are not returned by themselves. */

#define SEM_FMT "baton-sem 1\npermits %020" PRId64 "\nset %d\n"

typedef struct {
    char fname[256];
    char path[4096 + 300];
} file_sem;

static void *watch_main(void *arg)
{
    file_engine *e = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        struct pollfd p[2] = { { e->ino_fd, POLLIN, 0 }, { e->stop_pipe[0], POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        ssize_t n = read(e->ino_fd, buf, sizeof buf);
        if (n <= 0) continue;
        pthread_mutex_lock(&e->wmu);
        for (char *q = buf; q < buf + n;) {
            const struct inotify_event *ev = (const struct inotify_event *)q;
            for (watch_reg *r = e->regs; r; r = r->next)
                if (r->wd == ev->wd || (ev->mask & IN_Q_OVERFLOW))
                    baton_waiter_wake(r->w);
            q += sizeof *ev + ev->len;
        }
        pthread_mutex_unlock(&e->wmu);
    }
    return NULL;
}

/* Registers w to be woken when the semaphore file changes. */
static int watch_add(file_engine *e, file_sem *fs, watch_reg *reg, baton_waiter *w)
{
    int rc = 0;
    pthread_mutex_lock(&e->wmu);
    if (!e->wth_started) {
        sigset_t all, old;
        e->ino_fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (e->ino_fd < 0 || pipe2(e->stop_pipe, O_CLOEXEC)) {
            rc = baton_seterr(BATON_EIO, errno, "inotify: %s", strerror(errno));
            goto out;
        }
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        if (pthread_create(&e->wth, NULL, watch_main, e)) rc = baton_seterr(BATON_ENOMEM, 0, "cannot start the watcher");
        else e->wth_started = 1;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc) goto out;
    }
    reg->wd = inotify_add_watch(e->ino_fd, fs->path, IN_MODIFY | IN_CLOSE_WRITE | IN_DONT_FOLLOW);
    if (reg->wd < 0) {
        rc = baton_seterr(BATON_EIO, errno, "inotify %s: %s", fs->path, strerror(errno));
        goto out;
    }
    reg->w = w;
    reg->next = e->regs;
    e->regs = reg;
out:
    pthread_mutex_unlock(&e->wmu);
    return rc;
}

static void watch_remove(file_engine *e, watch_reg *reg)
{
    pthread_mutex_lock(&e->wmu);
    for (watch_reg **pp = &e->regs; *pp; pp = &(*pp)->next)
        if (*pp == reg) { *pp = reg->next; break; }
    pthread_mutex_unlock(&e->wmu);
}

static int file_sem_new(void *eng, const char *name, void **st)
{
    file_engine *e = eng;
    file_sem *fs = calloc(1, sizeof *fs);
    int fd, rc;
    if (!fs) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fs->fname, sizeof fs->fname);
    memcpy(fs->fname, "sem.", 4);   /* "lock." → "sem.." keeps the two name spaces apart */
    snprintf(fs->path, sizeof fs->path, "%s/%s", e->dir, fs->fname);
    if ((rc = dir_open(e, fs->fname, O_RDWR | O_CREAT, "semaphore file", &fd))) {
        free(fs);
        return rc;
    }
    close(fd);
    *st = fs;
    return 0;
}

static void file_sem_free(void *eng, void *st)
{
    (void)eng;
    free(st);
}

enum { SEM_TAKE = 100, SEM_GIVE };

/* One read-modify-write of the counter under an exclusive lock. */
static int sem_update(file_engine *e, file_sem *fs, int op, int64_t arg, int64_t *out)
{
    char buf[128];
    int64_t permits = 0;
    int set = 0, fd, rc = 0, changed = 0;
    ssize_t n;
    if ((rc = dir_open(e, fs->fname, O_RDWR, "semaphore file", &fd))) return rc;
    if (fd < 0) return baton_seterr(BATON_EIO, ENOENT, "semaphore file %s/%s was removed", e->dir, fs->fname);
    while (setlk(fd, F_OFD_SETLKW, F_WRLCK) < 0)
        if (errno != EINTR) { rc = baton_seterr(BATON_EIO, errno, "semaphore lock: %s", strerror(errno)); goto out; }
    n = pread(fd, buf, sizeof buf - 1, 0);
    if (n > 0) {
        char *p;
        buf[n] = 0;
        if (strncmp(buf, "baton-sem 1\n", 12)) { rc = baton_seterr(BATON_EPROTO, 0, "%s is not a baton semaphore", fs->fname); goto out; }
        if ((p = strstr(buf, "\npermits "))) permits = strtoll(p + 9, NULL, 10);
        if ((p = strstr(buf, "\nset "))) set = atoi(p + 5);
    }
    switch (op) {
    case SEM_TAKE:
        if (permits < arg) { rc = BATON_ELOCKED; break; }
        permits -= arg; changed = 1; break;
    case SEM_GIVE: permits += arg; set = 1; changed = 1; break;
    case BATON_CTL_TRY_SET:
        if (out) *out = !set;
        if (!set) { permits = arg; set = 1; changed = 1; }
        break;
    case BATON_CTL_ADD: permits += arg; set = 1; changed = 1; break;
    case BATON_CTL_DRAIN:
        if (out) *out = permits > 0 ? permits : 0;
        if (permits > 0) { permits = 0; changed = 1; }
        break;
    case BATON_CTL_AVAILABLE: if (out) *out = permits; break;
    default: rc = baton_seterr(BATON_ENOTSUP, 0, "semaphore operation %d", op);
    }
    if (changed) {
        int len = snprintf(buf, sizeof buf, SEM_FMT, permits, set);
        if (pwrite(fd, buf, (size_t)len, 0) != len) rc = baton_seterr(BATON_EIO, errno, "semaphore write: %s", strerror(errno));
    }
out:
    close(fd);   /* also drops the lock */
    return rc;
}

static int file_sem_acquire(void *eng, void *st, uint32_t permits, int64_t deadline_ns, baton_waiter *w)
{
    file_engine *e = eng;
    watch_reg reg;
    int rc, watching = 0;
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        rc = sem_update(e, st, SEM_TAKE, permits, NULL);
        if (rc != BATON_ELOCKED) break;
        if (deadline_ns == 0) { rc = baton_seterr(BATON_ELOCKED, 0, "too few permits"); break; }
        if (!watching) {
            /* Watch before parking, then re-check: a release in between is seen. */
            if ((rc = watch_add(e, st, &reg, w))) break;
            watching = 1;
            continue;
        }
        if (deadline_ns != INT64_MAX && baton_now_ns() >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "semaphore wait timed out");
            break;
        }
        if ((rc = baton_waiter_park(w, gen, deadline_ns))) {
            rc = baton_seterr(rc, 0, "semaphore wait canceled");
            break;
        }
    }
    if (watching) watch_remove(e, &reg);
    return rc;
}

static int file_sem_release(void *eng, void *st, uint32_t permits)
{
    return sem_update(eng, st, SEM_GIVE, permits, NULL);
}

static int file_sem_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    return sem_update(eng, st, op, arg, out);
}

/* ---- permit-expirable semaphore -----------------------------------------------
 * N slots, one lock file each ("perm.<name>+<slot>"), and the count N in
 * "perm.<name>". A permit is an exclusive OFD lock on one slot file, held by
 * an open fd of the handle that acquired it, so the kernel frees a crashed
 * (even SIGKILLed) holder's permit the moment it dies, with no lease to run
 * out first.
 *
 * The lease is therefore ignored on this engine: a permit lasts until it is
 * released, its handle is freed, or its process ends; renewal only confirms
 * it is still held. Only the handle that acquired a permit can release or
 * renew it (the lock belongs to that handle's open file); there any other id
 * is unknown: BATON_ENOTOWNER, as the Redis engine answers for an unknown or
 * expired id. A child forked while a permit is held shares its open file and
 * keeps the permit taken until it exits or execs (the fds are close-on-exec).
 *
 * Acquires run one at a time under a short lock on the count file, so a count
 * lowered below the permits in use (ADD < 0) is exact: nobody is granted until
 * holders above the new count have left. Releases need no lock.
 *
 * Processes cannot notify each other here, so a wait polls: capped
 * exponential backoff with jitter, parked on the caller's waiter so a cancel
 * ends it at once. */

#define PERMITS_MAX 1000000   /* one file per slot: keep scans and the dir sane */
#define PCNT_HEAD "baton-permits 1\npermits "
#define PCNT_FMT PCNT_HEAD "%+020" PRId64 "\nslots %010" PRId64 "\n"
/* A count-file lock held longer than this is a stopped process's, not a scan. */
#define PCNT_STALL_NS (5 * 1000000000LL)
#define POLL_MIN_NS 1000000LL      /* 1 ms */
#define POLL_MAX_NS 100000000LL    /* 100 ms */

typedef struct file_permit {
    char id[BATON_PERMIT_ID_SIZE];
    uint32_t slot;
    int fd;                      /* holds the slot's lock */
    struct file_permit *next;
} file_permit;

typedef struct {
    char cname[256];             /* the count file; slot files add "+<slot>" */
    char name[161];              /* for messages */
    pthread_mutex_t mu;          /* guards held: threads may share a handle */
    file_permit *held;
} file_permits;

typedef struct {
    int set;                     /* 0: never set (or the file was lost) */
    int64_t n;                   /* the permit count; may be below 0 after ADD */
    int64_t slots;               /* the highest count ever: slot files above n may be held */
} pcount;

/* Reads the count. An empty or unreadable record is "never set": after a
 * power loss nobody holds a slot, and the next TRY_SET sets it again. */
static void pcount_read(int fd, pcount *pc)
{
    char buf[128], *p, *end;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    const size_t hl = sizeof PCNT_HEAD - 1;
    memset(pc, 0, sizeof *pc);
    if (n < (ssize_t)hl) return;
    buf[n] = 0;
    if (memcmp(buf, PCNT_HEAD, hl)) return;
    errno = 0;
    pc->n = strtoll(buf + hl, &end, 10);
    if (errno || *end != '\n' || strncmp(end, "\nslots ", 7)) return;
    p = end + 7;
    pc->slots = strtoll(p, &end, 10);
    if (errno || *end != '\n' || p == end) return;
    if (pc->n < -PERMITS_MAX || pc->n > PERMITS_MAX || pc->slots < 0 || pc->slots > PERMITS_MAX) return;
    pc->set = 1;
}

static int pcount_write(int fd, const pcount *pc)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, PCNT_FMT, pc->n, pc->slots);
    ssize_t w = pwrite(fd, buf, (size_t)n, 0);
    if (w != n || ftruncate(fd, n))
        return baton_seterr(BATON_EIO, w < 0 ? errno : 0, "permit count file: write: %s",
                            w < 0 ? strerror(errno) : "short write");
    return 0;
}

/* Opens the count file and locks it exclusively (it is held for a scan of the
 * slots at most). Waits until deadline_ns (0 or INT64_MAX: PCNT_STALL_NS) and
 * gives way to a cancel on w. */
static int pcount_lock(file_engine *e, file_permits *fp, int64_t deadline_ns, baton_waiter *w, int *fdout)
{
    int64_t limit = baton_now_ns() + PCNT_STALL_NS;
    int stalled = 1;
    if (deadline_ns != 0 && deadline_ns < limit) limit = deadline_ns, stalled = 0;
    for (int tries = 0; tries < RELINK_TRIES; tries++) {
        long pause_ns = 50000;
        int fd, rc = dir_open(e, fp->cname, O_RDWR | O_CREAT, "permit count file", &fd);
        if (rc) return rc;
        while (setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
            int err = errno;
            if (err != EAGAIN && err != EACCES) {
                close(fd);
                return baton_seterr(BATON_EIO, err, "permit count file %s: %s", fp->cname, strerror(err));
            }
            if (w && baton_waiter_canceled(w)) {
                close(fd);
                return baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
            }
            if (baton_now_ns() >= limit) {
                close(fd);
                if (!stalled)
                    return baton_seterr(BATON_ETIMEDOUT, 0, "permits of '%s': timed out", fp->name);
                return baton_seterr(BATON_EUNAVAILABLE, 0, "permit count file %s/%s stayed locked for %lld s; "
                                    "is a process stopped while holding it?", e->dir, fp->cname,
                                    (long long)(PCNT_STALL_NS / 1000000000LL));
            }
            struct timespec ts = { 0, pause_ns };
            nanosleep(&ts, NULL);
            if (pause_ns < 1000000) pause_ns *= 2;
        }
        if (still_linked(fd)) {
            *fdout = fd;
            return 0;
        }
        close(fd);
    }
    return replaced_err(e, fp->cname);
}

static void slot_name(const file_permits *fp, int64_t slot, char *buf, size_t n)
{
    snprintf(buf, n, "%s+%" PRId64, fp->cname, slot);
}

/* 1 when some open file (any process, this one included) holds the slot,
 * 0 when it is free, or an error. Creates nothing. */
static int slot_held(file_engine *e, const file_permits *fp, int64_t slot)
{
    char name[300];
    struct flock f;
    int fd, r;
    slot_name(fp, slot, name, sizeof name);
    if ((r = dir_open(e, name, O_RDONLY, "permit slot file", &fd))) return r;
    if (fd < 0) return 0;
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    r = fcntl(fd, F_OFD_GETLK, &f);
    if (r < 0) r = baton_seterr(BATON_EIO, errno, "permit slot file %s: %s", name, strerror(errno));
    else r = f.l_type != F_UNLCK;
    close(fd);
    return r;
}

/* How many slots below hi are held, or an error. */
static int64_t slots_held(file_engine *e, const file_permits *fp, int64_t lo, int64_t hi)
{
    int64_t held = 0;
    for (int64_t s = lo; s < hi; s++) {
        int r = slot_held(e, fp, s);
        if (r < 0) return r;
        held += r;
    }
    return held;
}

/* Takes the slot without waiting: 0 with its fd in *fdout, BATON_ELOCKED
 * (error not set) when it is held, or an error. */
static int slot_take(file_engine *e, const file_permits *fp, int64_t slot, int *fdout)
{
    char name[300];
    slot_name(fp, slot, name, sizeof name);
    for (int tries = 0; tries < RELINK_TRIES; tries++) {
        int fd, rc = dir_open(e, name, O_RDWR | O_CREAT, "permit slot file", &fd);
        if (rc) return rc;
        if (setlk(fd, F_OFD_SETLK, F_WRLCK) < 0) {
            int err = errno;
            close(fd);
            if (err == EAGAIN || err == EACCES) return BATON_ELOCKED;
            return baton_seterr(BATON_EIO, err, "permit slot file %s: %s", name, strerror(err));
        }
        if (still_linked(fd)) {
            *fdout = fd;
            return 0;
        }
        close(fd);
    }
    return replaced_err(e, name);
}

/* One attempt: a free slot below the count, provided the holders of slots
 * above it (left by a lowered count) still leave one over. */
static int permits_try(file_engine *e, file_permits *fp, int64_t deadline_ns, baton_waiter *w,
                       uint32_t *slot, int *fdout)
{
    pcount pc;
    int64_t over = 0, hi, free_low = 0;
    int cfd, rc;
    if ((rc = pcount_lock(e, fp, deadline_ns, w, &cfd))) return rc;
    pcount_read(cfd, &pc);
    if (!pc.set) {
        rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': the count was never set", fp->name);
        goto out;
    }
    if (pc.n <= 0) {
        rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': the count is %" PRId64, fp->name, pc.n);
        goto out;
    }
    hi = pc.slots > pc.n ? pc.slots : pc.n;
    if ((over = slots_held(e, fp, pc.n, hi)) < 0) { rc = (int)over; goto out; }
    if (over > 0) {
        int64_t taken = slots_held(e, fp, 0, pc.n);
        if (taken < 0) { rc = (int)taken; goto out; }
        free_low = pc.n - taken;
        if (free_low <= over) {
            rc = baton_seterr(BATON_ELOCKED, 0, "permits of '%s': all %" PRId64 " are taken (the count was lowered "
                              "while %" PRId64 " more were held)", fp->name, pc.n, over);
            goto out;
        }
    }
    rc = BATON_ELOCKED;
    for (int64_t s = 0; s < pc.n && rc == BATON_ELOCKED; s++) {
        rc = slot_take(e, fp, s, fdout);
        if (rc == 0) *slot = (uint32_t)s;
    }
    if (rc == BATON_ELOCKED)
        baton_seterr(BATON_ELOCKED, 0, "permits of '%s': all %" PRId64 " are taken", fp->name, pc.n);
out:
    close(cfd);   /* also drops the count lock */
    return rc;
}

/* The pause before the next poll: d/2 .. d, so pollers that started together
 * drift apart. */
static int64_t jittered(int64_t d)
{
    static _Thread_local uint64_t x;
    if (!x) x = ((uint64_t)baton_now_ns() ^ ((uint64_t)(uintptr_t)&x << 20)) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return d / 2 + (int64_t)(x % (uint64_t)(d / 2 + 1));
}

static int file_permits_new(void *eng, const char *name, void **st)
{
    file_permits *fp = calloc(1, sizeof *fp);
    (void)eng;
    if (!fp) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    baton__file_name(name, fp->cname, sizeof fp->cname);
    memcpy(fp->cname, "perm.", 5);   /* "lock." -> "perm.": its own name space */
    snprintf(fp->name, sizeof fp->name, "%s", name);
    pthread_mutex_init(&fp->mu, NULL);
    *st = fp;
    return 0;
}

static void file_permits_free(void *eng, void *st)
{
    file_permits *fp = st;
    (void)eng;
    for (file_permit *p = fp->held, *next; p; p = next) {
        next = p->next;
        close(p->fd);   /* hands the permit back */
        free(p);
    }
    pthread_mutex_destroy(&fp->mu);
    free(fp);
}

static int file_permits_acquire(void *eng, void *st, uint32_t lease_ms, int64_t deadline_ns, baton_waiter *w,
                                char id[BATON_PERMIT_ID_SIZE])
{
    file_engine *e = eng;
    file_permits *fp = st;
    file_permit *p;
    baton_owner rnd;
    int64_t delay = POLL_MIN_NS;
    uint32_t slot = 0;
    int fd = -1, rc;
    (void)lease_ms;   /* no lease here: the kernel frees a dead holder's slot (see above) */

    if ((rc = baton__owner_init(&rnd))) return rc;
    if (!(p = calloc(1, sizeof *p))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    for (;;) {
        unsigned gen = baton_waiter_gen(w);
        int64_t now, until;
        rc = permits_try(e, fp, deadline_ns, w, &slot, &fd);
        if (rc != BATON_ELOCKED) break;
        if (deadline_ns == 0) break;   /* the message is set */
        now = baton_now_ns();
        if (deadline_ns != INT64_MAX && now >= deadline_ns) {
            rc = baton_seterr(BATON_ETIMEDOUT, 0, "permits of '%s': none came free in time", fp->name);
            break;
        }
        until = now + jittered(delay);
        if (until > deadline_ns) until = deadline_ns;
        if (baton_waiter_park(w, gen, until)) {
            rc = baton_seterr(BATON_ECANCELED, 0, "acquire canceled");
            break;
        }
        if ((delay *= 2) > POLL_MAX_NS) delay = POLL_MAX_NS;
    }
    if (rc) {
        free(p);
        return rc;
    }
    /* 96 random bits make ids of one name distinct; the slot is readable at the end. */
    snprintf(p->id, sizeof p->id, "%.24s%08" PRIx32, rnd.hex, slot);
    p->slot = slot;
    p->fd = fd;
    pthread_mutex_lock(&fp->mu);
    p->next = fp->held;
    fp->held = p;
    pthread_mutex_unlock(&fp->mu);
    memcpy(id, p->id, BATON_PERMIT_ID_SIZE);
    return 0;
}

/* Unlinks the permit ID from the handle's list; NULL when it is not there. */
static file_permit *permit_take_out(file_permits *fp, const char *id)
{
    file_permit *found = NULL;
    pthread_mutex_lock(&fp->mu);
    for (file_permit **pp = &fp->held; *pp; pp = &(*pp)->next)
        if (!strcmp((*pp)->id, id)) {
            found = *pp;
            *pp = found->next;
            break;
        }
    pthread_mutex_unlock(&fp->mu);
    return found;
}

static int unknown_permit(const file_permits *fp, const char *id)
{
    return baton_seterr(BATON_ENOTOWNER, 0, "permit %s of '%s' is not held through this handle "
                        "(unknown or released; on the file engine only the acquiring handle can release it)",
                        id, fp->name);
}

static int file_permits_release(void *eng, void *st, const char *id)
{
    file_permits *fp = st;
    file_permit *p = permit_take_out(fp, id);
    (void)eng;
    if (!p) return unknown_permit(fp, id);
    close(p->fd);
    free(p);
    return 0;
}

/* The lease is ignored; a permit is held as long as its fd is open, unless
 * its slot file was removed (then a newcomer can take the slot afresh, and
 * the permit is dropped as expired). */
static int file_permits_renew(void *eng, void *st, const char *id, uint32_t lease_ms)
{
    file_permits *fp = st;
    int ok = 0, found = 0;
    (void)eng; (void)lease_ms;
    pthread_mutex_lock(&fp->mu);
    for (file_permit *p = fp->held; p; p = p->next)
        if (!strcmp(p->id, id)) {
            found = 1;
            ok = still_linked(p->fd);
            break;
        }
    pthread_mutex_unlock(&fp->mu);
    if (!found) return unknown_permit(fp, id);
    if (!ok) {
        file_permit *p = permit_take_out(fp, id);
        if (p) { close(p->fd); free(p); }
        return baton_seterr(BATON_ENOTOWNER, 0, "permit %s of '%s': its slot file was removed from %s; "
                            "the permit excludes nobody now and was dropped", id, fp->name,
                            ((file_engine *)eng)->dir);
    }
    return 0;
}

static int file_permits_ctl(void *eng, void *st, int op, int64_t arg, int64_t *out)
{
    file_engine *e = eng;
    file_permits *fp = st;
    pcount pc;
    int64_t held;
    int cfd, rc = 0, changed = 0;

    switch (op) {
    case BATON_CTL_TRY_SET:
        if (arg < 0 || arg > PERMITS_MAX)
            return baton_seterr(BATON_EINVAL, 0, "permits of '%s': a count of %" PRId64 " is out of 0..%d "
                                "(the file engine keeps one file per permit)", fp->name, arg, PERMITS_MAX);
        break;
    case BATON_CTL_ADD:
        if (arg < -PERMITS_MAX || arg > PERMITS_MAX)
            return baton_seterr(BATON_EINVAL, 0, "permits of '%s': cannot add %" PRId64, fp->name, arg);
        break;
    case BATON_CTL_AVAILABLE:
    case BATON_CTL_DRAIN:
        break;
    default:
        return baton_seterr(BATON_ENOTSUP, 0, "permit-expirable semaphore: operation %d", op);
    }
    if ((rc = pcount_lock(e, fp, 0, NULL, &cfd))) return rc;
    pcount_read(cfd, &pc);
    switch (op) {
    case BATON_CTL_TRY_SET:
        if (out) *out = !pc.set;
        if (!pc.set) {
            pc.set = changed = 1;
            pc.n = arg;
        }
        break;
    case BATON_CTL_ADD:
        if (pc.n + arg < -PERMITS_MAX || pc.n + arg > PERMITS_MAX) {
            rc = baton_seterr(BATON_EINVAL, 0, "permits of '%s': %" PRId64 " %+" PRId64 " is out of -%d..%d",
                              fp->name, pc.n, arg, PERMITS_MAX, PERMITS_MAX);
            break;
        }
        pc.n += arg;
        pc.set = changed = 1;
        break;
    case BATON_CTL_AVAILABLE:
        /* The scan runs after the count lock is dropped: acquirers need not wait for it. */
        close(cfd);
        cfd = -1;
        held = slots_held(e, fp, 0, pc.slots > pc.n ? pc.slots : pc.n);
        if (held < 0) return (int)held;
        if (out) *out = pc.set ? pc.n - held : 0;
        return 0;
    case BATON_CTL_DRAIN:
        /* Under the count lock: no acquire can slip in between the count and the cut. */
        held = pc.set ? slots_held(e, fp, 0, pc.slots > pc.n ? pc.slots : pc.n) : 0;
        if (held < 0) { rc = (int)held; break; }
        if (out) *out = pc.set && pc.n - held > 0 ? pc.n - held : 0;
        if (pc.set && pc.n - held > 0) {
            pc.n = held;
            changed = 1;
        }
        break;
    }
    if (!rc && changed) {
        if (pc.n > pc.slots) pc.slots = pc.n;
        rc = pcount_write(cfd, &pc);
    }
    close(cfd);
    return rc;
}

/* Available permits of a permit-expirable semaphore NAME, for lock_info;
 * 0 with *out untouched when there is none. Reads without locking or
 * creating anything: a status query must not disturb the holders. */
static int permits_info(file_engine *e, const char *name, int64_t *out)
{
    file_permits fp;
    pcount pc;
    int64_t held;
    int fd, rc;
    memset(&fp, 0, sizeof fp);
    baton__file_name(name, fp.cname, sizeof fp.cname);
    memcpy(fp.cname, "perm.", 5);
    if ((rc = dir_open(e, fp.cname, O_RDONLY, "permit count file", &fd))) return rc;
    if (fd < 0) return 0;
    pcount_read(fd, &pc);
    close(fd);
    if (!pc.set) return 0;
    held = slots_held(e, &fp, 0, pc.slots > pc.n ? pc.slots : pc.n);
    if (held < 0) return (int)held;
    /* free permits: none when the count was lowered below the permits in use
     * (a plain semaphore's count, above, is the signed value itself) */
    *out = pc.n > held ? pc.n - held : 0;
    return 0;
}

/* ---- operators: list and break -------------------------------------------
 * The lock directory holds one "lock.<escaped name>" file per name and one
 * "path.<escaped real path>" fence file per path lock. A name is listed
 * when its lock is held now: for a lock file, F_OFD_GETLK from a fresh open
 * file description (it reports any lock another description holds, plain or
 * either side of a read-write lock, and takes none itself); for a path lock,
 * /proc/locks as path_info reads it. Nothing is created or locked, so a
 * listing never disturbs a holder or a flock -n running at the same moment. */

static int unhex(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Undoes baton__file_name's escaping of S (up to a '.' that starts a hash,
 * or the end) into OUT; *hashed = 1 when the name was cut and hashed.
 * -1 when S is not an escaped name. */
static int unescape_name(const char *s, char *out, size_t n, int *hashed)
{
    size_t o = 0;
    *hashed = 0;
    for (; *s; s++) {
        int c = (unsigned char)*s;
        if (c == '.') { *hashed = 1; break; }
        if (c == '%') {
            int a = unhex(s[1]), b = a < 0 ? -1 : unhex(s[2]);
            if (b < 0) return -1;
            c = a << 4 | b;
            s += 2;
        }
        if (o + 1 >= n || c == 0) return -1;
        out[o++] = (char)c;
    }
    out[o] = 0;
    return 0;
}

/* 1 when the lock file FNAME is locked by anyone (another open file
 * description), 0 when not, or not a plain file of ours (skipped). */
static int lockfile_held(file_engine *e, const char *fname)
{
    struct flock f;
    struct stat st;
    int held, fd = openat(e->dirfd, fname, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return 0;
    }
    memset(&f, 0, sizeof f);
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    held = fcntl(fd, F_OFD_GETLK, &f) == 0 && f.l_type != F_UNLCK;
    close(fd);
    return held;
}

static int file_list(void *eng, const char *prefix, int (*fn)(void *arg, const char *name), void *arg)
{
    file_engine *e = eng;
    size_t pn = strlen(prefix);
    struct dirent *d;
    int fd, rc = 0;
    DIR *dir;

    /* a descriptor of its own: readdir moves the offset, and dirfd is shared */
    fd = openat(e->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(dir = fdopendir(fd))) {
        rc = baton_seterr(BATON_EIO, errno, "lock dir %s: %s", e->dir, strerror(errno));
        if (fd >= 0) close(fd);
        return rc;
    }
    while ((d = readdir(dir))) {
        char name[BATON_MAX_NAME + 8];
        int hashed, path = !strncmp(d->d_name, "path.", 5);
        const char *show = name;
        if (!path && strncmp(d->d_name, "lock.", 5)) continue;
        if (unescape_name(d->d_name + 5, name, sizeof name, &hashed)) continue;
        if (hashed) {
            /* only the head of the name is known: it must agree with the
             * prefix as far as both go; the name is shown as stored */
            size_t hn = strlen(name);
            if (strncmp(name, prefix, hn < pn ? hn : pn)) continue;
            show = d->d_name;
        } else if (strncmp(name, prefix, pn)) {
            continue;
        }
        if (path) {
            baton_lockinfo li = BATON_LOCK_INFO_INIT;
            /* a hashed path cannot be looked up: its path is unknown */
            if (hashed || name[0] != '/' || path_info(e, name, &li) || !li.held) continue;
        } else if (!lockfile_held(e, d->d_name)) {
            continue;
        }
        if (fn(arg, show)) break;
    }
    closedir(dir);
    return rc;
}

/* The kernel keeps an OFD or flock(2) lock for as long as its holder's open
 * file description lives: nothing another process does to the file ends it
 * (removing the file would only let a second holder lock a new file beside
 * the old one). So an operator cannot break it from here. */
static int file_break(void *eng, const char *name, uint64_t *fence)
{
    baton_lockinfo li = BATON_LOCK_INFO_INIT;
    char who[300] = "";
    (void)fence;
    if (file_info(eng, name, &li) == 0 && li.held && li.holder[0])
        snprintf(who, sizeof who, " (holder: %s)", li.holder);
    return baton_seterr(BATON_ENOTSUP, 0, "file: the lock '%s'%s is the kernel's lock of a live process, which "
                        "holds it until that process releases it or exits; nothing can take it away from "
                        "outside. Stop that process instead (`baton status` and /proc/locks name it)",
                        name, who);
}

static const char *const file_schemes[] = { "file", NULL };

const baton_backend baton__backend_file = {
    .version = BATON_BACKEND_VERSION,
    .name = "file",
    .schemes = file_schemes,
    .caps = BATON_CAP_NOTIFY | BATON_CAP_INFO | BATON_CAP_RWLOCK | BATON_CAP_SEM | BATON_CAP_PERMITS,
    .open = file_open,
    .close = file_close,
    .lock_new = file_lock_new,
    .lock_free = file_lock_free,
    .lock_acquire = file_acquire,
    .lock_release = file_release,
    .lock_renew = NULL,
    .lock_info = file_info,
    .rwlock_new = file_rwlock_new,
    .sem_new = file_sem_new,
    .sem_free = file_sem_free,
    .sem_acquire = file_sem_acquire,
    .sem_release = file_sem_release,
    .sem_ctl = file_sem_ctl,
    .permits_new = file_permits_new,
    .permits_free = file_permits_free,
    .permits_acquire = file_permits_acquire,
    .permits_release = file_permits_release,
    .permits_renew = file_permits_renew,
    .permits_ctl = file_permits_ctl,
    .identity = file_identity,
    .lock_list = file_list,
    .lock_break = file_break,
};
