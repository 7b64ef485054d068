# The shell harness of the CLI suites (cli.sh, flock.sh): sourced after the
# suite sets MODE, BATON and TMP. Counts, checks, a baton with default signal
# dispositions, bounded runs, and waits on files and background jobs.

PASS=0
FAIL=0
BG_PIDS=()
PW_SRV=""
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REDIS_SH="$HERE/../servers/redis.sh"

cleanup() {
    local p
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
    [ -n "$PW_SRV" ] && "$REDIS_SH" stop "$PW_SRV" >/dev/null 2>&1
    [ $FAIL -eq 0 ] && rm -rf "$TMP"
}
trap cleanup EXIT

ok()   { PASS=$((PASS + 1)); echo "ok   - $*" >&2; }
bad()  { FAIL=$((FAIL + 1)); echo "FAIL - $*" >&2; }
check() { # DESC COND...
    local d=$1; shift
    if "$@"; then ok "$d"; else bad "$d"; fi
}
skip_or_fail() {
    if [ "${BATON_REQUIRE_ALL:-}" = 1 ]; then
        echo "FAIL: $* (BATON_REQUIRE_ALL=1)" >&2; echo "0 passed, 1 failed"; exit 1
    fi
    echo "SKIP: $*" >&2; echo "0 passed, 0 failed"; exit 77
}

now_ms() { date +%s%3N; }
not() { ! "$@"; }
empty() { [ ! -s "$1" ]; }
gt() { [[ "$1" =~ ^[0-9]+$ ]] && [[ "$2" =~ ^[0-9]+$ ]] && [ "$1" -gt "$2" ]; }

# Runs baton with default signal dispositions (a background job of a
# non-interactive shell would otherwise start with SIGINT ignored).
# B is used for background jobs, so that $! is baton's own pid (env execs it).
B=(env --default-signal=INT,QUIT,TERM,HUP "$BATON")
b() { "${B[@]}" "$@"; }

# expect_rc WANT DESC CMD... : runs CMD (stdout/stderr to $TMP/out, $TMP/err)
expect_rc() {
    local want=$1 desc=$2 rc; shift 2
    if [ "$1" = b ]; then shift; set -- "${B[@]}" "$@"; fi
    # never hang the suite: 30 s is far above anything expected here
    timeout -k 2 30 "$@" >"$TMP/out" 2>"$TMP/err"; rc=$?
    [ $rc = 124 ] && echo "   (timed out after 30 s)" >>"$TMP/err"
    if [ "$rc" = "$want" ]; then ok "$desc (exit $rc)"
    else bad "$desc: exit $rc, want $want; stderr: $(head -c 300 "$TMP/err")"; fi
}

wait_file() { # FILE [TIMEOUT_S]: 0 when it exists
    local f=$1 t=${2:-10} i
    for ((i = 0; i < t * 20; i++)); do [ -e "$f" ] && return 0; sleep 0.05; done
    return 1
}

# wait_pid PID TIMEOUT_S: waits for a background job; sets RC (or 999 on timeout)
wait_pid() {
    local pid=$1 t=${2:-10} i
    for ((i = 0; i < t * 20; i++)); do
        if not kill -0 "$pid" 2>/dev/null; then wait "$pid"; RC=$?; return 0; fi
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    RC=999
    return 1
}
