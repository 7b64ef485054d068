/* Helpers shared by the primitive suites in tests/prims: the URI (with
 * "{port}" taken from the test Redis server), worker processes (the suites
 * re-execute /proc/self/exe; they are threaded, so they never fork without
 * exec), cross-process counters guarded by flock(2) (independent of baton),
 * and, for the Redis-only cases, a tiny RESP client and throwaway servers
 * started with tests/servers/redis.sh. */
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

extern char **environ;

static char g_uri[1024];
static char g_prefix[160];
static char g_tmp[1024];
static char g_backend[32];
static int g_redis_port;       /* the port when the URI is a redis one, else 0 */

static inline int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline const char *lname(char *buf, size_t n, const char *suffix) {
    size_t a = strlen(g_prefix), b = strlen(suffix);
    if (a + b + 1 > n) { fprintf(stderr, "FATAL: name too long\n"); exit(1); }
    memcpy(buf, g_prefix, a);
    memcpy(buf + a, suffix, b + 1);
    return buf;
}

static inline int pr_skip(const char *why) {
    const char *req = getenv("BATON_REQUIRE_ALL");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: %s (BATON_REQUIRE_ALL=1)\n", why);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    fprintf(stderr, "SKIP: %s\n", why);
    printf("0 passed, 0 failed\n");
    return TH_SKIP;
}

static inline void mkdirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0700);
            *p = '/';
        }
    }
    mkdir(buf, 0700);
}

/* Resolves "{port}" in URI; sets g_uri, g_backend, g_prefix, g_tmp.
 * Returns 0, or the exit status for a skip/failure. */
static inline int pr_setup(const char *suite, const char *uri) {
    const char *ph = strstr(uri, "{port}");
    if (ph) {
        const char *srv = getenv("BATON_TEST_SRV");
        char pf[1024];
        snprintf(pf, sizeof pf, "%s/redis/port", srv ? srv : ".");
        FILE *f = fopen(pf, "r");
        int port = 0;
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (port <= 0) return pr_skip("no test redis server (no port file)");
        snprintf(g_uri, sizeof g_uri, "%.*s%d%s", (int)(ph - uri), uri, port, ph + 6);
    } else {
        snprintf(g_uri, sizeof g_uri, "%s", uri);
    }
    const char *tt = getenv("BATON_TEST_TMP");
    snprintf(g_tmp, sizeof g_tmp, "%s/prims-%s-%ld", tt && *tt ? tt : "/tmp", suite, (long)getpid());
    mkdirs(g_tmp);
    if (!strncmp(g_uri, "file://", 7)) mkdirs(g_uri + 7);
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
    if (!strcmp(g_backend, "redis")) {
        const char *p = strstr(g_uri, "://");
        p = p ? p + 3 : g_uri;
        const char *at = strchr(p, '@');
        if (at && at < strchr(p, '/')) p = at + 1;
        const char *colon = strchr(p, ':');
        g_redis_port = colon ? atoi(colon + 1) : 6379;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(g_prefix, sizeof g_prefix, "prims/%s/%s/%ld-%ld/", suite, g_backend, (long)getpid(),
             (long)(ts.tv_nsec % 100000));
    fprintf(stderr, "%s: %s (backend %s, prefix %s)\n", suite, g_uri, g_backend, g_prefix);
    return 0;
}

static inline baton_client *client_of(const char *uri) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FATAL: baton_client_open(%s) = %d (%s): %s\n", uri, rc, baton_strerror(rc),
                baton_error_last()->message ? baton_error_last()->message : "");
        exit(1);
    }
    return c;
}

static inline baton_client *client(void) { return client_of(g_uri); }

#define MUST(expr) do { \
    int must_rc_ = (expr); \
    if (must_rc_ != 0) { \
        fprintf(stderr, "FATAL %s:%d: %s = %d (%s): %s\n", __FILE__, __LINE__, #expr, must_rc_, \
                baton_strerror(must_rc_), baton_error_last()->message ? baton_error_last()->message : ""); \
        exit(1); \
    } \
} while (0)

/* ---- worker processes ------------------------------------------------------ */

typedef struct {
    pid_t pid;
    int to;     /* its stdin */
    int from;   /* its stdout */
} worker;

static inline int spawn_worker(worker *w, char *const argv[]) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int rc = posix_spawn(&w->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    w->to = in[1];
    w->from = out[0];
    return 0;
}

