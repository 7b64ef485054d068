/* Redis restarted while a client waits: the waiter reconnects (pool and
 * subscriber) and still gets the lock.
 *   - with persistence (AOF): the holder's lock survives the restart; the
 *     holder releases afterwards and the waiter is woken and granted with a
 *     higher fence;
 *   - without persistence: the lock vanishes with the restart; the waiter is
 *     granted soon after the server is back, and the old holder's renewal
 *     reports the lock lost. */
#include "faults.h"

static char uri[512];

typedef struct {
    const char *uri;
    int64_t wait_ms;
    int rc;
    uint64_t fence;
    int64_t granted_at;
    baton_lock *l;
    baton_client *c;
} waiter_arg;

static void *waiter_main(void *p) {
    waiter_arg *a = p;
    int rc = baton_lock_acquire(a->l, a->wait_ms);
    a->granted_at = tl_now_ms();
    if (rc == 0) a->fence = baton_lock_fence(a->l);
    __atomic_store_n(&a->rc, rc, __ATOMIC_SEQ_CST);
    return NULL;
}

static int lost_flag;
static void on_lost(baton_lock *l, void *p) { (void)l; (void)p; __atomic_store_n(&lost_flag, 1, __ATOMIC_SEQ_CST); }

static void run(const char *dir, int persistent, const char *layout) {
    int port = tl_server_start("redis", dir, persistent ? "--appendonly yes --appendfsync always" : NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0?layout=%s&connect_timeout_ms=500&io_timeout_ms=1000", port, layout);

    baton_client *ca = NULL, *cb = NULL;
    CHECK_RC(baton_client_open(&ca, uri, NULL), 0);
    CHECK_RC(baton_client_open(&cb, uri, NULL), 0);
    if (!ca || !cb) { tl_server_stop("redis", dir); return; }

    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 3000;
    o.on_lost = on_lost;
    __atomic_store_n(&lost_flag, 0, __ATOMIC_SEQ_CST);
    baton_lock *la = NULL, *lb = NULL;
    CHECK_RC(baton_lock_open(&la, ca, "restart", &o), 0);
    baton_lock_options ob = BATON_LOCK_OPTIONS_INIT;
    CHECK_RC(baton_lock_open(&lb, cb, "restart", &ob), 0);
    CHECK_RC(baton_lock_acquire(la, 0), 0);
    uint64_t fa = baton_lock_fence(la);
    CHECK(fa > 0);

    waiter_arg w = { uri, 20000, 1, 0, 0, lb, cb };
    pthread_t t;
    pthread_create(&t, NULL, waiter_main, &w);
    tl_sleep_ms(300);
    CHECK(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST) == 1); /* still waiting */

    int64_t t0 = tl_now_ms();
    CHECK(tl_server_restart("redis", dir) == port);
    int64_t back = tl_now_ms();
    fprintf(stderr, "   restart took %lld ms\n", (long long)(back - t0));

    if (persistent) {
        tl_sleep_ms(500);
        CHECK(__atomic_load_n(&w.rc, __ATOMIC_SEQ_CST) == 1); /* the lock survived: still waiting */
        int64_t rel = tl_now_ms();
        CHECK_RC(baton_lock_release(la), 0);
        pthread_join(t, NULL);
        CHECK_RC(w.rc, 0);
        CHECK(w.fence > fa);
        fprintf(stderr, "   release -> grant after restart: %lld ms\n", (long long)(w.granted_at - rel));
        CHECK(w.granted_at - rel < 2000);
    } else {
        pthread_join(t, NULL);
        CHECK_RC(w.rc, 0);
        fprintf(stderr, "   server back -> grant: %lld ms\n", (long long)(w.granted_at - back));
        CHECK(w.granted_at - back < 3000);
        /* The old holder's renewal finds the lock gone: it is reported lost. */
        int64_t until = tl_now_ms() + 5000;
        while (!__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST) && tl_now_ms() < until) tl_sleep_ms(20);
        CHECK(__atomic_load_n(&lost_flag, __ATOMIC_SEQ_CST) == 1);
        CHECK(baton_lock_held(la) == 0);
        CHECK_RC(baton_lock_release(la), BATON_ELOST);
    }
    CHECK(baton_lock_held(lb) == 1);
    CHECK_RC(baton_lock_release(lb), 0);

    baton_lock_free(la);
    baton_lock_free(lb);
    baton_client_close(ca);
    baton_client_close(cb);
    tl_server_stop("redis", dir);
}

static void test_restart_persistent_redisson(void) { run(ft_dir("restart_aof"), 1, "redisson"); }
static void test_restart_persistent_simple(void) { run(ft_dir("restart_aof_simple"), 1, "simple"); }
static void test_restart_volatile_redisson(void) { run(ft_dir("restart_mem"), 0, "redisson"); }

/* A server that goes away while nobody waits: the next call fails cleanly,
 * and the one after the server is back works again (reconnect on next use). */
static void test_reconnect_on_next_use(void) {
    const char *dir = ft_dir("reconnect");
    int port = tl_server_start("redis", dir, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d?connect_timeout_ms=500&io_timeout_ms=1000", port);
    baton_client *c = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    if (!c) { tl_server_stop("redis", dir); return; }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, "reconnect", &o), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);
    tl_server_stop("redis", dir);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(l, 0), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 2000);
    CHECK(baton_error_last()->native != 0);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    info.version = BATON_LOCK_INFO_VERSION;
    CHECK_RC(baton_lock_info(c, "reconnect", &info), BATON_EUNAVAILABLE);
    CHECK(tl_server_restart("redis", dir) == port);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
    tl_server_stop("redis", dir);
}

int main(void) {
    RUN(test_restart_persistent_redisson);
    RUN(test_restart_persistent_simple);
    RUN(test_restart_volatile_redisson);
    RUN(test_reconnect_on_next_use);
    return th_finish();
}
