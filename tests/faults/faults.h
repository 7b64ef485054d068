/* Helpers for the Redis fault tests: throwaway servers started with
 * tests/servers/redis.sh in a temp dir, tiny loopback listeners, timing. */
#ifndef BATON_FAULTS_H
#define BATON_FAULTS_H

#include "baton.h"
#include "../harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef FT_REDIS_SH
#error "FT_REDIS_SH must point to tests/servers/redis.sh"
#endif
#ifndef FT_TMP
#define FT_TMP "/tmp"
#endif

static inline int64_t ft_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void ft_sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Skip (77), or fail when every server is required. */
static inline void ft_skip(const char *why) {
    const char *req = getenv("BATON_REQUIRE_ALL");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "FAIL: %s (and BATON_REQUIRE_ALL=1)\n", why);
        exit(1);
    }
    fprintf(stderr, "SKIP: %s\n", why);
    exit(TH_SKIP);
}

/* A fresh directory FT_TMP/faults_<name>. */
static inline const char *ft_dir(const char *name) {
    static char buf[4][1024];
    static int n;
    char *d = buf[n++ % 4];
    const char *base = getenv("BATON_TEST_TMP");
    snprintf(d, sizeof buf[0], "%s/faults_%s", base && *base ? base : FT_TMP, name);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", d, d);
    if (system(cmd) != 0) { fprintf(stderr, "cannot create %s\n", d); exit(1); }
    return d;
}

/* Runs a shell command; returns its exit status. */
static inline int ft_sh(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

/* redis.sh ACTION DIR [ARGS...] (ARGS already shell-quoted); returns the port,
 * exits 77 / 1 when redis-server is missing. */
static inline int ft_redis(const char *action, const char *dir, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "bash '%s' %s '%s' %s", FT_REDIS_SH, action, dir, args ? args : "");
    FILE *p = popen(cmd, "r");
    if (!p) { perror("popen"); exit(1); }
    int port = 0;
    if (fscanf(p, "%d", &port) != 1) port = 0;
    int st = pclose(p);
    int rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
    if (rc == 77) ft_skip("redis-server is not installed");
    if (strcmp(action, "stop") != 0 && (rc != 0 || port <= 0)) {
        fprintf(stderr, "FAIL: redis.sh %s %s failed (rc %d)\n", action, dir, rc);
        exit(1);
    }
    return port;
}

static inline int ft_redis_start(const char *dir, const char *args) { return ft_redis("start", dir, args); }
static inline int ft_redis_restart(const char *dir) { return ft_redis("restart", dir, NULL); }
static inline void ft_redis_stop(const char *dir) { ft_redis("stop", dir, NULL); }

/* A loopback TCP listener on a free port. */
static inline int ft_listen(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
        perror("listen");
        exit(1);
    }
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return fd;
}

#endif
