/*
 * The Lua scripts of the Redis backend. Each runs as one EVALSHA (EVAL when
 * the server does not know it yet): one round trip per acquire, release,
 * renewal and info. All keys of one lock share a hash slot (see
 * docs/redis-layout.md), so the scripts also work on a cluster node.
 */
#ifndef BATON_REDIS_SCRIPTS_H
#define BATON_REDIS_SCRIPTS_H

/* ---- fences -----------------------------------------------------------------
 * fence_next(K) hands out the next fence of counter K: max(INCR K, the
 * server clock in microseconds from TIME), and when the clock wins it is
 * stored back (SET), so every later grant -- ours, or Redisson's RFencedLock
 * doing INCR on the same token key -- continues above it. A server that lost
 * the counter (restarted without persistence, a replica promoted before it
 * saw the last grants) still hands out fences above every earlier one, as
 * long as the servers' clocks are within the failover time of each other and
 * no name is granted more than a million times a second (docs/fencing.md).
 * Lua 5.1 numbers are doubles: microseconds since the epoch (~1.8e15) are
 * exact below 2^53, but tostring() prints them with an exponent, so a fence
 * is formatted with '%.0f' wherever it becomes a string (a number returned
 * from a script becomes an integer reply). A script that uses it calls TIME
 * and then writes: it must start with BATON_LUA_EFFECTS (below). */
#define BATON_LUA_EFFECTS                                                      \
    "if redis.replicate_commands then pcall(redis.replicate_commands) end\n"

#define BATON_LUA_FENCE                                                        \
    "local function fence_next(k)\n"                                           \
    "  local f = redis.call('incr', k)\n"                                      \
    "  local tm = redis.call('time')\n"                                        \
    "  local us = tonumber(tm[1]) * 1000000 + tonumber(tm[2])\n"               \
    "  if f < us then\n"                                                       \
    "    f = us\n"                                                             \
    "    redis.call('set', k, string.format('%.0f', us))\n"                    \
    "  end\n"                                                                  \
    "  return f\n"                                                             \
    "end\n"                                                                    \
    "local function fence_str(f) return string.format('%.0f', f) end\n"

/* layout=redisson: KEYS lock hash, fence counter, holder string;
 * ARGV lease ms, field "<uuid>:<tid>", holder description.
 * -> {1, fence} granted, or {0, pttl} held by someone (even by our field:
 * the core does reentrancy itself). */
#define BATON_LUA_ACQ_REDISSON                                                 \
    BATON_LUA_EFFECTS BATON_LUA_FENCE                                          \
    "if redis.call('exists', KEYS[1]) == 0 then\n"                             \
    "  local fence = fence_next(KEYS[2])\n"                                    \
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
    BATON_LUA_EFFECTS BATON_LUA_FENCE                                          \
    "if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then\n"       \
    "  return {1, fence_next(KEYS[2])}\n"                                      \
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
 * key again for simple), fair queue (the fence key again for simple), the
 * rwlock's waiting writers. -> {held, pttl, holder, fence, queue length,
 * mode, readers, waiting writers}. A foreign holder without a description
 * shows its hash field (Redisson) or its value. */
#define BATON_LUA_INFO                                                         \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "local fence = redis.call('get', KEYS[2]) or '0'\n"                        \
    "local q = 0\n"                                                            \
    "if KEYS[4] ~= KEYS[2] and redis.call('type', KEYS[4]).ok == 'list' then\n"\
    "  q = redis.call('llen', KEYS[4])\n"                                      \
    "end\n"                                                                    \
    "local ww = 0\n"                                                           \
    "local wt = redis.call('type', KEYS[5]).ok\n"                              \
    "if wt == 'set' then ww = redis.call('scard', KEYS[5])\n"                  \
    "elseif wt == 'zset' then ww = redis.call('zcard', KEYS[5]) end\n"         \
    "if t == 'none' then return {0, -2, '', fence, q, '', 0, ww} end\n"        \
    "local holder = ''\n"                                                      \
    "local mode = ''\n"                                                        \
    "local readers = 0\n"                                                      \
    "if t == 'string' then\n"                                                  \
    "  local v = redis.call('get', KEYS[1])\n"                                 \
    "  if string.match(v, '^%-?%d+$') then\n"                                 \
    "    return {0, -2, '', fence, q, 'count', tonumber(v), ww}\n"           \
    "  end\n"                                                                 \
    "  local sp = string.find(v, ' ', 1, true)\n"                              \
    "  if sp then holder = string.sub(v, sp + 1) else holder = v end\n"        \
    "elseif t == 'hash' then\n"                                                \
    "  mode = redis.call('hget', KEYS[1], 'mode') or ''\n"                     \
    "  if mode == 'read' then readers = redis.call('hlen', KEYS[1]) - 1 end\n" \
    "  holder = redis.call('hget', KEYS[1], 'baton:holder')\n"                 \
    "  if not holder then holder = redis.call('get', KEYS[3]) end\n"           \
    "  if not holder then\n"                                                   \
    "    holder = ''\n"                                                        \
    "    for _, f in ipairs(redis.call('hkeys', KEYS[1])) do\n"                 \
    "      if f ~= 'mode' and f ~= 'baton:holder' then holder = f break end\n"  \
    "    end\n"                                                               \
    "  end\n"                                                                 \
    "end\n"                                                                    \
    "return {1, redis.call('pttl', KEYS[1]), holder, fence, q, mode, readers, ww}\n"

