#!/bin/bash
# The CLI over MySQL/MariaDB's read-write locks, semaphores, permits and fair
# locks (issue 25), in session and lease mode, on the "mysql" fixture
# server ($BATON_TEST_SRV/mysql/port):
#   - baton run -s: readers side by side; -x busy while one reads, runs after;
#   - baton sem set/available/add/drain, status shows the signed count;
#   - baton run --permits N: N at once, the next busy, a permit comes back;
#   - baton run --fair: two queued waiters run in their order, fences increase;
#     a SIGKILLed fair holder (session mode) frees it for the waiter at once.
#
#   cli_prims.sh PATH/TO/baton
set -u

MODE=mysql
BATON=${1:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_mysql_prims.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/../cli/lib.sh"

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/mysql/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test mysql server"
unset BATON_DIR BATON_URI MYSQL_PWD
BASE="mysql://baton:baton-test@127.0.0.1:$PORT/baton"
P="cliprims-$$-"

# start_holder TAG NAME ARGS...: baton run ARGS NAME holding until $TMP/go.TAG exists
start_holder() {
    local tag=$1 name=$2; shift 2
    rm -f "$TMP/go.$tag" "$TMP/go.$tag.held"
    "${B[@]}" run -u "$URI" "$@" "$name" -- sh -c 'echo "$BATON_FENCE" > "$0.held"; while [ ! -e "$0" ]; do sleep 0.05; done' \
        "$TMP/go.$tag" >"$TMP/h.$tag.out" 2>"$TMP/h.$tag.err" &
    HOLDER_PID=$!
    BG_PIDS+=("$HOLDER_PID")
    wait_file "$TMP/go.$tag.held" 15 || bad "holder $tag never ran: $(head -c 300 "$TMP/h.$tag.err")"
}

for mode in session lease; do
    URI="$BASE?mode=$mode"
    D="[$mode]"

    # ---- read-write lock ----
    N="${P}$mode-rw"
    start_holder r1 "$N" -s; r1=$HOLDER_PID
    expect_rc 0 "$D -s: a second reader runs beside the first" b run -n -u "$URI" -s "$N" -- true
    expect_rc 1 "$D -x is busy while a reader holds" b run -n -u "$URI" -x "$N" -- true
    expect_rc 0 "$D status of a read-locked name" b status -u "$URI" "$N"
    check "$D status says held" grep -q "held: yes" "$TMP/out"
    touch "$TMP/go.r1"; wait_pid "$r1" 15
    expect_rc 0 "$D -x runs once the reader is gone" b run -w 5 -u "$URI" -x "$N" -- true

    # ---- semaphore ----
    N="${P}$mode-sem"
    expect_rc 0 "$D sem set 2" b sem -u "$URI" "$N" set 2
    expect_rc 1 "$D sem set twice: already set" b sem -u "$URI" "$N" set 5
    out=$(b sem -u "$URI" "$N" available); check "$D sem available = 2 ($out)" [ "$out" = 2 ]
    start_holder s1 "$N" --permits 2; p1=$HOLDER_PID
    start_holder s2 "$N" --permits 2; p2=$HOLDER_PID
    expect_rc 1 "$D --permits 2: a third run is busy" b run -n -u "$URI" --permits 2 "$N" -- true
    touch "$TMP/go.s1"; wait_pid "$p1" 15
    expect_rc 0 "$D --permits 2: a permit comes back" b run -w 5 -u "$URI" --permits 2 "$N" -- true
    touch "$TMP/go.s2"; wait_pid "$p2" 15
    out=$(b sem -u "$URI" "$N" available); check "$D all permits back ($out)" [ "$out" = 2 ]
    out=$(b sem -u "$URI" "$N" drain); check "$D sem drain returns 2 ($out)" [ "$out" = 2 ]
    expect_rc 0 "$D sem add 3" b sem -u "$URI" "$N" add 3
    expect_rc 0 "$D status of a semaphore" b status -u "$URI" "$N"
    check "$D status shows permits: 3" grep -qx "permits: 3" "$TMP/out"
    expect_rc 0 "$D sem add -5" b sem -u "$URI" "$N" add -5
    out=$(b sem -u "$URI" "$N" available); check "$D sem available below zero = 0 ($out)" [ "$out" = 0 ]
    expect_rc 0 "$D status of a negative semaphore" b status -u "$URI" "$N"
    check "$D status shows permits: -2" grep -qx "permits: -2" "$TMP/out"

    # ---- fair lock: waiters run in the order they came ----
    N="${P}$mode-fair"
    start_holder f0 "$N" --fair; f0=$HOLDER_PID
    f0fence=$(cat "$TMP/go.f0.held")
    rm -f "$TMP/order"
    b run -w 30 -u "$URI" --fair "$N" -- sh -c 'echo "first $BATON_FENCE" >> "$0"' "$TMP/order" 2>"$TMP/w1.err" &
    w1=$!; BG_PIDS+=("$w1")
    sleep 0.7
    b run -w 30 -u "$URI" --fair "$N" -- sh -c 'echo "second $BATON_FENCE" >> "$0"' "$TMP/order" 2>"$TMP/w2.err" &
    w2=$!; BG_PIDS+=("$w2")
    sleep 0.7
    expect_rc 1 "$D --fair -n does not jump the queue" b run -n -u "$URI" --fair "$N" -- true
    touch "$TMP/go.f0"; wait_pid "$f0" 15
    wait_pid "$w1" 20; check "$D first waiter exits 0 (got $RC)" [ "$RC" = 0 ]
    wait_pid "$w2" 20; check "$D second waiter exits 0 (got $RC)" [ "$RC" = 0 ]
    check "$D waiters ran in their order: $(tr '\n' ' ' <"$TMP/order")" \
        [ "$(cut -d' ' -f1 "$TMP/order" | paste -sd' ')" = "first second" ]
    a=$(sed -n 1p "$TMP/order" | cut -d' ' -f2); c=$(sed -n 2p "$TMP/order" | cut -d' ' -f2)
    check "$D fair fences increase ($f0fence < $a < $c)" gt "$a" "$f0fence"
    check "$D ... and again" gt "$c" "$a"
done

# a fair holder SIGKILLed in session mode: the server frees its named lock
# with its connection, and the queued waiter runs at once
URI="$BASE?mode=session"
N="${P}fair-kill"
start_holder k0 "$N" --fair; k0=$HOLDER_PID
b run -w 30 -u "$URI" --fair "$N" -- sh -c 'echo "$BATON_FENCE" > "$0"' "$TMP/kfence" 2>"$TMP/k1.err" &
k1=$!; BG_PIDS+=("$k1")
sleep 0.7
t0=$(now_ms)
kill -KILL "$k0"
wait_pid "$k1" 15; check "fair: the waiter runs after the holder's SIGKILL (got $RC)" [ "$RC" = 0 ]
el=$(( $(now_ms) - t0 ))
echo "   the waiter ran $el ms after the SIGKILL" >&2
check "fair: the waiter's fence is larger" gt "$(cat "$TMP/kfence" 2>/dev/null)" "$(cat "$TMP/go.k0.held")"
touch "$TMP/go.k0"    # the killed holder's command, orphaned, ends too

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
