/* Helpers for the RedLock tests: five throwaway redis-server nodes started with
 * tests/servers/redis.sh in temp dirs, killed (SIGKILL) and restarted; raw
 * hiredis access to check what is on each node; timing; worker processes
 * (the test re-executes itself: it never forks without exec, being threaded). */
#ifndef BATON_RL_TEST_H
#define BATON_RL_TEST_H

#include <baton.h>
#include "../harness.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RL_REDIS_SH
#error "RL_REDIS_SH must point to tests/servers/redis.sh"
#endif
#ifndef RL_TMP
#define RL_TMP "/tmp"
#endif

#define RL_NODES 5

extern char **environ;

static char rl_base[1024];
static char rl_dir[RL_NODES][1100];
static int rl_port[RL_NODES];

static inline int64_t rl_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void rl_sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Skip (77), or fail when every server is required. */
static inline void rl_skip(const char *why) {
    const char *req = getenv("BATON_REQUIRE_ALL");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: %s (and BATON_REQUIRE_ALL=1)\n", why);
        printf("0 passed, 1 failed\n");
        exit(1);
    }
    fprintf(stderr, "SKIP: %s\n", why);
    printf("0 passed, 0 failed\n");
    exit(TH_SKIP);
}

static inline int rl_sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* redis.sh ACTION DIR [ARGS]; returns the port (0 for stop). */
static inline int rl_redis(const char *action, const char *dir, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' %s", RL_REDIS_SH, action, dir, args ? args : "");
    FILE *p = popen(cmd, "r");
    if (!p) {
        perror("popen");
        exit(1);
    }
    int port = 0;
    if (fscanf(p, "%d", &port) != 1) port = 0;
    int st = pclose(p);
    int rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    if (rc == 77) rl_skip("redis-server is not installed");
    if (strcmp(action, "stop") != 0 && (rc != 0 || port <= 0)) {
        fprintf(stderr, "FAIL: redis.sh %s %s failed (rc %d)\n", action, dir, rc);
        printf("0 passed, 1 failed\n");
        exit(1);
    }
    return port;
}

/* Five nodes with persistence (AOF, fsync on every write) under
 * $BATON_TEST_TMP/redlock_<name>. */
static inline void rl_start_nodes(const char *name) {
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(rl_base, sizeof rl_base, "%s/redlock_%s", base && *base ? base : RL_TMP, name);
    for (int i = 0; i < RL_NODES; i++) {
        snprintf(rl_dir[i], sizeof rl_dir[i], "%s/n%d", rl_base, i);
        rl_redis("stop", rl_dir[i], NULL); /* a leftover of an interrupted run */
    }
    if (rl_sh("rm -rf '%s' && mkdir -p '%s'", rl_base, rl_base) != 0) {
        fprintf(stderr, "cannot create %s\n", rl_base);
        exit(1);
    }
    for (int i = 0; i < RL_NODES; i++)
        rl_port[i] = rl_redis("start", rl_dir[i], "--appendonly yes --appendfsync always");
}

static inline void rl_stop_nodes(void) {
    for (int i = 0; i < RL_NODES; i++) rl_redis("stop", rl_dir[i], NULL);
}

static inline int rl_pid_alive(pid_t pid) {
    char p[64], st = 0;
    if (kill(pid, 0) != 0) return 0;
    snprintf(p, sizeof p, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 0;
    int n = fscanf(f, "%*d %*s %c", &st);
    fclose(f);
    return n == 1 && st != 'Z' && st != 'X';
}

/* SIGKILL: a crash, not a shutdown (nothing is saved on the way out). */
static inline void rl_kill_node(int i) {
    char p[1200];
    snprintf(p, sizeof p, "%s/pid", rl_dir[i]);
    FILE *f = fopen(p, "r");
    long pid = 0;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1) pid = 0;
        fclose(f);
    }
    if (pid > 0) {
        kill((pid_t)pid, SIGKILL);
        for (int k = 0; k < 400 && rl_pid_alive((pid_t)pid); k++) rl_sleep_ms(5);
    }
    rl_redis("stop", rl_dir[i], NULL); /* forgets the pid and port files */
}

static inline void rl_restart_node(int i) {
    int port = rl_redis("restart", rl_dir[i], NULL);
    if (port != rl_port[i]) fprintf(stderr, "warning: node %d came back on port %d, not %d\n", i, port, rl_port[i]);
}

/* redlock://127.0.0.1:p0,...,127.0.0.1:p4/0?EXTRA */
static inline void rl_uri(char *out, size_t n, const char *extra) {
    int off = snprintf(out, n, "redlock://");
    for (int i = 0; i < RL_NODES; i++)
        off += snprintf(out + off, n - (size_t)off, "%s127.0.0.1:%d", i ? "," : "", rl_port[i]);
    snprintf(out + off, n - (size_t)off, "/0%s%s", extra && *extra ? "?" : "", extra ? extra : "");
}

/* ---- raw node access ------------------------------------------------------------- */

static inline redisContext *rl_raw(int i) {
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", rl_port[i], tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* The string value of KEY on node I into buf ("" when absent); -1 when the
 * node does not answer. */
static inline int rl_raw_get(int i, const char *key, char *buf, size_t n) {
    redisContext *c = rl_raw(i);
    if (!c) return -1;
    redisReply *r = redisCommand(c, "GET %s", key);
    int rc = -1;
    if (r) {
        if (r->type == REDIS_REPLY_STRING) {
            snprintf(buf, n, "%s", r->str);
            rc = 1;
        } else if (r->type == REDIS_REPLY_NIL) {
            buf[0] = 0;
            rc = 0;
        }
        freeReplyObject(r);
    }
    redisFree(c);
    return rc;
}

/* 1 when KEY exists on node I, 0 when not, -1 when the node does not answer. */
static inline int rl_raw_exists(int i, const char *key) {
    redisContext *c = rl_raw(i);
    if (!c) return -1;
    redisReply *r = redisCommand(c, "EXISTS %s", key);
    int rc = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* SET KEY VALUE NX PX ms on node I: 1 set, 0 not set, -1 error. */
static inline int rl_raw_setnx(int i, const char *key, const char *value, int px) {
    redisContext *c = rl_raw(i);
    if (!c) return -1;
    redisReply *r = redisCommand(c, "SET %s %s NX PX %d", key, value, px);
    int rc = !r ? -1 : r->type == REDIS_REPLY_STATUS ? 1 : r->type == REDIS_REPLY_NIL ? 0 : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}

static inline int rl_raw_del(int i, const char *key) {
    redisContext *c = rl_raw(i);
    if (!c) return -1;
    redisReply *r = redisCommand(c, "DEL %s", key);
    int rc = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* ---- worker processes ---------------------------------------------------------------- */

/* Spawns /proc/self/exe ARGV with EXTRA_ENV ("K=V" strings, NULL-terminated)
 * added to the environment. */
static inline pid_t rl_spawn(char *const argv[], const char *const *extra_env) {
    size_t ne = 0, nx = 0;
    while (environ[ne]) ne++;
    while (extra_env && extra_env[nx]) nx++;
    char **env = calloc(ne + nx + 1, sizeof *env);
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

/* Waits for PID to exit (killing it after TIMEOUT_MS); returns the wait status. */
static inline int rl_reap(pid_t pid, int timeout_ms) {
    int64_t end = rl_now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0) return -1;
        if (rl_now_ms() > end) {
            fprintf(stderr, "worker %ld timed out; killing it\n", (long)pid);
            kill(pid, SIGCONT);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return st;
        }
        rl_sleep_ms(5);
    }
}

static inline int rl_exited_ok(int st) { return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0; }

#endif