/* ---- server time -----------------------------------------------------------
 * Scripts that keep deadlines use the server's clock (TIME), never a client's.
 * Old servers (< 5) need effects replication for a script that calls TIME
 * and then writes; Redis >= 5 does it by default (7 always). */
#define BATON_LUA_NOW                                                          \
    BATON_LUA_EFFECTS                                                          \
    "local tm = redis.call('time')\n"                                          \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"

/* ---- fair lock (Redisson RedissonFairLock keys, direct handoff) -------------
 * KEYS[1] = K (hash: owner field -> fence, and 'baton:holder' -> the holder's
 * description), KEYS[2] = redisson_lock_queue:{K} (list, FIFO),
 * KEYS[3] = redisson_lock_timeout:{K} (zset entry -> server-time deadline),
 * KEYS[4] = redisson_lock_token:{K} (fence counter).
 * A baton queue entry is "<field>|<ticket>|<lease ms>|<description>": the
 * ticket is the fence the waiter will hold, drawn from the counter when it
 * queues, so fences grow in grant order. A release hands the lock straight to
 * the head entry (HSET, PEXPIRE) and publishes the ticket on the head's own
 * channel; the waiter takes that message as its grant without another round
 * trip. A handoff is EVALSHA + HDEL, TIME, ZRANGEBYSCORE (the purge of
 * expired entries, below), LPOP, HSET, PEXPIRE, PUBLISH, whatever the queue
 * length. Entries without '|' are Redisson's: they are woken with
 * "0" and take the lock with their own script. */
#define BATON_LUA_FAIR_HANDOFF                                                 \
    "local function handoff(prefix)\n"                                         \
    "  local e = redis.call('lpop', KEYS[2])\n"                                \
    "  if not e then redis.call('del', KEYS[1]) return end\n"                  \
    "  local f, t, ls, d = string.match(e, '^([^|]*)|(%d+)|(%d+)|(.*)$')\n"   \
    "  if f then\n"                                                            \
    "    redis.call('hset', KEYS[1], f, t, 'baton:holder', d)\n"               \
    "    redis.call('pexpire', KEYS[1], ls)\n"                                 \
    "    redis.call('publish', prefix .. ':' .. e, t)\n"                       \
    "    return\n"                                                             \
    "  end\n"                                                                  \
    "  redis.call('lpush', KEYS[2], e)\n"                                      \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  redis.call('publish', prefix .. ':' .. e, 0)\n"                         \
    "end\n"

/* Drops the queue entries whose deadline passed (waiters that stopped
 * refreshing: crashed, paused, gave up without leaving). Loops only over
 * those, never over the live queue. Every script that hands the lock to the
 * queue's head runs it first, so a dead waiter is never handed the lock
 * once its entry expired. purge(now) needs server time (ms); the acquire
 * script has it already, the release and leave scripts read TIME for it. */
#define BATON_LUA_FAIR_PURGE_FN                                                \
    "local function purge(now)\n"                                              \
    "  local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)\n"       \
    "  for i = 1, #dead do redis.call('lrem', KEYS[2], 0, dead[i]) end\n"      \
    "  if #dead > 0 then redis.call('zremrangebyscore', KEYS[3], '-inf', now) end\n" \
    "end\n"                                                                    \
    "local function server_ms()\n"                                             \
    "  local t = redis.call('time')\n"                                         \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"     \
    "end\n"

#define BATON_LUA_FAIR_PURGE "purge(now)\n"

/* ARGV lease ms, field, description, queue-entry lease ms, channel prefix
 * redisson_lock__channel:{K}, "wait" | "try", our ticket ("0": none yet).
 * -> {1, fence} granted, {1, fence, pttl} when a release had already handed
 * it to us (its lease started then: pttl is what is left of it), or
 * {0, ms, ticket}: ms = how long until something may change (the lock's PTTL
 * when we are the head, else the head entry's remaining lease; -1 unknown),
 * ticket = the fence we hold our place with (0 for a try). A try never
 * queues and fails when anyone is queued, so tries cannot barge. */
