#!/bin/bash
# etcd interop and faults through the CLI, on the "etcd" fixture server:
#  - baton holds NAME -> `etcdctl lock NAME` waits until baton lets go;
#  - `etcdctl lock NAME` holds -> baton waits (and a try says busy);
#  - a SIGKILLed baton holder: etcdctl gets the lock once its lease expires;
#  - a SIGSTOPped baton holder past its lease: it is told LOST (exit 75) and
#    the next holder's fence is higher;
#  - failover past a dead member in the URI; an unreachable member set and a
#    paused member -> exit 69 (EUNAVAILABLE) within the timeouts; malformed
#    URIs -> exit 64 (EINVAL);
#  - values: `baton value watch` sees `etcdctl put` (version = etcdctl's
#    mod_revision), `etcdctl get`/`etcdctl watch` see `baton value set`, a
#    set --if-version of a revision etcdctl moved on is refused (exit 1).
# Order and outcome are asserted; the only time bounds are generous ones.
# usage: interop.sh BATON
set -u
BATON=$1
SRV=${BATON_TEST_SRV:?}/etcd
T=${BATON_TEST_TMP:?}/etcd_interop${BATON_ETCD_TRANSPORT:+_$BATON_ETCD_TRANSPORT}
ETCD_SH=$(dirname "$0")/../servers/etcd.sh
rm -rf "$T"; mkdir -p "$T"
command -v etcdctl >/dev/null || { echo "etcdctl missing: skip"; exit 77; }
[ -s "$SRV/port" ] || { echo "no etcd fixture: skip"; exit 77; }
P=$(cat "$SRV/port")
# the transport under test (etcd_interop: gateway, etcd_interop_grpc: grpc)
TR="transport=${BATON_ETCD_TRANSPORT:-gateway}"
U="etcd://127.0.0.1:$P?$TR"
export ETCDCTL_API=3
ECTL="etcdctl --endpoints=127.0.0.1:$P"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
# waits (up to 30 s) until FILE has a line LINE
wait_line() { for _ in $(seq 1 300); do grep -qx "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; kill -CONT "$p" 2>/dev/null; done
    bash "$ETCD_SH" stop "$T/paused" >/dev/null 2>&1
}
trap cleanup EXIT
N="interop-$$"

# 1. baton holds, etcdctl waits
log=$T/1.log
"$BATON" run -u "$U" "$N-a" -- sh -c "echo baton-in >>$log; sleep 1.5; echo baton-out >>$log" &
pids+=($!); bp=$!
check "baton holds $N-a" wait_line "$log" baton-in
# the key is in etcd's Mutex layout: NAME/<lease hex>
check "key NAME/<lease hex>" sh -c "$ECTL get --prefix --keys-only '$N-a/' | grep -Eq '^$N-a/[0-9a-f]+\$'"
timeout 60 $ECTL lock "$N-a" -- sh -c "echo etcdctl-in >>$log" >/dev/null
wait "$bp"; rc=$?
check "baton run exit 0" test "$rc" = 0
check "etcdctl lock waited for baton" test "$(tr '\n' ' ' <"$log")" = "baton-in baton-out etcdctl-in "

# 2. etcdctl holds, baton waits (a try is busy)
log=$T/2.log
timeout 60 $ECTL lock "$N-b" -- sh -c "echo etcdctl-in >>$log; sleep 1.5; echo etcdctl-out >>$log" >/dev/null &
pids+=($!); ep=$!
check "etcdctl holds $N-b" wait_line "$log" etcdctl-in
"$BATON" status -u "$U" "$N-b" >"$T/2.status" 2>&1
check "status names etcdctl's key as the holder" grep -Eq "^holder: $N-b/[0-9a-f]+\$" "$T/2.status"
# the holder's lease TTL left (LeaseTimeToLive: etcdctl's lease is 60 s)
check "status gives the holder's lease left" \
    sh -c "grep -Eq '^remaining_ms: [1-9][0-9]*\$' '$T/2.status' && [ \$(sed -n 's/^remaining_ms: //p' '$T/2.status') -le 60000 ]"
"$BATON" run -u "$U" -n "$N-b" -- true
check "baton try on an etcdctl-held lock: busy (1)" test $? = 1
"$BATON" run -u "$U" -w 30 "$N-b" -- sh -c "echo baton-in >>$log"
check "baton waited and ran (0)" test $? = 0
wait "$ep"
check "baton waited for etcdctl" test "$(tr '\n' ' ' <"$log")" = "etcdctl-in etcdctl-out baton-in "

