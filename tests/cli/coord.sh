#!/bin/bash
# The coordination commands of issue 24, through the CLI on a real engine:
#  - usage errors (unknown operation, missing NAME, bad numbers, an option
#    of another command) exit 64 before the engine is asked;
#  - baton value set/get/delete: versions grow (over a delete and
#    re-creation too), --create and --if-version exit 1 when not met, get
#    and delete of an absent value exit 1, '-' takes stdin's bytes as they
#    are, options anywhere;
#  - baton value watch: the value now first, then changes; after a burst of
#    sets it ends on the last one; newlines escaped, -z NUL-framed, a delete
#    is "0" with --version; -- COMMAND gets BATON_VALUE, BATON_VERSION and
#    the value on stdin; -w ends it with 0; SIGTERM while waiting ends it;
#  - baton counter get/add/set: concurrent adds are all counted, set
#    --if-version, a non-number value is 65;
#  - baton member / members [--watch]: id and value listed sorted, a taken
#    id is 1, the member leaves when COMMAND ends (its status kept), a
#    killed baton member disappears, BATON_MEMBER_ID; --watch prints each
#    list followed by an empty line;
#  - baton queue put/take/size: FIFO, take -- false gives the item back
#    (exit 1, taken again later), take -- CMD gets the item on stdin and
#    BATON_FENCE (growing), a killed taker's item comes back, -n/-w on an
#    empty queue is 1, two concurrent takers never get one item;
#  - baton barrier -n 2: both run their command once both entered; alone
#    with -w it gives up (1) without running it;
#  - baton status NAME shows the value, members and waiting items;
#  - engines with leases: a baton member or queue take stopped past its lease
#    has its command killed by the watchdog (75); the member is gone, the
#    item back.
#
#   coord.sh file|sqlite|redis|etcd|postgres|mysql|zk PATH/TO/baton
#   (the servers: the test fixtures, $BATON_TEST_SRV/ENGINE/port;
#   every name of a run starts with c<pid>-)
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
case $BATON in /*) ;; *) BATON=$PWD/$BATON ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_coord_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH BATON_HOLDS BATON_HOLD_PID
port_of() { cat "${BATON_TEST_SRV:-/nonexistent}/$1/port" 2>/dev/null; }
case "$MODE" in
file) URI="file://$TMP/locks" ;;
sqlite) URI="sqlite://$TMP/coord.db" ;;
redis)
    PORT=$(port_of redis) || skip_or_fail "no test redis server"
    URI="redis://127.0.0.1:$PORT/0"
    ;;
etcd)
    PORT=$(port_of etcd) || skip_or_fail "no test etcd server"
    # a client lease of 2 s: a killed member is gone within ~2 s
    URI="etcd://127.0.0.1:$PORT?ttl=2"
    ;;
postgres)
    PORT=$(port_of postgres) || skip_or_fail "no test postgres server"
    URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres"
    ;;
mysql)
    PORT=$(port_of mysql) || skip_or_fail "no test mysql server"
    URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton"
    ;;
zk)
    PORT=$(port_of zk) || skip_or_fail "no test zk server"
    # sessions of 2 s: a killed member is gone within them
    URI="zk://127.0.0.1:$PORT?session_timeout_ms=2000"
    ;;
*) echo "usage: $0 file|sqlite|redis|etcd|postgres|mysql|zk BATON" >&2; exit 2 ;;
esac
U=(-u "$URI")
# every name of this run starts with P: a shared server keeps other runs' names
P="c$$-"
bt() { "$BATON" "$@"; }

# wait_for DESC TIMEOUT_S CMD...: polls CMD until it succeeds; checks it did
wait_for() {
    local d=$1 t=$2 i; shift 2
    for ((i = 0; i < t * 20; i++)); do "$@" && { ok "$d"; return 0; }; sleep 0.05; done
    bad "$d (not within $t s)"
    return 1
}
lines_of() { wc -l <"$1" | tr -d ' '; }
members_are() { # WANT: the output of baton members g, tabs as '|'
    [ "$(bt members "${U[@]}" "$1" 2>/dev/null | tr '\t\n' '| ')" = "$2" ]
}

# ---- usage errors: 64, the engine not asked -----------------------------------
expect_rc 64 "value: missing operation" b value
expect_rc 64 "value frob: unknown operation" b value frob k
check "...names the operations" grep -q "set, get, delete, watch" "$TMP/err"
expect_rc 64 "value get: missing NAME" b value get "${U[@]}"
expect_rc 64 "value set: missing VALUE" b value set "${U[@]}" k
expect_rc 64 "value set --if-version abc" b value set --if-version abc k v
expect_rc 64 "value set --if-version 0 (0 is absent: --create)" b value set --if-version 0 k v
expect_rc 64 "value set --if-version 3 --create" b value set --if-version 3 --create k v
expect_rc 64 "value get --create: not an option of get" b value get --create k
expect_rc 64 "value get --frob: unrecognized" b value get --frob k
expect_rc 64 "value get a b: too many" b value get a b
expect_rc 64 "value watch k --: missing COMMAND" b value watch k --
expect_rc 64 "value watch -w x" b value watch -w x k
expect_rc 64 "counter: missing operation" b counter
expect_rc 64 "counter add k abc: bad number" b counter add k abc
expect_rc 64 "counter add k 99999999999999999999: bad number" b counter add k 99999999999999999999
expect_rc 64 "counter add k: missing N" b counter add k
expect_rc 64 "counter frob" b counter frob k
expect_rc 64 "member: missing GROUP" b member
expect_rc 64 "member g: missing COMMAND" b member g
expect_rc 64 "member --id 'a b': bad id" b member --id 'a b' g -- true
expect_rc 64 "members: missing GROUP" b members
expect_rc 64 "members -w 1 without --watch" b members -w 1 g
expect_rc 64 "queue: missing operation" b queue
expect_rc 64 "queue frob" b queue frob q
expect_rc 64 "queue take: missing NAME" b queue take
expect_rc 64 "queue take -w abc" b queue take -w abc q
expect_rc 64 "queue take -n -w 1" b queue take -n -w 1 q
expect_rc 64 "queue put q: missing DATA" b queue put q
expect_rc 64 "queue put q '': an item has a byte" b queue put "${U[@]}" q ''
expect_rc 64 "barrier without -n" b barrier b -- true
expect_rc 64 "barrier -n 0" b barrier -n 0 b -- true
expect_rc 64 "barrier -n 2 b: missing COMMAND" b barrier -n 2 b
for c in value counter queue member members barrier; do
    expect_rc 0 "$c --help" b $c --help
    check "...prints a usage" grep -q "^usage: baton $c" "$TMP/out"
done

# an engine of this build that does not carry all three yet: the rest is a skip
prims=$("$BATON" engines "$MODE" 2>/dev/null | sed -n 's/^ *primitives: *//p')
for p in value group queue; do
    if [[ ", $prims, " != *", $p, "* ]]; then
        [ "${BATON_REQUIRE_ALL:-}" = 1 ] && bad "the $MODE engine has no $p in this build"
        echo "SKIP: the $MODE engine has no $p in this build ($prims)" >&2
        echo "$PASS passed, $FAIL failed"
        [ $FAIL -eq 0 ] && exit 77
        exit 1
    fi
