/*
 * The fair lock suite (baton_lock_options.fair = 1):
 *
 *   test_prims_fair URI          FIFO order, no barging, timeouts and cancels
 *                                leave the queue, a SIGKILLed waiter or holder
 *                                does not stall it, exclusion under N processes
 *   test_prims_fair --herd       Redis only, on a server of its own: the number
 *                                of server commands per handoff is the same with
 *                                1, 16 and 128 waiters, and at most 6 (INFO
 *                                commandstats)
 *
 * "{port}" in URI is the port of its engine's test server. An engine without fair
 * locks (BATON_ENOTSUP at open) is a skip.
 */
#include "prims.h"

static baton_lock_options fair_opts(uint32_t lease_ms) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    if (lease_ms) o.lease_ms = lease_ms;
    return o;
}

/* A client of its own for queue probes (baton_lock_info), kept open: a
 * probe every 5 ms must not cost a connection each. */
static baton_client *g_probe;
static void probe_close(void) {
    if (g_probe) baton_client_close(g_probe);
    g_probe = NULL;
}

/* How many waiters the engine has queued for NAME: on Redis LLEN of
 * Redisson's queue list; elsewhere baton_lock_info's queue_length; -1 when
 * the engine does not say. */
static long queued(int port, const char *name) {
    if (!port) {
        if (!g_probe) {
            if (baton_client_open(&g_probe, g_uri, NULL)) return -1;
            atexit(probe_close);
        }
        baton_lockinfo li = BATON_LOCK_INFO_INIT;
        if (baton_lock_info(g_probe, name, &li)) return -1;
        return li.queue_length >= 0 ? (long)li.queue_length : -1;
    }
    rcli c;
    if (rcli_open(&c, port)) return -1;
    char key[1200];
    snprintf(key, sizeof key, strchr(name, '{') ? "redisson_lock_queue:%s" : "redisson_lock_queue:{%s}", name);
    const char *argv[2] = { "LLEN", key };
    long long v = rcli_int(&c, 2, argv);
    rcli_close(&c);
    return (long)v;
}

/* etcd's key is per client (its lease, as etcd's concurrency.Mutex): a
 * client's second waiter on a name queues inside the client, behind its
 * first, where another client's probe cannot see it. */
static int local_queue(void) { return !strcmp(g_backend, "etcd"); }

/* Waits until N waiters are queued, or a fixed pause where the engine
 * cannot say. */
static void wait_queued(int port, const char *name, long n) {
    if (queued(port, name) < 0) {
        tl_sleep_ms(250);
        return;
    }
    /* a waiter queued inside its client is never counted: a second is enough */
    int64_t end = tl_now_ms() + (local_queue() ? 1000 : 10000);
    while (queued(port, name) != n && tl_now_ms() < end) tl_sleep_ms(5);
    if (queued(port, name) != n && !local_queue())
        fprintf(stderr, "   queue of %s never reached %ld (%ld)\n", name, n, queued(port, name));
}

/* ---- workers ------------------------------------------------------------------ */

/* Prints WAITING, waits for the fair lock forever, prints GOT <fence>, then
 * holds it until stdin says RELEASE (or EOF). */
