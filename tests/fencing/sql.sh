#!/bin/bash
# The SQL recipes of docs/fencing.md, run as written:
#   - PostgreSQL (the "postgres" fixture) with fences from postgres:// grants
#     in lease mode: holder A is frozen until its 1 s lease runs out, B takes
#     the lock and writes with its larger fence, then A's late write (its
#     command still runs) changes 0 rows and the row holds B's data; baton then
#     tells A it lost the lock (exit 75). The upsert and the psql transaction
#     likewise. Each recipe with its fence condition cut out lets the stale
#     write land: the test would catch a recipe without it.
#   - SQLite (sqlite3 CLI, when installed) with fences from file:// grants.
#
#   sql.sh PATH/TO/baton
set -u

MODE=postgres
BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/fencing_sql.$$
mkdir -p "$TMP"
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/postgres/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test postgres server"
command -v psql >/dev/null || skip_or_fail "psql is missing"
unset BATON_DIR BATON_URI BATON_FENCE PGPASSWORD PGHOST PGUSER PGOPTIONS
cd "$TMP" || exit 1
SCHEMA="fencing_$$"
export PGPASSWORD=baton-test
psql_() { psql -X -h 127.0.0.1 -p "$PORT" -U baton -d postgres -v ON_ERROR_STOP=1 "$@"; }
sql() { PGOPTIONS="-c search_path=$SCHEMA" psql_ -Atqc "$1"; }
psql_ -Atqc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE; CREATE SCHEMA $SCHEMA" || { bad "create schema"; exit 1; }
trap 'psql_ -Atqc "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1; cleanup' EXIT

# pgwrite RECIPE ID BALANCE FENCE: runs the recipe as a prepared statement
# ($1 id, $2 balance, $3 fence) and prints the rows it affected.
for r in pg-update pg-upsert; do recipe "$r" > "$r.sql" || exit 1; done
# the same without the fence condition: what the test must catch
sed 's/ AND fence <= \$3//' pg-update.sql > pg-update-nofence.sql
grep -v 'WHERE accounts.fence <= EXCLUDED.fence' pg-upsert.sql > pg-upsert-nofence.sql
cat > pgwrite <<EOS
#!/bin/bash
# the psql command tag's last number: UPDATE n, INSERT 0 n
PGOPTIONS="-c search_path=$SCHEMA" PGPASSWORD=baton-test psql -X -h 127.0.0.1 -p $PORT -U baton -d postgres \
    -v ON_ERROR_STOP=1 -At -c "PREPARE w(bigint, bigint, bigint) AS \$(cat "$TMP/\$1.sql")" \
    -c "EXECUTE w(\$2, \$3, \$4)" | tail -n 1 | awk '{ print \$NF }'
EOS
chmod +x pgwrite

recipe pg-table > table.sql || exit 1
check "docs: the table" sql "$(cat table.sql)"
sql "INSERT INTO accounts (id, balance) VALUES (1, 0)"

# ---- a holder paused past its lease -------------------------------------------
URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres?mode=lease"
N="fencing-sql-$$"
rm -f fa a.rows go done
stale_writer "$URI" "$N" '
    while [ ! -e go ]; do sleep 0.05; done
    ./pgwrite pg-update 1 111 "$BATON_FENCE" > a.rows.tmp && mv a.rows.tmp a.rows
    while [ ! -e done ]; do sleep 0.05; done'
check "A holds the lock" wait_file fa 20
HP=$(cat hold.pid)
stop_holder "$HP"                # A's holder stops renewing; A's shell runs on
# B waits for A's lease (1 s) to run out; 60 s is only a bound for a loaded box
expect_rc 0 "B gets the lock after A's lease and writes" b run -u "$URI" -w 60 "$N" -- \
    sh -c 'echo "$BATON_FENCE" > fb; ./pgwrite pg-update 1 222 "$BATON_FENCE" > b.rows'
