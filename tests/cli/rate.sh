#!/bin/bash
# CLI tests for `baton rate` (the rate limiter, issue 25) and what `baton
# status` and `baton engines` show of it.
#
#   rate.sh file PATH/TO/baton      a lock directory of its own
#   rate.sh redis PATH/TO/baton     the test Redis server ($BATON_TEST_SRV/redis/port)
#   rate.sh sqlite PATH/TO/baton    a database file of its own
#   rate.sh postgres PATH/TO/baton  the test PostgreSQL server
#   rate.sh zk|etcd|mysql PATH/TO/baton  their test servers (the core's limiter on values)
#
# Prints "N passed, N failed"; exits 1 on failure, 77 when the server is missing.
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_rate_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH PGPASSWORD
case "$MODE" in
file) URI="file://$TMP/locks" ;;
sqlite) URI="sqlite://$TMP/rate.db" ;;
redis)
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis server"
    URI="redis://127.0.0.1:$PORT/0" ;;
postgres|zk|etcd|mysql)
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/$MODE/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test $MODE server"
    case "$MODE" in
    postgres) URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres" ;;
    zk) URI="zk://127.0.0.1:$PORT?session_timeout_ms=4000" ;;
    etcd) URI="etcd://127.0.0.1:$PORT?ttl=2" ;;
    mysql) URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton" ;;
    esac ;;
*) echo "usage: $0 file|redis|sqlite|postgres|zk|etcd|mysql BATON" >&2; exit 2 ;;
esac
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
U=(-u "$URI")
P="rate-$$-"

# ---- usage ----------------------------------------------------------------------------
expect_rc 0 "baton rate --help" b rate --help
check "...names --per and --burst" eval 'grep -q -- "--per SECS" "$TMP/out" && grep -q -- "--burst" "$TMP/out"'
expect_rc 64 "rate without NAME" b rate "${U[@]}"
expect_rc 64 "rate -n 0" b rate "${U[@]}" -n 0 "${P}u"
expect_rc 64 "rate --per 0" b rate "${U[@]}" --per 0 "${P}u"
expect_rc 64 "rate --burst 0" b rate "${U[@]}" --burst 0 "${P}u"
expect_rc 64 "rate --client-id without --per-client" b rate "${U[@]}" --client-id x "${P}u"
expect_rc 64 "rate --per-client with a bad id" b rate "${U[@]}" --per-client --client-id "a b" "${P}u"
expect_rc 64 "rate: unknown option" b rate "${U[@]}" --nope "${P}u"

# ---- permits without a command: 3 per minute --------------------------------------------
N="${P}three"
for i in 1 2 3; do expect_rc 0 "permit $i of 3 per minute" b rate "${U[@]}" -n 3 --per 60 "$N"; done
expect_rc 1 "the 4th with -w 0: busy" b rate "${U[@]}" -n 3 --per 60 -w 0 "$N"
expect_rc 7 "...with -E 7" b rate "${U[@]}" -n 3 --per 60 -w 0 -E 7 "$N"
expect_rc 7 "--verbose says when" b rate "${U[@]}" -n 3 --per 60 -w 0 -E 7 --verbose "$N"
check "...'the next in N ms'" grep -q "the next in [0-9]* ms" "$TMP/err"
t0=$(now_ms)
expect_rc 1 "-w 1: the next permit lies ~20 s away: busy at once" b rate "${U[@]}" -n 3 --per 60 -w 1 "$N"
el=$(($(now_ms) - t0))
check "...without waiting the second out ($el ms)" [ "$el" -lt 900 ]
expect_rc 64 "another configuration is refused" b rate "${U[@]}" -n 5 --per 60 "$N"
check "...naming the stored one" grep -q "configured as 3 per 60000 ms burst 3" "$TMP/err"

# ---- baton status -------------------------------------------------------------------------
expect_rc 0 "baton status NAME" b status "${U[@]}" "$N"
check "...rate: 3 per 60000 ms, burst 3" grep -qx "rate: 3 per 60000 ms, burst 3" "$TMP/out"
check "...rate_available: 0" grep -qx "rate_available: 0" "$TMP/out"
check "...rate_next_ms > 0" eval 'gt "$(sed -n "s/^rate_next_ms: //p" "$TMP/out")" 0'
expect_rc 0 "baton status --json NAME" b status "${U[@]}" --json "$N"
check "...\"rate\":{\"permits\":3,...}" grep -q '"rate":{"permits":3,"interval_ms":60000,"burst":3,"available":0,' "$TMP/out"
expect_rc 0 "status of a name without a limiter" b status "${U[@]}" --json "${P}none"
check "...\"rate\":null" grep -q '"rate":null' "$TMP/out"

