/* Helpers shared by the primitive suites in tests/prims: the URI (with
 * "{port}" taken from the test server of its scheme's engine: Redis, ZooKeeper), clients and locks on it,
 * threads running one acquire, and, for the Redis-only cases, a tiny RESP
 * client. Worker processes (the suites re-execute /proc/self/exe; they are
 * threaded, so they never fork without exec), cross-process counters,
 * throwaway servers and timing come from tests/common/testlib.h. */
#ifndef BATON_TESTS_PRIMS_H
#define BATON_TESTS_PRIMS_H

#include <baton.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
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
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../harness.h"
#include "../common/testlib.h"

static char g_uri[1024];
static char g_prefix[160];
static char g_tmp[1024];
static char g_backend[32];
static int g_redis_port;       /* the port when the URI is a redis one (sentinel: the master's), else 0 */
static inline char *redis_raw(int port, const char *a0, ...);
static int g_session_ms;       /* a session engine (ZooKeeper; etcd: its lease TTL): its session timeout, else 0 */

/* How long a stopped or killed holder keeps what it holds: its lease, or on
 * a session engine the session timeout (the lease is not used there). */
static inline uint32_t expire_ms(uint32_t lease) { return g_session_ms ? (uint32_t)g_session_ms : lease; }

static inline const char *lname(char *buf, size_t n, const char *suffix) {
    size_t a = strlen(g_prefix), b = strlen(suffix);
    if (a + b + 1 > n) { fprintf(stderr, "FATAL: name too long\n"); exit(1); }
    memcpy(buf, g_prefix, a);
    memcpy(buf + a, suffix, b + 1);
    return buf;
}

/* Resolves "{port}" in URI; sets g_uri, g_backend, g_prefix, g_tmp.
 * Returns 0, or the exit status for a skip/failure. */
static inline int pr_setup(const char *suite, const char *uri) {
    if (tl_uri_with_port(g_uri, sizeof g_uri, uri, NULL) != 0) {
        char why[256];
        snprintf(why, sizeof why, "no test %s server (no port file)", tl_uri_engine(uri) ? tl_uri_engine(uri) : "?");
        return tl_skip_status(why, 1);
    }
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%s/prims-%s-%ld", tt && *tt ? tt : "/tmp", suite, (long)getpid());
    tl_mkdirs(g_tmp);
    if (!strncmp(g_uri, "file://", 7)) tl_mkdirs(g_uri + 7);
    baton_client *c = NULL;
    int rc = baton_client_open(&c, g_uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FAIL: baton_client_open(%s) = %d (%s): %s\n", g_uri, rc, baton_strerror(rc),
                baton_error_last()->message ? baton_error_last()->message : "");
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(g_backend, sizeof g_backend, "%s", baton_client_backend(c));
    baton_client_close(c);
    if (!strcmp(g_backend, "zk")) {
        const char *p = strstr(g_uri, "session_timeout_ms=");
        g_session_ms = p ? atoi(p + strlen("session_timeout_ms=")) : 10000;
    }
    if (!strcmp(g_backend, "etcd")) {
        /* grants live on the client's lease: its TTL (s) plays the session timeout */
        const char *p = strstr(g_uri, "ttl=");
        g_session_ms = 1000 * (p ? atoi(p + strlen("ttl=")) : 30);
    }
    if (!strcmp(g_backend, "redis")) {
        const char *p = strstr(g_uri, "://");
        p = p ? p + 3 : g_uri;
        const char *at = strchr(p, '@');
        if (at && at < strchr(p, '/')) p = at + 1;
        const char *colon = strchr(p, ':');
        g_redis_port = colon ? atoi(colon + 1) : 6379;
        if (!strncmp(g_uri, "redis-sentinel://", 17)) {
            /* the raw commands go to the master the sentinel names */
            char *r = redis_raw(g_redis_port, "SENTINEL", "get-master-addr-by-name", "mymaster", NULL);
            char *last = r ? strrchr(r, '$') : NULL;
            char *nl = last ? strstr(last, "\r\n") : NULL;
            g_redis_port = nl ? atoi(nl + 2) : 0;
            free(r);
        }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g_prefix, sizeof g_prefix, "prims/%s/%s/%ld-%ld/", suite, g_backend, (long)getpid(),
             (long)(ts.tv_nsec % 100000));
    fprintf(stderr, "%s: %s (backend %s, prefix %s)\n", suite, g_uri, g_backend, g_prefix);
    return 0;
}

