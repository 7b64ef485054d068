#!/bin/bash
# CLI tests for `baton elect`: run a command only while leading an election.
#
#   elect.sh zk PATH/TO/baton    the test ZooKeeper server ($BATON_TEST_SRV/zk/port),
#                                sessions of 4 s
#   elect.sh etcd PATH/TO/baton  the test etcd server ($BATON_TEST_SRV/etcd/port),
#                                the client's lease of 4 s in the session's part
#   elect.sh file|sqlite|redis|postgres|mysql PATH/TO/baton
#                                the elections the library builds on a lock plus a
#                                value: files in the temp dir, or the engine's
#                                fixture (postgres and mysql in mode=lease); leases
#                                of 4 s (baton elect -t 4); on the file engine a
#                                frozen leader keeps leading (no lease): that part
#                                is left out there
#
# Prints "N passed, N failed"; exits 1 on failure, 77 when the server is
# missing (unless BATON_REQUIRE_ALL=1).
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_elect_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

# CAND_OPTS: what a candidate adds (a lease); UNREACH: the engine on a closed
# port ("" = no server); FROZEN: a frozen leader is replaced (1) or not (0)
CAND_OPTS=()
FROZEN=1
fixture_port() {
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/$1/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test $1 server"
}
closed=$(/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 1)
case "$MODE" in
zk)
    fixture_port zk
    unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH BATON_ZK_AUTH
    ZK_SESSION_MS=4000
    URI="zk://127.0.0.1:$PORT?session_timeout_ms=$ZK_SESSION_MS"
    UNREACH="zk://127.0.0.1:$closed?connect_timeout_ms=1000"
    ;;
etcd)
    # the etcd fixture; a client's lease of 4 s plays the session's part
    fixture_port etcd
    unset BATON_DIR BATON_URI BATON_ETCD_PASSWORD
    ZK_SESSION_MS=4000
    URI="etcd://127.0.0.1:$PORT?ttl=4"
    UNREACH="etcd://127.0.0.1:$closed?connect_timeout_ms=1000"
    ;;
file|sqlite|redis|postgres|mysql)
    unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH
    ZK_SESSION_MS=4000
    CAND_OPTS=(-t 4)
    case "$MODE" in
    file) mkdir -p "$TMP/locks"; URI="file://$TMP/locks"; UNREACH=""; FROZEN=0; CAND_OPTS=() ;;
    sqlite) URI="sqlite://$TMP/elect.db"; UNREACH="" ;;
    redis) fixture_port redis; URI="redis://127.0.0.1:$PORT/0"; UNREACH="redis://127.0.0.1:$closed/0" ;;
    postgres)
        fixture_port postgres
        URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres?mode=lease"
        UNREACH="postgres://baton:baton-test@127.0.0.1:$closed/postgres" ;;
    mysql)
        fixture_port mysql
        URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton?mode=lease"
        UNREACH="mysql://baton:baton-test@127.0.0.1:$closed/baton" ;;
    esac
    ;;
*) echo "usage: $0 zk|etcd|file|sqlite|redis|postgres|mysql BATON" >&2; exit 2 ;;
esac
U=(-u "$URI")
# the URI as a child sees it in BATON_URI: without the password
URI_SHOWN=${URI/:baton-test@/@}
case "$URI" in *\?*) SEP='&' ;; *) SEP='?' ;; esac
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
P="elect-$$-"
# Bounds below only catch hangs: a session expiry is 4 s, and this runs on a
# shared 2-core machine beside JVMs, so every wait allows several times that.
SLACK_MS=8000

