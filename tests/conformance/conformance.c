/*
 * The lock conformance suite: one binary, run by ctest once per backend.
 *
 *   test_conformance URI
 *
 * URI is any baton URI; "{port}" in it is replaced by the port of the test
 * server of its scheme's engine ($BATON_TEST_SRV/<engine>/port: redis for
 * redis:// and rediss://, zk for zk://; tl_uri_engine). A missing server is a skip (77)
 * unless BATON_REQUIRE_ALL=1. Lease-only cases are skipped for engines
 * without leases (the file backend: the kernel frees a dead holder's lock).
 *
 * Worker modes (the suite re-executes /proc/self/exe; it never forks without
 * exec, since it is threaded):
 *   test_conformance --worker incr URI NAME FILE M
 *   test_conformance --worker hold URI NAME LEASE_MS
 */
#include <baton.h>

#include <dirent.h>
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
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];
static char g_prefix[128];
static int g_leases;            /* the engine has leases (not the file backend) */
static int g_session_ms;        /* a session engine (ZooKeeper): its session timeout; no leases */
static int g_session_lease;     /* etcd: lock_info gives the TTL left of the holder's client lease */
static int g_conn_session;      /* a lock that lives on its connection (PostgreSQL and MySQL session and row modes):
                                   no lease, freed by the server as soon as the holder's connection
                                   closes, held as long as a stopped holder's connection stays open */
static const char *g_backend = "";

/* ---- small helpers ------------------------------------------------------ */

/* CPU time of the whole process (all threads), ms. */
static int64_t cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *lname(char *buf, size_t n, const char *suffix) {
    snprintf(buf, n, "%s%s", g_prefix, suffix);
    return buf;
}

static baton_client *client(void) { return tl_client_open(g_uri); }

static baton_lock *lock_on(baton_client *c, const char *name, const baton_lock_options *o) {
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, name, o);
    if (rc != 0) {
        fprintf(stderr, "FATAL: baton_lock_open(%s) = %d (%s)\n", name, rc, baton_strerror(rc));
        exit(1);
    }
    return l;
}

static int info_of(baton_client *c, const char *name, baton_lockinfo *info) {
    memset(info, 0, sizeof *info);
    info->version = BATON_LOCK_INFO_VERSION;
    return baton_lock_info(c, name, info);
}

/* A thread running one acquire. */
typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    int release_after;     /* release right after a grant */
    uint64_t fence;
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} acq_thread;

static void *acq_main(void *p) {
    acq_thread *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    a->fence = baton_lock_fence(a->l);
    if (a->rc == 0 && a->release_after) baton_lock_release(a->l);
    a->t_done = tl_now_ms();
    atomic_store(&a->done, 1);
    return NULL;
}

static void acq_start(acq_thread *a, baton_lock *l, int64_t wait_ms) {
    memset(a, 0, sizeof *a);
    a->l = l;
    a->wait_ms = wait_ms;
    atomic_init(&a->done, 0);
    pthread_create(&a->th, NULL, acq_main, a);
}

/* Waits until the thread is done or timeout; returns 1 when done. */
static int acq_wait(acq_thread *a, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && tl_now_ms() < end) tl_sleep_ms(5);
    return atomic_load(&a->done);
}

/* Joins, cancelling the acquire first if it is still blocked (so a failing
 * test never hangs the suite). */
static void acq_join(acq_thread *a) {
    if (!acq_wait(a, 0)) {
        baton_lock_cancel(a->l);
        if (!acq_wait(a, 5000)) {
            fprintf(stderr, "FATAL: an acquire ignores cancel; giving up\n");
            th_failed++;
            exit(th_finish());
        }
    }
    pthread_join(a->th, NULL);
}

static void worker_on_lost(baton_lock *l, void *payload) {
    (void)l;
    (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

/* Holds NAME and obeys commands on stdin: RELEASE, HELD?; EOF = exit. */
static int worker_hold(const char *uri, const char *name, uint32_t lease_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR open %d\n", rc);
        return 2;
    }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.on_lost = worker_on_lost;
    baton_lock *l = NULL;
    if ((rc = baton_lock_open(&l, c, name, &o)) != 0) {
        tl_out_line("ERR lock_open %d\n", rc);
        return 2;
    }
    if ((rc = baton_lock_acquire(l, 10000)) != 0) {
        tl_out_line("ERR acquire %d\n", rc);
        return 2;
    }
    tl_out_line("HELD %llu\n", (unsigned long long)baton_lock_fence(l));
    char line[64];
    for (;;) {
        int n = tl_read_line(0, line, sizeof line, 600000);
        if (n < 0) break;
        if (!strcmp(line, "RELEASE")) {
            rc = baton_lock_release(l);
            tl_out_line("RELEASE %d\n", rc);
        } else if (!strcmp(line, "HELD?")) {
            tl_out_line("HELD? %d\n", baton_lock_held(l));
        }
    }
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* M times: lock, read-modify-write FILE (non-atomic), append the fence to
 * FILE.fences, unlock. */
static int worker_incr(const char *uri, const char *name, const char *file, int m) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        fprintf(stderr, "worker: open %d\n", rc);
        return 2;
    }
    baton_lock *l = NULL;
    if ((rc = baton_lock_open(&l, c, name, NULL)) != 0) {
        fprintf(stderr, "worker: lock_open %d\n", rc);
        return 2;
    }
    char fpath[4200];
    snprintf(fpath, sizeof fpath, "%s.fences", file);
    int fd = open(file, O_RDWR | O_CLOEXEC);
    int ffd = open(fpath, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || ffd < 0) {
        perror("worker: open counter");
        return 2;
    }
    int bad = 0;
    for (int i = 0; i < m; i++) {
        if ((rc = baton_lock_acquire(l, 60000)) != 0) {
            fprintf(stderr, "worker: acquire %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
            break;
        }
        char buf[32] = { 0 };
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        long v = r > 0 ? strtol(buf, NULL, 10) : 0;
        usleep(100); /* widen the window a lost exclusion would show in */
        int len = snprintf(buf, sizeof buf, "%ld\n", v + 1);
        if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
        len = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)baton_lock_fence(l));
        if (write(ffd, buf, (size_t)len) != len) bad = 1;
        if ((rc = baton_lock_release(l)) != 0) {
            fprintf(stderr, "worker: release %d (%s)\n", rc, baton_strerror(rc));
            bad = 1;
        }
    }
    close(fd);
    close(ffd);
    baton_lock_free(l);
    baton_client_close(c);
    return bad ? 1 : 0;
}