static int worker_wait(const char *uri, const char *name, uint32_t lease) {
    baton_client *c = tl_client_open(uri);
    baton_lock_options o = fair_opts(lease);
    baton_lock *l = lock_on(c, name, &o);
    tl_out_line("WAITING\n");
    int rc = baton_lock_acquire(l, -1);
    if (rc) {
        tl_out_line("ERR %d\n", rc);
        return 2;
    }
    tl_out_line("GOT %llu\n", (unsigned long long)baton_lock_fence(l));
    tl_wait_for_line("RELEASE");
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* M times: fair lock, non-atomic read-modify-write of FILE, unlock. */
static int worker_incr(const char *uri, const char *name, const char *file, int m) {
    baton_client *c = tl_client_open(uri);
    baton_lock_options o = fair_opts(0);
    baton_lock *l = lock_on(c, name, &o);
    int fd = open(file, O_RDWR | O_CLOEXEC), bad = 0;
    if (fd < 0) return 2;
    for (int i = 0; i < m && !bad; i++) {
        int rc = baton_lock_acquire(l, 60000);
        if (rc) {
            fprintf(stderr, "worker: acquire %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
            break;
        }
        char buf[32] = { 0 };
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        long v = r > 0 ? strtol(buf, NULL, 10) : 0;
        usleep(200);
        int len = snprintf(buf, sizeof buf, "%ld\n", v + 1);
        if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
        if (baton_lock_release(l)) bad = 1;
    }
    close(fd);
    baton_lock_free(l);
    baton_client_close(c);
    return bad;
}

/* ---- cases ----------------------------------------------------------------------- */

static void test_basic(void) {
    char n[256];
    lname(n, sizeof n, "basic");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    CHECK(f1 > 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 300), BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 250);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_release(a), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(b, 0), 0); /* the timed-out wait left no queue entry behind */
    CHECK(baton_lock_fence(b) > f1);
    baton_lockinfo info;
    memset(&info, 0, sizeof info);
    CHECK_RC(baton_lock_info(c1, n, &info), 0);
    CHECK(info.held == 1 && info.fence == baton_lock_fence(b));
    CHECK_RC(baton_lock_release(b), 0);

    /* reentrancy works for fair locks too */
    baton_lock_options ro = fair_opts(0);
    ro.reentrant = 1;
    baton_lock *r = lock_on(c1, n, &ro);
    CHECK_RC(baton_lock_acquire(r, 0), 0);
    CHECK_RC(baton_lock_acquire(r, 1000), 0);
    CHECK_RC(baton_lock_release(r), 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(r), 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK_RC(baton_lock_release(b), 0);

    /* owner checks: a fixed lease runs out, the next owner's lock is never
     * touched by the stale holder (engines with leases; the file engine's
     * locks last until released or their holder dies) */
    const baton_engine_info *ei = baton_engine_find(g_backend);
    if (!ei || !(ei->features & BATON_FEATURE_LEASE)) {
        baton_lock_free(r);
        baton_lock_free(a);
        baton_lock_free(b);
        baton_client_close(c1);
        baton_client_close(c2);
        return;
    }
    baton_lock_options fo = fair_opts(300);
    fo.fixed_lease = 1;
    baton_lock *s = NULL;
    int frc = baton_lock_open(&s, c1, n, &fo);
    if (frc == BATON_ENOTSUP) {
        /* an engine mode whose locks live as long as their connection (MySQL session/row) */
        fprintf(stderr, "   fixed leases: skipped (%s)\n", baton_error_last()->message);
        goto no_fixed;
    }
    CHECK_RC(frc, 0);
    CHECK_RC(baton_lock_acquire(s, 0), 0);
    uint64_t fs = baton_lock_fence(s);
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 5000), 0); /* queued, granted when the lease ran out */
    CHECK(tl_now_ms() - t0 >= 200 && tl_now_ms() - t0 < 3000);
    CHECK(baton_lock_fence(b) > fs);
    CHECK_RC(baton_lock_release(s), BATON_ELOST);
    CHECK(baton_lock_held(b) == 1);
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(b), 0);
no_fixed:
    baton_lock_free(s);
    baton_lock_free(r);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define FIFO_N 6