done

# ---- value set/get/delete --------------------------------------------------------
expect_rc 1 "value get of an absent value: 1" b value get "${U[@]}" "${P}cfg"
check "...nothing on stdout" empty "$TMP/out"
expect_rc 0 "value set cfg v1" b value set "${U[@]}" "${P}cfg" v1
expect_rc 0 "value get cfg" b value get "${U[@]}" "${P}cfg"
check "...prints v1 and a newline" [ "$(cat "$TMP/out")" = v1 -a "$(wc -c <"$TMP/out")" = 3 ]
expect_rc 0 "value get --version cfg (options after NAME too: -u last)" b value get "${P}cfg" --version "${U[@]}"
V1=$(head -1 "$TMP/out")
check "...the version, then the value ($(tr '\n' '|' <"$TMP/out"))" [ "$(sed -n 2p "$TMP/out")" = v1 -a "$(lines_of "$TMP/out")" = 2 ]
check "...a version above 0 ($V1)" gt "$V1" 0
expect_rc 0 "value -u URI get NAME: options before the operation too" b value "${U[@]}" get "${P}cfg"
check "...v1" [ "$(cat "$TMP/out")" = v1 ]
expect_rc 1 "value set --create on a set value: 1" b value set --create "${U[@]}" "${P}cfg" other
check "...says it exists" grep -q "exists" "$TMP/err"
expect_rc 1 "value set --if-version (wrong): 1" b value set --if-version $((V1 + 7)) "${U[@]}" "${P}cfg" other
expect_rc 0 "value get: unchanged" b value get "${U[@]}" "${P}cfg"
check "...still v1" [ "$(cat "$TMP/out")" = v1 ]
expect_rc 0 "value set --if-version $V1 --version" b value set --if-version "$V1" --version "${U[@]}" "${P}cfg" v2
V2=$(cat "$TMP/out")
check "...prints a larger version ($V2 > $V1)" gt "$V2" "$V1"
expect_rc 1 "value delete --if-version (wrong): 1" b value delete --if-version "$V1" "${U[@]}" "${P}cfg"
expect_rc 0 "value delete" b value delete "${U[@]}" "${P}cfg"
expect_rc 1 "value get after delete: 1" b value get "${U[@]}" "${P}cfg"
expect_rc 1 "value delete of an absent value: 1" b value delete "${U[@]}" "${P}cfg"
expect_rc 0 "value set --create on an absent value" b value set --create --version "${U[@]}" "${P}cfg" v3
V3=$(cat "$TMP/out")
expect_rc 0 "status cfg" b status "${U[@]}" "${P}cfg"
check "...shows the value's version and size" sh -c 'grep -qx "value_version: $1" "$2" && grep -qx "value_bytes: 2" "$2"' sh "$V3" "$TMP/out"
expect_rc 0 "status --json cfg" b status --json "${U[@]}" "${P}cfg"
check "...value_version, members, items_waiting keys" grep -q "\"value_version\":$V3,\"value_bytes\":2,\"members\":0,\"items_waiting\":0[,}]" "$TMP/out"
check "...its version is above the deleted one's ($V3 > $V2)" gt "$V3" "$V2"
printf 'line 1\nline 2\n\\ and a tab\t.' >"$TMP/multi"
bt value set "${U[@]}" "${P}multi" - <"$TMP/multi"
expect_rc 0 "value set multi - (stdin), get --raw" b value get --raw "${U[@]}" "${P}multi"
check "...the same bytes" cmp -s "$TMP/out" "$TMP/multi"
bt value set "${U[@]}" -- "${P}dash" -x
expect_rc 0 "value set -- NAME -VALUE: '--' ends the options" b value get "${U[@]}" "${P}dash"
check "...-x" [ "$(cat "$TMP/out")" = -x ]

