#!/bin/bash
# baton and flock(1) exclude each other on a lock name that is an absolute
# path: the file engine locks that very file with flock(2).
#
#   flock.sh PATH/TO/baton
#
# Needs flock(1) (util-linux); without it the test is skipped (77), or fails
# when BATON_REQUIRE_ALL=1. Prints "N passed, N failed".
set -u

BATON=${1:?path to baton}
case $BATON in /*) ;; *) BATON=$PWD/$BATON ;; esac   # the test changes directory
TMP=${BATON_TEST_TMP:-$PWD}/file_flock.$$
mkdir -p "$TMP"
chmod 700 "$TMP"
export BATON_DIR="$TMP/locks"
unset BATON_URI

PASS=0
FAIL=0
BG_PIDS=()
cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ $FAIL -eq 0 ] && rm -rf "$TMP"
}
trap cleanup EXIT

ok()  { PASS=$((PASS + 1)); echo "ok   - $*" >&2; }
bad() { FAIL=$((FAIL + 1)); echo "FAIL - $*" >&2; }
check() { local d=$1; shift; if "$@"; then ok "$d"; else bad "$d"; fi; }
not() { ! "$@"; }
now_ms() { date +%s%3N; }
# rc_of CMD...: the exit status of CMD (never hangs the suite)
rc_of() { timeout -k 2 30 "$@" >/dev/null 2>"$TMP/err"; echo $?; }

if ! command -v flock >/dev/null; then
    if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then echo "FAIL: flock(1) missing (BATON_REQUIRE_ALL=1)" >&2; echo "0 passed, 1 failed"; exit 1; fi
    echo "SKIP: flock(1) (util-linux) is not installed" >&2; echo "0 passed, 0 failed"; exit 77
fi

# wait_for FILE: until FILE exists (a holder writes it once it holds)
wait_for() { local i; for i in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done; return 1; }

JOB="$TMP/job"

# ---- baton holds: flock -n fails -----------------------------------------
rm -f "$TMP/held"
"$BATON" run "$JOB" -- sh -c "touch '$TMP/held'; exec sleep 30" & BG_PIDS+=($!); H=$!
check "baton run holds $JOB" wait_for "$TMP/held"
check "flock -n fails while baton holds" [ "$(rc_of flock -n "$JOB" true)" = 1 ]
check "flock -s -n fails while baton holds" [ "$(rc_of flock -s -n "$JOB" true)" = 1 ]
check "baton run -n fails while baton holds (exit 1)" [ "$(rc_of "$BATON" run -n "$JOB" true)" = 1 ]
kill -TERM $H; wait $H 2>/dev/null
check "flock -n succeeds once baton let go" [ "$(rc_of flock -n "$JOB" true)" = 0 ]

# ---- flock holds: baton waits, times out, or gets it when flock lets go --
rm -f "$TMP/held" "$TMP/flock.go"
# flock holds until told to let go (at most 30 s): a fixed hold ran out
# before the waiting case below on a loaded machine under ASan
flock "$JOB" sh -c "touch '$TMP/held'; i=0; while [ ! -e '$TMP/flock.go' ] && [ \$i -lt 600 ]; do sleep 0.05; i=\$((i+1)); done" &
F=$!; BG_PIDS+=($F)
check "flock holds $JOB" wait_for "$TMP/held"
check "baton run -n fails while flock holds (exit 1)" [ "$(rc_of "$BATON" run -n "$JOB" true)" = 1 ]
check "baton run -n -E 9 exits 9" [ "$(rc_of "$BATON" run -n -E 9 "$JOB" true)" = 9 ]
t0=$(now_ms)
check "baton run -w 0.3 times out (exit 1)" [ "$(rc_of "$BATON" run -w 0.3 "$JOB" true)" = 1 ]
t=$(( $(now_ms) - t0 ))
check "... after about 0.3 s ($t ms)" [ $t -ge 250 -a $t -lt 1400 ]
check "baton status says held" bash -c "'$BATON' status '$JOB' | grep -q '^held: yes'"
"$BATON" run "$JOB" -- sh -c "echo \"\$BATON_FENCE\" > '$TMP/f1'" & W=$!
sleep 0.2
check "a waiting baton run waits while flock holds" [ ! -e "$TMP/f1" ]
touch "$TMP/flock.go"
wait $F
wait $W; rc=$?
check "it runs once flock lets go (exit $rc)" [ $rc = 0 -a -s "$TMP/f1" ]

# ---- fences increase across grants ----------------------------------------
"$BATON" run "$JOB" -- sh -c "echo \"\$BATON_FENCE\" > '$TMP/f2'"
"$BATON" run "$JOB" -- sh -c "echo \"\$BATON_FENCE\" > '$TMP/f3'"
f1=$(cat "$TMP/f1"); f2=$(cat "$TMP/f2"); f3=$(cat "$TMP/f3")
check "fences increase ($f1 < $f2 < $f3)" [ "$f2" -gt "$f1" -a "$f3" -gt "$f2" ]
check "the user's file is not written" [ ! -s "$JOB" ]

# ---- read side is flock -s --------------------------------------------------
rm -f "$TMP/held"
"$BATON" run --shared "$JOB" -- sh -c "touch '$TMP/held'; exec sleep 30" & BG_PIDS+=($!); H=$!
check "baton run --shared holds" wait_for "$TMP/held"
check "flock -s -n shares it" [ "$(rc_of flock -s -n "$JOB" true)" = 0 ]
check "flock -x -n is kept out" [ "$(rc_of flock -x -n "$JOB" true)" = 1 ]
check "baton run --write -n is kept out" [ "$(rc_of "$BATON" run --write -n "$JOB" true)" = 1 ]
kill -TERM $H; wait $H 2>/dev/null

# ---- the file is created as flock(1) creates it -----------------------------
NEW="$TMP/new-file"
(umask 022; "$BATON" run "$NEW" true)
check "a missing file is created, mode 0644 under umask 022" [ "$(stat -c %a "$NEW" 2>/dev/null)" = 644 ]
check "its directory must exist (exit 64)" [ "$(rc_of "$BATON" run "$TMP/no/such/dir/job" true)" = 64 ]
check "... and the message says so" grep -q "No such file or directory" "$TMP/err"

# ---- a relative name is not a path ------------------------------------------
(cd "$TMP" && "$BATON" run rel -- true)
check "a relative name uses the lock dir" [ -e "$BATON_DIR/lock.rel" -a ! -e "$TMP/rel" ]
rm -f "$TMP/held"
"$BATON" run rel -- sh -c "touch '$TMP/held'; exec sleep 30" & BG_PIDS+=($!); H=$!
wait_for "$TMP/held"
(cd "$TMP" && touch rel)
check "flock -n on ./rel is not excluded by baton's 'rel'" [ "$(cd "$TMP" && rc_of flock -n rel true)" = 0 ]
kill -TERM $H; wait $H 2>/dev/null

# ---- "./" and "../" names are paths, relative to the current directory ------
mkdir -p "$TMP/sub"
rm -f "$TMP/held"
(cd "$TMP" && exec "$BATON" run ./dot.lock -- sh -c "touch '$TMP/held'; exec sleep 30") & BG_PIDS+=($!); H=$!
check "baton run ./dot.lock holds" wait_for "$TMP/held"
check "./dot.lock is the file in the current directory" [ -e "$TMP/dot.lock" ]
check "flock -n ./dot.lock fails while baton holds it" [ "$(cd "$TMP" && rc_of flock -n ./dot.lock true)" = 1 ]
check "flock -n ../dot.lock (from a subdirectory) fails too" [ "$(cd "$TMP/sub" && rc_of flock -n ../dot.lock true)" = 1 ]
check "baton run -n ../dot.lock (from a subdirectory) fails too" [ "$(cd "$TMP/sub" && rc_of "$BATON" run -n ../dot.lock true)" = 1 ]
check "baton run -n with the absolute path fails too" [ "$(rc_of "$BATON" run -n "$TMP/dot.lock" true)" = 1 ]
kill -TERM $H; wait $H 2>/dev/null
rm -f "$TMP/held"
(cd "$TMP" && exec flock -o ./dot.lock sh -c "touch '$TMP/held'; exec sleep 30") & BG_PIDS+=($!); H=$!
wait_for "$TMP/held"
check "baton run -n ./dot.lock fails while flock ./dot.lock holds" [ "$(cd "$TMP" && rc_of "$BATON" run -n ./dot.lock true)" = 1 ]
check "baton status ./dot.lock: held" eval '(cd "$TMP" && "$BATON" status ./dot.lock) | grep -qx "held: yes"'
kill -TERM $H; wait $H 2>/dev/null
check "baton run -n ./dot.lock once flock let go" [ "$(cd "$TMP" && rc_of "$BATON" run -n ./dot.lock true)" = 0 ]
check "no lock file for the name './dot.lock' in the lock dir" [ ! -e "$BATON_DIR/lock.%2E%2Fdot%2Elock" ]

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
