#!/bin/bash
# `baton run` and `baton status` on MySQL/MariaDB, every mode, on the "mysql"
# fixture server ($BATON_TEST_SRV/mysql/port):
#   - run, fences increasing, -n on a held lock exits 1, status shows the holder;
#   - session and row modes: the holder's connection KILLed by a DBA → the
#     command is stopped and baton run exits 75; lease mode: the same is harmless;
#   - a nested baton inherits the URI's password (MYSQL_PWD);
#   - a wrong password and an unreachable server exit 69.
#
#   cli.sh PATH/TO/baton
set -u

MODE=mysql
BATON=${1:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_mysql.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/../cli/lib.sh"

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/mysql/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test mysql server"
CLIENT=$(command -v mariadb || command -v mysql) || skip_or_fail "the mariadb client is missing"
command -v ss >/dev/null || skip_or_fail "ss (iproute2) is missing"
unset BATON_DIR BATON_URI MYSQL_PWD
TABLE="cli_$$"
BASE="mysql://baton:baton-test@127.0.0.1:$PORT/baton"
P="cli-$$-"
sql() { MYSQL_PWD=baton-test "$CLIENT" --no-defaults -h 127.0.0.1 -P "$PORT" -u baton -N -B baton -e "$1"; }

# The connection id holding row NAME of our table locked: a DBA's probe
# waits on the row, and InnoDB names the transaction it waits for.
row_holder() {
    local name=$1 id
    sql "SET SESSION innodb_lock_wait_timeout = 10; START TRANSACTION;
         SELECT 1 FROM $TABLE WHERE name = '$name' FOR UPDATE" >/dev/null 2>&1 &
    local probe=$!
    for _ in $(seq 1 80); do
        # the wait of this probe only: other suites' row-mode waits share the server
        id=$(sql "SELECT t.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS w
                  JOIN information_schema.INNODB_TRX t ON t.trx_id = w.blocking_trx_id
                  JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
                  WHERE r.trx_query LIKE '%$TABLE WHERE name = ''$name''%' LIMIT 1")
        [ -n "$id" ] && break
        sleep 0.15   # InnoDB refreshes INNODB_LOCK_WAITS only after 100 ms without a read
    done
    kill "$probe" 2>/dev/null; wait "$probe" 2>/dev/null
    echo "$id"
}

for mode in session row lease; do
    URI="$BASE?mode=$mode&table=$TABLE"
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
    # a DBA KILLs the holder's connection (the named lock's owner, or the
    # transaction that locks the row)
    if [ $mode = session ]; then
        ID=$(sql "SELECT IS_USED_LOCK('$N')")
    elif [ $mode = row ]; then
        ID=$(row_holder "$N")
        [ -n "$ID" ] || echo "# row: no probe found the holder's transaction; killing every connection of the holder" >&2
    fi
    if [ -z "$ID" ] && [ $mode != session ]; then
        # every connection of the holder process (other suites share this
        # server): its client ports, as the server lists them
        HOSTS=$(ss -Htnp "dport = :$PORT" 2>/dev/null | grep "pid=$HP," | awk '{print "'\''" $4 "'\''"}' | paste -sd,)
        ID=""
        [ -n "$HOSTS" ] && ID=$(sql "SELECT GROUP_CONCAT(ID) FROM information_schema.PROCESSLIST WHERE HOST IN ($HOSTS)")
    fi
    check "$mode: the holder's connection is found" [ -n "$ID" ]
    for id in ${ID//,/ }; do sql "KILL $id" 2>/dev/null; done
    if [ $mode != lease ]; then
        wait_pid "$HP" 10
        check "$mode: a KILLed holder connection stops the command, exit 75 (got $RC)" [ "$RC" = 75 ]
        expect_rc 0 "$mode: free again" b run -u "$URI" -n "$N" -- true
    else
        sleep 1.5
        check "lease: the holder still runs after its connections were KILLed" kill -0 "$HP"
        expect_rc 1 "lease: still busy" b run -u "$URI" -n "$N" -- true
        touch "$TMP/go"
        wait_pid "$HP" 10
        check "lease: the holder exits 0 (got $RC)" [ "$RC" = 0 ]
    fi
    rm -f "$TMP/go" "$TMP/go.held"
done

# a nested baton (baton run inside baton run) reaches the server without
# the password on its command line: the child has MYSQL_PWD
expect_rc 0 "nested run" b run -u "$BASE?table=$TABLE" "${P}outer" -- sh -c \
    '"$0" run -u "$BATON_URI" "$1" -- sh -c "echo \$BATON_FENCE" >"$2"' "$BATON" "${P}inner" "$TMP/nested"
check "nested: the inner run was granted" gt "$(cat "$TMP/nested" 2>/dev/null)" 0

expect_rc 69 "wrong password" b run -u "mysql://baton:nope@127.0.0.1:$PORT/baton" "${P}x" -- true
check "wrong password: says authentication" grep -qi "auth" "$TMP/err"
# a port nothing listens on
CLOSED=$(/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
expect_rc 69 "unreachable" b run -u "mysql://baton:baton-test@127.0.0.1:$CLOSED/baton" "${P}x" -- true

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
