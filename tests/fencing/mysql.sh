#!/bin/bash
# The MySQL/MariaDB recipes of docs/fencing.md, run as written (server-side
# prepared statements in the mariadb client) on the suite's MariaDB with
# fences from two mysql:// grants (BATON_FENCING_MY_SRV: the "mysql"
# fixture's dir), or, in a build without the engine, on a throwaway mariadbd
# of the test's own (a temp datadir, a free loopback port, stopped at exit)
# with fences from two file:// grants: the newer holder's UPDATE changes 1 row,
# the older holder's late one 0; the upsert likewise; the same holder writing
# the same values again gets 0 rows affected (the CLIENT_FOUND_ROWS caveat the
# doc warns about). Controls without the fence condition let the stale write in.
#
#   mysql.sh PATH/TO/baton
set -u

MODE=mysql
BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/fencing_mysql.$$
mkdir -p "$TMP"
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

unset BATON_DIR BATON_URI BATON_FENCE
cd "$TMP" || exit 1
URI="file://$TMP/locks"
if [ -n "${BATON_FENCING_MY_SRV:-}" ] && [ -f "$BATON_FENCING_MY_SRV/port" ]; then
    # The suite's MariaDB (the "mysql" fixture): the fences come from real
    # mysql:// grants on it, the user's table lives in a database of its own.
    PORT=$(cat "$BATON_FENCING_MY_SRV/port")
    my() { MYSQL_PWD=baton-test mariadb --no-defaults -h127.0.0.1 -P"$PORT" -ubaton -N -B "$@"; }
    URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton"
    my -e 'DROP DATABASE IF EXISTS fencing'
else
    for c in mariadbd mariadb-install-db mariadb; do
        command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || skip_or_fail "$c is missing"
    done
    MARIADBD=$(command -v mariadbd || echo /usr/sbin/mariadbd)
    D=$TMP/db
    ME=$(id -un)
    mariadb-install-db --no-defaults --datadir="$D" --user="$ME" --auth-root-authentication-method=normal \
        --skip-test-db >install.log 2>&1 || { cat install.log >&2; skip_or_fail "mariadb-install-db failed"; }
    PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    "$MARIADBD" --no-defaults --datadir="$D" --socket="$D/sock" --port="$PORT" --bind-address=127.0.0.1 \
        --user="$ME" --pid-file="$D/pid" --log-error="$D/err.log" --skip-log-bin --innodb-buffer-pool-size=16M \
        --skip-name-resolve >/dev/null 2>&1 &
    SP=$!
    BG_PIDS+=("$SP")
    trap 'kill -TERM "$SP" 2>/dev/null; wait "$SP" 2>/dev/null; cleanup' EXIT
    my() { mariadb --no-defaults -S "$D/sock" -uroot -N -B "$@"; }
    up=0
    for ((i = 0; i < 1200; i++)); do   # 60 s: only a bound for a loaded box
        my -e 'SELECT 1' >/dev/null 2>&1 && { up=1; break; }
        kill -0 "$SP" 2>/dev/null || break
        sleep 0.05
    done
    [ $up = 1 ] || { tail -5 "$D/err.log" >&2; skip_or_fail "mariadbd did not start"; }
fi
my -e 'CREATE DATABASE fencing'
db() { my fencing -e "$1"; }

recipe pg-table > table.sql || exit 1
for r in mysql-update mysql-upsert; do recipe "$r" > "$r.sql" || exit 1; done
sed 's/ AND fence <= ?/ AND ? IS NOT NULL/' mysql-update.sql > mysql-update-nofence.sql
sed 's/IF(fence <= VALUES(fence), VALUES(balance), balance)/VALUES(balance)/' mysql-upsert.sql > mysql-upsert-nofence.sql
check "controls differ from the recipes" not cmp -s mysql-update.sql mysql-update-nofence.sql
check "  (upsert)" not cmp -s mysql-upsert.sql mysql-upsert-nofence.sql
check "docs: the table (the PostgreSQL DDL works as is)" db "$(cat table.sql)"
db "INSERT INTO accounts (id, balance) VALUES (1, 0)"

# update RECIPE ID BALANCE FENCE / upsert RECIPE ID BALANCE FENCE: ROW_COUNT()
q() { printf "%s" "$(cat "$1.sql")" | sed "s/'/''/g"; }
update() {
    db "PREPARE w FROM '$(q "$1")'; SET @id = $2, @balance = $3, @fence = $4;
        EXECUTE w USING @balance, @fence, @id, @fence; SELECT ROW_COUNT();"
}
upsert() {
    db "PREPARE w FROM '$(q "$1")'; SET @id = $2, @balance = $3, @fence = $4;
        EXECUTE w USING @id, @balance, @fence; SELECT ROW_COUNT();"
}
row() { db "SELECT balance, fence FROM accounts WHERE id = $1" | tr '\t' '|'; }

FA=$(b run -u "$URI" job -- sh -c 'echo "$BATON_FENCE"')
FB=$(b run -u "$URI" job -- sh -c 'echo "$BATON_FENCE"')
check "two grants, increasing fences" gt "$FB" "$FA"
check "B writes: 1 row" [ "$(update mysql-update 1 222 "$FB")" = 1 ]
check "A's late write: 0 rows" [ "$(update mysql-update 1 111 "$FA")" = 0 ]
check "B's data stands" [ "$(row 1)" = "222|$FB" ]
check "B again, other values: 1 row" [ "$(update mysql-update 1 223 "$FB")" = 1 ]
check "B again, the same values: 0 rows (changed, not matched: the doc's caveat)" \
    [ "$(update mysql-update 1 223 "$FB")" = 0 ]
check "control: without the condition A's write lands" [ "$(update mysql-update-nofence 1 111 "$FA")" = 1 ]

check "upsert: inserts (1)" [ "$(upsert mysql-upsert 2 10 "$FA")" = 1 ]
check "upsert: a newer fence updates (2)" [ "$(upsert mysql-upsert 2 20 "$FB")" = 2 ]
check "upsert: a stale fence changes nothing (0)" [ "$(upsert mysql-upsert 2 5 "$FA")" = 0 ]
check "upsert: the newest data stands" [ "$(row 2)" = "20|$FB" ]
check "upsert: the same fence, new values (2)" [ "$(upsert mysql-upsert 2 21 "$FB")" = 2 ]
check "upsert control: without the IF the stale write lands" [ "$(upsert mysql-upsert-nofence 2 5 "$FA")" = 2 ]
check "  (the fence stays, the data is clobbered)" [ "$(row 2)" = "5|$FB" ]

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