# ---- value watch -------------------------------------------------------------------
bt value set "${U[@]}" "${P}w" first
"${B[@]}" value watch --version -w 20 "${U[@]}" "${P}w" >"$TMP/watch.out" 2>"$TMP/watch.err" &
WP=$!; BG_PIDS+=("$WP")
wait_for "value watch prints the value now first" 10 grep -q ' first$' "$TMP/watch.out"
for i in 1 2 3 4 5 6 7 8 9 10; do bt value set "${U[@]}" "${P}w" "burst $i"; done
wait_for "...and ends on the last of a burst of 10 sets" 10 sh -c '[ "$(tail -1 "$1" | cut -d" " -f2-)" = "burst 10" ]' sh "$TMP/watch.out"
bt value set "${U[@]}" "${P}w" "$(printf 'two\nlines\\')"
wait_for "...a newline and a backslash escaped" 10 sh -c 'cut -d" " -f2- "$1" | grep -qxF "two\\nlines\\\\"' sh "$TMP/watch.out"
bt value delete "${U[@]}" "${P}w"
wait_for "...a delete is '0'" 10 sh -c '[ "$(tail -1 "$1")" = 0 ]' sh "$TMP/watch.out"
check "...versions grow, line by line" awk '$1 != 0 && $1 + 0 <= last + 0 { exit 1 } $1 != 0 { last = $1 }' "$TMP/watch.out"
kill -TERM "$WP"; wait_pid "$WP" 10
check "...SIGTERM ends the watch (exit $RC)" [ "$RC" = 143 ]
expect_rc 0 "value watch -w 0.5: exits 0 when the time is up" b value watch -w 0.5 "${U[@]}" "${P}w"
check "...an absent value prints an empty line" [ "$(cat "$TMP/out")" = "" -a "$(lines_of "$TMP/out")" = 1 ]
bt value set "${U[@]}" "${P}z" "$(printf 'a\nb')"
expect_rc 0 "value watch -z -w 0.3" b value watch -z -w 0.3 "${U[@]}" "${P}z"
check "...the value as it is, ended by a NUL" cmp -s "$TMP/out" <(printf 'a\nb\0')
# -- COMMAND: consul watch's handler
bt value set "${U[@]}" "${P}conf" "a=1"
"${B[@]}" value watch -w 20 "${U[@]}" "${P}conf" -- sh -c \
    'printf "%s|%s|%s\n" "$BATON_VERSION" "$BATON_VALUE" "$(cat)" >>"$1"' sh "$TMP/handler.log" \
    >"$TMP/wcmd.out" 2>"$TMP/wcmd.err" &
