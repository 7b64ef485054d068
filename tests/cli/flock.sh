#!/bin/bash
# `baton run` speaks flock(1): flock's options and habits, side by side with
# flock(1) itself where it is installed; --help and one-line usage errors on
# every command; the command's BATON_URI that a nested baton can use; the
# limits of the numbers, and negative operands.
#
#   flock.sh file  PATH/TO/baton     the embedded file backend (BATON_DIR=<tmp>)
#   flock.sh redis PATH/TO/baton     the test Redis server ($BATON_TEST_SRV/redis/port)
#
# Prints "N passed, N failed"; exits 1 on failure, 77 when the Redis server is
# missing (unless BATON_REQUIRE_ALL=1).
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
REDIS_SH="$HERE/../servers/redis.sh"
TMP=${BATON_TEST_TMP:-$PWD}/cli_flock_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

# A `baton run` holder whose command waits until $TMP/h.TAG.go exists.
start_holder() { # TAG NAME [baton run options...]
    local tag=$1 name=$2; shift 2
    rm -f "$TMP/h.$tag.ready" "$TMP/h.$tag.go"
    "${B[@]}" run "${U[@]}" "$@" "$name" -- sh -c \
        ': > "$1.ready"; while [ ! -e "$1.go" ]; do sleep 0.05; done' \
        sh "$TMP/h.$tag" >"$TMP/h.$tag.out" 2>"$TMP/h.$tag.err" &
    HOLDER_PID=$!
    BG_PIDS+=("$HOLDER_PID")
    wait_file "$TMP/h.$tag.ready" 15
}
stop_holder() { # TAG
    touch "$TMP/h.$1.go"
    wait_pid "$HOLDER_PID" 15
}

# ---- setup -----------------------------------------------------------------
case "$MODE" in
file)
    export BATON_DIR="$TMP/locks"
    unset BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH
    U=()
    D="file"
    ;;
redis)
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis server"
    unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH
    URI="redis://127.0.0.1:$PORT/0"
    U=(-u "$URI")
    D="redis"
    ;;
*) echo "usage: $0 file|redis BATON" >&2; exit 2 ;;
esac
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
P="flk-$$-"

# ---- -c CMD: the command string runs with sh -c ------------------------------------
N="${P}c"
expect_rc 3 "[$D] NAME -c CMD (flock's form)" b run "${U[@]}" "$N" -c 'echo "$BATON_LOCK"; exit 3'
check "[$D] ...ran through sh -c, with BATON_LOCK" grep -qx "$N" "$TMP/out"
expect_rc 0 "[$D] -c CMD before NAME" b run "${U[@]}" -c 'echo "a  b" | tr -s " "' "$N"
check "[$D] ...its pipe and quotes are the shell's" grep -qx "a b" "$TMP/out"
expect_rc 0 "[$D] --command CMD after NAME" b run "${U[@]}" "$N" --command 'echo long'
check "[$D] ...ran" grep -qx long "$TMP/out"
expect_rc 0 "[$D] --command=CMD" b run "${U[@]}" --command='echo eq' "$N"
check "[$D] ...ran" grep -qx eq "$TMP/out"
expect_rc 0 "[$D] -c runs sh, whatever \$SHELL is" env SHELL=/bin/false "${B[@]}" run "${U[@]}" "$N" -c 'echo shell-ok'
check "[$D] ...ran" grep -qx shell-ok "$TMP/out"
expect_rc 64 "[$D] NAME -c CMD ARG: one command string only" b run "${U[@]}" "$N" -c 'echo x' extra
expect_rc 64 "[$D] -c CMD and COMMAND ARG... together" b run "${U[@]}" -c 'echo x' "$N" -- echo y
expect_rc 64 "[$D] NAME -c without a command string" b run "${U[@]}" "$N" -c

