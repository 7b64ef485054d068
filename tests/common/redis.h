/* Raw commands on a test Redis server (hiredis), for the suites that check
 * what the Redis engines left on a server. Only for targets built with Redis
 * (hiredis on the include path). */
#ifndef BATON_TESTS_COMMON_REDIS_H
#define BATON_TESTS_COMMON_REDIS_H

#include <hiredis/hiredis.h>

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/time.h>

/* A connection to 127.0.0.1:PORT with TIMEOUT_S for connect and replies;
 * NULL when the server does not answer. */
static inline redisContext *tl_redis_connect(int port, int timeout_s) {
    struct timeval tv = { timeout_s, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* One command (printf-style, hiredis) on a fresh connection; the reply
 * (the caller frees it) or NULL. */
static inline redisReply *tl_redis_vcmd(int port, int timeout_s, const char *fmt, va_list ap) {
    redisContext *c = tl_redis_connect(port, timeout_s);
    if (!c) return NULL;
    redisReply *r = redisvCommand(c, fmt, ap);
    redisFree(c);
    return r;
}

static inline redisReply *tl_redis_cmd(int port, int timeout_s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = tl_redis_vcmd(port, timeout_s, fmt, ap);
    va_end(ap);
    return r;
}

/* An integer reply's value, -1 for anything else (an error, no server). */
static inline long long tl_redis_int(int port, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = tl_redis_vcmd(port, 5, fmt, ap);
    va_end(ap);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_INTEGER) v = r->integer;
    if (r) freeReplyObject(r);
    return v;
}

/* A command whose reply does not matter, but whose failure is said. */
static inline void tl_redis_do(int port, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = tl_redis_vcmd(port, 5, fmt, ap);
    va_end(ap);
    if (!r || r->type == REDIS_REPLY_ERROR)
        fprintf(stderr, "   (command %s: %s)\n", fmt, r && r->str ? r->str : "no reply");
    if (r) freeReplyObject(r);
}

#endif