# A candidate: `baton elect --value VALUE NAME` whose command writes
# "$BATON_FENCE $BATON_LOCK" to $TMP/c.TAG.fence once it leads, traps SIGTERM
# (writes TERM to $TMP/c.TAG.got) and waits until $TMP/c.TAG.go exists.
# Sets CAND_PID (baton's pid).
start_candidate() { # TAG VALUE NAME [baton elect options...]
    local tag=$1 value=$2 name=$3; shift 3
    rm -f "$TMP/c.$tag.fence" "$TMP/c.$tag.go" "$TMP/c.$tag.got"
    "${B[@]}" elect "${U[@]}" "${CAND_OPTS[@]}" --value "$value" "$@" "$name" -- sh -c '
        trap "echo TERM >> \"$1.got\"; exit 0" TERM
        echo "$BATON_FENCE $BATON_LOCK" > "$1.fence.tmp" && mv "$1.fence.tmp" "$1.fence"
        while [ ! -e "$1.go" ]; do sleep 0.05; done' \
        sh "$TMP/c.$tag" >"$TMP/c.$tag.out" 2>"$TMP/c.$tag.err" &
    CAND_PID=$!
    BG_PIDS+=("$CAND_PID")
}
fence_of() { cut -d' ' -f1 "$TMP/c.$1.fence" 2>/dev/null; }
leads() { [ -e "$TMP/c.$1.fence" ]; }
# the current leader as `baton elect --leader` prints it ("TERM VALUE"), or ""
leader_line() { timeout -k 2 30 "${B[@]}" elect "${U[@]}" --leader "$1" 2>/dev/null; }
wait_leader() { # NAME WANT [TIMEOUT_S]: until --leader prints WANT
    local i t=${3:-15}
    for ((i = 0; i < t * 10; i++)); do [ "$(leader_line "$1")" = "$2" ] && return 0; sleep 0.1; done
    return 1
}

# ---- usage (any engine: refused before connecting) ---------------------------------
expect_rc 0 "baton elect --help" b elect --help
check "...shows --listen and --leader" eval 'grep -q -- "--listen" "$TMP/out" && grep -q -- "--leader" "$TMP/out"'
expect_rc 64 "elect without NAME" b elect "${U[@]}"
expect_rc 64 "elect without COMMAND" b elect "${U[@]}" "${P}u"
expect_rc 64 "elect --shared: an option of baton run" b elect "${U[@]}" --shared "${P}u" -- true
expect_rc 64 "elect --permits: an option of baton run" b elect "${U[@]}" --permits 2 "${P}u" -- true
expect_rc 64 "run --value: an option of baton elect" b run "${U[@]}" --value x "${P}u" -- true
expect_rc 64 "run --listen: an option of baton elect" b run "${U[@]}" --listen "${P}u"
expect_rc 64 "elect --listen with a COMMAND" b elect "${U[@]}" --listen "${P}u" -- true
expect_rc 64 "elect --listen and --leader together" b elect "${U[@]}" --listen --leader "${P}u"
expect_rc 64 "elect --value on two lines" b elect "${U[@]}" --value "$(printf 'a\nb')" "${P}u" -- true
expect_rc 64 "elect --value of 1025 bytes" b elect "${U[@]}" --value "$(printf '%01025d' 0)" "${P}u" -- true
expect_rc 64 "elect -n and -w together" b elect "${U[@]}" -n -w 1 "${P}u" -- true

# every option of baton elect --help is in baton(1), and the man page has the command
MAN="$HERE/../../docs/baton.1"
b elect --help > "$TMP/help" 2>&1
sed 's/\\-/-/g' "$MAN" > "$TMP/man.txt"
missing=""
for o in $(grep -oE -- "(^|[ ,])--?[a-zA-Z][a-z-]*" "$TMP/help" | tr -d ' ,' | sort -u); do
    grep -q -- "$o\b" "$TMP/man.txt" || missing="$missing $o"
done
check "every option of baton elect --help is in baton(1) (missing:${missing:- none})" [ -z "$missing" ]
check "baton(1) describes elect --leader and --listen" \
    eval 'grep -q "^\.BI \"elect --leader " "$TMP/man.txt" && grep -q "^\.BI \"elect --listen " "$TMP/man.txt"'

# ---- bad URIs, nobody leads ----------------------------------------------------------
if [ -n "$UNREACH" ]; then
    expect_rc 69 "[$MODE] elect on an unreachable server" b elect -u "$UNREACH" "${P}u" -- touch "$TMP/ran69"
    check "[$MODE] ...the command did not run" [ ! -e "$TMP/ran69" ]
fi
expect_rc 64 "[$MODE] elect with a bad URI option" b elect -u "${URI}${SEP}bogus=1" "${P}u" -- true
N="${P}none"
expect_rc 1 "[$MODE] --leader when nobody leads: exit 1" b elect "${U[@]}" --leader "$N"
check "[$MODE] ...and prints nothing" empty "$TMP/out"
expect_rc 0 "[$MODE] --listen -n when nobody leads" b elect "${U[@]}" --listen -n "$N"
check "[$MODE] ...prints 0" [ "$(cat "$TMP/out")" = 0 ]

