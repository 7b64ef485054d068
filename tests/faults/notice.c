/* What real Redis servers do to a holder, and how soon it learns of it:
 *   - restart without persistence: the holder is told LOST as soon as the
 *     client reconnects, not at its next renewal (a lease of 60 s renews
 *     every 20 s; the loss must be reported within a few seconds);
 *   - the replication link cut after the grant (wait_replicas=1): renewals
 *     the replica did not acknowledge do not extend the holder's lease, so
 *     it loses the lock at grant + lease while the master is alive;
 *   - a foreign release that publishes nothing (redis-py, a DEL by hand): a
 *     waiter re-checks on its own within a few seconds, even when the key's
 *     TTL says a minute;
 *   - a multilock over two spellings of one server ("localhost" and
 *     "127.0.0.1") takes its members in one order in every process. */
#include "faults.h"

static int lost_flag;
static int64_t lost_at;
static void on_lost(baton_lock *l, void *p) {
    (void)l; (void)p;
    lost_at = tl_now_ms();
    __atomic_store_n(&lost_flag, 1, __ATOMIC_SEQ_CST);
}

static void test_restart_noticed(void) {
    const char *dir = ft_dir("notice_restart");
    int port = tl_server_start("redis", dir, NULL);
    char uri[256];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?connect_timeout_ms=500&io_timeout_ms=1000", port);
    baton_client *ca = NULL, *cb = NULL;
    CHECK_RC(baton_client_open(&ca, uri, NULL), 0);
    if (!ca) { tl_server_stop("redis", dir); return; }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 60000; /* renewed every 20 s */
    o.on_lost = on_lost;
    __atomic_store_n(&lost_flag, 0, __ATOMIC_SEQ_CST);
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, ca, "job", &o), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    tl_sleep_ms(300); /* the subscriber watches its connection */

    int64_t t0 = tl_now_ms();
    tl_server_restart("redis", dir); /* comes back empty */
    CHECK_RC(baton_client_open(&cb, uri, NULL), 0);
    if (cb) {
        CHECK_RC(baton_lock_open(&b, cb, "job", NULL), 0);
        CHECK_RC(baton_lock_acquire(b, 5000), 0);
    }
    int64_t end = t0 + 8000;
    while (!__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST) && tl_now_ms() < end) tl_sleep_ms(20);
    CHECK(__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST));
    if (lost_flag) fprintf(stderr, "   holder told LOST %lld ms after the restart began\n", (long long)(lost_at - t0));
    CHECK(!baton_lock_held(a));
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    (void)fa;
    if (b) CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(ca);
    baton_client_close(cb);
    tl_server_stop("redis", dir);
}

static void test_renewal_waits_for_replicas(void) {
    const char *md = ft_dir("notice_master"), *rd = ft_dir("notice_replica");
    int mport = tl_server_start("redis", md, NULL);
    char args[128];
    snprintf(args, sizeof args, "--replicaof 127.0.0.1 %d", mport);
    int rport = tl_server_start("redis", rd, args);
    /* wait for the link */
    int64_t end = tl_now_ms() + 10000;
    while (tl_now_ms() < end &&
           tl_sh("redis-cli -p %d INFO replication | grep -q 'master_link_status:up'", rport) != 0)
        tl_sleep_ms(50);
    char uri[256];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?wait_replicas=1&wait_ms=300", mport);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) goto out;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 1500; /* renewed every 500 ms */
    o.on_lost = on_lost;
    __atomic_store_n(&lost_flag, 0, __ATOMIC_SEQ_CST);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "walled", &o), 0);
    int64_t granted = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    /* cut the link: the replica stops acknowledging */
    tl_sh("kill -STOP $(cat '%s/pid')", rd);
    end = granted + 5000;
    while (!__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST) && tl_now_ms() < end) tl_sleep_ms(20);
    CHECK(__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST));
    if (lost_flag) {
        fprintf(stderr, "   lost %lld ms after the grant (lease 1500)\n", (long long)(lost_at - granted));
        CHECK(lost_at - granted <= 1500 + 400);
    }
    CHECK(!baton_lock_held(l));
    tl_sh("kill -CONT $(cat '%s/pid')", rd);
    baton_lock_free(l);
    baton_client_close(c);
out:
    tl_sh("kill -CONT $(cat '%s/pid') 2>/dev/null", rd);
    tl_server_stop("redis", rd);
    tl_server_stop("redis", md);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t at;
} waiter;

