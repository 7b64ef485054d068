/* The lease deadline is a timer, not the end of an I/O call (issue 21): with
 * the link to Redis frozen (sockets open, nothing moves), a lock whose
 * renewal is due is declared lost at its own deadline even while another
 * lock's renewal of the same client is blocked on the frozen link, and
 * neither renewal waits on the other.
 *
 *   A: lease 8 s, renewed every 1 s: its renewal (bounded by A's deadline,
 *      8 s out) blocks from t = 1 s.
 *   B: lease 3 s, renewed only at 2.9 s: due while A's renewal still blocks.
 * A keeper that renews in turn reports B lost when A's renewal gives up
 * (about t = 8 s); B's deadline is t = 3 s. */
#include "faults.h"

static int64_t t_acq;
static int64_t lost_at[2];

static void on_lost(baton_lock *l, void *p)
{
    (void)l;
    __atomic_store_n(&lost_at[(intptr_t)p], tl_now_ms(), __ATOMIC_SEQ_CST);
}

static void test_frozen_link(const char *dir, int port)
{
    char uri[256], link[1200], out[64] = "";
    baton_client *c = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock *a = NULL, *b = NULL;
    baton_lock_options oa = BATON_LOCK_OPTIONS_INIT, ob = BATON_LOCK_OPTIONS_INIT;
    FILE *f;
    int lport = 0;

    snprintf(link, sizeof link, "%s/link", dir);
    {
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "bash %s/link.sh start '%s' %d", TL_SERVERS_DIR, link, port);
        f = popen(cmd, "r");
        if (f && fgets(out, sizeof out, f)) lport = atoi(out);
        if (f) pclose(f);
    }
    if (lport <= 0) tl_skip("cannot start tests/servers/link.sh (socat missing?)", 1);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", lport);
    co.io_timeout_ms = 60000;   /* the engine's own timeout is not what ends the lease */
    MUST(baton_client_open(&c, uri, &co));
    oa.lease_ms = 8000;
    oa.renew_ms = 1000;
    oa.on_lost = on_lost;
    oa.on_lost_payload = (void *)(intptr_t)0;
    ob.lease_ms = 3000;
    ob.renew_ms = 2900;
    ob.on_lost = on_lost;
    ob.on_lost_payload = (void *)(intptr_t)1;
    MUST(baton_lock_open(&a, c, "deadline/a", &oa));
    MUST(baton_lock_open(&b, c, "deadline/b", &ob));
    t_acq = tl_now_ms();
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);

    /* B is lost by its deadline (3 s after it was sent, minus the margin),
     * with a generous allowance for a loaded machine, and long before A's
     * blocked renewal (8 s) could have let a keeper that renews in turn go
     * on to B. */
    int64_t end = t_acq + 7000;
    while (!__atomic_load_n(&lost_at[1], __ATOMIC_SEQ_CST) && tl_now_ms() < end) tl_sleep_ms(10);
    int64_t lb = __atomic_load_n(&lost_at[1], __ATOMIC_SEQ_CST);
    fprintf(stderr, "B lost %lld ms after its grant (lease 3000)\n", lb ? (long long)(lb - t_acq) : -1LL);
    CHECK(lb != 0);
    CHECK(lb == 0 || lb - t_acq < 4500);
    CHECK(baton_lock_held(b) == 0);
    /* A still counts as held until its own deadline. */
    CHECK(baton_lock_held(a) == 1);
    end = t_acq + 12000;
    while (!__atomic_load_n(&lost_at[0], __ATOMIC_SEQ_CST) && tl_now_ms() < end) tl_sleep_ms(10);
    int64_t la = __atomic_load_n(&lost_at[0], __ATOMIC_SEQ_CST);
    fprintf(stderr, "A lost %lld ms after its grant (lease 8000)\n", la ? (long long)(la - t_acq) : -1LL);
    CHECK(la != 0 && la - t_acq >= 7000);
    CHECK(baton_lock_held(a) == 0);

    /* Thawed: the releases answer ELOST (the grants were given up), and
     * close does not hang. */
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK_RC(baton_lock_release(b), BATON_ELOST);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

/* A waiter whose link freezes returns at its wait deadline, not when the
 * link thaws; so does a try, and a release, within the client's io timeout. */
static void test_frozen_waiter(const char *dir, int port)
{
    char uri[256], direct[256], link[1200], out[64] = "";
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock *w = NULL, *hl = NULL;
    FILE *f;
    int lport = 0;

    snprintf(link, sizeof link, "%s/link2", dir);
    {
        char cmd[2400];
        snprintf(cmd, sizeof cmd, "bash %s/link.sh start '%s' %d", TL_SERVERS_DIR, link, port);
        f = popen(cmd, "r");
        if (f && fgets(out, sizeof out, f)) lport = atoi(out);
        if (f) pclose(f);
    }
    if (lport <= 0) tl_skip("cannot start tests/servers/link.sh (socat missing?)", 1);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", lport);
    snprintf(direct, sizeof direct, "redis://127.0.0.1:%d/0", port);
    co.io_timeout_ms = 2000;
    MUST(baton_client_open(&h, direct, NULL));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hl, h, "deadline/w", NULL));
    MUST(baton_lock_open(&w, c, "deadline/w", NULL));
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    CHECK_RC(baton_lock_acquire(w, 0), BATON_ELOCKED);   /* the link works, and the connection is pooled */
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    int64_t t0 = tl_now_ms();
    int rc = baton_lock_acquire(w, 3000);
    int64_t el = tl_now_ms() - t0;
    fprintf(stderr, "a 3000 ms wait on a frozen link returned %d (%s) after %lld ms\n", rc, baton_strerror(rc),
            (long long)el);
    CHECK(rc != 0);
    CHECK(el < 3000 + 2500);   /* the wait's deadline, or the io timeout of the call in flight */
    t0 = tl_now_ms();
    rc = baton_lock_acquire(w, 0);
    el = tl_now_ms() - t0;
    fprintf(stderr, "a try on a frozen link returned %d (%s) after %lld ms\n", rc, baton_strerror(rc), (long long)el);
    CHECK(rc != 0);
    CHECK(el < 2000 + 2500);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    CHECK_RC(baton_lock_release(hl), 0);
    CHECK_RC(baton_lock_acquire(w, 5000), 0);
    CHECK_RC(baton_lock_release(w), 0);
    baton_lock_free(w);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

int main(void)
{
    const char *dir = ft_dir("deadline");
    int port = tl_server_start("redis", dir, NULL);
    th_current = "test_frozen_link";
    fprintf(stderr, "-- test_frozen_link\n");
    test_frozen_link(dir, port);
    th_current = "test_frozen_waiter";
    fprintf(stderr, "-- test_frozen_waiter\n");
    test_frozen_waiter(dir, port);
    tl_server_stop("redis", dir);
    return th_finish();
}
