/*
 * Who may write the file engine's lock directory:
 *
 *   test_file_dirmode
 *
 * By default the directory must be ours and written by nobody else: a group-
 * or world-writable one (file:///tmp as root among them) is refused with
 * BATON_EIO (baton exits 74, as for a planted file) and a message that says
 * how to fix it, since another user could pre-create or hold its lock files. With ?shared=group a directory
 * shared with a group on purpose is accepted when it is setgid and not
 * world-writable, owned by root or us, and we are in its group; lock files
 * made there are 0660 whatever the umask, so members can lock each other's.
 *
 * The parts with other users run as root: the test re-runs itself as
 * uid 65534 with chosen groups ("child" mode below).
 */
#include "ft.h"

#include <grp.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

#define GROUP_IN 4242    /* a group the member child is in (need not exist in /etc/group) */
#define GROUP_OUT 4243   /* one it is not in */
#define NOBODY 65534

static int g_root;   /* euid 0: the other-user parts run */

/* A fresh directory g_dir/NAME with exactly MODE (the umask does not apply). */
static const char *mkdir_mode(char *buf, size_t n, const char *name, mode_t mode) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    if (mkdir(buf, 0700) || chmod(buf, mode)) {
        perror(buf);
        exit(1);
    }
    return buf;
}

/* Opens a client on DIR (with QUERY appended to the URI) and returns its code;
 * the message of a refusal is left in msg. */
static int open_rc(const char *dir, const char *query, char *msg, size_t n) {
    char uri[1400];
    baton_client *c = NULL;
    snprintf(uri, sizeof uri, "file://%s%s", dir, query);
    int rc = baton_client_open(&c, uri, NULL);
    snprintf(msg, n, "%s", rc && baton_error_last()->message ? baton_error_last()->message : "");
    if (rc == 0) baton_client_close(c);
    return rc;
}

static void expect(const char *dir, const char *query, int want, const char *must_say, const char *must_say2) {
    char msg[1024];
    int rc = open_rc(dir, query, msg, sizeof msg);
    if (rc != want || (must_say && !strstr(msg, must_say)) || (must_say2 && !strstr(msg, must_say2)))
        fprintf(stderr, "   %s%s: %d (%s): %s\n", dir, query, rc, baton_strerror(rc), msg);
    CHECK_RC(rc, want);
    if (must_say) CHECK(strstr(msg, must_say) != NULL);
    if (must_say2) CHECK(strstr(msg, must_say2) != NULL);
}

static void test_private_modes(void) {
    char d[1200];
    expect(mkdir_mode(d, sizeof d, "m0700", 0700), "", 0, NULL, NULL);
    expect(mkdir_mode(d, sizeof d, "m0750", 0750), "", 0, NULL, NULL);
    expect(mkdir_mode(d, sizeof d, "m0755", 0755), "", 0, NULL, NULL);
    expect(mkdir_mode(d, sizeof d, "m0770", 0770), "", BATON_EIO, "writable by its group", "chmod 700");
    expect(mkdir_mode(d, sizeof d, "m0720", 0720), "", BATON_EIO, "writable by its group", "?shared=group");
    expect(mkdir_mode(d, sizeof d, "m2770", 02770), "", BATON_EIO, "writable by its group", NULL);
    expect(mkdir_mode(d, sizeof d, "m0702", 0702), "", BATON_EIO, "writable by every user", "chmod 700");
    expect(mkdir_mode(d, sizeof d, "m0777", 0777), "", BATON_EIO, "writable by every user", "private directory");
    expect(mkdir_mode(d, sizeof d, "m1777", 01777), "", BATON_EIO, "writable by every user", "baton-");
    /* a directory baton creates itself is private */
    snprintf(d, sizeof d, "%s/fresh", g_dir);
    expect(d, "", 0, NULL, NULL);
    struct stat st;
    CHECK(stat(d, &st) == 0 && (st.st_mode & 07777) == 0700);
}

/* /tmp itself: world-writable and sticky. As root it was used as it is;
 * the message must not suggest closing /tmp. */
static void test_tmp(void) {
    char msg[1024];
    int rc = open_rc("/tmp", "", msg, sizeof msg);
    fprintf(stderr, "   file:///tmp: %d: %s\n", rc, msg);
    CHECK_RC(rc, BATON_EIO);
    if (g_root) {
        CHECK(strstr(msg, "writable by every user") != NULL);
        CHECK(strstr(msg, "file:///tmp/baton-0") != NULL);
        CHECK(strstr(msg, "chmod") == NULL);
    }
}

