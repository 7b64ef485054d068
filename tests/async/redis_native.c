/* Redis's native async path (src/backends/redis/async.c, mux.c;
 * docs/async.md) against a redis-server of its own:
 *   test_async_redis [LAYOUT [tls|unix]]   LAYOUT redisson (default) or
 *                                 simple; over TLS (rediss://) or a unix
 *                                 socket (redis+unix://) instead of TCP
 * Every test checks each callback comes exactly once; the fault cases
 * (restart, a frozen link, CLIENT KILL of the mux connection) check the
 * pending operations complete within the io timeout (+ slack) and that no
 * lock is held twice afterwards. */
#include <baton.h>
#include <baton/adapters/poll.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../harness.h"
#include "../common/testlib.h"

#define IO_MS 1000

static char g_dir[1024], g_link[1024], g_uri[2048], g_layout[16] = "redisson";
static int g_port, g_seq;
static char g_mode[8] = "tcp", g_cli[1200];   /* the transport; redis-cli's way to the server */

typedef struct {
    int calls, rc;
    uint64_t fence;
    int *pending;
    char err[160];            /* baton_error_last() of a failure */
} ores;

static void on_done(baton_lock *l, int rc, void *arg)
{
    ores *r = arg;
    r->calls++;
    r->rc = rc;
    r->fence = rc == 0 ? baton_lock_fence(l) : 0;
    if (rc) snprintf(r->err, sizeof r->err, "%s", baton_error_last() ? baton_error_last()->message : "");
    if (r->pending) (*r->pending)--;
}

/* Runs C's loop until *PENDING is 0 or MS passed; the ms it took. */
static int64_t run_until(baton_client *c, int *pending, int64_t ms)
{
    int64_t t0 = tl_now_ms();
    while (*pending > 0 && tl_now_ms() - t0 < ms) {
        struct pollfd pfd;
        int t = -1;
        if (baton_poll_prepare(c, &pfd, &t)) break;
        poll(&pfd, 1, 50);
        baton_poll_handle(c, &pfd);
    }
    return tl_now_ms() - t0;
}

static void name_new(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "an-%s-%d-%d", what, (int)getpid(), g_seq++);
}

static void uri_port(char *out, size_t n, int port, const char *extra)
{
    if (!strcmp(g_mode, "tls"))
        snprintf(out, n, "rediss://127.0.0.1:%d/0?cacert=%s/ca.crt&prefix=an-&layout=%s%s", port, g_dir, g_layout,
                 extra ? extra : "");
    else if (!strcmp(g_mode, "unix"))
        snprintf(out, n, "redis+unix://%s/redis.sock?db=0&prefix=an-&layout=%s%s", g_dir, g_layout, extra ? extra : "");
    else
        snprintf(out, n, "redis://127.0.0.1:%d/0?prefix=an-&layout=%s%s", port, g_layout, extra ? extra : "");
}

static baton_client *client_on(int port)
{
    char uri[2048];
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    baton_client *c = NULL;
    o.io_timeout_ms = IO_MS;
    o.connect_timeout_ms = IO_MS;
    uri_port(uri, sizeof uri, port, NULL);
    MUST(baton_client_open(&c, uri, &o));
    return c;
}

static baton_lock *lock_on(baton_client *c, const char *name, uint32_t lease)
{
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    if (lease) lo.lease_ms = lease;
    MUST(baton_lock_open(&l, c, name, &lo));
    return l;
}

/* The server's count of mux connections (CLIENT SETNAME baton-mux). */
static int mux_conns(int port)
{
    char cmd[1400];
    (void)port;
    snprintf(cmd, sizeof cmd, "%s CLIENT LIST | grep -c 'name=baton-mux'", g_cli);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = -1;
        pclose(p);
    }
    return n;
}

static int count_sockets(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    int n = 0;
    while (d && (de = readdir(d))) {
        char p[300], t[64];
        ssize_t k;
        snprintf(p, sizeof p, "/proc/self/fd/%s", de->d_name);
        if ((k = readlink(p, t, sizeof t - 1)) > 0) {
            t[k] = 0;
            n += !strncmp(t, "socket:", 7);
        }
    }
    if (d) closedir(d);
    return n;
}

/* 1,000 locks on one client: acquired and released twice, every callback
 * once, fences increasing per name, one mux connection and <= 4 sockets. */