# ---- --replace: the stored configuration changes, the schedule stays ------------------------
expect_rc 1 "--replace 600 per minute: stored, but no fresh burst (the TAT stays ~60 s ahead)" \
    b rate "${U[@]}" -n 600 --per 60 --burst 1 --replace -w 0 "$N"
expect_rc 0 "...status shows the new one" b status "${U[@]}" "$N"
check "...rate: 600 per 60000 ms, burst 1" grep -qx "rate: 600 per 60000 ms, burst 1" "$TMP/out"

# ---- a command runs in baton's place ----------------------------------------------------------
N2="${P}cmd"
expect_rc 0 "rate NAME -- COMMAND runs it" b rate "${U[@]}" -n 10 --per 1 "$N2" -- sh -c 'echo ran $$ > "$1"' sh "$TMP/ran"
check "...it ran" grep -q "^ran " "$TMP/ran"
expect_rc 42 "...its exit status is ours" b rate "${U[@]}" -n 10 --per 1 "$N2" -- sh -c 'exit 42'
expect_rc 0 "...without --" b rate "${U[@]}" -n 10 --per 1 "$N2" true
expect_rc 127 "...a missing command: 127" b rate "${U[@]}" -n 10 --per 1 "$N2" -- /nonexistent/cmd
# exec: the command's pid is baton's
"${B[@]}" rate "${U[@]}" -n 10 --per 1 "$N2" -- sh -c 'echo $$ > "$1"; exec sleep 0.2' sh "$TMP/pid" &
bp=$!
wait_pid "$bp" 15
check "...exec'd in baton's place (pid $bp)" [ "$(cat "$TMP/pid" 2>/dev/null)" = "$bp" ]

# ---- the rate over 2 s: 5 per second, burst 1, in 4 parallel loops ------------------------------
N3="${P}paced"
: >"$TMP/stamps"
t0=$(now_ms)
for k in 1 2 3 4; do
    ( end=$((t0 + 2000))
      while [ "$(now_ms)" -lt "$end" ]; do
          left=$(( (end - $(now_ms)) ))
          [ "$left" -gt 0 ] || break
          "$BATON" rate "${U[@]}" -n 5 --per 1 --burst 1 -w "$(printf '%d.%03d' $((left / 1000)) $((left % 1000)))" "$N3" \
              -- sh -c 'echo x >> "$1"' sh "$TMP/stamps" || break
      done ) &
    BG_PIDS+=($!)
done
wait
got=$(wc -l <"$TMP/stamps")
check "5/s with burst 1 over 2 s from 4 loops: at most 11 ran ($got)" [ "$got" -le 11 ]
check "...and at least 6 ($got)" [ "$got" -ge 6 ]

# ---- per client ---------------------------------------------------------------------------------
N4="${P}client"
expect_rc 0 "per client alpha: 1 per minute" b rate "${U[@]}" -n 1 --per 60 --per-client --client-id alpha "$N4"
expect_rc 1 "...alpha again: busy" b rate "${U[@]}" -n 1 --per 60 -w 0 --per-client --client-id alpha "$N4"
expect_rc 0 "...beta has its own" b rate "${U[@]}" -n 1 --per 60 -w 0 --per-client --client-id beta "$N4"
expect_rc 0 "...the overall limiter of the name is apart" b rate "${U[@]}" -n 1 --per 60 -w 0 "$N4"
expect_rc 0 "...--per-client without an id: this host's" b rate "${U[@]}" -n 1 --per 60 -w 0 --per-client "$N4"
expect_rc 1 "...which a second run shares" b rate "${U[@]}" -n 1 --per 60 -w 0 --per-client "$N4"

# ---- a signal ends the wait: 128+signal, the command not run -------------------------------------
N5="${P}sig"
expect_rc 0 "1 per 10 minutes" b rate "${U[@]}" -n 1 --per 600 "$N5"
rm -f "$TMP/sigran"
"${B[@]}" rate "${U[@]}" -n 1 --per 600 "$N5" -- touch "$TMP/sigran" &
sp=$!
BG_PIDS+=("$sp")
sleep 0.5
kill -TERM "$sp"
wait_pid "$sp" 10
check "TERM while waiting: exit 143 (rc $RC)" [ "$RC" = 143 ]
check "...the command did not run" not test -e "$TMP/sigran"

# ---- RedLock has none: refused, saying so ----------------------------------------------------------
if [ "$MODE" = redis ]; then
    expect_rc 64 "RedLock: no rate limiter (exit 64)" b rate -u "redlock://127.0.0.1:$PORT/0" -n 1 --per 1 "${P}rl"
    check "...saying the engine has none" grep -q "the redlock engine has no rate limiter" "$TMP/err"
fi

# ---- engines ----------------------------------------------------------------------------------------
expect_rc 0 "baton engines --json" b engines --json
check "...lists the ratelimit primitive" grep -q '"ratelimit"' "$TMP/out"

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