# ---- -s / -x / -e / --exclusive ---------------------------------------------------
N="${P}sx"
if start_holder sx1 "$N" -s; then
    expect_rc 0 "[$D] -s beside an -s holder" b run -n "${U[@]}" -s "$N" -- true
    expect_rc 0 "[$D] --shared beside an -s holder" b run -n "${U[@]}" --shared "$N" -- true
    expect_rc 1 "[$D] -x -n while an -s holder runs: busy" b run -n "${U[@]}" -x "$N" -- true
    expect_rc 1 "[$D] -e -n: busy" b run -n "${U[@]}" -e "$N" -- true
    expect_rc 1 "[$D] --exclusive -n: busy" b run -n "${U[@]}" --exclusive "$N" -- true
    expect_rc 1 "[$D] plain -n: busy" b run -n "${U[@]}" "$N" -- true
    stop_holder sx1
else
    bad "[$D] -s holder did not start: $(cat "$TMP/h.sx1.err")"
fi
if start_holder sx2 "$N" -x; then
    expect_rc 1 "[$D] -s -n while an -x holder runs: busy" b run -n "${U[@]}" -s "$N" -- true
    expect_rc 1 "[$D] -x -n while an -x holder runs: busy" b run -n "${U[@]}" -x "$N" -- true
    expect_rc 1 "[$D] plain -n while an -x holder runs: busy" b run -n "${U[@]}" "$N" -- true
    stop_holder sx2
else
    bad "[$D] -x holder did not start: $(cat "$TMP/h.sx2.err")"
fi
expect_rc 64 "[$D] -s and -x together" b run "${U[@]}" -s -x "$N" -- true
check "[$D] ...the message names -s and -x as typed" grep -q -- "-s and -x exclude" "$TMP/err"

# ---- busy: flock's long names; quiet unless --verbose -------------------------------
N="${P}busy"
if start_holder busy "$N"; then
    expect_rc 1 "[$D] --nonblock while held" b run "${U[@]}" --nonblock "$N" -- touch "$TMP/ran"
    check "[$D] ...quiet, as flock -n" empty "$TMP/err"
    expect_rc 1 "[$D] --nb while held" b run "${U[@]}" --nb "$N" -- touch "$TMP/ran"
    expect_rc 1 "[$D] -n while held" b run "${U[@]}" -n "$N" -- touch "$TMP/ran"
    check "[$D] ...quiet" empty "$TMP/err"
    # the man page's cron example: a skipped run mails nothing
    expect_rc 0 "[$D] cron: -n -E 0 while held" b run -n -E 0 "${U[@]}" "$N" -- touch "$TMP/ran"
    check "[$D] ...prints nothing at all" empty "$TMP/err"
    check "[$D] ...and nothing on stdout" empty "$TMP/out"
    expect_rc 7 "[$D] --conflict-exit-code 7 --nonblock" b run "${U[@]}" --conflict-exit-code 7 --nonblock "$N" -- touch "$TMP/ran"
    expect_rc 8 "[$D] --conflict-exit-code=8 -n" b run "${U[@]}" --conflict-exit-code=8 -n "$N" -- touch "$TMP/ran"
    for w in -w --timeout --wait; do
        t0=$(now_ms)
        expect_rc 1 "[$D] $w 0.5 while held" b run "${U[@]}" "$w" 0.5 "$N" -- touch "$TMP/ran"
        el=$(( $(now_ms) - t0 ))
        check "[$D] ...waited about 0.5 s ($el ms)" [ "$el" -ge 450 -a "$el" -lt 5000 ]
        check "[$D] ...quiet, as flock -w" empty "$TMP/err"
    done
    expect_rc 1 "[$D] -w 0 is -n (as flock)" b run "${U[@]}" -w 0 "$N" -- touch "$TMP/ran"
    expect_rc 1 "[$D] --verbose -n while held" b run "${U[@]}" --verbose -n "$N" -- touch "$TMP/ran"
    check "[$D] ...says it was busy" grep -q "$N: busy" "$TMP/err"
    expect_rc 9 "[$D] --verbose --timeout 0.3 -E 9 while held" b run "${U[@]}" --verbose --timeout 0.3 -E 9 "$N" -- touch "$TMP/ran"
    check "[$D] ...says how long it waited" grep -Eq "$N: still busy after 0\.[0-9]{3} s" "$TMP/err"
    check "[$D] the command never ran while busy" [ ! -e "$TMP/ran" ]
    stop_holder busy