/* ---- cases -------------------------------------------------------------- */

static void test_try(void) {
    char n[256];
    lname(n, sizeof n, "try");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL), *b = lock_on(c2, n, NULL);
    CHECK(!strcmp(baton_lock_name(a), n));
    CHECK(baton_lock_held(a) == 0);
    CHECK(baton_lock_fence(a) == 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK(baton_lock_held(a) == 1);
    CHECK(baton_lock_fence(a) > 0);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK(tl_now_ms() - t0 < 2000); /* a try does not wait */
    CHECK(baton_lock_held(b) == 0);
    CHECK(baton_lock_fence(b) == 0);
    /* another handle on the same client, used by another thread */
    baton_lock *a2 = lock_on(c1, n, NULL);
    acq_thread t;
    acq_start(&t, a2, 0);
    CHECK(acq_wait(&t, 5000));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(baton_lock_held(a) == 0);
    CHECK(baton_lock_fence(a) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(baton_lock_held(b) == 1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a2);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_bounded_wait(void) {
    char n[256];
    lname(n, sizeof n, "bounded");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL), *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 400), BATON_ETIMEDOUT);
    int64_t el = tl_now_ms() - t0;
    CHECK(el >= 350);   /* it did wait */
    CHECK(el < 400 + 3000);
    CHECK(baton_lock_held(b) == 0);
    CHECK(baton_lock_held(a) == 1);
    /* a bounded wait that is granted when the holder releases */
    acq_thread t;
    acq_start(&t, b, 10000);
    tl_sleep_ms(200);
    CHECK(!atomic_load(&t.done));
    int64_t t1 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&t, 10000));
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(t.t_done - t1 < 3000);
    CHECK(baton_lock_held(b) == 1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_unbounded_wait(void) {
    char n[256];
    lname(n, sizeof n, "unbounded");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL);
    baton_lock *b = lock_on(c2, n, NULL);
    baton_lock *b2 = lock_on(c1, n, NULL); /* same client, other thread */
    CHECK_RC(baton_lock_acquire(a, -1), 0);
    uint64_t fa = baton_lock_fence(a);
    acq_thread t, t2;
    acq_start(&t, b, -1);
    tl_sleep_ms(100);
    /* waiting does not burn CPU (no busy polling): generous bound */
    int64_t cpu0 = cpu_ms(), w0 = tl_now_ms();
    tl_sleep_ms(600);
    int64_t cpu = cpu_ms() - cpu0, wall = tl_now_ms() - w0;
    CHECK(cpu < wall / 4);
    if (cpu >= wall / 4) fprintf(stderr, "   %lld ms of CPU in %lld ms of waiting\n", (long long)cpu, (long long)wall);
    CHECK(!atomic_load(&t.done));
    int64_t t1 = tl_now_ms();
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(acq_wait(&t, 5000));
    acq_join(&t);
    CHECK_RC(t.rc, 0);
    CHECK(t.t_done - t1 < 2000); /* woken by the release, not by a lease running out */
    CHECK(t.fence > fa);
    /* now a waiter on the same client as the holder */
    acq_start(&t2, b2, -1);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t2.done));
    t1 = tl_now_ms();
    CHECK_RC(baton_lock_release(b), 0);
    CHECK(acq_wait(&t2, 5000));
    acq_join(&t2);
    CHECK_RC(t2.rc, 0);
    CHECK(t2.t_done - t1 < 2000);
    CHECK(t2.fence > t.fence);
    CHECK_RC(baton_lock_release(b2), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(b2);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* ---- exclusion across threads ---- */

#define T_THREADS 4
#define T_ITERS 100

static volatile long g_counter;
static atomic_int g_inside, g_overlap, g_thread_errors;
static uint64_t g_tfences[T_THREADS][T_ITERS];

typedef struct {
    baton_client *c;
    const char *name;
    int idx;
} excl_arg;

static void *excl_main(void *p) {
    excl_arg *x = p;
    baton_lock *l = NULL;
    if (baton_lock_open(&l, x->c, x->name, NULL) != 0) {
        atomic_fetch_add(&g_thread_errors, 1);
        return NULL;
    }
    for (int i = 0; i < T_ITERS; i++) {
        int rc = baton_lock_acquire(l, 60000);
        if (rc != 0) {
            fprintf(stderr, "thread %d: acquire %d (%s)\n", x->idx, rc, baton_strerror(rc));
            atomic_fetch_add(&g_thread_errors, 1);
            break;
        }
        if (atomic_fetch_add(&g_inside, 1) != 0) atomic_fetch_add(&g_overlap, 1);
        g_tfences[x->idx][i] = baton_lock_fence(l);
        long v = g_counter;
        for (volatile int k = 0; k < 2000; k++) {
        }
        g_counter = v + 1;
        atomic_fetch_sub(&g_inside, 1);
        if ((rc = baton_lock_release(l)) != 0) {
            fprintf(stderr, "thread %d: release %d (%s)\n", x->idx, rc, baton_strerror(rc));
            atomic_fetch_add(&g_thread_errors, 1);
        }
    }
    baton_lock_free(l);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_exclusion_threads(void) {
    char n[256];
    lname(n, sizeof n, "threads");
    baton_client *c = client();
    pthread_t th[T_THREADS];
    excl_arg args[T_THREADS];
    g_counter = 0;
    for (int i = 0; i < T_THREADS; i++) {
        args[i] = (excl_arg){ c, n, i };
        pthread_create(&th[i], NULL, excl_main, &args[i]);
    }
    for (int i = 0; i < T_THREADS; i++) pthread_join(th[i], NULL);
    CHECK(atomic_load(&g_thread_errors) == 0);
    CHECK(atomic_load(&g_overlap) == 0);
    CHECK(g_counter == T_THREADS * T_ITERS);
    /* every grant has its own fence */
    static uint64_t all[T_THREADS * T_ITERS];
    memcpy(all, g_tfences, sizeof all);
    qsort(all, T_THREADS * T_ITERS, sizeof all[0], cmp_u64);
    int dup = 0;
    for (int i = 1; i < T_THREADS * T_ITERS; i++)
        if (all[i] == all[i - 1]) dup++;
    CHECK(dup == 0);
    CHECK(all[0] > 0);
    /* each thread saw its own fences increase */
    int nondec = 0;
    for (int t = 0; t < T_THREADS; t++)
        for (int i = 1; i < T_ITERS; i++)
            if (g_tfences[t][i] <= g_tfences[t][i - 1]) nondec++;
    CHECK(nondec == 0);
    baton_client_close(c);
}

/* ---- exclusion across processes ---- */

#define P_PROCS 4
#define P_ITERS 50

static void test_exclusion_processes(const char *tmpdir) {
    char n[256], file[1200], fences[1300];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/counter-%s", tmpdir, g_backend);
    snprintf(fences, sizeof fences, "%s.fences", file);
    int fd = open(file, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && write(fd, "0\n", 2) == 2);
    if (fd >= 0) close(fd);
    fd = open(fences, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    tl_worker w[P_PROCS];
    char m[16];
    snprintf(m, sizeof m, "%d", P_ITERS);
    for (int i = 0; i < P_PROCS; i++) {
        char *argv[] = { "test_conformance", "--worker", "incr", g_uri, n, file, m, NULL };
        CHECK(tl_worker_spawn(&w[i], argv) == 0);
    }
    for (int i = 0; i < P_PROCS; i++) {
        int st = tl_worker_reap(&w[i], 120000);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    FILE *f = fopen(file, "r");
    long total = -1;
    if (f) {
        if (fscanf(f, "%ld", &total) != 1) total = -1;
        fclose(f);
    }
    CHECK(total == P_PROCS * P_ITERS);
    if (total != P_PROCS * P_ITERS) fprintf(stderr, "   counter = %ld, want %d\n", total, P_PROCS * P_ITERS);
    /* fences, appended under the lock in grant order, strictly increase */
    f = fopen(fences, "r");
    unsigned long long prev = 0, cur;
    int count = 0, bad = 0;
    if (f) {
        while (fscanf(f, "%llu", &cur) == 1) {
            if (cur <= prev) bad++;
            prev = cur;
            count++;
        }
        fclose(f);
    }
    CHECK(count == P_PROCS * P_ITERS);
    CHECK(bad == 0);
    if (total == P_PROCS * P_ITERS && bad == 0) {
        unlink(file);
        unlink(fences);
        rmdir(tmpdir);
    }
}

static void test_fences(void) {
    char n[256];
    lname(n, sizeof n, "fences");
    baton_client *c[3] = { client(), client(), client() };
    baton_lock *l[3];
    for (int i = 0; i < 3; i++) l[i] = lock_on(c[i], n, NULL);
    uint64_t prev = 0;
    int bad = 0;
    for (int k = 0; k < 12; k++) {
        baton_lock *x = l[k % 3];
        CHECK_RC(baton_lock_acquire(x, 5000), 0);
        uint64_t f = baton_lock_fence(x);
        if (f <= prev) {
            bad++;
            fprintf(stderr, "   grant %d: fence %llu after %llu\n", k, (unsigned long long)f,
                    (unsigned long long)prev);
        }
        prev = f;
        CHECK_RC(baton_lock_release(x), 0);
    }
    CHECK(bad == 0);
    /* a new client sees the last fence and continues above it */
    baton_client *c4 = client();
    baton_lockinfo info;
    CHECK_RC(info_of(c4, n, &info), 0);
    CHECK(info.fence == prev);
    CHECK(info.held == 0);
    baton_lock *l4 = lock_on(c4, n, NULL);
    CHECK_RC(baton_lock_acquire(l4, 0), 0);
    CHECK(baton_lock_fence(l4) > prev);
    baton_lock_free(l4); /* releases */
    baton_client_close(c4);
    for (int i = 0; i < 3; i++) {
        baton_lock_free(l[i]);
        baton_client_close(c[i]);
    }
}

static void test_reentrant(void) {
    char n[256];
    lname(n, sizeof n, "reentrant");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.reentrant = 1;
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    CHECK_RC(baton_lock_acquire(a, 1000), 0);
    CHECK(baton_lock_fence(a) >= f1 && baton_lock_fence(a) > 0);
    CHECK_RC(baton_lock_acquire(a, -1), 0); /* third level; must not block */
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0); /* the last one */
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(b, 2000), 0);
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(b), 0);

    /* reentrant: another thread using another handle of the same client is
     * a different owner and is excluded */
    baton_lock *a2 = lock_on(c1, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq_thread t;
    acq_start(&t, a2, 0);
    CHECK(acq_wait(&t, 5000));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a2);

    /* not reentrant: the second acquire from the holding thread fails fast */
    baton_lock *d = lock_on(c1, n, NULL);
    CHECK_RC(baton_lock_acquire(d, 0), 0);
    int64_t t0 = tl_now_ms();
    int rc = baton_lock_acquire(d, 3000);
    CHECK_RC(rc, BATON_EDEADLK);
    CHECK(tl_now_ms() - t0 < 1500);
    if (rc == BATON_EDEADLK) { /* only then is a forever wait safe to try */
        t0 = tl_now_ms();
        CHECK_RC(baton_lock_acquire(d, -1), BATON_EDEADLK);
        CHECK(tl_now_ms() - t0 < 1500);
    }
    CHECK(baton_lock_held(d) == 1);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    /* a handle held by one thread cannot be acquired from another */
    acq_start(&t, d, 0);
    CHECK(acq_wait(&t, 5000));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_EINVAL);
    acq_start(&t, d, 1000);
    CHECK(acq_wait(&t, 5000));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_EINVAL);
    CHECK(baton_lock_held(d) == 1);
    CHECK_RC(baton_lock_release(d), 0);
    CHECK(baton_lock_held(d) == 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(d);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static atomic_int g_lost_calls;
static void count_lost(baton_lock *l, void *payload) {
    (void)l;
    atomic_fetch_add(&g_lost_calls, 1);
    if (payload) atomic_fetch_add((atomic_int *)payload, 1);
}

static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The thread count once threads of earlier cases (a closed client's
 * workers on their way out) are gone: the same for 100 ms, 3 s at most. */
static int settled_thread_count(void) {
    int n = thread_count();
    for (int i = 0, same = 0; i < 300 && same < 10; i++) {
        tl_sleep_ms(10);
        int m = thread_count();
        same = m == n ? same + 1 : 0;
        n = m;
    }
    return n;
}

/* A client starts its renewal thread with its first leased lock: an engine
 * without leases (file) never has one; one with leases has it while locks
 * are held and joins it on close. */
static void test_keeper_thread(void) {
    char n[256];
    lname(n, sizeof n, "keeper");
    int t0 = settled_thread_count();
    baton_client *c = client();
    baton_lock *a = lock_on(c, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    int t1 = thread_count();
    CHECK_RC(baton_lock_release(a), 0);
    if (g_session_ms || g_conn_session) {
        /* the session's own threads exist from open, or the keeper checks
         * the holding connection */
    } else if (!g_leases) {
        CHECK(t1 == t0);
        if (t1 != t0) fprintf(stderr, "   threads %d -> %d with a file lock held\n", t0, t1);
    } else {
        CHECK(t1 > t0);
    }
    baton_lock_free(a);
    baton_client_close(c);
    CHECK(settled_thread_count() == t0); /* closing the client joined its threads */
}

static void test_renewal_keeps_lock(void) {
    char n[256];
    lname(n, sizeof n, "renewal");
    baton_client *c1 = client(), *c2 = client();
    atomic_int lost;
    atomic_init(&lost, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 600;
    o.on_lost = count_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f = baton_lock_fence(a);
    int64_t end = tl_now_ms() + 2500;
    int locked = 0, held = 0, rounds = 0, remaining_ok = 0;
    while (tl_now_ms() < end) {
        tl_sleep_ms(250);
        rounds++;
        if (baton_lock_acquire(b, 0) == BATON_ELOCKED) locked++;
        if (baton_lock_held(a) == 1) held++;
        baton_lockinfo info;
        /* RedLock nodes keep a key for lease + drift (1% + 2 ms), a few ms
         * over the lease; more would mean a lease longer than asked */
        if (info_of(c2, n, &info) == 0 && info.held == 1 && info.fence == f &&
            (!g_leases || (info.remaining_ms > 0 && info.remaining_ms <= 600 + 600 / 100 + 2 + 5)))
            remaining_ok++;
    }
    CHECK(locked == rounds);
    CHECK(held == rounds);
    CHECK(remaining_ok == rounds);
    CHECK(baton_lock_fence(a) == f);
    CHECK_RC(baton_lock_release(a), 0);
    tl_sleep_ms(100);
    CHECK(atomic_load(&lost) == 0); /* renewed, never lost; a release is not a loss */
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_fixed_lease_expires(void) {
    char n[256];
    lname(n, sizeof n, "fixed");
    baton_client *c1 = client(), *c2 = client();
    atomic_int lost;
    atomic_init(&lost, 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 500;
    o.fixed_lease = 1;
    o.on_lost = count_lost;
    o.on_lost_payload = &lost;
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, NULL);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    CHECK_RC(baton_lock_acquire(b, 5000), 0);
    int64_t el = tl_now_ms() - t0;
    CHECK(el >= 400);       /* not before the lease ran out */
    CHECK(el < 500 + 3000);
    CHECK(baton_lock_fence(b) > fa);
    CHECK(baton_lock_held(a) == 0);
    /* the owner check: A's stale release does not touch B's lock */
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK(baton_lock_held(b) == 1);
    baton_client *c3 = client();
    baton_lock *x = lock_on(c3, n, NULL);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    baton_lockinfo info;
    CHECK_RC(info_of(c3, n, &info), 0);
    CHECK(info.held == 1);
    CHECK(info.fence == baton_lock_fence(b));
    CHECK(info.remaining_ms > 0);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    CHECK_RC(baton_lock_release(x), 0);
    /* (whether on_lost runs when a fixed lease simply runs out is not part
     * of the contract; it must not run twice) */
    CHECK(atomic_load(&lost) <= 1);
    baton_lock_free(x);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* Owner-checked release: a fixed-lease holder expires, B acquires; A's
 * release must not release B's lock. Also A re-acquiring works after. */
static void test_owner_checked(void) {
    char n[256];
    lname(n, sizeof n, "owner");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 300;
    o.fixed_lease = 1;
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    tl_sleep_ms(700);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    uint64_t fb = baton_lock_fence(b);
    CHECK(fb > fa);
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    CHECK(baton_lock_held(b) == 1);
    /* A (a stale owner) now competes normally */
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOCKED);
    baton_lockinfo info;
    CHECK_RC(info_of(c1, n, &info), 0);
    CHECK(info.held == 1 && info.fence == fb);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK(baton_lock_fence(a) > fb);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

static int start_holder(tl_worker *w, const char *name, uint32_t lease_ms, uint64_t *fence) {
    char lease[16];
    snprintf(lease, sizeof lease, "%u", lease_ms);
    char *argv[] = { "test_conformance", "--worker", "hold", g_uri, (char *)name, lease, NULL };
    if (tl_worker_spawn(w, argv) != 0) return -1;
    char line[128];
    if (tl_read_line(w->from, line, sizeof line, 15000) < 0) return -1;
    unsigned long long f = 0;
    if (sscanf(line, "HELD %llu", &f) != 1) {
        fprintf(stderr, "   holder said: %s\n", line);
        return -1;
    }
    *fence = f;
    return 0;
}

static void test_sigstop_holder(void) {
    char n[256];
    lname(n, sizeof n, "sigstop");
    /* a session engine: the server ends the stopped holder's session after
     * its timeout; the resumed holder hears so on its first exchange */
    const uint32_t lease = g_session_ms ? (uint32_t)g_session_ms : 1000;
    const uint32_t renew = g_session_ms ? (uint32_t)g_session_ms : lease / 3;
    tl_worker w;
    uint64_t f1 = 0;
    int ok = start_holder(&w, n, lease, &f1) == 0;
    CHECK(ok);
    if (!ok) return;
    baton_client *c2 = client(), *c3 = client();
    baton_lock *b = lock_on(c2, n, NULL), *x = lock_on(c3, n, NULL);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    kill(w.pid, SIGSTOP);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, lease + 5000), 0);
    CHECK(tl_now_ms() - t0 < lease + 5000);
    uint64_t fb = baton_lock_fence(b);
    CHECK(fb > f1);
    /* stay stopped past its own renewal deadline too */
    tl_sleep_ms(300);
    kill(w.pid, SIGCONT);
    int64_t t1 = tl_now_ms();
    char line[128];
    int got = tl_read_line(w.from, line, sizeof line, (int)renew + 2000);
    CHECK(got >= 0 && !strcmp(line, "LOST"));
    if (got >= 0) CHECK(tl_now_ms() - t1 <= renew + 2000);
    else fprintf(stderr, "   no LOST from the resumed holder\n");
    tl_send_line(&w, "HELD?\n");
    got = tl_read_line(w.from, line, sizeof line, 5000);
    CHECK(got >= 0 && !strcmp(line, "HELD? 0"));
    tl_send_line(&w, "RELEASE\n");
    got = tl_read_line(w.from, line, sizeof line, 5000);
    char want[32];
    snprintf(want, sizeof want, "RELEASE %d", BATON_ELOST);
    CHECK(got >= 0 && !strcmp(line, want));
    if (got >= 0 && strcmp(line, want)) fprintf(stderr, "   holder said: %s\n", line);
    /* the stale holder never touched B's lock */
    CHECK(baton_lock_held(b) == 1);
    CHECK_RC(baton_lock_acquire(x, 0), BATON_ELOCKED);
    baton_lockinfo info;
    CHECK_RC(info_of(c3, n, &info), 0);
    CHECK(info.held == 1 && info.fence == fb);
    close(w.to);
    w.to = -1;
    int st = tl_worker_reap(&w, 10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(x, 0), 0);
    CHECK(baton_lock_fence(x) > fb);
    CHECK_RC(baton_lock_release(x), 0);
    baton_lock_free(b);
    baton_lock_free(x);
    baton_client_close(c2);
    baton_client_close(c3);
}

/* Session engines have no lease to fix: they say so instead of ignoring it. */
/* baton_lock_force_unlock (the API of `baton unlock --force`): the holder is
 * removed, the fence bumped past its grant, and the next grant is larger
 * still; the file engine refuses (the kernel keeps a live process's lock). */
static void test_force_unlock(void) {
    char n[256];
    lname(n, sizeof n, "force");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL), *b = lock_on(c2, n, NULL);
    uint64_t f = 0;
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    if (!strcmp(g_backend, "file")) {
        CHECK_RC(baton_lock_force_unlock(c2, n, &f), BATON_ENOTSUP);
        CHECK_RC(baton_lock_release(a), 0);
    } else {
        CHECK_RC(baton_lock_force_unlock(c2, n, &f), 0);
        CHECK(f > fa);
        CHECK_RC(baton_lock_acquire(b, 10000), 0);
        CHECK(baton_lock_fence(b) > f);
        CHECK_RC(baton_lock_release(b), 0);
        CHECK_RC(baton_lock_force_unlock(c2, n, &f), BATON_ENOTHELD);
    }
    CHECK_RC(baton_lock_force_unlock(c2, "", &f), BATON_EINVAL);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* baton_lock_extend on a fixed lease: longer (still held past the first
 * lease), then shorter (another client gets it well before the longer one
 * would have ended); not held, too short, and lost answer as documented. */
static void test_extend(void) {
    char n[256];
    lname(n, sizeof n, "extend");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 800;
    o.fixed_lease = 1;
    baton_lock *a = lock_on(c1, n, &o), *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_extend(a, 5000), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_extend(a, 5), BATON_EINVAL);
    CHECK_RC(baton_lock_extend(a, 60000), 0);
    tl_sleep_ms(1500);                  /* past the first lease */
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    int64_t d = 0, now = baton_now_ns();
    CHECK_RC(baton_lock_deadline(a, &d), 0);
    CHECK(d - now > 30000LL * 1000000);   /* the new lease counts */
    /* shorter: 60 s would keep B out for the whole wait */
    CHECK_RC(baton_lock_extend(a, 600), 0);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 10000), 0);
    CHECK(tl_now_ms() - t0 < 10000);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_extend(a, 5000), BATON_ELOST);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Without a lease of its own, extend changes nothing and says so with 0. */