static void t_thousand(void)
{
    enum { N = 1000 };
    int base = count_sockets();
    baton_client *c = client_on(g_port);
    baton_lock **ls = calloc(N, sizeof *ls);
    ores *a = calloc(N, sizeof *a), *b = calloc(N, sizeof *b), *a2 = calloc(N, sizeof *a2);
    char name[128];
    int pending = 0, ok = 1, socks = 0;
    for (int i = 0; i < N; i++) {
        name_new(name, sizeof name, "k");
        ls[i] = lock_on(c, name, 0);
    }
    for (int round = 0; round < 2; round++) {
        ores *acq = round ? a2 : a;
        for (int i = 0; i < N; i++) {
            acq[i].pending = &pending;
            if (baton_lock_acquire_async(ls[i], 5000, on_done, &acq[i]) == 0) pending++;
            else ok = 0;
        }
        socks = count_sockets() - base;
        run_until(c, &pending, 30000);
        CHECK(pending == 0);
        if (!round) {
            int m = mux_conns(g_port);
            fprintf(stderr, "thousand: %d sockets, %d mux connection(s) on the server\n", socks, m);
            CHECK(m == 1);
            CHECK(socks <= 4);
        }
        for (int i = 0; i < N; i++) {
            b[i] = (ores){ .pending = &pending };
            if (acq[i].calls != 1 || acq[i].rc != 0 || acq[i].fence == 0) ok = 0;
            if (round && a2[i].fence <= a[i].fence) ok = 0;
            if (baton_lock_release_async(ls[i], on_done, &b[i]) == 0) pending++;
            else ok = 0;
        }
        if (socks < count_sockets() - base) socks = count_sockets() - base;
        run_until(c, &pending, 30000);
        CHECK(pending == 0);
        for (int i = 0; i < N; i++)
            if (b[i].calls != 1 || b[i].rc != 0 || baton_lock_held(ls[i])) ok = 0;
    }
    CHECK(ok);
    CHECK(socks <= 4);
    tl_sleep_ms(100);
    baton_client_process(c);
    int extra = 0;
    for (int i = 0; i < N; i++) extra += a[i].calls + a2[i].calls + b[i].calls;
    CHECK(extra == 2 * N + N);  /* b is reused: N release calls of round 2 */
    for (int i = 0; i < N; i++) baton_lock_free(ls[i]);
    baton_client_close(c);
    free(ls), free(a), free(b), free(a2);
}

typedef struct {
    baton_lock *l;
    int rc, done;
} bwait;

