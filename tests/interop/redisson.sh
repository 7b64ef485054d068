#!/bin/bash
# Interop: baton's default Redis layout is Redisson's RLock/RFencedLock
# layout. This test performs Redisson's documented RLock operations with
# redis-cli against the keys `baton run` writes, and the other way round.
#
#   redisson.sh PATH/TO/baton [cluster]
#
# With "cluster" the same checks run on the redis-cluster fixture
# (redis-cluster://, redis-cli -c) as Redisson in cluster mode does them:
# its unlock SPUBLISHes (sharded pub/sub, Redis 7) and its waiters SSUBSCRIBE
# on the slot's master. Every key and channel of NAME is in NAME's slot (the
# {NAME} hash tag), so a foreign client only has to lock the same NAME.
#
# Layout (per lock NAME):
#   NAME                             hash: field "<uuid>:<thread id>" -> reentry count, with a TTL
#   redisson_lock_token:{NAME}       the fencing counter (INCR on every grant; baton's
#                                    grants raise it to the server clock in µs)
#   redisson_lock__channel:{NAME}    unlock messages ("0")
#
# The Lua below is written for this test from that documented behaviour:
# acquire = "free or mine: HINCRBY my field, PEXPIRE; else return the PTTL",
# unlock  = "not mine: nil; HINCRBY -1; zero: DEL and PUBLISH 0".
set -u

BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/interop_redisson.$$
mkdir -p "$TMP"
PASS=0
FAIL=0
BG=()
cleanup() {
    local p
    for p in "${BG[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ $FAIL -eq 0 ] && rm -rf "$TMP"
}
trap cleanup EXIT
ok()  { PASS=$((PASS + 1)); echo "ok   - $*" >&2; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*" >&2; }
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
eq() { [ "$1" = "$2" ] || { echo "   got '$1', want '$2'" >&2; return 1; }; }
num_gt() { [[ "$1" =~ ^-?[0-9]+$ ]] && [ "$1" -gt "$2" ] || { echo "   got '$1', want > $2" >&2; return 1; }; }
num_le() { [[ "$1" =~ ^-?[0-9]+$ ]] && [ "$1" -le "$2" ] || { echo "   got '$1', want <= $2" >&2; return 1; }; }
skip_or_fail() {
    if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then echo "FAIL: $* (BATON_REQUIRE_ALL=1)" >&2; echo "0 passed, 1 failed"; exit 1; fi
    echo "SKIP: $*" >&2; echo "0 passed, 0 failed"; exit 77
}
now_ms() { date +%s%3N; }
wait_file() { local i; for ((i = 0; i < ${2:-10} * 50; i++)); do [ -e "$1" ] && return 0; sleep 0.02; done; return 1; }
wait_pid() { # PID TIMEOUT_S -> RC (999 on timeout)
    local i
    for ((i = 0; i < $2 * 50; i++)); do
        if ! kill -0 "$1" 2>/dev/null; then wait "$1"; RC=$?; return 0; fi
        sleep 0.02
    done
    kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null; RC=999; return 1
}

MODE=${2:-single}
if [ "$MODE" = cluster ]; then
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis-cluster/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis cluster"
else
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis server"
fi
command -v redis-cli >/dev/null || skip_or_fail "redis-cli is missing"
X="interop-rs-$$-x"
TOKEN="redisson_lock_token:{$X}"
CHAN="redisson_lock__channel:{$X}"
if [ "$MODE" = cluster ]; then
    R() { redis-cli -c -h 127.0.0.1 -p "$PORT" "$@"; }
    URI="redis-cluster://127.0.0.1:$PORT"
    # the master of X's slot: pub/sub and MONITOR are watched there
    OWN=$(redis-cli -h 127.0.0.1 -p "$PORT" GET "$X" 2>&1 | sed -n 's/^MOVED [0-9]* .*:\([0-9]*\)$/\1/p')
    OWN=${OWN:-$PORT}
    PUB=spublish SUBCMD=SSUBSCRIBE NUMSUB=SHARDNUMSUB
else
    R() { redis-cli -h 127.0.0.1 -p "$PORT" -n 0 "$@"; }
    URI="redis://127.0.0.1:$PORT/0"
    OWN=$PORT
    PUB=publish SUBCMD=SUBSCRIBE NUMSUB=NUMSUB
fi

ACQUIRE='if redis.call("exists", KEYS[1]) == 0 or redis.call("hexists", KEYS[1], ARGV[2]) == 1 then
  redis.call("hincrby", KEYS[1], ARGV[2], 1)
  redis.call("pexpire", KEYS[1], ARGV[1])
  return false
end
return redis.call("pttl", KEYS[1])'
UNLOCK='if redis.call("hexists", KEYS[1], ARGV[3]) == 0 then return false end
local n = redis.call("hincrby", KEYS[1], ARGV[3], -1)
if n > 0 then redis.call("pexpire", KEYS[1], ARGV[2]) return 0 end
redis.call("del", KEYS[1])
redis.call("'$PUB'", KEYS[2], ARGV[1])
return 1'
FOREIGN="6f1c3d2e-0000-4000-8000-00000000beef:77"   # a Redisson client's uuid:threadId

# ---- 1. baton holds X: the keys are Redisson's ------------------------------
rm -f "$TMP/held" "$TMP/go"
"$BATON" run -u "$URI" "$X" -- sh -c \
    'echo "$BATON_FENCE" > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.02; done' \
    sh "$TMP/held" "$TMP/go" 2>"$TMP/holder.err" &
HPID=$!
BG+=("$HPID")
if ! wait_file "$TMP/held" 15; then
    bad "baton did not acquire $X: $(cat "$TMP/holder.err")"
    echo "$PASS passed, $FAIL failed"; exit 1
fi
FENCE=$(cat "$TMP/held")
check "EXISTS $X = 1" eq "$(R EXISTS "$X")" 1
check "TYPE $X = hash" eq "$(R TYPE "$X")" hash
check "HLEN $X = 1" eq "$(R HLEN "$X")" 1
mapfile -t HG < <(R HGETALL "$X")
FIELD=${HG[0]:-}
is_field() { [[ "$1" =~ ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}:[0-9]+$ ]]; }
check "HGETALL: one field '<uuid>:<thread id>' ($FIELD)" is_field "$FIELD"
check "HGETALL: its reentry count is 1" eq "${HG[1]:-}" 1
check "HGETALL: nothing else" eq "${#HG[@]}" 2
PTTL=$(R PTTL "$X")
check "PTTL $X > 0" num_gt "$PTTL" 0
check "PTTL $X <= the default 30 s lease" num_le "$PTTL" 30000
check "GET $TOKEN = the child's BATON_FENCE ($FENCE)" eq "$(R GET "$TOKEN")" "$FENCE"

