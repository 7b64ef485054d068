/*
 * The Lua scripts of the Redis backend's values, groups and queues
 * (issue 24; layouts in docs/redis-layout.md). Like the lock scripts
 * (scripts.h, which this header needs first), each operation is one
 * EVALSHA, so every check and update is atomic on the server; the keys of
 * one value, group or queue share the hash slot of its name. Deadlines are
 * the server's clock (TIME), versions and fences are drawn like lock fences
 * (fence_next: max(counter + 1, the server clock in microseconds)), so they
 * keep growing across a restart that lost the counters.
 */
#ifndef BATON_REDIS_SCRIPTS_COORD_H
#define BATON_REDIS_SCRIPTS_COORD_H

/* ---- values -----------------------------------------------------------------
 * KEYS[1] V = the value (a plain string: redis-cli GET/SET work on it),
 * KEYS[2] M = its meta hash: 'ver' (the version of what V holds, or held
 * last) and 'sha' (sha1 of that content; '' = absent). M is never deleted,
 * so versions grow across delete and re-create. Every script first adopts a
 * change made by someone else (redis-cli SET, DEL, an expiry): V's sha1
 * differs from the recorded one -> a new version, and it is published.
 * ARGV[1] op, ARGV[2] channel, ARGV[3] expect ('any' or a version; 0 =
 * absent), ARGV[4] data.
 *   get -> {} absent | {version, data}
 *   ver -> version (0 = absent)
 *   set -> {1, new version} | {0, version now} (expect failed)
 *   del -> {1, new version} | {0, version now} (expect failed) | {-1, 0} absent */
#define BATON_LUA_VALUE                                                        \
    BATON_LUA_EFFECTS BATON_LUA_FENCE                                          \
    "local function vnext(v)\n"                                                \
    "  local tm = redis.call('time')\n"                                        \
    "  local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])\n"               \
    "  if v + 1 > us then return v + 1 end\n"                                  \
    "  return us\n"                                                            \
    "end\n"                                                                    \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "if t ~= 'string' and t ~= 'none' then\n"                                  \
    "  return redis.error_reply('WRONGTYPE baton: the value key holds a ' .. t)\n" \
    "end\n"                                                                    \
    "local cur = redis.call('get', KEYS[1])\n"                                 \
    "local sha = cur and redis.sha1hex(cur) or ''\n"                           \
    "local m = redis.call('hmget', KEYS[2], 'ver', 'sha')\n"                   \
    "local ver = tonumber(m[1]) or 0\n"                                        \
    "if sha ~= (m[2] or '') then\n"                                            \
    "  ver = vnext(ver)\n"                                                     \
    "  redis.call('hmset', KEYS[2], 'ver', fence_str(ver), 'sha', sha)\n"       \
    "  redis.call('publish', ARGV[2], fence_str(ver))\n"                       \
    "end\n"                                                                    \
    "local now = cur and ver or 0\n"                                           \
    "local op = ARGV[1]\n"                                                     \
    "if op == 'ver' then return now end\n"                                     \
    "if op == 'get' then\n"                                                    \
    "  if not cur then return {} end\n"                                        \
    "  return {now, cur}\n"                                                    \
    "end\n"                                                                    \
    "if op == 'del' and not cur then return {-1, 0} end\n"                     \
    "if ARGV[3] ~= 'any' and tonumber(ARGV[3]) ~= now then return {0, now} end\n" \
    "ver = vnext(ver)\n"                                                       \
    "if op == 'set' then\n"                                                    \
    "  redis.call('set', KEYS[1], ARGV[4])\n"                                  \
    "  redis.call('hmset', KEYS[2], 'ver', fence_str(ver), 'sha', redis.sha1hex(ARGV[4]))\n" \
    "elseif op == 'del' then\n"                                                \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  redis.call('hmset', KEYS[2], 'ver', fence_str(ver), 'sha', '')\n"        \
    "else\n"                                                                   \
    "  return redis.error_reply('ERR baton: unknown value operation')\n"       \
    "end\n"                                                                    \
    "redis.call('publish', ARGV[2], fence_str(ver))\n"                         \
    "return {1, ver}\n"