static void test_fifo_order(void) {
    char n[256];
    lname(n, sizeof n, "fifo");
    /* on etcd a client of its own per waiter, so the probe sees each one queue */
    baton_client *h = client(), *c[FIFO_N];
    int nc = local_queue() ? FIFO_N : 2;
    for (int i = 0; i < nc; i++) c[i] = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *hl = lock_on(h, n, &o), *w[FIFO_N];
    acq_thread t[FIFO_N];
    atomic_int ctr;
    atomic_init(&ctr, 0);
    CHECK_RC(baton_lock_acquire(hl, 0), 0);
    for (int i = 0; i < FIFO_N; i++) {
        w[i] = lock_on(c[i % nc], n, &o);
        acq_start_ex(&t[i], w[i], 30000, 0, 20, &ctr);
        wait_queued(g_redis_port, n, i + 1);
    }
    CHECK(!atomic_load(&t[0].done));
    CHECK_RC(baton_lock_release(hl), 0);
    int bad = 0;
    for (int i = 0; i < FIFO_N; i++) {
        CHECK(acq_wait(&t[i], 20000));
        acq_join(&t[i]);
        CHECK_RC(t[i].rc, 0);
        if (t[i].order != i + 1) bad++;
        fprintf(stderr, "   waiter %d (queued %d.) was granted %d.\n", i + 1, i + 1, t[i].order);
    }
    CHECK(bad == 0);
    /* fences follow the grant order */
    for (int i = 1; i < FIFO_N; i++) CHECK(t[i].fence > t[i - 1].fence);
    for (int i = 0; i < FIFO_N; i++) baton_lock_free(w[i]);
    baton_lock_free(hl);
    baton_client_close(h);
    for (int i = 0; i < nc; i++) baton_client_close(c[i]);
}

/* A try never jumps the queue: right after a release the lock belongs to the
 * queued waiter, even if the lock is momentarily free. */
static void test_no_barging(void) {
    char n[256];
    lname(n, sizeof n, "barge");
    baton_client *c1 = client(), *c2 = client(), *c3 = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o), *x = lock_on(c3, n, &o);
    int barged = 0;
    for (int round = 0; round < 5; round++) {
        CHECK_RC(baton_lock_acquire(a, 0), 0);
        acq_thread t;
        acq_start(&t, b, 10000);
        wait_queued(g_redis_port, n, 1);
        CHECK_RC(baton_lock_release(a), 0);
        int rc = baton_lock_acquire(x, 0);
        if (rc == 0) {
            barged++;
            baton_lock_release(x);
        }
        CHECK(acq_wait(&t, 10000));
        acq_join(&t);
        CHECK_RC(t.rc, 0);
    }
    CHECK(barged == 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* Waiters that time out or are cancelled leave the queue at once: the next
 * waiter is granted promptly, not after their queue leases. */
static void test_leave_queue(void) {
    char n[256];
    lname(n, sizeof n, "leave");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(30000);
    baton_lock *a = lock_on(c1, n, &o), *t1 = lock_on(c2, n, &o), *t2 = lock_on(c2, n, &o), *t3 = lock_on(c1, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    /* t1 times out (queued first) */
    CHECK_RC(baton_lock_acquire(t1, 300), BATON_ETIMEDOUT);
    CHECK(queued(g_redis_port, n) <= 0);
    /* t2 queues, then is cancelled */
    acq_thread c;
    acq_start(&c, t2, 30000);
    wait_queued(g_redis_port, n, 1);
    CHECK_RC(baton_lock_cancel(t2), 0);
    CHECK(acq_wait(&c, 5000));
    acq_join(&c);
    CHECK_RC(c.rc, BATON_ECANCELED);
    CHECK(queued(g_redis_port, n) <= 0);
    /* t3 queues behind nothing stale: granted as soon as a releases */
    acq_thread w;
    acq_start(&w, t3, 30000);
    wait_queued(g_redis_port, n, 1);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&w, 10000));
    CHECK(w.t_done - t0 < 1500);
    acq_join(&w);
    CHECK_RC(w.rc, 0);
    /* a head that gives up passes its place on */
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq_thread w1, w2;
    acq_start(&w1, t1, 700);
    wait_queued(g_redis_port, n, 1);
    acq_start(&w2, t3, 30000);
    wait_queued(g_redis_port, n, 2);
    CHECK(acq_wait(&w1, 5000));
    CHECK_RC(w1.rc, BATON_ETIMEDOUT);
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&w2, 10000));
    CHECK(w2.t_done - t0 < 1500);
    acq_join(&w1);
    acq_join(&w2);
    CHECK_RC(w2.rc, 0);
    baton_lock_free(a);
    baton_lock_free(t1);
    baton_lock_free(t2);
    baton_lock_free(t3);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A waiter SIGKILLed while queued (ahead of another) does not stall the
 * queue for longer than its queue lease. */