else
    bad "[$D] busy holder did not start: $(cat "$TMP/h.busy.err")"
fi

# --verbose on a grant: how long it waited, and the fence the command got
N="${P}verbose"
expect_rc 0 "[$D] --verbose on a free lock" b run "${U[@]}" --verbose "$N" -- sh -c 'echo "$BATON_FENCE"'
fence=$(cat "$TMP/out")
check "[$D] ...says how long the wait took" grep -Eq "$N: got the lock after [0-9]+\.[0-9]{3} s" "$TMP/err"
check "[$D] ...and the fence the command got ($fence)" grep -q "fence $fence\$" "$TMP/err"
expect_rc 0 "[$D] without --verbose a run says nothing" b run "${U[@]}" "$N" -- true
check "[$D] ...nothing on stderr" empty "$TMP/err"
expect_rc 0 "[$D] -o (flock's --close) is accepted" b run "${U[@]}" -o "$N" -- true
expect_rc 0 "[$D] --close is accepted" b run "${U[@]}" --close "$N" -- true
expect_rc 64 "[$D] -F (--no-fork) is refused" b run "${U[@]}" -F "$N" -- true
check "[$D] ...saying why" grep -q "not supported" "$TMP/err"

# ---- side by side with flock(1): the same hands, the same exit codes and silence ----
if command -v flock >/dev/null 2>&1; then
    F="$TMP/flock.file"
    N="${P}side"
    rm -f "$TMP/fh.ready" "$TMP/fh.go"
    flock "$F" -c ": > '$TMP/fh.ready'; while [ ! -e '$TMP/fh.go' ]; do sleep 0.05; done" &
    fpid=$!
    BG_PIDS+=("$fpid")
    if wait_file "$TMP/fh.ready" 10 && start_holder side "$N"; then
        while IFS='|' read -r want args; do
            read -ra A <<<"$args"
            timeout 10 flock "${A[@]}" "$F" true >"$TMP/f.out" 2>"$TMP/f.err"; frc=$?
            timeout 10 "${B[@]}" run "${U[@]}" "${A[@]}" "$N" true >"$TMP/b.out" 2>"$TMP/b.err"; brc=$?
            check "[$D] busy, flock $args: exit $frc; baton run $args: exit $brc (want $want)" [ "$frc" = "$want" -a "$brc" = "$want" ]
            if [[ "$args" == *--verbose* ]]; then
                check "[$D] ...both say why on stderr" [ -s "$TMP/f.err" -a -s "$TMP/b.err" ]
            else
                check "[$D] ...both are silent" [ ! -s "$TMP/f.err" -a ! -s "$TMP/b.err" ]
            fi
        done <<'EOF'
1|-n
1|--nonblock
1|--nb
1|-w 0.2
1|--timeout 0.2
1|--wait 0.2
1|-w 0
7|-n -E 7
0|-n -E 0
7|--nonblock --conflict-exit-code 7
1|-s -n
1|-x -n
1|-e -n
1|--exclusive -n
1|--shared --nonblock
1|--verbose -n
EOF
        stop_holder side
    else
        bad "[$D] side-by-side holders did not start: $(cat "$TMP/h.side.err" 2>/dev/null)"
    fi
    touch "$TMP/fh.go"
    wait_pid "$fpid" 10
    # a free lock: the command's status, -c, -o
    while IFS='|' read -r want args; do
        eval "A=($args)"
        timeout 10 flock "$F" "${A[@]}" >"$TMP/f.out" 2>"$TMP/f.err"; frc=$?
        timeout 10 "${B[@]}" run "${U[@]}" "$N" "${A[@]}" >"$TMP/b.out" 2>"$TMP/b.err"; brc=$?
        check "[$D] free, flock F $args: exit $frc; baton run N $args: exit $brc (want $want)" [ "$frc" = "$want" -a "$brc" = "$want" ]
        check "[$D] ...the same output" cmp -s "$TMP/f.out" "$TMP/b.out"
    done <<'EOF'
