/* The core's loss path on a real Redis (a key deleted under its holder is a
 * loss the next renewal finds):
 *   - on_lost may release, re-acquire or free its own lock, and close its
 *     client, without hanging the keeper: the client's other locks are
 *     still renewed afterwards;
 *   - a reentrant lock reports its loss at every level: a nested acquire
 *     answers BATON_ELOST instead of taking a new grant, and every release
 *     down to the outermost answers BATON_ELOST;
 *   - a nested acquire after the lease ran out (fixed lease) answers
 *     BATON_ELOST too. */
#include "faults.h"

static char uri[512];
static int port;

static void redis_del(const char *key) {
    if (tl_sh("redis-cli -p %d DEL '%s' >/dev/null", port, key) != 0) {
        fprintf(stderr, "FAIL: redis-cli DEL %s\n", key);
        exit(1);
    }
}

static int wait_flag(int *flag, int ms) {
    int64_t end = tl_now_ms() + ms;
    while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST) && tl_now_ms() < end) tl_sleep_ms(10);
    return __atomic_load_n(flag, __ATOMIC_SEQ_CST);
}

/* ---- on_lost that touches its own lock ---- */

static int cb_done, cb_release_rc = 1, cb_acquire_rc = 1;

static void cb_release_reacquire(baton_lock *l, void *p) {
    (void)p;
    cb_release_rc = baton_lock_release(l);
    cb_acquire_rc = baton_lock_acquire(l, 0);
    __atomic_store_n(&cb_done, 1, __ATOMIC_SEQ_CST);
}

static int free_done;
static void cb_free(baton_lock *l, void *p) {
    (void)p;
    baton_lock_free(l);
    __atomic_store_n(&free_done, 1, __ATOMIC_SEQ_CST);
}

static int close_done;
static void cb_close(baton_lock *l, void *p) {
    baton_client_close(p);
    /* the handle outlives its client until freed, also from its own on_lost */
    int rc = baton_lock_release(l);
    baton_lock_free(l);
    __atomic_store_n(&close_done, rc == BATON_ECANCELED ? 1 : -1, __ATOMIC_SEQ_CST);
}

static void test_callbacks(void) {
    baton_client *c = NULL, *c2 = NULL;
    CHECK_RC(baton_client_open(&c, uri, NULL), 0);
    CHECK_RC(baton_client_open(&c2, uri, NULL), 0);
    if (!c || !c2) return;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 600;
    baton_lock *keep = NULL, *a = NULL, *f = NULL, *d = NULL;
    CHECK_RC(baton_lock_open(&keep, c, "onlost-keep", &o), 0);
    o.on_lost = cb_release_reacquire;
    CHECK_RC(baton_lock_open(&a, c, "onlost-a", &o), 0);
    o.on_lost = cb_free;
    CHECK_RC(baton_lock_open(&f, c, "onlost-f", &o), 0);
    o.on_lost = cb_close;
    o.on_lost_payload = c2;
    CHECK_RC(baton_lock_open(&d, c2, "onlost-d", &o), 0);
    CHECK_RC(baton_lock_acquire(keep, 0), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_acquire(f, 0), 0);
    CHECK_RC(baton_lock_acquire(d, 0), 0);
    uint64_t fa = baton_lock_fence(a);

    /* release + re-acquire from on_lost */
    redis_del("onlost-a");
    CHECK(wait_flag(&cb_done, 3000));
    CHECK_RC(cb_release_rc, BATON_ELOST);
    CHECK_RC(cb_acquire_rc, 0);
    CHECK(baton_lock_held(a));
    CHECK(baton_lock_fence(a) > fa);

    /* free from on_lost */
    redis_del("onlost-f");
    CHECK(wait_flag(&free_done, 3000));

    /* client close from on_lost (c2's keeper thread closes c2) */
    redis_del("onlost-d");
    CHECK(wait_flag(&close_done, 3000));
    CHECK(__atomic_load_n(&close_done, __ATOMIC_SEQ_CST) == 1);

    /* The keeper of c is alive: the other locks go on being renewed well
     * past their 600 ms lease. */
    tl_sleep_ms(2000);
    CHECK(baton_lock_held(keep));
    CHECK(baton_lock_held(a));
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_release(keep), 0);
    baton_lock_free(a);
    baton_lock_free(keep);
    baton_client_close(c); /* must not block */
}

/* ---- a reentrant lock's loss is seen at every level ---- */

static int lost_flag;
static void on_lost(baton_lock *l, void *p) { (void)l; (void)p; __atomic_store_n(&lost_flag, 1, __ATOMIC_SEQ_CST); }

static void test_reentrant(void) {
    baton_client *ca = NULL, *cb = NULL;
    CHECK_RC(baton_client_open(&ca, uri, NULL), 0);
    CHECK_RC(baton_client_open(&cb, uri, NULL), 0);
    if (!ca || !cb) return;
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 600;
    o.reentrant = 1;
    o.on_lost = on_lost;
    baton_lock *a = NULL, *b = NULL;
    CHECK_RC(baton_lock_open(&a, ca, "reent", &o), 0);
    CHECK_RC(baton_lock_open(&b, cb, "reent", NULL), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0); /* depth 2 */
    uint64_t fa = baton_lock_fence(a);

    redis_del("reent");
    CHECK_RC(baton_lock_acquire(b, 0), 0); /* another client holds it now */
    uint64_t fb = baton_lock_fence(b);
    CHECK(fb > fa);
    CHECK(wait_flag(&lost_flag, 3000));

    /* a nested acquire must not take a new grant */
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOST);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);   /* depth 2 -> 1 */
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOST); /* still inside the outer section */
    CHECK_RC(baton_lock_release(a), BATON_ELOST);   /* the outermost */
    CHECK(baton_lock_held(b));
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOCKED); /* afresh: b holds it */
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK(baton_lock_fence(a) > fb);
    CHECK_RC(baton_lock_release(a), 0);

    /* a fixed lease that ran out: the keeper may not have said so yet,
     * but a nested acquire answers BATON_ELOST */
    baton_lock *x = NULL;
    baton_lock_options fo = BATON_LOCK_OPTIONS_INIT;
    fo.lease_ms = 300;
    fo.fixed_lease = 1;
    fo.reentrant = 1;
    CHECK_RC(baton_lock_open(&x, ca, "reent-fixed", &fo), 0);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    tl_sleep_ms(450);
    CHECK(!baton_lock_held(x));
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOST);
    CHECK_RC(baton_lock_release(x), BATON_ELOST);

    baton_lock_free(x);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(ca);
    baton_client_close(cb);
}

int main(void) {
    const char *dir = ft_dir("onlost");
    port = tl_server_start("redis", dir, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", port);
    RUN(test_callbacks);
    RUN(test_reentrant);
    tl_server_stop("redis", dir);
    return th_finish();
}