static void test_shared_group(void) {
    char d[1200], path[1400];
    expect(mkdir_mode(d, sizeof d, "s2770", 02770), "?shared=group", 0, NULL, NULL);
    expect(d, "?shared=world", BATON_EINVAL, "shared=world: want one of group", NULL);
    expect(mkdir_mode(d, sizeof d, "s0770", 0770), "?shared=group", BATON_EIO, "not setgid", "chmod g+s");
    expect(mkdir_mode(d, sizeof d, "s2777", 02777), "?shared=group", BATON_EIO, "writable by every user", NULL);
    expect(mkdir_mode(d, sizeof d, "s3777", 03777), "?shared=group", BATON_EIO, "writable by every user", NULL);
    expect(mkdir_mode(d, sizeof d, "s2750", 02750), "?shared=group", 0, NULL, NULL);
    expect(mkdir_mode(d, sizeof d, "s0700", 0700), "?shared=group", 0, NULL, NULL);

    /* lock, semaphore and permit files are 0660 there, even under umask 077 */
    mkdir_mode(d, sizeof d, "s2770f", 02770);
    char uri[1300];
    snprintf(uri, sizeof uri, "file://%s?shared=group", d);
    mode_t old = umask(077);
    baton_client *c = NULL;
    MUST(baton_client_open(&c, uri, NULL));
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, "job", NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    baton_semaphore *s = NULL;
    MUST(baton_semaphore_open(&s, c, "sem"));
    baton_permits *p = NULL;
    MUST(baton_permits_open(&p, c, "perm"));
    MUST(baton_permits_try_set(p, 1, NULL));
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 1000, 0, id), 0);
    umask(old);
    const char *files[] = { "lock.job", "sem..sem", "perm.perm", "perm.perm+0" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", d, files[i]);
        CHECK(stat(path, &st) == 0);
        if ((st.st_mode & 07777) != 0660) fprintf(stderr, "   %s: mode %04o\n", path, (unsigned)(st.st_mode & 07777));
        CHECK((st.st_mode & 07777) == 0660);
    }
    /* a private dir keeps them 0600 */
    baton_permits_free(p);
    baton_semaphore_free(s);
    baton_lock_free(l);
    baton_client_close(c);
    mkdir_mode(d, sizeof d, "p0700f", 0700);
    snprintf(uri, sizeof uri, "file://%s", d);
    MUST(baton_client_open(&c, uri, NULL));
    MUST(baton_lock_open(&l, c, "job", NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/lock.job", d);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    baton_lock_free(l);
    baton_client_close(c);
}

/* ---- other users (root only) ---- */

/* Runs this test as uid NOBODY with the one group GID:
 *   child GID URI NAME OP     OP: try (acquire with no wait) | hold (take NAME, then
 *                             sleep until killed; prints "held" once it holds)
 * It exits with -rc of the first failing call (0 on success). */
static int child_main(int argc, char **argv) {
    if (argc != 6) return 100;
    gid_t g = (gid_t)atoi(argv[2]);
    if (setgroups(1, &g) || setgid(g) || setuid(NOBODY)) {
        perror("child: drop privileges");
        return 101;
    }
    umask(022);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, argv[3], NULL);
    if (rc) {
        fprintf(stderr, "   child (gid %s): open: %s\n", argv[2], baton_error_last()->message);
        return -rc;
    }
    baton_lock *l = NULL;
    if ((rc = baton_lock_open(&l, c, argv[4], NULL)) || (rc = baton_lock_acquire(l, 0))) {
        fprintf(stderr, "   child (gid %s): %s: %s\n", argv[2], argv[4], baton_error_last()->message);
        return -rc;
    }
    if (!strcmp(argv[5], "hold")) {
        printf("held\n");
        fflush(stdout);
        for (;;) pause();
    }
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* Starts a child; with want_out, its stdout is read until it says "held". */
static pid_t spawn_child(gid_t gid, const char *uri, const char *name, const char *op) {
    char gs[16];
    snprintf(gs, sizeof gs, "%u", (unsigned)gid);
    char *argv[] = { "test_file_dirmode", "child", gs, (char *)uri, (char *)name, (char *)op, NULL };
    int out[2];
    pid_t pid;
    if (pipe2(out, O_CLOEXEC)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    if (rc) {
        close(out[0]);
        return -1;
    }
    if (!strcmp(op, "hold")) {
        char buf[8] = { 0 };
        if (read(out[0], buf, 5) != 5 || strcmp(buf, "held\n")) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            pid = -1;
        }
    }
    close(out[0]);
    return pid;
}

/* The child's code: -(exit status), as a baton code. */
static int child_rc(gid_t gid, const char *uri, const char *name) {
    int st;
    pid_t pid = spawn_child(gid, uri, name, "try");
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 1000;
    return -WEXITSTATUS(st);
}

/* Another user pre-creates and holds a lock file in a group-writable
 * directory: the directory is refused, not used with that user's lock in it. */
static void test_other_user_cannot_plant(void) {
    char d[1200], uri[1300], msg[1024];
    mkdir_mode(d, sizeof d, "attack", 0770);
    CHECK(chown(d, 0, GROUP_IN) == 0);
    snprintf(uri, sizeof uri, "file://%s?shared=group", d);
    /* the other user may use it only as a shared dir (it is not theirs) ... */
    CHECK(chmod(d, 02770) == 0);
    pid_t holder = spawn_child(GROUP_IN, uri, "job", "hold");
    CHECK(holder > 0);
    CHECK(chmod(d, 0770) == 0);
    /* ... and we, without ?shared=group, refuse the directory outright */
    int rc = open_rc(d, "", msg, sizeof msg);
    fprintf(stderr, "   group-writable dir with another user's lock file: %d: %s\n", rc, msg);
    CHECK_RC(rc, BATON_EIO);
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
    }
}