/* ---- groups -----------------------------------------------------------------
 * KEYS[1] Z = zset member id -> lease deadline (server ms), KEYS[2] H = hash
 * id -> value, KEYS[3] O = hash id -> owner (32 hex digits), KEYS[4] G = the
 * group's change counter (drawn like a fence on every join, leave and
 * expiry). Every script first drops the members whose deadline passed
 * (HDEL, ZREMRANGEBYSCORE), bumps G and publishes when it dropped any.
 * ARGV[1] channel, then per script below. */
#define BATON_LUA_GROUP_GC                                                     \
    BATON_LUA_NOW BATON_LUA_FENCE                                              \
    "local function bump()\n"                                                  \
    "  local v = fence_next(KEYS[4])\n"                                        \
    "  redis.call('publish', ARGV[1], fence_str(v))\n"                         \
    "  return v\n"                                                             \
    "end\n"                                                                    \
    "local dead = redis.call('zrangebyscore', KEYS[1], '-inf', now)\n"         \
    "if #dead > 0 then\n"                                                      \
    "  for i = 1, #dead do\n"                                                  \
    "    redis.call('hdel', KEYS[2], dead[i])\n"                               \
    "    redis.call('hdel', KEYS[3], dead[i])\n"                               \
    "  end\n"                                                                  \
    "  redis.call('zremrangebyscore', KEYS[1], '-inf', now)\n"                 \
    "  bump()\n"                                                               \
    "end\n"                                                                    \
    "local function mine(id, owner)\n"                                         \
    "  return redis.call('zscore', KEYS[1], id) and redis.call('hget', KEYS[3], id) == owner\n" \
    "end\n"

/* ARGV channel, id, value, owner, lease ms -> {1, change} joined | {0, 0} a live member has the id. */
#define BATON_LUA_GROUP_JOIN                                                   \
    BATON_LUA_GROUP_GC                                                         \
    "if redis.call('zscore', KEYS[1], ARGV[2]) then return {0, 0} end\n"       \
    "redis.call('zadd', KEYS[1], now + tonumber(ARGV[5]), ARGV[2])\n"          \
    "redis.call('hset', KEYS[2], ARGV[2], ARGV[3])\n"                          \
    "redis.call('hset', KEYS[3], ARGV[2], ARGV[4])\n"                          \
    "return {1, bump()}\n"

/* ARGV channel, id, owner -> 1 left | 0 not ours (expired, or someone else's). */
#define BATON_LUA_GROUP_LEAVE                                                  \
    BATON_LUA_GROUP_GC                                                         \
    "if not mine(ARGV[2], ARGV[3]) then return 0 end\n"                        \
    "redis.call('zrem', KEYS[1], ARGV[2])\n"                                   \
    "redis.call('hdel', KEYS[2], ARGV[2])\n"                                   \
    "redis.call('hdel', KEYS[3], ARGV[2])\n"                                   \
    "bump()\n"                                                                 \
    "return 1\n"

/* ARGV channel, id, owner, lease ms -> 1 renewed | 0 not ours. */
#define BATON_LUA_GROUP_RENEW                                                  \
    BATON_LUA_GROUP_GC                                                         \
    "if not mine(ARGV[2], ARGV[3]) then return 0 end\n"                        \
    "redis.call('zadd', KEYS[1], now + tonumber(ARGV[4]), ARGV[2])\n"          \
    "return 1\n"

/* ARGV channel, 'list' | 'state' -> {change, ms to the next expiry (-1 none)
 * [, id, value]...}: 'state' without the members (a watcher's re-check). */
#define BATON_LUA_GROUP_LIST                                                   \
    BATON_LUA_GROUP_GC                                                         \
    "local out = {tonumber(redis.call('get', KEYS[4]) or '0') or 0, -1}\n"     \
    "local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')\n"        \
    "if first[2] then out[2] = math.max(0, tonumber(first[2]) - now) end\n"    \
    "if ARGV[2] == 'list' then\n"                                              \
    "  local ids = redis.call('zrange', KEYS[1], 0, -1)\n"                     \
    "  for i = 1, #ids do\n"                                                   \
    "    out[#out + 1] = ids[i]\n"                                             \
    "    out[#out + 1] = redis.call('hget', KEYS[2], ids[i]) or ''\n"          \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "return out\n"

