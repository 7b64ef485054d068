/*
 * The Lua scripts of the Redis backend. Each runs as one EVALSHA (EVAL when
 * the server does not know it yet): one round trip per acquire, release,
 * renewal and info. All keys of one lock share a hash slot (see
 * docs/redis-layout.md), so the scripts also work on a cluster node.
 */
#ifndef BATON_REDIS_SCRIPTS_H
#define BATON_REDIS_SCRIPTS_H

/* layout=redisson: KEYS lock hash, fence counter, holder string;
 * ARGV lease ms, field "<uuid>:<tid>", holder description.
 * -> {1, fence} granted, or {0, pttl} held by someone (even by our field:
 * the core does reentrancy itself). */
#define BATON_LUA_ACQ_REDISSON                                                 \
    "if redis.call('exists', KEYS[1]) == 0 then\n"                             \
    "  local fence = redis.call('incr', KEYS[2])\n"                            \
    "  redis.call('hset', KEYS[1], ARGV[2], 1)\n"                              \
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"                              \
    "  redis.call('set', KEYS[3], ARGV[3], 'px', ARGV[1])\n"                   \
    "  return {1, fence}\n"                                                    \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1])}\n"

/* KEYS lock hash, unlock channel, holder string; ARGV field -> 1 released, 0 not ours. */
#define BATON_LUA_REL_REDISSON                                                 \
    "if redis.call('type', KEYS[1]).ok ~= 'hash'\n"                            \
    "   or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then\n"                \
    "  return 0\n"                                                             \
    "end\n"                                                                    \
    "redis.call('del', KEYS[1], KEYS[3])\n"                                    \
    "redis.call('publish', KEYS[2], 0)\n"                                      \
    "return 1\n"

/* KEYS lock hash, holder string; ARGV lease ms, field -> 1 renewed, 0 not ours. */
#define BATON_LUA_RENEW_REDISSON                                               \
    "if redis.call('type', KEYS[1]).ok == 'hash'\n"                            \
    "   and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n"               \
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"                              \
    "  redis.call('pexpire', KEYS[2], ARGV[1])\n"                              \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* layout=simple: KEYS lock string, fence counter; ARGV value, lease ms. */
#define BATON_LUA_ACQ_SIMPLE                                                   \
    "if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then\n"       \
    "  return {1, redis.call('incr', KEYS[2])}\n"                              \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1])}\n"

/* KEYS lock string, unlock channel; ARGV value. */
#define BATON_LUA_REL_SIMPLE                                                   \
    "if redis.call('type', KEYS[1]).ok == 'string'\n"                          \
    "   and redis.call('get', KEYS[1]) == ARGV[1] then\n"                      \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  redis.call('publish', KEYS[2], 0)\n"                                    \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* KEYS lock string; ARGV value, lease ms. */
#define BATON_LUA_RENEW_SIMPLE                                                 \
    "if redis.call('type', KEYS[1]).ok == 'string'\n"                          \
    "   and redis.call('get', KEYS[1]) == ARGV[1] then\n"                      \
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"                              \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* Both layouts: KEYS lock, fence counter, holder string (redisson; the fence
 * key again for simple). -> {held, pttl, holder, fence}. A foreign holder
 * without a description shows its hash field (Redisson) or its value. */
#define BATON_LUA_INFO                                                         \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "local fence = redis.call('get', KEYS[2]) or '0'\n"                        \
    "if t == 'none' then return {0, -2, '', fence} end\n"                      \
    "local holder = ''\n"                                                      \
    "if t == 'string' then\n"                                                  \
    "  local v = redis.call('get', KEYS[1])\n"                                 \
    "  local sp = string.find(v, ' ', 1, true)\n"                              \
    "  if sp then holder = string.sub(v, sp + 1) else holder = v end\n"        \
    "elseif t == 'hash' then\n"                                                \
    "  holder = redis.call('get', KEYS[3])\n"                                  \
    "  if not holder then holder = redis.call('hkeys', KEYS[1])[1] or '' end\n"\
    "end\n"                                                                    \
    "return {1, redis.call('pttl', KEYS[1]), holder, fence}\n"

#endif