# Redisson's tryLock from another client fails and returns the PTTL
res=$(R EVAL "$ACQUIRE" 1 "$X" 30000 "$FOREIGN")
check "Redisson-style acquire with another field fails (returns PTTL $res)" num_gt "$res" 0
check "...and leaves baton's hash alone" eq "$(R HLEN "$X")" 1
check "...with baton's field still 1" eq "$(R HGET "$X" "$FIELD")" 1
# Redisson's unlock from a non-owner does nothing
res=$(R EVAL "$UNLOCK" 2 "$X" "$CHAN" 0 30000 "$FOREIGN")
check "Redisson-style unlock by a non-owner returns nil" eq "$res" ""
check "...and baton still holds $X" eq "$(R EXISTS "$X")" 1

# the watchdog renews the TTL (default lease 30 s, renewed every 10 s: the
# PTTL never goes far below 20 s while held; check it did not run down)
sleep 1
check "PTTL stays high while baton holds" num_gt "$(R PTTL "$X")" 15000

# releasing publishes 0 on Redisson's channel
rm -f "$TMP/sub.out"
timeout 10 redis-cli -h 127.0.0.1 -p "$OWN" $SUBCMD "$CHAN" >"$TMP/sub.out" 2>&1 &
SPID=$!
BG+=("$SPID")
for i in $(seq 1 100); do [ "$(redis-cli -p "$OWN" PUBSUB $NUMSUB "$CHAN" | sed -n 2p)" -ge 1 ] 2>/dev/null && break; sleep 0.02; done
touch "$TMP/go"
wait_pid "$HPID" 15
check "baton run exits 0 after the command" eq "$RC" 0
check "EXISTS $X = 0 after release" eq "$(R EXISTS "$X")" 0
for i in $(seq 1 100); do grep -qx 0 "$TMP/sub.out" 2>/dev/null && break; sleep 0.02; done
kill "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
check "release published '0' on $CHAN ($PUB)" grep -qx 0 "$TMP/sub.out"
check "the fence counter stays ($FENCE)" eq "$(R GET "$TOKEN")" "$FENCE"

