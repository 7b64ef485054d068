/*
 * RedLock tests: five redis-server nodes with persistence (AOF, fsync always),
 * started by tests/servers/redis.sh under $BATON_TEST_TMP/redlock_main.
 *
 *   exclusion across threads and processes; URIs and open; silent nodes cost
 *   one node timeout, not one per node; kill 2 of 5 nodes while locks are held
 *   and taken (still works); kill 3 (acquire fails cleanly, the holder learns
 *   it lost the lock, nothing is left behind once the nodes return); a client
 *   stopped between sending its requests and reading the replies for longer
 *   than the lease is not granted (at the acquire and at the fence write-back);
 *   fences strictly increase across 1000 grants by several processes while
 *   nodes are killed and restarted; foreign SET NX PX clients exclude us and
 *   we exclude them.
 *
 * Worker modes (re-executed from /proc/self/exe):
 *   test_redlock --worker incr  URI NAME FILE M
 *   test_redlock --worker try   URI NAME LEASE_MS      exit 50 granted, else -rc
 *   test_redlock --worker fence URI NAME STATE TARGET
 */
#include "rl_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

static char g_uri[2048];
static char g_prefix[64];
static char g_tmp[1200];

static const char *lname(char *buf, size_t n, const char *suffix) {
    snprintf(buf, n, "%s%s", g_prefix, suffix);
    return buf;
}

static baton_client *client_of(const char *uri) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FATAL: baton_client_open(%s) = %d (%s): %s\n", uri, rc, baton_strerror(rc),
                baton_error_last()->message);
        printf("%d passed, %d failed\n", th_passed, th_failed + 1);
        rl_stop_nodes();
        exit(1);
    }
    return c;
}

static baton_client *client(void) { return client_of(g_uri); }

static baton_lock *lock_on(baton_client *c, const char *name, uint32_t lease_ms) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    if (lease_ms) o.lease_ms = lease_ms;
    baton_lock *l = NULL;
    int rc = baton_lock_open(&l, c, name, &o);
    if (rc != 0) {
        fprintf(stderr, "FATAL: baton_lock_open(%s) = %d\n", name, rc);
        exit(1);
    }
    return l;
}

static int info_of(baton_client *c, const char *name, baton_lockinfo *info) {
    memset(info, 0, sizeof *info);
    info->version = BATON_LOCK_INFO_VERSION;
    return baton_lock_info(c, name, info);
}

static const char *lastmsg(void) { return baton_error_last()->message ? baton_error_last()->message : ""; }

/* A free loopback port (nothing listens on it afterwards). */
static int closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        perror("bind");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* A loopback listener that never accepts: connects succeed, nothing answers. */
static int silent_listener(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &sl) != 0) {
        perror("listen");
        exit(1);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* ---- workers ------------------------------------------------------------------------- */

static int worker_incr(const char *uri, const char *name, const char *file, int m) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        fprintf(stderr, "worker: open %d: %s\n", rc, lastmsg());
        return 2;
    }
    baton_lock *l = NULL;
    if (baton_lock_open(&l, c, name, NULL)) return 2;
    char fpath[1100];
    snprintf(fpath, sizeof fpath, "%s.fences", file);
    int fd = open(file, O_RDWR | O_CLOEXEC);
    int ffd = open(fpath, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || ffd < 0) return 2;
    int bad = 0;
    for (int i = 0; i < m; i++) {
        if ((rc = baton_lock_acquire(l, 60000)) != 0) {
            fprintf(stderr, "worker: acquire %d: %s\n", rc, lastmsg());
            bad = 1;
            break;
        }
        char buf[48] = { 0 };
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        long v = r > 0 ? strtol(buf, NULL, 10) : 0;
        usleep(200);
        int len = snprintf(buf, sizeof buf, "%ld\n", v + 1);
        if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
        len = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)baton_lock_fence(l));
        if (write(ffd, buf, (size_t)len) != len) bad = 1;
        if ((rc = baton_lock_release(l)) != 0) {
            fprintf(stderr, "worker: release %d: %s\n", rc, lastmsg());
            bad = 1;
        }
    }
    close(fd);
    close(ffd);
    baton_lock_free(l);
    baton_client_close(c);
    return bad ? 1 : 0;
}

static int worker_try(const char *uri, const char *name, uint32_t lease_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        fprintf(stderr, "worker: open %d: %s\n", rc, lastmsg());
        return 99;
    }
    baton_lock *l = lock_on(c, name, lease_ms);
    rc = baton_lock_acquire(l, 0);
    fprintf(stderr, "   worker try: %d (%s) %s\n", rc, baton_strerror(rc), rc ? lastmsg() : "granted");
    baton_lock_free(l);
    baton_client_close(c);
    return rc == 0 ? 50 : -rc;
}

/* STATE holds "count last-fence"; each grant checks its fence against the
 * last one, then writes both; the log gets every fence in grant order. */