WP=$!; BG_PIDS+=("$WP")
wait_for "value watch -- CMD: runs CMD for the value now" 10 grep -qs '|a=1|a=1$' "$TMP/handler.log"
for i in 2 3 4 5; do bt value set "${U[@]}" "${P}conf" "a=$i"; done
wait_for "...and ends on the last value of a burst (env and stdin)" 10 sh -c '[ "$(tail -1 "$1" | cut -d"|" -f2-)" = "a=5|a=5" ]' sh "$TMP/handler.log"
bt value delete "${U[@]}" "${P}conf"
wait_for "...a delete: BATON_VERSION=0, empty value" 10 sh -c '[ "$(tail -1 "$1")" = "0||" ]' sh "$TMP/handler.log"
kill -TERM "$WP"; wait_pid "$WP" 10
check "...SIGTERM ends it (exit $RC)" [ "$RC" = 143 ]

# ---- counter -------------------------------------------------------------------------
expect_rc 0 "counter get of an absent counter" b counter get "${U[@]}" "${P}hits"
check "...0" [ "$(cat "$TMP/out")" = 0 ]
expect_rc 0 "counter add hits 5" b counter add "${U[@]}" "${P}hits" 5
check "...prints 5" [ "$(cat "$TMP/out")" = 5 ]
expect_rc 0 "counter add hits -7 (a negative operand, not an option)" b counter add "${P}hits" -7 "${U[@]}"
check "...prints -2" [ "$(cat "$TMP/out")" = -2 ]
pids=()
for j in 1 2 3 4; do
    ( for i in $(seq 10); do "$BATON" counter add "${U[@]}" "${P}hits" 1 >/dev/null || echo fail; done ) >"$TMP/add.$j" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
expect_rc 0 "counter get after 4 x 10 concurrent adds" b counter get --version "${U[@]}" "${P}hits"
CV=$(head -1 "$TMP/out")
check "...38: none lost ($(tail -1 "$TMP/out"); failures: $(cat "$TMP"/add.* | wc -l))" [ "$(tail -1 "$TMP/out")" = 38 ]
expect_rc 1 "counter set --if-version (wrong)" b counter set --if-version $((CV + 5)) "${U[@]}" "${P}hits" 100
expect_rc 0 "counter set --if-version (right)" b counter set --if-version "$CV" "${U[@]}" "${P}hits" 100
expect_rc 0 "counter get" b counter get "${U[@]}" "${P}hits"
check "...100" [ "$(cat "$TMP/out")" = 100 ]
bt value set "${U[@]}" "${P}notnum" abc
expect_rc 65 "counter get of a value that is not a number: 65" b counter get "${U[@]}" "${P}notnum"