static void *blocking_wait(void *p)
{
    bwait *b = p;
    b->rc = baton_lock_acquire(b->l, 10000);
    __atomic_store_n(&b->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* An async waiter and a blocking holder on one name: never both, the
 * waiter woken by the release with a higher fence; then the other way. */
static void t_blocking(void)
{
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    char name[128];
    int pending = 0;
    name_new(name, sizeof name, "blk");
    baton_lock *l = lock_on(c, name, 0), *hl = lock_on(h, name, 0), *t = lock_on(c, name, 0);
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    ores r = { .pending = &pending }, x = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(l, 20000, on_done, &r), 0);
    pending++;
    run_until(c, &pending, 400);
    CHECK(r.calls == 0);
    /* an async try meanwhile: held */
    CHECK_RC(baton_lock_acquire_async(t, 0, on_done, &x), 0);
    pending++;
    run_until(c, &pending, 400);
    CHECK(x.calls == 1 && x.rc == BATON_ELOCKED);
    int64_t t0 = tl_now_ms();
    MUST(baton_lock_release(hl));
    run_until(c, &pending, 10000);
    fprintf(stderr, "blocking: the async waiter was granted %lld ms after the release\n", (long long)(tl_now_ms() - t0));
    CHECK(r.calls == 1 && r.rc == 0 && r.fence > hf);
    CHECK_RC(baton_lock_acquire(hl, 0), BATON_ELOCKED);
    /* a blocking waiter meanwhile, woken by the async release's PUBLISH */
    bwait bw = { hl, -1, 0 };
    pthread_t th;
    MUST(pthread_create(&th, NULL, blocking_wait, &bw));
    tl_sleep_ms(300);
    CHECK(!__atomic_load_n(&bw.done, __ATOMIC_SEQ_CST));
    ores y = { .pending = &pending };
    CHECK_RC(baton_lock_release_async(l, on_done, &y), 0);
    pending++;
    run_until(c, &pending, 5000);
    CHECK(y.calls == 1 && y.rc == 0);
    pthread_join(th, NULL);
    CHECK_RC(bw.rc, 0);
    CHECK(baton_lock_fence(hl) > r.fence);
    baton_lock_release(hl);
    baton_lock_free(t);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* A foreign holder (redis-cli writing the layout's key): the async try is
 * refused, a waiter is granted after the foreign DEL (no unlock message:
 * the simple layout's backoff or the redisson layout's re-check finds it). */
static void t_foreign(void)
{
    baton_client *c = client_on(g_port);
    char name[128];
    int pending = 0;
    name_new(name, sizeof name, "foreign");
    if (!strcmp(g_layout, "simple"))
        tl_sh("%s SET 'an-%s' foreign PX 60000 >/dev/null", g_cli, name);
    else
        tl_sh("%s HSET 'an-%s' foreign:1 1 >/dev/null && %s PEXPIRE 'an-%s' 60000 >/dev/null", g_cli, name, g_cli, name);
    baton_lock *l = lock_on(c, name, 0), *t = lock_on(c, name, 0);
    ores r = { .pending = &pending }, x = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(t, 0, on_done, &x), 0);
    pending++;
    run_until(c, &pending, 3000);
    CHECK(x.calls == 1 && x.rc == BATON_ELOCKED);
    CHECK_RC(baton_lock_acquire_async(l, 20000, on_done, &r), 0);
    pending++;
    run_until(c, &pending, 500);
    CHECK(r.calls == 0);
    int64_t t0 = tl_now_ms();
    tl_sh("%s DEL 'an-%s' >/dev/null", g_cli, name);
    run_until(c, &pending, 10000);
    fprintf(stderr, "foreign: granted %lld ms after the foreign DEL\n", (long long)(tl_now_ms() - t0));
    CHECK(r.calls == 1 && r.rc == 0);
    /* and a foreign SET NX now fails: we hold it */
    if (!strcmp(g_layout, "simple"))
        CHECK(tl_sh("%s SET 'an-%s' foreign NX PX 60000 | grep -q OK", g_cli, name) != 0);
    else
        CHECK(tl_sh("%s EXISTS 'an-%s' | grep -q 1", g_cli, name) == 0);
    baton_lock_release(l);
    baton_lock_free(t);
    baton_lock_free(l);
    baton_client_close(c);
}

/* The server's count of a command (INFO commandstats), -1 if unknown. */
static long long cmd_calls(const char *cmd)
{
    char c[1400];
    long long n = -1;
    snprintf(c, sizeof c, "%s INFO commandstats | tr -d '\\r' | sed -n 's/^cmdstat_%s:calls=\\([0-9]*\\).*/\\1/p'",
             g_cli, cmd);
    FILE *p = popen(c, "r");
    if (p) {
        if (fscanf(p, "%lld", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

/* The herd: W async waiters of one client on one name, each grant's
 * callback releasing it: a release wakes one of them (sub.c's one-wake
 * registration), so the scripts per handoff stay small and do not grow
 * with W (with every waiter woken they would be about W). */
typedef struct {
    baton_lock *l;
    int *pending, rc, calls;
    uint64_t fence;
    int *holders, *max_holders;
} hw;

static void herd_released(baton_lock *l, int rc, void *arg)
{
    hw *w = arg;
    (void)l;
    if (rc) w->rc = rc;
    (*w->pending)--;
}

static void herd_granted(baton_lock *l, int rc, void *arg)
{
    hw *w = arg;
    w->calls++;
    w->rc = rc;
    if (rc) {
        (*w->pending)--;
        return;
    }
    w->fence = baton_lock_fence(l);
    if (++*w->holders > *w->max_holders) *w->max_holders = *w->holders;
    --*w->holders;  /* released below: nobody else can be granted before its release goes out */
    if (baton_lock_release_async(l, herd_released, w) != 0) (*w->pending)--;
}

static void t_herd(void)
{
    enum { W = 64 };
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    char name[128];
    hw ws[W];
    int pending = 0, holders = 0, maxh = 0;
    name_new(name, sizeof name, "herd");
    baton_lock *hl = lock_on(h, name, 0);
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    memset(ws, 0, sizeof ws);
    for (int i = 0; i < W; i++) {
        ws[i] = (hw){ lock_on(c, name, 0), &pending, 0, 0, 0, &holders, &maxh };
        CHECK_RC(baton_lock_acquire_async(ws[i].l, 60000, herd_granted, &ws[i]), 0);
        pending++;
    }
    run_until(c, &pending, 1000);   /* all subscribed and parked */
    long long before = cmd_calls("evalsha");
    MUST(baton_lock_release(hl));
    int64_t took = run_until(c, &pending, 60000);
    long long after = cmd_calls("evalsha");
    int ok = 1;
    for (int i = 0; i < W; i++)
        if (ws[i].calls != 1 || ws[i].rc != 0 || ws[i].fence <= hf) ok = 0;
    double per = before >= 0 && after >= before ? (double)(after - before) / W : -1;
    fprintf(stderr, "herd: %d async waiters of one client granted in turn in %lld ms, %.1f EVALSHA per handoff\n", W,
            (long long)took, per);
    CHECK(pending == 0);
    CHECK(ok);
    CHECK(maxh == 1);
    /* a handoff: the release, the woken waiter's attempt, a few re-checks at
     * most; every waiter woken would be about W per handoff */
    CHECK(per >= 0 && per <= 8);
    for (int i = 0; i < W; i++) baton_lock_free(ws[i].l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* Cancel of a waiting acquire: ECANCELED once, nothing held; the holder keeps it. */
static void t_cancel(void)
{
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    char name[128];
    int pending = 0;
    name_new(name, sizeof name, "cancel");
    baton_lock *l = lock_on(c, name, 0), *hl = lock_on(h, name, 0);
    MUST(baton_lock_acquire(hl, 5000));
    ores r = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(l, -1, on_done, &r), 0);
    pending++;
    run_until(c, &pending, 300);
    CHECK(r.calls == 0);
    baton_lock_cancel(l);
    int64_t took = run_until(c, &pending, 5000);
    CHECK(r.calls == 1);
    CHECK_RC(r.rc, BATON_ECANCELED);
    CHECK(took < 3000);
    CHECK(!baton_lock_held(l));
    CHECK(baton_lock_held(hl));
    run_until(c, &pending, 200);
    CHECK(r.calls == 1);
    baton_lock_release(hl);
    /* the handle waits again after a cancel */
    ores r2 = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(l, 5000, on_done, &r2), 0);
    pending++;
    run_until(c, &pending, 5000);
    CHECK(r2.calls == 1 && r2.rc == 0);
    baton_lock_release(l);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* Close with acquires (waiting and granting) and releases in flight: every
 * callback once, ECANCELED; nothing left held. */
static void t_close(void)
{
    enum { N = 100 };
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    char held[128], names[N][64];
    baton_lock *ls[N];
    ores rs[N];
    int pending = 0;
    name_new(held, sizeof held, "close-held");
    baton_lock *hl = lock_on(h, held, 0);
    MUST(baton_lock_acquire(hl, 5000));
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "an-close-%d-%d-%d", (int)getpid(), g_seq, i);
        ls[i] = lock_on(c, i < N / 3 ? held : names[i], 0);
        if (i >= 2 * N / 3) MUST(baton_lock_acquire(ls[i], 5000));
    }
    g_seq++;
    for (int i = 0; i < N; i++) {
        rs[i].pending = &pending;
        int rc = i >= 2 * N / 3 ? baton_lock_release_async(ls[i], on_done, &rs[i])
                                : baton_lock_acquire_async(ls[i], -1, on_done, &rs[i]);
        CHECK_RC(rc, 0);
    }
    baton_client_close(c);
    int once = 1, canceled = 1;
    for (int i = 0; i < N; i++) {
        if (rs[i].calls != 1) once = 0;
        if (rs[i].rc != BATON_ECANCELED) canceled = 0;
    }
    CHECK(once);
    CHECK(canceled);
    /* nothing of the closed client's is held: the other client takes all */
    int free_all = 1;
    for (int i = N / 3; i < N; i++) {
        baton_lock *o = lock_on(h, names[i], 0);
        if (baton_lock_acquire(o, 0) != 0) free_all = 0;
        else baton_lock_release(o);
        baton_lock_free(o);
    }
    CHECK(free_all);
    CHECK(baton_lock_held(hl));
    for (int i = 0; i < N; i++) baton_lock_free(ls[i]);
    baton_lock_release(hl);
    baton_lock_free(hl);
    baton_client_close(h);
}

/* Operations pending across a server restart: each completes (bounded by
 * the io timeout and the wait), and afterwards no name is held twice. */
static void t_restart(void)
{
    enum { N = 50 };
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    baton_lock *ls[N], *hs[N];
    ores rs[N];
    char name[128];
    int pending = 0;
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        name_new(name, sizeof name, "restart");
        ls[i] = lock_on(c, name, 3000);
        hs[i] = lock_on(h, name, 3000);
        if (i % 2 == 0) MUST(baton_lock_acquire(hs[i], 5000)); /* half wait on a holder */
    }
    for (int i = 0; i < N; i++) {
        rs[i].pending = &pending;
        CHECK_RC(baton_lock_acquire_async(ls[i], 8000, on_done, &rs[i]), 0);
        pending++;
    }
    run_until(c, &pending, 300);
    tl_server_restart("redis", g_dir);
    int64_t took = run_until(c, &pending, 20000);
    fprintf(stderr, "restart: %d of %d ops pending %lld ms after the restart\n", pending, N, (long long)took);
    CHECK(pending == 0);
    int once = 1, both = 0, ok_rc = 1;
    tl_sleep_ms(200);
    baton_client_process(c);
    for (int i = 0; i < N; i++) {
        if (rs[i].calls != 1) once = 0;
        if (rs[i].rc && rs[i].rc != BATON_ETIMEDOUT && rs[i].rc != BATON_EUNAVAILABLE) ok_rc = 0;
    }
    /* the holder's locks were lost with the restart (no persistence): its
     * client re-checks on reconnect; give the keeper a lease to say so */
    tl_sleep_ms(3500);
    for (int i = 0; i < N; i++)
        if (baton_lock_held(ls[i]) && baton_lock_held(hs[i])) both++;
    CHECK(once);
    CHECK(ok_rc);
    CHECK(both == 0);
    /* the client works after the restart */
    for (int i = 0; i < N; i++) {
        if (baton_lock_held(ls[i])) baton_lock_release(ls[i]);
        if (baton_lock_held(hs[i])) baton_lock_release(hs[i]);
    }
    ores z = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(ls[0], 5000, on_done, &z), 0);
    pending++;
    run_until(c, &pending, 8000);
    CHECK(z.calls == 1 && z.rc == 0);
    if (z.rc == 0) baton_lock_release(ls[0]);
    for (int i = 0; i < N; i++) baton_lock_free(ls[i]), baton_lock_free(hs[i]);
    baton_client_close(c);
    baton_client_close(h);
}

/* A frozen link with operations pending: each completes within the io
 * timeout (+ the give-back of an uncertain grant, + slack) with
 * EUNAVAILABLE or ETIMEDOUT; meanwhile another client takes and releases
 * every name. At the thaw the forwarder delivers the acquires written into
 * the frozen link: each may still be granted, to an owner that has given up
 * (its give-back went into the same frozen link). Such a grant has no
 * keeper and ends with its lease, so the names use a short one; after it
 * the client works again. (With the default 30 s lease the CI lost this
 * race: a stale grant landed, its give-back had gone first, and the name
 * stayed held past the test's 10 s; reproduced under CPU load with 2-7 of
 * 40 names granted so.) */
#define FREEZE_LEASE_MS 2500
static void t_freeze(void)
{
    enum { N = 40 };
    char cmd[2048], out[64] = "";
    snprintf(cmd, sizeof cmd, "bash '%s/link.sh' start '%s' %d", TL_SERVERS_DIR, g_link, g_port);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(out, sizeof out, p)) out[0] = 0;
    if (p) pclose(p);
    int lport = atoi(out);
    if (lport <= 0) {
        fprintf(stderr, "freeze: no link (socat missing?): not run\n");
        CHECK(tl_require_all() == 0);
        return;
    }
    baton_client *c = client_on(lport), *h = client_on(g_port);
    baton_lock *ls[N], *hs[N];
    ores rs[N];
    char name[128];
    int pending = 0;
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        name_new(name, sizeof name, "freeze");
        ls[i] = lock_on(c, name, FREEZE_LEASE_MS);
        hs[i] = lock_on(h, name, 0);
    }
    /* the mux connected and warm */
    ores w = { .pending = &pending };
    CHECK_RC(baton_lock_acquire_async(ls[0], 5000, on_done, &w), 0);
    pending++;
    run_until(c, &pending, 5000);
    CHECK(w.rc == 0);
    baton_lock_release(ls[0]);
    tl_sh("bash '%s/link.sh' freeze '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_link);
    for (int i = 0; i < N; i++) {
        rs[i].pending = &pending;
        CHECK_RC(baton_lock_acquire_async(ls[i], i % 2 ? 0 : 500, on_done, &rs[i]), 0);
        pending++;
    }
    int64_t took = run_until(c, &pending, 6 * IO_MS + 4000);
    fprintf(stderr, "freeze: %d of %d pending after %lld ms (io timeout %d ms)\n", pending, N, (long long)took, IO_MS);
    CHECK(pending == 0);
    CHECK(took <= 3 * IO_MS + 2000);
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (rs[i].calls != 1 || (rs[i].rc != BATON_EUNAVAILABLE && rs[i].rc != BATON_ETIMEDOUT)) ok = 0;
    CHECK(ok);
    /* meanwhile another client takes every name: nobody else holds them */
    int took_all = 1;
    for (int i = 0; i < N; i++)
        if (baton_lock_acquire(hs[i], 3000) != 0) took_all = 0;
    CHECK(took_all);
    for (int i = 0; i < N; i++) baton_lock_release(hs[i]);
    tl_sh("bash '%s/link.sh' thaw '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_link);
    /* the stale acquires land now: count the grants nobody holds */
    tl_sleep_ms(300);
    int ghosts = 0;
    for (int i = 0; i < N; i++) {
        baton_lockinfo li = BATON_LOCK_INFO_INIT;
        if (baton_lock_info(h, baton_lock_name(hs[i]), &li) == 0 && li.held) ghosts++;
    }
    fprintf(stderr, "freeze: %d of %d names granted by acquires delivered at the thaw\n", ghosts, N);
    /* recovered: a fresh acquire through the thawed link, at the latest
     * once those grants' lease has run out */
    ores z = { .pending = &pending };
    int64_t end = tl_now_ms() + FREEZE_LEASE_MS + 8000;
    do {
        z = (ores){ .pending = &pending };
        CHECK_RC(baton_lock_acquire_async(ls[1], 2000, on_done, &z), 0);
        pending++;
        int64_t t = run_until(c, &pending, 5000);
        if (z.rc)
            fprintf(stderr, "freeze: a fresh acquire after the thaw: rc %d (%s) after %lld ms\n", z.rc, z.err,
                    (long long)t);
    } while (z.rc != 0 && tl_now_ms() < end);
    CHECK(z.calls == 1 && z.rc == 0);
    if (z.rc == 0) baton_lock_release(ls[1]);
    for (int i = 0; i < N; i++) baton_lock_free(ls[i]), baton_lock_free(hs[i]);
    baton_client_close(c);
    baton_client_close(h);
    tl_sh("bash '%s/link.sh' stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, g_link);
}

/* CLIENT KILL of the mux connection with waits pending: they complete at
 * once (EOF, not the io timeout) or keep waiting on a new connection, and
 * a release afterwards still reaches the holder's grant. */
static void t_kill(void)
{
    enum { N = 20 };
    baton_client *c = client_on(g_port), *h = client_on(g_port);
    baton_lock *ls[N], *hs[N];
    ores rs[N];
    char name[128];
    int pending = 0;
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        name_new(name, sizeof name, "kill");
        ls[i] = lock_on(c, name, 0);
        hs[i] = lock_on(h, name, 0);
        MUST(baton_lock_acquire(hs[i], 5000));
    }
    for (int i = 0; i < N; i++) {
        rs[i].pending = &pending;
        CHECK_RC(baton_lock_acquire_async(ls[i], 15000, on_done, &rs[i]), 0);
        pending++;
    }
    run_until(c, &pending, 500);
    CHECK(pending == N);
    CHECK(mux_conns(g_port) == 1);
    CHECK(tl_sh("for id in $(%s CLIENT LIST | grep 'name=baton-mux' | sed 's/^id=\\([0-9]*\\).*/\\1/'); do "
                "%s CLIENT KILL ID $id | grep -q 1 || exit 1; done", g_cli, g_cli) == 0);
    /* a try right after: the mux sees the EOF and reconnects, well within the io timeout */
    baton_lock *t = lock_on(c, "kill-probe", 0);
    int probe = 0;
    ores tr = { .pending = &probe };
    CHECK_RC(baton_lock_acquire_async(t, 0, on_done, &tr), 0);
    probe++;
    int64_t tt = run_until(c, &probe, 3 * IO_MS);
    fprintf(stderr, "kill: a try right after the kill: %s in %lld ms\n", baton_strerror(tr.rc), (long long)tt);
    /* granted on a new connection, or failed at once by the EOF */
    CHECK(tr.calls == 1 && (tr.rc == 0 || tr.rc == BATON_EUNAVAILABLE) && tt < IO_MS);
    if (tr.rc == 0) baton_lock_release(t);
    baton_lock_free(t);
    /* the waiters reconnect and keep waiting; the holder's releases wake them */
    run_until(c, &pending, 1500);
    int still = pending;
    for (int i = 0; i < N; i++) baton_lock_release(hs[i]);
    run_until(c, &pending, 10000);
    fprintf(stderr, "kill: %d of %d still waiting after the kill; %d pending after the releases\n", still, N, pending);
    CHECK(pending == 0);
    int granted = 0, once = 1, both = 0;
    for (int i = 0; i < N; i++) {
        if (rs[i].calls != 1) once = 0;
        if (rs[i].rc == 0) granted++;
        if (baton_lock_held(ls[i]) && baton_lock_held(hs[i])) both++;
    }
    CHECK(once);
    CHECK(both == 0);
    CHECK(granted == N);
    CHECK(mux_conns(g_port) == 1);
    for (int i = 0; i < N; i++) {
        if (baton_lock_held(ls[i])) baton_lock_release(ls[i]);
        baton_lock_free(ls[i]), baton_lock_free(hs[i]);
    }
    baton_client_close(c);
    baton_client_close(h);
}

int main(int argc, char **argv)
{
    const char *tmp = getenv("BATON_TEST_TMP");
    char args[4096] = "";
    if (argc > 1) snprintf(g_layout, sizeof g_layout, "%s", argv[1]);
    if (argc > 2) snprintf(g_mode, sizeof g_mode, "%s", argv[2]);
    snprintf(g_dir, sizeof g_dir, "%s/async_redis_native_%s_%s", tmp ? tmp : "/tmp", g_layout, g_mode);
    snprintf(g_link, sizeof g_link, "%s/async_redis_native_link_%s", tmp ? tmp : "/tmp", g_layout);
    tl_mkdirs(g_dir);
    if (!strcmp(g_mode, "tls")) {
        if (tl_sh("bash '%s/redis-tls-certs.sh' '%s' >/dev/null", TL_SERVERS_DIR, g_dir) != 0)
            tl_skip("no openssl command for the test certificates", 1);
        snprintf(args, sizeof args, "--port 0 --tls-port @PORT@ --tls-cert-file '%s/server.crt' "
                 "--tls-key-file '%s/server.key' --tls-ca-cert-file '%s/ca.crt' --tls-auth-clients no",
                 g_dir, g_dir, g_dir);
    } else if (!strcmp(g_mode, "unix")) {
        snprintf(args, sizeof args, "--unixsocket '%s/redis.sock' --unixsocketperm 700", g_dir);
    }
    g_port = tl_server_start("redis", g_dir, args[0] ? args : NULL);
    if (!strcmp(g_mode, "tls"))
        snprintf(g_cli, sizeof g_cli, "redis-cli --tls --cacert '%s/ca.crt' -p %d", g_dir, g_port);
    else
        snprintf(g_cli, sizeof g_cli, "redis-cli -p %d", g_port);
    uri_port(g_uri, sizeof g_uri, g_port, NULL);
    RUN(t_thousand);
    RUN(t_blocking);
    RUN(t_foreign);
    RUN(t_cancel);
    RUN(t_herd);
    RUN(t_close);
    RUN(t_kill);
    if (!strcmp(g_mode, "tcp")) RUN(t_freeze);   /* the link forwards TCP */
    RUN(t_restart);
    tl_server_stop("redis", g_dir);
    return th_finish();
}