#define BATON_LUA_FAIR_ACQ_BODY                                                \
    "local mine = redis.call('hget', KEYS[1], ARGV[2])\n"                      \
    "if mine then return {1, tonumber(mine), redis.call('pttl', KEYS[1])} end\n" \
    "local function entry(t) return ARGV[2] .. '|' .. t .. '|' .. ARGV[1] .. '|' .. ARGV[3] end\n" \
    "local me = nil\n"                                                         \
    "if ARGV[7] ~= '0' then me = entry(ARGV[7]) end\n"                         \
    "local head = redis.call('lindex', KEYS[2], 0)\n"                          \
    "if redis.call('exists', KEYS[1]) == 0 then\n"                             \
    "  if not head then\n"                                                     \
    "    local fence = fence_next(KEYS[4])\n"                                  \
    "    redis.call('hset', KEYS[1], ARGV[2], fence_str(fence), 'baton:holder', ARGV[3])\n" \
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"                            \
    "    return {1, fence}\n"                                                  \
    "  end\n"                                                                  \
    "  if head == me then\n"                                                   \
    "    redis.call('lpop', KEYS[2])\n"                                        \
    "    redis.call('zrem', KEYS[3], me)\n"                                    \
    "    redis.call('hset', KEYS[1], ARGV[2], ARGV[7], 'baton:holder', ARGV[3])\n" \
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"                            \
    "    return {1, tonumber(ARGV[7])}\n"                                      \
    "  end\n"                                                                  \
    "  if string.find(head, '|', 1, true) then\n"                              \
    "    handoff(ARGV[5])\n"                                                   \
    "    head = redis.call('lindex', KEYS[2], 0)\n"                            \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "if ARGV[6] ~= 'wait' then return {0, redis.call('pttl', KEYS[1]), 0} end\n" \
    "local queued = false\n"                                                   \
    "if me and head and redis.call('zscore', KEYS[3], me) then\n"              \
    "  local ht = tonumber(string.match(head, '^[^|]*|(%d+)|'))\n"             \
    "  if ht then queued = ht <= tonumber(ARGV[7])\n"                          \
    "  else\n"                                                                 \
    "    local ok, pos = pcall(redis.call, 'lpos', KEYS[2], me)\n"             \
    "    queued = not ok or pos ~= false\n"                                    \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "local ticket = ARGV[7]\n"                                                 \
    "if not queued then\n"                                                     \
    "  if me then redis.call('zrem', KEYS[3], me) end\n"                       \
    "  ticket = fence_str(fence_next(KEYS[4]))\n"                             \
    "  me = entry(ticket)\n"                                                   \
    "  redis.call('rpush', KEYS[2], me)\n"                                     \
    "  if not head then head = me end\n"                                       \
    "end\n"                                                                    \
    "redis.call('zadd', KEYS[3], now + tonumber(ARGV[4]), me)\n"               \
    "local hint = -1\n"                                                        \
    "if head == me then\n"                                                     \
    "  hint = redis.call('pttl', KEYS[1])\n"                                   \
    "else\n"                                                                   \
    "  local hs = redis.call('zscore', KEYS[3], head)\n"                       \
    "  if hs then hint = math.max(0, tonumber(hs) - now) end\n"                \
    "end\n"                                                                    \
    "return {0, hint, tonumber(ticket)}\n"

/* KEYS K, queue, timeouts; ARGV field, channel prefix. -> 1 released (and
 * handed to the head waiter that is still alive), 0 not ours. Expired queue
 * entries are dropped before the handoff. Called with two keys (no
 * timeouts: the C side before it passed the third key) it hands off
 * without the purge. */
#define BATON_LUA_FAIR_REL_BODY                                                \
    "local n = redis.pcall('hdel', KEYS[1], ARGV[1])\n"                        \
    "if type(n) ~= 'number' or n == 0 then return 0 end\n"                     \
    "if KEYS[3] then purge(server_ms()) end\n"                                 \
    "handoff(ARGV[2])\n"                                                       \
    "return 1\n"

/* KEYS K, queue, timeouts; ARGV field, ticket, lease ms, description,
 * channel prefix. A waiter that gives up leaves the queue; if a release
 * handed it the lock meanwhile, it passes the lock on; if it was the head
 * of a free lock, the next waiter gets it. Ticket "0": the waiter does not
 * know its entry for sure (a request failed after it was sent), so every
 * entry of its field goes (a scan of the queue, on this failure path only).
 * Expired entries are dropped first, so the lock is never passed on to a
 * dead waiter whose entry expired. -> 1 left, 2 passed on. */
