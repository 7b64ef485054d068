#!/bin/bash
# `baton run --fair`, `-s` and `-x` on the engines without a server (issue 25):
# waiters run in arrival order; a SIGKILLed holder or waiter does not stall
# the line (the next in line runs, with a larger BATON_FENCE, and never two at
# once); readers share, a writer excludes them, a waiting writer holds new
# readers back.
#
#   fairrw.sh file   PATH/TO/baton     the file engine (BATON_DIR=<tmp>)
#   fairrw.sh sqlite PATH/TO/baton     SQLite (a database file in <tmp>)
#
# Prints "N passed, N failed"; exits 1 on failure.
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/cli_fairrw_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"

case "$MODE" in
file)
    export BATON_DIR="$TMP/locks"
    unset BATON_URI
    U=()
    ;;
sqlite)
    unset BATON_DIR BATON_URI
    U=(-u "sqlite://$TMP/locks.db")
    ;;
*) echo "usage: $0 file|sqlite BATON" >&2; exit 2 ;;
esac
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
N="fairrw-$$"
# a lease of 1 s: a SIGKILLed holder's lease (sqlite) ends soon; the file
# engine has none (the kernel frees a dead holder's lock at once)
T=(-t 1)

# A `baton run` whose command records "TAG start FENCE" in $TMP/log, waits
# until $TMP/TAG.go exists, then records "TAG end". Sets PID.
runner() { # TAG [baton run options...] (NAME is added)
    local tag=$1; shift
    rm -f "$TMP/$tag.go"
    "${B[@]}" run "${U[@]}" "${T[@]}" "$@" "$N" -- sh -c \
        'echo "$1 start $BATON_FENCE" >> "$2/log"; while [ ! -e "$2/$1.go" ]; do sleep 0.05; done; echo "$1 end" >> "$2/log"' \
        sh "$tag" "$TMP" >"$TMP/$tag.out" 2>"$TMP/$tag.err" &
    PID=$!
    BG_PIDS+=("$PID")
}
started() { grep -q "^$1 start" "$TMP/log" 2>/dev/null; }
wait_started() { # TAG [TIMEOUT_S]
    local i
    for ((i = 0; i < ${2:-15} * 20; i++)); do started "$1" && return 0; sleep 0.05; done
    return 1
}
fence_of() { sed -n "s/^$1 start //p" "$TMP/log"; }
# At most one command ran at a time: every start follows the previous end.
one_at_a_time() {
    awk '$2 == "start" { if (open) bad = 1; open = 1 } $2 == "end" { open = 0 } END { exit bad }' "$TMP/log"
}
# The runner of TAG is queued: give it time to join the line.
queued() { sleep 0.4; }

# ---- --fair: arrival order; a killed holder and a killed waiter ---------------
: > "$TMP/log"
runner A --fair; PA=$PID
check "--fair: A runs" wait_started A
runner B --fair -w 60; PB=$PID; queued
runner X --fair -w 60; PX=$PID; queued
runner C --fair -w 60; PC=$PID; queued
runner D --fair -w 60; PD=$PID; queued
check "--fair: B, X, C, D wait while A holds" not started B
kill -KILL "$PX"; wait "$PX" 2>/dev/null            # a waiter dies in the line
kill -KILL "$PA"; wait "$PA" 2>/dev/null            # the holder dies
check "--fair: B runs after A was SIGKILLed" wait_started B 15
FA=$(fence_of A) FB=$(fence_of B)
check "--fair: B's fence ($FB) > A's ($FA)" gt "$FB" "$FA"
sleep 0.3
check "--fair: C waits while B holds" not started C
touch "$TMP/B.go"
check "--fair: C next (the killed waiter X skipped)" wait_started C 15
check "--fair: D still waits" not started D
touch "$TMP/C.go"
check "--fair: then D" wait_started D 15
touch "$TMP/D.go"
for p in "$PB" "$PC" "$PD"; do wait_pid "$p" 15; done
check "--fair: the order was A B C D ($(awk '$2 == "start" { printf "%s ", $1 }' "$TMP/log"))" \
    [ "$(awk '$2 == "start" { printf "%s", $1 }' "$TMP/log")" = ABCD ]
check "--fair: X never ran" not started X
FC=$(fence_of C) FD=$(fence_of D)
check "--fair: fences increase ($FA $FB $FC $FD)" eval 'gt "$FC" "$FB" && gt "$FD" "$FC"'
# the killed A's kill -9 came first, so A has no end: close it for the check
sed -i 's/^A start .*/&\nA end/' "$TMP/log"
check "--fair: one holder at a time" one_at_a_time
expect_rc 0 "--fair -n on a free lock" b run "${U[@]}" --fair -n "$N" -- true

