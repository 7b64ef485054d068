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
    /* socat works off the connections queued in its backlog during the
     * freeze (each a fork) before it forwards a new one: wait until the
     * link answers again, so that what follows tests the client, not the
     * forwarder's backlog on a loaded machine */
    {
        int64_t end = tl_now_ms() + 20000;
        while (tl_sh("redis-cli -p %d PING >/dev/null 2>&1", lport) != 0 && tl_now_ms() < end) tl_sleep_ms(100);
    }
    CHECK_RC(baton_lock_release(hl), 0);
    CHECK_RC(baton_lock_acquire(w, 15000), 0);
    CHECK_RC(baton_lock_release(w), 0);
    baton_lock_free(w);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

/* ---- every call by its deadline (issue 21) ------------------------------------
 * Each call against a frozen peer is timed and must return by its bound:
 *   an acquire: max(its wait deadline, start + io_timeout) (a try: start + io_timeout)
 *   release, info, semaphore/permit/latch calls: start + io_timeout
 *   connect (+ TLS handshake, AUTH): the connect timeout
 * plus SLACK_MS for a loaded machine. The measured numbers go to the log. */
#define SLACK_MS 1500

static int64_t g_t0;

#define MEASURE(what, bound_ms, expr)                                                                      \
    do {                                                                                                   \
        g_t0 = tl_now_ms();                                                                                \
        int rc_ = (expr);                                                                                  \
        int64_t el_ = tl_now_ms() - g_t0;                                                                  \
        fprintf(stderr, "   %-46s rc %d (%s) after %5lld ms, bound %5d ms (%+lld)\n", what, rc_,            \
                baton_strerror(rc_), (long long)el_, (int)(bound_ms), (long long)(el_ - (bound_ms)));        \
        CHECK(rc_ != 0);                                                                                   \
        CHECK(el_ <= (int64_t)(bound_ms) + SLACK_MS);                                                      \
    } while (0)

static int link_start(const char *link, int port)
{
    char cmd[2400], out[64] = "";
    int lport = 0;
    snprintf(cmd, sizeof cmd, "bash %s/link.sh start '%s' %d", TL_SERVERS_DIR, link, port);
    FILE *f = popen(cmd, "r");
    if (f && fgets(out, sizeof out, f)) lport = atoi(out);
    if (f) pclose(f);
    if (lport <= 0) tl_skip("cannot start tests/servers/link.sh (socat missing?)", 1);
    return lport;
}

#define IO_MS 2000
#define WAIT_MS 2100   /* just past the io timeout: an attempt started near it must be cut */