3|-c 'echo hi; exit 3'
0|--command 'echo "a b"'
0|echo x y
5|sh -c 'exit 5'
EOF
else
    echo "   flock(1) is not installed: the side-by-side checks are skipped" >&2
fi

# ---- the command's BATON_URI: a nested baton can use it as it is --------------------
N="${P}uri"
if [ "$MODE" = file ]; then
    expect_rc 0 "[file] default directory: BATON_URI" b run "$N" -- printenv BATON_URI
    check "[file] ...is file:// and the directory ($(cat "$TMP/out"))" grep -qx "file://$BATON_DIR" "$TMP/out"
    expect_rc 0 "[file] a nested baton without BATON_DIR finds the lock" b run "$N" -- \
        sh -c 'env -u BATON_DIR "$0" status -u "$BATON_URI" "$BATON_LOCK"' "$BATON"
    check "[file] ...held: yes" grep -qx "held: yes" "$TMP/out"
    expect_rc 0 "[file] -u file:// gives the directory too" b run -u file:// "$N" -- printenv BATON_URI
    check "[file] ...($(cat "$TMP/out"))" grep -qx "file://$BATON_DIR" "$TMP/out"
    expect_rc 0 "[file] -u file://localhost gives the directory too" b run -u file://localhost "$N" -- printenv BATON_URI
    check "[file] ...($(cat "$TMP/out"))" grep -qx "file://$BATON_DIR" "$TMP/out"
    mkdir -p "$TMP/xdg"; chmod 700 "$TMP/xdg"
    expect_rc 0 "[file] \$XDG_RUNTIME_DIR/baton when BATON_DIR is unset" \
        env -u BATON_DIR XDG_RUNTIME_DIR="$TMP/xdg" "${B[@]}" run "$N" -- printenv BATON_URI
    check "[file] ...($(cat "$TMP/out"))" grep -qx "file://$TMP/xdg/baton" "$TMP/out"
    odd="$TMP/odd dir%?#"
    expect_rc 0 "[file] a directory with ' ', %, ?, #" env BATON_DIR="$odd" "${B[@]}" run "$N" -- \
        sh -c 'printenv BATON_URI; env -u BATON_DIR "$0" status -u "$BATON_URI" "$BATON_LOCK"' "$BATON"
    check "[file] ...is percent-encoded ($(head -n 1 "$TMP/out"))" grep -qx "file://$TMP/odd%20dir%25%3F%23" "$TMP/out"
    check "[file] ...and a nested baton finds the lock there" grep -qx "held: yes" "$TMP/out"
    expect_rc 0 "[file] file:///abs/dir passes through" b run -u "file://$TMP/locks2" "$N" -- printenv BATON_URI
    check "[file] ...($(cat "$TMP/out"))" grep -qx "file://$TMP/locks2" "$TMP/out"
