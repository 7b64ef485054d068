/*
 * SQLite engine faults, against real database files in $BATON_TEST_TMP/sqlite_faults:
 *   - a holder killed with SIGKILL: another process gets the lock once the
 *     lease ends, with a higher fence;
 *   - a holder stopped with SIGSTOP past its lease: another process gets it
 *     (higher fence); the resumed holder is told LOST and its release is
 *     BATON_ELOST;
 *   - a waiter in another process is woken by a release through the sidecar
 *     file, not by its re-check (set to 10 minutes) nor the holder's lease;
 *     also when the sidecar was deleted meanwhile; an unusable sidecar only
 *     slows the waiter down to its re-check;
 *   - a database locked by a long foreign write transaction: bounded calls
 *     come back (timeout or "locked"), never hang;
 *   - a row from another boot is expired whatever its lease_until says;
 *   - bad input: missing directory, not a database, wrong-shaped tables,
 *     malformed URIs and options, mode=row; a read-only file and
 *     directory (as nobody, through setpriv, when run as root).
 *
 * Worker modes (re-executing /proc/self/exe):
 *   test_sqlite_faults --hold URI NAME LEASE_MS     holds NAME; "held FENCE";
 *       on "check": waits (at most 10 s) to be told LOST, then releases;
 *       prints "lost L held H release RC"
 *   test_sqlite_faults --wait URI NAME WAIT_MS      "waiting", then acquires;
 *       prints "got RC FENCE"
 */
#include <baton.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_dir[1024];
static char g_db[1200];       /* the shared database of the lock cases */
static char g_uri[1300];

/* ---- workers --------------------------------------------------------------- */

static int worker_hold(const char *uri, const char *name, int lease_ms) {
    baton_client *c = tl_client_open(uri);
    baton_lock *l = NULL;
    atomic_int lost = 0;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = (uint32_t)lease_ms;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    if (baton_lock_open(&l, c, name, &o) || baton_lock_acquire(l, 10000)) {
        tl_out_line("error %s\n", tl_lastmsg());
        return 1;
    }
    tl_out_line("held %llu\n", (unsigned long long)baton_lock_fence(l));
    tl_wait_for_line("check");
    for (int i = 0; i < 1000 && (baton_lock_held(l) || !atomic_load(&lost)); i++) tl_sleep_ms(10);
    int held = baton_lock_held(l);
    int rc = baton_lock_release(l);
    tl_out_line("lost %d held %d release %d\n", atomic_load(&lost), held, rc);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

static int worker_wait(const char *uri, const char *name, int wait_ms) {
    baton_client *c = tl_client_open(uri);
    baton_lock *l = NULL;
    if (baton_lock_open(&l, c, name, NULL)) return 1;
    tl_out_line("waiting\n");
    int rc = baton_lock_acquire(l, wait_ms);
    tl_out_line("got %d %llu\n", rc, (unsigned long long)baton_lock_fence(l));
    if (rc == 0) baton_lock_release(l);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

static int spawn(tl_worker *w, const char *mode, const char *uri, const char *name, int ms) {
    char msbuf[16];
    snprintf(msbuf, sizeof msbuf, "%d", ms);
    char *argv[] = { "test_sqlite_faults", (char *)mode, (char *)uri, (char *)name, msbuf, NULL };
    return tl_worker_spawn(w, argv);
}

/* ---- a killed holder --------------------------------------------------------- */

static void test_sigkill_holder(void) {
    tl_worker w;
    char line[256];
    unsigned long long f1 = 0;
    if (spawn(&w, "--hold", g_uri, "kill9", 1500)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "held ", line, sizeof line, 20000) == 0);
    sscanf(line, "held %llu", &f1);
    CHECK(f1 > 0);
    kill(w.pid, SIGKILL);
    tl_worker_reap(&w, 10000);

    baton_client *c = tl_client_open(g_uri);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "kill9", NULL), 0);
    /* the dead holder's lease still runs: nobody freed the row */
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(l, 20000), 0);   /* within the lease (1.5 s) plus slack */
    CHECK(baton_lock_fence(l) > f1);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

/* ---- a stopped holder -------------------------------------------------------- */