/* Every kind of call of the Redis engine on a frozen link. */
static void test_frozen_calls(const char *dir, int port)
{
    char uri[256], direct[256], link[1200];
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock_options fo = BATON_LOCK_OPTIONS_INIT;
    baton_lock *p = NULL, *hp = NULL, *f = NULL, *hf = NULL, *mine = NULL;
    baton_rwlock *rw = NULL, *hrw = NULL;
    baton_semaphore *s = NULL;
    baton_latch *la = NULL;
    baton_permits *pm = NULL;
    char pid[BATON_PERMIT_ID_SIZE] = "";
    uint64_t n = 0;

    snprintf(link, sizeof link, "%s/link3", dir);
    int lport = link_start(link, port);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", lport);
    snprintf(direct, sizeof direct, "redis://127.0.0.1:%d/0", port);
    co.io_timeout_ms = IO_MS;
    co.connect_timeout_ms = 1000;
    fo.fair = 1;
    MUST(baton_client_open(&h, direct, NULL));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hp, h, "dl/p", NULL));
    MUST(baton_lock_open(&p, c, "dl/p", NULL));
    MUST(baton_lock_open(&hf, h, "dl/f", &fo));
    MUST(baton_lock_open(&f, c, "dl/f", &fo));
    MUST(baton_lock_open(&mine, c, "dl/mine", NULL));
    MUST(baton_rwlock_open(&hrw, h, "dl/rw", NULL));
    MUST(baton_rwlock_open(&rw, c, "dl/rw", NULL));
    MUST(baton_semaphore_open(&s, c, "dl/s"));
    MUST(baton_latch_open(&la, c, "dl/l"));
    MUST(baton_permits_open(&pm, c, "dl/pm"));
    /* held by the other client; each call once through the link while it
     * works (pooled connections, scripts loaded) */
    CHECK_RC(baton_lock_acquire(hp, 0), 0);
    CHECK_RC(baton_lock_acquire(hf, 0), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_read(hrw), 0), 0);
    CHECK_RC(baton_lock_acquire(p, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(f, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(rw), 0), BATON_ELOCKED);
    CHECK_RC(baton_semaphore_acquire(s, 1, 0), BATON_ELOCKED);
    CHECK_RC(baton_latch_try_set(la, 1, NULL), 0);
    CHECK_RC(baton_permits_try_set(pm, 1, NULL), 0);
    CHECK_RC(baton_permits_acquire(pm, 30000, 0, pid), 0);
    CHECK_RC(baton_lock_acquire(mine, 0), 0);

    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    MEASURE("plain try", IO_MS, baton_lock_acquire(p, 0));
    MEASURE("plain wait 2100", WAIT_MS, baton_lock_acquire(p, WAIT_MS));
    MEASURE("fair try", IO_MS, baton_lock_acquire(f, 0));
    MEASURE("fair wait 2100", WAIT_MS, baton_lock_acquire(f, WAIT_MS));
    MEASURE("write wait 2100", WAIT_MS, baton_lock_acquire(baton_rwlock_write(rw), WAIT_MS));
    MEASURE("semaphore wait 2100", WAIT_MS, baton_semaphore_acquire(s, 1, WAIT_MS));
    MEASURE("latch await 2100", WAIT_MS, baton_latch_await(la, WAIT_MS));
    MEASURE("release", IO_MS, baton_lock_release(mine));
    MEASURE("semaphore available", IO_MS, baton_semaphore_available(s, &n));
    MEASURE("permit release", IO_MS, baton_permits_release(pm, pid));
    MEASURE("latch count down", IO_MS, baton_latch_count_down(la));
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    /* the thawed forwarder first works off the connections queued while it
     * was stopped (one process each); give it a moment on a loaded machine */
    tl_sleep_ms(1000);

    /* thawed: everything works again; the holder's locks pass on */
    CHECK_RC(baton_lock_release(hp), 0);
    {
        int rc = baton_lock_acquire(p, 5000);
        if (rc) fprintf(stderr, "   after the thaw: %s\n", tl_lastmsg());
        CHECK_RC(rc, 0);
    }
    CHECK_RC(baton_lock_release(p), 0);
    CHECK_RC(baton_lock_release(hf), 0);
    CHECK_RC(baton_lock_acquire(f, 5000), 0);
    CHECK_RC(baton_lock_release(f), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_read(hrw)), 0);
    CHECK_RC(baton_lock_acquire(baton_rwlock_write(rw), 5000), 0);
    CHECK_RC(baton_lock_release(baton_rwlock_write(rw)), 0);
    baton_lock_free(p);
    baton_lock_free(hp);
    baton_lock_free(f);
    baton_lock_free(hf);
    baton_lock_free(mine);
    baton_rwlock_free(rw);
    baton_rwlock_free(hrw);
    baton_semaphore_free(s);
    baton_latch_free(la);
    baton_permits_free(pm);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

/* Connect, TLS handshake and AUTH to a peer that accepts nothing: the
 * connection completes in the kernel's backlog and then nothing moves. */
static void test_silent_peer(void)
{
    int sport = 0, lfd = ft_listen(&sport);
    char uri[256];
    baton_client *c = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    co.connect_timeout_ms = 1000;
    co.io_timeout_ms = IO_MS;
    snprintf(uri, sizeof uri, "rediss://127.0.0.1:%d/0?insecure=1", sport);
    MEASURE("open: TLS handshake to a silent peer", 1000, baton_client_open(&c, uri, &co));
    if (c) baton_client_close(c), c = NULL;
    snprintf(uri, sizeof uri, "redis://:secret@127.0.0.1:%d/0", sport);
    MEASURE("open: AUTH to a silent peer", 1000, baton_client_open(&c, uri, &co));
    if (c) baton_client_close(c), c = NULL;
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/3", sport);
    MEASURE("open: SELECT to a silent peer", 1000, baton_client_open(&c, uri, &co));
    if (c) baton_client_close(c), c = NULL;
    close(lfd);
}

/* The subscriber on a frozen link: a waiter is granted soon after the link
 * thaws (the unlock message was held back in the link), and it never waits
 * past its deadline while the link is frozen. */
typedef struct {
    baton_lock *l;
    int wait_ms, rc;
    int64_t done_at;
} waiter_arg;