static void test_extend_no_lease(void) {
    char n[256];
    lname(n, sizeof n, "extendno");
    baton_client *c = client();
    baton_lock *a = lock_on(c, n, NULL);
    CHECK_RC(baton_lock_extend(a, 5000), BATON_ENOTHELD);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_extend(a, 5000), 0);
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_client_close(c);
}

static void test_fixed_lease_refused(void) {
    char n[256];
    lname(n, sizeof n, "fixedno");
    baton_client *c = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fixed_lease = 1;
    baton_lock *a = (baton_lock *)1;
    CHECK_RC(baton_lock_open(&a, c, n, &o), BATON_ENOTSUP);
    CHECK(a == NULL);
    baton_client_close(c);
}

static void test_sigkill_holder(void) {
    char n[256];
    lname(n, sizeof n, "sigkill");
    const uint32_t lease = 1500;
    tl_worker w;
    uint64_t f1 = 0;
    int ok = start_holder(&w, n, lease, &f1) == 0;
    CHECK(ok);
    if (!ok) return;
    baton_client *c2 = client();
    baton_lock *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    kill(w.pid, SIGKILL);
    int64_t t0 = tl_now_ms();
    int st = tl_worker_reap(&w, 10000);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    if (g_leases) {
        /* the engine cannot know the holder died: its lease still stands */
        if (tl_now_ms() - t0 < lease / 2) CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
        CHECK_RC(baton_lock_acquire(b, lease + 3000), 0);
        CHECK(tl_now_ms() - t0 < lease + 3000);
    } else if (g_conn_session) {
        /* the server sees the connection close and frees it at once (give
         * the server a moment to notice) */
        CHECK_RC(baton_lock_acquire(b, 3000), 0);
        CHECK(tl_now_ms() - t0 < 3000);
    } else if (g_session_ms) {
        /* the server ends the dead holder's session after its timeout */
        CHECK_RC(baton_lock_acquire(b, g_session_ms + 5000), 0);
        CHECK(tl_now_ms() - t0 < g_session_ms + 5000);
    } else {
        CHECK_RC(baton_lock_acquire(b, 0), 0); /* freed at once by the kernel */
    }
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(b);
    baton_client_close(c2);
}