static void test_sigstop_holder(void) {
    tl_worker w;
    char line[256];
    unsigned long long f1 = 0;
    int lost = -1, held = -1, rel = 0;
    if (spawn(&w, "--hold", g_uri, "stop", 1500)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "held ", line, sizeof line, 20000) == 0);
    sscanf(line, "held %llu", &f1);
    kill(w.pid, SIGSTOP);

    baton_client *c = tl_client_open(g_uri);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "stop", NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(l, 20000), 0);   /* the stopped holder cannot renew */
    CHECK(baton_lock_fence(l) > f1);

    kill(w.pid, SIGCONT);
    tl_send_line(&w, "check\n");
    CHECK(tl_expect_line(&w, "lost ", line, sizeof line, 20000) == 0);
    sscanf(line, "lost %d held %d release %d", &lost, &held, &rel);
    CHECK(lost == 1);
    CHECK(held == 0);
    CHECK_RC(rel, BATON_ELOST);
    CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));

    /* the new holder was not disturbed by the old one's release */
    CHECK(baton_lock_held(l));
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

/* ---- the wake-up ------------------------------------------------------------- */

/* The waiter re-checks every 10 minutes (recheck_ms) and the holder's lease
 * is 90 s (renewed): without the release's wake-up, it would claim again
 * only at the end of its 40 s wait (it does claim once more then, and would
 * get the lock 38 s after the release). With it, it gets the lock within
 * milliseconds; the bound below is 20 s, far from both. DELETE_SIDECAR: the
 * sidecar is removed while the waiter waits (its watcher must set up a new
 * one). */
static void wake_case(const char *name, int delete_sidecar) {
    char uri[1400], line[256], side[1300];
    int rc = -100;
    unsigned long long fence = 0;
    tl_worker w;
    snprintf(uri, sizeof uri, "%s?recheck_ms=600000", g_uri);
    snprintf(side, sizeof side, "%s-baton-wake", g_db);

    baton_client *c = tl_client_open(g_uri);
    baton_lock *l = NULL;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 90000;
    CHECK_RC(baton_lock_open(&l, c, name, &o), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    if (spawn(&w, "--wait", uri, name, 40000)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "waiting", line, sizeof line, 20000) == 0);
    /* let it claim, find the lock held and park (if it is slower than this,
     * it finds the lock free later and the case proves less, never fails) */
    tl_sleep_ms(1500);
    if (delete_sidecar) {
        CHECK(unlink(side) == 0);
        tl_sleep_ms(300);
    }
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(l), 0);
    CHECK(tl_expect_line(&w, "got ", line, sizeof line, 60000) == 0);
    int64_t el = tl_now_ms() - t0;
    sscanf(line, "got %d %llu", &rc, &fence);
    CHECK_RC(rc, 0);
    CHECK(fence > 0);
    CHECK(el < 20000);   /* woken by the release, not by the end of its wait (see above) */
    fprintf(stderr, "   woken %lld ms after the release\n", (long long)el);
    CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));
    baton_lock_free(l);
    baton_client_close(c);
}

/* A sidecar nobody can use (a directory in its place): releases cannot
 * signal, so a waiter in another process gets the lock by its re-check
 * (default 1 s) instead; nothing fails or hangs. */
static void test_unusable_sidecar(void) {
    char db[1300], side[1400], uri[1400], line[256];
    int rc = -100;
    unsigned long long fence = 0;
    tl_worker w;
    snprintf(db, sizeof db, "%s/nowake.db", g_dir);
    snprintf(side, sizeof side, "%s-baton-wake", db);
    snprintf(uri, sizeof uri, "sqlite://%s", db);
    CHECK(mkdir(side, 0755) == 0);
    baton_client *c = tl_client_open(uri);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "nowake", NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    if (spawn(&w, "--wait", uri, "nowake", 30000)) {
        CHECK(!"spawn");
        return;
    }
    CHECK(tl_expect_line(&w, "waiting", line, sizeof line, 20000) == 0);
    tl_sleep_ms(500);
    CHECK_RC(baton_lock_release(l), 0);
    CHECK(tl_expect_line(&w, "got ", line, sizeof line, 40000) == 0);
    sscanf(line, "got %d %llu", &rc, &fence);
    CHECK_RC(rc, 0);
    CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));
    {
        struct stat sb;
        CHECK(stat(side, &sb) == 0 && S_ISDIR(sb.st_mode));   /* left alone */
    }
    baton_lock_free(l);
    baton_client_close(c);
}

