/*
 * Things planted where the file engine keeps its files:
 *
 *   test_file_planted
 *
 * A symbolic link (to a file, or dangling), a FIFO, a directory, a socket or
 * a second hard link at the path of a lock, semaphore or permit file is
 * refused, never followed or used, and reported for what it is: BATON_EIO
 * (a lock store in a state baton refuses), not BATON_EUNAVAILABLE (an engine
 * it cannot reach), with the path and the kind of thing in the message. A
 * FIFO does not block the open (of an acquire or of a status query). A lock
 * directory that is a symbolic link or a regular file is refused the same
 * way.
 */
#include "ft.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

/* An open that blocks on a planted FIFO would hang the test: fail instead. */
static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "FAIL: stuck for 30 s (an open blocked on a planted FIFO?)\n";
    if (write(2, m, sizeof m - 1) < 0) {
    }
    _exit(1);
}

static char g_target[1200];   /* a file a planted link points at; must stay untouched */

typedef struct {
    const char *kind;   /* what the message must say */
    int (*plant)(const char *path);
} plant;

static int plant_symlink(const char *path) { return symlink(g_target, path); }
static int plant_dangling(const char *path) {
    char t[1300];
    snprintf(t, sizeof t, "%s.nowhere", g_target);
    return symlink(t, path);
}
static int plant_fifo(const char *path) { return mkfifo(path, 0600); }
static int plant_dir(const char *path) { return mkdir(path, 0700); }
static int plant_socket(const char *path) {
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    if (fd < 0 || strlen(path) >= sizeof a.sun_path) return -1;
    strcpy(a.sun_path, path);
    int rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    close(fd);   /* the socket file stays */
    return rc;
}
static int plant_hardlink(const char *path) {
    char other[1300];
    snprintf(other, sizeof other, "%s.other", path);
    int fd = open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    close(fd);
    return link(other, path);
}

static const plant g_plants[] = {
    { "symbolic link (to ", plant_symlink },
    { "symbolic link (to ", plant_dangling },
    { "named pipe (FIFO)", plant_fifo },
    { "is a directory", plant_dir },
    { "is a socket", plant_socket },
    { "2 hard links", plant_hardlink },
};
#define NPLANTS (sizeof g_plants / sizeof g_plants[0])

/* rc must be BATON_EIO and the message must name FNAME and KIND. */
static void check_refusal(const char *what, int rc, const char *fname, const char *kind) {
    const char *msg = baton_error_last()->message ? baton_error_last()->message : "";
    if (rc != BATON_EIO || !strstr(msg, fname) || !strstr(msg, kind))
        fprintf(stderr, "   %s, %s: %d (%s): %s\n", what, kind, rc, baton_strerror(rc), msg);
    CHECK_RC(rc, BATON_EIO);
    CHECK(strstr(msg, fname) != NULL);
    CHECK(strstr(msg, kind) != NULL);
    CHECK(strstr(msg, "refusing") != NULL);
}

