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
