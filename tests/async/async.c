/* The event-loop API (docs/async.md) on one engine:
 *   test_async URI            the suite below ({port}: the fixture's)
 *   test_async URI restart    a redis server of its own restarted while an
 *                             async acquire waits: the op completes
 *   test_async URI threads N  N async acquires waiting on one client: the
 *                             thread count stays bounded; prints threads, RSS
 *                             and malloc'd bytes per waiting op */
#include <baton.h>
#include <baton/adapters/poll.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[2048];
static int g_seq;

/* One op's result, checked to arrive exactly once and never from inside the
 * call that started it. */
typedef struct {
    atomic_int calls;
    int rc;
    uint64_t fence;
    int in_start;          /* set around the starting call */
    int from_start;        /* a callback came from inside it */
    int err_code;          /* baton_error_last() inside the callback */
    char err_msg[256];
    volatile int stop;
} res;

static void on_done(baton_lock *l, int rc, void *arg)
{
    res *r = arg;
    if (r->in_start) r->from_start = 1;
    r->rc = rc;
    r->fence = rc == 0 ? baton_lock_fence(l) : 0;
    if (rc) {
        const baton_error *e = baton_error_last();
        r->err_code = e->code;
        snprintf(r->err_msg, sizeof r->err_msg, "%s", e->message ? e->message : "");
    }
    atomic_fetch_add(&r->calls, 1);
    r->stop = 1;
}

static void name_new(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "async-%s-%d-%d", what, (int)getpid(), g_seq++);
}

static baton_lock *lock_open(baton_client *c, const char *name)
{
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, NULL));
    return l;
}

static int start_acquire(baton_lock *l, int64_t wait_ms, res *r)
{
    int rc;
    r->in_start = 1;
    rc = baton_lock_acquire_async(l, wait_ms, on_done, r);
    r->in_start = 0;
    return rc;
}

static int start_release(baton_lock *l, res *r)
{
    int rc;
    r->stop = 0;
    r->in_start = 1;
    rc = baton_lock_release_async(l, on_done, r);
    r->in_start = 0;
    return rc;
}

/* Runs C's loop until R's callback came or MS passed. */
static void loop_until(baton_client *c, res *r, int64_t ms)
{
    baton_poll_run(c, &r->stop, ms);
}

static void t_basic(void)
{
    baton_client *c = tl_client_open(g_uri);
    char name[128];
    res a = { 0 }, b = { 0 };
    name_new(name, sizeof name, "basic");
    baton_lock *l = lock_open(c, name);
    CHECK(baton_client_fd(c) >= 0);
    CHECK(baton_client_fd(c) == baton_client_fd(c));
    CHECK_RC(start_acquire(l, 5000, &a), 0);
    loop_until(c, &a, 10000);
    CHECK(atomic_load(&a.calls) == 1);
    CHECK_RC(a.rc, 0);
    CHECK(a.fence > 0);
    CHECK(!a.from_start);
    CHECK(baton_lock_held(l));
    /* a second acquire of a held handle is refused at once, cb never called */
    res x = { 0 };
    CHECK_RC(start_acquire(l, 0, &x), BATON_EINVAL);
    CHECK_RC(start_release(l, &b), 0);
    /* one op at a time per handle */
    CHECK_RC(start_acquire(l, 0, &x), BATON_EINVAL);
    loop_until(c, &b, 10000);
    CHECK(atomic_load(&b.calls) == 1);
    CHECK_RC(b.rc, 0);
    CHECK(!baton_lock_held(l));
    CHECK(atomic_load(&x.calls) == 0);
    /* again: fences increase */
    res a2 = { 0 };
    CHECK_RC(start_acquire(l, 5000, &a2), 0);
    loop_until(c, &a2, 10000);
    CHECK_RC(a2.rc, 0);
    CHECK(a2.fence > a.fence);
    /* the blocking release of an async grant works too */
    CHECK_RC(baton_lock_release(l), 0);
    /* process with nothing done runs nothing */
    CHECK(baton_client_process(c) == 0);
    CHECK(baton_client_timeout_ms(c) == -1);
    baton_lock_free(l);
    baton_client_close(c);
}