# ---- member / members ---------------------------------------------------------------
# mem TAG ID VALUE: a member whose command writes its env to $TMP/TAG.env and
# waits for $TMP/TAG.go, then exits with the number in it
mem() {
    local tag=$1 id=$2 val=$3
    rm -f "$TMP/$tag.env" "$TMP/$tag.go"
    "${B[@]}" member "${U[@]}" --id "$id" --value "$val" -t 2 "${P}svc" -- sh -c \
        'echo "$BATON_GROUP $BATON_MEMBER_ID" >"$1.env.tmp"; mv "$1.env.tmp" "$1.env"; while [ ! -s "$1.go" ]; do sleep 0.05; done; exit $(cat "$1.go")' \
        sh "$TMP/$tag" >"$TMP/$tag.out" 2>"$TMP/$tag.err" &
    MP=$!; BG_PIDS+=("$MP")
    wait_file "$TMP/$tag.env" 15
}
expect_rc 0 "members of an empty group" b members "${U[@]}" "${P}svc"
check "...print nothing" empty "$TMP/out"
mem m1 node-b "10.0.0.2:80"; P1=$MP
check "member: COMMAND gets BATON_GROUP and BATON_MEMBER_ID ($(cat "$TMP/m1.env" 2>/dev/null))" [ "$(cat "$TMP/m1.env" 2>/dev/null)" = "${P}svc node-b" ]
mem m2 node-a "10.0.0.1:80"; P2=$MP
wait_for "members: both, sorted by id, ID<TAB>VALUE" 10 members_are "${P}svc" "node-a|10.0.0.1:80 node-b|10.0.0.2:80 "
expect_rc 1 "member with a live member's id: 1" b member "${U[@]}" --id node-a "${P}svc" -- true
check "...says so" grep -q "node-a" "$TMP/err"
"${B[@]}" members --watch -w 30 "${U[@]}" "${P}svc" >"$TMP/mw.out" 2>"$TMP/mw.err" &
MW=$!; BG_PIDS+=("$MW")
wait_for "members --watch: the list now, then an empty line" 10 grep -qsx '' "$TMP/mw.out"
echo 3 >"$TMP/m2.go"
wait_pid "$P2" 15
check "member: COMMAND's status is baton's (exit $RC)" [ "$RC" = 3 ]
wait_for "...it left when COMMAND ended" 10 members_are "${P}svc" "node-b|10.0.0.2:80 "
wait_for "members --watch: the list again after the change" 10 sh -c '[ "$(grep -c "^$" "$1")" -ge 2 ] && [ "$(awk "BEGIN{RS=\"\"} END{print}" "$1" | tr "\t\n" "| ")" = "node-b|10.0.0.2:80 " ]' sh "$TMP/mw.out"
mem m3 node-c "x"; P3=$MP
wait_for "a third member joins" 10 members_are "${P}svc" "node-b|10.0.0.2:80 node-c|x "
{ kill -KILL "$P3"; wait "$P3"; } 2>/dev/null
wait_for "a killed baton member disappears (its lease: 2 s)" 20 members_are "${P}svc" "node-b|10.0.0.2:80 "
expect_rc 0 "status svc" b status "${U[@]}" "${P}svc"
check "...shows the members" grep -qx 'members: 1' "$TMP/out"
echo 0 >"$TMP/m1.go"; wait_pid "$P1" 15
check "the last member exits 0 ($RC)" [ "$RC" = 0 ]
wait_for "members --watch ends on the empty list (an empty line alone)" 10 sh -c 'tail -3 "$1" | tr "\n" "|" | grep -qx "node-b	10.0.0.2:80|||"' sh "$TMP/mw.out"
kill -TERM "$MW"; wait_pid "$MW" 10