static void *wait_main(void *p) {
    waiter *w = p;
    int rc = baton_lock_acquire(w->l, w->wait_ms);
    w->at = tl_now_ms();
    __atomic_store_n(&w->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

static void foreign_release(int port, const char *layout, int rw) {
    char uri[256];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?layout=%s&prefix=fr-%s-", port, layout, layout);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) return;
    char key[64];
    snprintf(key, sizeof key, "fr-%s-%s", layout, rw ? "rw" : "x");
    /* a foreign holder with a minute of TTL left */
    if (!strcmp(layout, "simple"))
        tl_sh("redis-cli -p %d SET '%s' foreign PX 60000 >/dev/null", port, key);
    else if (rw)
        tl_sh("redis-cli -p %d HSET '%s' mode write foreign:1:write 1 >/dev/null && "
              "redis-cli -p %d PEXPIRE '%s' 60000 >/dev/null", port, key, port, key);
    else
        tl_sh("redis-cli -p %d HSET '%s' foreign:1 1 >/dev/null && redis-cli -p %d PEXPIRE '%s' 60000 >/dev/null",
              port, key, port, key);
    baton_lock *l = NULL;
    baton_rwlock *rwl = NULL;
    if (rw) {
        CHECK_RC(baton_rwlock_open(&rwl, c, rw ? "rw" : "x", NULL), 0);
        l = rwl ? baton_rwlock_write(rwl) : NULL;
    } else {
        CHECK_RC(baton_lock_open(&l, c, "x", NULL), 0);
    }
    if (!l) { baton_client_close(c); return; }
    waiter w = { l, 20000, 1, 0 };
    pthread_t t;
    pthread_create(&t, NULL, wait_main, &w);
    tl_sleep_ms(500);
    CHECK(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST) == 1);
    int64_t rel = tl_now_ms();
    tl_sh("redis-cli -p %d DEL '%s' >/dev/null", port, key); /* publishes nothing */
    pthread_join(t, NULL);
    CHECK_RC(w.rc, 0);
    fprintf(stderr, "   %s%s: granted %lld ms after a silent release\n", layout, rw ? " write side" : "",
            (long long)(w.at - rel));
    CHECK(w.at - rel < 5000);
    if (w.rc == 0) CHECK_RC(baton_lock_release(l), 0);
    if (rwl) baton_rwlock_free(rwl);
    else baton_lock_free(l);
    baton_client_close(c);
}

static void test_foreign_release(void) {
    const char *dir = ft_dir("notice_foreign");
    int port = tl_server_start("redis", dir, NULL);
    foreign_release(port, "redisson", 0);
    foreign_release(port, "simple", 0);
    foreign_release(port, "redisson", 1);
    tl_server_stop("redis", dir);
}

/* ---- multilock order across spellings ---- */

typedef struct {
    baton_multilock *m;
    int fails, done;
} ml_arg;

static void *ml_main(void *p) {
    ml_arg *a = p;
    for (int i = 0; i < 150; i++) {
        int rc = baton_multilock_acquire(a->m, 3000);
        if (rc) { a->fails++; continue; }
        baton_multilock_release(a->m);
    }
    a->done = 1;
    return NULL;
}

static void test_multilock_spellings(void) {
    const char *dir = ft_dir("notice_multilock");
    int port = tl_server_start("redis", dir, NULL);
    char u1[128], u2[128];
    snprintf(u1, sizeof u1, "redis://localhost:%d/0", port);
    snprintf(u2, sizeof u2, "redis://127.0.0.1:%d/0", port);
    baton_client *c[4] = { 0 };
    for (int i = 0; i < 4; i++) CHECK_RC(baton_client_open(&c[i], i % 2 ? u2 : u1, NULL), 0);
    if (!c[0] || !c[1] || !c[2] || !c[3]) goto out;
    /* process-like pair 1: x via localhost, y via 127.0.0.1; pair 2 the other way */
    baton_lock *l[4] = { 0 };
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 5000;
    CHECK_RC(baton_lock_open(&l[0], c[0], "ml-x", &o), 0);
    CHECK_RC(baton_lock_open(&l[1], c[1], "ml-y", &o), 0);
    CHECK_RC(baton_lock_open(&l[2], c[3], "ml-x", &o), 0);
    CHECK_RC(baton_lock_open(&l[3], c[2], "ml-y", &o), 0);
    baton_multilock *m1 = NULL, *m2 = NULL;
    CHECK_RC(baton_multilock_open(&m1, l, 2), 0);
    CHECK_RC(baton_multilock_open(&m2, l + 2, 2), 0);
    if (!m1 || !m2) goto out;
    ml_arg a1 = { m1, 0, 0 }, a2 = { m2, 0, 0 };
    pthread_t t1, t2;
    pthread_create(&t1, NULL, ml_main, &a1);
    pthread_create(&t2, NULL, ml_main, &a2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    fprintf(stderr, "   multilock timeouts: %d + %d of 300\n", a1.fails, a2.fails);
    CHECK(a1.fails == 0 && a2.fails == 0);
    baton_multilock_free(m1);
    baton_multilock_free(m2);
    for (int i = 0; i < 4; i++) baton_lock_free(l[i]);
out:
    for (int i = 0; i < 4; i++) baton_client_close(c[i]);
    tl_server_stop("redis", dir);
}

int main(void) {
    RUN(test_restart_noticed);
    RUN(test_renewal_waits_for_replicas);
    RUN(test_foreign_release);
    RUN(test_multilock_spellings);
    return th_finish();
}
