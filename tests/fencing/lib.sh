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

# stale_writer URI NAME SCRIPT [ARG...]: the stale writer every fencing test
# needs. `baton run` no longer makes one (its watchdog kills a command whose
# baton stops renewing), so A is a shell section in a session of its own:
# `eval "$(baton hold -u URI -t 1 NAME)"`, then SCRIPT (run by sh, with
# BATON_FENCE set, and "$0" = baton). It writes the holder's pid to hold.pid
# and the fence to fa; stop the holder and the lease runs out while the shell
# runs on. AP = the shell's pid; the holder, continued, finds the loss and
# terminates the shell's process group (exit 143).
stale_writer() {
    local uri=$1 name=$2 script=$3
    shift 3
    rm -f hold.pid fa
    setsid "${BATON_SHELL:-bash}" -c '
        b=$1 uri=$2 name=$3 script=$4; shift 4
        eval "$("$b" hold -u "$uri" -t 1 "$name")" || exit 1
        echo "$BATON_HOLD_PID" > hold.pid
        echo "$BATON_FENCE" > fa
        exec sh -c "$script" "$b" "$@"' stale "$BATON" "$uri" "$name" "$script" "$@" >/dev/null 2>a.err &
    AP=$!
    BG_PIDS+=("$AP")
}
