# Shared by the fencing suites (sourced after MODE, BATON, TMP are set): the
# CLI harness (tests/cli/lib.sh) and recipe NAME, which prints the code block
# that follows "<!-- recipe: NAME -->" in docs/fencing.md — the tests run the
# documented recipes as written, so the page cannot drift from what works.

FENCING_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$FENCING_HERE/../cli/lib.sh"
FENCING_DOC="$FENCING_HERE/../../docs/fencing.md"

recipe() {
    local out
    out=$(awk -v want="<!-- recipe: $1 -->" '
        $0 == want { found = 1; next }
        found == 1 && /^```/ { found = 2; next }
        found == 2 && /^```/ { exit }
        found == 2 { print }' "$FENCING_DOC")
    if [ -z "$out" ]; then
        echo "recipe '$1' not found in $FENCING_DOC" >&2
        bad "recipe $1 exists in docs/fencing.md"
        return 1
    fi
    printf '%s\n' "$out"
}

# stop_holder PID: freezes a baton (its keeper stops renewing: the lease runs
# out); cont_holder PID: lets it run again.
stop_holder() { kill -STOP "$1"; }
cont_holder() { kill -CONT "$1"; }