static void test_cancel(void) {
    char n[256];
    lname(n, sizeof n, "cancel");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL), *b = lock_on(c2, n, NULL), *b2 = lock_on(c1, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    /* forever wait, other client */
    acq_thread t;
    acq_start(&t, b, -1);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_cancel(b), 0);
    CHECK(acq_wait(&t, 3000));
    CHECK(t.t_done - t0 < 1000 || !atomic_load(&t.done));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_ECANCELED);
    CHECK(baton_lock_held(b) == 0);
    /* bounded wait, same client as the holder */
    acq_start(&t, b2, 20000);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    t0 = tl_now_ms();
    CHECK_RC(baton_lock_cancel(b2), 0);
    CHECK(acq_wait(&t, 3000));
    CHECK(t.t_done - t0 < 1000 || !atomic_load(&t.done));
    acq_join(&t);
    CHECK_RC(t.rc, BATON_ECANCELED);
    /* the holder is unaffected, and the cancelled handles work afterwards */
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_acquire(b, 2000), 0);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(b2, 2000), 0);
    CHECK_RC(baton_lock_release(b2), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_lock_free(b2);
    baton_client_close(c1);
    baton_client_close(c2);
}

static void test_close_releases(void) {
    char n[256], n2[256];
    lname(n, sizeof n, "close");
    lname(n2, sizeof n2, "close2");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL);
    baton_lock *a2 = lock_on(c1, n2, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_acquire(a2, 0), 0);
    baton_lock *b = lock_on(c2, n, NULL), *b2 = lock_on(c2, n2, NULL);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    baton_client_close(c1); /* with the lock handles still open and held */
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK_RC(baton_lock_acquire(b2, 0), 0);
    baton_lock_free(a);     /* handles outlive their client until freed */
    baton_lock_free(a2);
    baton_lock_free(b);
    baton_lock_free(b2);
    baton_client_close(c2);
}