static void *waiter_main(void *p)
{
    waiter_arg *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    __atomic_store_n(&a->done_at, tl_now_ms(), __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_frozen_subscriber(const char *dir, int port)
{
    char uri[256], direct[256], link[1200];
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock *w = NULL, *hl = NULL;
    pthread_t t;

    snprintf(link, sizeof link, "%s/link4", dir);
    int lport = link_start(link, port);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", lport);
    snprintf(direct, sizeof direct, "redis://127.0.0.1:%d/0", port);
    co.io_timeout_ms = IO_MS;
    MUST(baton_client_open(&h, direct, NULL));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hl, h, "dl/sub", NULL));
    MUST(baton_lock_open(&w, c, "dl/sub", NULL));
    CHECK_RC(baton_lock_acquire(hl, 0), 0);

    /* 1: the link thaws before the deadline: granted soon after */
    waiter_arg a = { w, 15000, -1, 0 };
    pthread_create(&t, NULL, waiter_main, &a);
    tl_sleep_ms(500);   /* parked and subscribed */
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    CHECK_RC(baton_lock_release(hl), 0);   /* publishes; the message waits in the link */
    tl_sleep_ms(3000);
    int64_t thaw = tl_now_ms();
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    pthread_join(t, NULL);
    fprintf(stderr, "   waiter granted %lld ms after the link thawed: rc %d\n", (long long)(a.done_at - thaw), a.rc);
    CHECK(a.rc == 0);
    CHECK(a.done_at - thaw < SLACK_MS);
    CHECK_RC(baton_lock_release(w), 0);

    /* 2: the link stays frozen past the deadline: the waiter returns by it */
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    waiter_arg b = { w, 3000, -1, 0 };
    int64_t t0 = tl_now_ms();
    pthread_create(&t, NULL, waiter_main, &b);
    tl_sleep_ms(500);
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    CHECK_RC(baton_lock_release(hl), 0);
    pthread_join(t, NULL);
    fprintf(stderr, "   waiter (3000 ms) on a frozen link returned %d after %lld ms\n", b.rc, (long long)(b.done_at - t0));
    CHECK(b.rc != 0);
    CHECK(b.done_at - t0 <= 3000 + SLACK_MS);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    baton_lock_free(w);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

/* Close while the subscriber thread reconnects into a frozen link: its
 * connect completes in the kernel's backlog and SELECT gets no answer (the
 * connect timeout, 5 s here, would be its bound); close must not wait for it. */
static void test_close_frozen_subscriber(const char *dir, int port)
{
    char uri[256], link[1200];
    baton_client *c = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock *l = NULL;

    snprintf(link, sizeof link, "%s/link6", dir);
    int lport = link_start(link, port);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/3", lport);
    co.io_timeout_ms = IO_MS;
    co.connect_timeout_ms = 5000;
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&l, c, "dl/close", NULL));
    CHECK_RC(baton_lock_acquire(l, 0), 0);   /* a grant starts the subscriber (it watches for drops) */
    CHECK_RC(baton_lock_release(l), 0);
    tl_sleep_ms(300);
    /* cut: the subscriber's connection resets and it reconnects (refused
     * meanwhile); the link comes back frozen, so the reconnect hangs */
    CHECK(tl_sh("bash %s/link.sh cut '%s'", TL_SERVERS_DIR, link) == 0);
    tl_sleep_ms(300);
    CHECK(link_start(link, port) == lport);
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    tl_sleep_ms(1500);   /* the subscriber's backoff is at most 1 s */
    baton_lock_free(l);
    int64_t t0 = tl_now_ms();
    baton_client_close(c);
    int64_t el = tl_now_ms() - t0;
    fprintf(stderr, "   %-46s after %5lld ms, bound %5d ms (%+lld)\n", "close (subscriber reconnecting)", (long long)el,
            IO_MS, (long long)(el - IO_MS));
    CHECK(el <= IO_MS + SLACK_MS);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
}

/* RedLock over 3 nodes, the link to one of them frozen: the other two decide
 * every call, each by its bound. The nodes ask for a password and the
 * connect timeout is longer than the io timeout, so a new connection to the
 * frozen node (its TCP connect completes in the kernel's backlog, AUTH gets
 * no answer) must be cut at the call's bound, not at the connect timeout. */
