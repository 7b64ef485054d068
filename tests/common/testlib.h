/* Helpers shared by every C test suite (engine-neutral): timing, the
 * skip-or-fail rule for a missing server, directories, shell commands,
 * throwaway servers started with tests/servers/<engine>.sh, the "{port}"
 * of a ctest fixture server ($BATON_TEST_SRV/<engine>/port), re-executing
 * the test binary as a worker, and flock(2)-guarded cross-process counters.
 * Also MUST and a fatal-on-error client open. tests/harness.h stays the
 * CHECK/RUN harness. Everything here is static
 * inline, so a suite pays only for what it uses. */
#ifndef BATON_TESTS_COMMON_TESTLIB_H
#define BATON_TESTS_COMMON_TESTLIB_H

#include <baton.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* tests/servers, set by baton_test_exe in tests/CMakeLists.txt. */
#ifndef TL_SERVERS_DIR
#define TL_SERVERS_DIR "tests/servers"
#endif

#define TL_SKIP 77

extern char **environ;

/* ---- baton calls that must succeed ------------------------------------- */

/* The message of the last baton error on this thread, "" when none. */
static inline const char *tl_lastmsg(void) {
    return baton_error_last()->message ? baton_error_last()->message : "";
}

/* EXPR (a baton call) must return 0, else the test stops (exit 1). */
#define MUST(expr) do { \
    int must_rc_ = (expr); \
    if (must_rc_ != 0) { \
        fprintf(stderr, "FATAL %s:%d: %s = %d (%s): %s\n", __FILE__, __LINE__, #expr, must_rc_, \
                baton_strerror(must_rc_), tl_lastmsg()); \
        exit(1); \
    } \
} while (0)

/* A client on URI; a failure stops the test (exit 1). */
static inline baton_client *tl_client_open(const char *uri) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc != 0) {
        fprintf(stderr, "FATAL: baton_client_open(%s) = %d (%s): %s\n", uri, rc, baton_strerror(rc), tl_lastmsg());
        exit(1);
    }
    return c;
}

/* An on_lost callback that counts its calls in the atomic_int PAYLOAD. */
static inline void tl_count_lost(baton_lock *l, void *payload) {
    (void)l;
    atomic_fetch_add((atomic_int *)payload, 1);
}

/* ---- timing ------------------------------------------------------------- */

static inline int64_t tl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wall clock, µs. */
static inline uint64_t tl_wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline void tl_sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- a missing server: skip (77), or fail when BATON_REQUIRE_ALL=1 ------ */

static inline int tl_require_all(void) {
    const char *req = getenv("BATON_REQUIRE_ALL");
    return req && !strcmp(req, "1");
}

/* Says why; returns the exit status (1 or 77). With SUMMARY, also prints the
 * harness's "N passed, N failed" line first. */
static inline int tl_skip_status(const char *why, int summary) {
    if (tl_require_all()) {
        fprintf(stderr, "FAIL: %s (BATON_REQUIRE_ALL=1)\n", why);
        if (summary) printf("0 passed, 1 failed\n");
        return 1;
    }
    fprintf(stderr, "SKIP: %s\n", why);
    if (summary) printf("0 passed, 0 failed\n");
    return TL_SKIP;
}

static inline void tl_skip(const char *why, int summary) { exit(tl_skip_status(why, summary)); }

/* ---- files and commands ------------------------------------------------- */

/* mkdir -p (mode 0700). */
static inline void tl_mkdirs(const char *path) {
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

/* Runs a shell command (printf-style); returns its exit status, -1 when it
 * did not exit. */
static inline int tl_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int tl_sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* ---- servers -------------------------------------------------------------- */

/* The port of the ctest fixture server of ENGINE ($BATON_TEST_SRV/<engine>/port),
 * 0 when there is none. */
static inline int tl_fixture_port(const char *engine) {
    const char *srv = getenv("BATON_TEST_SRV");
    char pf[1024];
    snprintf(pf, sizeof pf, "%s/%s/port", srv ? srv : ".", engine);
    FILE *f = fopen(pf, "r");
    int port = 0;
    if (f) {
        if (fscanf(f, "%d", &port) != 1) port = 0;
        fclose(f);
    }
    return port > 0 ? port : 0;
}

/* The ctest fixture engine (the <engine> of tests/servers/<engine>.sh and of
 * $BATON_TEST_SRV/<engine>/port) that serves URI, from its scheme: "redis"
 * for redis:// and rediss://, "zk" for zk:// and zookeeper://, likewise for
 * etcd, PostgreSQL and MySQL; NULL for file:// (no server), an unknown scheme
 * or none. */
static inline const char *tl_uri_engine(const char *uri) {
    static const struct { const char *scheme, *engine; } map[] = {
        { "redis", "redis" }, { "rediss", "redis" }, { "zk", "zk" }, { "zookeeper", "zk" },
        { "redis-cluster", "redis-cluster" }, /* tests/servers/redis-cluster.sh: the first master */
        { "redis-sentinel", "redis-sentinel" }, { "rediss-sentinel", "redis-sentinel" },
        { "etcd", "etcd" }, { "etcds", "etcd" },
        { "postgres", "postgres" }, { "postgresql", "postgres" },
        { "mysql", "mysql" }, { "mariadb", "mysql" },
    };
    const char *sep = uri ? strstr(uri, "://") : NULL;
    if (!sep) return NULL;
    size_t len = (size_t)(sep - uri);
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strlen(map[i].scheme) == len && !strncmp(uri, map[i].scheme, len)) return map[i].engine;
    return NULL;
}