# ---- queue --------------------------------------------------------------------------
expect_rc 0 "queue size of a new queue" b queue size "${U[@]}" "${P}jobs"
check "...0" [ "$(cat "$TMP/out")" = 0 ]
expect_rc 1 "queue take -n of an empty queue: 1" b queue take -n "${U[@]}" "${P}jobs"
expect_rc 1 "queue take -w 0.5 of an empty queue: 1" b queue take -w 0.5 "${U[@]}" "${P}jobs"
for j in a b c; do bt queue put "${U[@]}" "${P}jobs" "job $j"; done
expect_rc 0 "queue size after 3 puts (-u before the operation)" b queue "${U[@]}" size "${P}jobs"
check "...3" [ "$(cat "$TMP/out")" = 3 ]
expect_rc 0 "status jobs" b status "${U[@]}" "${P}jobs"
check "...items_waiting: 3" grep -qx 'items_waiting: 3' "$TMP/out"
expect_rc 0 "queue take (no COMMAND): prints the oldest" b queue take "${U[@]}" "${P}jobs"
check "...job a" [ "$(cat "$TMP/out")" = "job a" ]
expect_rc 1 "queue take -- false: COMMAND's status" b queue take "${U[@]}" "${P}jobs" -- false
bt queue size "${U[@]}" "${P}jobs" >"$TMP/size"
check "...the item went back (size $(cat "$TMP/size"))" [ "$(cat "$TMP/size")" = 2 ]
expect_rc 0 "queue take -- CMD: the item on stdin" b queue take "${U[@]}" "${P}jobs" -- sh -c 'cat >"$1"; echo "$BATON_QUEUE $BATON_FENCE" >"$1.env"' sh "$TMP/item1"
F1=$(cut -d' ' -f2 "$TMP/item1.env")
expect_rc 0 "queue take -- CMD again" b queue take "${U[@]}" "${P}jobs" -- sh -c 'cat >"$1"; echo "$BATON_QUEUE $BATON_FENCE" >"$1.env"' sh "$TMP/item2"
F2=$(cut -d' ' -f2 "$TMP/item2.env")
check "...both of b and c were taken, the failed one again ($(cat "$TMP/item1") / $(cat "$TMP/item2"))" \
    [ "$(printf '%s\n' "$(cat "$TMP/item1")" "$(cat "$TMP/item2")" | sort | tr '\n' ' ')" = "job b job c " ]
check "...BATON_QUEUE" [ "$(cut -d' ' -f1 "$TMP/item1.env")" = "${P}jobs" ]
check "...BATON_FENCE grows ($F1 < $F2)" gt "$F2" "$F1"
bt queue size "${U[@]}" "${P}jobs" >"$TMP/size"
check "...done: the queue is empty ($(cat "$TMP/size"))" [ "$(cat "$TMP/size")" = 0 ]
printf 'x\ny\n' | bt queue put "${U[@]}" "${P}jobs" -
expect_rc 0 "queue put - (stdin), take -- cat" b queue take "${U[@]}" "${P}jobs" -- cat
check "...the same bytes" cmp -s "$TMP/out" <(printf 'x\ny\n')
# a taker killed while its COMMAND runs: the item comes back
bt queue put "${U[@]}" "${P}jobs" "survivor"
rm -f "$TMP/tk.started"
"${B[@]}" queue take -t 2 "${U[@]}" "${P}jobs" -- sh -c 'cat >/dev/null; touch "$1"; sleep 60' sh "$TMP/tk.started" >/dev/null 2>&1 &
TK=$!; BG_PIDS+=("$TK")
wait_file "$TMP/tk.started" 15
bt queue size "${U[@]}" "${P}jobs" >"$TMP/size"
check "a taken item is not waiting (size $(cat "$TMP/size"))" [ "$(cat "$TMP/size")" = 0 ]
kill -KILL "$TK"; wait "$TK" 2>/dev/null
expect_rc 0 "a killed taker's item comes back (lease 2 s; take -w 20)" b queue take -w 20 "${U[@]}" "${P}jobs"
check "...survivor" [ "$(cat "$TMP/out")" = survivor ]
# two takers at once, slow commands: each item to one taker
for j in 1 2 3 4 5 6; do bt queue put "${U[@]}" "${P}par" "p$j"; done
: >"$TMP/par.log"
tp=()
for t in 1 2; do
    ( while "$BATON" queue take -n "${U[@]}" "${P}par" -- sh -c 'v=$(cat); echo "$v" >>"$1"; sleep 0.3' sh "$TMP/par.log"; do :; done ) &
    tp+=($!)
