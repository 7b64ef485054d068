/*
 * Lock names that are absolute paths, on the file engine:
 *
 *   test_file_pathlock
 *
 * Such a name is that very file, locked with flock(2) as flock(1) locks it,
 * so the two exclude each other both ways (an flock(2) on another open of
 * the file stands in for flock(1) here; tests/file/flock.sh runs the real
 * one): try, wait, timeout and cancel work against it; the read side of a
 * read-write lock is LOCK_SH; a missing file is created (0666 less the
 * umask) and never written; the fence, kept in the lock dir, increases
 * across grants and across spellings of one file; a waiter whose file was
 * replaced is not granted the old one; a relative name still maps to a file
 * in the lock dir.
 */
#include "ft.h"
#include "backends/file/file_int.h"

#include <sys/file.h>

static char g_area[1100];   /* the user's files live here, outside the lock dir */

static const char *upath(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_area, name);
    return buf;
}

/* Whether an flock(2) of HOW (LOCK_EX or LOCK_SH) on a fresh open of PATH succeeds right now. */
static int flock_free(const char *path, int how) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int ok = flock(fd, how | LOCK_NB) == 0;
    close(fd);
    return ok;
}

static int flock_hold(const char *path, int how) {
    int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || flock(fd, how | LOCK_NB)) {
        perror(path);
        exit(1);
    }
    return fd;
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t took_ms;
    atomic_int done;
    pthread_t th;
} waiter;

static void *waiter_main(void *a) {
    waiter *x = a;
    int64_t t0 = tl_now_ms();
    x->rc = baton_lock_acquire(x->l, x->wait_ms);
    x->took_ms = tl_now_ms() - t0;
    atomic_store(&x->done, 1);
    return NULL;
}

static void start_waiter(waiter *w, baton_lock *l, int64_t wait_ms) {
    memset(w, 0, sizeof *w);
    w->l = l;
    w->wait_ms = wait_ms;
    atomic_init(&w->done, 0);
    pthread_create(&w->th, NULL, waiter_main, w);
}

static void test_excludes_flock_both_ways(void) {
    baton_client *c = client();
    baton_lock *l = NULL;
    char p[1200];
    upath(p, sizeof p, "job");
    MUST(baton_lock_open(&l, c, p, NULL));
    /* baton holds: flock -n fails, for readers too */
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK(flock_free(p, LOCK_SH) == 0);
    CHECK_RC(baton_lock_release(l), 0);
    CHECK(flock_free(p, LOCK_EX) == 1);
    /* flock holds: baton's try fails, a wait times out */
    int fd = flock_hold(p, LOCK_EX);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 300), BATON_ETIMEDOUT);
    int64_t took = tl_now_ms() - t0;
    CHECK(took >= 280 && took < 2000);
    /* a waiter is granted as soon as flock lets go */
    waiter w;
    start_waiter(&w, l, 5000);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&w.done));
    int64_t freed = tl_now_ms();
    close(fd);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    /* woken at once (a poll of at most 20 ms); 1.5 s is generous for a
     * loaded machine and still fails a waiter that sits out its 5 s */
    CHECK(tl_now_ms() - freed < 1500);
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_release(l), 0);
    /* a shared flock holder also keeps baton's exclusive lock out */
    fd = flock_hold(p, LOCK_SH);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    close(fd);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

