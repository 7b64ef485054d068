#!/bin/bash
# First use of a fresh SQLite file by several processes at once: RUNS times,
# 8 `baton run` start together on a new sqlite:///path.db (the WAL switch and
# the table's creation race); every one must be granted and exit 0.
#
#   fresh_race.sh PATH/TO/baton [RUNS]
set -u
BATON=${1:?path to baton}
RUNS=${2:-15}
TMP=${BATON_TEST_TMP:-$PWD}/sqlite_fresh_race.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
unset BATON_DIR BATON_URI
bad=0
for r in $(seq 1 "$RUNS"); do
    db="$TMP/fresh$r.db"
    pids=()
    # started back to back (a few ms apart): one worker switches the file to
    # WAL or creates the table while the next ones open it, which is when
    # SQLite answers SQLITE_BUSY without its busy handler
    for i in $(seq 1 8); do
        "$BATON" run -u "sqlite://$db" -w 30 race -- true >"$TMP/out.$r.$i" 2>&1 &
        pids+=($!)
    done
    for i in $(seq 1 8); do
        if ! wait "${pids[$((i - 1))]}"; then
            bad=$((bad + 1))
            echo "run $r worker $i failed: $(cat "$TMP/out.$r.$i")"
        fi
    done
done
echo "fresh-file race: $bad of $((RUNS * 8)) workers failed"
[ "$bad" = 0 ]