else
    expect_rc 0 "[redis] BATON_URI without a password is the URI" b run "${U[@]}" "$N" -- printenv BATON_URI
    check "[redis] ...($(cat "$TMP/out"))" grep -qx "$URI" "$TMP/out"
    PW_SRV="$TMP/redis-pw"
    if pwport=$("$REDIS_SH" start "$PW_SRV" --requirepass 's3c@r:t' 2>"$TMP/pw.err"); then
        H="127.0.0.1:$pwport/0"
        nested='printf "%s\n" "$BATON_URI"; "$0" status -u "$BATON_URI" "$BATON_LOCK"'
        expect_rc 0 "[redis] password in the URI: a nested baton uses BATON_URI" \
            b run -u "redis://:s3c%40r:t@$H" "$N" -- sh -c "$nested" "$BATON"
        check "[redis] ...BATON_URI is redis://host, no '@', no password ($(head -n 1 "$TMP/out"))" \
            grep -qx "redis://$H" "$TMP/out"
        check "[redis] ...the nested status got in: held: yes" grep -qx "held: yes" "$TMP/out"
        check "[redis] ...no password anywhere in its output" not grep -q "s3c" "$TMP/out"
        expect_rc 0 "[redis] the password reaches the command as BATON_REDIS_PASSWORD, decoded" \
            b run -u "redis://:s3c%40r:t@$H" "$N" -- printenv BATON_REDIS_PASSWORD
        check "[redis] ...($(cat "$TMP/out"))" grep -qx 's3c@r:t' "$TMP/out"
        expect_rc 0 "[redis] user and password: a nested baton uses BATON_URI" \
            b run -u "redis://default:s3c%40r:t@$H?prefix=x-" "$N" -- sh -c "$nested" "$BATON"
        check "[redis] ...BATON_URI keeps the user and options ($(head -n 1 "$TMP/out"))" \
            grep -qx "redis://default@$H?prefix=x-" "$TMP/out"
        check "[redis] ...held: yes" grep -qx "held: yes" "$TMP/out"
        expect_rc 0 "[redis] a stale BATON_REDIS_PASSWORD is replaced by the URI's" \
            env BATON_REDIS_PASSWORD=wrong "${B[@]}" run -u "redis://:s3c%40r:t@$H" "$N" -- sh -c "$nested" "$BATON"
        check "[redis] ...held: yes" grep -qx "held: yes" "$TMP/out"
        expect_rc 0 "[redis] password from \$BATON_URI's URI: nested works" \
            env BATON_URI="redis://:s3c%40r:t@$H" "${B[@]}" run "$N" -- sh -c "$nested" "$BATON"
        check "[redis] ...held: yes" grep -qx "held: yes" "$TMP/out"
        expect_rc 0 "[redis] password from REDISCLI_AUTH: nested works (inherited)" \
            env REDISCLI_AUTH='s3c@r:t' "${B[@]}" run -u "redis://$H" "$N" -- sh -c "$nested" "$BATON"
        check "[redis] ...held: yes" grep -qx "held: yes" "$TMP/out"
        expect_rc 0 "[redis] without a password in the URI none is added" \
            env REDISCLI_AUTH='s3c@r:t' "${B[@]}" run -u "redis://$H" "$N" -- sh -c 'printenv BATON_REDIS_PASSWORD || echo none'
        check "[redis] ...($(cat "$TMP/out"))" grep -qx none "$TMP/out"
        "$REDIS_SH" stop "$PW_SRV" >/dev/null 2>&1
        PW_SRV=""
    else
        bad "[redis] could not start a password-protected redis: $(cat "$TMP/pw.err")"
    fi
fi

# ---- latch and sem: negative numbers are operands -----------------------------------
N="${P}sem"
if b sem "${U[@]}" "$N" set 5 2>/dev/null; then
    expect_rc 0 "[$D] sem NAME add -2" b sem "${U[@]}" "$N" add -2
    out=$(b sem "${U[@]}" "$N" available); check "[$D] ...5 - 2 = 3 free ($out)" [ "$out" = 3 ]
    expect_rc 0 "[$D] sem NAME add -1 -u URI (an option after the count)" b sem "$N" add -1 "${U[@]}"
    expect_rc 0 "[$D] sem NAME add -- -1" b sem "${U[@]}" "$N" add -- -1
    out=$(b sem "${U[@]}" "$N" available); check "[$D] ...1 free ($out)" [ "$out" = 1 ]
else
    ok "[$D] no semaphore on this engine"