# 3. a killed baton holder (lease 2 s): etcdctl gets the lock when the lease expires
log=$T/3.log
"$BATON" run -u "$U&ttl=2" "$N-c" -- sh -c "echo baton-in >>$log; exec sleep 60" &
pids+=($!); bp=$!
check "baton holds $N-c" wait_line "$log" baton-in
kill -KILL "$bp"; pkill -KILL -P "$bp" 2>/dev/null
wait "$bp" 2>/dev/null
# generous: the lease is 2 s; a loaded machine may be slow
timeout 30 $ECTL lock "$N-c" -- sh -c "echo etcdctl-in >>$log" >/dev/null
check "etcdctl got the lock of a killed holder" wait_line "$log" etcdctl-in

# 4. a stopped baton holder past its lease: told LOST (75); the next fence is higher
log=$T/4.log
"$BATON" run -u "$U&ttl=2" --verbose "$N-d" -- sh -c "echo baton-in >>$log; sleep 8; echo baton-out >>$log" \
    >"$T/4.out" 2>&1 &
pids+=($!); bp=$!
check "baton holds $N-d" wait_line "$log" baton-in
f1=$("$BATON" status -u "$U" "$N-d" | sed -n 's/^fence: //p')
kill -STOP "$bp"
"$BATON" run -u "$U" -w 30 "$N-d" -- sh -c "echo second-in >>$log; sleep 1"
check "a second holder got the stopped holder's lock" test $? = 0
f2=$("$BATON" status -u "$U" "$N-d" | sed -n 's/^fence: //p')
check "fence grew ($f1 -> $f2)" test "${f2:-0}" -gt "${f1:-0}"
kill -CONT "$bp"
wait "$bp"; rc=$?
check "the resumed holder was told LOST (exit 75, got $rc)" test "$rc" = 75

# 5. a waiter whose lease is revoked while it waits (its key goes with it) must
#    not be granted on the strength of the old key (the etcd 3.4 Mutex bug that
#    Jepsen found): when it runs, its own key is there, alone, on a live lease.
log=$T/5.log
"$BATON" run -u "$U" "$N-g" -- sh -c "echo h-in >>$log; sleep 2; echo h-out >>$log" &
pids+=($!); hp=$!
check "the holder holds $N-g" wait_line "$log" h-in
"$BATON" run -u "$U" -w 60 "$N-g" -- sh -c "echo w-in >>$log; $ECTL get --prefix --keys-only '$N-g/' | grep . >$T/5.keys" &
pids+=($!); wp=$!
wk=""
for _ in $(seq 1 100); do
    wk=$($ECTL get --prefix --keys-only "$N-g/" | grep . | sed -n 2p)
    [ -n "$wk" ] && break
    sleep 0.1
done
check "the waiter is queued ($wk)" test -n "$wk"
[ -n "$wk" ] && $ECTL lease revoke "${wk##*/}" >/dev/null
wait "$hp"
wait "$wp"; rc=$?
check "the waiter ran (exit $rc)" test "$rc" = 0
check "it ran after the holder" test "$(tr '\n' ' ' <"$log")" = "h-in h-out w-in "
check "while it ran, its key was the only one, on a new lease" \
    sh -c "test \$(wc -l <'$T/5.keys') = 1 && ! grep -qx '$wk' '$T/5.keys'"

# 6. elections: `etcdctl elect` and `baton elect` on one name (concurrency.Election)
log=$T/6.log
"$BATON" elect -u "$U" --value baton-val "$N-h" -- sh -c "echo b-in >>$log; sleep 2; echo b-out >>$log" &
pids+=($!); bp=$!
check "baton leads $N-h" wait_line "$log" b-in
# etcdctl elect -l prints the leader's key and value, then follows changes
(timeout 1 $ECTL elect -l "$N-h" >"$T/6.listen" 2>/dev/null; true)
check "etcdctl elect -l sees baton's value" grep -qx baton-val "$T/6.listen"
# etcdctl's campaign waits for baton to resign; it then leads with its proposal
timeout 60 $ECTL elect "$N-h" etcdctl-val >"$T/6.elect" 2>/dev/null &
pids+=($!); ep=$!
wait "$bp"
for _ in $(seq 1 300); do grep -qx etcdctl-val "$T/6.elect" 2>/dev/null && break; sleep 0.1; done
check "etcdctl elect leads once baton resigned" grep -qx etcdctl-val "$T/6.elect"
line=$("$BATON" elect -u "$U" --leader "$N-h")
check "baton elect --leader shows etcdctl's value ($line)" sh -c "echo '$line' | grep -q ' etcdctl-val\$'"
"$BATON" elect -u "$U" -n "$N-h" -- true
check "baton elect -n while etcdctl leads: busy (1)" test $? = 1
kill -INT "$ep" 2>/dev/null; wait "$ep" 2>/dev/null
"$BATON" elect -u "$U" -w 30 "$N-h" -- true
check "baton leads once etcdctl resigned" test $? = 0

