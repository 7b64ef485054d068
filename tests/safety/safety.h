/* Helpers of the safety tests: raw commands on a test server (hiredis,
 * through tests/common/redis.h), the server's clock, INFO commandstats
 * counters. Servers, timing and worker processes (tl_spawn_self: the tests
 * re-execute themselves, never forking without exec, being threaded) come
 * from tests/common/testlib.h (through tests/faults/faults.h). */
#ifndef BATON_SAFETY_H
#define BATON_SAFETY_H

#include "../faults/faults.h"

#include "../common/redis.h"

#include <limits.h>
#include <signal.h>

/* Runs a command (printf-style, hiredis) on PORT; returns the reply (caller
 * frees) or NULL. */
static inline redisReply *sf_cmd(int port, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = tl_redis_vcmd(port, 2, fmt, ap);
    va_end(ap);
    return r;
}

/* An argv command on PORT (binary-safe: script bodies). */
static inline redisReply *sf_cmdv(int port, int argc, const char **argv) {
    redisContext *c = tl_redis_connect(port, 2);
    if (!c) return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    redisFree(c);
    return r;
}

/* An integer reply, or LLONG_MIN. */
static inline long long sf_int(int port, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = tl_redis_vcmd(port, 2, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : LLONG_MIN;
    if (r) freeReplyObject(r);
    return v;
}

/* The server's clock (TIME) in ms, or -1. */
static inline long long sf_server_ms(int port) {
    redisReply *r = sf_cmd(port, "TIME");
    long long ms = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    if (r) freeReplyObject(r);
    return ms;
}

/* The calls of one command in INFO commandstats (0 when absent, -1 when
 * the server does not answer). */
static inline long long sf_cmdstat(int port, const char *cmd) {
    redisReply *r = sf_cmd(port, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    char pat[64];
    snprintf(pat, sizeof pat, "cmdstat_%s:calls=", cmd);
    const char *p = strstr(r->str, pat);
    long long v = p ? atoll(p + strlen(pat)) : 0;
    freeReplyObject(r);
    return v;
}

/* Waits (up to 15 s) until a replica's link to its master is up. */
static inline int sf_wait_link_up(int replica_port) {
    int64_t end = tl_now_ms() + 15000;
    while (tl_now_ms() < end) {
        redisReply *r = sf_cmd(replica_port, "INFO replication");
        int up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up") != NULL;
        if (r) freeReplyObject(r);
        if (up) return 0;
        tl_sleep_ms(50);
    }
    return -1;
}

static inline baton_client *sf_client(const char *uri) {
    baton_client *c = NULL;
    int rc = baton_client_open(&c, uri, NULL);
    if (rc) {
        fprintf(stderr, "FATAL: baton_client_open(%s) = %d (%s): %s\n", uri, rc, baton_strerror(rc),
                baton_error_last()->message ? baton_error_last()->message : "");
        printf("%d passed, %d failed\n", th_passed, th_failed + 1);
        exit(1);
    }
    return c;
}

#endif
