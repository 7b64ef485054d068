#!/bin/bash
# The lock conformance suite and a few `baton` CLI checks against a RedLock
# quorum of five fresh redis-server nodes.
#   conformance.sh REDIS_SH TEST_CONFORMANCE BATON
# Exit 77 when redis-server is missing (a failure when BATON_REQUIRE_ALL=1).
set -u
REDIS_SH=$1 CONF=$2 BATON=$3
BASE=${BATON_TEST_TMP:-/tmp}/redlock_conformance
NODES=5

skip() {
    if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then echo "FAIL: $* (BATON_REQUIRE_ALL=1)" >&2; echo "0 passed, 1 failed"; exit 1; fi
    echo "SKIP: $*" >&2; echo "0 passed, 0 failed"; exit 77
}
stop_all() { for i in $(seq 0 $((NODES - 1))); do bash "$REDIS_SH" stop "$BASE/n$i" >/dev/null 2>&1; done; }

stop_all
rm -rf "$BASE" && mkdir -p "$BASE"
trap stop_all EXIT
hosts=""
for i in $(seq 0 $((NODES - 1))); do
    port=$(bash "$REDIS_SH" start "$BASE/n$i"); rc=$?
    [ $rc = 77 ] && skip "redis-server is not installed"
    [ $rc = 0 ] || { echo "FAIL: cannot start node $i" >&2; echo "0 passed, 1 failed"; exit 1; }
    hosts="$hosts${hosts:+,}127.0.0.1:$port"
done
URI="redlock://$hosts/0"

"$CONF" "$URI"
conf_rc=$?

# The CLI: run under the lock, busy exit, the fence in the child's environment.
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL cli: $1" >&2; fi; }
out=$("$BATON" run -u "$URI" -n cli-lock -- sh -c 'echo "$BATON_LOCK $BATON_FENCE"'); rc=$?
check "run" '[ $rc = 0 ] && [ "${out%% *}" = cli-lock ] && [ "${out##* }" -gt 0 ]'
"$BATON" run -u "$URI" cli-lock -- sleep 2 & holder=$!
sleep 0.7
"$BATON" run -u "$URI" -n cli-lock -- true; rc=$?
check "busy" '[ $rc = 1 ]'
st=$("$BATON" status -u "$URI" cli-lock 2>&1); rc=$?
check "status" '[ $rc = 0 ] && echo "$st" | grep -q "$holder"'
wait $holder
"$BATON" run -u "$URI" -n cli-lock -- true; rc=$?
check "free again" '[ $rc = 0 ]'
"$BATON" run -u "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3" -n cli-lock -- true 2>/dev/null; rc=$?
check "unreachable" '[ $rc = 69 ]'
echo "cli: $pass passed, $fail failed"
[ $conf_rc = 0 ] && [ $fail = 0 ]