static void test_killed_waiter(void) {
    char n[256];
    lname(n, sizeof n, "killed");
    const uint32_t lease = 1000;
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    tl_worker w;
    char ls[16], line[128];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_fair", "--worker", "wait", g_uri, n, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    wait_queued(g_redis_port, n, 1);
    acq_thread t;
    acq_start(&t, b, 20000);
    wait_queued(g_redis_port, n, 2);
    kill(w.pid, SIGKILL);
    int st = tl_worker_reap(&w, 10000);
    CHECK(WIFSIGNALED(st));
    /* the release signals the dead head; b must not wait for more than the
     * dead entry's lease */
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&t, 15000));
    int64_t el = t.t_done - t0;
    /* (on a session engine the dead waiter's entry goes with its session) */
    fprintf(stderr, "   granted %lld ms after the release (dead waiter's queue lease %u ms)\n", (long long)el,
            expire_ms(lease));
    CHECK(el < expire_ms(lease) + 2500);
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(queued(g_redis_port, n) <= 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* The holder (another process) is SIGKILLed with two waiters in line: the
 * first in line gets the lock (when the engine learns of the death: at once
 * where the kernel frees, at the end of the lease elsewhere), with a larger
 * fence, and the second waits until the first lets go: never two holders. */
static void test_killed_holder(void) {
    char n[256], line[128];
    lname(n, sizeof n, "killedh");
    const uint32_t lease = 1000;
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(lease);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o);
    tl_worker w;
    char ls[16];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_fair", "--worker", "wait", g_uri, n, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    CHECK(tl_expect_line(&w, "GOT", line, sizeof line, 15000) == 0);
    uint64_t fw = strtoull(line + 4, NULL, 10);
    atomic_int ctr;
    atomic_init(&ctr, 0);
    acq_thread ta, tb;
    acq_start_ex(&ta, a, 20000, 1, 0, &ctr);
    wait_queued(g_redis_port, n, 1);
    acq_start_ex(&tb, b, 20000, 1, 0, &ctr);
    wait_queued(g_redis_port, n, 2);
    CHECK(!atomic_load(&ta.done) && !atomic_load(&tb.done));
    kill(w.pid, SIGKILL);
    int st = tl_worker_reap(&w, 10000);
    CHECK(WIFSIGNALED(st));
    CHECK(acq_wait(&ta, 15000));
    CHECK_RC(ta.rc, 0);
    CHECK(ta.order == 1);
    CHECK(ta.fence > fw);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&tb.done)); /* the second in line still waits: one holder */
    CHECK(baton_lock_held(a) == 1);
    atomic_store(&ta.release_now, 1);
    CHECK(acq_wait(&tb, 15000));
    CHECK_RC(tb.rc, 0);
    CHECK(tb.order == 2);
    CHECK(tb.fence > ta.fence);
    acq_join(&ta);
    acq_join(&tb);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Redis: a Redisson fair-lock waiter (a queue entry without baton's ticket)
 * at the head is not handed the lock by a baton release: the lock is freed,
 * the entry stays at the head and gets "0" on its channel, and a baton waiter
 * behind it waits until the Redisson side has had its turn. */
static void test_redisson_entry(void) {
    if (!g_redis_port) return;
    char n[256], q[400], to[400], chan[500];
    lname(n, sizeof n, "rsn");
    snprintf(q, sizeof q, "redisson_lock_queue:{%s}", n);
    snprintf(to, sizeof to, "redisson_lock_timeout:{%s}", n);
    const char *rf = "0b0c0d0e-aaaa-bbbb-cccc-000000000001:7";
    snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}:%s", n, rf);
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    free(redis_raw(g_redis_port, "RPUSH", q, rf, NULL));
    free(redis_raw(g_redis_port, "ZADD", to, "99999999999999", rf, NULL));
    acq_thread t;
    acq_start(&t, b, 20000);
    wait_queued(g_redis_port, n, 2);
    rcli sub;
    CHECK(rcli_open(&sub, g_redis_port) == 0);
    const char *sa[2] = { "SUBSCRIBE", chan };
    free(rcli_cmd(&sub, 2, sa, NULL));
    CHECK_RC(baton_lock_release(a), 0);
    /* the Redisson waiter is told, the lock is free, it is still the head */
    char *msg = rcli_cmd(&sub, 0, NULL, NULL);
    CHECK(msg && strstr(msg, "message") && strstr(msg, "$1\r\n0"));
    free(msg);
    rcli_close(&sub);
    char *ex = redis_raw(g_redis_port, "EXISTS", n, NULL);
    CHECK(ex && !strncmp(ex, ":0", 2));
    free(ex);
    char *hd = redis_raw(g_redis_port, "LINDEX", q, "0", NULL);
    CHECK(hd && strstr(hd, rf));
    free(hd);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    /* Redisson's script takes it and later releases it, waking the next */
    free(redis_raw(g_redis_port, "LPOP", q, NULL));
    free(redis_raw(g_redis_port, "ZREM", to, rf, NULL));
    free(redis_raw(g_redis_port, "HSET", n, rf, "1", NULL));
    free(redis_raw(g_redis_port, "DEL", n, NULL));
    /* Redisson's unlock publishes 0 on "<prefix>:<head entry>" */
    char bch[1000], head[600];
    char *next = redis_raw(g_redis_port, "LINDEX", q, "0", NULL);
    CHECK(next != NULL);
    head[0] = 0;
    if (next) {
        char *nl = strstr(next, "\r\n"), *end = nl ? strstr(nl + 2, "\r\n") : NULL;
        if (nl && end) snprintf(head, sizeof head, "%.*s", (int)(end - nl - 2), nl + 2);
    }
    free(next);
    CHECK(strchr(head, '|') != NULL);
    snprintf(bch, sizeof bch, "redisson_lock__channel:{%s}:%s", n, head);
    int64_t tp = tl_now_ms();
    free(redis_raw(g_redis_port, "PUBLISH", bch, "0", NULL));
    CHECK(acq_wait(&t, 10000));
    /* woken by that message, not by its refresh (lease/3 = 10 s) */
    CHECK(t.t_done - tp < 3000);
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Redis: a waiter's channel stays subscribed a few seconds after its wait
 * (so a thread that waits again soon needs no SUBSCRIBE), then the client
 * unsubscribes it on its own, while the client stays open. */
static void test_subscription_lingers(void) {
    if (!g_redis_port) return;
    char n[256];
    lname(n, sizeof n, "linger");
    /* earlier cases' subscriptions linger too: start from none */
    for (int64_t t0 = tl_now_ms(); tl_now_ms() - t0 < 15000; tl_sleep_ms(200)) {
        char *z = redis_raw(g_redis_port, "PUBSUB", "NUMPAT", NULL);
        long np = z && z[0] == ':' ? atol(z + 1) : -1;
        free(z);
        if (np == 0) break;
    }
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq_thread t;
    acq_start(&t, b, 10000);
    wait_queued(g_redis_port, n, 1);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&t, 10000));
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    long subs = -1;
    char *r = redis_raw(g_redis_port, "PUBSUB", "NUMPAT", NULL);
    subs = r && r[0] == ':' ? atol(r + 1) : -1;
    free(r);
    CHECK(subs == 1);
    int64_t t0 = tl_now_ms();
    while (tl_now_ms() - t0 < 15000) {
        r = redis_raw(g_redis_port, "PUBSUB", "NUMPAT", NULL);
        subs = r && r[0] == ':' ? atol(r + 1) : -1;
        free(r);
        if (subs == 0) break;
        tl_sleep_ms(200);
    }
    fprintf(stderr, "   unsubscribed %lld ms after the wait ended\n", (long long)(tl_now_ms() - t0));
    CHECK(subs == 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* A waiter paused (SIGSTOP) while it is handed the lock, past the lease of
 * that grant, and resumed after someone else took the lock: it must not take
 * the late handoff message as a grant; it queues again and gets the lock
 * only after the other holder releases, with a larger fence. */
static void test_paused_waiter_handoff(void) {
    if (!g_redis_port) return;
    char n[256], line[128];
    lname(n, sizeof n, "paused");
    const uint32_t lease = 1000;
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = fair_opts(lease);
    baton_lock_options xo = fair_opts(0);
    baton_lock *a = lock_on(c1, n, &o), *x = lock_on(c2, n, &xo);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    tl_worker w;
    char ls[16];
    snprintf(ls, sizeof ls, "%u", lease);
    char *argv[] = { "test_prims_fair", "--worker", "wait", g_uri, n, ls, NULL };
    CHECK(tl_worker_spawn(&w, argv) == 0);
    CHECK(tl_expect_line(&w, "WAITING", line, sizeof line, 15000) == 0);
    wait_queued(g_redis_port, n, 1);
    tl_sleep_ms(100); /* parked */
    kill(w.pid, SIGSTOP);
    CHECK_RC(baton_lock_release(a), 0); /* handed to the stopped waiter */
    tl_sleep_ms(lease + 500);              /* that grant's lease runs out on the server */
    CHECK_RC(baton_lock_acquire(x, 5000), 0);
    uint64_t fx = baton_lock_fence(x);
    kill(w.pid, SIGCONT);
    /* while x holds, the resumed waiter must not believe it holds too */
    CHECK(tl_read_line(w.from, line, sizeof line, 1500) < 0);
    CHECK(baton_lock_held(x) == 1);
    CHECK_RC(baton_lock_release(x), 0);
    CHECK(tl_expect_line(&w, "GOT", line, sizeof line, 10000) == 0);
    uint64_t fw = strtoull(line + 4, NULL, 10);
    CHECK(fw > fx);
    if (!(fw > fx)) fprintf(stderr, "   waiter fence %llu, other holder's %llu\n", (unsigned long long)fw, (unsigned long long)fx);
    tl_send_line(&w, "RELEASE\n");
    CHECK(tl_exited_ok(tl_worker_reap(&w, 10000)));
    baton_lock_free(a);
    baton_lock_free(x);
    baton_client_close(c1);
    baton_client_close(c2);
}

#define P_PROCS 4
#define P_ITERS 25

static void test_exclusion_processes(void) {
    char n[256], file[1200];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/counter", g_tmp);
    tl_counter_init(file, 0);
    tl_worker w[P_PROCS];
    char m[16];
    snprintf(m, sizeof m, "%d", P_ITERS);
    for (int i = 0; i < P_PROCS; i++) {
        char *argv[] = { "test_prims_fair", "--worker", "incr", g_uri, n, file, m, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < P_PROCS; i++) CHECK(tl_exited_ok(tl_worker_reap(&w[i], 120000)));
    long total = tl_counter_read(file);
    CHECK(total == P_PROCS * P_ITERS);
    if (total != P_PROCS * P_ITERS) fprintf(stderr, "   counter = %ld, want %d\n", total, P_PROCS * P_ITERS);
}

/* ---- herd: server commands per handoff -------------------------------------------- */

#define MAXCMD 128
typedef struct {
    int n;
    char name[MAXCMD][48];
    long long calls[MAXCMD];
} cmdstats;

static int stats_get(rcli *c, cmdstats *s) {
    const char *argv[2] = { "INFO", "commandstats" };
    char *r = rcli_cmd(c, 2, argv, NULL);
    if (!r || r[0] != '$') { free(r); return -1; }
    memset(s, 0, sizeof *s);
    for (char *p = strstr(r, "cmdstat_"); p; p = strstr(p + 1, "cmdstat_")) {
        char nm[48];
        long long calls;
        if (sscanf(p, "cmdstat_%47[^:]:calls=%lld", nm, &calls) == 2 && s->n < MAXCMD) {
            /* INFO and PUBSUB are the test's own; PING is the subscriber's
             * keepalive (time-driven, not per handoff) */
            if (!strcmp(nm, "info") || !strcmp(nm, "ping") || !strncmp(nm, "pubsub", 6)) continue;
            snprintf(s->name[s->n], sizeof s->name[0], "%s", nm);
            s->calls[s->n++] = calls;
        }
    }
    free(r);
    return 0;
}

static long long stats_total(const cmdstats *s) {
    long long t = 0;
    for (int i = 0; i < s->n; i++) t += s->calls[i];
    return t;
}

static long long stats_of(const cmdstats *s, const char *nm) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], nm)) return s->calls[i];
    return 0;
}