# ---- 2. a Redisson holder excludes baton ------------------------------------
res=$(R EVAL "$ACQUIRE" 1 "$X" 30000 "$FOREIGN")
check "Redisson-style acquire of the free lock succeeds (nil)" eq "$res" ""
t0=$(now_ms)
timeout -k 2 30 "$BATON" run -n -u "$URI" "$X" -- true 2>"$TMP/err"
rc=$?
check "baton run -n is busy while a Redisson client holds (rc $rc)" eq "$rc" 1
check "...and leaves the foreign hash alone" eq "$(R HGET "$X" "$FOREIGN")" 1
# Redisson reentry by the same owner still works with baton's keys around
res=$(R EVAL "$ACQUIRE" 1 "$X" 30000 "$FOREIGN")
check "Redisson-style reentrant acquire (nil)" eq "$res" ""
check "...count 2" eq "$(R HGET "$X" "$FOREIGN")" 2
res=$(R EVAL "$UNLOCK" 2 "$X" "$CHAN" 0 30000 "$FOREIGN")
check "Redisson-style unlock, count 2 -> 1 (returns 0)" eq "$res" 0
res=$(R EVAL "$UNLOCK" 2 "$X" "$CHAN" 0 30000 "$FOREIGN")
check "Redisson-style final unlock (returns 1)" eq "$res" 1
timeout -k 2 30 "$BATON" run -n -u "$URI" "$X" -- true 2>"$TMP/err"
rc=$?
check "baton run -n gets it after the Redisson unlock (rc $rc)" eq "$rc" 0
F2=$(R GET "$TOKEN")
check "the fence went up ($FENCE -> $F2)" num_gt "$F2" "$FENCE"

# ---- 3. a blocked baton waiter is woken by Redisson's unlock message --------
R HSET "$X" "$FOREIGN" 1 >/dev/null
R PEXPIRE "$X" 30000 >/dev/null
rm -f "$TMP/w.fence" "$TMP/mon.out"
# watch the server: the waiter must not poll
timeout 20 redis-cli -h 127.0.0.1 -p "$OWN" MONITOR >"$TMP/mon.out" 2>/dev/null &
MPID=$!
BG+=("$MPID")
sleep 0.2
"$BATON" run -w 25 -u "$URI" "$X" -- sh -c 'echo "$BATON_FENCE" > "$1"' sh "$TMP/w.fence" 2>"$TMP/w.err" &
WPID=$!
BG+=("$WPID")
# it subscribes to the channel (no polling)
sub=0
for i in $(seq 1 150); do
    n=$(redis-cli -p "$OWN" PUBSUB $NUMSUB "$CHAN" | sed -n 2p)
    [ "${n:-0}" -ge 1 ] 2>/dev/null && { sub=1; break; }
    sleep 0.02
done
check "the waiting baton subscribed to $CHAN" eq "$sub" 1
sleep 0.3
sleep 1.7
check "baton is still waiting for the foreign holder" kill -0 "$WPID"
# over ~2 s of waiting on a 30 s foreign lease: the first try, maybe a
# bounded re-check, no polling loop
tries=$(grep -iE '"(evalsha|eval)"' "$TMP/mon.out" | grep -cF "\"$X\"")
check "the waiter did not poll the lock ($tries acquire attempts in ~2 s)" [ "$tries" -ge 1 -a "$tries" -le 4 ]
R DEL "$X" >/dev/null
t0=$(now_ms)
R $PUB "$CHAN" 0 >/dev/null
wait_pid "$WPID" 25
el=$(( $(now_ms) - t0 ))
kill "$MPID" 2>/dev/null
wait "$MPID" 2>/dev/null
check "the waiter was granted (rc $RC)" eq "$RC" 0
check "...promptly after the unlock message ($el ms; the foreign TTL was 30 s)" [ "$el" -lt 3000 ]
F3=$(cat "$TMP/w.fence" 2>/dev/null)
check "...with a higher fence ($F2 -> $F3)" num_gt "${F3:-0}" "$F2"

# ---- 4. baton continues an RFencedLock's token counter ----------------------
# A baton grant hands out max(counter + 1, server clock in µs) and stores it
# back (docs/fencing.md): above the counter, and Redisson's INCR continues
# from there. A counter already above the clock is simply incremented.
Y="interop-rs-$$-y"
YT="redisson_lock_token:{$Y}"
R SET "$YT" 1000 >/dev/null
out=$(timeout -k 2 30 "$BATON" run -n -u "$URI" "$Y" -- sh -c 'echo "$BATON_FENCE"' 2>"$TMP/err")
check "baton's fence continues above the shared token counter (1000 -> $out)" num_gt "$out" 1000
check "...and is stored back in the counter" eq "$(R GET "$YT")" "$out"
inc=$(R INCR "$YT")
check "a Redisson INCR continues above baton's fence ($out -> $inc)" num_gt "$inc" "$out"
R SET "$YT" 5000000000000000 >/dev/null
out=$(timeout -k 2 30 "$BATON" run -n -u "$URI" "$Y" -- sh -c 'echo "$BATON_FENCE"' 2>"$TMP/err")
check "a counter ahead of the clock is incremented exactly (5000000000000000 -> $out)" eq "$out" 5000000000000001
check "...and stays an integer string" eq "$(R GET "$YT")" 5000000000000001

R DEL "$X" "$TOKEN" >/dev/null
R DEL "$Y" "$YT" >/dev/null
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