# ---- exit status, environment ----------------------------------------------------
N="${P}exit"
expect_rc 0 "[$MODE] elect: child true" b elect "${U[@]}" "$N" -- true
expect_rc 42 "[$MODE] elect: child exit 42" b elect "${U[@]}" "$N" -- sh -c 'exit 42'
expect_rc 143 "[$MODE] elect: child killed by SIGTERM = 128+15" b elect "${U[@]}" "$N" -- sh -c 'kill -TERM $$'
expect_rc 127 "[$MODE] elect: command not found" b elect "${U[@]}" "$N" -- /nonexistent/command
expect_rc 3 "[$MODE] elect NAME -c CMD" b elect "${U[@]}" "$N" -c 'echo "$BATON_LOCK"; exit 3'
check "[$MODE] ...ran through sh -c, with BATON_LOCK" grep -qx "$N" "$TMP/out"
expect_rc 0 "[$MODE] elect: the child's environment" b elect "${U[@]}" "$N" -- env
check "[$MODE] ...BATON_LOCK is the name" grep -qx "BATON_LOCK=$N" "$TMP/out"
check "[$MODE] ...BATON_FENCE is decimal" grep -qE "^BATON_FENCE=[0-9]+$" "$TMP/out"
check "[$MODE] ...BATON_URI is the URI" grep -qx "BATON_URI=$URI_SHOWN" "$TMP/out"
# BATON_URI reaches the same election: a nested elect -n is busy
expect_rc 0 "[$MODE] nested elect" b elect "${U[@]}" "$N" -- sh -c '"$0" elect -n "$BATON_LOCK" -- true; echo "nested=$?"' "$BATON"
check "[$MODE] ...a nested elect -n on the same name is busy (exit 1)" grep -qx "nested=1" "$TMP/out"
expect_rc 1 "[$MODE] nobody leads once the runs are over" b elect "${U[@]}" --leader "$N"
# the default value is "HOST PID" of the leading baton
N="${P}default"
# (the command's parent is baton's shim; baton is the shim's parent)
expect_rc 0 "[$MODE] the default value" b elect "${U[@]}" "$N" -- sh -c '"$0" elect -u "$BATON_URI" --leader "$BATON_LOCK"; echo "fence=$BATON_FENCE"; echo "baton=$(ps -o ppid= -p $PPID | tr -d " ")"' "$BATON"
line=$(head -n 1 "$TMP/out")
f=$(sed -n 's/^fence=//p' "$TMP/out")
bp=$(sed -n 's/^baton=//p' "$TMP/out")
matches() { [[ "$1" =~ $2 ]]; }
check "[$MODE] ...--leader prints \"TERM HOST PID\", the leading baton's pid ($line)" matches "$line" "^$f [^ ]+ $bp\$"

