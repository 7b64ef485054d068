#!/bin/bash
# Interop: baton's values, queues and groups on Redis against redis-cli, the
# foreign client, through the baton CLI (layout: docs/redis-layout.md).
#
#   redis_cli.sh PATH/TO/baton
#
#   baton_value:{NAME}        the value, a plain string: redis-cli GET / SET / DEL work on it
#   baton_value_ver:{NAME}    its version (a foreign write gets a new one at the next read)
#   baton_queue:{NAME}        the waiting item ids (LLEN = waiting), items in baton_queue_items:{NAME}
#   baton_group:{NAME}        member id -> lease deadline
#
# The fixture server runs with keyspace notifications off (its default), so a
# watcher sees a redis-cli SET by its re-read, within 2 s.
set -u

BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/interop_redis_cli.$$
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
num_gt() { [[ "$1" =~ ^[0-9]+$ ]] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$1" -gt "$2" ] || { echo "   got '$1', want > '$2'" >&2; return 1; }; }
skip_or_fail() {
    if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then echo "FAIL: $* (BATON_REQUIRE_ALL=1)" >&2; echo "0 passed, 1 failed"; exit 1; fi
    echo "SKIP: $*" >&2; echo "0 passed, 0 failed"; exit 77
}
now_ms() { date +%s%3N; }
# Waits up to SECS for FILE to contain a line equal to WANT.
wait_line() { local i; for ((i = 0; i < $3 * 50; i++)); do grep -qxF -- "$2" "$1" 2>/dev/null && return 0; sleep 0.02; done; return 1; }

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test redis server"
command -v redis-cli >/dev/null || skip_or_fail "redis-cli is missing"
R() { redis-cli -h 127.0.0.1 -p "$PORT" -n 0 "$@"; }
export BATON_URI="redis://127.0.0.1:$PORT/0"
V="interop-cli-$$-cfg"
KEY="baton_value:{$V}"

# baton set -> redis-cli GET
"$BATON" value set "$V" 'from baton' >/dev/null
check "baton value set is read by redis-cli GET" eq "$(R GET "$KEY")" 'from baton'
VER1=$("$BATON" value get --version "$V" | head -1)

# redis-cli SET -> baton get, with a new version
R SET "$KEY" 'from redis-cli' >/dev/null
OUT=$("$BATON" value get --version "$V")
check "redis-cli SET is read by baton value get" eq "$(echo "$OUT" | tail -1)" 'from redis-cli'
check "a redis-cli SET gets a new, larger version" num_gt "$(echo "$OUT" | head -1)" "$VER1"

# redis-cli SET -> a running baton value watch (no keyspace notifications:
# seen by the re-read, within 2 s)
"$BATON" value watch -w 20 "$V" >"$TMP/watch.out" 2>"$TMP/watch.err" &
WPID=$!
BG+=("$WPID")
check "the watch prints the value now" wait_line "$TMP/watch.out" 'from redis-cli' 10
T0=$(now_ms)
R SET "$KEY" 'second from redis-cli' >/dev/null
check "the watch prints a value set by redis-cli" wait_line "$TMP/watch.out" 'second from redis-cli' 10
echo "   seen after $(( $(now_ms) - T0 )) ms (re-read bound 2000 ms)" >&2
R DEL "$KEY" >/dev/null
check "the watch prints an empty line for a redis-cli DEL" wait_line "$TMP/watch.out" '' 10
"$BATON" value set "$V" 'back from baton' >/dev/null
check "the watch prints a baton set" wait_line "$TMP/watch.out" 'back from baton' 10
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null

# watch -- COMMAND: BATON_VALUE for a redis-cli SET
"$BATON" value watch -w 20 "$V" -- sh -c 'printf "%s\n" "$BATON_VALUE" >>"$0"' "$TMP/cmd.out" 2>"$TMP/cmd.err" &
WPID=$!
BG+=("$WPID")
check "watch -- COMMAND runs for the value now" wait_line "$TMP/cmd.out" 'back from baton' 10
R SET "$KEY" 'for the command' >/dev/null
check "watch -- COMMAND runs with BATON_VALUE of a redis-cli SET" wait_line "$TMP/cmd.out" 'for the command' 10
kill "$WPID" 2>/dev/null
wait "$WPID" 2>/dev/null

# a counter: redis-cli INCR on the value's key is an ordinary change
C="interop-cli-$$-count"
"$BATON" counter add "$C" 5 >/dev/null
R INCR "baton_value:{$C}" >/dev/null
check "redis-cli INCR on a counter's key is seen by baton counter get" eq "$("$BATON" counter get "$C")" 6

# the queue: what redis-cli sees
Q="interop-cli-$$-q"
"$BATON" queue put "$Q" job-1 >/dev/null
"$BATON" queue put "$Q" job-2 >/dev/null
check "redis-cli LLEN of the queue's list = items waiting" eq "$(R LLEN "baton_queue:{$Q}")" 2
check "the items' bytes are in the items hash" eq "$(R HVALS "baton_queue_items:{$Q}" | sort | tr '\n' ' ')" 'job-1 job-2 '
check "baton queue take gets the oldest" eq "$("$BATON" queue take "$Q")" job-1
check "taken and done: one left" eq "$(R LLEN "baton_queue:{$Q}")" 1

# the group: a member while its command runs, as redis-cli sees it
G="interop-cli-$$-g"
"$BATON" member --id node-1 --value 10.0.0.1 "$G" -- sleep 30 >/dev/null 2>&1 &
MPID=$!
BG+=("$MPID")
for ((i = 0; i < 250; i++)); do [ "$(R ZCARD "baton_group:{$G}")" = 1 ] && break; sleep 0.02; done
check "redis-cli sees the member in the group's zset" eq "$(R ZRANGE "baton_group:{$G}" 0 -1)" node-1
check "and its value in the values hash" eq "$(R HGET "baton_group_values:{$G}" node-1)" 10.0.0.1
check "baton members lists it" eq "$("$BATON" members "$G" | grep -c node-1)" 1
kill "$MPID" 2>/dev/null
wait "$MPID" 2>/dev/null
for ((i = 0; i < 250; i++)); do [ "$(R ZCARD "baton_group:{$G}")" = 0 ] && break; sleep 0.02; done
check "a member whose command was stopped has left" eq "$(R ZCARD "baton_group:{$G}")" 0

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