/* URI with "{port}" replaced by the port of ENGINE's fixture server, into OUT
 * (ENGINE NULL: the engine of the URI's scheme, tl_uri_engine). Returns 0, or
 * -1 (OUT = "") when the URI wants a port and there is none. */
static inline int tl_uri_with_port(char *out, size_t n, const char *uri, const char *engine) {
    const char *ph = strstr(uri, "{port}");
    if (!ph) {
        snprintf(out, n, "%s", uri);
        return 0;
    }
    if (!engine) engine = tl_uri_engine(uri);
    int port = engine ? tl_fixture_port(engine) : 0;
    if (port <= 0) {
        if (n) out[0] = 0;
        return -1;
    }
    snprintf(out, n, "%.*s%d%s", (int)(ph - uri), uri, port, ph + 6);
    return 0;
}

/* bash SCRIPT ACTION DIR [ARGS...] (ARGS already shell-quoted): a server
 * script of tests/servers. Returns the port it prints (start, restart,
 * member-start; 0 for other actions); a missing server program (77) is a
 * skip or failure (tl_skip), any other failure exits 1 (except for stop,
 * which never fails). SUMMARY as for tl_skip_status. */
static inline int tl_server_script(const char *script, const char *action, const char *dir, const char *args,
                                   int summary) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' %s", script, action, dir, args ? args : "");
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror("popen");
        exit(1);
    }
    int port = 0;
    if (fscanf(p, "%d", &port) != 1) port = 0;
    int st = pclose(p);
    int rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    if (rc == 77) {
        char why[1200];
        snprintf(why, sizeof why, "the server program of %s is not installed", script);
        tl_skip(why, summary);
    }
    int want_port = !strcmp(action, "start") || !strcmp(action, "restart") || !strcmp(action, "member-start");
    if ((want_port && (rc != 0 || port <= 0)) || (!want_port && strcmp(action, "stop") != 0 && rc != 0)) {
        fprintf(stderr, "FAIL: %s %s %s failed (rc %d)\n", script, action, dir, rc);
        if (summary) printf("0 passed, 1 failed\n");
        exit(1);
    }
    return port;
}

/* tests/servers/<ENGINE>.sh ACTION DIR [ARGS]. */
static inline int tl_server(const char *engine, const char *action, const char *dir, const char *args, int summary) {
    char script[1024];
    snprintf(script, sizeof script, "%s/%s.sh", TL_SERVERS_DIR, engine);
    return tl_server_script(script, action, dir, args, summary);
}

static inline int tl_server_start(const char *engine, const char *dir, const char *args) {
    return tl_server(engine, "start", dir, args, 0);
}
static inline int tl_server_restart(const char *engine, const char *dir) {
    return tl_server(engine, "restart", dir, NULL, 0);
}
static inline void tl_server_stop(const char *engine, const char *dir) { tl_server(engine, "stop", dir, NULL, 0); }

/* ---- ZooKeeper servers (tests/servers/zk.sh) ------------------------------
 * tl_server_start("zk", dir, NULL) starts a standalone server; tl_server("zk",
 * "pause"|"resume"|"kill", dir, NULL, summary) SIGSTOPs, SIGCONTs or SIGKILLs
 * it; restart keeps its port and data. An ensemble: */

/* zk.sh ensemble-start DIR N: N members on loopback, a leader elected. Writes
 * the connect string ("127.0.0.1:p1,127.0.0.1:p2,...") into HOSTS. A missing
 * ZooKeeper is a skip (tl_skip); any other failure exits 1. */
static inline void tl_zk_ensemble_start(const char *dir, int n, char *hosts, size_t hn, int summary) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/zk.sh' ensemble-start '%s' %d", TL_SERVERS_DIR, dir, n);
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror("popen");
        exit(1);
    }
    if (!fgets(hosts, (int)hn, p)) hosts[0] = 0;
    hosts[strcspn(hosts, "\r\n")] = 0;
    int st = pclose(p);
    int rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    if (rc == 77) tl_skip("ZooKeeper (zookeeper, java) is not installed", summary);
    if (rc != 0 || !hosts[0]) {
        fprintf(stderr, "FAIL: zk.sh ensemble-start %s %d failed (rc %d)\n", dir, n, rc);
        if (summary) printf("0 passed, 1 failed\n");
        exit(1);
    }
}

