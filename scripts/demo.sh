#!/usr/bin/env bash
# The main job on the embedded file backend, no server needed: 4 workers each
# run 50 times `baton run counter -- <read-modify-write a counter file>`.
set -euo pipefail
BATON=${1:-build/baton}
work=$(mktemp -d "${TMPDIR:-/tmp}/baton-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT
export BATON_DIR="$work/locks"
counter="$work/counter"
fences="$work/fences"
echo 0 > "$counter"
: > "$fences"

# The critical section: a deliberately non-atomic read, pause, write.
crit='n=$(cat "$0"); sleep 0.001; echo $((n + 1)) > "$0"; echo "$BATON_FENCE" >> "$1"'

worker() {
    for _ in $(seq 50); do
        "$BATON" run counter -- sh -c "$crit" "$counter" "$fences"
    done
}
echo "4 workers x 50 runs of: baton run counter -- <read-modify-write $counter>"
start=$(date +%s.%N)
for w in 1 2 3 4; do worker & done
wait
end=$(date +%s.%N)

count=$(cat "$counter")
echo "final count: $count (expected 200)   [$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.2f s", b-a}')]"
echo "fences seen, in grant order: $(head -5 "$fences" | tr '\n' ' ')... $(tail -3 "$fences" | tr '\n' ' ')"
if sort -n -c "$fences" 2>/dev/null && [ "$(sort -n -u "$fences" | wc -l)" -eq "$(wc -l < "$fences")" ]; then
    echo "fences: $(wc -l < "$fences") grants, strictly increasing"
else
    echo "fences: NOT strictly increasing"; exit 1
fi
echo
echo "\$ baton status counter"
"$BATON" status counter
[ "$count" -eq 200 ]
