#!/bin/bash
# Names below a name are other locks (issue #23): on etcd every key of
# "a/x" ("<prefix>a/x/<lease>") is also in the range of "a/", and counting
# it made a held "a/x" block "a" (mutex, read-write lock and permits) and
# made `baton status a` report a/x's holder; `baton unlock --force a` broke
# a/x. With a/x held (mutex, then one of 1 permit, then an elected leader):
# "a" is free, shows as not held, and breaking it leaves a/x alone.
# usage: nested.sh BATON
set -u
BATON=$1
SRV=${BATON_TEST_SRV:?}/etcd
T=${BATON_TEST_TMP:?}/etcd_nested${BATON_ETCD_TRANSPORT:+_$BATON_ETCD_TRANSPORT}
rm -rf "$T"; mkdir -p "$T"
[ -s "$SRV/port" ] || { echo "no etcd fixture: skip"; exit 77; }
P=$(cat "$SRV/port")
U="etcd://127.0.0.1:$P/nested$$?transport=${BATON_ETCD_TRANSPORT:-gateway}"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
wait_file() { for _ in $(seq 1 300); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
# hold NAME (extra options before it) in the background until the end
hold() {
    local f=$T/held.$RANDOM
    "$BATON" run -u "$U" "$@" -- sh -c "echo held > $f; sleep 60" >/dev/null 2>&1 &
    pids+=($!)
    wait_file "$f"
}

# ---- the mutex (and what shares its keys: the read-write lock, status, unlock)
check "a/x held" hold a/x
"$BATON" run -n -u "$U" a -- true
check "a is free while a/x is held (exit $?)" [ $? -eq 0 ]
"$BATON" run -n -x -u "$U" a -- true
check "a's write side is free while a/x is held (exit $?)" [ $? -eq 0 ]
"$BATON" run -n -s -u "$U" a -- true
check "a's read side is free while a/x is held (exit $?)" [ $? -eq 0 ]
"$BATON" status -u "$U" a >"$T/st" 2>&1
check "baton status a: not held" grep -qx "held: no" "$T/st"
check "baton status a: no holder line" bash -c "! grep -q '^holder:' '$T/st'"
"$BATON" status -u "$U" a/x >"$T/stx" 2>&1
check "baton status a/x: held" grep -qx "held: yes" "$T/stx"
# a held too: a's holder is a's, not a/x's (a/x was first in line)
check "a held after a/x" hold a
"$BATON" status -u "$U" a >"$T/st2" 2>&1
check "baton status a: held" grep -qx "held: yes" "$T/st2"
check "a's fence is not a/x's" [ "$(grep '^fence:' "$T/st2")" != "$(grep '^fence:' "$T/stx")" ]
"$BATON" unlock -u "$U" --force a >/dev/null 2>&1
"$BATON" status -u "$U" a/x >"$T/stx2" 2>&1
check "unlock --force a leaves a/x held" grep -qx "held: yes" "$T/stx2"

# ---- permits: one of 1 under p/x, then p's own 1 permit is free
check "p/x's permit held" hold --permits 1 p/x
"$BATON" run -n --permits 1 -u "$U" p -- true
check "p's permit is free while p/x's is held (exit $?)" [ $? -eq 0 ]

# ---- elections: a leader of e/x is no leader of e
"$BATON" elect -u "$U" --value vx e/x -- sleep 60 >/dev/null 2>&1 &
pids+=($!)
# --leader prints "TERM VALUE" (exit 1 when there is none)
leader() { "$BATON" elect -u "$U" --leader "$1" 2>/dev/null | cut -d' ' -f2-; }
for _ in $(seq 1 300); do [ "$(leader e/x)" = vx ] && break; sleep 0.1; done
check "e/x has its leader" [ "$(leader e/x)" = vx ]
out=$(leader e)
check "e has no leader while e/x has one ('$out')" [ "$out" != vx ]

echo "passed $pass, failed $fail"
[ "$fail" -eq 0 ]
