/*
 * Replica acknowledgement (?wait_replicas=N&wait_ms=T): a master and a real
 * replica of its own, started with tests/servers/redis.sh.
 *
 *   test_prims_replicas
 *
 * Enough replicas: grants succeed and are on the replica when acquire
 * returns. Too few (N above the replica count, replica stopped): the acquire
 * fails with BATON_EUNAVAILABLE and leaves nothing behind (lock released,
 * permits returned). A server that rejects WAIT (an ACL user without it):
 * grants succeed, one warning on stderr.
 */
#include "prims.h"

static char g_dir[900];

static int wait_online(int mport, int want) {
    int64_t end = tl_now_ms() + 15000;
    while (tl_now_ms() < end) {
        rcli c;
        if (!rcli_open(&c, mport)) {
            const char *argv[2] = { "INFO", "replication" };
            char *r = rcli_cmd(&c, 2, argv, NULL);
            int n = 0;
            for (char *p = r ? strstr(r, "state=online") : NULL; p; p = strstr(p + 1, "state=online")) n++;
            free(r);
            rcli_close(&c);
            if (n == want) return 0;
        }
        tl_sleep_ms(50);
    }
    return -1;
}

static long long exists_on(int port, const char *key) {
    rcli c;
    if (rcli_open(&c, port)) return -1;
    const char *argv[2] = { "EXISTS", key };
    long long v = rcli_int(&c, 2, argv);
    rcli_close(&c);
    return v;
}

static void uri_with(char *out, size_t n, const char *userinfo, int port, const char *q) {
    snprintf(out, n, "redis://%s127.0.0.1:%d/0%s%s", userinfo, port, q ? "?" : "", q ? q : "");
}

static void test_enough(int mport, int rport) {
    char uri[256], n[256];
    uri_with(uri, sizeof uri, "", mport, "wait_replicas=1&wait_ms=5000");
    baton_client *c = tl_client_open(uri);
    lname(n, sizeof n, "ok-lock");
    baton_lock *l = lock_on(c, n, NULL);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(baton_lock_fence(l) > 0);
    CHECK(exists_on(rport, n) == 1); /* acknowledged: already on the replica */
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    /* a fair lock and both sides of a read-write lock */
    baton_lock_options fo = BATON_LOCK_OPTIONS_INIT;
    fo.fair = 1;
    lname(n, sizeof n, "ok-fair");
    l = lock_on(c, n, &fo);
    CHECK_RC(baton_lock_acquire(l, 1000), 0);
    CHECK(exists_on(rport, n) == 1);
    baton_lock_free(l);
    lname(n, sizeof n, "ok-rw");
    baton_rwlock *rw = NULL;
    CHECK_RC(baton_rwlock_open(&rw, c, n, NULL), 0);
    if (rw) {
        CHECK_RC(baton_lock_acquire(baton_rwlock_write(rw), 0), 0);
        CHECK_RC(baton_lock_acquire(baton_rwlock_read(rw), 0), 0);
        baton_rwlock_free(rw);
    }
    /* a semaphore and a permit */
    lname(n, sizeof n, "ok-sem");
    baton_semaphore *s = NULL;
    CHECK_RC(baton_semaphore_open(&s, c, n), 0);
    int set;
    CHECK_RC(baton_semaphore_try_set(s, 2, &set), 0);
    CHECK_RC(baton_semaphore_acquire(s, 1, 0), 0);
    baton_semaphore_free(s);
    lname(n, sizeof n, "ok-permits");
    baton_permits *p = NULL;
    CHECK_RC(baton_permits_open(&p, c, n), 0);
    CHECK_RC(baton_permits_try_set(p, 1, &set), 0);
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), 0);
    CHECK_RC(baton_permits_release(p, id), 0);
    baton_permits_free(p);
    baton_client_close(c);
}

/* Too few replicas: every grant is undone. */
static void too_few(const char *uri, int mport, const char *tag) {
    char n[256], plain[256];
    uri_with(plain, sizeof plain, "", mport, NULL);
    baton_client *c = tl_client_open(uri), *o = tl_client_open(plain);
    snprintf(n, sizeof n, "%sfew-lock-%s", g_prefix, tag);
    baton_lock *l = lock_on(c, n, NULL), *x = lock_on(o, n, NULL);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EUNAVAILABLE);
    const char *m = baton_error_last()->message;
    CHECK(m && strstr(m, "replicas"));
    fprintf(stderr, "   %s: %s (%lld ms)\n", tag, m ? m : "", (long long)(tl_now_ms() - t0));
    CHECK(baton_lock_held(l) == 0);
    CHECK_RC(baton_lock_acquire(x, 0), 0); /* nothing left behind */
    CHECK_RC(baton_lock_release(x), 0);
    /* a waiting acquire fails too (it is not retried until the deadline) */
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 20000), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 10000);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    CHECK_RC(baton_lock_release(x), 0);
    baton_lock_free(l);
    baton_lock_free(x);

    baton_lock_options fo = BATON_LOCK_OPTIONS_INIT;
    fo.fair = 1;
    snprintf(n, sizeof n, "%sfew-fair-%s", g_prefix, tag);
    l = lock_on(c, n, &fo);
    x = lock_on(o, n, &fo);
    CHECK_RC(baton_lock_acquire(l, 500), BATON_EUNAVAILABLE);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    baton_lock_free(l);
    baton_lock_free(x);

    snprintf(n, sizeof n, "%sfew-rw-%s", g_prefix, tag);
    baton_rwlock *rw = NULL, *rx = NULL;
    CHECK_RC(baton_rwlock_open(&rw, c, n, NULL), 0);
    CHECK_RC(baton_rwlock_open(&rx, o, n, NULL), 0);
    if (rw && rx) {
        CHECK_RC(baton_lock_acquire(baton_rwlock_read(rw), 0), BATON_EUNAVAILABLE);
        CHECK_RC(baton_lock_acquire(baton_rwlock_write(rw), 0), BATON_EUNAVAILABLE);
        CHECK_RC(baton_lock_acquire(baton_rwlock_write(rx), 0), 0);
    }
    baton_rwlock_free(rw);
    baton_rwlock_free(rx);

    snprintf(n, sizeof n, "%sfew-sem-%s", g_prefix, tag);
    baton_semaphore *s = NULL, *so = NULL;
    CHECK_RC(baton_semaphore_open(&s, c, n), 0);
    CHECK_RC(baton_semaphore_open(&so, o, n), 0);
    int set;
    CHECK_RC(baton_semaphore_try_set(so, 2, &set), 0);
    CHECK_RC(baton_semaphore_acquire(s, 2, 0), BATON_EUNAVAILABLE);
    uint64_t av = 0;
    CHECK_RC(baton_semaphore_available(so, &av), 0);
    CHECK(av == 2);
    baton_semaphore_free(s);
    baton_semaphore_free(so);

    snprintf(n, sizeof n, "%sfew-permits-%s", g_prefix, tag);
    baton_permits *p = NULL, *po = NULL;
    CHECK_RC(baton_permits_open(&p, c, n), 0);
    CHECK_RC(baton_permits_open(&po, o, n), 0);
    CHECK_RC(baton_permits_try_set(po, 1, &set), 0);
    char id[BATON_PERMIT_ID_SIZE];
    CHECK_RC(baton_permits_acquire(p, 10000, 0, id), BATON_EUNAVAILABLE);
    CHECK_RC(baton_permits_available(po, &av), 0);
    CHECK(av == 1);
    baton_permits_free(p);
    baton_permits_free(po);
    baton_client_close(c);
    baton_client_close(o);
}