static void test_info(void) {
    char n[256], fresh[256];
    lname(n, sizeof n, "info");
    lname(fresh, sizeof fresh, "info-never-used");
    baton_client *c1 = client(), *c2 = client();
    baton_lockinfo info;
    CHECK_RC(info_of(c2, fresh, &info), 0);
    CHECK(info.held == 0);
    CHECK(info.fence == 0);
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 20000;
    baton_lock *a = lock_on(c1, n, &o);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(info_of(c2, n, &info), 0);
    CHECK(info.held == 1);
    CHECK(info.fence == baton_lock_fence(a));
    char pid[32];
    snprintf(pid, sizeof pid, " %ld ", (long)getpid());
    CHECK(strstr(info.holder, pid) != NULL);
    if (!strstr(info.holder, pid)) fprintf(stderr, "   holder \"%s\" lacks \"%s\"\n", info.holder, pid);
    if (g_leases) CHECK(info.remaining_ms > 0 && info.remaining_ms <= 20000);
    /* etcd: the TTL left of the holder's client lease (issue 14: info gives it) */
    else if (g_session_lease) CHECK(info.remaining_ms > 0 && info.remaining_ms <= g_session_ms);
    else CHECK(info.remaining_ms == -1);
    /* the holder's own client sees the same */
    baton_lockinfo mine;
    CHECK_RC(info_of(c1, n, &mine), 0);
    CHECK(mine.held == 1 && mine.fence == info.fence);
    uint64_t f = baton_lock_fence(a);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(info_of(c2, n, &info), 0);
    CHECK(info.held == 0);
    CHECK(info.fence == f); /* the last fence granted */
    CHECK_RC(info_of(c2, "", &info), BATON_EINVAL);
    CHECK_RC(baton_lock_info(c2, n, NULL), BATON_EINVAL);
    baton_lock_free(a);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* One client shared by threads: a thread blocked on one lock does not hold
 * up other threads' operations on other locks of the same client. */
static void test_shared_client_progress(void) {
    char nx[256], ny[256];
    lname(nx, sizeof nx, "progress-x");
    lname(ny, sizeof ny, "progress-y");
    baton_client *c = client(), *c2 = client();
    baton_lock *hold = lock_on(c2, nx, NULL);
    CHECK_RC(baton_lock_acquire(hold, 0), 0);
    baton_lock *wx = lock_on(c, nx, NULL), *wx2 = lock_on(c, nx, NULL);
    acq_thread t1, t2;
    acq_start(&t1, wx, -1);
    acq_start(&t2, wx2, 30000);
    tl_sleep_ms(200);
    baton_lock *y = lock_on(c, ny, NULL);
    int64_t t0 = tl_now_ms();
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        if (baton_lock_acquire(y, 0) != 0) bad++;
        if (baton_lock_release(y) != 0) bad++;
    }
    int64_t el = tl_now_ms() - t0;
    CHECK(bad == 0);
    CHECK(el < 3000); /* 40 round trips, not stuck behind the blocked waiters */
    if (el >= 3000) fprintf(stderr, "   20 acquire/release pairs took %lld ms\n", (long long)el);
    baton_lockinfo info;
    CHECK_RC(info_of(c, nx, &info), 0);
    CHECK(info.held == 1);
    CHECK(!atomic_load(&t1.done) && !atomic_load(&t2.done));
    CHECK_RC(baton_lock_release(hold), 0);
    /* both waiters get it in turn */
    int64_t end = tl_now_ms() + 10000;
    int granted = 0;
    while (tl_now_ms() < end && granted < 2) {
        if (atomic_load(&t1.done) && t1.rc == 0 && baton_lock_held(wx)) {
            CHECK_RC(baton_lock_acquire(y, 0), 0); /* still usable meanwhile */
            CHECK_RC(baton_lock_release(y), 0);
            pthread_join(t1.th, NULL);
            CHECK_RC(baton_lock_release(wx), 0);
            t1.rc = 1;
            granted++;
        }
        if (atomic_load(&t2.done) && t2.rc == 0 && baton_lock_held(wx2)) {
            pthread_join(t2.th, NULL);
            CHECK_RC(baton_lock_release(wx2), 0);
            t2.rc = 1;
            granted++;
        }
        tl_sleep_ms(5);
    }
    CHECK(granted == 2);
    if (granted < 2) {
        if (t1.rc != 1) acq_join(&t1);
        if (t2.rc != 1) acq_join(&t2);
    }
    baton_lock_free(wx);
    baton_lock_free(wx2);
    baton_lock_free(y);
    baton_lock_free(hold);
    baton_client_close(c);
    baton_client_close(c2);
}