static void test_cancel(void) {
    baton_client *c = client();
    baton_lock *l = NULL;
    char p[1200];
    upath(p, sizeof p, "cancel");
    MUST(baton_lock_open(&l, c, p, NULL));
    int fd = flock_hold(p, LOCK_EX);
    waiter w;
    start_waiter(&w, l, -1);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&w.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_cancel(l), 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, BATON_ECANCELED);
    CHECK(tl_now_ms() - t0 < 1000);
    CHECK(!baton_lock_held(l));
    /* nothing of the abandoned wait holds the file */
    close(fd);
    CHECK(flock_free(p, LOCK_EX) == 1);
    CHECK_RC(baton_lock_acquire(l, 1000), 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

/* Two baton clients exclude each other on a path too; the fence increases
 * across grants and clients; the user's file is created but never written. */
static void test_fence_and_file(void) {
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = NULL, *b = NULL;
    char p[1200];
    upath(p, sizeof p, "fenced");
    unlink(p);
    mode_t old = umask(022);
    MUST(baton_lock_open(&a, c1, p, NULL));
    MUST(baton_lock_open(&b, c2, p, NULL));
    uint64_t last = 0;
    for (int i = 0; i < 6; i++) {
        baton_lock *l = i % 2 ? b : a, *o = i % 2 ? a : b;
        CHECK_RC(baton_lock_acquire(l, 1000), 0);
        CHECK_RC(baton_lock_acquire(o, 0), BATON_ELOCKED);
        uint64_t f = baton_lock_fence(l);
        CHECK(f > last);
        last = f;
        CHECK_RC(baton_lock_release(l), 0);
    }
    umask(old);
    struct stat st;
    CHECK(stat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644 && st.st_size == 0);
    /* the fence is kept in the lock dir, named after the file's real path */
    char real[1200], fname[256], fpath[1400];
    CHECK(realpath(p, real) != NULL);
    baton__file_name(real, fname, sizeof fname);
    memcpy(fname, "path.", 5);
    CHECK(stat(dir_file(fpath, sizeof fpath, fname), &st) == 0);
    /* the fence survives its file: the next grant is above it */
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c1, p, &info), 0);
    CHECK(info.fence == last && !info.held);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A link to the file is the same lock (flock(1) follows it too), with one fence. */
static void test_spellings(void) {
    baton_client *c = client();
    char p[1200], ln[1200], dotted[1300];
    upath(p, sizeof p, "spelled");
    upath(ln, sizeof ln, "spelled-link");
    int fd = open(p, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    close(fd);
    unlink(ln);
    CHECK(symlink(p, ln) == 0);
    snprintf(dotted, sizeof dotted, "%s/./spelled", g_area);
    baton_lock *a = NULL, *b = NULL, *d = NULL;
    MUST(baton_lock_open(&a, c, p, NULL));
    MUST(baton_lock_open(&b, c, ln, NULL));
    MUST(baton_lock_open(&d, c, dotted, NULL));
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(d, 0), BATON_ELOCKED);
    uint64_t last = baton_lock_fence(b);
    CHECK_RC(baton_lock_release(b), 0);
    /* the counter is shared: bump it far ahead of the clock through one spelling,
     * the others continue above it */
    baton_lock *ls[3] = { a, d, b };
    for (int i = 0; i < 6; i++) {
        baton_lock *l = ls[i % 3];
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        CHECK(baton_lock_fence(l) > last);
        last = baton_lock_fence(l);
        CHECK_RC(baton_lock_release(l), 0);
    }
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(d);
    baton_client_close(c);
}

