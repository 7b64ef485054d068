#!/bin/bash
# etcds:// against a real etcd that serves its client port over TLS only and
# asks for client certificates (--client-cert-auth), with a CA and
# certificates made here by openssl:
#  - the right CA + client certificate: baton holds a lock, the key is in the
#    Mutex layout, `etcdctl lock` over TLS waits for baton, and back;
#  - no cacert (the system's CAs do not know ours), another CA, no client
#    certificate, a certificate the CA did not sign, a missing file -> exit 69
#    (EAUTH/EUNAVAILABLE), promptly, never a hang;
#  - etcd:// (plain HTTP) against the TLS port -> exit 69, not a hang;
#  - TLS options on etcd:// -> exit 64 (EINVAL).
# The server is this test's own (${BATON_TEST_TMP}/etcd_tls), stopped on exit.
# usage: tls.sh BATON [TRANSPORT_OPTION]   (e.g. "transport=grpc"; with it,
# `baton status` must show that transport, and with transport=grpc etcds://
# without the option must use gRPC too: the default when the build has it)
set -u
BATON=$1
XOPT=${2:-}
T=${BATON_TEST_TMP:?}/etcd_tls${XOPT:+_${XOPT//[^a-z]/}}
ETCD_BIN=$(command -v etcd 2>/dev/null) || { echo "etcd missing: skip"; exit 77; }
command -v etcdctl >/dev/null || { echo "etcdctl missing: skip"; exit 77; }
command -v openssl >/dev/null || { echo "openssl missing: skip"; exit 77; }
export ETCDCTL_API=3
rm -rf "$T"; mkdir -p "$T/pki"
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
wait_line() { for _ in $(seq 1 300); do grep -qx "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
epid= pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    [ -n "$epid" ] && { kill -TERM "$epid" 2>/dev/null; sleep 0.5; kill -KILL "$epid" 2>/dev/null; wait "$epid" 2>/dev/null; }
}
trap cleanup EXIT

# ---- certificates: a CA, a server certificate for 127.0.0.1, a client one;
# another CA and a client certificate it signed (both unknown to the server).
K=$T/pki
mkca() {   # NAME
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=baton test $1" \
        -keyout "$K/$1.key" -out "$K/$1.pem" >/dev/null 2>&1
}
mkcert() { # CA NAME CN EXT
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$3" -keyout "$K/$2.key" -out "$K/$2.csr" >/dev/null 2>&1 &&
    printf '%s\n' "$4" >"$K/$2.ext" &&
    openssl x509 -req -in "$K/$2.csr" -CA "$K/$1.pem" -CAkey "$K/$1.key" -CAcreateserial -days 2 \
        -extfile "$K/$2.ext" -out "$K/$2.pem" >/dev/null 2>&1
}
mkca ca && mkca otherca &&
mkcert ca server 127.0.0.1 "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth" &&
mkcert ca client baton "extendedKeyUsage=clientAuth" &&
mkcert otherca stranger baton "extendedKeyUsage=clientAuth" &&
mkcert ca elsewhere 10.9.9.9 "subjectAltName=IP:10.9.9.9,DNS:elsewhere.invalid
extendedKeyUsage=serverAuth" ||
    { echo "FAIL: openssl could not make the test certificates"; exit 1; }

# ---- the server: client port TLS only, client certificates required
read -r CP PP < <(/usr/bin/python3 -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
"$ETCD_BIN" --name tls --data-dir "$T/data" \
    --listen-client-urls "https://127.0.0.1:$CP" --advertise-client-urls "https://127.0.0.1:$CP" \
    --listen-peer-urls "http://127.0.0.1:$PP" --initial-advertise-peer-urls "http://127.0.0.1:$PP" \
    --initial-cluster "tls=http://127.0.0.1:$PP" \
    --cert-file "$K/server.pem" --key-file "$K/server.key" \
    --trusted-ca-file "$K/ca.pem" --client-cert-auth >"$T/etcd.log" 2>&1 &
epid=$!
ECTL="etcdctl --endpoints=https://127.0.0.1:$CP --cacert=$K/ca.pem --cert=$K/client.pem --key=$K/client.key"
up=0
for _ in $(seq 1 150); do
    $ECTL endpoint health >/dev/null 2>&1 && { up=1; break; }
    kill -0 "$epid" 2>/dev/null || break
    sleep 0.2
done
[ $up = 1 ] || { echo "FAIL: etcd with TLS did not start:"; tail -20 "$T/etcd.log"; exit 1; }

opt() { local o="$1"; [ -n "$XOPT" ] && o="$o&$XOPT"; echo "$o"; }
GOOD="etcds://127.0.0.1:$CP?$(opt "cacert=$K/ca.pem&cert=$K/client.pem&key=$K/client.key&ttl=5")"
N="tls-$$"

# 1. the right CA and certificate: a lock, in etcd's layout, that etcdctl honours
"$BATON" run -u "$GOOD" "$N-a" -- sh -c "echo in" >"$T/1.out" 2>"$T/1.err"
check "etcds:// with the CA and a client certificate: run exit 0 ($(head -c 300 "$T/1.err"))" test $? = 0
check "  the command ran" grep -qx in "$T/1.out"
log=$T/2.log
"$BATON" run -u "$GOOD" "$N-b" -- sh -c "echo baton-in >>$log; sleep 1.5; echo baton-out >>$log" &
bp=$!; pids+=($bp)
check "baton holds $N-b over TLS" wait_line "$log" baton-in
check "  key NAME/<lease hex> seen by etcdctl over TLS" \
    sh -c "$ECTL get --prefix --keys-only '$N-b/' | grep -Eq '^$N-b/[0-9a-f]+\$'"
timeout 60 $ECTL lock "$N-b" -- sh -c "echo etcdctl-in >>$log" >/dev/null 2>&1
wait "$bp"; rc=$?
check "  baton run exit 0" test "$rc" = 0
check "  etcdctl lock waited for baton" test "$(tr '\n' ' ' <"$log")" = "baton-in baton-out etcdctl-in "
log=$T/3.log
timeout 60 $ECTL lock "$N-c" -- sh -c "echo etcdctl-in >>$log; sleep 1.5; echo etcdctl-out >>$log" >/dev/null 2>&1 &
ep=$!; pids+=($ep)
check "etcdctl holds $N-c over TLS" wait_line "$log" etcdctl-in
"$BATON" run -u "$GOOD" -n "$N-c" -- true 2>/dev/null
check "  baton try: busy (1)" test $? = 1
"$BATON" run -u "$GOOD" -w 30 "$N-c" -- sh -c "echo baton-in >>$log"
check "  baton waited and ran" test $? = 0
wait "$ep"
check "  order etcdctl, baton" test "$(tr '\n' ' ' <"$log")" = "etcdctl-in etcdctl-out baton-in "

# which transport carried it: `baton status` names the member it reached
# ("... via https://127.0.0.1:PORT (gRPC)" over gRPC)
GOOD0="etcds://127.0.0.1:$CP?cacert=$K/ca.pem&cert=$K/client.pem&key=$K/client.key&ttl=5"
"$BATON" status -u "$GOOD" "$N-a" >"$T/st.out" 2>&1
case "$XOPT" in
transport=grpc)
    check "status: over gRPC ($(grep session "$T/st.out"))" grep -q "via https://127.0.0.1:$CP (gRPC)" "$T/st.out"
    # a build that has TLS for gRPC uses it for etcds:// by default
    "$BATON" status -u "$GOOD0" "$N-a" >"$T/st0.out" 2>&1
    check "status: etcds:// without transport= is gRPC ($(grep session "$T/st0.out"))" \
        grep -q "via https://127.0.0.1:$CP (gRPC)" "$T/st0.out" ;;
transport=gateway)
    check "status: over the gateway ($(grep session "$T/st.out"))" \
        sh -c "grep -q 'via https://127.0.0.1:$CP\$' '$T/st.out'" ;;
esac

# 2. refusals: each exit 69 with a message, well inside a generous bound
refused() { # WHAT URI
    local s e rc
    s=$(date +%s)
    timeout 60 "$BATON" run -u "$2" -n "$N-r" -- true 2>"$T/r.err"; rc=$?
    e=$(date +%s)
    check "$1: exit 69 (got $rc: $(head -c 200 "$T/r.err"))" test "$rc" = 69
    check "  with a message" test -s "$T/r.err"
    # the timeouts are 1-2 s; 30 s only says it did not hang
    check "  promptly ($((e - s)) s)" test $((e - s)) -lt 30
}
B="etcds://127.0.0.1:$CP"
X="connect_timeout_ms=1000&timeout_ms=2000"
refused "no cacert (the system CAs do not know ours)" "$B?$(opt "cert=$K/client.pem&key=$K/client.key&$X")"
refused "another CA" "$B?$(opt "cacert=$K/otherca.pem&cert=$K/client.pem&key=$K/client.key&$X")"
refused "no client certificate" "$B?$(opt "cacert=$K/ca.pem&$X")"
refused "a client certificate our CA did not sign" "$B?$(opt "cacert=$K/ca.pem&cert=$K/stranger.pem&key=$K/stranger.key&$X")"
refused "plain etcd:// against the TLS port" "etcd://127.0.0.1:$CP?$(opt "$X")"
s=$(date +%s)
timeout 60 "$BATON" run -u "$B?$(opt "cacert=$T/no-such.pem&cert=$K/client.pem&key=$K/client.key&$X")" -n "$N-r" -- true 2>"$T/m.err"
rc=$?
check "a missing CA file: refused, not run (got $rc: $(head -c 200 "$T/m.err"))" sh -c "[ $rc != 0 ] && [ $rc != 124 ] && [ -s '$T/m.err' ]"

# 2b. gRPC only: TLS servers that are not etcd's, with our CA's certificate:
# one that does not agree to h2 (ALPN http/1.1 only), one that accepts and
# never answers the handshake, one that completes it and then stays silent,
# one whose certificate (from our CA) names another address.
if [ "$XOPT" = transport=grpc ]; then
    /usr/bin/python3 - "$K/server.pem" "$K/server.key" "$K/elsewhere.pem" "$K/elsewhere.key" >"$T/fake.ports" 2>"$T/fake.err" <<'PY' &
import socket, ssl, sys, threading, time
def ctx(alpn, mode):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(*(sys.argv[3:5] if mode == "elsewhere" else sys.argv[1:3]))
    c.set_alpn_protocols(alpn)
    return c
def serve(sock, mode):
    def one(conn):
        try:
            if mode == "mute":          # never a byte of the handshake
                time.sleep(60)
                return
            t = ctx(["http/1.1"] if mode == "h1" else ["h2"], mode).wrap_socket(conn, server_side=True)
            if mode == "h1":
                while t.recv(4096):
                    pass
            else:                       # handshake done, then nothing
                time.sleep(60)
        except Exception:
            pass
        finally:
            conn.close()
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()
socks = []
for mode in ("h1", "mute", "silent", "elsewhere"):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    socks.append(s)
    threading.Thread(target=serve, args=(s, mode), daemon=True).start()
print(" ".join(str(s.getsockname()[1]) for s in socks), flush=True)
time.sleep(120)
PY
    pids+=($!)
    for _ in $(seq 1 50); do [ -s "$T/fake.ports" ] && break; sleep 0.1; done
    read -r H1 MUTE SILENT ELSEWHERE <"$T/fake.ports"
    if [ -z "${ELSEWHERE:-}" ]; then
        bad "the fake TLS servers did not start: $(head -c 300 "$T/fake.err")"
    else
        C="cacert=$K/ca.pem&cert=$K/client.pem&key=$K/client.key&$X"
        refused "a TLS server that does not agree to h2" "etcds://127.0.0.1:$H1?$(opt "$C")"
        check "  the message says ALPN h2" grep -q "ALPN h2" "$T/r.err"
        refused "a TLS server silent in the handshake" "etcds://127.0.0.1:$MUTE?$(opt "$C")"
        check "  the message says handshake" grep -q "handshake" "$T/r.err"
        refused "a TLS server silent after the handshake" "etcds://127.0.0.1:$SILENT?$(opt "$C")"
        # our CA signed it, but for another address: the IP is checked
        refused "a certificate of our CA for 10.9.9.9, not 127.0.0.1" "etcds://127.0.0.1:$ELSEWHERE?$(opt "$C")"
        check "  the message says mismatch" grep -q "mismatch" "$T/r.err"
    fi
fi

# 3. TLS options on etcd:// are a usage error
"$BATON" run -u "etcd://127.0.0.1:$CP?$(opt "cacert=$K/ca.pem")" -n "$N-r" -- true 2>/dev/null
check "cacert on etcd://: exit 64" test $? = 64

# nothing left behind by the refusals: the lock is free to a good client
"$BATON" run -u "$GOOD" -n "$N-r" -- true
check "after the refusals $N-r is free" test $? = 0

echo "tls: $pass passed, $fail failed"
[ "$fail" = 0 ]