#define BATON_LUA_FAIR_LEAVE_BODY                                              \
    "purge(server_ms())\n"                                                     \
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"                   \
    "  redis.call('hdel', KEYS[1], ARGV[1])\n"                                 \
    "  handoff(ARGV[5])\n"                                                     \
    "  return 2\n"                                                             \
    "end\n"                                                                    \
    "if ARGV[2] ~= '0' then\n"                                                 \
    "  local e = ARGV[1] .. '|' .. ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[4]\n" \
    "  redis.call('lrem', KEYS[2], 0, e)\n"                                    \
    "  redis.call('zrem', KEYS[3], e)\n"                                       \
    "else\n"                                                                   \
    "  local p = ARGV[1] .. '|'\n"                                              \
    "  for _, e in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do\n"          \
    "    if string.sub(e, 1, #p) == p then\n"                                  \
    "      redis.call('lrem', KEYS[2], 0, e)\n"                                \
    "      redis.call('zrem', KEYS[3], e)\n"                                   \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "if redis.call('exists', KEYS[1]) == 0 then\n"                             \
    "  local h = redis.call('lindex', KEYS[2], 0)\n"                           \
    "  if h and string.find(h, '|', 1, true) then handoff(ARGV[5]) end\n"      \
    "end\n"                                                                    \
    "return 1\n"

#define BATON_LUA_FAIR_ACQ                                                     \
    BATON_LUA_NOW BATON_LUA_FENCE BATON_LUA_FAIR_HANDOFF BATON_LUA_FAIR_PURGE_FN \
    BATON_LUA_FAIR_PURGE BATON_LUA_FAIR_ACQ_BODY
#define BATON_LUA_FAIR_REL                                                     \
    BATON_LUA_EFFECTS BATON_LUA_FAIR_HANDOFF BATON_LUA_FAIR_PURGE_FN BATON_LUA_FAIR_REL_BODY
#define BATON_LUA_FAIR_LEAVE                                                   \
    BATON_LUA_EFFECTS BATON_LUA_FAIR_HANDOFF BATON_LUA_FAIR_PURGE_FN BATON_LUA_FAIR_LEAVE_BODY

/* ---- read-write lock (Redisson RReadWriteLock layout + writer intents) -------
 * KEYS[1] hash K: mode = read|write, <field> = read holds (each with a key
 * {K}:<field>:rwlock_timeout:<n> carrying its own lease), <field>:write =
 * write holds. KEYS[2] = "{K}" (the timeout key prefix), KEYS[3] fence
 * counter, KEYS[4] baton_rwlock_writers:{K} (zset writer field -> server-time
 * deadline: writers waiting; while one is there, new readers wait too).
 *
 * Read: ARGV lease ms, field. Granted in mode read or free when no writer
 * waits, and in mode write to the write holder itself (downgrade).
 * -> {1, fence} | {0, ms until a re-check is worth it}. */
#define BATON_LUA_RW_READ_ACQ_BODY                                             \
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now)\n"                   \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "if t ~= 'none' and t ~= 'hash' then return {0, redis.call('pttl', KEYS[1])} end\n" \
    "local mode = false\n"                                                     \
    "if t == 'hash' then\n"                                                    \
    "  mode = redis.call('hget', KEYS[1], 'mode')\n"                           \
    "  if not mode then return {0, redis.call('pttl', KEYS[1])} end\n"         \
    "end\n"                                                                    \
    "local ok\n"                                                               \
    "if mode == 'write' then\n"                                                \
    "  ok = redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1\n"        \
    "else\n"                                                                   \
    "  ok = redis.call('zcard', KEYS[4]) == 0\n"                               \
    "end\n"                                                                    \
    "if ok then\n"                                                             \
    "  if not mode then redis.call('hset', KEYS[1], 'mode', 'read') end\n"     \
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)\n"                 \
    "  redis.call('set', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. n, 1, 'px', ARGV[1])\n" \
    "  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"              \
    "    redis.call('pexpire', KEYS[1], ARGV[1])\n"                            \
    "  end\n"                                                                  \
    "  return {1, fence_next(KEYS[3])}\n"                                      \
    "end\n"                                                                    \
    "if mode == 'write' then return {0, redis.call('pttl', KEYS[1])} end\n"    \
    "local first = redis.call('zrange', KEYS[4], 0, 0, 'withscores')\n"        \
    "return {0, math.max(0, tonumber(first[2]) - now)}\n"

/* Write: KEYS as read + KEYS[5] holder string; ARGV lease ms, field, holder
 * description, "wait" | "try", intent lease ms. Readers whose timeout keys are gone
 * (crashed, stopped past their lease) are dropped first. "wait" records the
 * writer's intent (refreshed on every attempt). -> {1, fence} | {0, pttl}. */