static int worker_fence(const char *uri, const char *name, const char *state, long target) {
    baton_client *c = NULL;
    int rc = BATON_EUNAVAILABLE;
    for (int i = 0; i < 100 && rc; i++) {
        rc = baton_client_open(&c, uri, NULL);
        if (rc) tl_sleep_ms(50);
    }
    if (rc) {
        fprintf(stderr, "worker: open %d: %s\n", rc, lastmsg());
        return 2;
    }
    baton_lock *l = lock_on(c, name, 1000);
    char logp[1300];
    snprintf(logp, sizeof logp, "%s.log", state);
    int fd = open(state, O_RDWR | O_CLOEXEC);
    int lfd = open(logp, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || lfd < 0) return 2;
    int bad = 0, soft = 0;
    long mine = 0;
    for (;;) {
        rc = baton_lock_acquire(l, 20000);
        if (rc) {
            fprintf(stderr, "worker %ld: acquire %d: %s\n", (long)getpid(), rc, lastmsg());
            if (++soft > 20) {
                bad = 1;
                break;
            }
            continue;
        }
        uint64_t f = baton_lock_fence(l);
        char buf[64] = { 0 };
        ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
        long count = 0;
        unsigned long long last = 0;
        if (r > 0 && sscanf(buf, "%ld %llu", &count, &last) != 2) bad = 1;
        if (count >= target) {
            baton_lock_release(l);
            break;
        }
        if (f <= last) {
            fprintf(stderr, "worker %ld: fence %llu after %llu (grant %ld)\n", (long)getpid(), (unsigned long long)f,
                    last, count + 1);
            bad = 1;
        }
        usleep(3000); /* hold it a little, so the nodes die under held locks too */
        int len = snprintf(buf, sizeof buf, "%010ld %020llu\n", count + 1, (unsigned long long)f);
        if (pwrite(fd, buf, (size_t)len, 0) != len) bad = 1;
        len = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)f);
        if (write(lfd, buf, (size_t)len) != len) bad = 1;
        mine++;
        rc = baton_lock_release(l);
        if (rc) {
            fprintf(stderr, "worker %ld: release %d: %s\n", (long)getpid(), rc, lastmsg());
            bad = 1;
        }
    }
    fprintf(stderr, "   worker %ld: %ld grants\n", (long)getpid(), mine);
    close(fd);
    close(lfd);
    baton_lock_free(l);
    baton_client_close(c);
    return bad ? 1 : 0;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_uri(void) {
    baton_client *c = NULL;
    char u[2048];
    CHECK_RC(baton_client_open(&c, "redlock://", NULL), BATON_EINVAL);
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0", rl_port[0], rl_port[1], rl_port[0]);
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    CHECK(strstr(lastmsg(), "twice") != NULL);
    rl_uri(u, sizeof u, "node_timeout_ms=0");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    rl_uri(u, sizeof u, "node_timeout_ms=abc");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    rl_uri(u, sizeof u, "bogus=1");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    rl_uri(u, sizeof u, "layout=redisson");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_ENOTSUP);
    rl_uri(u, sizeof u, "cacert=/nonexistent");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    rl_uri(u, sizeof u, "tls=maybe");
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EINVAL);
    CHECK(c == NULL);
    {
        char big[4096];
        int off = snprintf(big, sizeof big, "redlock://");
        for (int i = 0; i < 17; i++) off += snprintf(big + off, sizeof big - (size_t)off, "%sh%d:6379", i ? "," : "", i);
        CHECK_RC(baton_client_open(&c, big, NULL), BATON_EINVAL);
    }

    /* a majority unreachable: a clean, quick failure */
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0", rl_port[0],
             rl_port[1], closed_port(), closed_port(), closed_port());
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 2000);
    CHECK(strstr(lastmsg(), "quorum") != NULL);
    fprintf(stderr, "   %s\n", lastmsg());

    /* a majority reachable: works */
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0", rl_port[0],
             closed_port(), rl_port[2], closed_port(), rl_port[4]);
    c = client_of(u);
    char n[128];
    baton_lock *l = lock_on(c, lname(n, sizeof n, "uri-majority"), 5000);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK(baton_lock_fence(l) > 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);

    /* one node is a quorum of one */
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d", rl_port[3]);
    c = client_of(u);
    l = lock_on(c, lname(n, sizeof n, "uri-one"), 5000);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    int64_t t_done;
} waiter_arg;

static void *waiter_main(void *p) {
    waiter_arg *w = p;
    w->rc = baton_lock_acquire(w->l, w->wait_ms);
    w->t_done = tl_now_ms();
    return NULL;
}

/* A waiter is woken by the release (unlock message), not by a poll: ROUNDS
 * times, b waits (its backoff grown to the 200 ms cap) while a holds, a
 * releases, and the time from the release to b's grant is taken. A polling
 * waiter finds the lock free 0..200 ms after the release, under 25 ms in about
 * one round in six; a notified one in a few ms, and a loaded machine delays
 * some rounds, not most. So at least half the rounds under 25 ms: a polling
 * waiter passes that about once in fifty runs, a notified one fails it only
 * when most of ten wake-ups are each held up by 25 ms. Returns b's last fence. */
