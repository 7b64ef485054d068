/* Helpers shared by the ZooKeeper suites in tests/zk: a fresh directory per
 * suite (its servers stopped first), zk:// URIs, a worker that holds a lock
 * and reports on its stdout, on_lost recorders, a closed port.
 *
 * Assumptions about the zk backend these suites are written against (the
 * engine is being written elsewhere; adjust here if it settles otherwise):
 *   zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/CHROOT][?session_timeout_ms=N]
 *   - the password in the URI (or baton_client_options.password) is a digest
 *     credential, added with zoo_add_auth("digest", "USER:PASSWORD");
 *   - locks live under the root /baton: NAME's lock nodes are children of
 *     /baton/NAME (Curator's _c_<uuid>-lock-<seq>), elections likewise
 *     (Curator's LeaderLatch _c_<uuid>-latch-<seq>);
 *   - the fence is the lock node's czxid.
 * Servers: tests/servers/zk.sh (tickTime 200 ms, so sessions from 400 ms to
 * 60 s are accepted as asked). */
#ifndef BATON_TESTS_ZK_ZKT_H
#define BATON_TESTS_ZK_ZKT_H

#include <baton.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "../harness.h"
#include "../common/testlib.h"

/* A fresh BATON_TEST_TMP/zk_<name>: servers left there by an interrupted run
 * are stopped first. */
static inline const char *zkt_dir(const char *name) {
    static char buf[4][1024];
    static int n;
    char *d = buf[n++ % 4];
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(d, sizeof buf[0], "%s/zk_%s", base && *base ? base : "/tmp", name);
    tl_sh("bash '%s/zk.sh' stop-all '%s' >/dev/null 2>&1", TL_SERVERS_DIR, d);
    if (tl_sh("rm -rf '%s' && mkdir -p '%s'", d, d) != 0) {
        fprintf(stderr, "cannot create %s\n", d);
        exit(1);
    }
    return d;
}

/* DIR/SUB (static buffers, a few at a time). */
static inline const char *zkt_sub(const char *dir, const char *sub) {
    static char buf[8][1200];
    static int n;
    char *d = buf[n++ % 8];
    snprintf(d, sizeof buf[0], "%s/%s", dir, sub);
    return d;
}

/* Every server this suite started under DIR is stopped at exit, also after a
 * failed MUST (exit(1)). */
static char zkt_cleanup_dir[1024];
static void zkt_cleanup(void) {
    if (zkt_cleanup_dir[0])
        tl_sh("bash '%s/zk.sh' stop-all '%s' >/dev/null 2>&1", TL_SERVERS_DIR, zkt_cleanup_dir);
}
static inline void zkt_cleanup_at_exit(const char *dir) {
    snprintf(zkt_cleanup_dir, sizeof zkt_cleanup_dir, "%s", dir);
    atexit(zkt_cleanup);
}

/* zk.sh ACTION DIR for a standalone server (pause, resume, kill, stop);
 * returns the script's status. */
static inline int zkt_srv(const char *action, const char *dir) {
    return tl_sh("bash '%s/zk.sh' %s '%s' >/dev/null", TL_SERVERS_DIR, action, dir);
}

/* zk://HOSTS?session_timeout_ms=SESSION_MS (SESSION_MS 0: none) into OUT. */
static inline const char *zkt_uri(char *out, size_t n, const char *hosts, int session_ms) {
    if (session_ms > 0) snprintf(out, n, "zk://%s?session_timeout_ms=%d", hosts, session_ms);
    else snprintf(out, n, "zk://%s", hosts);
    return out;
}

/* A lock name unique to this run. */
static inline const char *zkt_name(char *out, size_t n, const char *suite, const char *what) {
    snprintf(out, n, "zktest-%s-%ld-%s", suite, (long)getpid(), what);
    return out;
}

/* A loopback port nothing listens on (bound, then closed). */
static inline int zkt_closed_port(void) {
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

/* ---- on_lost, recorded ----------------------------------------------------- */

typedef struct {
    atomic_int count;
    _Atomic int64_t t_ms;     /* tl_now_ms() of the first call */
} zkt_lost;

static inline void zkt_lost_init(zkt_lost *z) {
    atomic_init(&z->count, 0);
    atomic_init(&z->t_ms, 0);
}

static inline void zkt_lost_cb(baton_lock *l, void *payload) {
    (void)l;
    zkt_lost *z = payload;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&z->t_ms, &zero, tl_now_ms());
    atomic_fetch_add(&z->count, 1);
}

static inline void zkt_election_lost_cb(baton_election *e, void *payload) {
    (void)e;
    zkt_lost *z = payload;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&z->t_ms, &zero, tl_now_ms());
    atomic_fetch_add(&z->count, 1);
}

