#!/bin/bash
# The file recipes of docs/fencing.md, on the file engine:
#   - baton fence: store, equal, stale refused (exit 65, the message, FILE and
#     the data unchanged, COMMAND not run), usage and I/O errors;
#   - a holder whose grant is stale (its fence kept from an earlier grant)
#     writes after the new holder: refused, the data is the new holder's;
#   - the doc's `baton run ... -- baton fence ...` line and its flock(1)-only
#     shell recipe, run as written, and the two interoperating;
#   - concurrent admits with a command serialize: no two commands overlap, and
#     the admitted fences come in increasing order.
#
#   files.sh PATH/TO/baton
set -u

MODE=file
BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/fencing_files.$$
mkdir -p "$TMP"
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
unset BATON_URI BATON_FENCE BATON_DIR
URI="file://$TMP/locks"
N="fencing-files"
cd "$TMP" || exit 1

# ---- baton fence, directly -------------------------------------------------
F=$TMP/a.fence
expect_rc 0 "a first fence is admitted" b fence "$F" 5
check "  and stored" [ "$(cat "$F")" = 5 ]
expect_rc 65 "a smaller fence is fenced off" b fence "$F" 3
check "  with the message" grep -q "baton fence: $F: fenced off: stored 5 > yours 3" "$TMP/err"
check "  the stored fence unchanged" [ "$(cat "$F")" = 5 ]
expect_rc 65 "-q: fenced off, quietly" b fence -q "$F" 4
check "  no message" empty "$TMP/err"
expect_rc 0 "an equal fence (the same holder again) is admitted" b fence "$F" 5
expect_rc 0 "a larger fence is admitted" b fence "$F" 1795424802230531
check "  and stored" [ "$(cat "$F")" = 1795424802230531 ]
expect_rc 65 "the previous fence is now stale" b fence "$F" 5
expect_rc 0 "FENCE from \$BATON_FENCE" env BATON_FENCE=1795424802230532 "$BATON" fence "$F"
check "  stored" [ "$(cat "$F")" = 1795424802230532 ]
expect_rc 64 "no FENCE and no \$BATON_FENCE" b fence "$F"
check "  says so" grep -q "BATON_FENCE is not set" "$TMP/err"
expect_rc 64 "fence 0" b fence "$F" 0
expect_rc 64 "a fence that is not a number" b fence "$F" 12x
expect_rc 64 "a fence above 2^64-1" b fence "$F" 18446744073709551616
expect_rc 64 "missing FILE" b fence
expect_rc 64 "a COMMAND without --" b fence "$F" 9 true
echo "not a fence" > "$TMP/junk.fence"
expect_rc 74 "a fence file that holds something else" b fence "$TMP/junk.fence" 9
check "  says so" grep -q "does not hold a fence" "$TMP/err"
check "  left alone" grep -q "not a fence" "$TMP/junk.fence"
mkdir -p "$TMP/dir.fence"
expect_rc 74 "a directory where the fence file belongs" b fence "$TMP/dir.fence" 9

G=$TMP/g.fence
expect_rc 3 "COMMAND runs; its status is baton fence's" b fence "$G" 10 -- sh -c 'echo ran > "$0"; exit 3' "$TMP/ran"
check "  it ran" [ -e "$TMP/ran" ]
rm -f "$TMP/ran"
expect_rc 65 "fenced off: COMMAND does not run" b fence "$G" 9 -- sh -c 'echo ran > "$0"' "$TMP/ran"
check "  it did not" [ ! -e "$TMP/ran" ]
expect_rc 127 "a COMMAND that does not exist" b fence "$G" 10 -- "$TMP/no-such-command"

# SIGTERM to baton fence goes to COMMAND, and the flock is kept until COMMAND
# has exited: an admit that comes after the signal finds COMMAND's write done.
T=$TMP/t.fence
rm -f started tdone
"${B[@]}" fence "$T" 5 -- sh -c 'trap "sleep 0.3; echo done > tdone; exit 7" TERM
    touch started; while :; do sleep 0.05; done' 2>/dev/null &
TP=$!
BG_PIDS+=("$TP")
check "a command under baton fence runs" wait_file started 20
kill -TERM "$TP"
expect_rc 0 "the next admit waits for it" b fence "$T" 6
check "  and finds its write done" [ -e tdone ]
wait_pid "$TP" 20
check "baton fence forwarded SIGTERM and exits with COMMAND's status (7, got $RC)" [ "$RC" = 7 ]

# ---- a stale holder with real grants ----------------------------------------
# A's grant, kept; then B's grant and write; then A's late write with its fence
# (as a holder paused past its lease would do on an engine with leases).
FA=$(b run -u "$URI" "$N" -- sh -c 'echo "$BATON_FENCE"')
check "A got a fence ($FA)" gt "$FA" 0
expect_rc 0 "B writes under its grant" b run -u "$URI" "$N" -- \
    "$BATON" fence data.fence -- sh -c 'echo "B $BATON_FENCE" > data'
