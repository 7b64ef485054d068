#!/bin/bash
# The Redis recipe of docs/fencing.md (the Lua script and the redis-cli line,
# run as written) with fences from redis:// grants: holder A is frozen until
# its 1 s lease runs out, B takes the lock and writes; A's late EVAL (its
# command still runs) is refused and the data is B's — and so is A's late
# `baton fence` write; baton then tells A it lost the lock (exit 75). The
# script without its fence check lets the stale write in.
#
#   redis.sh PATH/TO/baton
set -u

MODE=redis
BATON=${1:?path to baton}
TMP=${BATON_TEST_TMP:-$PWD}/fencing_redis.$$
mkdir -p "$TMP"
. "$(cd "$(dirname "$0")" && pwd)/lib.sh"

PORT=$(cat "${BATON_TEST_SRV:-/nonexistent}/redis/port" 2>/dev/null) || PORT=""
[ -n "$PORT" ] || skip_or_fail "no test redis server"
command -v redis-cli >/dev/null || skip_or_fail "redis-cli is missing"
unset BATON_DIR BATON_URI BATON_FENCE REDISCLI_AUTH
cd "$TMP" || exit 1
R="fencing-$$"
rcli() { redis-cli -p "$PORT" "$@"; }

recipe redis-lua > fence-write.lua || exit 1
grep -v 'if fence < seen then return 0 end' fence-write.lua > nofence.lua
check "control script differs from the recipe" not cmp -s fence-write.lua nofence.lua
# the doc's line, with the test server's port; value: $1 of the call
recipe redis-cli > call.sh || exit 1
cat > write <<EOS
#!/bin/bash
# write VALUE [SCRIPT]: the doc's redis-cli line on the test server, resource "$R"
redis-cli() { command redis-cli -p $PORT "\$@"; }
value=\$1
cd "$TMP" || exit 1
$(sed "s/{report}/{$R}/g" call.sh | sed 's/\$(cat fence-write.lua)/$(cat "${2:-fence-write.lua}")/')
EOS
chmod +x write

# ---- a holder paused past its lease ---------------------------------------------
URI="redis://127.0.0.1:$PORT/0?prefix=$R-"
N=job
rm -f fa a.out go done
stale_writer "$URI" "$N" '
    while [ ! -e go ]; do sleep 0.05; done
    ./write "A $BATON_FENCE" > a.out
    "$0" fence data.fence -- sh -c "echo A > data"; echo $? > a.rc.tmp; mv a.rc.tmp a.fence.rc
    while [ ! -e done ]; do sleep 0.05; done'
check "A holds the lock" wait_file fa 20
HP=$(cat hold.pid)
stop_holder "$HP"               # A's holder stops renewing; A's shell runs on
# B waits for A's lease (1 s) to run out; 60 s is only a bound for a loaded box
expect_rc 0 "B gets the lock after A's lease and writes" b run -u "$URI" -w 60 "$N" -- sh -c '
    echo "$BATON_FENCE" > fb
    ./write "B $BATON_FENCE" > b.out
    "$0" fence data.fence -- sh -c "echo B > data"' "$BATON"
FA=$(cat fa) FB=$(cat fb)
check "B's fence ($FB) is larger than A's ($FA)" gt "$FB" "$FA"
check "B's EVAL wrote (1)" [ "$(cat b.out)" = 1 ]
touch go                        # A, still believing it holds the lock, writes
check "A's late writes are done" wait_file a.fence.rc 20
check "A's late EVAL is refused (0)" [ "$(cat a.out)" = 0 ]
check "the data is B's" [ "$(rcli GET "{$R}:data")" = "B $FB" ]
check "the fence key holds B's fence, digit for digit" [ "$(rcli GET "{$R}:fence")" = "$FB" ]
check "A's late baton fence write is fenced off (65)" [ "$(cat a.fence.rc)" = 65 ]
check "  the file is B's" [ "$(cat data)" = B ]
cont_holder "$HP"
wait_pid "$AP" 30
check "A's holder then finds its lease lost and terminates A's shell (got $RC)" [ "$RC" = 143 ]
touch done

check "B again with its fence (the same holder): written" [ "$(BATON_FENCE=$FB ./write "B2 $FB")" = 1 ]
check "a bad fence is an error reply" grep -q "bad fence" <<<"$(BATON_FENCE=x ./write v 2>&1)"
check "  and writes nothing" [ "$(rcli GET "{$R}:data")" = "B2 $FB" ]
FC=$(b run -u "$URI" "$N" -- sh -c 'echo "$BATON_FENCE"')
check "a third grant ($FC)" gt "$FC" "$FB"
check "the newer fence writes" [ "$(BATON_FENCE=$FC ./write C)" = 1 ]
check "B's is now stale" [ "$(BATON_FENCE=$FB ./write B3)" = 0 ]
check "a missing fence key: any fence writes" [ "$(rcli DEL "{$R}:fence")" = 1 ] &&
    check "  (written)" [ "$(BATON_FENCE=$FA ./write A2)" = 1 ]
BATON_FENCE=$FC ./write C2 >/dev/null
check "control: the script without its check lets A's stale write in" \
    [ "$(BATON_FENCE=$FA ./write A3 nofence.lua)" = 1 ] && check "  (clobbering C's data)" [ "$(rcli GET "{$R}:data")" = A3 ]

rcli DEL "{$R}:fence" "{$R}:data" >/dev/null
echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