static inline baton_client *client(void) { return tl_client_open(g_uri); }

/* ---- a tiny RESP client (Redis-only checks) ---------------------------------- */

typedef struct {
    int fd;
    char *buf;
    size_t len, cap;
} rcli;

static inline int rcli_open(rcli *c, int port) {
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

static inline void rcli_close(rcli *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Reads until BUF holds one complete reply; returns its length or -1.
 * Handles the reply kinds these tests need (no nested arrays of bulks with
 * CRLF inside beyond what the length prefixes say). */
static inline long rcli_reply_len(const char *b, size_t n, size_t off) {
    if (off >= n) return -1;
    const char *eol = memmem(b + off, n - off, "\r\n", 2);
    if (!eol) return -1;
    size_t hdr = (size_t)(eol - (b + off)) + 2;
    char t = b[off];
    long k = strtol(b + off + 1, NULL, 10);
    if (t == '+' || t == '-' || t == ':') return (long)hdr;
    if (t == '$') {
        if (k < 0) return (long)hdr;
        if (off + hdr + (size_t)k + 2 > n) return -1;
        return (long)(hdr + (size_t)k + 2);
    }
    if (t == '*') {
        size_t p = off + hdr;
        for (long i = 0; i < k; i++) {
            long e = rcli_reply_len(b, n, p);
            if (e < 0) return -1;
            p += (size_t)e;
        }
        return (long)(p - off);
    }
    return -1;
}

static inline char *rcli_cmd1(rcli *c, int argc, const char *const *argv, const size_t *lens);

/* Sends a command (argv, binary-safe lens or NULL) and returns the raw reply
 * (malloc'ed, NUL-terminated) or NULL. On a Redis Cluster (redis-cluster://)
 * a MOVED/ASK answer moves C to the node it names and sends it again there. */
static inline char *rcli_cmd(rcli *c, int argc, const char *const *argv, const size_t *lens) {
    char *r = rcli_cmd1(c, argc, argv, lens);
    for (int i = 0; i < 5 && r && (!strncmp(r, "-MOVED ", 7) || !strncmp(r, "-ASK ", 5)); i++) {
        const char *colon = strrchr(r, ':');
        int port = colon ? atoi(colon + 1) : 0, ask = r[1] == 'A';
        free(r);
        rcli_close(c);
        if (port <= 0 || rcli_open(c, port)) return NULL;
        if (ask) {
            const char *a[1] = { "ASKING" };
            free(rcli_cmd1(c, 1, a, NULL));
        }
        r = rcli_cmd1(c, argc, argv, lens);
    }
    return r;
}

static inline char *rcli_cmd1(rcli *c, int argc, const char *const *argv, const size_t *lens) {
    char hdr[64];
    int n = snprintf(hdr, sizeof hdr, "*%d\r\n", argc);
    if (write(c->fd, hdr, (size_t)n) != n) return NULL;
    for (int i = 0; i < argc; i++) {
        size_t l = lens ? lens[i] : strlen(argv[i]);
        n = snprintf(hdr, sizeof hdr, "$%zu\r\n", l);
        if (write(c->fd, hdr, (size_t)n) != n || write(c->fd, argv[i], l) != (ssize_t)l || write(c->fd, "\r\n", 2) != 2)
            return NULL;
    }
    c->len = 0;
    for (;;) {
        long r = rcli_reply_len(c->buf ? c->buf : "", c->len, 0);
        if (r >= 0) {
            char *out = malloc((size_t)r + 1);
            memcpy(out, c->buf, (size_t)r);
            out[r] = 0;
            return out;
        }
        if (c->cap - c->len < 65536) {
            c->cap = c->cap ? c->cap * 2 : 131072;
            c->buf = realloc(c->buf, c->cap);
        }
        struct pollfd p = { c->fd, POLLIN, 0 };
        if (poll(&p, 1, 10000) <= 0) return NULL;
        ssize_t got = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (got <= 0) return NULL;
        c->len += (size_t)got;
    }
}

/* A command whose reply is an integer; LLONG_MIN on anything else. */
static inline long long rcli_int(rcli *c, int argc, const char *const *argv) {
    char *r = rcli_cmd(c, argc, argv, NULL);
    long long v = (r && r[0] == ':') ? strtoll(r + 1, NULL, 10) : (-9223372036854775807LL - 1);
    free(r);
    return v;
}

/* How Redisson publishes an unlock on this server: SPUBLISH (sharded pub/sub)
 * on a Redis Cluster, as Redisson in cluster mode does; else PUBLISH. */
static inline const char *redis_publish_cmd(void) {
    return strstr(g_uri, "-cluster://") ? "SPUBLISH" : "PUBLISH";
}

/* One command on a fresh connection to the test server; the raw reply
 * (malloc'ed) or NULL. Up to 8 arguments, NULL-terminated. */
static inline char *redis_raw(int port, const char *a0, ...) {
    const char *argv[9];
    int argc = 0;
    va_list ap;
    va_start(ap, a0);
    for (const char *a = a0; a && argc < 8; a = va_arg(ap, const char *)) argv[argc++] = a;
    va_end(ap);
    rcli c;
    if (rcli_open(&c, port)) return NULL;
    char *r = rcli_cmd(&c, argc, argv, NULL);
    rcli_close(&c);
    return r;
}


/* ---- a thread running one lock acquire ----------------------------------------- */

typedef struct {
    baton_lock *l;
    int64_t wait_ms;
    int rc;
    uint64_t fence;
    int64_t t_done;
    atomic_int done;
    atomic_int release_now;    /* hold mode: set to make the thread release */
    int hold;                  /* 1: after a grant, hold until release_now */
    int hold_ms;               /* 0 and !hold: release at once; > 0: hold this long */
    atomic_int *order_ctr;     /* when set: the grant's position (1, 2, ...) goes to order */
    int order;
    pthread_t th;
} acq_thread;

static inline void *acq_main(void *p) {
    acq_thread *a = p;
    a->rc = baton_lock_acquire(a->l, a->wait_ms);
    a->fence = baton_lock_fence(a->l);
    if (a->rc == 0 && a->order_ctr) a->order = atomic_fetch_add(a->order_ctr, 1) + 1;
    a->t_done = tl_now_ms();
    atomic_store(&a->done, 1);
    if (a->rc == 0) {
        if (a->hold)
            while (!atomic_load(&a->release_now)) tl_sleep_ms(2);
        else if (a->hold_ms > 0)
            tl_sleep_ms(a->hold_ms);
        baton_lock_release(a->l);
    }
    return NULL;
}

static inline void acq_start_ex(acq_thread *a, baton_lock *l, int64_t wait_ms, int hold, int hold_ms, atomic_int *ctr) {
    memset(a, 0, sizeof *a);
    a->l = l;
    a->wait_ms = wait_ms;
    a->hold = hold;
    a->hold_ms = hold_ms;
    a->order_ctr = ctr;
    atomic_init(&a->done, 0);
    atomic_init(&a->release_now, 0);
    pthread_create(&a->th, NULL, acq_main, a);
}

/* Acquire, then keep holding until acq_release_now(). */
static inline void acq_start(acq_thread *a, baton_lock *l, int64_t wait_ms) { acq_start_ex(a, l, wait_ms, 1, 0, NULL); }

static inline int acq_wait(acq_thread *a, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && tl_now_ms() < end) tl_sleep_ms(2);
    return atomic_load(&a->done);
}

/* Lets a holding thread release, cancels a still-blocked one, and joins. */
static inline void acq_join(acq_thread *a) {
    if (!acq_wait(a, 0)) {
        baton_lock_cancel(a->l);
        if (!acq_wait(a, 10000)) {
            fprintf(stderr, "FATAL: an acquire ignores cancel; giving up\n");
            th_failed++;
            exit(th_finish());
        }
    }
    atomic_store(&a->release_now, 1);
    pthread_join(a->th, NULL);
}

static inline baton_lock *lock_on(baton_client *c, const char *name, const baton_lock_options *o) {
    baton_lock *l = NULL;
    MUST(baton_lock_open(&l, c, name, o));
    return l;
}

#endif