FB=$(cut -d' ' -f2 data)
check "B's fence ($FB) is larger than A's ($FA)" gt "$FB" "$FA"
expect_rc 65 "A's late write is fenced off" env BATON_FENCE="$FA" "$BATON" fence data.fence -- sh -c 'echo A > data'
check "  the data is B's" [ "$(cat data)" = "B $FB" ]
check "  the message names both fences" grep -q "stored $FB > yours $FA" "$TMP/err"

# ---- the doc's lines, as written --------------------------------------------
printf 'id,total\n1,42\n' > new.csv
expect_rc 0 "docs: baton run ... -- baton fence out.csv.fence -- cp" \
    env PATH="$(dirname "$BATON"):$PATH" URI="$URI" sh -c "$(recipe baton-fence)"
check "  out.csv written" cmp -s new.csv out.csv
check "  the fence stored" gt "$(cat out.csv.fence)" "$FB"

recipe shell-flock > fenced-cp
printf 'v2\n' > v2
expect_rc 0 "docs: the flock(1) recipe under baton run" b run -u "$URI" "$N" -- sh fenced-cp out.csv v2
check "  out.csv written" cmp -s v2 out.csv
printf 'stale\n' > stale
expect_rc 65 "docs: the flock(1) recipe with A's stale fence" env BATON_FENCE="$FA" sh fenced-cp out.csv stale
check "  fenced off, out.csv unchanged" cmp -s v2 out.csv
check "  says so" grep -q "fenced off: stored" "$TMP/err"
echo "junk" > junk.csv.fence
expect_rc 74 "docs: the flock(1) recipe fails closed on a fence file of junk" b run -u "$URI" "$N" -- sh fenced-cp junk.csv v2
check "  and writes nothing" [ ! -e junk.csv ]
expect_rc 74 "docs: ... and on a BATON_FENCE that is not a number" env BATON_FENCE=12x sh fenced-cp out.csv stale
check "  out.csv unchanged" cmp -s v2 out.csv
# both use one fence file and one lock: each refuses what the other stored
big=$(( $(cat out.csv.fence) + 1000 ))
expect_rc 0 "baton fence raises the fence the recipe reads" b fence out.csv.fence "$big"
expect_rc 65 "  the recipe then refuses a smaller one" env BATON_FENCE=$((big - 1)) sh fenced-cp out.csv stale
expect_rc 0 "the recipe stores a larger one" env BATON_FENCE=$((big + 1)) sh fenced-cp out.csv v2
expect_rc 65 "  baton fence then refuses the previous" b fence out.csv.fence "$big"

# ---- concurrent admits serialize ---------------------------------------------
# 8 writers of one holder (one fence: all admitted) released at once by a
# file: their commands must run one at a time.
E=$TMP/e.fence
: > elog
rm -f go
pids=()
for i in 1 2 3 4 5 6 7 8; do
    sh -c 'while [ ! -e go ]; do sleep 0.01; done
           exec "$0" fence "$1" 100 -- sh -c "echo start $2 >> elog; sleep 0.1; echo end $2 >> elog"' \
        "$BATON" "$E" "$i" 2>/dev/null &
    pids+=("$!")
done
touch go
erc=0
for p in "${pids[@]}"; do wait "$p" || erc=$?; done
check "one fence, 8 writers at once: all admitted (odd exit: $erc)" [ "$erc" = 0 ]
check "  8 start/end pairs" [ "$(wc -l < elog)" = 16 ]
check "  no two commands overlap" awk '
    NR % 2 == 1 { if ($1 != "start") exit 1; s = $2; next }
    { if ($1 != "end" || $2 != s) exit 1 }' elog

# 16 writers start at once, fences in a shuffled order. Each admitted one logs
# "start i", pauses, logs "end i" under the guard. Serialized: every start is
# followed by its own end; admitted fences increase; the largest always wins.
C=$TMP/c.fence
: > log
pids=()
for i in $(shuf -i 1-16); do
    "$BATON" fence "$C" "$i" -- sh -c 'echo "start $0" >> log; sleep 0.05; echo "end $0" >> log' "$i" \
        2>/dev/null &
    pids+=("$!")
done
bad_rc=0 admitted=0
for p in "${pids[@]}"; do
    wait "$p"; rc=$?
    case $rc in 0) admitted=$((admitted + 1)) ;; 65) ;; *) bad_rc=$rc ;; esac
done
check "concurrent: every writer admitted (0) or fenced off (65) (odd exit: $bad_rc)" [ "$bad_rc" = 0 ]
check "concurrent: the largest fence is stored" [ "$(cat "$C")" = 16 ]
check "concurrent: one start/end pair per admitted writer ($admitted)" [ "$(wc -l < log)" = $((admitted * 2)) ]
check "concurrent: no two commands overlap" awk '
    NR % 2 == 1 { if ($1 != "start") exit 1; s = $2; next }
    { if ($1 != "end" || $2 != s) exit 1 }' log
check "concurrent: admitted fences increase" awk '
    $1 == "start" { if (NR > 1 && $2 <= last) exit 1; last = $2 }' log
check "concurrent: 16 was admitted" grep -qx "start 16" log

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