fi
expect_rc 64 "[$D] latch NAME set -5" b latch "${U[@]}" "$N" set -5
check "[$D] ...is a bad count, not an option" grep -q "bad count '-5'" "$TMP/err"
check "[$D] ...and says what a count may be" grep -q "1 to" "$TMP/err"
expect_rc 64 "[$D] sem NAME set -5" b sem "${U[@]}" "$N" set -5
check "[$D] ...is a bad count" grep -q "bad count '-5'" "$TMP/err"
expect_rc 64 "[$D] sem NAME add -2000000000 (out of range)" b sem "${U[@]}" "$N" add -2000000000
N="${P}latch"
if b latch "${U[@]}" "$N" set 1 2>/dev/null; then
    expect_rc 1 "[$D] latch NAME wait --timeout 0.2 (a long option after the operation)" b latch "${U[@]}" "$N" wait --timeout 0.2
    expect_rc 1 "[$D] latch NAME wait --wait=0.2" b latch "$N" wait --wait=0.2 "${U[@]}"
    expect_rc 0 "[$D] latch NAME down" b latch "${U[@]}" "$N" down
    expect_rc 0 "[$D] latch NAME wait -w 5 at zero" b latch "${U[@]}" "$N" wait -w 5
else
    ok "[$D] no latch on this engine"
fi