done
for p in "${tp[@]}"; do wait_pid "$p" 30; done
check "two concurrent takers: 6 items, each taken once ($(sort "$TMP/par.log" | tr '\n' ' '))" \
    [ "$(sort "$TMP/par.log" | tr '\n' ' ')" = "p1 p2 p3 p4 p5 p6 " ]

# ---- a stopped member or taker (engines with leases) ---------------------------
# baton stopped past its lease: run.c's watchdog kills the command before the
# lease can run out (75), the member is gone, the item back in the queue
# stopped past the lease (zk: past the 2 s session)
STOP_S=3
[ "$MODE" = zk ] && STOP_S=4
if [ "$MODE" != file ]; then
    "${B[@]}" member -t 1 --id stopped "${U[@]}" "${P}lossy" -- sleep 60 >/dev/null 2>"$TMP/stop.err" &
    SP=$!; BG_PIDS+=("$SP")
    wait_for "a member joins (lease 1 s)" 10 members_are "${P}lossy" "stopped| "
    kill -STOP "$SP"; sleep "$STOP_S"; kill -CONT "$SP"
    wait_pid "$SP" 20
    check "baton member stopped past its lease: 75 ($RC)" [ "$RC" = 75 ]
    check "...the watchdog says so" grep -q "watchdog killed the command" "$TMP/stop.err"
    wait_for "...and the member is gone" 10 members_are "${P}lossy" ""
    bt queue put "${U[@]}" "${P}lossy" "held item"
    "${B[@]}" queue take -t 1 "${U[@]}" "${P}lossy" -- sh -c 'cat >/dev/null; sleep 60' >/dev/null 2>"$TMP/stop.err" &
    SP=$!; BG_PIDS+=("$SP")
    wait_for "a taker holds the item" 10 sh -c '[ "$("$1" queue size -u "$2" "$3")" = 0 ]' sh "$BATON" "$URI" "${P}lossy"
    kill -STOP "$SP"; sleep "$STOP_S"; kill -CONT "$SP"
    wait_pid "$SP" 20
    check "baton queue take stopped past the item's lease: 75 ($RC)" [ "$RC" = 75 ]
    expect_rc 0 "...the item is back" b queue take -w 10 "${U[@]}" "${P}lossy"
    check "...held item" [ "$(cat "$TMP/out")" = "held item" ]
fi

# ---- barrier ------------------------------------------------------------------------
expect_rc 1 "barrier -n 2 alone, -w 1: gives up" b barrier -n 2 -w 1 "${U[@]}" "${P}gate" -- touch "$TMP/gate.alone"
check "...without running COMMAND" [ ! -e "$TMP/gate.alone" ]
bp=()
for t in 1 2; do
    "${B[@]}" barrier -n 2 -w 20 "${U[@]}" "${P}gate" -- sh -c 'date +%s%N >"$1"' sh "$TMP/gate.$t" >/dev/null 2>"$TMP/gate.$t.err" &
    bp+=($!)
    sleep 0.5
done
rcs=""
for p in "${bp[@]}"; do wait_pid "$p" 30; rcs+="$RC "; done
check "barrier -n 2: both exit 0 ($rcs)" [ "$rcs" = "0 0 " ]
check "...both ran COMMAND" [ -s "$TMP/gate.1" -a -s "$TMP/gate.2" ]

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