/* ---- queues -----------------------------------------------------------------
 * KEYS[1] I = hash item id -> data, KEYS[2] W = list of waiting ids (FIFO:
 * RPUSH at put, LPOP at take), KEYS[3] T = zset taken id -> lease deadline
 * (server ms), KEYS[4] O = hash taken id -> "<owner hex>:<fence>", KEYS[5]
 * S = the counter item ids and take fences are drawn from. Every script
 * first puts items whose lease passed back at the head of W (oldest first)
 * and publishes when it did. ARGV[1] channel, then per script below. */
#define BATON_LUA_QUEUE_GC                                                     \
    BATON_LUA_NOW BATON_LUA_FENCE                                              \
    "local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)\n"         \
    "if #dead > 0 then\n"                                                      \
    "  table.sort(dead, function(a, b) return tonumber(a) > tonumber(b) end)\n" \
    "  for i = 1, #dead do\n"                                                  \
    "    redis.call('hdel', KEYS[4], dead[i])\n"                               \
    "    if redis.call('hexists', KEYS[1], dead[i]) == 1 then redis.call('lpush', KEYS[2], dead[i]) end\n" \
    "  end\n"                                                                  \
    "  redis.call('zremrangebyscore', KEYS[3], '-inf', now)\n"                 \
    "  redis.call('publish', ARGV[1], 'r')\n"                                  \
    "end\n"                                                                    \
    "local function mine(id, owner)\n"                                         \
    "  return redis.call('zscore', KEYS[3], id) and redis.call('hget', KEYS[4], id) == owner\n" \
    "end\n"

/* ARGV channel, data -> the new item's id. */
#define BATON_LUA_QUEUE_PUT                                                    \
    BATON_LUA_QUEUE_GC                                                         \
    "local id = fence_str(fence_next(KEYS[5]))\n"                              \
    "redis.call('hset', KEYS[1], id, ARGV[2])\n"                               \
    "redis.call('rpush', KEYS[2], id)\n"                                       \
    "redis.call('publish', ARGV[1], 'p')\n"                                    \
    "return id\n"

/* ARGV channel, owner hex, lease ms -> {1, fence, id, data} taken |
 * {0, ms to the next lease that runs out (-1 none)}. Ids whose data is gone
 * (deleted by hand) are skipped. */
#define BATON_LUA_QUEUE_TAKE                                                   \
    BATON_LUA_QUEUE_GC                                                         \
    "while true do\n"                                                          \
    "  local id = redis.call('lpop', KEYS[2])\n"                               \
    "  if not id then break end\n"                                             \
    "  local data = redis.call('hget', KEYS[1], id)\n"                         \
    "  if data then\n"                                                         \
    "    local f = fence_next(KEYS[5])\n"                                      \
    "    redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), id)\n"           \
    "    redis.call('hset', KEYS[4], id, ARGV[2] .. ':' .. fence_str(f))\n"    \
    "    return {1, f, id, data}\n"                                            \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local first = redis.call('zrange', KEYS[3], 0, 0, 'withscores')\n"        \
    "if first[2] then return {0, math.max(0, tonumber(first[2]) - now)} end\n" \
    "return {0, -1}\n"

/* ARGV channel, op ('done' | 'back' | 'renew'), id, "<owner hex>:<fence>",
 * lease ms (renew) -> 1 | 0 not this taker's any more. 'back' puts the item
 * at the head of the line and publishes. */
#define BATON_LUA_QUEUE_ITEM                                                   \
    BATON_LUA_QUEUE_GC                                                         \
    "local id = ARGV[3]\n"                                                     \
    "if not mine(id, ARGV[4]) then return 0 end\n"                             \
    "if ARGV[2] == 'renew' then\n"                                             \
    "  redis.call('zadd', KEYS[3], now + tonumber(ARGV[5]), id)\n"             \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "redis.call('zrem', KEYS[3], id)\n"                                        \
    "redis.call('hdel', KEYS[4], id)\n"                                        \
    "if ARGV[2] == 'done' then\n"                                              \
    "  redis.call('hdel', KEYS[1], id)\n"                                      \
    "else\n"                                                                   \
    "  redis.call('lpush', KEYS[2], id)\n"                                     \
    "  redis.call('publish', ARGV[1], 'b')\n"                                  \
    "end\n"                                                                    \
    "return 1\n"

/* ARGV channel -> the number of waiting items. */
#define BATON_LUA_QUEUE_SIZE                                                   \
    BATON_LUA_QUEUE_GC                                                         \
    "return redis.call('llen', KEYS[2])\n"

#endif