static uint64_t notified_handoffs(baton_lock *a, baton_lock *b, int rounds, const char *what) {
    int fast = 0;
    uint64_t fb = 0;
    fprintf(stderr, "   release -> grant%s, ms:", what);
    for (int i = 0; i < rounds; i++) {
        CHECK_RC(baton_lock_acquire(a, 0), 0);
        uint64_t fa = baton_lock_fence(a);
        waiter_arg w = { b, 5000, -100, 0 };
        pthread_t th;
        pthread_create(&th, NULL, waiter_main, &w);
        tl_sleep_ms(400); /* the waiter's backoff has grown to its cap by now */
        int64_t t_rel = tl_now_ms();
        CHECK_RC(baton_lock_release(a), 0);
        pthread_join(th, NULL);
        CHECK_RC(w.rc, 0);
        fprintf(stderr, " %lld", (long long)(w.t_done - t_rel));
        fast += w.t_done - t_rel < 25;
        fb = baton_lock_fence(b);
        CHECK(fb > fa);
        CHECK_RC(baton_lock_release(b), 0);
    }
    fprintf(stderr, "\n");
    CHECK(fast * 2 >= rounds);
    return fb;
}

static void test_basic(void) {
    char n[128], fk[200], v[400];
    lname(n, sizeof n, "basic");
    snprintf(fk, sizeof fk, "baton_fence:{%s}", n);
    baton_client *c1 = client(), *c2 = client();
    baton_lock *a = lock_on(c1, n, 10000), *b = lock_on(c2, n, 10000);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    CHECK(f1 > 0);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    /* every node has the key (value "hex pid-desc") and a majority the fence */
    int keys = 0, fences = 0;
    char pid[32];
    snprintf(pid, sizeof pid, " %ld ", (long)getpid());
    for (int i = 0; i < RL_NODES; i++) {
        if (rl_raw_get(i, n, v, sizeof v) == 1 && strlen(v) > 33 && v[32] == ' ' && strstr(v, pid)) keys++;
        if (rl_raw_get(i, fk, v, sizeof v) == 1 && strtoull(v, NULL, 10) >= f1) fences++;
    }
    CHECK(keys == RL_NODES);
    CHECK(fences >= 3);
    baton_lockinfo info;
    CHECK_RC(info_of(c2, n, &info), 0);
    CHECK(info.held == 1 && info.fence == f1 && strstr(info.holder, pid) != NULL);
    CHECK(info.remaining_ms > 0 && info.remaining_ms <= 10000);
    CHECK_RC(baton_lock_release(a), 0);
    for (int i = 0; i < RL_NODES; i++) CHECK(rl_raw_exists(i, n) == 0);
    CHECK_RC(info_of(c2, n, &info), 0);
    CHECK(info.held == 0 && info.fence == f1);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    CHECK(baton_lock_fence(b) > f1);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_release(b), BATON_ENOTHELD);

    /* a waiter is woken by the release (unlock message), not by a poll */
    notified_handoffs(a, b, 10, "");
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}


/* Threads, each with its own client, increment a plain counter under the lock. */
typedef struct {
    const char *name;
    int iters;
    long *counter;
    uint64_t *fences;
    size_t *nf;
    int bad;
} thr_arg;

static void *thr_incr(void *p) {
    thr_arg *a = p;
    baton_client *c = client();
    baton_lock *l = lock_on(c, a->name, 5000);
    for (int i = 0; i < a->iters; i++) {
        int rc = baton_lock_acquire(l, 30000);
        if (rc) {
            fprintf(stderr, "   thread acquire %d: %s\n", rc, lastmsg());
            a->bad = 1;
            continue;
        }
        long v = *a->counter;
        usleep(100);
        *a->counter = v + 1;
        a->fences[(*a->nf)++] = baton_lock_fence(l);
        if (baton_lock_release(l)) a->bad = 1;
    }
    baton_lock_free(l);
    baton_client_close(c);
    return NULL;
}

