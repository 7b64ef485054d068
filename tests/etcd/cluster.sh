#!/bin/bash
# etcd on a 3-member cluster (its own, in $BATON_TEST_TMP/etcd_cluster), through the CLI:
#  - the leader is killed while a lock is held and waited on: never two holders
#    (the log shows the holder's whole run before the waiter's), the holder is
#    not told LOST (its lease survives the election), the waiter is granted
#    with a higher fence;
#  - the member the clients talk to first is killed: a new client fails over
#    to the others; it is started again and the cluster serves on.
# Order and outcome are asserted; time bounds are generous.
# usage: cluster.sh BATON
set -u
BATON=$1
T=${BATON_TEST_TMP:?}/etcd_cluster${BATON_ETCD_TRANSPORT:+_$BATON_ETCD_TRANSPORT}
SH=$(dirname "$0")/../servers/etcd.sh
command -v etcd >/dev/null || { echo "etcd missing: skip"; exit 77; }
bash "$SH" stop-all "$T" >/dev/null 2>&1
rm -rf "$T"; mkdir -p "$T"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
wait_line() { for _ in $(seq 1 300); do grep -qx "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    bash "$SH" cluster-stop "$T/c" >/dev/null 2>&1
}
trap cleanup EXIT

hosts=$(bash "$SH" cluster-start "$T/c" 3)
rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || { echo "FAIL: cluster-start"; echo "0 passed, 1 failed"; exit 1; }
echo "cluster: $hosts"
# the transport under test (etcd_cluster: gateway, etcd_cluster_grpc: grpc)
TR="transport=${BATON_ETCD_TRANSPORT:-gateway}"
U="etcd://$hosts?ttl=10&$TR"
N="cluster-$$"

# 1. kill the leader under a held and a waited-on lock
log=$T/1.log
"$BATON" run -u "$U" "$N" -- sh -c "echo h-in >>$log; sleep 4; echo h-out >>$log" &
pids+=($!); hp=$!
check "the holder holds" wait_line "$log" h-in
f1=$("$BATON" status -u "$U" "$N" | sed -n 's/^fence: //p')
"$BATON" run -u "$U" -w 120 "$N" -- sh -c "echo w-in >>$log; echo w-out >>$log" &
pids+=($!); wp=$!
# the waiter is queued (its key is there) before the leader goes
q=0
for _ in $(seq 1 100); do
    q=$("$BATON" status -u "$U" "$N" | sed -n 's/^queue: //p')
    [ "${q:-0}" -ge 1 ] && break
    sleep 0.1
done
check "the waiter is queued" test "${q:-0}" -ge 1
L=$(bash "$SH" leader "$T/c")
check "a leader ($L)" test -n "$L"
[ -n "$L" ] && bash "$SH" member-kill "$T/c" "$L"
wait "$hp"; rc=$?
check "the holder ran to its end, not LOST (exit $rc)" test "$rc" = 0
wait "$wp"; rc=$?
check "the waiter was granted (exit $rc)" test "$rc" = 0
check "never two holders" test "$(tr '\n' ' ' <"$log")" = "h-in h-out w-in w-out "
f2=$("$BATON" status -u "$U" "$N" | sed -n 's/^fence: //p')
check "the fence grew ($f1 -> $f2)" test "${f2:-0}" -gt "${f1:-0}"
[ -n "$L" ] && bash "$SH" member-start "$T/c" "$L" >/dev/null

# 2. the first member of the URI is gone: failover
bash "$SH" member-stop "$T/c" 1
"$BATON" run -u "$U" -w 30 "$N" -- true
check "failover past a stopped member 1" test $? = 0
bash "$SH" member-start "$T/c" 1 >/dev/null
check "member 1 is back" test $? = 0
"$BATON" run -u "etcd://$(echo "$hosts" | cut -d, -f1)?$TR" -w 30 "$N" -- true
check "member 1 serves again" test $? = 0

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
