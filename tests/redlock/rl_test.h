/* Helpers for the RedLock tests: five throwaway redis-server nodes started with
 * tests/servers/redis.sh in temp dirs, killed (SIGKILL) and restarted; raw
 * hiredis access to check what is on each node; reaping worker processes
 * (the test re-executes itself with tl_spawn_self: it never forks without
 * exec, being threaded). Timing, servers and spawning: tests/common/testlib.h. */
#ifndef BATON_RL_TEST_H
#define BATON_RL_TEST_H

#include <baton.h>
#include "../harness.h"
#include "../common/testlib.h"

#include "../common/redis.h"

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

#ifndef RL_TMP
#define RL_TMP "/tmp"
#endif

#define RL_NODES 5

static char rl_base[1024];
static char rl_dir[RL_NODES][1100];
static int rl_port[RL_NODES];

/* Five nodes with persistence (AOF, fsync on every write) under
 * $BATON_TEST_TMP/redlock_<name>. */
static inline void rl_start_nodes(const char *name) {
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(rl_base, sizeof rl_base, "%s/redlock_%s", base && *base ? base : RL_TMP, name);
    for (int i = 0; i < RL_NODES; i++) {
        snprintf(rl_dir[i], sizeof rl_dir[i], "%s/n%d", rl_base, i);
        tl_server("redis", "stop", rl_dir[i], NULL, 1); /* a leftover of an interrupted run */
    }
    if (tl_sh("rm -rf '%s' && mkdir -p '%s'", rl_base, rl_base) != 0) {
        fprintf(stderr, "cannot create %s\n", rl_base);
        exit(1);
    }
    for (int i = 0; i < RL_NODES; i++)
        rl_port[i] = tl_server("redis", "start", rl_dir[i], "--appendonly yes --appendfsync always", 1);
}

static inline void rl_stop_nodes(void) {
    for (int i = 0; i < RL_NODES; i++) tl_server("redis", "stop", rl_dir[i], NULL, 1);
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
        for (int k = 0; k < 400 && rl_pid_alive((pid_t)pid); k++) tl_sleep_ms(5);
    }
    tl_server("redis", "stop", rl_dir[i], NULL, 1); /* forgets the pid and port files */
}

static inline void rl_restart_node(int i) {
    int port = tl_server("redis", "restart", rl_dir[i], NULL, 1);
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

/* The string value of KEY on node I into buf ("" when absent); -1 when the
 * node does not answer. */
static inline int rl_raw_get(int i, const char *key, char *buf, size_t n) {
    redisReply *r = tl_redis_cmd(rl_port[i], 1, "GET %s", key);
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
    return rc;
}

/* 1 when KEY exists on node I, 0 when not, -1 when the node does not answer. */
static inline int rl_raw_exists(int i, const char *key) {
    redisReply *r = tl_redis_cmd(rl_port[i], 1, "EXISTS %s", key);
    if (!r) return -1;
    int rc = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return rc;
}

/* SET KEY VALUE NX PX ms on node I: 1 set, 0 not set, -1 error. */
static inline int rl_raw_setnx(int i, const char *key, const char *value, int px) {
    redisReply *r = tl_redis_cmd(rl_port[i], 1, "SET %s %s NX PX %d", key, value, px);
    if (!r) return -1;
    int rc = !r ? -1 : r->type == REDIS_REPLY_STATUS ? 1 : r->type == REDIS_REPLY_NIL ? 0 : -1;
    freeReplyObject(r);
    return rc;
}

static inline int rl_raw_del(int i, const char *key) {
    redisReply *r = tl_redis_cmd(rl_port[i], 1, "DEL %s", key);
    if (!r) return -1;
    int rc = r && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
    freeReplyObject(r);
    return rc;
}

/* ---- worker processes ---------------------------------------------------------------- */

/* Waits for PID to exit (killing it after TIMEOUT_MS); returns the wait status. */
static inline int rl_reap(pid_t pid, int timeout_ms) {
    int64_t end = tl_now_ms() + timeout_ms;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        if (r < 0) return -1;
        if (tl_now_ms() > end) {
            fprintf(stderr, "worker %ld timed out; killing it\n", (long)pid);
            kill(pid, SIGCONT);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return st;
        }
        tl_sleep_ms(5);
    }
}

static inline int rl_exited_ok(int st) { return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0; }

#endif