/* fair=1: FIFO grants where the engine can, else BATON_ENOTSUP (at open or
 * at acquire) -- never silently unfair and never a crash. */
static void test_fair_option(void) {
    char n[256];
    lname(n, sizeof n, "fair");
    baton_client *c = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.fair = 1;
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, n, &o);
    if (rc == 0) {
        rc = baton_lock_acquire(l, 0);
        if (rc == 0) CHECK_RC(baton_lock_release(l), 0);
        baton_lock_free(l);
    }
    CHECK(rc == 0 || rc == BATON_ENOTSUP);
    fprintf(stderr, "   fair=1: %s\n", rc == 0 ? "supported" : baton_strerror(rc));
    baton_client_close(c);
}

/* ---- main --------------------------------------------------------------- */

/* The lifetime rule (baton.h): close and free in any order. */
static void test_cancel_before_acquire(void) {
    char n[256];
    lname(n, sizeof n, "cancel-before");
    baton_client *c = client();
    baton_lock *a = lock_on(c, n, NULL);
    /* A cancel with no acquire in flight is kept: the next acquire ends at
     * once, even a try on a free lock; the one after that is not affected. */
    CHECK_RC(baton_lock_cancel(a), 0);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(a, 20000), BATON_ECANCELED);
    CHECK(tl_now_ms() - t0 < 1000);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK_RC(baton_lock_release(a), 0);
    /* a multilock keeps it too, and does not leave it on its members */
    baton_lock *b = lock_on(c, n, NULL);
    char n2[256];
    baton_lock *b2 = lock_on(c, lname(n2, sizeof n2, "cancel-before-2"), NULL);
    baton_lock *ml[2] = { b, b2 };
    baton_multilock *m = NULL;
    CHECK_RC(baton_multilock_open(&m, ml, 2), 0);
    if (m) {
        CHECK_RC(baton_multilock_cancel(m), 0);
        CHECK_RC(baton_multilock_acquire(m, 20000), BATON_ECANCELED);
        CHECK_RC(baton_multilock_acquire(m, 2000), 0);
        CHECK_RC(baton_multilock_release(m), 0);
        baton_multilock_free(m);
    }
    CHECK_RC(baton_lock_acquire(b2, 0), 0);
    CHECK_RC(baton_lock_release(b2), 0);
    baton_lock_free(b);
    baton_lock_free(b2);
    baton_lock_free(a);
    baton_client_close(c);
}