/* Waits until the counters stop moving (nothing in flight), returns them. */
static void stats_settle(rcli *c, cmdstats *s) {
    cmdstats prev;
    stats_get(c, &prev);
    for (int i = 0; i < 200; i++) {
        tl_sleep_ms(100);
        stats_get(c, s);
        if (stats_total(s) == stats_total(&prev)) return;
        prev = *s;
    }
}

static void stats_delta(const cmdstats *a, const cmdstats *b, char *out, size_t n) {
    size_t off = 0;
    out[0] = 0;
    for (int i = 0; i < b->n && off < n; i++) {
        long long d = b->calls[i] - stats_of(a, b->name[i]);
        if (d) off += (size_t)snprintf(out + off, n - off, " %s=%lld", b->name[i], d);
    }
}

#define HERD_MAX 128

/* Holder + NW queued waiters; measures the handoffs holder -> w1 and (with
 * two or more waiters) w1 -> w2. Returns the per-handoff command counts. */
static int herd_round(const char *uri, int port, int nw, long long out[2], char desc[2][512]) {
    char n[256];
    snprintf(n, sizeof n, "%sherd-%d", g_prefix, nw);
    baton_client *c = tl_client_open(uri), *hc = tl_client_open(uri);
    baton_lock_options o = fair_opts(300000); /* no queue refresh (every 100 s) within the test */
    baton_lock *h = lock_on(hc, n, &o);
    static baton_lock *w[HERD_MAX];
    static acq_thread t[HERD_MAX];
    int ok = 1;
    rcli r;
    if (rcli_open(&r, port)) return -1;
    cmdstats sb;
    stats_get(&r, &sb);
    MUST(baton_lock_acquire(h, 0));
    for (int i = 0; i < nw; i++) {
        w[i] = lock_on(c, n, &o);
        acq_start(&t[i], w[i], 60000);
        wait_queued(port, n, i + 1);
    }
    /* every waiter subscribed to its own channels (a PSUBSCRIBE each: new
     * threads, nothing lingering) and parked: one attempt before
     * subscribing, one after the confirmation (+ the holder's) */
    for (int64_t end = tl_now_ms() + 20000;;) {
        cmdstats sn;
        stats_get(&r, &sn);
        long long scripts = stats_of(&sn, "evalsha") + stats_of(&sn, "eval") - stats_of(&sb, "evalsha") - stats_of(&sb, "eval");
        long long subs = stats_of(&sn, "psubscribe") - stats_of(&sb, "psubscribe");
        if (scripts >= 1 + 2LL * nw && subs >= nw) break;
        if (tl_now_ms() > end) {
            fprintf(stderr, "   only %lld acquire scripts and %lld subscriptions, want %d and %d\n", scripts, subs,
                    1 + 2 * nw, nw);
            ok = 0;
            break;
        }
        tl_sleep_ms(10);
    }
    cmdstats s0, s1, s2;
    stats_settle(&r, &s0);
    baton_lock_release(h);
    if (!acq_wait(&t[0], 10000)) ok = 0;
    /* No UNSUBSCRIBE follows: a waiter's channel lingers for its next wait
     * (sub.c), so a handoff is the release script alone. */
    stats_settle(&r, &s1);
    out[0] = stats_total(&s1) - stats_total(&s0);
    stats_delta(&s0, &s1, desc[0], sizeof desc[0]);
    out[1] = -1;
    desc[1][0] = 0;
    for (int i = 1; i < nw; i++) if (atomic_load(&t[i].done)) ok = 0; /* nobody else moved */
    if (t[0].rc != 0) ok = 0;
    if (nw >= 2) {
        atomic_store(&t[0].release_now, 1);
        if (!acq_wait(&t[1], 10000)) ok = 0;
        stats_settle(&r, &s2);
        out[1] = stats_total(&s2) - stats_total(&s1) ;
        stats_delta(&s1, &s2, desc[1], sizeof desc[1]);
        if (t[1].rc != 0) ok = 0;
        for (int i = 2; i < nw; i++) if (atomic_load(&t[i].done)) ok = 0;
    }
    rcli_close(&r);
    for (int i = 0; i < nw; i++) {
        acq_join(&t[i]);
        baton_lock_free(w[i]);
    }
    baton_lock_free(h);
    baton_client_close(c);
    baton_client_close(hc);
    return ok ? 0 : -1;
}

