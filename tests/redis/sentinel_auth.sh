#!/bin/bash
# redis-sentinel:// with passwords: the sentinels' (sentinel_password) and the
# data nodes' (the URI's) are separate; either missing fails the open with an
# authentication error; after a SENTINEL FAILOVER the client finds the new
# master with both. A deployment of its own (tests/servers/redis-sentinel.sh).
#
#   sentinel_auth.sh BATON SCRIPT DIR
set -u
BATON=$1 SN=$2 DIR=$3
fail() { echo "FAIL: $*" >&2; bash "$SN" stop "$DIR"; exit 1; }
bash "$SN" stop "$DIR" >/dev/null 2>&1
REDIS_SENTINEL_PASSWORD=s3cret bash "$SN" start "$DIR" >/dev/null
rc=$?
[ $rc = 77 ] && exit 77
[ $rc = 0 ] || fail "the deployment did not start"
S=$(bash "$SN" sentinels "$DIR")
U="redis-sentinel://:s3cret@$S/0?master=mymaster&sentinel_password=s3cret"
out=$("$BATON" run -u "$U" -n auth-a -- echo held 2>&1) || fail "with both passwords: $out"
[ "$out" = held ] || fail "with both passwords: $out"
out=$("$BATON" run -u "redis-sentinel://:s3cret@$S/0?master=mymaster" -n auth-a -- echo held 2>&1) &&
    fail "without the sentinels' password: $out"
echo "$out" | grep -q "NOAUTH" || fail "without the sentinels' password: $out"
out=$("$BATON" run -u "redis-sentinel://$S/0?master=mymaster&sentinel_password=s3cret" -n auth-a -- echo held 2>&1) &&
    fail "without the data nodes' password: $out"
echo "$out" | grep -q "NOAUTH" || fail "without the data nodes' password: $out"
old=$(bash "$SN" master "$DIR")
bash "$SN" failover "$DIR" >/dev/null || fail "no failover"
new=$(bash "$SN" master "$DIR")
[ "$old" != "$new" ] || fail "the master did not change"
out=$("$BATON" run -u "$U" -n auth-a -- echo held 2>&1) || fail "after the failover: $out"
[ "$out" = held ] || fail "after the failover: $out"
bash "$SN" stop "$DIR"
echo "1 passed, 0 failed"