static void test_shared_between_users(void) {
    char d[1200], uri[1300], path[1400];
    mkdir_mode(d, sizeof d, "team", 02770);
    CHECK(chown(d, 0, GROUP_IN) == 0);
    CHECK(chmod(d, 02770) == 0);   /* chown drops setgid */
    snprintf(uri, sizeof uri, "file://%s?shared=group", d);
    baton_client *c = NULL;
    MUST(baton_client_open(&c, uri, NULL));
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, "job", NULL));
    mode_t old = umask(077);
    CHECK_RC(baton_lock_acquire(l, 0), 0);            /* root creates lock.job */
    umask(old);
    CHECK_RC(child_rc(GROUP_IN, uri, "job"), BATON_ELOCKED);   /* a member can open it: held */
    CHECK_RC(baton_lock_release(l), 0);
    CHECK_RC(child_rc(GROUP_IN, uri, "job"), 0);
    /* a file a member creates (under umask 022) is 0660 and in the group: we can use it */
    CHECK_RC(child_rc(GROUP_IN, uri, "job2"), 0);
    struct stat st;
    snprintf(path, sizeof path, "%s/lock.job2", d);
    CHECK(stat(path, &st) == 0);
    CHECK((st.st_mode & 07777) == 0660 && st.st_uid == NOBODY && st.st_gid == GROUP_IN);
    pid_t holder = spawn_child(GROUP_IN, uri, "job2", "hold");
    CHECK(holder > 0);
    baton_lock *l2 = NULL;
    MUST(baton_lock_open(&l2, c, "job2", NULL));
    CHECK_RC(baton_lock_acquire(l2, 0), BATON_ELOCKED);
    if (holder > 0) {
        kill(holder, SIGKILL);
        waitpid(holder, NULL, 0);
    }
    CHECK_RC(baton_lock_acquire(l2, 2000), 0);
    baton_lock_free(l2);
    baton_lock_free(l);
    baton_client_close(c);
    /* someone outside the group is told so, whether the dir keeps them out
     * (2770) or lets them look in (2775) */
    CHECK_RC(child_rc(GROUP_OUT, uri, "job"), BATON_EAUTH);
    CHECK(chmod(d, 02775) == 0);
    CHECK_RC(child_rc(GROUP_OUT, uri, "job"), BATON_EAUTH);
    CHECK_RC(child_rc(GROUP_IN, uri, "job"), 0);
    /* a shared dir owned by neither root nor us is refused (its owner could open it up) */
    char d2[1200], msg[1024];
    mkdir_mode(d2, sizeof d2, "team-nobody", 02770);
    CHECK(chown(d2, NOBODY, GROUP_IN) == 0 && chmod(d2, 02770) == 0);
    int rc = open_rc(d2, "?shared=group", msg, sizeof msg);
    CHECK_RC(rc, BATON_EIO);
    CHECK(strstr(msg, "must belong to root or to you") != NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "child")) return child_main(argc, argv);
    ft_setup("file_dirmode");
    g_root = geteuid() == 0;
    chmod(g_dir, 0711);   /* other users' children must reach the dirs inside */
    RUN(test_private_modes);
    RUN(test_tmp);
    RUN(test_shared_group);
    if (g_root) {
        RUN(test_other_user_cannot_plant);
        RUN(test_shared_between_users);
    } else {
        fprintf(stderr, "-- (not root: the parts with other users are skipped)\n");
    }
    return th_finish();
}