# ---- -s / -x ----------------------------------------------------------------------
: > "$TMP/log"
runner R1 -s; P1=$PID
runner R2 -s; P2=$PID
check "-s: two readers at once" eval 'wait_started R1 && wait_started R2'
expect_rc 1 "-x -n while they read: busy" b run "${U[@]}" -x -n "$N" -- true
runner W -x -w 60; PW=$PID; queued
check "-x: the writer waits for the readers" not started W
expect_rc 1 "-s -n while a writer waits: held back" b run "${U[@]}" -s -n "$N" -- true
kill -KILL "$P1"; wait "$P1" 2>/dev/null       # a reader dies
touch "$TMP/R2.go"; wait_pid "$P2" 15
check "-x: the writer runs when the readers are gone" wait_started W 15
expect_rc 1 "-s -n while it writes: busy" b run "${U[@]}" -s -n "$N" -- true
runner R3 -s -w 60; P3=$PID; queued
check "-s: a reader waits for the writer" not started R3
touch "$TMP/W.go"; wait_pid "$PW" 15
check "-s: then it reads" wait_started R3 15
touch "$TMP/R3.go"; wait_pid "$P3" 15
FW=$(fence_of W) F3=$(fence_of R3)
check "-s/-x: fences increase ($FW $F3)" gt "$F3" "$FW"
expect_rc 0 "-x -n on a free lock" b run "${U[@]}" -x -n "$N" -- true

# ---- sqlite: unlock --force of a write-locked name and of a fair lock with a waiter ----
if [ "$MODE" = sqlite ]; then
    : > "$TMP/log"
    T=(-t 2)
    runner W2 -x; PW=$PID
    check "--force: the writer runs" wait_started W2
    expect_rc 0 "list: a write-locked name" "$BATON" list "${U[@]}" "$N"
    check "...lists it" grep -qxF "$N" "$TMP/out"
    expect_rc 0 "status: a write-locked name" "$BATON" status "${U[@]}" "$N"
    check "...held, by this host's process" grep -q "$(hostname)" "$TMP/out"
    runner R4 -s -w 60; P4=$PID; queued
    expect_rc 0 "unlock --force a write-locked name" "$BATON" unlock "${U[@]}" --force "$N"
    FF=$(sed -n 's/^fence: \([0-9][0-9]*\)$/\1/p' "$TMP/out")
    wait_pid "$PW" 15
    check "--force: the writer exits 75 (exit $RC)" [ "$RC" = 75 ]
    check "--force: the waiting reader runs" wait_started R4 15
    F4=$(fence_of R4)
    check "--force: its fence is above the printed one ($F4 > $FF)" gt "$F4" "$FF"
    touch "$TMP/R4.go"; wait_pid "$P4" 15
    expect_rc 1 "unlock --force when nobody holds it" "$BATON" unlock "${U[@]}" --force "$N"

    # a plain lock and the read-write lock of one name are apart on SQLite:
    # a reader's grant must not touch the plain holder's row (its release
    # is owner- and fence-checked)
    : > "$TMP/log"
    runner P1; PP=$PID
    check "plain holder runs" wait_started P1
    expect_rc 0 "-s on the name of a held plain lock" "$BATON" run "${U[@]}" -s -n "$N" -- true
    touch "$TMP/P1.go"; wait_pid "$PP" 15
    check "...the plain holder still released it cleanly (exit $RC)" [ "$RC" = 0 ]
    check "...and was not told it lost the lock" not grep -q "lost" "$TMP/P1.err"

    : > "$TMP/log"
    runner F1 --fair; PF1=$PID
    check "--force: the fair holder runs" wait_started F1
    runner F2 --fair -w 60; PF2=$PID; queued
    expect_rc 0 "unlock --force a fair lock with a waiter in line" "$BATON" unlock "${U[@]}" --force "$N"
    FF=$(sed -n 's/^fence: \([0-9][0-9]*\)$/\1/p' "$TMP/out")
    wait_pid "$PF1" 15
    check "--force: the fair holder exits 75 (exit $RC)" [ "$RC" = 75 ]
    check "--force: the waiter in line runs" wait_started F2 15
    F2=$(fence_of F2)
    check "--force: its fence is above the printed one ($F2 > $FF)" gt "$F2" "$FF"
    touch "$TMP/F2.go"; wait_pid "$PF2" 15
fi

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