static void test_release_wakes_other_process(void) { wake_case("wake", 0); }
static void test_wake_after_sidecar_deleted(void) { wake_case("wake-del", 1); }

/* ---- a foreign write transaction -------------------------------------------- */

static void test_foreign_write_lock(void) {
    char uri[1400];
    sqlite3 *db = NULL;
    snprintf(uri, sizeof uri, "%s?busy_timeout_ms=300", g_uri);
    baton_client *c = tl_client_open(uri);
    baton_lock *l = NULL;
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_lock_open(&l, c, "foreign", NULL), 0);

    CHECK(sqlite3_open(g_db, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL) == SQLITE_OK);

    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 800), BATON_ETIMEDOUT);
    CHECK(strstr(tl_lastmsg(), "locked") != NULL);
    CHECK(tl_now_ms() - t0 < 10000);   /* bounded: 0.8 s asked, 10 s allows a loaded machine */
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EUNAVAILABLE);   /* a try waits busy_timeout_ms */
    CHECK(tl_now_ms() - t0 < 10000);
    /* WAL: readers do not wait for the writer, and a new client only reads */
    CHECK_RC(baton_lock_info(c, "foreign", &info), 0);
    CHECK(!info.held);
    {
        baton_client *c2 = NULL;
        t0 = tl_now_ms();
        CHECK_RC(baton_client_open(&c2, uri, NULL), 0);
        CHECK(tl_now_ms() - t0 < 10000);
        if (c2) baton_client_close(c2);
    }
    CHECK(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_RC(baton_lock_acquire(l, 5000), 0);
    CHECK_RC(baton_lock_release(l), 0);
    sqlite3_close(db);
    baton_lock_free(l);
    baton_client_close(c);
}

/* ---- another boot ----------------------------------------------------------- */

