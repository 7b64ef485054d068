/*
 * Redis replies through the engine's connection layer (src/backends/redis/
 * conn.c: hiredis' reader with conn.c's own reply constructors, which refuse
 * huge arrays): the fuzz input, after its first byte, is everything a server
 * sends on a new connection, served from a loopback socket (loopback.h) and
 * then the end of the stream. The first byte says whether the connection
 * opens with AUTH and SELECT (their replies come first, as rconn_open reads
 * them). Then a PING is sent and its reply read (rconn_command), and every
 * further reply is taken as the subscriber takes its messages
 * (rconn_read_avail, rconn_next_reply). Each reply must be well-formed (no
 * NULL element, strings NUL-terminated at their length), is handed to the
 * code that reads server text (rreply_error, baton__redis_cmdstats), and
 * every call must end with a reply or an error code, without waiting for
 * its deadline (the stream has ended).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "redis_int.h"
#include "loopback.h"

#define EXPECT(c) do { if (!(c)) { fprintf(stderr, "fuzz_redis: %s:%d: %s\n", __FILE__, __LINE__, #c); abort(); } } while (0)

static void count(void *arg, const char *op, uint64_t n)
{
    (void)n;
    EXPECT(strlen(op) < 64);   /* "" when the server's name has a NUL byte: harmless */
    ++*(int *)arg;
}

static void walk(const redisReply *r, int depth)
{
    int n = 0;
    EXPECT(r && depth < 16);
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        EXPECT(r->str && r->str[r->len] == 0);
        if (r->type == REDIS_REPLY_ERROR) {
            int rc = rreply_error(r, "fuzz");
            EXPECT(rc < 0 && baton_error_last()->message);
        }
        baton__redis_cmdstats(r->str, r->len, count, &n);
        break;
    case REDIS_REPLY_ARRAY:
        EXPECT(r->elements == 0 || r->element);
        for (size_t i = 0; i < r->elements; i++) walk(r->element[i], depth + 1);
        break;
    case REDIS_REPLY_INTEGER:
    case REDIS_REPLY_NIL:
        break;
    default:
        fprintf(stderr, "fuzz_redis: a reply of type %d\n", r->type);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rcfg cfg = { .host = "127.0.0.1", .connect_timeout_ms = 2000, .io_timeout_ms = 5000 };
    rconn *c = NULL;
    redisReply *r = NULL;
    const char *ping[1] = { "PING" };
    size_t plen[1] = { 4 };
    int rc;
    if (size < 1) return 0;
    cfg.port = lb_port();
    if (data[0] & 1) cfg.password = "fuzz-password";
    if (data[0] & 2) cfg.user = "fuzz-user";
    if (data[0] & 4) cfg.db = 3;
    unsigned long before = lb_serve(data + 1, size - 1);
    int64_t deadline = baton_now_ns() + 5000000000LL;
    rc = rconn_open(&cfg, &c, deadline);
    if (rc) {
        EXPECT(rc < 0 && !c && baton_error_last()->message);
        EXPECT(baton_now_ns() < deadline);
        goto out;
    }
    rc = rconn_command(c, 1, ping, plen, &r, deadline);
    EXPECT(rc <= 0 && baton_now_ns() < deadline);
    if (rc) {
        EXPECT(!r && c->broken);
        goto out;
    }
    walk(r, 0);
    rreply_free(r);
    /* the rest, as the subscriber reads it */
    for (int i = 0; i < 100000; i++) {
        r = NULL;
        int g = rconn_next_reply(c, &r);
        if (g < 0) break;
        if (g > 0) {
            walk(r, 0);
            rreply_free(r);
            continue;
        }
        if (rconn_read_avail(c)) break;   /* the end of the stream, at the latest */
        struct pollfd pf = { .fd = c->fd, .events = POLLIN };
        if (poll(&pf, 1, 5000) <= 0) {
            fprintf(stderr, "fuzz_redis: the stream did not end\n");
            abort();
        }
    }
out:
    if (getenv("BATON_FUZZ_VERBOSE"))   /* what a seed does: BATON_FUZZ_VERBOSE=1 fuzz_redis corpus/redis */
        fprintf(stderr, "rc %d (%s)\n", rc, rc ? baton_error_last()->message : "ok");
    rconn_free(c);
    lb_wait(before, 1);
    return 0;
}