static void test_rwlock(void) {
    baton_client *c1 = client(), *c2 = client();
    baton_rwlock *r1 = NULL, *r2 = NULL;
    char p[1200];
    upath(p, sizeof p, "rw");
    MUST(baton_rwlock_open(&r1, c1, p, NULL));
    MUST(baton_rwlock_open(&r2, c2, p, NULL));
    baton_lock *rd1 = baton_rwlock_read(r1), *wr1 = baton_rwlock_write(r1);
    baton_lock *rd2 = baton_rwlock_read(r2), *wr2 = baton_rwlock_write(r2);
    /* the read side is LOCK_SH: flock -s gets in, flock -x does not */
    CHECK_RC(baton_lock_acquire(rd1, 0), 0);
    CHECK_RC(baton_lock_acquire(rd2, 0), 0);
    CHECK(flock_free(p, LOCK_SH) == 1);
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_acquire(wr2, 0), BATON_EDEADLK);   /* c2 reads: no upgrade */
    CHECK_RC(baton_lock_release(rd2), 0);
    /* a waiting baton writer keeps new baton readers out */
    waiter w;
    start_waiter(&w, wr2, 3000);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&w.done));
    CHECK_RC(baton_lock_acquire(rd2, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(rd1), 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    uint64_t fw = baton_lock_fence(wr2);
    /* the write side is LOCK_EX */
    CHECK(flock_free(p, LOCK_SH) == 0);
    CHECK_RC(baton_lock_acquire(rd1, 0), BATON_ELOCKED);
    /* downgrade: c2 takes the read side, then lets the write side go */
    CHECK_RC(baton_lock_acquire(rd2, 0), 0);
    CHECK(baton_lock_fence(rd2) > fw);
    CHECK(flock_free(p, LOCK_SH) == 0);   /* the writer still holds */
    CHECK_RC(baton_lock_release(wr2), 0);
    CHECK(flock_free(p, LOCK_SH) == 1);   /* now only read */
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_acquire(rd1, 0), 0);
    CHECK(baton_lock_fence(rd1) > baton_lock_fence(rd2));
    CHECK_RC(baton_lock_release(rd2), 0);
    CHECK_RC(baton_lock_release(rd1), 0);
    CHECK(flock_free(p, LOCK_EX) == 1);
    /* a shared flock lets baton's readers in, not its writers */
    int fd = flock_hold(p, LOCK_SH);
    CHECK_RC(baton_lock_acquire(rd1, 0), 0);
    CHECK_RC(baton_lock_acquire(wr2, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(rd1), 0);
    close(fd);
    CHECK_RC(baton_lock_acquire(wr1, 0), 0);
    CHECK(flock_free(p, LOCK_SH) == 0);
    CHECK_RC(baton_lock_release(wr1), 0);
    baton_rwlock_free(r1);
    baton_rwlock_free(r2);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_info(void) {
    baton_client *c = client(), *c2 = client();
    baton_lock *l = NULL;
    char p[1200];
    upath(p, sizeof p, "info");
    MUST(baton_lock_open(&l, c, p, NULL));
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, p, &info), 0);   /* no such file yet: free, and not created */
    CHECK(!info.held);
    struct stat st;
    CHECK(stat(p, &st) != 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, p, &info), 0);
    CHECK(info.held && info.writer == 1 && info.fence == baton_lock_fence(l));
    char want[64];
    snprintf(want, sizeof want, " %ld ", (long)getpid());
    CHECK(strstr(info.holder, want) != NULL);
    CHECK_RC(baton_lock_release(l), 0);
    /* a holder that is not baton: known by its pid */
    int fd = flock_hold(p, LOCK_EX);
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, p, &info), 0);
    snprintf(want, sizeof want, "pid %ld", (long)getpid());
    CHECK(info.held && !strcmp(info.holder, want));
    close(fd);
    fd = flock_hold(p, LOCK_SH);
    int fd2 = flock_hold(p, LOCK_SH);
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c2, p, &info), 0);
    CHECK(info.held && info.writer == 0 && info.readers == 2);
    close(fd);
    close(fd2);
    baton_lock_free(l);
    baton_client_close(c);
    baton_client_close(c2);
}

/* An flock holder F holds the file; A waits on it; the file is removed and
 * F locks the new file at the same path. When F lets the old one go, A must
 * not come back holding the removed file while F holds the path's. */
static void test_replaced_while_waiting(void) {
    baton_client *ca = client();
    baton_lock *a = NULL;
    char p[1200];
    upath(p, sizeof p, "replaced");
    MUST(baton_lock_open(&a, ca, p, NULL));
    int old = flock_hold(p, LOCK_EX);
    waiter w;
    start_waiter(&w, a, 1500);
    tl_sleep_ms(200);
    CHECK(unlink(p) == 0);
    int fresh = flock_hold(p, LOCK_EX);
    close(old);
    pthread_join(w.th, NULL);
    if (w.rc == 0) fprintf(stderr, "   granted the removed file while the path's file is held\n");
    CHECK_RC(w.rc, BATON_ETIMEDOUT);
    if (w.rc == 0) baton_lock_release(a);
    close(fresh);
    CHECK_RC(baton_lock_acquire(a, 1000), 0);   /* and it works on the new file */
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_client_close(ca);
}

