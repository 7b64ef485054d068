/*
 * The file engine's plain lock and the pieces every lock file shares: the
 * record (fence and holder) at the start of each file, the fence rule, and
 * opening a lock file that nobody removes under us. See file.c for the
 * engine's design.
 */
#include "file_int.h"

int file__setlk_range(int fd, int cmd, short type, off_t start, off_t len)
{
    struct flock f;
    memset(&f, 0, sizeof f);
    f.l_type = type;
    f.l_whence = SEEK_SET;
    f.l_start = start;
    f.l_len = len;
    return fcntl(fd, cmd, &f);
}

int file__setlk(int fd, int cmd, short type)
{
    return file__setlk_range(fd, cmd, type, WHOLE);
}

/* Reads the record. Returns 1 when the fence counter is intact, 0 when it is
 * lost: an empty file (created, or emptied by a power loss before its data
 * reached the disk), a torn write, zeros or bytes that are not ours. Only
 * the exact layout REC_FMT writes counts, so a cut-off counter never reads as
 * a smaller number. */
int file__read_rec(int fd, uint64_t *fence, int *held, char *holder, size_t hn)
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

int file__write_rec(int fd, uint64_t fence, int held, const char *holder)
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
uint64_t file__wall_us(void)
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
    uint64_t floor = file__wall_us();
    if (intact && stored < UINT64_MAX && stored + 1 > floor) return stored + 1;
    return floor;
}

/* Bumps the fence of a lock file whose exclusive (or counter) range we hold,
 * writing it back before the grant is reported.
 *
 * No fdatasync, on measurement: on ext4 an uncontended acquire+release went
 * from about 13 us to about 240 us with it (some 18 times slower), far more
 * than the counter is worth now that the clock floor covers a lost write. */
int file__bump_fence(int fd, const char *desc, uint64_t *fence)
{
    uint64_t stored;
    int held, intact = file__read_rec(fd, &stored, &held, NULL, 0);
    uint64_t f = next_fence(stored, intact);
    int rc = file__write_rec(fd, f, 1, desc);
    if (rc) return rc;
    *fence = f;
    return 0;
}


int file__open_lock_file(file_engine *e, const char *fname)
{
    int fd, rc = file__dir_open(e, fname, O_RDWR | O_CREAT, "lock file", &fd);
    return rc ? rc : fd;
}

/* Whether the file under fd is still in the lock dir. baton never removes a
 * lock file, but a tmp cleaner or a user may, and then whoever opens the name
 * next creates a new file: a lock won on the old one (opened before the
 * removal, or granted after a wait on it) excludes nobody. Removing the name
 * or renaming another file over it both leave the old file with no link;
 * asking the fd for that costs a fraction of looking the name up again. */
int file__still_linked(int fd)
{
    struct stat a;
    return fstat(fd, &a) == 0 && a.st_nlink > 0;
}

int file__replaced_err(file_engine *e, const char *fname)
{
    return baton_seterr(BATON_EIO, 0, "lock file %s/%s keeps being removed or replaced while it is locked; "
                        "is something cleaning the lock directory?", e->dir, fname);
}

/* Marks the record released, keeping the fence; a damaged record is left
 * for the next grant to replace (it reads as a lost counter). */
void file__mark_released(int fd)
{
    uint64_t fence;
    int held;
    if (file__read_rec(fd, &fence, &held, NULL, 0))
        file__write_rec(fd, fence, 0, "");
}

int file__lock_new(void *eng, const char *name, const baton_lock_options *o, void **st)
{
    char fname[256];
    file_lock *fl;
    (void)eng; (void)o;
    baton__file_name(name, fname, sizeof fname);
    if (!(fl = calloc(1, sizeof *fl + strlen(fname) + 1))) return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    fl->fname = (char *)(fl + 1);
    memcpy(fl->fname, fname, strlen(fname) + 1);
    fl->fd = fl->gfd = -1;
    if (name[0] == '/' && !(fl->path = strdup(name))) {
        free(fl);
        return baton_seterr(BATON_ENOMEM, 0, "out of memory");
    }
    *st = fl;
    return 0;
}