#define BATON_LUA_RW_WRITE_ACQ_BODY                                            \
    "redis.call('zremrangebyscore', KEYS[4], '-inf', now)\n"                   \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "if t == 'hash' and redis.call('hget', KEYS[1], 'mode') == 'read' then\n"  \
    "  local fs = redis.call('hgetall', KEYS[1])\n"                            \
    "  local live = 0\n"                                                       \
    "  for i = 1, #fs, 2 do\n"                                                 \
    "    local f = fs[i]\n"                                                    \
    "    if f ~= 'mode' then\n"                                                \
    "      local alive = false\n"                                              \
    "      for n = tonumber(fs[i + 1]) or 0, 1, -1 do\n"                       \
    "        if redis.call('exists', KEYS[2] .. ':' .. f .. ':rwlock_timeout:' .. n) == 1 then\n" \
    "          alive = true\n"                                                 \
    "          break\n"                                                        \
    "        end\n"                                                            \
    "      end\n"                                                              \
    "      if alive then live = live + 1 else redis.call('hdel', KEYS[1], f) end\n" \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  if live == 0 then\n"                                                    \
    "    redis.call('del', KEYS[1])\n"                                         \
    "    t = 'none'\n"                                                         \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "if t == 'none' then\n"                                                    \
    "  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2] .. ':write', 1)\n" \
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"                              \
    "  redis.call('set', KEYS[5], ARGV[3], 'px', ARGV[1])\n"                   \
    "  redis.call('zrem', KEYS[4], ARGV[2])\n"                                 \
    "  return {1, fence_next(KEYS[3])}\n"                                      \
    "end\n"                                                                    \
    "if ARGV[4] == 'wait' then\n"                                              \
    "  redis.call('zadd', KEYS[4], now + tonumber(ARGV[5]), ARGV[2])\n"        \
    "end\n"                                                                    \
    "return {0, redis.call('pttl', KEYS[1])}\n"

#define BATON_LUA_RW_READ_ACQ BATON_LUA_NOW BATON_LUA_FENCE BATON_LUA_RW_READ_ACQ_BODY
#define BATON_LUA_RW_WRITE_ACQ BATON_LUA_NOW BATON_LUA_FENCE BATON_LUA_RW_WRITE_ACQ_BODY

/* KEYS hash, "{K}"; ARGV field, channel redisson_rwlock:{K}. The hash then
 * lives as long as the longest remaining reader lease; the last reader
 * deletes it and publishes. -> 1 | 0 not ours. */
#define BATON_LUA_RW_READ_REL                                                  \
    "if redis.call('type', KEYS[1]).ok ~= 'hash'\n"                            \
    "   or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then\n"                \
    "  return 0\n"                                                             \
    "end\n"                                                                    \
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1)\n"                  \
    "redis.call('del', KEYS[2] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. (n + 1))\n" \
    "if n <= 0 then redis.call('hdel', KEYS[1], ARGV[1]) end\n"                \
    "if redis.call('hget', KEYS[1], 'mode') == 'write' then return 1 end\n"    \
    "local fs = redis.call('hgetall', KEYS[1])\n"                              \
    "local maxr, live = 0, 0\n"                                                \
    "for i = 1, #fs, 2 do\n"                                                   \
    "  local f = fs[i]\n"                                                      \
    "  if f ~= 'mode' then\n"                                                  \
    "    local alive = false\n"                                                \
    "    for k = tonumber(fs[i + 1]) or 0, 1, -1 do\n"                         \
    "      local r = redis.call('pttl', KEYS[2] .. ':' .. f .. ':rwlock_timeout:' .. k)\n" \
    "      if r > 0 or r == -1 then\n"                                         \
    "        alive = true\n"                                                   \
    "        if r > maxr then maxr = r end\n"                                  \
    "      end\n"                                                              \
    "    end\n"                                                                \
    "    if alive then live = live + 1 else redis.call('hdel', KEYS[1], f) end\n" \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "if live > 0 then\n"                                                       \
    "  if maxr > 0 then redis.call('pexpire', KEYS[1], maxr) end\n"            \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "redis.call('del', KEYS[1])\n"                                             \
    "redis.call('publish', ARGV[2], 0)\n"                                      \
    "return 1\n"

/* KEYS hash, holder string; ARGV field, channel. A downgraded holder's read
 * hold stays (mode becomes read). Always publishes. -> 1 | 0 not ours. */
#define BATON_LUA_RW_WRITE_REL                                                 \
    "if redis.call('type', KEYS[1]).ok ~= 'hash'\n"                            \
    "   or redis.call('hexists', KEYS[1], ARGV[1] .. ':write') == 0 then\n"    \
    "  return 0\n"                                                             \
    "end\n"                                                                    \
    "redis.call('hdel', KEYS[1], ARGV[1] .. ':write')\n"                       \
    "redis.call('del', KEYS[2])\n"                                             \
    "if redis.call('hlen', KEYS[1]) <= 1 then\n"                               \
    "  redis.call('del', KEYS[1])\n"                                           \
    "else\n"                                                                   \
    "  redis.call('hset', KEYS[1], 'mode', 'read')\n"                          \
    "end\n"                                                                    \
    "redis.call('publish', ARGV[2], 0)\n"                                      \
    "return 1\n"