/* zk.sh leader DIR: the member number that leads, -1 when none does. */
static inline int tl_zk_leader(const char *dir) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash '%s/zk.sh' leader '%s' 2>/dev/null", TL_SERVERS_DIR, dir);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int k = -1;
    if (fscanf(p, "%d", &k) != 1) k = -1;
    pclose(p);
    return k;
}

/* zk.sh member-stop|member-start|member-pause|member-resume|member-kill DIR K;
 * returns the script's exit status. */
static inline int tl_zk_member(const char *action, const char *dir, int k) {
    return tl_sh("bash '%s/zk.sh' %s '%s' %d >/dev/null", TL_SERVERS_DIR, action, dir, k);
}

static inline void tl_zk_ensemble_stop(const char *dir) {
    tl_sh("bash '%s/zk.sh' ensemble-stop '%s' >/dev/null 2>&1", TL_SERVERS_DIR, dir);
}

/* ---- worker processes (the threaded tests re-execute themselves: they never
 * fork without exec) ----------------------------------------------------- */

/* Spawns /proc/self/exe ARGV with EXTRA_ENV ("K=V" strings, NULL-terminated,
 * may be NULL) added to the environment; -1 on failure. */
static inline pid_t tl_spawn_self(char *const argv[], const char *const *extra_env) {
    size_t ne = 0, nx = 0;
    while (environ[ne]) ne++;
    while (extra_env && extra_env[nx]) nx++;
    char **env = calloc(ne + nx + 1, sizeof *env);
    if (!env) return -1;
    for (size_t i = 0; i < nx; i++) env[i] = (char *)extra_env[i];
    for (size_t i = 0; i < ne; i++) env[nx + i] = environ[i];
    pid_t pid = -1;
    int e = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
    free(env);
    if (e) {
        fprintf(stderr, "posix_spawn: %s\n", strerror(e));
        return -1;
    }
    return pid;
}

/* A worker talking over pipes: its stdin and stdout. */
typedef struct {
    pid_t pid;
    int to;     /* its stdin */
    int from;   /* its stdout */
} tl_worker;

/* Spawns /proc/self/exe ARGV as a worker; 0, or -1 on failure. */
static inline int tl_worker_spawn(tl_worker *w, char *const argv[]) {
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
static inline int tl_read_line(int fd, char *buf, size_t n, int timeout_ms) {
    size_t len = 0;
    int64_t end = tl_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(end - tl_now_ms());
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

/* Waits for a line of worker W starting with WANT; returns 0 when seen. */
static inline int tl_expect_line(tl_worker *w, const char *want, char *line, size_t n, int timeout_ms) {
    int got = tl_read_line(w->from, line, n, timeout_ms);
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

static inline void tl_send_line(tl_worker *w, const char *s) {
    size_t n = strlen(s);
    if (write(w->to, s, n) != (ssize_t)n) perror("write to worker");
}

/* Waits for worker W to exit (SIGKILL after TIMEOUT_MS), closes its pipes;
 * returns the wait status. */
static inline int tl_worker_reap(tl_worker *w, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(w->pid, &st, WNOHANG);
        if (r == w->pid) break;
        if (tl_now_ms() > end) {
            kill(w->pid, SIGKILL);
            waitpid(w->pid, &st, 0);
            break;
        }
        tl_sleep_ms(10);
    }
    if (w->to >= 0) close(w->to);
    if (w->from >= 0) close(w->from);
    w->to = w->from = -1;
    return st;
}

static inline int tl_exited_ok(int st) { return WIFEXITED(st) && WEXITSTATUS(st) == 0; }

/* In a worker: one line to stdout (unbuffered). */
static inline void tl_out_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tl_out_line(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && write(1, buf, (size_t)n) < 0) _exit(3);
}

/* In a worker: blocks until stdin says WANT (or EOF). */
static inline void tl_wait_for_line(const char *want) {
    char line[128];
    for (;;) {
        int n = tl_read_line(0, line, sizeof line, 600000);
        if (n < 0 || !strcmp(line, want)) return;
    }
}

/* ---- cross-process counters (flock(2), independent of baton) ------------ */

static inline void tl_counter_init(const char *path, long v) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) { perror(path); exit(1); }
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", v);
    if (write(fd, b, (size_t)n) != n) { perror(path); exit(1); }
    close(fd);
}

static inline long tl_counter_read(const char *path) {
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
static inline long tl_counter_add(const char *path, long delta, const char *maxpath) {
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
        long m = tl_counter_read(maxpath);
        if (v > m) tl_counter_init(maxpath, v);
    }
    flock(fd, LOCK_UN);
    close(fd);
    return v;
}

#endif
