#!/bin/bash
# The operator's commands (issue 22): baton list [PREFIX] and baton unlock --force NAME.
#  - a held lock is listed, and no more after its release; PREFIX filters;
#  - a foreign holder of the same layout is listed (redis: redis-py and
#    redis-cli SET in the simple layout, a Redisson-shaped hash in the
#    default one) and broken;
#  - unlock without --force refuses (64) and breaks nothing;
#  - unlock --force: the holder (a real `baton run -t 2`) learns of the loss
#    (exit 75), and fences grow: old holder < printed fence < next grant;
#    the read side of a read-write lock (two readers) and a fair lock with a
#    waiter queued behind its holder are broken too (redis): the queued
#    waiter is granted a fence above the printed one;
#  - an unheld name answers 1 with a fence that is bumped all the same;
#  - file engine: the kernel keeps the lock: unlock --force is refused (64)
#    with a message that names the holder, which keeps running.
#
#   admin.sh file|sqlite|redis|redlock PATH/TO/baton
#   (redis: the test Redis server, $BATON_TEST_SRV/redis/port; redlock: three
#   nodes of its own under the test's temp dir, tests/servers/redis.sh)
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
case $BATON in /*) ;; *) BATON=$PWD/$BATON ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=${BATON_TEST_TMP:-$PWD}/cli_admin_$MODE.$$
mkdir -p "$TMP"
chmod 700 "$TMP"

. "$HERE/lib.sh"

RL_DIRS=()
admin_cleanup() {
    local d
    for d in "${RL_DIRS[@]}"; do "$REDIS_SH" stop "$d" >/dev/null 2>&1; done
    cleanup
}
trap admin_cleanup EXIT

unset BATON_DIR BATON_URI BATON_REDIS_PASSWORD REDISCLI_AUTH BATON_HOLDS BATON_HOLD_PID
case "$MODE" in
file)
    URIS=("file://$TMP/locks")
    ;;
sqlite)
    URIS=("sqlite://$TMP/locks.db")
    ;;
redis)
    PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
    [ -n "$PORT" ] || skip_or_fail "no test redis server"
    command -v redis-cli >/dev/null || skip_or_fail "redis-cli missing"
    URIS=("redis://127.0.0.1:$PORT/0" "redis://127.0.0.1:$PORT/0?layout=simple")
    ;;
redlock)
    command -v redis-cli >/dev/null || skip_or_fail "redis-cli missing"
    NODES=""
    for i in 1 2 3; do
        d="$TMP/node$i"; mkdir -p "$d"
        p=$("$REDIS_SH" start "$d") || skip_or_fail "cannot start redis-server"
        RL_DIRS+=("$d")
        NODES+="127.0.0.1:$p,"
    done
    URIS=("redlock://${NODES%,}")
    ;;
*) echo "usage: $0 file|sqlite|redis|redlock BATON" >&2; exit 2 ;;
esac

P="adm-$$-"
fence_of() { sed -n 's/^fence: \([0-9][0-9]*\)$/\1/p' "$1"; }
listed() { grep -qxF "$1" "$TMP/out"; }   # NAME: in the last list's output

# hold URI NAME TAG [baton run options...]: a `baton run` holder in the
# background that writes its fence to $TMP/TAG.fence and waits for
# $TMP/TAG.go; its pid in H.
hold() {
    local u=$1 n=$2 tag=$3; shift 3
    rm -f "$TMP/$tag.fence" "$TMP/$tag.go"
    "${B[@]}" run -u "$u" "$@" "$n" -- sh -c \
        'echo "$BATON_FENCE" > "$1.fence.tmp"; mv "$1.fence.tmp" "$1.fence"; while [ ! -e "$1.go" ]; do sleep 0.05; done' \
        sh "$TMP/$tag" 2>"$TMP/$tag.err" &
    H=$!; BG_PIDS+=("$H")
}

# the fence a fresh grant of NAME gets
next_fence() { # URI NAME
    timeout -k 2 30 "$BATON" run -u "$1" -w 10 "$2" -- sh -c 'echo "$BATON_FENCE"' 2>>"$TMP/err.next"
}

suite() { # URI LABEL
    local U=$1 D=$2 F0 F1 F2 F3 N

    # ---- list: held, prefix, released --------------------------------------------
    expect_rc 0 "[$D] list PREFIX with nothing held" "$BATON" list -u "$U" "$P"
    check "[$D] ...prints nothing" empty "$TMP/out"
    hold "$U" "${P}a" a -t 2; HA=$H
    hold "$U" "${P}xb" xb -t 2; HB=$H
    check "[$D] holder a granted" wait_file "$TMP/a.fence" 15
    check "[$D] holder xb granted" wait_file "$TMP/xb.fence" 15
    expect_rc 0 "[$D] list PREFIX" "$BATON" list -u "$U" "$P"
    check "[$D] ...lists a" listed "${P}a"
    check "[$D] ...lists xb" listed "${P}xb"
    check "[$D] ...and nothing else" [ "$(grep -c . "$TMP/out")" = 2 ]
    expect_rc 0 "[$D] list PREFIX+x" "$BATON" list -u "$U" "${P}x"
    check "[$D] ...lists xb alone" [ "$(cat "$TMP/out")" = "${P}xb" ]
    expect_rc 0 "[$D] list with no PREFIX" "$BATON" list -u "$U"
    check "[$D] ...lists a too" listed "${P}a"
    touch "$TMP/xb.go"
    wait_pid "$HB" 15
    check "[$D] holder xb released (exit $RC)" [ "$RC" = 0 ]
    expect_rc 0 "[$D] list after xb's release" "$BATON" list -u "$U" "$P"
    check "[$D] ...no xb" not listed "${P}xb"
    check "[$D] ...a still there" listed "${P}a"

    # ---- unlock without --force ----------------------------------------------------
    expect_rc 64 "[$D] unlock without --force refuses" "$BATON" unlock -u "$U" "${P}a"
    check "[$D] ...and says --force" grep -q -- --force "$TMP/err"
    check "[$D] ...the holder runs on" kill -0 "$HA"

    if [ "$MODE" = file ]; then
        expect_rc 64 "[$D] unlock --force: the kernel's lock cannot be broken" "$BATON" unlock -u "$U" --force "${P}a"
        check "[$D] ...the message names the holder's pid" grep -q " $HA " "$TMP/err"
        check "[$D] ...and says to stop it instead" grep -qi "stop that process" "$TMP/err"
        sleep 0.2
        check "[$D] ...the holder runs on" kill -0 "$HA"
        # a path lock is listed by its path
        : > "$TMP/p.lock"
        hold "$U" "$TMP/p.lock" p; HP=$H
        check "[$D] path holder granted" wait_file "$TMP/p.fence" 15
        expect_rc 0 "[$D] list PATH-PREFIX" "$BATON" list -u "$U" "$TMP/"
        check "[$D] ...lists the path lock" listed "$TMP/p.lock"
        touch "$TMP/a.go" "$TMP/p.go"
        wait_pid "$HA" 15; wait_pid "$HP" 15
        expect_rc 0 "[$D] list after every release" "$BATON" list -u "$U"
        check "[$D] ...lists none of ours" not grep -q -- "$P\|p.lock" "$TMP/out"
        return
    fi

    # ---- unlock --force on a held lock ---------------------------------------------
    F0=$(cat "$TMP/a.fence")
    expect_rc 0 "[$D] unlock --force a held lock" "$BATON" unlock -u "$U" --force "${P}a"
    F1=$(fence_of "$TMP/out")
    check "[$D] ...prints a fence above the holder's ($F1 > $F0)" gt "$F1" "$F0"
    wait_pid "$HA" 15
    check "[$D] ...the holder learns of the loss: baton run exits 75 (exit $RC)" [ "$RC" = 75 ]
    check "[$D] ...and says so" grep -qi "lost" "$TMP/a.err"
    expect_rc 0 "[$D] list after the break" "$BATON" list -u "$U" "$P"
    check "[$D] ...no a" not listed "${P}a"
    F2=$(next_fence "$U" "${P}a")
    check "[$D] the next grant's fence is above the printed one ($F2 > $F1)" gt "$F2" "$F1"

    # ---- unlock --force on a name nobody holds -------------------------------------
    N="${P}none"
    expect_rc 1 "[$D] unlock --force an unheld name" "$BATON" unlock -u "$U" --force "$N"
    F1=$(fence_of "$TMP/out")
    check "[$D] ...prints a fence" gt "$F1" 0
    check "[$D] ...and says it was not held" grep -q "not held" "$TMP/err"
    expect_rc 1 "[$D] unlock --force it again" "$BATON" unlock -u "$U" --force "$N"
    F2=$(fence_of "$TMP/out")
    check "[$D] ...the fence was bumped ($F2 > $F1)" gt "$F2" "$F1"
    F3=$(next_fence "$U" "$N")
    check "[$D] the next grant's fence is above it ($F3 > $F2)" gt "$F3" "$F2"

    if [ "$MODE" = sqlite ]; then
        # the break wakes waiters as a release does (the -baton-wake sidecar):
        # with a 60 s lease and re-checks 10 min apart, a waiter is granted
        # within 10 s only by that wake-up (else at the end of its 30 s wait,
        # when it claims once more)
        local W="$U?recheck_ms=600000"
        N="${P}wake"
        hold "$W" "$N" k -t 60; H1=$H
        check "[$D] long-lease holder granted" wait_file "$TMP/k.fence" 15
        hold "$W" "$N" kw -w 30; H2=$H
        sleep 0.3
        expect_rc 0 "[$D] unlock --force with a waiter" "$BATON" unlock -u "$U" --force "$N"
        F1=$(fence_of "$TMP/out")
        check "[$D] ...the waiter is granted (woken by the break)" wait_file "$TMP/kw.fence" 10
        check "[$D] ...with a fence above the printed one" gt "$(cat "$TMP/kw.fence" 2>/dev/null)" "$F1"
        # (the holder learns of it at its renewal, 20 s out: not waited for)
        kill -TERM "$H1" 2>/dev/null; wait_pid "$H1" 15
        touch "$TMP/kw.go"; wait_pid "$H2" 15
    fi

    case "$U" in redis:*) ;; *) return ;; esac

    # ---- redis: the read side of a read-write lock, two readers ----------------------
    N="${P}rw"
    hold "$U" "$N" r1 -t 2 -s; H1=$H
    hold "$U" "$N" r2 -t 2 -s; H2=$H
    check "[$D] reader 1 granted" wait_file "$TMP/r1.fence" 15
    check "[$D] reader 2 granted" wait_file "$TMP/r2.fence" 15
    expect_rc 0 "[$D] list: a read-locked name" "$BATON" list -u "$U" "$P"
    check "[$D] ...lists rw" listed "$N"
    expect_rc 0 "[$D] unlock --force a read-locked name" "$BATON" unlock -u "$U" --force "$N"
    F1=$(fence_of "$TMP/out")
    check "[$D] ...fence above both readers'" gt "$F1" "$(sort -n "$TMP/r1.fence" "$TMP/r2.fence" | tail -1)"
    wait_pid "$H1" 15; R1=$RC
    wait_pid "$H2" 15
    check "[$D] ...both readers exit 75 ($R1, $RC)" [ "$R1.$RC" = 75.75 ]
    F2=$(timeout -k 2 30 "$BATON" run -u "$U" -w 10 -x "$N" -- sh -c 'echo "$BATON_FENCE"')
    check "[$D] the next writer's fence is above the printed one ($F2 > $F1)" gt "$F2" "$F1"
    # ... and its write side
    hold "$U" "$N" w1 -t 2 -x; H1=$H
    check "[$D] writer granted" wait_file "$TMP/w1.fence" 15
    expect_rc 0 "[$D] unlock --force a write-locked name" "$BATON" unlock -u "$U" --force "$N"
    F1=$(fence_of "$TMP/out")
    check "[$D] ...fence above the writer's" gt "$F1" "$(cat "$TMP/w1.fence")"
    wait_pid "$H1" 15
    check "[$D] ...the writer exits 75 (exit $RC)" [ "$RC" = 75 ]
    F2=$(timeout -k 2 30 "$BATON" run -u "$U" -w 10 -s "$N" -- sh -c 'echo "$BATON_FENCE"')
    check "[$D] the next reader's fence is above the printed one ($F2 > $F1)" gt "$F2" "$F1"

    # ---- redis (redisson layout): a fair lock with a waiter queued ---------------------
    case "$U" in *layout=simple*) ;; *)
        N="${P}fair"
        hold "$U" "$N" f1 -t 2 --fair; H1=$H
        check "[$D] fair holder granted" wait_file "$TMP/f1.fence" 15
        hold "$U" "$N" f2 -t 2 --fair; H2=$H
        # the waiter is queued once the queue has an entry
        for i in $(seq 1 100); do
            [ "$(redis-cli -p "$PORT" llen "redisson_lock_queue:{$N}")" = 1 ] && break
            sleep 0.05
        done
        check "[$D] ...a waiter is queued" [ "$(redis-cli -p "$PORT" llen "redisson_lock_queue:{$N}")" = 1 ]
        expect_rc 0 "[$D] unlock --force the fair lock" "$BATON" unlock -u "$U" --force "$N"
        F1=$(fence_of "$TMP/out")
        wait_pid "$H1" 15
        check "[$D] ...its holder exits 75 (exit $RC)" [ "$RC" = 75 ]
        check "[$D] ...the queued waiter is granted" wait_file "$TMP/f2.fence" 15
        check "[$D] ...with a fence above the printed one ($(cat "$TMP/f2.fence") > $F1)" gt "$(cat "$TMP/f2.fence")" "$F1"
        touch "$TMP/f2.go"; wait_pid "$H2" 15
        ;;
    esac

    # ---- redis: foreign holders of the layout ------------------------------------------
    case "$U" in
    *layout=simple*)
        N="${P}py"
        if /usr/bin/python3 -c 'import redis' 2>/dev/null; then
            /usr/bin/python3 -c 'import redis, sys
r = redis.Redis(port=int(sys.argv[1]))
assert r.lock(sys.argv[2], timeout=20).acquire(blocking=False)' "$PORT" "$N"
            check "[$D] redis-py took a lock" [ $? = 0 ]
        else
            redis-cli -p "$PORT" set "$N" 0123456789abcdef nx px 20000 >/dev/null   # what redis-py writes
        fi
        redis-cli -p "$PORT" set "${P}cli" mine nx px 20000 >/dev/null
        redis-cli -p "$PORT" set "${P}count" 5 px 20000 >/dev/null   # a semaphore's count: no lock
        expect_rc 0 "[$D] list with foreign holders" "$BATON" list -u "$U" "$P"
        check "[$D] ...lists redis-py's lock" listed "$N"
        check "[$D] ...lists redis-cli's SET NX" listed "${P}cli"
        check "[$D] ...not a number (a count)" not listed "${P}count"
        check "[$D] ...nor a fence counter" not grep -q "baton_fence" "$TMP/out"
        expect_rc 0 "[$D] unlock --force redis-py's lock" "$BATON" unlock -u "$U" --force "$N"
        check "[$D] ...its key is gone" [ "$(redis-cli -p "$PORT" exists "$N")" = 0 ]
        expect_rc 64 "[$D] unlock --force a count refuses" "$BATON" unlock -u "$U" --force "${P}count"
        check "[$D] ...and leaves it" [ "$(redis-cli -p "$PORT" get "${P}count")" = 5 ]
        # the engine's own prefix= is not part of the names listed
        expect_rc 0 "[$D] list on prefix=$P" "$BATON" list -u "$U&prefix=$P"
        check "[$D] ...lists cli without the engine prefix" listed "cli"
        ;;
    *)
        N="${P}rsn"
        redis-cli -p "$PORT" hset "$N" "5a4d2c3e-1111-2222-3333-444455556666:1" 1 >/dev/null
        redis-cli -p "$PORT" pexpire "$N" 20000 >/dev/null
        redis-cli -p "$PORT" hset "${P}data" name x >/dev/null   # a hash that is no lock
        expect_rc 0 "[$D] list with a Redisson holder" "$BATON" list -u "$U" "$P"
        check "[$D] ...lists the Redisson lock" listed "$N"
        check "[$D] ...not a hash of other data" not listed "${P}data"
        check "[$D] ...nor a holder description or token" not grep -q "baton_holder\|redisson_lock_token" "$TMP/out"
        expect_rc 0 "[$D] unlock --force the Redisson lock" "$BATON" unlock -u "$U" --force "$N"
        check "[$D] ...its hash is gone" [ "$(redis-cli -p "$PORT" exists "$N")" = 0 ]
        expect_rc 64 "[$D] unlock --force a data hash refuses" "$BATON" unlock -u "$U" --force "${P}data"
        check "[$D] ...and leaves it" [ "$(redis-cli -p "$PORT" hget "${P}data" name)" = x ]
        redis-cli -p "$PORT" del "${P}data" >/dev/null
        ;;
    esac
}

for u in "${URIS[@]}"; do
    case $u in *layout=simple*) l="$MODE simple" ;; *) l=$MODE ;; esac
    suite "$u" "$l"
done

if [ "$MODE" = redlock ]; then
    # a name on a minority of the nodes is not held; on a majority it is
    p1=$(cat "${RL_DIRS[0]}/port")
    redis-cli -p "$p1" set "${P}minority" v px 20000 >/dev/null
    for d in "${RL_DIRS[@]}"; do redis-cli -p "$(cat "$d/port")" set "${P}major" v px 20000 >/dev/null; done
    expect_rc 0 "[redlock] list with foreign SET NX keys" "$BATON" list -u "${URIS[0]}" "$P"
    check "[redlock] ...lists a key on every node" listed "${P}major"
    check "[redlock] ...not one on a single node" not listed "${P}minority"
    expect_rc 1 "[redlock] unlock --force a minority's key: not held" "$BATON" unlock -u "${URIS[0]}" --force "${P}minority"
    check "[redlock] ...the stray key is gone all the same" [ "$(redis-cli -p "$p1" exists "${P}minority")" = 0 ]

    # one node of three down: list and break work on the other two (a majority)
    "$REDIS_SH" stop "${RL_DIRS[2]}" >/dev/null
    N="${P}down"
    hold "${URIS[0]}" "$N" d -t 2; H1=$H
    check "[redlock] node 3 down: a holder is granted" wait_file "$TMP/d.fence" 15
    expect_rc 0 "[redlock] node 3 down: list" "$BATON" list -u "${URIS[0]}" "$P"
    check "[redlock] ...lists the holder" listed "$N"
    expect_rc 0 "[redlock] node 3 down: unlock --force" "$BATON" unlock -u "${URIS[0]}" --force "$N"
    F1=$(fence_of "$TMP/out")
    check "[redlock] ...fence above the holder's" gt "$F1" "$(cat "$TMP/d.fence")"
    wait_pid "$H1" 15
    check "[redlock] ...the holder exits 75 (exit $RC)" [ "$RC" = 75 ]
    # two of three down: no majority to break on
    "$REDIS_SH" stop "${RL_DIRS[1]}" >/dev/null
    expect_rc 69 "[redlock] two nodes down: unlock --force answers 69 (no majority to reach)" "$BATON" unlock -u "${URIS[0]}" --force "$N"
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