static void test_redlock_frozen_node(const char *dir)
{
    char d[3][1100], link[1200], uri[512], direct[512];
    int port[3];
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "%s/rl%d", dir, i);
        port[i] = tl_server_start("redis", d[i], "--requirepass rlpass");
    }
    snprintf(link, sizeof link, "%s/link5", dir);
    int lport = link_start(link, port[0]);
    snprintf(uri, sizeof uri, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?connect_timeout_ms=5000", lport,
             port[1], port[2]);
    snprintf(direct, sizeof direct, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", port[0], port[1], port[2]);
    baton_client *c = NULL, *h = NULL;
    baton_client_options co = BATON_CLIENT_OPTIONS_INIT;
    baton_lock_options ro = BATON_LOCK_OPTIONS_INIT;
    baton_lock *x = NULL, *hx = NULL, *y = NULL, *z = NULL;
    baton_client_options ho = BATON_CLIENT_OPTIONS_INIT;
    ho.password = "rlpass";
    co.password = "rlpass";
    co.io_timeout_ms = IO_MS;
    ro.lease_ms = 1500;   /* renewed every 500 ms: renewals run while the node is frozen */
    MUST(baton_client_open(&h, direct, &ho));
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&hx, h, "dl/x", NULL));
    MUST(baton_lock_open(&x, c, "dl/x", NULL));
    MUST(baton_lock_open(&y, c, "dl/y", NULL));
    MUST(baton_lock_open(&z, c, "dl/z", &ro));
    CHECK_RC(baton_lock_acquire(hx, 0), 0);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire(z, 0), 0);
    CHECK(tl_sh("bash %s/link.sh freeze '%s'", TL_SERVERS_DIR, link) == 0);
    MEASURE("redlock wait 2100 (held)", WAIT_MS, baton_lock_acquire(x, WAIT_MS));
    MEASURE("redlock try (held)", IO_MS, baton_lock_acquire(x, 0));
    int64_t t0 = tl_now_ms();
    int rc = baton_lock_acquire(y, 0);
    int64_t el = tl_now_ms() - t0;
    fprintf(stderr, "   %-46s rc %d after %5lld ms\n", "redlock try (free)", rc, (long long)el);
    CHECK(rc == 0);
    CHECK(el <= IO_MS + SLACK_MS);
    t0 = tl_now_ms();
    rc = baton_lock_release(y);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   %-46s rc %d after %5lld ms\n", "redlock release", rc, (long long)el);
    CHECK(rc == 0);
    CHECK(el <= IO_MS + SLACK_MS);
    /* z (lease 1500) was renewed by the two live nodes all along */
    tl_sleep_ms(2500);
    CHECK(baton_lock_held(z) == 1);
    t0 = tl_now_ms();
    rc = baton_lock_release(z);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   %-46s rc %d after %5lld ms\n", "redlock release after renewals", rc, (long long)el);
    CHECK(rc == 0);
    CHECK(el <= IO_MS + SLACK_MS);
    /* close while a connect to the frozen node is still in flight */
    baton_lock_free(x);
    baton_lock_free(y);
    baton_lock_free(z);
    t0 = tl_now_ms();
    baton_client_close(c);
    el = tl_now_ms() - t0;
    fprintf(stderr, "   %-46s after %5lld ms\n", "redlock close", (long long)el);
    CHECK(el <= IO_MS + SLACK_MS);
    CHECK(tl_sh("bash %s/link.sh thaw '%s'", TL_SERVERS_DIR, link) == 0);
    MUST(baton_client_open(&c, uri, &co));
    MUST(baton_lock_open(&x, c, "dl/x", NULL));
    CHECK_RC(baton_lock_release(hx), 0);
    CHECK_RC(baton_lock_acquire(x, 5000), 0);
    CHECK_RC(baton_lock_release(x), 0);
    baton_lock_free(x);
    baton_lock_free(hx);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash %s/link.sh stop '%s'", TL_SERVERS_DIR, link);
    for (int i = 0; i < 3; i++) tl_server_stop("redis", d[i]);
}

int main(void)
{
    const char *dir = ft_dir("deadline");
    int port = tl_server_start("redis", dir, NULL);
    const char *only = getenv("DEADLINE_ONLY");   /* run one case by name (debugging) */
#define CASE(name, call)                                                                                  \
    if (!only || !strcmp(only, #name)) {                                                                  \
        th_current = #name;                                                                              \
        fprintf(stderr, "-- " #name "\n");                                                                \
        call;                                                                                             \
    }
    CASE(test_frozen_link, test_frozen_link(dir, port));
    CASE(test_frozen_waiter, test_frozen_waiter(dir, port));
    CASE(test_frozen_calls, test_frozen_calls(dir, port));
    CASE(test_silent_peer, test_silent_peer());
    CASE(test_frozen_subscriber, test_frozen_subscriber(dir, port));
    CASE(test_close_frozen_subscriber, test_close_frozen_subscriber(dir, port));
    CASE(test_redlock_frozen_node, test_redlock_frozen_node(dir));
    tl_server_stop("redis", dir);
    return th_finish();
}