static void test_close_wakes_waiters(void) {
    char n[256];
    lname(n, sizeof n, "close-wakes");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL), *b = lock_on(c2, n, NULL), *held2 = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    acq_thread t;
    acq_start(&t, b, -1);
    tl_sleep_ms(300);
    CHECK(!atomic_load(&t.done));
    /* Closing the waiter's client wakes it with ECANCELED and waits for it
     * to leave; the handles stay valid (answering ECANCELED) until freed. */
    int64_t t0 = tl_now_ms();
    baton_client_close(c2);
    CHECK(tl_now_ms() - t0 < 5000);
    CHECK(acq_wait(&t, 3000));
    if (atomic_load(&t.done)) {
        pthread_join(t.th, NULL);
        CHECK_RC(t.rc, BATON_ECANCELED);
    } else {
        acq_join(&t);
    }
    CHECK(baton_lock_held(b) == 0);
    CHECK(baton_lock_fence(b) == 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ECANCELED);
    CHECK_RC(baton_lock_release(held2), BATON_ECANCELED);
    CHECK_RC(baton_lock_cancel(b), 0);
    CHECK(baton_lock_name(b) && strcmp(baton_lock_name(b), n) == 0);
    baton_lock_free(b);
    baton_lock_free(held2);
    /* the holder is untouched */
    CHECK(baton_lock_held(a) == 1);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_client_close(c1);
}

