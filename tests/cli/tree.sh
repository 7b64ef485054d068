#!/bin/bash
# `baton run` owns its command's whole process tree (issue 22):
#  - the lock is held until every process of the command has exited (a
#    background job holds it, as with flock(1)); -o releases when the command
#    itself exits;
#  - a signal to baton, a lost lease and kill -9 of baton reach every process
#    of the tree, a daemon that left the group (setsid) included; SIGKILL
#    follows after --kill-after;
#  - kill -STOP of baton on a lease engine: the shim's watchdog kills the
#    command before any other client is granted;
#  - exit codes: a command that ended on its own keeps its status (a loss
#    found after it is a warning; --lost-exit-code makes it a failure); 75
#    only when baton stopped the command;
#  - --permits renews off the supervise loop: a frozen link cannot keep the
#    command running past the permit's lease;
#  - a password given with -u is not in /proc/PID/cmdline; --uri-file.
#
#   tree.sh file  PATH/TO/baton
#   tree.sh redis PATH/TO/baton     (the test Redis server: $BATON_TEST_SRV/redis/port)
#
# Prints "N passed, N failed"; exits 1 on failure, 77 when Redis is missing
# (unless BATON_REQUIRE_ALL=1).
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
case $BATON in /*) ;; *) BATON=$PWD/$BATON ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_tree_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"
LINK_SH="$HERE/../servers/link.sh"
LINK_DIR=""
cleanup_tree() {
    [ -n "$LINK_DIR" ] && "$LINK_SH" stop "$LINK_DIR" >/dev/null 2>&1
    cleanup
}
trap cleanup_tree EXIT

# A command line that writes a tick (ns since the epoch) to FILE every 20 ms.
ticker() { echo "while :; do date +%s%N >> '$1'; sleep 0.02; done"; }
lines() { [ -e "$1" ] && wc -l <"$1" || echo 0; }
# still FILE: no tick is added to FILE within 0.5 s
still() { local a b; a=$(lines "$1"); sleep 0.5; b=$(lines "$1"); [ "$a" = "$b" ] && [ "$a" -gt 0 ]; }
# no_tick_after FILE NS: FILE's last tick is before NS (looked at 0.3 s later, so
# that a command still running has written some after it)
no_tick_after() { local last; sleep 0.3; last=$(tail -n 1 "$1" 2>/dev/null); [ -n "$last" ] && [ "$last" -lt "$2" ]; }

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
    unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH
    URI="redis://127.0.0.1:$PORT/0"
    U=(-u "$URI")
    D=redis
    ;;
*) echo "usage: $0 file|redis BATON" >&2; exit 2 ;;
esac
P="tree-$$-"

# ---- the lock is held until every process of the command has exited ---------
N="${P}bg"
rm -f "$TMP/bg.started" "$TMP/bg.done"
"${B[@]}" run "${U[@]}" "$N" -- sh -c "touch '$TMP/bg.started'; (sleep 1.5; touch '$TMP/bg.done') & exit 0" \
    >/dev/null 2>"$TMP/bg.err" &
H=$!; BG_PIDS+=("$H")
wait_file "$TMP/bg.started" 15
sleep 0.4   # the command itself has exited; its background job runs on
expect_rc 1 "[$D] the command's background job still holds the lock" b run -n "${U[@]}" "$N" -- true
wait_pid "$H" 15
check "[$D] ...baton exits with the command's status (0)" [ "$RC" = 0 ]
check "[$D] ...and only after the background job ended" [ -e "$TMP/bg.done" ]
expect_rc 0 "[$D] ...then the lock is free" b run -n "${U[@]}" "$N" -- true

# -o (flock's --close): the lock is the command's alone
rm -f "$TMP/o.done"
t0=$(now_ms)
expect_rc 0 "[$D] -o: returns when the command exits" b run -o "${U[@]}" "$N" -- sh -c "(sleep 1.5; touch '$TMP/o.done') & exit 0"
expect_rc 0 "[$D] -o: the lock is free while its background job runs" b run -n "${U[@]}" "$N" -- true
check "[$D] -o: ...which was still running" [ ! -e "$TMP/o.done" ]
sleep 1.5

# ---- a signal to baton reaches the whole tree, a setsid'd daemon too ---------
N="${P}sig"
rm -f "$TMP/s.started" "$TMP/s.g" "$TMP/s.d"
"${B[@]}" run "${U[@]}" "$N" -- sh -c "touch '$TMP/s.started'; ($(ticker "$TMP/s.g")) & setsid sh -c \"$(ticker "$TMP/s.d")\" & wait" \
    >/dev/null 2>"$TMP/s.err" &
H=$!; BG_PIDS+=("$H")
wait_file "$TMP/s.started" 15
sleep 0.3
kill -TERM "$H"
wait_pid "$H" 15
check "[$D] SIGTERM of baton: the command's status, 128+15 (got $RC)" [ "$RC" = 143 ]
check "[$D] ...its background job is dead" still "$TMP/s.g"
check "[$D] ...and so is the daemon that left the session (setsid)" still "$TMP/s.d"

# --kill-after: a tree that ignores SIGTERM gets SIGKILL
rm -f "$TMP/k.started" "$TMP/k.g"
"${B[@]}" run "${U[@]}" --kill-after 0.5 "$N" -- sh -c "trap '' TERM; touch '$TMP/k.started'; (trap '' TERM; $(ticker "$TMP/k.g")) & wait; wait" \
    >/dev/null 2>"$TMP/k.err" &
H=$!; BG_PIDS+=("$H")
wait_file "$TMP/k.started" 15
sleep 0.3
kill -TERM "$H"
wait_pid "$H" 15
check "[$D] SIGTERM ignored: SIGKILL after --kill-after (got $RC)" [ "$RC" = 137 ]
check "[$D] ...its background job is dead" still "$TMP/k.g"

# ---- kill -9 of baton kills the whole tree -----------------------------------
N="${P}k9"
rm -f "$TMP/9.started" "$TMP/9.g" "$TMP/9.d"
"${B[@]}" run "${U[@]}" "$N" -- sh -c "touch '$TMP/9.started'; ($(ticker "$TMP/9.g")) & setsid sh -c \"$(ticker "$TMP/9.d")\" & wait" \
    >/dev/null 2>&1 &
H=$!; BG_PIDS+=("$H")
wait_file "$TMP/9.started" 15
sleep 0.3
kill -KILL "$H"
wait "$H" 2>/dev/null
sleep 0.2
check "[$D] kill -9 of baton: its command's background job dies" still "$TMP/9.g"
check "[$D] ...and the daemon that left the session" still "$TMP/9.d"
if [ "$D" = file ]; then
    expect_rc 0 "[$D] ...and the lock is free at once" b run -n "${U[@]}" "$N" -- true
fi

# ---- baton status --json: one JSON object ----------------------------------------
N="${P}json"
expect_rc 0 "[$D] status --json inside a run" b run "${U[@]}" "$N" -- "$BATON" status "${U[@]}" --json "$N"
check "[$D] ...is JSON with held true and the fence" /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["held"] is True and d["fence"] > 0 and d["name"] == sys.argv[2], d
assert set(d) >= {"backend", "holder", "remaining_ms", "queue", "permits"}, d' "$TMP/out" "$N"
expect_rc 0 "[$D] status --json of a free name with a quote in it" b status "${U[@]}" --json "${N}\"q"
check "[$D] ...is JSON with held false" /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["held"] is False and d["name"].endswith("\"q"), d' "$TMP/out"

# ---- exit codes ----------------------------------------------------------------
expect_rc 3 "[$D] the command's own status" b run "${U[@]}" "${P}x" -- sh -c 'exit 3'

# ---- an engine's long message reaches stderr whole (it was cut at 256 bytes;
# a DDL to hand to a DBA is that long) ---------------------------------------------
if [ "$D" = file ]; then
    # (under 512 bytes in all: the library's own message buffer holds 512)
    C=$(printf 'd%.0s' $(seq 100))
    expect_rc 64 "[$D] a lock path in a missing directory, over 256 bytes long" b run "$TMP/$C/$C/x" -- true
    check "[$D] ...the message is whole" grep -q "its directory must exist)" "$TMP/err"
    expect_rc 64 "[$D] a 300-byte unknown option" b run --$(printf 'o%.0s' $(seq 300)) x -- true
    check "[$D] ...is quoted whole" grep -q "o\{300\}'" "$TMP/err"
fi

if [ "$D" = redis ]; then
    # A loss found after the command ended (here: at release; the command
    # deleted its own lock) keeps the command's status, with a warning.
    N="${P}late"
    expect_rc 3 "[$D] lost after the command ended: its status (3), not 75" \
        b run "${U[@]}" "$N" -- sh -c "redis-cli -p $PORT DEL '$N' >/dev/null; exit 3"
    check "[$D] ...with a warning" grep -q "warning.*lost after the command ended" "$TMP/err"
    expect_rc 9 "[$D] --lost-exit-code 9: a finished run that lost its lock fails" \
        b run "${U[@]}" --lost-exit-code 9 "$N" -- sh -c "redis-cli -p $PORT DEL '$N' >/dev/null; exit 0"
    expect_rc 4 "[$D] --lost-exit-code does not hide a failure of the command" \
        b run "${U[@]}" --lost-exit-code 9 "$N" -- sh -c "redis-cli -p $PORT DEL '$N' >/dev/null; exit 4"

    # Lost while the command runs: 75, and the whole tree is stopped.
    N="${P}lost"
    rm -f "$TMP/l.started" "$TMP/l.g"
    "${B[@]}" run "${U[@]}" -t 1 --kill-after 0.5 "$N" -- sh -c "touch '$TMP/l.started'; ($(ticker "$TMP/l.g")) & wait" \
        >/dev/null 2>"$TMP/l.err" &
    H=$!; BG_PIDS+=("$H")
    wait_file "$TMP/l.started" 15
    redis-cli -p "$PORT" DEL "$N" >/dev/null
    wait_pid "$H" 15
    check "[$D] lease lost while the command ran: 75 (got $RC)" [ "$RC" = 75 ]
    check "[$D] ...its background job is dead" still "$TMP/l.g"

    # kill -STOP of baton: the watchdog kills the command before the lease
    # can run out; no tick after another client's grant.
    N="${P}stop"
    rm -f "$TMP/st.started" "$TMP/st.g" "$TMP/st.grant"
    "${B[@]}" run "${U[@]}" -t 2 "$N" -- sh -c "touch '$TMP/st.started'; ($(ticker "$TMP/st.g")) & wait" \
        >/dev/null 2>"$TMP/st.err" &
    H=$!; BG_PIDS+=("$H")
    wait_file "$TMP/st.started" 15
    sleep 0.5
    kill -STOP "$H"
    expect_rc 0 "[$D] kill -STOP of the holder: another client is granted" \
        b run "${U[@]}" -w 20 "$N" -- sh -c "date +%s%N > '$TMP/st.grant'"
    G=$(cat "$TMP/st.grant" 2>/dev/null || echo 0)
    check "[$D] ...and the stopped holder's command wrote no tick after that grant" no_tick_after "$TMP/st.g" "$G"
    kill -CONT "$H"
    wait_pid "$H" 15
    check "[$D] ...the stopped holder exits 75 once continued (got $RC)" [ "$RC" = 75 ]

    # --permits over a frozen link: the renewal blocks (I/O timeout 5 s), the
    # command is stopped at the permit's lease all the same.
    if command -v socat >/dev/null; then
        LINK_DIR="$TMP/link"
        LPORT=$("$LINK_SH" start "$LINK_DIR" "$PORT")
        N="${P}pm"
        rm -f "$TMP/p.started" "$TMP/p.g" "$TMP/p.grant"
        "${B[@]}" run -u "redis://127.0.0.1:$LPORT/0" --permits 1 -t 1 --kill-after 0.2 "$N" -- \
            sh -c "touch '$TMP/p.started'; ($(ticker "$TMP/p.g")) & wait" >/dev/null 2>"$TMP/p.err" &
        H=$!; BG_PIDS+=("$H")
        wait_file "$TMP/p.started" 15
        sleep 0.3
        "$LINK_SH" freeze "$LINK_DIR"
        expect_rc 0 "[$D] --permits, frozen link: another client gets the permit" \
            b run "${U[@]}" --permits 1 -w 20 "$N" -- sh -c "date +%s%N > '$TMP/p.grant'"
        G=$(cat "$TMP/p.grant" 2>/dev/null || echo 0)
        check "[$D] ...and the frozen holder's command wrote no tick after that grant" no_tick_after "$TMP/p.g" "$G"
        wait_pid "$H" 20
        check "[$D] ...the frozen holder exits 75 (got $RC)" [ "$RC" = 75 ]
        "$LINK_SH" stop "$LINK_DIR" >/dev/null 2>&1
        LINK_DIR=""
    else
        skip_msg="socat missing: --permits frozen-link case not run"
        if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then bad "$skip_msg"; else echo "SKIP: $skip_msg" >&2; fi
    fi

    # The password given with -u is not in /proc/PID/cmdline (baton's, nor
    # its shim's); --uri-file keeps it out of argv altogether.
    PW="tree-pw-$$"
    PW_SRV="$TMP/redis-pw"
    if pwport=$("$REDIS_SH" start "$PW_SRV" --requirepass "$PW" 2>"$TMP/pw.err"); then
        N="${P}pw"
        rm -f "$TMP/pw.started"
        "${B[@]}" run -u "redis://:$PW@127.0.0.1:$pwport/0" "$N" -- sh -c "touch '$TMP/pw.started'; sleep 3" \
            >/dev/null 2>"$TMP/pw.err" &
        H=$!; BG_PIDS+=("$H")
        wait_file "$TMP/pw.started" 15
        check "[$D] baton's /proc/PID/cmdline has no password" not grep -qa "$PW" "/proc/$H/cmdline"
        check "[$D] ...it shows the URI with the password masked" grep -qa "redis://:xxxx" "/proc/$H/cmdline"
        shims=$(pgrep -P "$H" | tr '\n' ' ')
        check "[$D] ...nor has the shim's ($shims)" not grep -qa "$PW" $(for s in $shims; do echo "/proc/$s/cmdline"; done) /dev/null
        kill -TERM "$H"; wait_pid "$H" 10
        printf 'redis://:%s@127.0.0.1:%s/0\n' "$PW" "$pwport" >"$TMP/uri"
        chmod 600 "$TMP/uri"
        expect_rc 0 "[$D] --uri-file FILE" b run --uri-file "$TMP/uri" "$N" -- true
        expect_rc 64 "[$D] --uri-file of a missing file" b run --uri-file "$TMP/nope" "$N" -- true
        "$REDIS_SH" stop "$PW_SRV" >/dev/null 2>&1
        PW_SRV=""
    else
        bad "[$D] could not start a password-protected redis: $(cat "$TMP/pw.err")"
    fi
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