static void target_untouched(void) {
    char buf[64] = { 0 };
    int fd = open(g_target, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    CHECK(n == 9 && !strcmp(buf, "original\n"));
    char t[1300];
    struct stat st;
    snprintf(t, sizeof t, "%s.nowhere", g_target);
    CHECK(stat(t, &st) != 0);   /* a dangling link's target is never created */
}

static void plant_at(const plant *p, const char *fname) {
    char path[1400];
    dir_file(path, sizeof path, fname);
    if (p->plant(path)) {
        perror(path);
        exit(1);
    }
}

static void test_lock_file(void) {
    baton_client *c = client();
    for (size_t k = 0; k < NPLANTS; k++) {
        char name[32], fname[64];
        snprintf(name, sizeof name, "lk%zu", k);
        snprintf(fname, sizeof fname, "lock.%s", name);
        plant_at(&g_plants[k], fname);
        baton_lock *l = NULL;
        MUST(baton_lock_open(&l, c, name, NULL));
        check_refusal("lock", baton_lock_acquire(l, 0), fname, g_plants[k].kind);
        check_refusal("lock (waiting)", baton_lock_acquire(l, 200), fname, g_plants[k].kind);
        CHECK(!baton_lock_held(l));
        baton_lock_free(l);
        /* the read-write lock keeps its two sides in the same file */
        baton_rwlock *rw = NULL;
        MUST(baton_rwlock_open(&rw, c, name, NULL));
        check_refusal("rwlock write", baton_lock_acquire(baton_rwlock_write(rw), 0), fname, g_plants[k].kind);
        check_refusal("rwlock read", baton_lock_acquire(baton_rwlock_read(rw), 0), fname, g_plants[k].kind);
        baton_rwlock_free(rw);
        /* a status query neither blocks nor follows */
        baton_lockinfo info;
        memset(&info, 0, sizeof info);
        info.version = BATON_LOCK_INFO_VERSION;
        int64_t t0 = tl_now_ms();
        check_refusal("info", baton_lock_info(c, name, &info), fname, g_plants[k].kind);
        CHECK(tl_now_ms() - t0 < 1000);
        target_untouched();
    }
    baton_client_close(c);
}

static void test_semaphore_file(void) {
    baton_client *c = client();
    for (size_t k = 0; k < NPLANTS; k++) {
        char name[32], fname[64];
        snprintf(name, sizeof name, "sm%zu", k);
        snprintf(fname, sizeof fname, "sem..%s", name);   /* "lock." turned "sem." */
        plant_at(&g_plants[k], fname);
        baton_semaphore *s = NULL;
        int rc = baton_semaphore_open(&s, c, name);
        check_refusal("semaphore", rc, fname, g_plants[k].kind);
        if (rc == 0) baton_semaphore_free(s);
        target_untouched();
    }
    baton_client_close(c);
}

static void test_permit_files(void) {
    baton_client *c = client();
    for (size_t k = 0; k < NPLANTS; k++) {
        char name[32], fname[64];
        baton_permits *p = NULL;
        char id[BATON_PERMIT_ID_SIZE];
        /* at the count file */
        snprintf(name, sizeof name, "pc%zu", k);
        snprintf(fname, sizeof fname, "perm.%s", name);
        plant_at(&g_plants[k], fname);
        MUST(baton_permits_open(&p, c, name));
        check_refusal("permit count", baton_permits_try_set(p, 2, NULL), fname, g_plants[k].kind);
        baton_permits_free(p);
        /* at a slot */
        snprintf(name, sizeof name, "ps%zu", k);
        snprintf(fname, sizeof fname, "perm.%s+0", name);
        plant_at(&g_plants[k], fname);
        MUST(baton_permits_open(&p, c, name));
        MUST(baton_permits_try_set(p, 2, NULL));
        check_refusal("permit slot", baton_permits_acquire(p, 1000, 0, id), fname, g_plants[k].kind);
        baton_permits_free(p);
        target_untouched();
    }
    baton_client_close(c);
}

static void test_lock_dir(void) {
    char real[1300], link_[1300], file[1300], uri[1400];
    snprintf(real, sizeof real, "%s/realdir", g_dir);
    snprintf(link_, sizeof link_, "%s/linkdir", g_dir);
    snprintf(file, sizeof file, "%s/filedir", g_dir);
    CHECK(mkdir(real, 0700) == 0);
    CHECK(symlink(real, link_) == 0);
    int fd = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);

    baton_client *c = NULL;
    snprintf(uri, sizeof uri, "file://%s", link_);
    int rc = baton_client_open(&c, uri, NULL);
    const char *msg = baton_error_last()->message ? baton_error_last()->message : "";
    fprintf(stderr, "   %s: %d: %s\n", uri, rc, msg);
    CHECK_RC(rc, BATON_EIO);
    CHECK(strstr(msg, "is a symbolic link (to ") && strstr(msg, real) && strstr(msg, "refusing"));
    if (rc == 0) baton_client_close(c);

    snprintf(uri, sizeof uri, "file://%s", file);
    rc = baton_client_open(&c, uri, NULL);
    msg = baton_error_last()->message ? baton_error_last()->message : "";
    fprintf(stderr, "   %s: %d: %s\n", uri, rc, msg);
    CHECK_RC(rc, BATON_EIO);
    CHECK(strstr(msg, "is a regular file, not a directory") != NULL);
    if (rc == 0) baton_client_close(c);

    /* the real directory itself is fine */
    snprintf(uri, sizeof uri, "file://%s", real);
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    baton_client_close(c);
}

int main(void) {
    ft_setup("file_planted");
    signal(SIGALRM, on_alarm);
    alarm(30);
    snprintf(g_target, sizeof g_target, "%s.target", g_dir);
    int fd = open(g_target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, "original\n", 9) != 9) {
        perror(g_target);
        return 1;
    }
    close(fd);
    RUN(test_lock_file);
    RUN(test_semaphore_file);
    RUN(test_permit_files);
    RUN(test_lock_dir);
    return th_finish();
}
