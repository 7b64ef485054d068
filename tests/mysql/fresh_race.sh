#!/bin/bash
# First use of a fresh MariaDB database by several processes at once, in
# every mode (session, lease, row): RUNS times per mode, 8 `baton run` start
# together on a new database (the lock table's, and row mode's sequence's,
# creation race); every one must be granted and exit 0. On the "mysql"
# fixture server ($BATON_TEST_SRV/mysql/port).
#
#   fresh_race.sh PATH/TO/baton [RUNS]
set -u
BATON=${1:?path to baton}
RUNS=${2:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli/lib.sh"
PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/mysql/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test mysql server"
CLIENT=$(command -v mariadb || command -v mysql) || skip_or_fail "the mariadb client is missing"
TMP=${BATON_TEST_TMP:-${TMPDIR:-/tmp}}/mysql_fresh_race.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
unset BATON_DIR BATON_URI
export MYSQL_PWD=baton-test
sql() { "$CLIENT" --no-defaults -h 127.0.0.1 -P "$PORT" -u baton -N -B -e "$1"; }
bad=0
for mode in session lease row; do
    for r in $(seq 1 "$RUNS"); do
        db="fresh_$$_${mode}_$r"
        sql "DROP DATABASE IF EXISTS $db; CREATE DATABASE $db" || { echo "cannot create $db"; exit 1; }
        pids=()
        for i in $(seq 1 8); do
            "$BATON" run -u "mysql://baton@127.0.0.1:$PORT/$db?mode=$mode" -w 30 race -- true >"$TMP/out.$i" 2>&1 &
            pids+=($!)
        done
        for i in $(seq 1 8); do
            if ! wait "${pids[$((i - 1))]}"; then
                bad=$((bad + 1))
                echo "$mode run $r worker $i failed: $(cat "$TMP/out.$i")"
            fi
        done
        sql "DROP DATABASE $db"
    done
done
echo "fresh-database race: $bad of $((RUNS * 8 * 3)) workers failed"
[ "$bad" = 0 ]
