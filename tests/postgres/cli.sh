#!/bin/bash
# `baton run` and `baton status` on PostgreSQL, every mode, on the "postgres"
# fixture server ($BATON_TEST_SRV/postgres/port):
#   - run, fences increasing, -n on a held lock exits 1, status shows the holder;
#   - session and row modes: the holder's connection terminated by a DBA → the
#     command is stopped and baton run exits 75; lease mode: the same is harmless;
#   - a wrong password and an unreachable server exit 69.
#
#   cli.sh PATH/TO/baton
set -u

MODE=postgres
BATON=${1:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_postgres.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/../cli/lib.sh"

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/postgres/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test postgres server"
command -v psql >/dev/null || skip_or_fail "psql is missing"
unset BATON_DIR BATON_URI PGPASSWORD PGHOST PGUSER
BASE="postgres://baton:baton-test@127.0.0.1:$PORT/postgres"
P="cli-$$-"
sql() { PGPASSWORD=baton-test psql -h 127.0.0.1 -p "$PORT" -U baton -d postgres -Atqc "$1"; }

for mode in session row lease; do
    URI="$BASE?mode=$mode&application_name=cli$$$mode"
    N="${P}$mode"
    expect_rc 0 "$mode: run" b run -u "$URI" "$N" -- sh -c 'echo "$BATON_FENCE" > "$0"' "$TMP/f1"
    expect_rc 0 "$mode: run again" b run -u "$URI" "$N" -- sh -c 'echo "$BATON_FENCE" > "$0"' "$TMP/f2"
    check "$mode: fences increase" gt "$(cat "$TMP/f2")" "$(cat "$TMP/f1")"

    # a holder; -n finds it busy; status names it
    rm -f "$TMP/go"
    "${B[@]}" run -u "$URI" -t 1 "$N" -- sh -c 'touch "$0.held"; while [ ! -e "$0" ]; do sleep 0.05; done' \
        "$TMP/go" >"$TMP/h.out" 2>"$TMP/h.err" &
    HP=$!
    BG_PIDS+=("$HP")
    wait_file "$TMP/go.held" 15
    expect_rc 1 "$mode: -n on a held lock" b run -u "$URI" -n "$N" -- true
    expect_rc 0 "$mode: status" b status -u "$URI" "$N"
    check "$mode: status says held" grep -q "held: yes" "$TMP/out"
    check "$mode: status names the holder's pid" grep -q " $HP " "$TMP/out"
    # a DBA terminates every connection of the holder (row mode: the one
    # whose open transaction locks the row; it renamed itself "baton ...")
    sql "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'cli$$$mode'" >/dev/null
    [ $mode = row ] && sql "SELECT count(pg_terminate_backend(l.pid)) FROM baton_locks t JOIN pg_locks l ON
        l.locktype = 'transactionid' AND l.transactionid = t.xmax AND l.granted WHERE t.name = '$N'" >/dev/null
    if [ $mode != lease ]; then
        wait_pid "$HP" 10
        check "$mode: a terminated holder connection stops the command, exit 75 (got $RC)" [ "$RC" = 75 ]
        expect_rc 0 "$mode: free again" b run -u "$URI" -n "$N" -- true
    else
        sleep 1.5
        check "lease: the holder still runs after its connections were terminated" kill -0 "$HP"
        expect_rc 1 "lease: still busy" b run -u "$URI" -n "$N" -- true
        touch "$TMP/go"
        wait_pid "$HP" 10
        check "lease: the holder exits 0 (got $RC)" [ "$RC" = 0 ]
    fi
    rm -f "$TMP/go" "$TMP/go.held"
done

# issue 25, every mode: --fair (FIFO, the queue table emptied by a waiter's
# SIGTERM), baton sem, --permits
start_holder() { # TAG URI NAME [baton run options...]: holds until $TMP/h.TAG.go exists
    local tag=$1 uri=$2 name=$3; shift 3
    rm -f "$TMP/h.$tag.fence" "$TMP/h.$tag.go"
    "${B[@]}" run -u "$uri" "$@" "$name" -- sh -c \
        'echo "$BATON_FENCE" > "$1.fence.tmp" && mv "$1.fence.tmp" "$1.fence"; while [ ! -e "$1.go" ]; do sleep 0.05; done' \
        sh "$TMP/h.$tag" >"$TMP/h.$tag.out" 2>"$TMP/h.$tag.err" &
    HOLDER_PID=$!
    BG_PIDS+=("$HOLDER_PID")
    wait_file "$TMP/h.$tag.fence" 15
}
queued() { sql "SELECT count(*) FROM baton_locks_fair WHERE name = '$1'"; }
wait_queued() { # NAME N
    local i
    for i in $(seq 100); do [ "$(queued "$1")" = "$2" ] && return 0; sleep 0.1; done
    return 1
}
for mode in session lease row; do
    URI="$BASE?mode=$mode"
    N="${P}fair-$mode"
    start_holder fa "$URI" "$N" --fair; HA=$HOLDER_PID
    rm -f "$TMP/order"
    "${B[@]}" run -u "$URI" --fair -w 30 "$N" -- sh -c 'echo "b $BATON_FENCE" >> "$0"' "$TMP/order" 2>"$TMP/fb.err" &
    PB=$!; BG_PIDS+=("$PB")
    check "$mode: --fair: B is queued" wait_queued "$N" 1
    "${B[@]}" run -u "$URI" --fair -w 30 "$N" -- sh -c 'echo "c $BATON_FENCE" >> "$0"' "$TMP/order" 2>"$TMP/fc.err" &
    PC=$!; BG_PIDS+=("$PC")
    check "$mode: --fair: C is queued" wait_queued "$N" 2
    expect_rc 0 "$mode: --fair: status" b status -u "$URI" "$N"
    check "$mode: --fair: status shows the queue's length" grep -qx "queue: 2" "$TMP/out"
    "${B[@]}" run -u "$URI" --fair -w 30 "$N" -- true 2>"$TMP/fd.err" &
    PD=$!; BG_PIDS+=("$PD")
    check "$mode: --fair: D is queued" wait_queued "$N" 3
    expect_rc 1 "$mode: --fair -n does not jump the queue" b run -u "$URI" --fair -n "$N" -- true
    kill -TERM "$PD"; wait_pid "$PD" 10
    check "$mode: --fair: SIGTERM to waiting D: exit 143 (rc $RC)" [ "$RC" = 143 ]
    check "$mode: --fair: ...and D left the queue" wait_queued "$N" 2
    touch "$TMP/h.fa.go"; wait_pid "$HA" 10
    wait_pid "$PB" 15; wait_pid "$PC" 15
    check "$mode: --fair: B ran before C" [ "$(cut -d' ' -f1 "$TMP/order" | tr -d '\n')" = bc ]
    check "$mode: --fair: fences increase A < B < C" gt "$(sed -n 2p "$TMP/order" | cut -d' ' -f2)" \
        "$(sed -n 1p "$TMP/order" | cut -d' ' -f2)"
    check "$mode: --fair: B's fence above A's" gt "$(sed -n 1p "$TMP/order" | cut -d' ' -f2)" "$(cat "$TMP/h.fa.fence")"
    check "$mode: --fair: the queue is empty" [ "$(queued "$N")" = 0 ]

    N="${P}sem-$mode"
    expect_rc 0 "$mode: sem set 2" b sem -u "$URI" "$N" set 2
    expect_rc 1 "$mode: sem set twice: already set" b sem -u "$URI" "$N" set 5
    out=$(b sem -u "$URI" "$N" available); check "$mode: sem available = 2 ($out)" [ "$out" = 2 ]
    start_holder s1 "$URI" "$N" --permits 2; p1=$HOLDER_PID
    start_holder s2 "$URI" "$N" --permits 2; p2=$HOLDER_PID
    expect_rc 1 "$mode: --permits 2: a third run is busy" b run -n -u "$URI" --permits 2 "$N" -- true
    touch "$TMP/h.s1.go"; wait_pid "$p1" 15
    expect_rc 0 "$mode: --permits 2: a permit comes back" b run -w 5 -u "$URI" --permits 2 "$N" -- true
    touch "$TMP/h.s2.go"; wait_pid "$p2" 15
    # SIGKILLed holders' permits come back when their leases (-t 2) end
    start_holder s3 "$URI" "$N" --permits 2 -t 2; p3=$HOLDER_PID
    start_holder s4 "$URI" "$N" --permits 2 -t 2; p4=$HOLDER_PID
    kill -KILL "$p3" "$p4"; { wait_pid "$p3" 10; wait_pid "$p4" 10; } 2>/dev/null
    expect_rc 1 "$mode: --permits: SIGKILLed holders' permits are still out" b run -n -u "$URI" --permits 2 "$N" -- true
    t0=$(date +%s%N)
    expect_rc 0 "$mode: --permits: a SIGKILLed holder's permit comes back" b run -w 10 -u "$URI" --permits 2 "$N" -- true
    el=$(( ($(date +%s%N) - t0) / 1000000 ))
    check "$mode: --permits: ...after its lease ($el ms)" gt "$el" 1000
    for i in $(seq 50); do [ "$(b sem -u "$URI" "$N" available)" = 2 ] && break; sleep 0.1; done
    out=$(b sem -u "$URI" "$N" drain); check "$mode: sem drain returns 2 ($out)" [ "$out" = 2 ]
    expect_rc 0 "$mode: sem add 3" b sem -u "$URI" "$N" add 3
    expect_rc 0 "$mode: status of a semaphore" b status -u "$URI" "$N"
    check "$mode: status shows the count" grep -q "^permits: " "$TMP/out"
done

# a nested baton (baton run inside baton run) reaches the server without the
# password in its BATON_URI: the child has PGPASSWORD, which libpq reads
expect_rc 0 "nested run" b run -u "$BASE" "${P}outer" -- sh -c \
    'case "$BATON_URI" in *baton-test*) exit 9;; esac; "$0" run -u "$BATON_URI" "$1" -- sh -c "echo \$BATON_FENCE" >"$2"' \
    "$BATON" "${P}inner" "$TMP/nested"
check "nested run: the inner grant has a fence" [ -s "$TMP/nested" ]

expect_rc 69 "wrong password" b run -u "postgres://baton:nope@127.0.0.1:$PORT/postgres" "${P}x" -- true
check "wrong password: says authentication" grep -qi "auth" "$TMP/err"
# a port nothing listens on
CLOSED=$(/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
expect_rc 69 "unreachable" b run -u "postgres://baton:baton-test@127.0.0.1:$CLOSED/postgres" "${P}x" -- true

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
