#!/bin/bash
# Script sections: eval "$(baton hold NAME)" ... baton release NAME (issue 22).
#  - hold exports BATON_LOCK / BATON_FENCE / BATON_HOLD_PID; the lock is held
#    between hold and release, and free after;
#  - a busy -n hold prints "(exit 1)": eval fails, nothing is held;
#  - the shell exiting, or killed with kill -9, frees the lock at once;
#  - (redis) a lost lock sends SIGTERM to the shell's process group.
#
#   hold.sh file  PATH/TO/baton
#   hold.sh redis PATH/TO/baton     (the test Redis server: $BATON_TEST_SRV/redis/port)
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
case $BATON in /*) ;; *) BATON=$PWD/$BATON ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_hold_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

case "$MODE" in
file)
    export BATON_DIR="$TMP/locks"
    unset BATON_URI
    U=()
    D=file
    ;;
redis)
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis server"
    command -v redis-cli >/dev/null || skip_or_fail "redis-cli missing"
    unset BATON_DIR BATON_REDIS_PASSWORD REDISCLI_AUTH
    export BATON_URI="redis://127.0.0.1:$PORT/0"
    U=(-u "$BATON_URI")
    D=redis
    ;;
*) echo "usage: $0 file|redis BATON" >&2; exit 2 ;;
esac
unset BATON_HOLDS BATON_HOLD_PID
export BATON
P="hold-$$-"
# A script under `bash -c`, bounded: SCRIPT ARGS...
script() { timeout -k 2 30 env --default-signal=INT,TERM,HUP bash -c "$@"; }

# ---- hold / release ------------------------------------------------------------
N="${P}a"
script '
    eval "$("$BATON" hold "$1")" || exit 9
    echo "fence=$BATON_FENCE"
    echo "lock=$BATON_LOCK"
    "$BATON" run -n "$1" -- true; echo "inside=$?"
    "$BATON" release "$1"; echo "release=$?"
    "$BATON" run -n "$1" -- true; echo "after=$?"
' sh "$N" >"$TMP/a.out" 2>"$TMP/a.err"
rc=$?
check "[$D] hold ... release: the script ran (rc $rc)" [ "$rc" = 0 ]
check "[$D] ...BATON_FENCE is exported" grep -qE "^fence=[0-9]+$" "$TMP/a.out"
check "[$D] ...BATON_LOCK is the name" grep -qx "lock=$N" "$TMP/a.out"
check "[$D] ...the lock is held in the section" grep -qx "inside=1" "$TMP/a.out"
check "[$D] ...release answers 0" grep -qx "release=0" "$TMP/a.out"
check "[$D] ...and the lock is free after release" grep -qx "after=0" "$TMP/a.out"

# ---- busy: eval fails, nothing held ----------------------------------------------
rm -f "$TMP/b.go" "$TMP/b.ready"
"${B[@]}" run "${U[@]}" "$N" -- sh -c ': > "$1.ready"; while [ ! -e "$1.go" ]; do sleep 0.05; done' sh "$TMP/b" &
H=$!; BG_PIDS+=("$H")
wait_file "$TMP/b.ready" 15
script 'eval "$("$BATON" hold -n "$1")" && echo held || echo "busy=$?"' sh "$N" >"$TMP/b.out" 2>&1
check "[$D] hold -n on a busy lock: eval fails with 1" grep -qx "busy=1" "$TMP/b.out"
script 'eval "$("$BATON" hold -w 0.3 -E 7 "$1")" && echo held || echo "busy=$?"' sh "$N" >"$TMP/b.out" 2>&1
check "[$D] hold -w 0.3 -E 7: eval fails with 7" grep -qx "busy=7" "$TMP/b.out"
touch "$TMP/b.go"
wait_pid "$H" 15

# ---- the shell exits: the lock is freed ------------------------------------------
N="${P}exit"
script 'eval "$("$BATON" hold "$1")" || exit 9; exit 0' sh "$N"
sleep 0.2
expect_rc 0 "[$D] the holding shell exited: the lock is free" b run -w 2 "${U[@]}" "$N" -- true

# ---- kill -9 of the holding shell frees the lock at once -------------------------
N="${P}k9"
rm -f "$TMP/k.held"
env --default-signal=INT,TERM,HUP bash -c 'eval "$("$BATON" hold "$1")" || exit 9; : > "$2"; exec sleep 30' sh "$N" "$TMP/k.held" &
SH=$!; BG_PIDS+=("$SH")
wait_file "$TMP/k.held" 15
expect_rc 1 "[$D] held while the shell lives" b run -n "${U[@]}" "$N" -- true
kill -KILL "$SH"
wait "$SH" 2>/dev/null
t0=$(now_ms)
expect_rc 0 "[$D] kill -9 of the holding shell: another run gets the lock" b run -w 5 "${U[@]}" "$N" -- true
el=$(( $(now_ms) - t0 ))
# "at once": not after a lease (30 s) or a session; generous for a loaded machine
check "[$D] ...at once ($el ms)" [ "$el" -lt 2000 ]

# ---- (redis) a lost lock signals the shell's process group -----------------------
if [ "$D" = redis ]; then
    N="${P}lost"
    rm -f "$TMP/l.held" "$TMP/l.after"
    # setsid: the script leads a process group of its own, as a script run
    # from an interactive shell does
    setsid env --default-signal=INT,TERM,HUP bash -c 'eval "$("$BATON" hold -t 1 "$1")" || exit 9; : > "$2"; sleep 10; : > "$3"' \
        sh "$N" "$TMP/l.held" "$TMP/l.after" 2>"$TMP/l.err" &
    SH=$!; BG_PIDS+=("$SH")
    wait_file "$TMP/l.held" 15
    redis-cli -p "$PORT" DEL "$N" >/dev/null
    wait_pid "$SH" 10
    check "[$D] lock lost: the script got SIGTERM (rc $RC)" [ "$RC" = 143 ]
    check "[$D] ...and did not run on" [ ! -e "$TMP/l.after" ]
    check "[$D] ...the holder said why" grep -q "lock was lost" "$TMP/l.err"
fi

# ---- baton extend: a new lease for a held lock (issue 25) ---------------------------
N="${P}ext"
script '
    eval "$("$BATON" hold --fixed -t 1 "$1")" || exit 9
    "$BATON" extend -t 10 "$1"; echo "extend=$?"
    sleep 1.5
    "$BATON" run -n "$1" -- true; echo "inside=$?"
    "$BATON" extend "$1"; echo "extend_default=$?"
    "$BATON" release "$1"; echo "release=$?"
    "$BATON" extend "$1"; echo "extend_free=$?"
' sh "$N" >"$TMP/e.out" 2>"$TMP/e.err"
check "[$D] extend: answers 0" grep -qx "extend=0" "$TMP/e.out"
check "[$D] ...the lock is still held past its first (fixed) lease" grep -qx "inside=1" "$TMP/e.out"
check "[$D] ...extend without -t (hold's own lease) answers 0" grep -qx "extend_default=0" "$TMP/e.out"
check "[$D] ...release after extend answers 0" grep -qx "release=0" "$TMP/e.out"
check "[$D] ...extend with nothing held answers 1" grep -qx "extend_free=1" "$TMP/e.out"
expect_rc 64 "[$D] extend without NAME" b extend
expect_rc 64 "[$D] extend -t 0" b extend -t 0 "$N"
if [ "$D" = redis ]; then
    # the fixed lease, not renewed: without extend the lock expires and the
    # script is stopped; a later holder has it
    N="${P}fixed"
    rm -f "$TMP/f.held" "$TMP/f.after"
    setsid env --default-signal=INT,TERM,HUP bash -c 'eval "$("$BATON" hold --fixed -t 1 "$1")" || exit 9; : > "$2"; sleep 10; : > "$3"' \
        sh "$N" "$TMP/f.held" "$TMP/f.after" 2>"$TMP/f.err" &
    SH=$!; BG_PIDS+=("$SH")
    wait_file "$TMP/f.held" 15
    pttl=$(redis-cli -p "$PORT" PTTL "$N")
    check "[$D] hold --fixed -t 1: the key's TTL is the fixed lease ($pttl ms)" [ "$pttl" -gt 0 ] && [ "$pttl" -le 1000 ]
    wait_pid "$SH" 10
    check "[$D] ...not renewed: it expired and the script got SIGTERM (rc $RC)" [ "$RC" = 143 ]
    check "[$D] ...and did not run on" [ ! -e "$TMP/f.after" ]
    # PTTL after an extend: the new lease
    N="${P}pttl"
    script '
        eval "$("$BATON" hold --fixed -t 1 "$1")" || exit 9
        "$BATON" extend -t 20 "$1"; echo "extend=$?"
        echo "pttl=$(redis-cli -p "$2" PTTL "$1")"
        "$BATON" extend -t 0.5 "$1"; echo "shorter=$?"
        echo "pttl2=$(redis-cli -p "$2" PTTL "$1")"
        "$BATON" release "$1"
    ' sh "$N" "$PORT" >"$TMP/p.out" 2>"$TMP/p.err"
    pttl=$(sed -n 's/^pttl=//p' "$TMP/p.out"); pttl2=$(sed -n 's/^pttl2=//p' "$TMP/p.out")
    check "[$D] extend -t 20 sets the key's TTL to 20 s ($pttl ms)" [ "${pttl:-0}" -gt 10000 ] && [ "${pttl:-0}" -le 20000 ]
    check "[$D] extend -t 0.5 shortens it ($pttl2 ms)" [ "${pttl2:-0}" -gt 0 ] && [ "${pttl2:-0}" -le 500 ]
    # another client took the lock (the key was deleted and set): extend
    # answers 75, the lock was lost
    N="${P}stolen"
    setsid env --default-signal=INT,HUP bash -c 'trap "" TERM
        eval "$("$BATON" hold --fixed -t 30 "$1")" || exit 9
        redis-cli -p "$2" SET "$1" someone-else >/dev/null
        "$BATON" extend -t 30 "$1"; echo "extend=$?"' sh "$N" "$PORT" >"$TMP/s.out" 2>"$TMP/s.err"
    check "[$D] extend of a lock someone else holds now: 75" grep -qx "extend=75" "$TMP/s.out"
    check "[$D] ...the value is the other holder's still" [ "$(redis-cli -p "$PORT" GET "$N")" = someone-else ]
    redis-cli -p "$PORT" DEL "$N" >/dev/null
fi

# ---- usage -------------------------------------------------------------------------
script 'eval "$("$BATON" hold)" || echo "rc=$?"' sh >"$TMP/u.out" 2>&1
check "[$D] hold without NAME: eval fails with 64" grep -qx "rc=64" "$TMP/u.out"
expect_rc 1 "[$D] release with nothing held" env -u BATON_HOLDS -u BATON_HOLD_PID "$BATON" release "${P}none"
expect_rc 0 "[$D] hold --help" b hold --help

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