# ---- two candidates on one NAME; --leader; --listen; a resign hands over ----------------
N="${P}two"
start_candidate a A "$N"
pa=$CAND_PID
if wait_file "$TMP/c.a.fence" 15; then
    fa=$(fence_of a)
    check "[$MODE] A leads and runs its command; BATON_LOCK is the name" [ "$(cut -d' ' -f2- "$TMP/c.a.fence")" = "$N" ]
    check "[$MODE] --leader prints \"TERM VALUE\" of A: \"$fa A\"" [ "$(leader_line "$N")" = "$fa A" ]
    # BATON_FENCE is the term --leader reports (above), and it is a ZooKeeper zxid
    check "[$MODE] BATON_FENCE is the term ($fa)" gt "$fa" 0
    rm -f "$TMP/ran"
    expect_rc 1 "[$MODE] elect -n while A leads: exit 1" b elect "${U[@]}" -n "$N" -- touch "$TMP/ran"
    check "[$MODE] ...quiet" empty "$TMP/err"
    expect_rc 7 "[$MODE] elect -n -E 7 while A leads" b elect "${U[@]}" -n -E 7 "$N" -- touch "$TMP/ran"
    expect_rc 1 "[$MODE] elect -w 1 while A leads: exit 1" b elect "${U[@]}" -w 1 "$N" -- touch "$TMP/ran"
    check "[$MODE] ...none of those commands ran" [ ! -e "$TMP/ran" ]
    # a signal cancels a wait to lead
    "${B[@]}" elect "${U[@]}" -w 60 "$N" -- touch "$TMP/ran" 2>"$TMP/sig.err" &
    spid=$!; BG_PIDS+=("$spid")
    sleep 0.5
    kill -TERM "$spid"
    wait_pid "$spid" 10
    check "[$MODE] SIGTERM while waiting to lead: exit 143 (rc $RC)" [ "$RC" = 143 ]
    check "[$MODE] ...its command did not run" [ ! -e "$TMP/ran" ]

    start_candidate b B "$N"
    pb=$CAND_PID
    sleep 1
    check "[$MODE] B waits while A leads" kill -0 "$pb"
    check "[$MODE] ...B's command has not run" not leads b
    check "[$MODE] --leader is still A" [ "$(leader_line "$N")" = "$fa A" ]

    # -w bounds the whole listen: it ends by itself, 0
    "${B[@]}" elect "${U[@]}" --listen -w 12 "$N" >"$TMP/listen.out" 2>"$TMP/listen.err" &
    lpid=$!; BG_PIDS+=("$lpid")
    t_listen=$(now_ms)
    for ((i = 0; i < 150; i++)); do [ -s "$TMP/listen.out" ] && break; sleep 0.1; done
    check "[$MODE] --listen prints the leader first: \"$fa A\"" [ "$(head -n 1 "$TMP/listen.out")" = "$fa A" ]

    touch "$TMP/c.a.go"   # A's command exits: A resigns, B leads
    wait_pid "$pa" 15
    check "[$MODE] A exits with its command's status 0 (rc $RC)" [ "$RC" = 0 ]
    if wait_file "$TMP/c.b.fence" 15; then
        fb=$(fence_of b)
        check "[$MODE] B leads after A resigned, with a higher term ($fb > $fa)" gt "$fb" "$fa"
        check "[$MODE] --leader prints \"$fb B\"" wait_leader "$N" "$fb B"
        check "[$MODE] --listen printed the change to \"$fb B\"" \
            eval 'for ((i = 0; i < 100; i++)); do grep -qx "$fb B" "$TMP/listen.out" && break; sleep 0.1; done; grep -qx "$fb B" "$TMP/listen.out"'
        touch "$TMP/c.b.go"
        wait_pid "$pb" 15
        check "[$MODE] B exits 0 (rc $RC)" [ "$RC" = 0 ]
    else
        bad "[$MODE] B never led: $(cat "$TMP/c.b.err")"
    fi
    wait_pid "$lpid" 30
    el=$(( $(now_ms) - t_listen ))
    check "[$MODE] --listen -w 12 ends by itself with 0 (rc $RC)" [ "$RC" = 0 ]
    # A, then B (an instant without a leader in between may be seen or not), then nobody
    got=$(grep -v -x 0 "$TMP/listen.out" | tr '\n' '|')
    check "[$MODE] --listen: A, then B, in that order ($(tr '\n' '|' <"$TMP/listen.out"))" [ "$got" = "$fa A|$fb B|" ]
    check "[$MODE] --listen: nobody (0) once B's command exited" [ "$(tail -n 1 "$TMP/listen.out")" = 0 ]
    expect_rc 1 "[$MODE] --leader: nobody leads at the end" b elect "${U[@]}" --leader "$N"
else
    bad "[$MODE] A never led: $(cat "$TMP/c.a.err")"
fi

# ---- --listen -w SECS bounds the whole listen ----------------------------------------
# (it used to wait SECS for each change, so a busy election kept it listening)
# Leaders change about every second for 12 s; a --listen -w 4 must end while
# they still change, long before the changes stop.
N="${P}busy"
( for i in $(seq 1 12); do "${B[@]}" elect "${U[@]}" --value "v$i" "$N" -- sleep 0.5; sleep 0.3; done
  : > "$TMP/busy.done" ) >/dev/null 2>&1 &