FA=$(cat fa) FB=$(cat fb)
check "B's fence ($FB) is larger than A's ($FA)" gt "$FB" "$FA"
check "B's update changed 1 row" [ "$(cat b.rows)" = 1 ]
touch go                         # A, still believing it holds the lock, writes
check "A's late write is done" wait_file a.rows 20
check "A's late update changed 0 rows: fenced off" [ "$(cat a.rows)" = 0 ]
check "the row holds B's data and fence" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "222|$FB" ]
cont_holder "$HP"
wait_pid "$AP" 30
check "A's holder then finds its lease lost and terminates A's shell (got $RC)" [ "$RC" = 143 ]
touch done

check "B again with its fence (the same holder): 1 row" [ "$(./pgwrite pg-update 1 223 "$FB")" = 1 ]
check "control: without the fence condition A's write lands" [ "$(./pgwrite pg-update-nofence 1 111 "$FA")" = 1 ]
check "  (and clobbers B's data)" [ "$(sql 'SELECT balance FROM accounts WHERE id = 1')" = 111 ]

# A newer holder's UPDATE, not committed yet, holds the row; B's UPDATE with
# its (now older) fence waits for it, then re-checks the condition against
# the committed row: 0 rows, although the fence it first saw was its own.
sql "UPDATE accounts SET balance = 0, fence = $FB WHERE id = 1"
FN=$(( FB + 1000 ))
rm -f locked1
PGOPTIONS="-c search_path=$SCHEMA" psql_ -Atq >/dev/null 2>&1 <<EOS &
BEGIN;
UPDATE accounts SET balance = 900, fence = $FN WHERE id = 1;
\! touch $TMP/locked1
SELECT pg_sleep(1.5);
COMMIT;
EOS
NP=$!
BG_PIDS+=("$NP")
check "a newer holder's UPDATE holds the row" wait_file locked1 20
check "B's UPDATE waits, re-checks, changes 0 rows" [ "$(./pgwrite pg-update 1 333 "$FB")" = 0 ]
wait "$NP"
check "  the newer data stands" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "900|$FN" ]

# ---- upsert ----------------------------------------------------------------------
FC=$(b run -u "$URI" "$N" -- sh -c 'echo "$BATON_FENCE"')
check "a third grant's fence ($FC) is larger still" gt "$FC" "$FB"
check "upsert: a missing row is inserted" [ "$(./pgwrite pg-upsert 2 10 "$FB")" = 1 ]
check "upsert: a stale fence changes 0 rows" [ "$(./pgwrite pg-upsert 2 5 "$FA")" = 0 ]
check "upsert: the same fence again: 1 row" [ "$(./pgwrite pg-upsert 2 11 "$FB")" = 1 ]
check "upsert: a newer fence: 1 row" [ "$(./pgwrite pg-upsert 2 12 "$FC")" = 1 ]
check "upsert: the previous fence is now stale" [ "$(./pgwrite pg-upsert 2 13 "$FB")" = 0 ]
check "upsert: the row holds the newest data" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 2')" = "12|$FC" ]
check "control: the upsert without its WHERE lets the stale write in" [ "$(./pgwrite pg-upsert-nofence 2 5 "$FA")" = 1 ]