/* Waits until on_lost has been called or TIMEOUT_MS passed; returns the count. */
static inline int zkt_lost_wait(zkt_lost *z, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (atomic_load(&z->count) == 0 && tl_now_ms() < end) tl_sleep_ms(20);
    return atomic_load(&z->count);
}

/* ---- a lock-holding worker (the suites re-execute themselves) -------------
 *   SELF --worker hold URI NAME WAIT_MS
 * acquires NAME (waiting up to WAIT_MS), says "HELD <fence>" or "ERR <rc>",
 * then obeys lines on stdin: "HELD?" -> "HELD 0|1", "RELEASE" -> "RELEASED
 * <rc>", "FENCE?" -> "FENCE <fence>"; EOF ends it (exit 0). From on_lost it
 * says "LOST". */

static void zkt_worker_lost(baton_lock *l, void *payload) {
    (void)l;
    (void)payload;
    static const char msg[] = "LOST\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
}

static inline int zkt_worker_hold(const char *uri, const char *name, int64_t wait_ms) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        tl_out_line("ERR %d open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    o.on_lost = zkt_worker_lost;
    baton_lock *l = NULL;
    if ((rc = baton_lock_open(&l, c, name, &o)) != 0) {
        tl_out_line("ERR %d lock_open: %s\n", rc, tl_lastmsg());
        return 2;
    }
    rc = baton_lock_acquire(l, wait_ms);
    if (rc) {
        tl_out_line("ERR %d acquire: %s\n", rc, tl_lastmsg());
        return 2;
    }
    tl_out_line("HELD %llu\n", (unsigned long long)baton_lock_fence(l));
    char line[128];
    for (;;) {
        int n = tl_read_line(0, line, sizeof line, 600000);
        if (n < 0) break;
        if (!strcmp(line, "HELD?")) tl_out_line("HELD %d\n", baton_lock_held(l));
        else if (!strcmp(line, "FENCE?")) tl_out_line("FENCE %llu\n", (unsigned long long)baton_lock_fence(l));
        else if (!strcmp(line, "RELEASE")) tl_out_line("RELEASED %d\n", baton_lock_release(l));
    }
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}

/* Spawns SELF --worker hold URI NAME WAIT_MS; waits for its "HELD <fence>"
 * (up to TIMEOUT_MS). Returns the fence, 0 on failure (the worker is reaped). */
static inline uint64_t zkt_spawn_holder(tl_worker *w, const char *uri, const char *name, int64_t wait_ms,
                                        int timeout_ms) {
    char ws[32];
    snprintf(ws, sizeof ws, "%lld", (long long)wait_ms);
    char *argv[] = { "zk-worker", "--worker", "hold", (char *)uri, (char *)name, ws, NULL };
    if (tl_worker_spawn(w, argv) != 0) {
        fprintf(stderr, "   cannot spawn a worker\n");
        return 0;
    }
    char line[256];
    if (tl_expect_line(w, "HELD ", line, sizeof line, timeout_ms) != 0) {
        tl_worker_reap(w, 100);
        return 0;
    }
    return strtoull(line + 5, NULL, 10);
}

/* One acquire on a thread (a waiter whose wait is the point). */
typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    uint64_t fence;
    int64_t t_done;
    atomic_int done;
    pthread_t th;
} zkt_acq;

static void *zkt_acq_main(void *p) {
    zkt_acq *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    a->fence = baton_lock_fence(a->l);
    a->t_done = tl_now_ms();
    atomic_store(&a->done, 1);
    return NULL;
}

static inline void zkt_acq_start(zkt_acq *a, baton_lock *l, int64_t wait_ms) {
    memset(a, 0, sizeof *a);
    a->l = l;
    a->wait_ms = wait_ms;
    atomic_init(&a->done, 0);
    pthread_create(&a->th, NULL, zkt_acq_main, a);
}

/* Waits up to TIMEOUT_MS; 1 when the acquire returned. */
static inline int zkt_acq_wait(zkt_acq *a, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && tl_now_ms() < end) tl_sleep_ms(10);
    return atomic_load(&a->done);
}

/* Joins, cancelling a still-blocked acquire first. */
static inline void zkt_acq_join(zkt_acq *a) {
    if (!zkt_acq_wait(a, 0)) {
        baton_lock_cancel(a->l);
        if (!zkt_acq_wait(a, 10000)) {
            fprintf(stderr, "FATAL: an acquire ignores cancel\n");
            th_failed++;
            exit(th_finish());
        }
    }
    pthread_join(a->th, NULL);
}

/* Opens a lock with an on_lost recorder (Z may be NULL). */
static inline baton_lock *zkt_lock(baton_client *c, const char *name, zkt_lost *z) {
    baton_lock_options o = BATON_LOCK_OPTIONS_INIT;
    if (z) {
        o.on_lost = zkt_lost_cb;
        o.on_lost_payload = z;
    }
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, &o));
    return l;
}

#endif