static int herd_main(void) {
    const char *tt = getenv("BATON_TEST_TMP");
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/prims_fair_herd", tt && *tt ? tt : "/tmp");
    tl_mkdirs(dir);
    tl_server("redis", "stop", dir, NULL, 1);
    int port = tl_server("redis", "start", dir, NULL, 1);
    char uri[128];
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", port);
    snprintf(g_uri, sizeof g_uri, "%s", uri);
    snprintf(g_prefix, sizeof g_prefix, "herd/%ld/", (long)getpid());
    th_current = "herd";
    static const int sizes[] = { 1, 16, 128 };
    long long ref = -1;
    /* a warm-up round loads the scripts (the first EVALSHA of each is a NOSCRIPT) */
    long long warm[2];
    char d[2][512];
    CHECK(herd_round(uri, port, 2, warm, d) == 0);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        long long v[2];
        int rc = herd_round(uri, port, sizes[k], v, d);
        CHECK(rc == 0);
        fprintf(stderr, "   %3d waiters: %lld commands per handoff:%s\n", sizes[k], v[0], d[0]);
        if (v[1] >= 0) fprintf(stderr, "   %3d waiters: %lld commands for the next handoff:%s\n", sizes[k], v[1], d[1]);
        if (ref < 0) ref = v[0];
        CHECK(v[0] == ref);
        if (v[1] >= 0) CHECK(v[1] == ref);
        CHECK(v[0] > 0);
        /* EVALSHA + HDEL, TIME, ZRANGEBYSCORE (dead waiters purged first), LPOP, HSET,
         * PEXPIRE, PUBLISH: constant in the queue length */
        CHECK(v[0] <= 8);
    }
    tl_server("redis", "stop", dir, NULL, 1);
    return th_finish();
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 6 && !strcmp(argv[2], "wait")) return worker_wait(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        if (argc == 7 && !strcmp(argv[2], "incr")) return worker_incr(argv[3], argv[4], argv[5], atoi(argv[6]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc == 2 && !strcmp(argv[1], "--herd")) return herd_main();
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI | --herd\n", argv[0]);
        return 2;
    }
    int rc = pr_setup("fair", argv[1]);
    if (rc) return rc;
    {
        baton_client *c = client();
        baton_lock_options o = fair_opts(0);
        baton_lock *l = NULL;
        rc = baton_lock_open(&l, c, "probe", &o);
        baton_lock_free(l);
        baton_client_close(c);
        if (rc == BATON_ENOTSUP) return tl_skip_status("this engine has no fair lock", 1);
    }
    RUN(test_basic);
    RUN(test_fifo_order);
    RUN(test_no_barging);
    RUN(test_leave_queue);
    RUN(test_killed_waiter);
    RUN(test_killed_holder);
    RUN(test_paused_waiter_handoff);
    RUN(test_redisson_entry);
    RUN(test_subscription_lingers);
    RUN(test_exclusion_processes);
    return th_finish();
}