/* KEYS hash, "{K}"; ARGV lease ms, field. -> 1 | 0 not ours (any more). */
#define BATON_LUA_RW_READ_RENEW                                                \
    "if redis.call('type', KEYS[1]).ok ~= 'hash' then return 0 end\n"          \
    "local c = tonumber(redis.call('hget', KEYS[1], ARGV[2]))\n"               \
    "if not c then return 0 end\n"                                             \
    "local alive = false\n"                                                    \
    "for n = c, 1, -1 do\n"                                                    \
    "  if redis.call('pexpire', KEYS[2] .. ':' .. ARGV[2] .. ':rwlock_timeout:' .. n, ARGV[1]) == 1 then\n" \
    "    alive = true\n"                                                       \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "if not alive then return 0 end\n"                                         \
    "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"                \
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"                              \
    "end\n"                                                                    \
    "return 1\n"

/* KEYS hash, holder string; ARGV lease ms, field. -> 1 | 0. */
#define BATON_LUA_RW_WRITE_RENEW                                               \
    "if redis.call('type', KEYS[1]).ok ~= 'hash'\n"                            \
    "   or redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 0 then\n"    \
    "  return 0\n"                                                             \
    "end\n"                                                                    \
    "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then\n"                \
    "  redis.call('pexpire', KEYS[1], ARGV[1])\n"                              \
    "end\n"                                                                    \
    "redis.call('pexpire', KEYS[2], ARGV[1])\n"                                \
    "return 1\n"

/* KEYS writers zset; ARGV field, channel: a waiting writer gives up; readers
 * it held back are woken. -> 1. */
#define BATON_LUA_RW_LEAVE                                                     \
    "if redis.call('zrem', KEYS[1], ARGV[1]) == 1 then\n"                      \
    "  redis.call('publish', ARGV[2], 0)\n"                                    \
    "end\n"                                                                    \
    "return 1\n"

/* ---- semaphore (Redisson RSemaphore layout) ---------------------------------
 * KEYS[1] K = available permits (string integer); channel redisson_sc:{K}.
 * Acquire: ARGV permits -> 1 taken, 0 too few. */
#define BATON_LUA_SEM_ACQ                                                      \
    "local v = tonumber(redis.call('get', KEYS[1]) or '0')\n"                  \
    "if v and v >= tonumber(ARGV[1]) then\n"                                   \
    "  redis.call('decrby', KEYS[1], ARGV[1])\n"                               \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "return 0\n"

/* ARGV permits, channel -> the new count (published). */
#define BATON_LUA_SEM_REL                                                      \
    "local v = redis.call('incrby', KEYS[1], ARGV[1])\n"                       \
    "redis.call('publish', ARGV[2], v)\n"                                      \
    "return v\n"

/* ARGV "get" | "set" (if never set) | "add" | "drain", value, channel.
 * get -> count; set -> 1 set, 0 was set; add -> new count; drain -> taken. */
#define BATON_LUA_CTL_BODY                                                     \
    "local cur = redis.call('get', KEYS[1])\n"                                 \
    "if ARGV[1] == 'get' then return tonumber(cur or '0') or 0 end\n"          \
    "if ARGV[1] == 'set' then\n"                                               \
    "  if cur then return 0 end\n"                                             \
    "  redis.call('set', KEYS[1], ARGV[2])\n"                                  \
    "  redis.call('publish', ARGV[3], ARGV[2])\n"                              \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "if ARGV[1] == 'add' then\n"                                               \
    "  local v = redis.call('incrby', KEYS[1], ARGV[2])\n"                     \
    "  redis.call('publish', ARGV[3], v)\n"                                    \
    "  return v\n"                                                             \
    "end\n"                                                                    \
    "if ARGV[1] == 'drain' then\n"                                             \
    "  if not cur then return 0 end\n"                                         \
    "  redis.call('set', KEYS[1], 0)\n"                                        \
    "  return math.max(0, tonumber(cur) or 0)\n"                               \
    "end\n"                                                                    \
    "return redis.error_reply('ERR baton: unknown operation')\n"

#define BATON_LUA_SEM_CTL BATON_LUA_CTL_BODY

/* ---- permit-expirable semaphore (Redisson RPermitExpirableSemaphore) --------
 * KEYS[1] K = available permits, KEYS[2] {K}:timeout = zset raw 16-byte
 * permit id -> server-time expiry; channel redisson_sc:{K}. Expired permits
 * go back to the pool at the start of every script. */
#define BATON_LUA_RECLAIM                                                      \
    "local function reclaim(ch)\n"                                             \
    "  local n = redis.call('zcount', KEYS[2], '-inf', now)\n"                 \
    "  if n > 0 then\n"                                                        \
    "    redis.call('zremrangebyscore', KEYS[2], '-inf', now)\n"               \
    "    redis.call('publish', ch, redis.call('incrby', KEYS[1], n))\n"        \
    "  end\n"                                                                  \
    "end\n"