void file__lock_free(void *eng, void *st)
{
    file_lock *fl = st;
    (void)eng;
    if (fl->kind == K_MEMBER || fl->kind == K_TAKER) {
        if (fl->kind == K_MEMBER) file__member_free(fl);
        else file__taker_free(fl);
        return;
    }
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

/* The plain lock (a name, or a path): the whole lock file, waiting in the
 * kernel when the request allows. */
int file__plain_take(file_engine *e, file_lock *fl, baton_acquire_req *req)
{
    int fd, rc;

    if (fl->path) return file__path_acquire(e, fl, req);
    for (int tries = 0;; tries++) {
        if (tries == RELINK_TRIES) return file__replaced_err(e, fl->fname);
        if ((fd = file__open_lock_file(e, fl->fname)) < 0) return fd;
        req->sent_ns = baton_now_ns();
        if ((rc = file__take_range(fd, F_WRLCK, WHOLE, req, fl->fname))) return rc;
        if (file__still_linked(fd)) break;
        close(fd);
    }
    if ((rc = file__bump_fence(fd, req->owner->desc, &req->fence))) {
        close(fd);
        return rc;
    }
    fl->fd = fd;
    return 0;
}

int file__acquire(void *eng, void *st, baton_acquire_req *req)
{
    file_engine *e = eng;
    file_lock *fl = st;

    if (fl->kind == K_MEMBER) return file__member_join(e, fl, req);
    if (fl->kind == K_TAKER) return file__taker_take(e, fl, req);
    if (fl->kind == K_WRITE && !fl->path) return file__rw_acquire_write(e, fl, req);
    if (fl->kind == K_READ && !fl->path) return file__rw_acquire_read(e, fl, req);
    /* the core asks for fairness on plain locks only (not read-write locks) */
    if (req->fair && fl->kind == K_PLAIN) return file__fair_acquire(e, fl, req, file__plain_take);
    return file__plain_take(e, fl, req);
}

int file__release(void *eng, void *st, const baton_owner *o)
{
    file_lock *fl = st;
    (void)eng; (void)o;
    if (fl->kind == K_MEMBER) return file__member_leave(fl);
    if (fl->kind == K_TAKER) return file__taker_release(fl);
    if (fl->path) return file__path_release(fl);
    if (fl->rw) return file__rw_release(fl);
    if (fl->fd < 0) return baton_seterr(BATON_ENOTHELD, 0, "not held");
    file__mark_released(fl->fd);
    file__setlk(fl->fd, F_OFD_SETLK, F_UNLCK);
    close(fl->fd);
    fl->fd = -1;
    return 0;
}

int file__info(void *eng, const char *name, baton_lockinfo *out)
{
    /* A semaphore of this name: its permits. */
    {
        char sname[256], buf[128];
        baton__file_name(name, sname, sizeof sname);
        memcpy(sname, "sem.", 4);
        int sfd, rc = file__dir_open(eng, sname, O_RDONLY, "semaphore file", &sfd);
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
        int rc = file__permits_info(eng, name, &out->permits);
        if (rc) return rc;
    }
    file_engine *e = eng;
    char fname[256];
    struct flock f;
    int fd, held, rc;

    baton__file_name(name, fname, sizeof fname);
    if ((rc = file__fair_info(e, fname, &out->queue_length))) return rc;
    if (name[0] == '/') return file__path_info(e, name, out);

    if ((rc = file__dir_open(e, fname, O_RDONLY, "lock file", &fd))) return rc;
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
    file__read_rec(fd, &out->fence, &held, out->holder, sizeof out->holder);
    if (!out->held) out->holder[0] = 0;   /* a dead holder leaves its record behind */
    out->remaining_ms = -1;
    close(fd);
    return 0;
}