static void test_free_after_close(void) {
    char n[256];
    lname(n, sizeof n, "free-after");
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, NULL);
    baton_rwlock *rw = NULL;
    baton_semaphore *s = NULL;
    baton_permits *p = NULL;
    baton_latch *l = NULL;
    baton_election *e = NULL;
    char rn[256], sn[256], pn[256], ln[256], en[256];
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    /* whatever this engine has: ENOTSUP for the rest */
    if (baton_rwlock_open(&rw, c1, lname(rn, sizeof rn, "free-after-rw"), NULL) == 0)
        CHECK_RC(baton_lock_acquire(baton_rwlock_read(rw), 0), 0);
    if (baton_semaphore_open(&s, c1, lname(sn, sizeof sn, "free-after-sem")) == 0) {
        int set = 0;
        CHECK_RC(baton_semaphore_try_set(s, 2, &set), 0);
    }
    if (baton_permits_open(&p, c1, lname(pn, sizeof pn, "free-after-permits")) == 0) {
        int set = 0;
        CHECK_RC(baton_permits_try_set(p, 2, &set), 0);
    }
    baton_latch_open(&l, c1, lname(ln, sizeof ln, "free-after-latch"));
    if (baton_election_open(&e, c1, lname(en, sizeof en, "free-after-elect"), NULL) == 0)
        CHECK_RC(baton_election_campaign(e, "x", 0), 0);
    baton_client_close(c1);   /* releases all of it; every handle stays until freed */
    baton_lock *b = lock_on(c2, n, NULL);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(baton_lock_held(a) == 0);
    CHECK_RC(baton_lock_release(a), BATON_ECANCELED);
    if (s) {
        uint64_t v = 0;
        CHECK_RC(baton_semaphore_available(s, &v), BATON_ECANCELED);
        CHECK_RC(baton_semaphore_acquire(s, 1, 0), BATON_ECANCELED);
    }
    if (p) {
        char id[BATON_PERMIT_ID_SIZE];
        CHECK_RC(baton_permits_acquire(p, 1000, 0, id), BATON_ECANCELED);
    }
    if (l) CHECK_RC(baton_latch_await(l, 0), BATON_ECANCELED);
    if (e) {
        CHECK(baton_election_is_leader(e) == 0);
        CHECK_RC(baton_election_leader(e, NULL, 0, NULL), BATON_ECANCELED);
        CHECK_RC(baton_election_observe(e, NULL, 0, NULL, 10), BATON_ECANCELED);
    }
    baton_election_free(e);
    baton_latch_free(l);
    baton_permits_free(p);
    baton_semaphore_free(s);
    baton_rwlock_free(rw);
    baton_lock_free(a);
    CHECK_RC(baton_lock_release(b), 0);
    baton_lock_free(b);
    baton_client_close(c2);
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--worker")) {
        if (argc == 7 && !strcmp(argv[2], "incr")) return worker_incr(argv[3], argv[4], argv[5], atoi(argv[6]));
        if (argc == 6 && !strcmp(argv[2], "hold"))
            return worker_hold(argv[3], argv[4], (uint32_t)strtoul(argv[5], NULL, 10));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    if (argc != 2) {
        fprintf(stderr, "usage: %s URI\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* the URI, with {port} taken from the test server of its engine */
    const char *uri = argv[1];
    if (tl_uri_with_port(g_uri, sizeof g_uri, uri, NULL) != 0) {
        char why[256];
        snprintf(why, sizeof why, "no test %s server (no port file)", tl_uri_engine(uri) ? tl_uri_engine(uri) : "?");
        return tl_skip_status(why, 1);
    }

    /* a scratch dir for counter files; the file backend's dir */
    char tmpdir[1024];
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(tmpdir, sizeof tmpdir, "%s/conformance-scratch-%ld", tt ? tt : ".", (long)getpid());
    tl_mkdirs(tmpdir);
    if (!strncmp(g_uri, "file://", 7)) tl_mkdirs(g_uri + 7);

    baton_client *c = NULL;
    int rc = baton_client_open(&c, g_uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FAIL: baton_client_open(%s) = %d (%s): %s\n", g_uri, rc, baton_strerror(rc),
                baton_error_last()->message ? baton_error_last()->message : "");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    static char backend[32];
    snprintf(backend, sizeof backend, "%s", baton_client_backend(c));
    g_backend = backend;
    g_leases = strcmp(g_backend, "file") != 0;
    if (!strcmp(g_backend, "zk")) {
        const char *p = strstr(g_uri, "session_timeout_ms=");
        g_leases = 0;
        g_session_ms = p ? atoi(p + strlen("session_timeout_ms=")) : 10000;
    }
    if (!strcmp(g_backend, "etcd")) {
        /* a session engine too: every lock lives on the client's lease (ttl=
         * seconds, default 30), kept alive by the client, not renewed per lock */
        const char *p = strstr(g_uri, "ttl=");
        g_leases = 0;
        g_session_lease = 1;
        g_session_ms = p ? atoi(p + strlen("ttl=")) * 1000 : 30000;
    }
    if ((!strcmp(g_backend, "postgres") || !strcmp(g_backend, "mysql")) && !strstr(g_uri, "mode=lease")) {
        g_leases = 0;
        g_conn_session = 1;
    }
    baton_client_close(c);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g_prefix, sizeof g_prefix, "conf/%s/%ld-%ld/", g_backend, (long)getpid(),
             (long)(ts.tv_nsec % 100000));
    fprintf(stderr, "conformance: %s (backend %s, leases %s, prefix %s)\n", g_uri, g_backend,
            g_leases ? "yes" : "no", g_prefix);

    RUN(test_try);
    RUN(test_bounded_wait);
    RUN(test_unbounded_wait);
    RUN(test_exclusion_threads);
    th_current = "test_exclusion_processes";
    fprintf(stderr, "-- %s\n", th_current);
    test_exclusion_processes(tmpdir);
    RUN(test_fences);
    RUN(test_reentrant);
    RUN(test_renewal_keeps_lock);
    RUN(test_keeper_thread);
    RUN(test_cancel);
    RUN(test_cancel_before_acquire);
    RUN(test_close_releases);
    RUN(test_close_wakes_waiters);
    RUN(test_free_after_close);
    RUN(test_info);
    RUN(test_force_unlock);
    RUN(test_sigkill_holder);
    RUN(test_shared_client_progress);
    RUN(test_fair_option);
    if (g_session_ms) {
        RUN(test_fixed_lease_refused);
        RUN(test_sigstop_holder);
    }
    if (g_conn_session) RUN(test_fixed_lease_refused); /* a stopped holder keeps its connection: no sigstop case */
    if (g_leases) {
        RUN(test_owner_checked);
        RUN(test_fixed_lease_expires);
        RUN(test_extend);
        RUN(test_sigstop_holder);
    } else {
        RUN(test_extend_no_lease);
        fprintf(stderr, "-- lease cases skipped: the %s backend has no leases\n", g_backend);
    }
    return th_finish();
}
