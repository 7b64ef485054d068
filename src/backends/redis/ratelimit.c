/*
 * Rate limiters on Redis (baton_ratelimit_*; docs/ratelimit.md): the
 * limiter KEY is the hash baton_rate:{prefix+KEY} with its configuration
 * ('permits', 'interval' in ms, 'burst') and its GCRA theoretical arrival
 * time ('tat', µs on the server's clock). Every admission is one EVALSHA of
 * the script below, which reads the server's TIME, so the clients' clocks
 * play no part and the decision is atomic on the server. The hash has no
 * expiry (the configuration lives in it, as Redisson's rate limiter keeps
 * its config hash): a server that restarts without persistence forgets the
 * limiter, and the next open stores a configuration and a fresh burst.
 *
 * The script lives in this file (its own SHA1, EVALSHA with an EVAL
 * fallback on NOSCRIPT) so the rate limiter touches no shared script table.
 */
#include "rb.h"

#include <inttypes.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* KEYS[1] the hash; ARGV[1..3] permits, interval_ms, burst; ARGV[4] '1' =
 * replace a different stored configuration; ARGV[5] the admissions wanted
 * ('0' = configure only) or 'inspect'; ARGV[6] the reservation bound (µs).
 *   take    -> {wait_us, permits, interval, burst} (wait <= bound = granted,
 *              the TAT moved on: the caller waits it out)
 *            | {-1, stored permits, interval, burst} (configured otherwise)
 *   inspect -> {ahead_us, permits, interval, burst} | {-2} (nothing stored) */
#define BATON_LUA_RATE                                                         \
    "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"   \
    "local tm = redis.call('time')\n"                                          \
    "local now = tonumber(tm[1]) * 1000000 + tonumber(tm[2])\n"                \
    "local m = redis.call('hmget', KEYS[1], 'permits', 'interval', 'burst', 'tat')\n" \
    "local tat = tonumber(m[4]) or 0\n"                                        \
    "if ARGV[5] == 'inspect' then\n"                                           \
    "  if not m[1] then return {-2} end\n"                                     \
    "  return {math.max(0, tat - now), tonumber(m[1]), tonumber(m[2]), tonumber(m[3])}\n" \
    "end\n"                                                                    \
    "local p, i, b = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n" \
    "if not m[1] or tonumber(m[1]) ~= p or tonumber(m[2]) ~= i or tonumber(m[3]) ~= b then\n" \
    "  if m[1] and ARGV[4] ~= '1' then\n"                                      \
    "    return {-1, tonumber(m[1]), tonumber(m[2]), tonumber(m[3])}\n"        \
    "  end\n"                                                                  \
    "  redis.call('hset', KEYS[1], 'permits', ARGV[1], 'interval', ARGV[2], 'burst', ARGV[3])\n" \
    "end\n"                                                                    \
    "local n = tonumber(ARGV[5])\n"                                            \
    "if n == 0 then return {0, p, i, b} end\n"                                 \
    "local per = i * 1000\n"                                                   \
    "local inc = math.floor(n * per / p)\n"                                    \
    "local tol = math.floor(b * per / p)\n"                                    \
    "local base = math.max(tat, now)\n"                                        \
    "local over = math.max(0, base + inc - now - tol)\n"                       \
    "if n > b then return {math.max(over, 1), p, i, b} end\n"                  \
    "if over > tonumber(ARGV[6]) then return {over, p, i, b} end\n"            \
    "redis.call('hset', KEYS[1], 'tat', string.format('%.0f', base + inc))\n"  \
    "return {over, p, i, b}\n"

static char rate_sha[41];
static pthread_once_t rate_once = PTHREAD_ONCE_INIT;

static void rate_sha_init(void)
{
    unsigned char d[SHA_DIGEST_LENGTH];
    SHA1((const unsigned char *)BATON_LUA_RATE, strlen(BATON_LUA_RATE), d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++) snprintf(rate_sha + 2 * i, 3, "%02x", d[i]);
}

typedef struct {
    char *key;       /* baton_rate:{prefix+KEY} */
} rrate;

static int baton__redis_rate_new(void *eng, const char *name, void **st)
{
    reng *e = eng;
    size_t n = strlen(e->prefix) + strlen(name) + 1;
    char *k = malloc(n);
    rrate *r = calloc(1, sizeof *r);
    *st = NULL;
    if (k && r) {
        snprintf(k, n, "%s%s", e->prefix, name);
        r->key = baton__redis_prefixed("baton_rate", k);
    }
    free(k);
    if (!r || !r->key) {
        if (r) free(r->key);
        free(r);
        return baton_seterr(BATON_ENOMEM, 0, "redis: out of memory");
    }
    *st = r;
    return 0;
}

static void baton__redis_rate_free(void *eng, void *st)
{
    rrate *r = st;
    (void)eng;
    if (!r) return;
    free(r->key);
    free(r);
}