static void test_exclusion_threads(void) {
    enum { T = 4, M = 60 };
    char n[128];
    lname(n, sizeof n, "threads");
    long counter = 0;
    static uint64_t fences[T * M];
    size_t nf = 0;
    thr_arg a[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        a[i] = (thr_arg){ n, M, &counter, fences, &nf, 0 };
        pthread_create(&th[i], NULL, thr_incr, &a[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK(a[i].bad == 0);
    }
    CHECK(counter == T * M);
    CHECK(nf == T * M);
    int mono = 1;
    for (size_t i = 1; i < nf; i++)
        if (fences[i] <= fences[i - 1]) mono = 0;
    CHECK(mono);
}

static void test_exclusion_processes(void) {
    enum { P = 4, M = 40 };
    char n[128], file[1300], fpath[1400], m[16];
    lname(n, sizeof n, "procs");
    snprintf(file, sizeof file, "%s/counter", g_tmp);
    snprintf(fpath, sizeof fpath, "%s.fences", file);
    FILE *f = fopen(file, "w");
    if (f) { fputs("0\n", f); fclose(f); }
    f = fopen(fpath, "w");
    if (f) fclose(f);
    snprintf(m, sizeof m, "%d", M);
    pid_t w[P];
    for (int i = 0; i < P; i++) {
        char *argv[] = { "test_redlock", "--worker", "incr", g_uri, n, file, m, NULL };
        w[i] = tl_spawn_self(argv, NULL);
    }
    for (int i = 0; i < P; i++) CHECK(rl_exited_ok(rl_reap(w[i], 120000)));
    long total = -1;
    f = fopen(file, "r");
    if (f) {
        if (fscanf(f, "%ld", &total) != 1) total = -1;
        fclose(f);
    }
    CHECK(total == P * M);
    f = fopen(fpath, "r");
    unsigned long long prev = 0, x;
    int cnt = 0, mono = 1;
    while (f && fscanf(f, "%llu", &x) == 1) {
        if (x <= prev) mono = 0;
        prev = x;
        cnt++;
    }
    if (f) fclose(f);
    CHECK(cnt == P * M);
    CHECK(mono);
}

/* Two of five nodes answer nothing at all: an acquire costs one node timeout
 * (the requests go out in parallel), not one per silent node. */
static void test_silent_nodes(void) {
    int sp1, sp2;
    int l1 = silent_listener(&sp1), l2 = silent_listener(&sp2);
    char u[2048], n[128];
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0?node_timeout_ms=200",
             rl_port[0], sp1, rl_port[1], sp2, rl_port[2]);
    baton_client *c = client_of(u);
    baton_lock *l = lock_on(c, lname(n, sizeof n, "silent"), 5000);
    /* One timeout is 200 ms, one per silent node 400 ms: a bound between the
     * two cannot be 2-3 x the expected. Load only ever makes an acquire late,
     * while the regression makes every one >= 400 ms, so the fastest of three
     * is held to the bound and each to the floor. */
    int64_t best = INT64_MAX;
    for (int k = 0; k < 3; k++) {
        int64_t t0 = tl_now_ms();
        CHECK_RC(baton_lock_acquire(l, 0), 0);
        int64_t dt = tl_now_ms() - t0;
        fprintf(stderr, "   acquire with 2 silent nodes: %lld ms\n", (long long)dt);
        CHECK(dt >= 150);
        if (dt < best) best = dt;
        CHECK_RC(baton_lock_release(l), 0);
    }
    CHECK(best < 390);
    baton_lock_free(l);
    baton_client_close(c);
    close(l1);
    close(l2);
}

static atomic_int g_lost;
static void on_lost(baton_lock *l, void *p) {
    (void)l;
    (void)p;
    atomic_store(&g_lost, 1);
}

/* Renewal re-creates the key where it vanished (a minority), but counts only
 * the nodes where it was ours all along: keys deleted by hand on a majority
 * make the lock LOST at the next renewal, and the repairs are taken back. */
static void test_renew_repair(void) {
    char n[128], v[400], pid_s[32];
    lname(n, sizeof n, "repair");
    snprintf(pid_s, sizeof pid_s, " %ld ", (long)getpid());
    baton_client *c = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    /* A 3 s lease, renewed every 1 s: the loss is due at the next renewal,
     * at most 1 s after the keys vanish, while the lease itself ends at least
     * 2 s after. The bound below sits between the two, about 2 x the worst
     * case and 4 x the mean of the renewal, so load does not trip it. */
    o.lease_ms = 3000;
    o.on_lost = on_lost;
    atomic_store(&g_lost, 0);
    baton_lock *l = NULL;
    CHECK_RC(baton_lock_open(&l, c, n, &o), 0);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    rl_raw_del(0, n);
    rl_raw_del(1, n);
    tl_sleep_ms(1500); /* at least one renewal (every 1000 ms) */
    int mine = 0;
    for (int i = 0; i < RL_NODES; i++) mine += rl_raw_get(i, n, v, sizeof v) == 1 && strstr(v, pid_s) != NULL;
    CHECK(mine == RL_NODES);
    CHECK(baton_lock_held(l) && !atomic_load(&g_lost));
    for (int i = 0; i < 3; i++) rl_raw_del(i, n);
    int64_t t0 = tl_now_ms();
    while (!atomic_load(&g_lost) && tl_now_ms() - t0 < 6000) tl_sleep_ms(5);
    CHECK(atomic_load(&g_lost));
    fprintf(stderr, "   lost %lld ms after its keys vanished from a majority\n", (long long)(tl_now_ms() - t0));
    CHECK(tl_now_ms() - t0 < 1900);
    tl_sleep_ms(100);
    for (int i = 0; i < RL_NODES; i++) CHECK(rl_raw_exists(i, n) == 0);
    CHECK_RC(baton_lock_release(l), BATON_ELOST);
    baton_lock_free(l);
    baton_client_close(c);
}

/* Kill 2 of 5 nodes while a lock is held and another is taken: everything
 * keeps working on the remaining majority. */
static void test_kill_two(void) {
    char n[128], n2[128];
    lname(n, sizeof n, "kill2");
    lname(n2, sizeof n2, "kill2-b");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 1000;
    o.on_lost = on_lost;
    atomic_store(&g_lost, 0);
    baton_lock *a = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    rl_kill_node(0);
    rl_kill_node(3);
    baton_lock *b = lock_on(c2, n2, 1000);
    CHECK_RC(baton_lock_acquire(b, 0), 0); /* taken while two are down */
    CHECK(baton_lock_fence(b) > 0);
    tl_sleep_ms(2500);                     /* several renewals on 3 of 5 */
    CHECK(baton_lock_held(a) && baton_lock_held(b));
    CHECK(atomic_load(&g_lost) == 0);
    baton_lock *a2 = lock_on(c2, n, 1000);
    CHECK_RC(baton_lock_acquire(a2, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_acquire(a2, 2000), 0);
    CHECK(baton_lock_fence(a2) > f1);
    baton_lockinfo info;
    CHECK_RC(info_of(c1, n, &info), 0);
    CHECK(info.held == 1 && info.fence == baton_lock_fence(a2));
    CHECK_RC(baton_lock_release(a2), 0);
    CHECK_RC(baton_lock_release(b), 0);
    rl_restart_node(0);
    rl_restart_node(3);
    baton_lock_free(a);
    baton_lock_free(a2);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Kill 3 of 5: acquires fail cleanly and quickly, the holder learns it lost
 * the lock within its lease, nothing is left behind once the nodes return,
 * and the next grant's fence is larger. */
static void test_kill_three(void) {
    char n[128], other[128];
    lname(n, sizeof n, "kill3");
    lname(other, sizeof other, "kill3-other");
    baton_client *c1 = client(), *c2 = client();
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.lease_ms = 1500;
    o.on_lost = on_lost;
    atomic_store(&g_lost, 0);
    baton_lock *a = NULL;
    CHECK_RC(baton_lock_open(&a, c1, n, &o), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t f1 = baton_lock_fence(a);
    int64_t t_kill = tl_now_ms();
    rl_kill_node(1);
    rl_kill_node(2);
    rl_kill_node(4);

    baton_lock *b = lock_on(c2, other, 1500);
    int64_t t0 = tl_now_ms();
    CHECK_RC(baton_lock_acquire(b, 0), BATON_EUNAVAILABLE);
    CHECK(tl_now_ms() - t0 < 1000);
    CHECK(strstr(lastmsg(), "quorum") != NULL);
    fprintf(stderr, "   %s\n", lastmsg());
    t0 = tl_now_ms();
    int rc = baton_lock_acquire(b, 500);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_ETIMEDOUT);
    int64_t dt = tl_now_ms() - t0;
    CHECK(dt >= 450 && dt < 3000); /* generous: a loaded machine runs late, never early */
    CHECK(!baton_lock_held(b));
    CHECK(rl_raw_exists(0, other) == 0 && rl_raw_exists(3, other) == 0);

    /* the holder learns it lost the lock: at its lease deadline, which on a
     * busy 2-core machine may be observed late; what matters is that it is
     * told, and told before the nodes could grant the lock twice over (the
     * bound is generous on purpose: 2 leases) */
    while (!atomic_load(&g_lost) && tl_now_ms() - t_kill < 6000) tl_sleep_ms(10);
    CHECK(atomic_load(&g_lost) == 1);
    fprintf(stderr, "   lost %lld ms after the kill (lease 1500 ms)\n", (long long)(tl_now_ms() - t_kill));
    CHECK(tl_now_ms() - t_kill < 3000);
    CHECK(!baton_lock_held(a));
    CHECK_RC(baton_lock_release(a), BATON_ELOST);
    baton_lockinfo info;
    CHECK_RC(info_of(c2, n, &info), BATON_EUNAVAILABLE);

    rl_restart_node(1);
    rl_restart_node(2);
    rl_restart_node(4);
    /* the restarted nodes kept the old key (AOF) until its lease ran out */
    int64_t end = tl_now_ms() + 4000;
    int left = 1;
    while (left && tl_now_ms() < end) {
        left = 0;
        for (int i = 0; i < RL_NODES; i++) left += rl_raw_exists(i, n) != 0 || rl_raw_exists(i, other) != 0;
        if (left) tl_sleep_ms(50);
    }
    CHECK(left == 0);
    baton_lock *a2 = lock_on(c2, n, 1500);
    CHECK_RC(baton_lock_acquire(a2, 3000), 0);
    CHECK(baton_lock_fence(a2) > f1);
    CHECK_RC(baton_lock_release(a2), 0);
    for (int i = 0; i < RL_NODES; i++) CHECK(rl_raw_exists(i, n) == 0);
    baton_lock_free(a);
    baton_lock_free(a2);
    baton_lock_free(b);
    baton_client_close(c1);
    baton_client_close(c2);
}

/* Waits until PID is stopped; 1 when it is. */
static int wait_stopped(pid_t pid, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (tl_now_ms() < end) {
        int st = 0;
        pid_t r = waitpid(pid, &st, WUNTRACED | WNOHANG);
        if (r == pid) return WIFSTOPPED(st);
        if (r < 0) return 0;
        tl_sleep_ms(2);
    }
    return 0;
}

/* A client stopped between sending its requests and reading the (positive)
 * replies for longer than the lease must not report the grant; meanwhile the
 * lock expired and someone else took it, and the stale client's clean-up
 * does not touch the new holder's keys. AT = acquire | fence. */
static void pause_case(const char *at) {
    char n[128], env_at[64];
    snprintf(n, sizeof n, "%spause-%s", g_prefix, at);
    snprintf(env_at, sizeof env_at, "BATON_REDLOCK_TEST_PAUSE_AT=%s", at);
    const char *env[] = { "BATON_REDLOCK_TEST_PAUSE_MS=stop", env_at, NULL };
    char *argv[] = { "test_redlock", "--worker", "try", g_uri, n, "300", NULL };
    pid_t pid = tl_spawn_self(argv, env);
    CHECK(pid > 0);
    int stopped = wait_stopped(pid, 10000);
    CHECK(stopped);
    if (!stopped) {
        kill(pid, SIGKILL);
        rl_reap(pid, 5000);
        return;
    }
    /* the stopped client's requests were applied: its keys are on the nodes */
    int theirs = 0;
    for (int i = 0; i < RL_NODES; i++) theirs += rl_raw_exists(i, n) == 1;
    CHECK(theirs >= 3);
    tl_sleep_ms(450); /* > the 300 ms lease */
    baton_client *c = client();
    baton_lock *l = lock_on(c, n, 10000);
    CHECK_RC(baton_lock_acquire(l, 3000), 0);
    uint64_t f = baton_lock_fence(l);
    kill(pid, SIGCONT);
    int st = rl_reap(pid, 10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == -BATON_ETIMEDOUT);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != -BATON_ETIMEDOUT)
        fprintf(stderr, "   worker exit status %d (50 = granted)\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    CHECK(baton_lock_held(l));
    char pid_s[32], v[400];
    snprintf(pid_s, sizeof pid_s, " %ld ", (long)getpid());
    int mine = 0;
    for (int i = 0; i < RL_NODES; i++) mine += rl_raw_get(i, n, v, sizeof v) == 1 && strstr(v, pid_s) != NULL;
    CHECK(mine == RL_NODES);
    baton_lockinfo info;
    CHECK_RC(info_of(c, n, &info), 0);
    CHECK(info.held == 1 && strstr(info.holder, pid_s) != NULL && info.fence == f);
    CHECK_RC(baton_lock_release(l), 0);
    baton_lock_free(l);
    baton_client_close(c);
}

static void test_pause_acquire(void) { pause_case("acquire"); }
static void test_pause_fence(void) { pause_case("fence"); }

/* The sleeping variant of the hook, and a control that a short pause grants. */
static void test_pause_sleep(void) {
    char n[128];
    lname(n, sizeof n, "pause-sleep");
    const char *env_long[] = { "BATON_REDLOCK_TEST_PAUSE_MS=400", NULL };
    char *argv[] = { "test_redlock", "--worker", "try", g_uri, n, "300", NULL };
    int st = rl_reap(tl_spawn_self(argv, env_long), 10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == -BATON_ETIMEDOUT);
    for (int i = 0; i < RL_NODES; i++) CHECK(rl_raw_exists(i, n) == 0); /* cleaned up (or expired) */
    const char *env_short[] = { "BATON_REDLOCK_TEST_PAUSE_MS=20", NULL };
    char *argv2[] = { "test_redlock", "--worker", "try", g_uri, n, "5000", NULL };
    st = rl_reap(tl_spawn_self(argv2, env_short), 10000);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 50);
}

/* 1000 grants by several processes while nodes are killed (SIGKILL) and
 * restarted (AOF, fsync always): every fence is larger than the one before. */
static void test_fences_under_faults(void) {
    enum { P = 4, TARGET = 1000 };
    char n[128], state[1300], logp[1400], target[16];
    lname(n, sizeof n, "fences");
    snprintf(state, sizeof state, "%s/fence-state", g_tmp);
    snprintf(logp, sizeof logp, "%s.log", state);
    FILE *f = fopen(state, "w");
    if (f) { fprintf(f, "%010d %020d\n", 0, 0); fclose(f); }
    f = fopen(logp, "w");
    if (f) fclose(f);
    snprintf(target, sizeof target, "%d", TARGET);
    pid_t w[P];
    int alive[P];
    for (int i = 0; i < P; i++) {
        char *argv[] = { "test_redlock", "--worker", "fence", g_uri, n, state, target, NULL };
        w[i] = tl_spawn_self(argv, NULL);
        alive[i] = w[i] > 0;
    }
    srand((unsigned)getpid());
    int64_t end = tl_now_ms() + 50000;
    int kills = 0, running = P, ok = 1;
    while (running && tl_now_ms() < end) {
        tl_sleep_ms(50 + rand() % 150);
        int k1 = rand() % RL_NODES, k2 = -1;
        if (rand() % 3 == 0) k2 = (k1 + 1 + rand() % (RL_NODES - 1)) % RL_NODES;
        rl_kill_node(k1);
        if (k2 >= 0) rl_kill_node(k2);
        kills += 1 + (k2 >= 0);
        tl_sleep_ms(20 + rand() % 200);
        rl_restart_node(k1);
        if (k2 >= 0) rl_restart_node(k2);
        for (int i = 0; i < P; i++) {
            int st;
            if (alive[i] && waitpid(w[i], &st, WNOHANG) == w[i]) {
                alive[i] = 0;
                running--;
                if (!rl_exited_ok(st)) ok = 0;
            }
        }
    }
    for (int i = 0; i < P; i++)
        if (alive[i]) ok &= rl_exited_ok(rl_reap(w[i], 2000));
    CHECK(ok);
    fprintf(stderr, "   %d node kills during the run\n", kills);
    CHECK(kills >= 10);
    long count = 0;
    f = fopen(state, "r");
    if (f) {
        if (fscanf(f, "%ld", &count) != 1) count = 0;
        fclose(f);
    }
    CHECK(count == TARGET);
    f = fopen(logp, "r");
    unsigned long long prev = 0, x;
    int cnt = 0, mono = 1;
    while (f && fscanf(f, "%llu", &x) == 1) {
        if (x <= prev) {
            if (mono) fprintf(stderr, "   fence %llu after %llu (line %d)\n", x, prev, cnt + 1);
            mono = 0;
        }
        prev = x;
        cnt++;
    }
    if (f) fclose(f);
    CHECK(cnt == TARGET);
    CHECK(mono);
}

/* Foreign clients using the plain SET NX PX layout (redsync, node-redlock)
 * exclude us, and we exclude them; a one-node redlock:// and the Redis
 * backend's simple layout share the lock and its fence counter. */
static void test_interop(void) {
    char n[128];
    lname(n, sizeof n, "interop");
    baton_client *c = client();
    baton_lock *l = lock_on(c, n, 5000);
    for (int i = 0; i < 3; i++) CHECK(rl_raw_setnx(i, n, "foreign-token-1", 5000) == 1);
    CHECK_RC(baton_lock_acquire(l, 0), BATON_ELOCKED);
    baton_lockinfo info;
    CHECK_RC(info_of(c, n, &info), 0);
    CHECK(info.held == 1 && !strcmp(info.holder, "foreign-token-1"));
    /* a minority of foreign keys does not stop us */
    for (int i = 0; i < 2; i++) rl_raw_del(i, n);
    CHECK_RC(baton_lock_acquire(l, 0), 0);
    int refused = 0;
    for (int i = 0; i < RL_NODES; i++) refused += rl_raw_setnx(i, n, "foreign-token-2", 5000) == 0;
    CHECK(refused == RL_NODES);
    CHECK_RC(baton_lock_release(l), 0);
    CHECK(rl_raw_get(2, n, (char[64]){ 0 }, 64) == 1); /* the foreign key is not ours to delete */
    rl_raw_del(2, n);
    baton_lock_free(l);
    baton_client_close(c);

#ifdef BATON_TEST_HAVE_REDIS
    char u1[256], u2[256];
    snprintf(u1, sizeof u1, "redlock://127.0.0.1:%d/0", rl_port[1]);
    snprintf(u2, sizeof u2, "redis://127.0.0.1:%d/0?layout=simple", rl_port[1]);
    baton_client *ca = client_of(u1), *cb = client_of(u2);
    baton_lock *a = lock_on(ca, n, 5000), *b = lock_on(cb, n, 5000);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    uint64_t fa = baton_lock_fence(a);
    CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(a), 0);
    CHECK_RC(baton_lock_acquire(b, 0), 0);
    uint64_t fb = baton_lock_fence(b);
    CHECK(fb > fa);
    CHECK_RC(baton_lock_acquire(a, 0), BATON_ELOCKED);
    CHECK_RC(baton_lock_release(b), 0);
    CHECK_RC(baton_lock_acquire(a, 0), 0);
    CHECK(baton_lock_fence(a) > fb);
    CHECK_RC(baton_lock_release(a), 0);
    baton_lock_free(a);
    baton_lock_free(b);
    baton_client_close(ca);
    baton_client_close(cb);
#endif
}

/* Three TLS-only nodes: tls=1 with the right CA works (pub/sub wake-up
 * included), the wrong CA is BATON_EAUTH, plain TCP to TLS ports fails cleanly. */
static void test_tls(void) {
    if (tl_sh("command -v openssl >/dev/null 2>&1") != 0) {
        fprintf(stderr, "   skipped: no openssl command\n");
        return;
    }
    char d[1200];
    snprintf(d, sizeof d, "%s/tls", rl_base);
    int rc = tl_sh("mkdir -p '%s' && cd '%s' && set -e; K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
                   "openssl req -x509 $K -keyout ca.key -out ca.crt -days 1 -subj '/CN=redlock test CA' 2>/dev/null; "
                   "openssl req -x509 $K -keyout other.key -out other.crt -days 1 -subj '/CN=other CA' 2>/dev/null; "
                   "openssl req $K -keyout node.key -out node.csr -subj '/CN=127.0.0.1' 2>/dev/null; "
                   "echo 'subjectAltName=IP:127.0.0.1' > node.ext; "
                   "openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out node.crt -days 1 "
                   "-extfile node.ext 2>/dev/null; chmod 644 *.key", d, d);
    CHECK(rc == 0);
    if (rc) return;
    char args[4096], nd[3][1300];
    snprintf(args, sizeof args, "--port 0 --tls-port @PORT@ --tls-cert-file '%s/node.crt' --tls-key-file '%s/node.key' "
             "--tls-ca-cert-file '%s/ca.crt' --tls-auth-clients no", d, d, d);
    int port[3];
    for (int i = 0; i < 3; i++) {
        snprintf(nd[i], sizeof nd[i], "%s/n%d", d, i);
        port[i] = tl_server("redis", "start", nd[i], args, 1);
    }
    char u[2048], n[128];
    lname(n, sizeof n, "tls");
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0?tls=1&cacert=%s/ca.crt", port[0], port[1],
             port[2], d);
    baton_client *c1 = NULL, *c2 = NULL;
    CHECK_RC(baton_client_open(&c1, u, NULL), 0);
    CHECK_RC(baton_client_open(&c2, u, NULL), 0);
    if (c1 && c2) {
        baton_lock *a = lock_on(c1, n, 5000), *b = lock_on(c2, n, 5000);
        CHECK_RC(baton_lock_acquire(a, 0), 0);
        CHECK_RC(baton_lock_acquire(b, 0), BATON_ELOCKED);
        CHECK_RC(baton_lock_release(a), 0);
        notified_handoffs(a, b, 10, " over TLS");
        baton_lock_free(a);
        baton_lock_free(b);
    }
    if (c1) baton_client_close(c1);
    if (c2) baton_client_close(c2);
    baton_client *c = NULL;
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0?tls=1&cacert=%s/other.crt", port[0],
             port[1], port[2], d);
    CHECK_RC(baton_client_open(&c, u, NULL), BATON_EAUTH);
    snprintf(u, sizeof u, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/0?connect_timeout_ms=500", port[0], port[1],
             port[2]);
    int64_t t0 = tl_now_ms();
    rc = baton_client_open(&c, u, NULL);
    CHECK(rc == BATON_EUNAVAILABLE || rc == BATON_EPROTO);
    CHECK(tl_now_ms() - t0 < 3000);
    CHECK(c == NULL);
    for (int i = 0; i < 3; i++) tl_server("redis", "stop", nd[i], NULL, 1);
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--worker")) {
        if (argc == 7 && !strcmp(argv[2], "incr")) return worker_incr(argv[3], argv[4], argv[5], atoi(argv[6]));
        if (argc == 6 && !strcmp(argv[2], "try")) return worker_try(argv[3], argv[4], (uint32_t)atoi(argv[5]));
        if (argc == 7 && !strcmp(argv[2], "fence")) return worker_fence(argv[3], argv[4], argv[5], atol(argv[6]));
        fprintf(stderr, "bad worker arguments\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    rl_start_nodes("main");
    snprintf(g_tmp, sizeof g_tmp, "%s/scratch", rl_base);
    mkdir(g_tmp, 0700);
    rl_uri(g_uri, sizeof g_uri, "node_timeout_ms=100");
    snprintf(g_prefix, sizeof g_prefix, "rltest/%ld/", (long)getpid());
    fprintf(stderr, "redlock tests: %s\n", g_uri);

    RUN(test_uri);
    RUN(test_basic);
    RUN(test_exclusion_threads);
    RUN(test_exclusion_processes);
    RUN(test_silent_nodes);
    RUN(test_interop);
    RUN(test_tls);
    RUN(test_pause_acquire);
    RUN(test_pause_fence);
    RUN(test_pause_sleep);
    RUN(test_renew_repair);
    RUN(test_kill_two);
    RUN(test_kill_three);
    RUN(test_fences_under_faults);

    rl_stop_nodes();
    return th_finish();
}