/* An ACL user without WAIT: grants succeed; one warning, through the log
 * callback (the library never writes to stderr itself). */
static int g_warnings;
static void count_log(int level, const char *msg, void *p) {
    (void)p;
    fprintf(stderr, "   log(%d): %s\n", level, msg);
    if (level == BATON_LOG_WARN && strstr(msg, "WAIT")) g_warnings++;
}

static void test_rejected(int mport) {
    rcli r;
    CHECK(rcli_open(&r, mport) == 0);
    const char *argv[] = { "ACL", "SETUSER", "nowait", "on", ">nowait-pw", "~*", "&*", "+@all", "-wait" };
    char *rep = rcli_cmd(&r, 9, argv, NULL);
    CHECK(rep && !strncmp(rep, "+OK", 3));
    free(rep);
    rcli_close(&r);
    char uri[256], n[256];
    uri_with(uri, sizeof uri, "nowait:nowait-pw@", mport, "wait_replicas=1&wait_ms=300");
    g_warnings = 0;
    baton_log_set(count_log, NULL);
    baton_client *c = tl_client_open(uri);
    lname(n, sizeof n, "rejected");
    baton_lock *l = lock_on(c, n, NULL);
    int rc1 = baton_lock_acquire(l, 0), rc2 = -99, rc3 = -99;
    if (!rc1) rc2 = baton_lock_release(l);
    if (!rc2) rc3 = baton_lock_acquire(l, 0);
    baton_lock_free(l);
    baton_client_close(c);
    baton_log_set(NULL, NULL);
    CHECK_RC(rc1, 0);
    CHECK_RC(rc2, 0);
    CHECK_RC(rc3, 0);
    CHECK(g_warnings == 1);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/prims_replicas", tt && *tt ? tt : "/tmp");
    snprintf(g_tmp, sizeof g_tmp, "%s", g_dir);
    tl_mkdirs(g_dir);
    char md[1000], rd[1000], args[64];
    snprintf(md, sizeof md, "%s/master", g_dir);
    snprintf(rd, sizeof rd, "%s/replica", g_dir);
    tl_server("redis", "stop", rd, NULL, 1);
    tl_server("redis", "stop", md, NULL, 1);
    int mport = tl_server("redis", "start", md, NULL, 1);
    snprintf(args, sizeof args, "--replicaof 127.0.0.1 %d", mport);
    int rport = tl_server("redis", "start", rd, args, 1);
    snprintf(g_prefix, sizeof g_prefix, "replicas/%ld/", (long)getpid());
    th_current = "setup";
    CHECK(wait_online(mport, 1) == 0);

    char uri[256];
    baton_client *c = NULL;
    uri_with(uri, sizeof uri, "", mport, "wait_replicas=x");
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EINVAL);
    uri_with(uri, sizeof uri, "", mport, "wait_replicas=1&wait_ms=0");
    CHECK_RC(baton_client_open(&c, uri, NULL), BATON_EINVAL);

    th_current = "enough replicas";
    fprintf(stderr, "-- %s\n", th_current);
    test_enough(mport, rport);
    th_current = "too few replicas";
    fprintf(stderr, "-- %s\n", th_current);
    uri_with(uri, sizeof uri, "", mport, "wait_replicas=2&wait_ms=200");
    too_few(uri, mport, "2-of-1");
    th_current = "replica stopped";
    fprintf(stderr, "-- %s\n", th_current);
    tl_server("redis", "stop", rd, NULL, 1);
    CHECK(wait_online(mport, 0) == 0);
    uri_with(uri, sizeof uri, "", mport, "wait_replicas=1&wait_ms=200");
    too_few(uri, mport, "replica-down");
    th_current = "WAIT rejected";
    fprintf(stderr, "-- %s\n", th_current);
    test_rejected(mport);
    tl_server("redis", "stop", md, NULL, 1);
    return th_finish();
}