/* A blocking holder on another client; the async waiter is granted on its
 * release, with a higher fence, and not before. */
static void t_contention(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    res a = { 0 };
    name_new(name, sizeof name, "contend");
    baton_lock *hl = lock_open(h, name), *l = lock_open(c, name);
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    CHECK_RC(start_acquire(l, 20000, &a), 0);
    loop_until(c, &a, 600);
    CHECK(atomic_load(&a.calls) == 0);   /* still waiting: the lock is held */
    MUST(baton_lock_release(hl));
    loop_until(c, &a, 20000);
    CHECK(atomic_load(&a.calls) == 1);
    CHECK_RC(a.rc, 0);
    CHECK(a.fence > hf);
    /* and the other way round: the blocking client waits for the async holder */
    CHECK_RC(baton_lock_acquire(hl, 0), BATON_ELOCKED);
    res r = { 0 };
    CHECK_RC(start_release(l, &r), 0);
    loop_until(c, &r, 10000);
    CHECK_RC(r.rc, 0);
    CHECK_RC(baton_lock_acquire(hl, 5000), 0);
    CHECK(baton_lock_fence(hl) > a.fence);
    baton_lock_release(hl);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* wait 0: ELOCKED through the callback; a deadline: ETIMEDOUT; cancel:
 * ECANCELED. */
static void t_try_deadline_cancel(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    name_new(name, sizeof name, "tdc");
    baton_lock *hl = lock_open(h, name), *l = lock_open(c, name);
    MUST(baton_lock_acquire(hl, 5000));

    res t = { 0 };
    CHECK_RC(start_acquire(l, 0, &t), 0);
    loop_until(c, &t, 10000);
    CHECK(atomic_load(&t.calls) == 1);
    CHECK_RC(t.rc, BATON_ELOCKED);
    CHECK(!t.from_start);
    /* the callback's baton_error_last() is its op's failure, with a message */
    CHECK_RC(t.err_code, BATON_ELOCKED);
    CHECK(t.err_msg[0] != 0);

    res d = { 0 };
    int64_t t0 = tl_now_ms();
    CHECK_RC(start_acquire(l, 400, &d), 0);
    loop_until(c, &d, 20000);
    CHECK(atomic_load(&d.calls) == 1);
    CHECK_RC(d.rc, BATON_ETIMEDOUT);
    CHECK(tl_now_ms() - t0 >= 390);
    CHECK_RC(d.err_code, BATON_ETIMEDOUT);
    CHECK(d.err_msg[0] != 0);

    res k = { 0 };
    CHECK_RC(start_acquire(l, -1, &k), 0);
    loop_until(c, &k, 300);
    CHECK(atomic_load(&k.calls) == 0);
    CHECK_RC(baton_lock_cancel(l), 0);
    loop_until(c, &k, 20000);
    CHECK(atomic_load(&k.calls) == 1);
    CHECK_RC(k.rc, BATON_ECANCELED);
    CHECK_RC(k.err_code, BATON_ECANCELED);
    /* the cancel was consumed: the next try asks the engine (ELOCKED) */
    res t2 = { 0 };
    CHECK_RC(start_acquire(l, 0, &t2), 0);
    loop_until(c, &t2, 10000);
    CHECK_RC(t2.rc, BATON_ELOCKED);

    baton_lock_release(hl);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* N waiters on one held name through one client, more than the worker pool:
 * the queued ones are retried too (granted in turn as the holder lets go). */
static void on_chain(baton_lock *l, int rc, void *arg)
{
    res *r = arg;
    r->rc = rc;
    atomic_fetch_add(&r->calls, 1);
    if (rc == 0) {
        r->fence = baton_lock_fence(l);
        baton_lock_release(l);   /* blocking release from a callback: allowed */
    }
}

static void t_many_waiters(void)
{
    enum { N = 40 };
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    baton_lock *ls[N];
    res rs[N];
    name_new(name, sizeof name, "many");
    baton_lock *hl = lock_open(h, name);
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        ls[i] = lock_open(c, name);
        CHECK_RC(baton_lock_acquire_async(ls[i], 60000, on_chain, &rs[i]), 0);
    }
    tl_sleep_ms(300);
    CHECK(baton_client_process(c) == 0);
    MUST(baton_lock_release(hl));
    int64_t end = tl_now_ms() + 60000;
    int done = 0;
    while (done < N && tl_now_ms() < end) {
        struct pollfd p = { baton_client_fd(c), POLLIN, 0 };
        poll(&p, 1, 200);
        baton_client_process(c);
        done = 0;
        for (int i = 0; i < N; i++) done += atomic_load(&rs[i].calls);
    }
    CHECK(done == N);
    int ok = 0, once = 1;
    for (int i = 0; i < N; i++) {
        if (atomic_load(&rs[i].calls) != 1) once = 0;
        if (rs[i].rc == 0 && rs[i].fence > hf) ok++;
    }
    CHECK(once);
    CHECK(ok == N);
    for (int i = 0; i < N; i++) baton_lock_free(ls[i]);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* Close with ops in flight (running and queued): each callback once with
 * ECANCELED, on the closing thread, none after close returns. */
static void t_close_inflight(void)
{
    enum { N = 50 };
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    baton_lock *ls[N];
    res rs[N];
    name_new(name, sizeof name, "close");
    baton_lock *hl = lock_open(h, name);
    MUST(baton_lock_acquire(hl, 5000));
    memset(rs, 0, sizeof rs);
    for (int i = 0; i < N; i++) {
        ls[i] = lock_open(c, name);
        CHECK_RC(start_acquire(ls[i], -1, &rs[i]), 0);
    }
    /* and one granted but not yet processed */
    char other[128];
    res g = { 0 };
    name_new(other, sizeof other, "close-granted");
    baton_lock *gl = lock_open(c, other);
    CHECK_RC(start_acquire(gl, 5000, &g), 0);
    tl_sleep_ms(300);
    baton_client_close(c);
    int once = 1, canceled = 1;
    for (int i = 0; i < N; i++) {
        if (atomic_load(&rs[i].calls) != 1) once = 0;
        if (rs[i].rc != BATON_ECANCELED) canceled = 0;
    }
    CHECK(once);
    CHECK(canceled);
    CHECK(atomic_load(&g.calls) == 1);
    CHECK_RC(g.rc, BATON_ECANCELED);
    tl_sleep_ms(200);
    int after = 0;
    for (int i = 0; i < N; i++) after += atomic_load(&rs[i].calls);
    CHECK(after == N);
    /* the close gave back the grant it canceled: another client takes it */
    baton_lock *ol = lock_open(h, other);
    CHECK_RC(baton_lock_acquire(ol, 5000), 0);
    baton_lock_release(ol);
    baton_lock_free(ol);
    for (int i = 0; i < N; i++) {
        /* calls on a closed client's handles answer ECANCELED */
        res x = { 0 };
        CHECK_RC(start_acquire(ls[i], 0, &x), BATON_ECANCELED);
        baton_lock_free(ls[i]);
    }
    baton_lock_free(gl);
    baton_lock_release(hl);
    baton_lock_free(hl);
    baton_client_close(h);
}

/* Freeing a lock with an op in flight: the op stops, its callback never runs. */
static void t_free_inflight(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    res r = { 0 };
    name_new(name, sizeof name, "free");
    baton_lock *hl = lock_open(h, name), *l = lock_open(c, name);
    MUST(baton_lock_acquire(hl, 5000));
    CHECK_RC(start_acquire(l, -1, &r), 0);
    tl_sleep_ms(200);
    baton_lock_free(l);
    loop_until(c, &r, 300);
    CHECK(atomic_load(&r.calls) == 0);
    baton_lock_release(hl);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* A holder in another process SIGKILLed while an async acquire waits: the
 * waiter is granted (the kernel dropped the dead holder's lock; on the file
 * engine nothing is written, so the waiter's re-check finds it), with a
 * fence above the dead holder's. */
static void t_killed_holder(void)
{
    baton_client *c;
    char name[128], line[128];
    int p[2];
    res r = { 0 };
    name_new(name, sizeof name, "killed");
    if (pipe(p)) { CHECK(0); return; }
    pid_t pid = fork();
    if (pid == 0) {
        baton_client *hc = tl_client_open(g_uri);
        baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
        baton_lock *hl = NULL;
        o.lease_ms = 2000;   /* leased engines: the dead holder's lease ends in 2 s */
        MUST(baton_lock_open(&hl, hc, name, &o));
        MUST(baton_lock_acquire(hl, 5000));
        dprintf(p[1], "%llu\n", (unsigned long long)baton_lock_fence(hl));
        for (;;) pause();
    }
    close(p[1]);
    uint64_t hf = 0;
    if (tl_read_line(p[0], line, sizeof line, 10000) > 0) hf = strtoull(line, NULL, 10);
    close(p[0]);
    CHECK(hf > 0);
    c = tl_client_open(g_uri);
    baton_lock *l = lock_open(c, name);
    CHECK_RC(start_acquire(l, 30000, &r), 0);
    loop_until(c, &r, 500);
    CHECK(atomic_load(&r.calls) == 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    loop_until(c, &r, 30000);
    CHECK(atomic_load(&r.calls) == 1);
    CHECK_RC(r.rc, 0);
    CHECK(r.fence > hf);
    baton_lock_free(l);
    baton_client_close(c);
}

/* A fair lock (the file engine's native waiter does not take it: ENOTSUP
 * sends it to the pool), contended: granted on release, fence above. */
static void t_fair(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *hl = NULL, *l = NULL;
    char name[128];
    res r = { 0 };
    o.fair = 1;
    name_new(name, sizeof name, "fair");
    if (baton_lock_open(&hl, h, name, &o) == BATON_ENOTSUP) {
        fprintf(stderr, "   (no fair lock on this engine)\n");
        baton_client_close(c);
        baton_client_close(h);
        return;
    }
    MUST(baton_lock_open(&l, c, name, &o));
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    CHECK_RC(start_acquire(l, 20000, &r), 0);
    loop_until(c, &r, 400);
    CHECK(atomic_load(&r.calls) == 0);
    MUST(baton_lock_release(hl));
    loop_until(c, &r, 20000);
    CHECK(atomic_load(&r.calls) == 1);
    CHECK_RC(r.rc, 0);
    CHECK(r.fence > hf);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* A leased grant made through the async API is renewed by the keeper: held
 * past several leases, and nobody else gets it meanwhile. */
static void t_renewal(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *hl = NULL, *l = NULL;
    char name[128];
    res r = { 0 };
    atomic_int lost = 0;
    o.lease_ms = 300;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    name_new(name, sizeof name, "renew");
    MUST(baton_lock_open(&l, c, name, &o));
    MUST(baton_lock_open(&hl, h, name, NULL));
    CHECK_RC(start_acquire(l, 5000, &r), 0);
    loop_until(c, &r, 10000);
    CHECK_RC(r.rc, 0);
    tl_sleep_ms(1200);
    CHECK(baton_lock_held(l));
    CHECK_RC(baton_lock_acquire(hl, 0), BATON_ELOCKED);
    CHECK(atomic_load(&lost) == 0);
    res x = { 0 };
    CHECK_RC(start_release(l, &x), 0);
    loop_until(c, &x, 10000);
    CHECK_RC(x.rc, 0);
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* An async grant broken by an operator is reported lost (on_lost), as a
 * blocking one is. Engines that cannot break a lock (file) skip it. */
static void t_loss(void)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    baton_lock *l = NULL;
    char name[128];
    res r = { 0 };
    atomic_int lost = 0;
    uint64_t nf = 0;
    o.lease_ms = 400;
    o.on_lost = tl_count_lost;
    o.on_lost_payload = &lost;
    name_new(name, sizeof name, "loss");
    MUST(baton_lock_open(&l, c, name, &o));
    CHECK_RC(start_acquire(l, 5000, &r), 0);
    loop_until(c, &r, 10000);
    CHECK_RC(r.rc, 0);
    int rc = baton_lock_force_unlock(h, name, &nf);
    if (rc == BATON_ENOTSUP) {
        fprintf(stderr, "   (this engine cannot break a lock)\n");
    } else {
        CHECK_RC(rc, 0);
        CHECK(nf > r.fence);
        int64_t end = tl_now_ms() + 10000;
        while (atomic_load(&lost) == 0 && tl_now_ms() < end) tl_sleep_ms(20);
        CHECK(atomic_load(&lost) == 1);
        CHECK(!baton_lock_held(l));
    }
    baton_lock_free(l);
    baton_client_close(c);
    baton_client_close(h);
}

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
    fclose(f);
    return v;
}

static atomic_int g_threads_done;
static void on_count(baton_lock *l, int rc, void *arg)
{
    (void)l;
    (void)arg;
    if (rc == BATON_ECANCELED) atomic_fetch_add(&g_threads_done, 1);
}

/* N async acquires waiting on one client: the threads stay bounded. */
static void t_threads(int n)
{
    baton_client *h = tl_client_open(g_uri), *c = tl_client_open(g_uri);
    char name[128];
    baton_lock **ls = calloc((size_t)n, sizeof *ls);
    name_new(name, sizeof name, "threads");
    baton_lock *hl = lock_open(h, name);
    MUST(baton_lock_acquire(hl, 5000));
    int t0 = count_threads();
    long r0 = rss_kib();
    struct mallinfo2 m0 = mallinfo2();
    for (int i = 0; i < n; i++) ls[i] = lock_open(c, name);
    struct mallinfo2 m1 = mallinfo2();
    for (int i = 0; i < n; i++) CHECK_RC(baton_lock_acquire_async(ls[i], -1, on_count, NULL), 0);
    tl_sleep_ms(1000);
    struct mallinfo2 m2 = mallinfo2();
    int t1 = count_threads();
    long r1 = rss_kib();
    printf("threads: %d waiting async acquires: %d threads before, %d while waiting; RSS %ld -> %ld KiB "
           "(%.0f B per waiter); malloc: %.0f B per lock handle, %.0f B per waiting op (+ pool)\n",
           n, t0, t1, r0, r1, (double)(r1 - r0) * 1024.0 / n,
           (double)(m1.uordblks - m0.uordblks) / n, (double)(m2.uordblks - m1.uordblks) / n);
    if (!strncmp(g_uri, "file:", 5)) {
        /* native: the engine's one async waiter and its inotify watcher
         * (the worker pool alone made 65: 32 workers, each with the file
         * engine's kernel-wait helper) */
        CHECK(t1 - t0 <= 8);
    } else {
        /* the worker pool's bound (32), each with at most one engine helper */
        CHECK(t1 - t0 <= 2 * 32 + 8);
    }
    for (int i = 0; i < n; i++) baton_lock_cancel(ls[i]);
    int64_t end = tl_now_ms() + 60000;
    while (atomic_load(&g_threads_done) < n && tl_now_ms() < end) {
        struct pollfd p = { baton_client_fd(c), POLLIN, 0 };
        poll(&p, 1, 200);
        baton_client_process(c);
    }
    CHECK(atomic_load(&g_threads_done) == n);
    for (int i = 0; i < n; i++) baton_lock_free(ls[i]);
    /* held: NH handles on NH names, each granted through the async API (a
     * file lock keeps its fd open while held: stay under a 1,024 fd limit) */
    int nh = n;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)nh + 100 > rl.rlim_cur) nh = (int)rl.rlim_cur - 100;
    n = nh;
    struct mallinfo2 h0 = mallinfo2();
    res *rs = calloc((size_t)n, sizeof *rs);
    for (int i = 0; i < n; i++) {
        char nm[160];
        snprintf(nm, sizeof nm, "%s-held-%d", name, i);
        ls[i] = lock_open(c, nm);
        CHECK_RC(baton_lock_acquire_async(ls[i], 10000, on_done, &rs[i]), 0);
    }
    int granted = 0;
    int64_t end2 = tl_now_ms() + 60000;
    while (granted < n && tl_now_ms() < end2) {
        struct pollfd p = { baton_client_fd(c), POLLIN, 0 };
        poll(&p, 1, 200);
        baton_client_process(c);
        granted = 0;
        for (int i = 0; i < n; i++) granted += atomic_load(&rs[i].calls) == 1 && rs[i].rc == 0;
    }
    CHECK(granted == n);
    struct mallinfo2 h1 = mallinfo2();
    printf("held: %d locks granted through the async API: %.0f B malloc'd per held lock (handle included)\n",
           n, (double)(h1.uordblks - h0.uordblks) / n);
    for (int i = 0; i < n; i++) baton_lock_free(ls[i]);
    free(rs);
    free(ls);
    baton_lock_release(hl);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
}

/* A redis server of its own restarted while an async acquire waits: the op
 * completes (granted after the restart, or an error), never hangs. */
static void t_restart(void)
{
    char dir[1024], uri[256], name[128];
    const char *tmp = getenv("BATON_TEST_TMP");
    snprintf(dir, sizeof dir, "%s/async_restart_srv", tmp ? tmp : "/tmp");
    tl_mkdirs(dir);
    int port = tl_server_start("redis", dir, NULL);
    snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", port);
    baton_client_options o = BATON_CLIENT_OPTIONS_INIT;
    o.io_timeout_ms = 1000;
    o.connect_timeout_ms = 1000;
    baton_client *h = NULL, *c = NULL;
    MUST(baton_client_open(&h, uri, &o));
    MUST(baton_client_open(&c, uri, &o));
    name_new(name, sizeof name, "restart");
    baton_lock_options lo = BATON_LOCK_OPTIONS_INIT;
    lo.lease_ms = 2000;
    baton_lock *hl = NULL, *l = NULL;
    MUST(baton_lock_open(&hl, h, name, &lo));
    MUST(baton_lock_open(&l, c, name, &lo));
    MUST(baton_lock_acquire(hl, 5000));
    uint64_t hf = baton_lock_fence(hl);
    res r = { 0 };
    CHECK_RC(start_acquire(l, 30000, &r), 0);
    loop_until(c, &r, 300);
    CHECK(atomic_load(&r.calls) == 0);
    tl_server_restart("redis", dir);
    int64_t t0 = tl_now_ms();
    loop_until(c, &r, 40000);
    CHECK(atomic_load(&r.calls) == 1);
    fprintf(stderr, "restart: the waiting op completed %lld ms after the restart: %s (fence %llu, holder's %llu)\n",
            (long long)(tl_now_ms() - t0), baton_strerror(r.rc), (unsigned long long)r.fence,
            (unsigned long long)hf);
    if (r.rc == 0) {
        /* granted: then the holder lost it (no two holders at once) */
        tl_sleep_ms(2500);
        CHECK(!baton_lock_held(hl) || !baton_lock_held(l));
        res x = { 0 };
        CHECK_RC(start_release(l, &x), 0);
        loop_until(c, &x, 10000);
        CHECK(atomic_load(&x.calls) == 1);
    } else {
        CHECK(r.rc == BATON_ETIMEDOUT || r.rc == BATON_EUNAVAILABLE || r.rc == BATON_ELOST);
    }
    baton_lock_free(l);
    baton_lock_free(hl);
    baton_client_close(c);
    baton_client_close(h);
    tl_server_stop("redis", dir);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_async URI [restart | threads N]\n");
        return 2;
    }
    if (argc > 2 && !strcmp(argv[2], "restart")) {
        RUN(t_restart);
        return th_finish();
    }
    if (tl_uri_with_port(g_uri, sizeof g_uri, argv[1], NULL) != 0)
        tl_skip("no fixture server for this URI", 1);
    if (argc > 3 && !strcmp(argv[2], "threads")) {
        int n = atoi(argv[3]);
        th_current = "t_threads";
        t_threads(n > 0 ? n : 1000);
        return th_finish();
    }
    RUN(t_basic);
    RUN(t_contention);
    RUN(t_try_deadline_cancel);
    RUN(t_many_waiters);
    RUN(t_close_inflight);
    RUN(t_free_inflight);
    RUN(t_killed_holder);
    RUN(t_fair);
    RUN(t_renewal);
    RUN(t_loss);
    return th_finish();
}