if [ "$MODE" = file ]; then
    # ---- --help on every command; a typo is one line and a Try line ----------------
    for cmd in run status latch sem; do
        for h in --help -h; do
            expect_rc 0 "baton $cmd $h" b "$cmd" "$h"
            check "...its own usage on stdout" grep -q "^usage: baton $cmd" "$TMP/out"
            check "...nothing on stderr" empty "$TMP/err"
        done
        expect_rc 64 "baton $cmd --frobnicate" b "$cmd" --frobnicate x
        check "...two lines on stderr" [ "$(wc -l < "$TMP/err")" = 2 ]
        check "...names the option" grep -q "unrecognized option '--frobnicate'" "$TMP/err"
        check "...then Try 'baton $cmd --help'" \
            grep -qx "Try 'baton $cmd --help' for more information." "$TMP/err"
        check "...and no usage on stdout" empty "$TMP/out"
        expect_rc 64 "baton $cmd -q" b "$cmd" -q x
        check "...invalid option -- 'q', then the Try line" \
            [ "$(head -n 1 "$TMP/err")" = "baton $cmd: invalid option -- 'q'" -a "$(wc -l < "$TMP/err")" = 2 ]
    done
    expect_rc 0 "baton bench --help stays" b bench --help
    expect_rc 64 "baton run --w (ambiguous)" b run --w 1 x true
    check "...says which options it could be" grep -q -- "--wait, --write" "$TMP/err"
    expect_rc 64 "baton run --timeout (no argument)" b run --timeout
    check "...names --timeout" grep -q "option '--timeout' requires an argument" "$TMP/err"
    expect_rc 64 "baton run -w (no argument)" b run -w
    check "...names -w" grep -q "option requires an argument -- 'w'" "$TMP/err"
    expect_rc 64 "baton run --fair=1" b run --fair=1 x true
    check "...doesn't allow an argument" grep -q "option '--fair' doesn't allow an argument" "$TMP/err"
    expect_rc 64 "baton run with no NAME" b run
    check "...one line and the Try line" [ "$(wc -l < "$TMP/err")" = 2 ]
    expect_rc 64 "baton frobnicate" b frobnicate
    check "...Try 'baton --help'" grep -qx "Try 'baton --help' for more information." "$TMP/err"
    expect_rc 0 "baton run -V" b run -V
    check "...the version" grep -q "^baton [0-9]" "$TMP/out"

    # ---- bad numbers: the option as typed, and the limits ---------------------------
    N="${P}num"
    expect_rc 64 "-t 1e9 (above the 32-bit ms lease)" b run -t 1e9 "$N" -- true
    check "...names -t and the limit" grep -q -- "-t: .*'1e9'.*4294967.295" "$TMP/err"
    expect_rc 64 "--lease 4294967.296" b run --lease 4294967.296 "$N" -- true
    check "...names --lease and the limit" grep -q -- "--lease: .*4294967.295" "$TMP/err"
    expect_rc 0 "-t 4294967.295 (the limit) is accepted" b run -t 4294967.295 "$N" -- true
    expect_rc 64 "-t 0.01 (below the minimum lease)" b run -t 0.01 "$N" -- true
    check "...says the minimum, 0.05" grep -q "0.05" "$TMP/err"
    expect_rc 0 "-t 0.05 is accepted" b run -t 0.05 "$N" -- true
    expect_rc 64 "--permits 0" b run --permits 0 "$N" -- true
    check "...names --permits (not -P)" grep -q -- "--permits: bad number of permits '0' (want 1 to 1000000)" "$TMP/err"
    check "...never -P" not grep -q -- "-P" "$TMP/err"
    expect_rc 64 "--kill-after x" b run --kill-after x "$N" -- true
    check "...names --kill-after (not --)" grep -q -- "--kill-after: bad number of seconds 'x'" "$TMP/err"
    expect_rc 64 "--timeout -1" b run --timeout -1 "$N" -- true
    check "...names --timeout" grep -q -- "--timeout: bad number of seconds '-1' (want 0 to" "$TMP/err"
    expect_rc 64 "-w 1e10" b run -w 1e10 "$N" -- true
    check "...names -w and its limit" grep -q -- "-w: .*1000000000" "$TMP/err"
    expect_rc 64 "--conflict-exit-code 256" b run --conflict-exit-code 256 "$N" -- true
    check "...names it, and 0 to 255" grep -q -- "--conflict-exit-code: bad exit code '256' (want 0 to 255)" "$TMP/err"
    expect_rc 64 "--nonblock --timeout 1" b run --nonblock --timeout 1 "$N" -- true
    check "...names both as typed" grep -q -- "--nonblock and --timeout exclude each other" "$TMP/err"
    expect_rc 64 "latch -w x" b latch "$N" wait -w x
    check "...names -w" grep -q -- "-w: bad number of seconds 'x'" "$TMP/err"
    expect_rc 0 "run --help states the lease minimum" b run --help
    check "...0.05" grep -q "0.05" "$TMP/out"

    # ---- the docs: flock's options side by side with baton run's ---------------------
    MAN="$HERE/../../docs/baton.1"
    README="$HERE/../../README.md"
    # the FLOCK(1) OPTIONS section of the man page, roff's \- as -
    sed -n '/^\.SH FLOCK(1) OPTIONS/,/^\.SH /p' "$MAN" | sed 's/\\-/-/g' > "$TMP/man.flock"
    readme_table=$(sed -n '/^| flock | baton run |/,/^$/p' "$README")
    check "baton(1) has a FLOCK(1) OPTIONS table" grep -q "^\.TS" "$TMP/man.flock"
    check "README has the flock table" [ -n "$readme_table" ]
    missing_man=""; missing_readme=""
    for o in -c --command -E --conflict-exit-code -F --no-fork -e -x --exclusive -n --nb --nonblock \
             -o --close -s --shared -u --unlock -w --wait --timeout --verbose -h -V; do
        grep -q -- "$o\b" "$TMP/man.flock" || missing_man="$missing_man $o"
        grep -q -- "\`$o\`" <<<"$readme_table" || missing_readme="$missing_readme $o"
    done
    check "every flock option is in baton(1)'s table (missing:${missing_man:- none})" [ -z "$missing_man" ]
    check "every flock option is in README's table (missing:${missing_readme:- none})" [ -z "$missing_readme" ]
    # every option baton run --help lists is in the man page
    b run --help > "$TMP/help" 2>&1
    sed 's/\\-/-/g' "$MAN" > "$TMP/man.txt"
    missing=""
    for o in $(grep -oE -- "(^|[ ,])--?[a-zA-Z][a-z-]*" "$TMP/help" | tr -d ' ,' | sort -u); do
        grep -q -- "$o\b" "$TMP/man.txt" || missing="$missing $o"
    done
    check "every option of baton run --help is in baton(1) (missing:${missing:- none})" [ -z "$missing" ]
    check "baton(1) states the lease minimum and maximum" grep -q "at least 0.05 seconds, at most 4294967.295" "$TMP/man.txt"
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