/* Between baton clients the fence file's gate (kept by path) holds too: a
 * baton holder of a removed file still keeps other baton clients off the
 * path until it lets go; a waiter then gets the new file. */
static void test_removed_under_baton_holder(void) {
    baton_client *ch = client(), *ca = client(), *cc = client();
    baton_lock *h = NULL, *a = NULL, *cl = NULL;
    char p[1200];
    upath(p, sizeof p, "removed");
    MUST(baton_lock_open(&h, ch, p, NULL));
    MUST(baton_lock_open(&a, ca, p, NULL));
    MUST(baton_lock_open(&cl, cc, p, NULL));
    CHECK_RC(baton_lock_acquire(h, 0), 0);
    waiter w;
    start_waiter(&w, a, 3000);
    tl_sleep_ms(200);
    CHECK(unlink(p) == 0);
    CHECK_RC(baton_lock_acquire(cl, 0), BATON_ELOCKED);
    CHECK(!atomic_load(&w.done));
    CHECK_RC(baton_lock_release(h), 0);
    pthread_join(w.th, NULL);
    CHECK_RC(w.rc, 0);
    CHECK(flock_free(p, LOCK_EX) == 0);   /* A holds the file now at the path */
    CHECK_RC(baton_lock_acquire(cl, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_acquire(cl, 0), 0);
    CHECK_RC(baton_lock_release(cl), 0);
    baton_lock_free(h);
    baton_lock_free(a);
    baton_lock_free(cl);
    baton_client_close(ch);
    baton_client_close(ca);
    baton_client_close(cc);
}

static void test_odd_paths(void) {
    baton_client *c = client();
    char p[1200];
    baton_lock *l = NULL;
    /* a directory is locked too, as flock(1) locks it */
    upath(p, sizeof p, "adir");
    mkdir(p, 0755);
    MUST(baton_lock_open(&l, c, p, NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(flock_free(p, LOCK_EX) == 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    /* a missing directory: a clear refusal, nothing created */
    upath(p, sizeof p, "missing-dir/job");
    MUST(baton_lock_open(&l, c, p, NULL));
    int rc = baton_lock_acquire(l, 0);
    CHECK_RC(rc, BATON_EINVAL);
    CHECK(strstr(baton_error_last()->message, "No such file or directory") != NULL);
    baton_lock_free(l);
    /* a FIFO is refused without blocking */
    upath(p, sizeof p, "fifo");
    mkfifo(p, 0600);
    MUST(baton_lock_open(&l, c, p, NULL));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EINVAL);
    CHECK(tl_now_ms() - t0 < 1000);
    CHECK(strstr(baton_error_last()->message, "named pipe") != NULL);
    baton_lock_free(l);
    baton_client_close(c);
}

/* A relative name is still a file in the lock dir, not a path. */
static void test_relative_name(void) {
    baton_client *c = client();
    char cwd[1100], p[1400];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir(g_area) == 0);
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, "relative", NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    struct stat st;
    CHECK(stat(dir_file(p, sizeof p, "lock.relative"), &st) == 0);
    CHECK(stat("relative", &st) != 0);   /* no file made in the current directory */
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    CHECK(chdir(cwd) == 0);
    baton_client_close(c);
}

int main(void) {
    ft_setup("file_pathlock");
    snprintf(g_area, sizeof g_area, "%s-area", g_dir);
    tl_mkdirs(g_area);
    RUN(test_excludes_flock_both_ways);
    RUN(test_cancel);
    RUN(test_fence_and_file);
    RUN(test_spellings);
    RUN(test_rwlock);
    RUN(test_info);
    RUN(test_replaced_while_waiting);
    RUN(test_removed_under_baton_holder);
    RUN(test_odd_paths);
    RUN(test_relative_name);
    return th_finish();
}
