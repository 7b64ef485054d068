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
 * signal and joins it (see wait_main in wait.c).
 *
 * Semaphores keep a counter file; permit-expirable semaphores keep one lock
 * file per permit (see sem.c and permits.c).
 */
#include "file_int.h"
#include "util/sha256.h"

static int resolve_dir(const baton_uri *u, const baton_opts *opts, char *out, size_t n, int *shared)
{
    const char *env;
    *shared = 0;
    if (u->host && strcmp(u->host, "localhost"))
        return baton_seterr(BATON_EINVAL, 0, "file URI: host '%s' is not allowed; use file:///abs/dir", u->host);
    *shared = baton_opts_given(opts, "shared"); /* its one value, group, checked by the core */
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
const char *file__kind_of(const struct stat *st)
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
        return baton_seterr(BATON_EIO, 0, "lock dir %s is %s, not a directory; refusing it", dir, file__kind_of(&st));
    }
    if (errno == EACCES && stat(dir, &st) == 0)
        return baton_seterr(BATON_EAUTH, EACCES, "lock dir %s: permission denied (owner uid %lu, group %lu, "
                            "mode %04o)", dir, (unsigned long)st.st_uid, (unsigned long)st.st_gid,
                            (unsigned)(st.st_mode & 07777));
    return baton_seterr(BATON_EUNAVAILABLE, errno, "lock dir %s: %s", dir, strerror(errno));
}

static int file_open(void **eng, const baton_uri *u, const baton_opts *opts, const baton_client_options *o)
{
    char dir[4096];
    struct stat st;
    file_engine *e;
    int rc, fd = -1, shared;
    (void)o;

    if ((rc = resolve_dir(u, opts, dir, sizeof dir, &shared))) return rc;
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
    if ((rc = file__async_init(e))) {
        pthread_mutex_destroy(&e->wmu);
        close(fd);
        free(e);
        return rc;
    }
    *eng = e;
    return 0;
}

/* Refuses what was found at a file's place in the lock dir: not a plain file
 * of ours but a link, directory, pipe, socket or device (planted, or left by
 * a mistake), or a file with more than one name (possibly a hard link to a
 * file elsewhere, which we would write our record into). It is reported for
 * what it is, as a lock store we refuse, not as an engine we cannot reach. */
static int planted(file_engine *e, int dfd, const char *what, const char *fname, const struct stat *found)
{
    struct stat st;
    char to[1100] = "";
    if (!found) {
        if (fstatat(dfd, fname, &st, AT_SYMLINK_NOFOLLOW))
            return baton_seterr(BATON_EIO, errno, "%s %s/%s: %s", what, e->dir, fname, strerror(errno));
        found = &st;
    }
    if (S_ISLNK(found->st_mode)) link_target(dfd, fname, to, sizeof to);
    if (S_ISREG(found->st_mode))
        return baton_seterr(BATON_EIO, 0, "%s %s/%s has %lu hard links (baton's own files have one; another may "
                            "be a file elsewhere linked in); refusing it. Remove it if nothing should be there",
                            what, e->dir, fname, (unsigned long)found->st_nlink);
    return baton_seterr(BATON_EIO, 0, "%s %s/%s is %s%s, not a lock file; refusing it (baton never follows or "
                        "uses such a thing in its lock directory). Remove it if nothing should be there",
                        what, e->dir, fname, file__kind_of(found), to);
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
int file__dir_open(file_engine *e, const char *fname, int flags, const char *what, int *fdout)
{
    return file__sub_open(e, e->dirfd, fname, flags, what, fdout);
}

/* file__dir_open in the folder DFD (the lock dir, or one of its folders of
 * values, groups and queues). */
int file__sub_open(file_engine *e, int dfd, const char *fname, int flags, const char *what, int *fdout)
{
    struct stat st;
    int fd, err;
    *fdout = -1;
    for (int tries = 0;; tries++) {
        fd = openat(dfd, fname, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, e->fmode);
        if (fd >= 0) break;
        err = errno;
        if (err == ENOENT && !(flags & O_CREAT)) return 0;
        if (err == ELOOP || err == EISDIR || err == ENXIO || err == ENODEV || err == ETXTBSY)
            return planted(e, dfd, what, fname, NULL);
        if (err == EACCES && e->shared && tries < 50) {
            struct timespec ts = { 0, 2000000 };
            nanosleep(&ts, NULL);
            continue;
        }
        if (err == EACCES && fstatat(dfd, fname, &st, AT_SYMLINK_NOFOLLOW) == 0)
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
        return planted(e, dfd, what, fname, &st);
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
    file__async_stop(e);   /* first: it has a watch on the inotify watcher */
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

static const baton_lock_methods file_lock_methods = {
    .create = file__lock_new,
    .destroy = file__lock_free,
    .acquire = file__acquire,
    .release = file__release,
    .info = file__info,
    .list = file__list,
    .force_unlock = file__break,
};

static const baton_rw_methods file_rw_methods = {
    .create = file__rwlock_new,
};

static const baton_sem_methods file_sem_methods = {
    .create = file__sem_new,
    .destroy = file__sem_free,
    .acquire = file__sem_acquire,
    .release = file__sem_release,
    .ctl = file__sem_ctl,
};

static const baton_permits_methods file_permits_methods = {
    .create = file__permits_new,
    .destroy = file__permits_free,
    .acquire = file__permits_acquire,
    .release = file__permits_release,
    .renew = file__permits_renew,
    .ctl = file__permits_ctl,
};

static const baton_services file_services_methods = {
    .identity = file_identity,
};

const baton_backend baton__backend_file = {
    .version = BATON_BACKEND_VERSION,
    .info = &baton__info_file,
    .caps = BATON_CAP_NOTIFY | BATON_CAP_FAIR,
    .open = file_open,
    .close = file_close,
    .lock = &file_lock_methods,
    .rw = &file_rw_methods,
    .sem = &file_sem_methods,
    .permits = &file_permits_methods,
    .value = &file__value_methods,
    .group = &file__group_methods,
    .queue = &file__queue_methods,
    .ratelimit = &baton__ratelimit_file,
    .services = &file_services_methods,
    .async = &file__async_methods,
};