/* ARGV id, lease ms, channel -> {1, 0} | {0, ms until the next expiry, -1 none}. */
#define BATON_LUA_PERMITS_ACQ_BODY                                             \
    "reclaim(ARGV[3])\n"                                                       \
    "local v = tonumber(redis.call('get', KEYS[1]) or '0') or 0\n"             \
    "if v >= 1 then\n"                                                         \
    "  redis.call('decr', KEYS[1])\n"                                          \
    "  redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])\n"        \
    "  return {1, 0}\n"                                                        \
    "end\n"                                                                    \
    "local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')\n"        \
    "if first[2] then return {0, math.max(0, tonumber(first[2]) - now)} end\n" \
    "return {0, -1}\n"

/* ARGV id, channel -> 1 | 0 unknown or expired. */
#define BATON_LUA_PERMITS_REL_BODY                                             \
    "reclaim(ARGV[2])\n"                                                       \
    "if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0 end\n"         \
    "redis.call('publish', ARGV[2], redis.call('incr', KEYS[1]))\n"            \
    "return 1\n"

/* ARGV id, lease ms, channel -> 1 | 0 unknown or expired. */
#define BATON_LUA_PERMITS_RENEW_BODY                                           \
    "reclaim(ARGV[3])\n"                                                       \
    "if not redis.call('zscore', KEYS[2], ARGV[1]) then return 0 end\n"        \
    "redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])\n"          \
    "return 1\n"

#define BATON_LUA_PERMITS_ACQ BATON_LUA_NOW BATON_LUA_RECLAIM BATON_LUA_PERMITS_ACQ_BODY
#define BATON_LUA_PERMITS_REL BATON_LUA_NOW BATON_LUA_RECLAIM BATON_LUA_PERMITS_REL_BODY
#define BATON_LUA_PERMITS_RENEW BATON_LUA_NOW BATON_LUA_RECLAIM BATON_LUA_PERMITS_RENEW_BODY
#define BATON_LUA_PERMITS_CTL BATON_LUA_NOW BATON_LUA_RECLAIM "reclaim(ARGV[3])\n" BATON_LUA_CTL_BODY

/* ---- count-down latch (Redisson RCountDownLatch layout) ----------------------
 * KEYS[1] K = the count; channel redisson_countdownlatch__channel__{K}.
 * ARGV "set" (only when not set; publishes 1) | "down" (deletes at zero and
 * publishes 0) | "get", value, channel. */
#define BATON_LUA_LATCH_CTL                                                    \
    "if ARGV[1] == 'set' then\n"                                               \
    "  if redis.call('exists', KEYS[1]) == 1 then return 0 end\n"              \
    "  redis.call('set', KEYS[1], ARGV[2])\n"                                  \
    "  redis.call('publish', ARGV[3], 1)\n"                                    \
    "  return 1\n"                                                             \
    "end\n"                                                                    \
    "if ARGV[1] == 'down' then\n"                                              \
    "  local v = redis.call('decr', KEYS[1])\n"                                \
    "  if v <= 0 then redis.call('del', KEYS[1]) end\n"                        \
    "  if v == 0 then redis.call('publish', ARGV[3], 0) end\n"                 \
    "  return math.max(v, 0)\n"                                                \
    "end\n"                                                                    \
    "if ARGV[1] == 'get' then return math.max(0, tonumber(redis.call('get', KEYS[1]) or '0') or 0) end\n" \
    "return redis.error_reply('ERR baton: unknown operation')\n"

/* ---- operators: list and break (docs/redis-layout.md) ------------------------
 * lock_of(k, simple): what K is, as a lock of the layout: '#' for a lock hash
 * (Redisson's RLock, fair lock or read-write lock: every field but 'mode' and
 * 'baton:holder' is "<id>:<thread>" or "<id>:<thread>:write" with a number),
 * '=' .. value for a SET NX string whose value is not a number (simple
 * layout only: a number is a semaphore's or latch's count, or a counter), nil
 * for anything else (no key, user data, a side key). A hash of more than
 * 10000 fields is not read: no lock has that many holders. */
#define BATON_LUA_LOCK_OF                                                      \
    "local function lock_of(k, simple)\n"                                      \
    "  local t = redis.call('type', k).ok\n"                                   \
    "  if t == 'hash' then\n"                                                  \
    "    if redis.call('hlen', k) > 10000 then return nil end\n"               \
    "    local fs = redis.call('hgetall', k)\n"                                \
    "    local ok = false\n"                                                   \
    "    for i = 1, #fs, 2 do\n"                                               \
    "      local f = fs[i]\n"                                                  \
    "      if f ~= 'mode' and f ~= 'baton:holder' then\n"                      \
    "        if not tonumber(fs[i + 1]) or not (string.match(f, ':%d+$') or string.match(f, ':%d+:write$')) then\n" \
    "          return nil\n"                                                   \
    "        end\n"                                                            \
    "        ok = true\n"                                                      \
    "      end\n"                                                              \
    "    end\n"                                                                \
    "    if ok then return '#' end\n"                                          \
    "    return nil\n"                                                         \
    "  end\n"                                                                  \
    "  if t == 'string' and simple then\n"                                     \
    "    local v = redis.call('get', k)\n"                                     \
    "    if string.match(v, '^%-?%d+$') then return nil end\n"                 \
    "    return '=' .. v\n"                                                    \
    "  end\n"                                                                  \
    "  return nil\n"                                                           \
    "end\n"