/* Reads one line (without '\n'); returns its length, -1 on EOF/timeout. */
static inline int read_line(int fd, char *buf, size_t n, int timeout_ms) {
    size_t len = 0;
    int64_t end = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(end - now_ms());
        if (left < 0) left = 0;
        struct pollfd p = { fd, POLLIN, 0 };
        int pr = poll(&p, 1, left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return -1;
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (ch == '\n') {
            buf[len] = 0;
            return (int)len;
        }
        if (len + 1 < n) buf[len++] = ch;
    }
}

/* Waits for a line starting with WANT; returns 0 when seen. */
static inline int expect_line(worker *w, const char *want, char *line, size_t n, int timeout_ms) {
    int got = read_line(w->from, line, n, timeout_ms);
    if (got < 0) {
        fprintf(stderr, "   worker %ld: no line (wanted \"%s\")\n", (long)w->pid, want);
        return -1;
    }
    if (strncmp(line, want, strlen(want)) != 0) {
        fprintf(stderr, "   worker %ld said \"%s\" (wanted \"%s\")\n", (long)w->pid, line, want);
        return -1;
    }
    return 0;
}

static inline void send_line(worker *w, const char *s) {
    size_t n = strlen(s);
    if (write(w->to, s, n) != (ssize_t)n) perror("write to worker");
}

static inline int reap(worker *w, int timeout_ms) {
    int64_t end = now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(w->pid, &st, WNOHANG);
        if (r == w->pid) break;
        if (now_ms() > end) {
            kill(w->pid, SIGKILL);
            waitpid(w->pid, &st, 0);
            break;
        }
        sleep_ms(10);
    }
    if (w->to >= 0) close(w->to);
    if (w->from >= 0) close(w->from);
    w->to = w->from = -1;
    return st;
}

static inline int exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

static inline void out_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void out_line(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && write(1, buf, (size_t)n) < 0) _exit(3);
}

/* In a worker: blocks until stdin says LINE (or EOF). */
static inline void wait_for_line(const char *want) {
    char line[128];
    for (;;) {
        int n = read_line(0, line, sizeof line, 600000);
        if (n < 0 || !strcmp(line, want)) return;
    }
}

/* ---- cross-process counters (flock) ------------------------------------------ */

static inline void file_init(const char *path, long v) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); exit(1); }
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", v);
    if (write(fd, b, (size_t)n) != n) { perror(path); exit(1); }
    close(fd);
}

static inline long file_read(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

/* Adds DELTA under flock; returns the new value. Also raises MAXPATH (when
 * given) to the new value if larger. */
static inline long file_add(const char *path, long delta, const char *maxpath) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) { perror(path); exit(1); }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    char b[32] = { 0 };
    ssize_t r = pread(fd, b, sizeof b - 1, 0);
    long v = (r > 0 ? strtol(b, NULL, 10) : 0) + delta;
    int n = snprintf(b, sizeof b, "%ld\n", v);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, b, (size_t)n, 0) != n) { perror(path); exit(1); }
    if (maxpath) {
        long m = file_read(maxpath);
        if (v > m) file_init(maxpath, v);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return v;
}

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

/* Sends a command (argv, binary-safe lens or NULL) and returns the raw reply
 * (malloc'ed, NUL-terminated) or NULL. */
static inline char *rcli_cmd(rcli *c, int argc, const char *const *argv, const size_t *lens) {
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

/* redis.sh ACTION DIR [ARGS]; returns the port (start/restart), exits 77 when
 * redis-server is missing. PR_REDIS_SH is set by CMake. */
#ifdef PR_REDIS_SH
static inline int pr_redis(const char *action, const char *dir, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' %s", PR_REDIS_SH, action, dir, args ? args : "");
    FILE *p = popen(cmd, "r");
    if (!p) { perror("popen"); exit(1); }
    int port = 0;
    if (fscanf(p, "%d", &port) != 1) port = 0;
    int st = pclose(p);
    int rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    if (rc == 77) exit(pr_skip("redis-server is not installed"));
    if (strcmp(action, "stop") != 0 && (rc != 0 || port <= 0)) {
        fprintf(stderr, "FAIL: redis.sh %s %s failed (rc %d)\n", action, dir, rc);
        exit(1);
    }
    return port;
}
#endif


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
    a->t_done = now_ms();
    atomic_store(&a->done, 1);
    if (a->rc == 0) {
        if (a->hold)
            while (!atomic_load(&a->release_now)) sleep_ms(2);
        else if (a->hold_ms > 0)
            sleep_ms(a->hold_ms);
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
    int64_t end = now_ms() + timeout_ms;
    while (!atomic_load(&a->done) && now_ms() < end) sleep_ms(2);
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