# 7. failover past a dead member; unreachable members; a paused member; bad URIs
"$BATON" run -u "etcd://127.0.0.1:1,127.0.0.1:$P?$TR" "$N-e" -- true
check "failover past a dead member" test $? = 0
"$BATON" run -u "etcd://127.0.0.1:1,127.0.0.1:2?$TR" "$N-e" -- true 2>"$T/5.err"
check "no member reachable: exit 69" test $? = 69
check "the message names a member" grep -q "127.0.0.1" "$T/5.err"
pp=$(bash "$ETCD_SH" start "$T/paused") || { bad "second server"; pp=0; }
if [ "$pp" != 0 ]; then
    bash "$ETCD_SH" pause "$T/paused"
    s=$(date +%s)
    "$BATON" run -u "etcd://127.0.0.1:$pp?connect_timeout_ms=500&timeout_ms=1000&$TR" "$N-e" -- true 2>"$T/5b.err"
    rc=$?
    check "a silent member: exit 69 (got $rc)" test "$rc" = 69
    # generous bound (the timeout is 1 s): it must not hang
    check "a silent member: answered within 15 s" test $(( $(date +%s) - s )) -le 15
    bash "$ETCD_SH" stop "$T/paused" >/dev/null
fi
for bu in "etcd://" "etcd:///x" "etcd://127.0.0.1:$P?ttl=0" "etcd://127.0.0.1:$P?what=1" \
          "etcd://127.0.0.1:$P?key=/x" "etcd://u@127.0.0.1:$P"; do
    env -u BATON_ETCD_PASSWORD "$BATON" run -u "$bu" "$N-f" -- true 2>/dev/null
    rc=$?
    check "bad URI $bu: exit 64 (got $rc)" test "$rc" = 64
done

# 8. values through the CLI: the value NAME is etcd's key NAME
K="$N-value/config"
"$BATON" value watch -u "$U" -w 20 --version "$K" >"$T/8.watch" 2>"$T/8.err" &
pids+=($!); wp=$!
check "baton value watch: absent first" wait_line "$T/8.watch" "0"
$ECTL put "$K" "from etcdctl" >/dev/null
check "baton value watch sees etcdctl put" sh -c "for i in \$(seq 1 200); do grep -q ' from etcdctl\$' '$T/8.watch' && exit 0; sleep 0.1; done; exit 1"
rev=$($ECTL get "$K" -w fields | sed -n 's/^"ModRevision" : //p')
check "its version is etcdctl's mod_revision ($rev)" grep -qx "$rev from etcdctl" "$T/8.watch"
timeout 30 $ECTL watch "$K" >"$T/8.ectl" 2>&1 &
pids+=($!); ew=$!
sleep 1
"$BATON" value set -u "$U" "$K" "from baton"
check "baton value set: exit 0" test $? = 0
check "etcdctl get reads baton's value" test "$($ECTL get "$K" --print-value-only)" = "from baton"
check "etcdctl watch sees baton's value" wait_line "$T/8.ectl" "from baton"
check "baton value watch sees its own set too" sh -c "for i in \$(seq 1 200); do grep -q ' from baton\$' '$T/8.watch' && exit 0; sleep 0.1; done; exit 1"
"$BATON" value set -u "$U" --if-version "$rev" "$K" "stale"
check "baton value set --if-version of etcdctl's old revision: exit 1" test $? = 1
kill "$ew" "$wp" 2>/dev/null; wait "$ew" "$wp" 2>/dev/null
$ECTL del "$K" >/dev/null

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