BG_PIDS+=("$!")
rm -f "$TMP/busy.done"
sleep 0.5
"${B[@]}" elect "${U[@]}" --listen -w 4 "$N" >"$TMP/busy.out" 2>"$TMP/busy.err" &
lpid=$!; BG_PIDS+=("$lpid")
wait_pid "$lpid" 30
check "[$MODE] --listen -w 4 on a busy election: exit 0 (rc $RC)" [ "$RC" = 0 ]
check "[$MODE] ...it saw changes ($(wc -l <"$TMP/busy.out") lines)" [ "$(grep -c "^[0-9]* v" "$TMP/busy.out")" -ge 2 ]
check "[$MODE] ...and ended while the leaders still changed" [ ! -e "$TMP/busy.done" ]
wait_file "$TMP/busy.done" 60

# ---- leadership lost: the leader's baton frozen past the session timeout ------------------
N="${P}lost"
[ "$FROZEN" = 1 ] && start_candidate l1 L1 "$N" --kill-after 5
p1=$CAND_PID
if [ "$FROZEN" = 0 ]; then
    :   # no lease: a frozen leader leads on (its process and lock live)
elif wait_file "$TMP/c.l1.fence" 15; then
    f1=$(fence_of l1)
    start_candidate l2 L2 "$N" -w 60
    p2=$CAND_PID
    sleep 0.5
    check "[$MODE] L2 waits while L1 leads" not leads l2
    kill -STOP "$p1"
    t0=$(now_ms)
    # the server expires L1's session after 4 s; then L2 leads
    if wait_file "$TMP/c.l2.fence" $(( (ZK_SESSION_MS + SLACK_MS) / 1000 + 5 )); then
        el=$(( $(now_ms) - t0 ))
        f2=$(fence_of l2)
        check "[$MODE] L2 leads once L1's session expired ($el ms)" [ "$el" -lt $((ZK_SESSION_MS + SLACK_MS)) ]
        check "[$MODE] ...with a higher term ($f2 > $f1)" gt "$f2" "$f1"
        check "[$MODE] --leader says L2" wait_leader "$N" "$f2 L2"
    else
        bad "[$MODE] L2 never led while L1 was frozen: $(cat "$TMP/c.l2.err")"
    fi
    kill -CONT "$p1"
    wait_pid "$p1" 20
    check "[$MODE] L1 resumed: exit 75 (rc $RC)" [ "$RC" = 75 ]
    # stopped past its session: the shim's watchdog killed the command
    check "[$MODE] ...the watchdog killed its command" grep -q "watchdog killed" "$TMP/c.l1.err"
    check "[$MODE] L2 still leads" eval 'kill -0 "$p2" && [ "$(leader_line "$N")" = "$f2 L2" ]'
    touch "$TMP/c.l2.go"
    wait_pid "$p2" 15
    check "[$MODE] L2 exits 0 (rc $RC)" [ "$RC" = 0 ]
else
    bad "[$MODE] L1 never led: $(cat "$TMP/c.l1.err")"
    kill -KILL "$p1" 2>/dev/null
fi

# ---- kill -9 of the leader: the next candidate leads once its session expires ----------
N="${P}kill"
start_candidate k1 K1 "$N"
p1=$CAND_PID
if wait_file "$TMP/c.k1.fence" 15; then
    f1=$(fence_of k1)
    start_candidate k2 K2 "$N" -w 60
    p2=$CAND_PID
    sleep 0.5
    kill -KILL "$p1"; wait "$p1" 2>/dev/null
    t0=$(now_ms)
    if wait_file "$TMP/c.k2.fence" $(( (ZK_SESSION_MS + SLACK_MS) / 1000 + 5 )); then
        el=$(( $(now_ms) - t0 ))
        f2=$(fence_of k2)
        check "[$MODE] kill -9 of the leader: K2 leads within the session timeout + slack ($el ms)" \
            [ "$el" -lt $((ZK_SESSION_MS + SLACK_MS)) ]
        check "[$MODE] ...with a higher term ($f2 > $f1)" gt "$f2" "$f1"
    else
        bad "[$MODE] K2 never led after K1 was killed: $(cat "$TMP/c.k2.err")"
    fi
    touch "$TMP/c.k1.go" "$TMP/c.k2.go"
    wait_pid "$p2" 15
    check "[$MODE] K2 exits 0 (rc $RC)" [ "$RC" = 0 ]
else
    bad "[$MODE] K1 never led: $(cat "$TMP/c.k1.err")"
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