# ---- the transaction --------------------------------------------------------------
recipe pg-tx > tx.sql || exit 1
sql "UPDATE accounts SET balance = 0, fence = $FB WHERE id = 1"
tx() { PGOPTIONS="-c search_path=$SCHEMA" psql_ -At -v fence="$1" -f tx.sql 2>&1; }
out=$(tx "$FA")
check "tx: a stale fence says fenced off" grep -q "fenced off" <<<"$out"
check "  and changes nothing" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "0|$FB" ]
out=$(tx "$FB")
check "tx: the same fence writes" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "10|$FB" ]
out=$(tx "$FC")
check "tx: a newer fence writes and raises the fence" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "20|$FC" ]
out=$(tx "$FB")
check "tx: the older one is fenced off now" grep -q "fenced off" <<<"$out"
check "  nothing changed" [ "$(sql 'SELECT balance FROM accounts WHERE id = 1')" = 20 ]
# FOR UPDATE: a writer's transaction that raised the fence but has not
# committed holds the row; a stale transaction waits for it, then sees the
# raised fence and stays out
sql "UPDATE accounts SET balance = 0, fence = $FB WHERE id = 1"
PGOPTIONS="-c search_path=$SCHEMA" psql_ -Atq >/dev/null 2>&1 <<EOS &
BEGIN;
SELECT fence FROM accounts WHERE id = 1 FOR UPDATE;
UPDATE accounts SET balance = 500, fence = $FC WHERE id = 1;
\! touch $TMP/locked
SELECT pg_sleep(1.5);
COMMIT;
EOS
NP=$!
BG_PIDS+=("$NP")
check "tx: the newer holder's transaction holds the row" wait_file locked 20
out=$(tx "$FB")
wait "$NP"
check "tx: the stale one waited, then was fenced off" grep -q "fenced off" <<<"$out"
check "  the newer data stands" [ "$(sql 'SELECT balance, fence FROM accounts WHERE id = 1')" = "500|$FC" ]

# ---- SQLite -----------------------------------------------------------------------
if command -v sqlite3 >/dev/null; then
    FURI="file://$TMP/locks"
    for r in sqlite-update sqlite-upsert; do recipe "$r" > "$r.sql" || exit 1; done
    sed 's/ AND fence <= ?3//' sqlite-update.sql > sqlite-update-nofence.sql
    sqlite3 data.db < table.sql && sqlite3 data.db "INSERT INTO accounts (id, balance) VALUES (1, 0)"
    check "sqlite: the table" [ $? = 0 ]
    # litewrite RECIPE ID BALANCE FENCE: prints changes()
    litewrite() {
        printf '.parameter set ?1 %s\n.parameter set ?2 %s\n.parameter set ?3 %s\n%s\nSELECT changes();\n' \
            "$2" "$3" "$4" "$(cat "$1.sql")" | sqlite3 data.db
    }
    SA=$(b run -u "$FURI" "$N" -- sh -c 'echo "$BATON_FENCE"')
    SB=$(b run -u "$FURI" "$N" -- sh -c 'echo "$BATON_FENCE"')
    check "sqlite: two grants, increasing fences" gt "$SB" "$SA"
    check "sqlite: B writes: 1 row" [ "$(litewrite sqlite-update 1 222 "$SB")" = 1 ]
    check "sqlite: A's late write: 0 rows" [ "$(litewrite sqlite-update 1 111 "$SA")" = 0 ]
    check "sqlite: B's data stands" [ "$(sqlite3 data.db 'SELECT balance, fence FROM accounts WHERE id = 1')" = "222|$SB" ]
    check "sqlite: B again (same fence): 1 row" [ "$(litewrite sqlite-update 1 223 "$SB")" = 1 ]
    check "sqlite: upsert inserts" [ "$(litewrite sqlite-upsert 2 10 "$SA")" = 1 ]
    check "sqlite: upsert with a newer fence" [ "$(litewrite sqlite-upsert 2 20 "$SB")" = 1 ]
    check "sqlite: upsert with a stale fence: 0 rows" [ "$(litewrite sqlite-upsert 2 5 "$SA")" = 0 ]
    check "sqlite: the upserted row holds the newest data" \
        [ "$(sqlite3 data.db 'SELECT balance, fence FROM accounts WHERE id = 2')" = "20|$SB" ]
    check "sqlite control: without the condition the stale write lands" \
        [ "$(litewrite sqlite-update-nofence 1 111 "$SA")" = 1 ]
else
    echo "   (sqlite3 missing: the SQLite part is not run)" >&2
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
