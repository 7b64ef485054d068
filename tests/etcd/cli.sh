#!/bin/bash
# The CLI on etcd (issue #23):
#   lease   `baton run -t SECS` / `baton hold -t SECS` set the client lease's
#           TTL (etcd's locks live on it): a holder with -t 2 has at most 2 s
#           left, not the 30 s default; a ttl= in the URI wins over -t.
#           (On the "etcd" fixture server.)
#   secret  with a password in the URI on an auth-enabled server, `baton run`
#           hands BATON_URI (redacted) plus the password in
#           $BATON_ETCD_PASSWORD to the command, so `baton -u "$BATON_URI"`
#           in it works. Needs `.secret_env = "BATON_ETCD_PASSWORD"` in the
#           etcd backend table. (Its own server: auth is switched on.)
# usage: cli.sh BATON lease|secret
set -u
BATON=$1
WHAT=$2
T=${BATON_TEST_TMP:?}/etcd_cli_$WHAT
ETCD_SH=$(dirname "$0")/../servers/etcd.sh
rm -rf "$T"; mkdir -p "$T"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
cleanup() { [ "$WHAT" = secret ] && bash "$ETCD_SH" stop "$T/srv" >/dev/null 2>&1; }
trap cleanup EXIT
# within MS LO HI: MS is a number in [LO, HI]
within() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }

case $WHAT in
lease)
    SRV=${BATON_TEST_SRV:?}/etcd
    [ -s "$SRV/port" ] || { echo "no etcd fixture: skip"; exit 77; }
    U="etcd://127.0.0.1:$(cat "$SRV/port")/clilease$$"
    ms=$("$BATON" run -u "$U" -t 2 n1 -- "$BATON" status -u "$U" n1 | sed -n 's/^remaining_ms: //p')
    check "run -t 2: the holder's lease has <= 2000 ms left ($ms)" within "$ms" 0 2000
    ms=$("$BATON" run -u "$U?ttl=5" -t 2 n2 -- "$BATON" status -u "$U" n2 | sed -n 's/^remaining_ms: //p')
    check "run -t 2 with ttl=5 in the URI: the URI wins ($ms ms left)" within "$ms" 2001 5000
    ms=$("$BATON" run -u "$U" -t 3600 n3 -- "$BATON" status -u "$U" n3 | sed -n 's/^remaining_ms: //p')
    check "run -t 3600: more than the 30 s default left ($ms)" within "$ms" 30001 3600000
    out=$(bash -c "eval \"\$('$BATON' hold -u '$U' -t 2 n4)\" && '$BATON' status -u '$U' n4; '$BATON' release n4")
    ms=$(sed -n 's/^remaining_ms: //p' <<<"$out")
    check "hold -t 2: <= 2000 ms left ($ms)" within "$ms" 0 2000
    ;;
secret)
    command -v etcdctl >/dev/null || { echo "etcdctl missing: skip"; exit 77; }
    P=$(bash "$ETCD_SH" start "$T/srv") || { echo "cannot start etcd: skip"; exit 77; }
    export ETCDCTL_API=3
    etcdctl --endpoints=127.0.0.1:$P user add root:s3cret >/dev/null &&
        etcdctl --endpoints=127.0.0.1:$P auth enable >/dev/null 2>&1 || { bad "auth enable"; exit 1; }
    U="etcd://root:s3cret@127.0.0.1:$P"
    "$BATON" run -u "$U" sec -- sh -c 'echo "$BATON_URI" > '"$T/uri"'; "$0" status -u "$BATON_URI" sec' "$BATON" \
        >"$T/out" 2>"$T/err"
    rc=$?
    check "the child's BATON_URI has no password ($(cat "$T/uri"))" bash -c "! grep -q s3cret '$T/uri'"
    check "baton -u \"\$BATON_URI\" status in the command works (exit $rc: $(head -c 300 "$T/err"))" [ "$rc" -eq 0 ]
    check "... and sees the lock held" grep -qx "held: yes" "$T/out"
    ;;
*) echo "usage: cli.sh BATON lease|secret" >&2; exit 64 ;;
esac
echo "passed $pass, failed $fail"
[ "$fail" -eq 0 ]