/* KEYS the candidates of one SCAN batch; ARGV[1] 'simple' | 'redisson'.
 * -> one string per key: '' not a lock, else lock_of's answer. Read-only. */
#define BATON_LUA_LIST                                                         \
    BATON_LUA_LOCK_OF                                                          \
    "local simple = ARGV[1] == 'simple'\n"                                     \
    "local out = {}\n"                                                         \
    "for i = 1, #KEYS do out[i] = lock_of(KEYS[i], simple) or '' end\n"        \
    "return out\n"

/* An operator breaks the lock. KEYS K, redisson_lock_token:{K},
 * baton_fence:{K}, baton_holder:{K}, the fair queue, its timeout zset;
 * ARGV 'simple' | 'redisson', "{K}" (reader timeout keys "{K}:<field>:
 * rwlock_timeout:<n>"), the channels of the plain lock (redisson's, the
 * simple layout's), of the read-write lock, and the fair lock's per-entry
 * channel prefix.
 * The holder goes (the key, its description, a read-write lock's reader
 * timeout keys), and so does every fair queue entry: an entry carries a
 * ticket drawn before this break, i.e. a fence below the new one, so it
 * must not be handed the lock; each entry's waiter is woken ("0", as a
 * Redisson unlock) and queues again with a new ticket. Waiting writers'
 * intents stay (they carry no fence). The fence is drawn from the counter
 * every grant of the layout draws from (both in the simple layout, where
 * read-write locks use Redisson's token), and both are then set to the
 * larger, so the next grant's fence exceeds it. Everyone waiting is woken.
 * -> {1, fence} held, {0, fence} nobody held it, {-1, type} K is something
 * else than a lock (left alone, no fence drawn). */
#define BATON_LUA_BREAK                                                        \
    BATON_LUA_EFFECTS BATON_LUA_FENCE BATON_LUA_LOCK_OF                        \
    "local simple = ARGV[1] == 'simple'\n"                                     \
    "local t = redis.call('type', KEYS[1]).ok\n"                               \
    "local held = 0\n"                                                         \
    "if t ~= 'none' then\n"                                                    \
    "  if not lock_of(KEYS[1], simple) then return {-1, t} end\n"              \
    "  if t == 'hash' and redis.call('hexists', KEYS[1], 'mode') == 1 then\n"  \
    "    local fs = redis.call('hgetall', KEYS[1])\n"                          \
    "    for i = 1, #fs, 2 do\n"                                               \
    "      local f = fs[i]\n"                                                  \
    "      if f ~= 'mode' and f ~= 'baton:holder' and not string.match(f, ':write$') then\n" \
    "        for n = math.min(tonumber(fs[i + 1]) or 0, 10000), 1, -1 do\n"    \
    "          redis.call('del', ARGV[2] .. ':' .. f .. ':rwlock_timeout:' .. n)\n" \
    "        end\n"                                                            \
    "      end\n"                                                              \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  redis.call('del', KEYS[1])\n"                                           \
    "  held = 1\n"                                                             \
    "end\n"                                                                    \
    "redis.call('del', KEYS[4])\n"                                             \
    "if redis.call('type', KEYS[5]).ok == 'list' then\n"                       \
    "  for _, e in ipairs(redis.call('lrange', KEYS[5], 0, -1)) do\n"          \
    "    redis.call('publish', ARGV[6] .. ':' .. e, 0)\n"                      \
    "  end\n"                                                                  \
    "  redis.call('del', KEYS[5])\n"                                           \
    "end\n"                                                                    \
    "if redis.call('type', KEYS[6]).ok == 'zset' then redis.call('del', KEYS[6]) end\n" \
    "local f = fence_next(KEYS[2])\n"                                          \
    "if simple then\n"                                                         \
    "  local g = fence_next(KEYS[3])\n"                                        \
    "  if g > f then f = g end\n"                                              \
    "  redis.call('set', KEYS[2], fence_str(f))\n"                             \
    "  redis.call('set', KEYS[3], fence_str(f))\n"                             \
    "end\n"                                                                    \
    "redis.call('publish', ARGV[3], 0)\n"                                      \
    "redis.call('publish', ARGV[4], 0)\n"                                      \
    "redis.call('publish', ARGV[5], 0)\n"                                      \
    "return {held, f}\n"

#endif