/* One EVALSHA (EVAL when the server lost the script) on a pooled connection. */
static int rate_script(reng *e, rrate *r, const baton_rate_cfg *cfg, int replace, const char *what,
                       int64_t reserve_us, redisReply **out)
{
    char p[16], iv[16], b[16], rs[24];
    const char *argv[11];
    size_t lens[11];
    rconn *c = NULL;
    redisReply *rep = NULL;
    int64_t dl = baton__redis_io_deadline(e);
    int n = 0, rc;
    pthread_once(&rate_once, rate_sha_init);
    snprintf(p, sizeof p, "%" PRIu32, cfg ? cfg->permits : 1);
    snprintf(iv, sizeof iv, "%" PRIu32, cfg ? cfg->interval_ms : 1);
    snprintf(b, sizeof b, "%" PRIu32, cfg ? cfg->burst : 1);
    argv[n++] = "EVALSHA";
    argv[n++] = rate_sha;
    argv[n++] = "1";
    argv[n++] = r->key;
    argv[n++] = p;
    argv[n++] = iv;
    argv[n++] = b;
    argv[n++] = replace ? "1" : "0";
    argv[n++] = what;
    snprintf(rs, sizeof rs, "%" PRId64, reserve_us);
    argv[n++] = rs;
    for (int i = 0; i < n; i++) lens[i] = strlen(argv[i]);
    *out = NULL;
    if ((rc = rpool_get(&e->pool, &c, dl))) return rc;
    rc = rconn_command(c, n, argv, lens, &rep, dl);
    if (!rc && rep->type == REDIS_REPLY_ERROR && rep->str && !strncmp(rep->str, "NOSCRIPT", 8)) {
        rreply_free(rep);
        rep = NULL;
        argv[0] = "EVAL";
        argv[1] = BATON_LUA_RATE;
        lens[0] = 4;
        lens[1] = strlen(BATON_LUA_RATE);
        rc = rconn_command(c, n, argv, lens, &rep, dl);
    }
    rpool_put(&e->pool, c);
    if (rc) return rc;
    if (rep->type == REDIS_REPLY_ERROR) {
        rc = rreply_error(rep, "the rate limiter script failed");
        rreply_free(rep);
        return rc;
    }
    *out = rep;
    return 0;
}

/* {n, permits, interval, burst}, or {-2}. */
static int parse(redisReply *rep, long long *n, baton_rate_cfg *cfg)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1) return -1;
    for (size_t i = 0; i < rep->elements; i++)
        if (rep->element[i]->type != REDIS_REPLY_INTEGER) return -1;
    *n = rep->element[0]->integer;
    if (rep->elements == 1) return *n == -2 ? 0 : -1;
    if (rep->elements != 4) return -1;
    cfg->permits = (uint32_t)rep->element[1]->integer;
    cfg->interval_ms = (uint32_t)rep->element[2]->integer;
    cfg->burst = (uint32_t)rep->element[3]->integer;
    return 0;
}

static int baton__redis_rate_take(void *eng, void *st, const baton_rate_cfg *cfg, int replace, uint32_t n,
                                  int64_t reserve_us, int64_t *wait_us, baton_rate_cfg *stored)
{
    rrate *r = st;
    redisReply *rep = NULL;
    long long w = 0;
    char ns[16];
    int rc;
    snprintf(ns, sizeof ns, "%" PRIu32, n);
    *wait_us = 0;
    if ((rc = rate_script(eng, r, cfg, replace, ns, reserve_us, &rep))) return rc;
    if (parse(rep, &w, stored) || w == -2) return baton__redis_bad_reply(rep, "the rate limiter script");
    rreply_free(rep);
    if (w == -1) return baton_seterr(BATON_ECONFLICT, 0, "redis: rate limiter '%s' is configured otherwise", r->key);
    *wait_us = w;
    return 0;
}

static int baton__redis_rate_inspect(void *eng, void *st, baton_rate_cfg *stored, int64_t *ahead_us)
{
    rrate *r = st;
    redisReply *rep = NULL;
    long long a = 0;
    int rc;
    if ((rc = rate_script(eng, r, NULL, 0, "inspect", 0, &rep))) return rc;
    if (parse(rep, &a, stored) || a == -1) return baton__redis_bad_reply(rep, "the rate limiter script");
    rreply_free(rep);
    if (a == -2) return baton_seterr(BATON_ENOENT, 0, "redis: no rate limiter '%s'", r->key);
    *ahead_us = a;
    return 0;
}

const baton_ratelimit_methods baton__ratelimit_redis = {
    .create = baton__redis_rate_new,
    .destroy = baton__redis_rate_free,
    .take = baton__redis_rate_take,
    .inspect = baton__redis_rate_inspect,
};