static void test_row_of_another_boot(void) {
    sqlite3 *db = NULL;
    baton_client *c = tl_client_open(g_uri);   /* creates the table */
    baton_lock *l = NULL;
    CHECK(sqlite3_open(g_db, &db) == SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    /* a lease "held" until far in the future, written in another boot */
    CHECK(sqlite3_exec(db, "INSERT OR REPLACE INTO baton_locks (name, fence, owner, holder, lease_until, boot, "
                       "acquired_at) VALUES ('oldboot', 41, 'ffffffffffffffffffffffffffffffff', 'gone 1 1', "
                       "9000000000000, '00000000-0000-0000-0000-000000000000', 0)", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_RC(baton_lock_open(&l, c, "oldboot", NULL), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    /* above the row's fence, and at least the wall clock in us (2001 on) */
    CHECK(baton_lock_fence(l) > 1000000000000000ull);
    CHECK_RC(baton_lock_release(l), 0);
    /* a stored fence above the clock: the next is exactly one more */
    CHECK(sqlite3_exec(db, "UPDATE baton_locks SET fence = 5000000000000000 WHERE name = 'oldboot'", NULL, NULL,
                       NULL) == SQLITE_OK);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(baton_lock_fence(l) == 5000000000000001ull);
    uint64_t f42 = baton_lock_fence(l);
    CHECK_RC(baton_lock_release(l), 0);
    /* the same row in this boot is held */
    {
        char boot[64] = "";
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (f) {
            if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
            fclose(f);
        }
        boot[strcspn(boot, "\n")] = 0;
        char sql[512];
        snprintf(sql, sizeof sql, "UPDATE baton_locks SET owner = 'ffffffffffffffffffffffffffffffff', "
                 "lease_until = 9000000000000, boot = '%s' WHERE name = 'oldboot'", boot);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    }
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    baton_lockinfo info = BATON_LOCK_INFO_INIT;
    CHECK_RC(baton_lock_info(c, "oldboot", &info), 0);
    CHECK(info.held && info.fence == f42 && info.remaining_ms > 0);
    sqlite3_close(db);
    baton_lock_free(l);
    baton_client_close(c);
}

/* ---- bad input -------------------------------------------------------------- */

static void expect_open(const char *uri, int want, const char *needle) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    CHECK_RC(rc, want);
    if (rc != want) fprintf(stderr, "   %s: %s\n", uri, tl_lastmsg());
    if (rc) {
        CHECK(c == NULL);
        CHECK(baton_error_last()->code == rc && *tl_lastmsg());
        if (needle && !strstr(tl_lastmsg(), needle)) {
            CHECK(!"message names the problem");
            fprintf(stderr, "   %s: \"%s\" lacks \"%s\"\n", uri, tl_lastmsg(), needle);
        }
    }
    if (c) baton_client_close(c);
}

/* expect_open, as ourselves, or as nobody when we are root (a worker run
 * through setpriv; it prints the code and the message). */
static void expect_open_as_user(const char *uri, int want, const char *needle) {
    if (geteuid() != 0) {
        expect_open(uri, want, needle);
        return;
    }
    char self[1024], cmd[3000], line[1024] = "";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || access("/usr/bin/setpriv", X_OK) != 0) {
        fprintf(stderr, "   (permission case skipped: root without setpriv)\n");
        return;
    }
    self[n] = 0;
    snprintf(cmd, sizeof cmd, "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups '%s' --open '%s'", self,
             uri);
    FILE *f = popen(cmd, "r");
    if (!f || !fgets(line, sizeof line, f)) line[0] = 0;
    if (f) pclose(f);
    int rc = 1;
    CHECK(sscanf(line, "%d", &rc) == 1);
    CHECK_RC(rc, want);
    if (rc != want || (needle && !strstr(line, needle))) {
        CHECK(!"message names the problem");
        fprintf(stderr, "   %s as nobody: %s\n", uri, line);
    }
}

static void make_db(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    unlink(path);
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
}

static void test_bad_input(void) {
    char u[1400], p[1300];
    snprintf(u, sizeof u, "sqlite://%s/no/such/dir/x.db", g_dir);
    expect_open(u, BATON_EUNAVAILABLE, "no/such/dir");

    snprintf(p, sizeof p, "%s/notadb.db", g_dir);
    {
        FILE *f = fopen(p, "w");
        for (int i = 0; f && i < 200; i++) fputs("this is not a database, just text\n", f);
        if (f) fclose(f);
    }
    snprintf(u, sizeof u, "sqlite://%s", p);
    expect_open(u, BATON_EPROTO, "not a usable SQLite database");

    snprintf(u, sizeof u, "sqlite://%s", g_dir);
    expect_open(u, BATON_EUNAVAILABLE, "directory");

    snprintf(p, sizeof p, "%s/shape1.db", g_dir);
    make_db(p, "CREATE TABLE baton_locks (name TEXT PRIMARY KEY, fence TEXT, owner TEXT, holder TEXT, "
               "lease_until INTEGER, boot TEXT, acquired_at INTEGER)");
    snprintf(u, sizeof u, "sqlite://%s", p);
    expect_open(u, BATON_EPROTO, "\"fence\"");
    snprintf(p, sizeof p, "%s/shape2.db", g_dir);
    make_db(p, "CREATE TABLE locks2 (name TEXT PRIMARY KEY, fence INTEGER, owner TEXT, holder TEXT, "
               "lease_until INTEGER, acquired_at INTEGER)");
    snprintf(u, sizeof u, "sqlite://%s?table=locks2", p);
    expect_open(u, BATON_EPROTO, "\"boot\"");
    snprintf(p, sizeof p, "%s/shape3.db", g_dir);
    make_db(p, "CREATE TABLE baton_locks (name TEXT, fence INTEGER, owner TEXT, holder TEXT, "
               "lease_until INTEGER, boot TEXT, acquired_at INTEGER)");
    snprintf(u, sizeof u, "sqlite://%s", p);
    expect_open(u, BATON_EPROTO, "primary key");
    /* another table in the same file is fine: ours is created beside it */
    snprintf(u, sizeof u, "sqlite://%s?table=mine", p);
    expect_open(u, 0, NULL);

    snprintf(u, sizeof u, "sqlite://%s?mode=row", g_db);
    expect_open(u, BATON_ENOTSUP, "lease mode only");
    snprintf(u, sizeof u, "sqlite://%s?mode=session", g_db);
    expect_open(u, BATON_ENOTSUP, "lease mode only");
    snprintf(u, sizeof u, "sqlite://%s?mode=bogus", g_db);
    expect_open(u, BATON_EINVAL, "mode");
    snprintf(u, sizeof u, "sqlite://%s?mode=lease", g_db);
    expect_open(u, 0, NULL);
    snprintf(u, sizeof u, "sqlite://localhost%s", g_db);
    expect_open(u, 0, NULL);
    snprintf(u, sizeof u, "sqlite://%s?nosuch=1", g_db);
    expect_open(u, BATON_EINVAL, "nosuch");
    snprintf(u, sizeof u, "sqlite://%s?busy_timeout_ms=abc", g_db);
    expect_open(u, BATON_EINVAL, "busy_timeout_ms");
    snprintf(u, sizeof u, "sqlite://%s?recheck_ms=0", g_db);
    expect_open(u, BATON_EINVAL, "recheck_ms");
    snprintf(u, sizeof u, "sqlite://%s?table=bad-name", g_db);
    expect_open(u, BATON_EINVAL, "table");
    snprintf(u, sizeof u, "sqlite://otherhost%s", g_db);
    expect_open(u, BATON_EINVAL, "one host");
    snprintf(u, sizeof u, "sqlite://user@localhost%s", g_db);
    expect_open(u, BATON_EINVAL, NULL);
    expect_open("sqlite://", BATON_EINVAL, NULL);
    expect_open("sqlite:///", BATON_EINVAL, NULL);
    expect_open("sqlite://relative.db", BATON_EINVAL, NULL);
    snprintf(u, sizeof u, "sqlite://%s/", g_dir);
    expect_open(u, BATON_EINVAL, NULL);

    /* permissions: a file we may read but not write, a directory we may
     * not create in. Root writes everything: as root, the opens run in a
     * worker as nobody (setpriv), on files root owns. */
    snprintf(p, sizeof p, "%s/ro.db", g_dir);
    make_db(p, "CREATE TABLE t (x)");
    chmod(p, 0444);
    snprintf(u, sizeof u, "sqlite://%s", p);
    expect_open_as_user(u, BATON_EAUTH, "ro.db");
    snprintf(p, sizeof p, "%s/rodir", g_dir);
    mkdir(p, 0555);
    chmod(p, 0555);
    snprintf(u, sizeof u, "sqlite://%s/x.db", p);
    expect_open_as_user(u, BATON_EAUTH, "rodir");
}

/* The identity is the resolved file: two spellings of one file are one
 * engine (a multilock orders by it). */
static void test_identity(void) {
    char u[1400];
    baton_client *a = tl_client_open(g_uri);
    snprintf(u, sizeof u, "sqlite://localhost%s/../%s", g_dir, strrchr(g_dir, '/') + 1);
    strncat(u, "/locks.db", sizeof u - strlen(u) - 1);
    baton_client *b = tl_client_open(u);
    baton_lock *la = NULL, *lb = NULL;
    CHECK_RC(baton_lock_open(&la, a, "ident", NULL), 0);
    CHECK_RC(baton_lock_open(&lb, b, "ident", NULL), 0);
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    CHECK_RC(baton_lock_acquire(lb, 0), BATON_ELOCKED);   /* the same file */
    CHECK_RC(baton_lock_release(la), 0);
    baton_lock_free(la);
    baton_lock_free(lb);
    baton_client_close(a);
    baton_client_close(b);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--hold")) return worker_hold(argv[2], argv[3], atoi(argv[4]));
    if (argc == 5 && !strcmp(argv[1], "--wait")) return worker_wait(argv[2], argv[3], atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "--open")) {
        baton_client *c = NULL;
        int rc = baton_client_open(&c, argv[2], NULL);
        printf("%d %s\n", rc, rc ? tl_lastmsg() : "");
        if (c) baton_client_close(c);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/sqlite_faults", tmp && *tmp ? tmp : "/tmp");
    tl_sh("rm -rf '%s'", g_dir);
    tl_mkdirs(g_dir);
    chmod(g_dir, 0755);   /* the permission cases run as nobody when we are root */
    if (g_dir[0] != '/') {
        fprintf(stderr, "BATON_TEST_TMP must be absolute\n");
        return 1;
    }
    snprintf(g_db, sizeof g_db, "%s/locks.db", g_dir);
    snprintf(g_uri, sizeof g_uri, "sqlite://%s", g_db);

    RUN(test_sigkill_holder);
    RUN(test_sigstop_holder);
    RUN(test_release_wakes_other_process);
    RUN(test_wake_after_sidecar_deleted);
    RUN(test_unusable_sidecar);
    RUN(test_foreign_write_lock);
    RUN(test_row_of_another_boot);
    RUN(test_bad_input);
    RUN(test_identity);
    return th_finish();
}
