#!/bin/bash
# Which etcd transport passes which reverse proxy (docs/etcd-engine.md, "Why
# two transports"): real nginx and haproxy on loopback in front of the "etcd"
# fixture member, each in the configuration a user would write.
#
#   proxy                                      gateway   gRPC (the default)
#   nginx proxy_pass (its defaults)            passes*   exit 69, says transport=gateway
#   nginx TLS terminator + proxy_pass          passes*   exit 69, says transport=gateway
#   nginx grpc_pass (h2c; TLS + http2)         exit 69   passes
#   haproxy mode http (server in HTTP/1.1)     passes    exit 69, says transport=gateway
#   haproxy mode http, server proto h2         exit 69   passes
#
# "passes": `baton status` answers, and a waiter queued behind a holder gets
# the lock after it through the proxy (the watch stream crosses it too);
# (*: nginx's defaults hold the watch stream back, so waiters look again every
# 2 s and warn once; proxy_http_version 1.1 or proxy_buffering off avoid it);
# "exit 69": refused promptly (never a hang), with the message asserted where
# it must tell the user what to change. A proxy whose package is absent is
# skipped with a message (both absent: exit 77); BATON_REQUIRE_ALL=1 makes an
# absent one a failure.
# usage: proxy.sh BATON [tls]     (tls: the build has gRPC over TLS)
set -u
BATON=$1
WITH_TLS=${2:-}
SRV=${BATON_TEST_SRV:?}/etcd
T=${BATON_TEST_TMP:?}/etcd_proxy
rm -rf "$T"; mkdir -p "$T"
[ -s "$SRV/port" ] || { echo "no etcd fixture: skip"; exit 77; }
P=$(cat "$SRV/port")
PATH=$PATH:/usr/sbin:/sbin
NGINX=$(command -v nginx 2>/dev/null || true)
HAPROXY=$(command -v haproxy 2>/dev/null || true)
if [ -z "$NGINX" ] && [ -z "$HAPROXY" ]; then
    echo "neither nginx nor haproxy is installed (apt-get install nginx haproxy): skip"
    [ "${BATON_REQUIRE_ALL:-0}" = 1 ] && exit 1
    exit 77
fi
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
not_grpc() { grep -q '^session:' "$1" && ! grep -q '(gRPC)' "$1"; }
wait_line() { for _ in $(seq 1 300); do grep -qx "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; }
trap cleanup EXIT
# N free loopback ports
ports() {
    /usr/bin/python3 -c 'import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])' "$1"
}
# waits (up to 10 s) until something listens on PORT
listening() {
    for _ in $(seq 1 100); do
        /usr/bin/python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1" \
            2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}

# passes LABEL URI: status answers (over the transport asked for), and a
# waiter gets the lock after its holder let go, through the proxy
passes() {
    local label=$1 u=$2 log=$T/$RANDOM.log n=proxy-$RANDOM-$$ hp hrc wrc
    timeout 30 "$BATON" status -u "$u" "$n" >"$T/st.out" 2>"$T/st.err"
    check "$label: status answers ($(head -c 200 "$T/st.err"))" [ $? = 0 ]
    case "$u" in
    *transport=grpc*) check "$label: status says gRPC" grep -q '(gRPC)' "$T/st.out" ;;
    *) check "$label: status says the gateway" not_grpc "$T/st.out" ;;
    esac
    : >"$log"
    timeout 40 "$BATON" run -u "$u" -w 20 "$n" sh -c "echo held >>$log; sleep 1.5; echo released >>$log" \
        2>"$T/h.err" &
    hp=$!
    wait_line "$log" held || bad "$label: the holder did not get the lock ($(head -c 200 "$T/h.err"))"
    timeout 40 "$BATON" run -u "$u" -w 20 "$n" sh -c "echo waiter >>$log" 2>"$T/w.err"
    wrc=$?
    wait $hp
    hrc=$?
    check "$label: a waiter gets the lock after its holder (holder $hrc, waiter $wrc: $(tr '\n' ' ' <"$log"))" \
        [ "$hrc.$wrc.$(tr '\n' ' ' <"$log")" = "0.0.held released waiter " ]
}
# refused LABEL URI [PATTERN]: exit 69 well within its bounds, the message
# matching PATTERN
refused() {
    local label=$1 u=$2 pat=${3:-}
    timeout 30 "$BATON" status -u "$u" refused >/dev/null 2>"$T/r.err"
    local rc=$?
    check "$label: exit 69 (got $rc: $(head -c 300 "$T/r.err"))" [ $rc = 69 ]
    [ -z "$pat" ] || check "$label: the message says '$pat'" grep -q -- "$pat" "$T/r.err"
}
H1_HINT="passes only transport=gateway"

if [ -n "$WITH_TLS" ]; then
    command -v openssl >/dev/null || { bad "openssl missing: no certificates for the TLS cases"; WITH_TLS=; }
fi
if [ -n "$WITH_TLS" ]; then
    K=$T/pki
    mkdir -p "$K"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=baton proxy test CA" \
        -keyout "$K/ca.key" -out "$K/ca.pem" >/dev/null 2>&1 &&
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$K/srv.key" -out "$K/srv.csr" \
        >/dev/null 2>&1 &&
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$K/srv.ext" &&
    openssl x509 -req -in "$K/srv.csr" -CA "$K/ca.pem" -CAkey "$K/ca.key" -CAcreateserial -days 2 \
        -extfile "$K/srv.ext" -out "$K/srv.pem" >/dev/null 2>&1 ||
        { bad "openssl could not make the test certificates"; WITH_TLS=; }
fi

# ---- nginx: proxy_pass (HTTP/1.1 to etcd), as a TLS terminator, grpc_pass
if [ -z "$NGINX" ]; then
    echo "skip: nginx is not installed (apt-get install nginx)"
    [ "${BATON_REQUIRE_ALL:-0}" = 1 ] && bad "nginx missing"
else
    read -r NH1 NTLS NGRPC NGRPCS < <(ports 4)
    N=$T/nginx
    mkdir -p "$N"
    tls_servers=
    if [ -n "$WITH_TLS" ]; then
        tls_servers="
    server {    # a TLS terminator: HTTP/1.1 (no http2 on listen), proxy_pass
        listen 127.0.0.1:$NTLS ssl;
        ssl_certificate $K/srv.pem; ssl_certificate_key $K/srv.key;
        location / { proxy_pass http://127.0.0.1:$P; }
    }
    server {    # TLS with http2, grpc_pass
        listen 127.0.0.1:$NGRPCS ssl http2;
        ssl_certificate $K/srv.pem; ssl_certificate_key $K/srv.key;
        location / { grpc_pass grpc://127.0.0.1:$P; }
    }"
    fi
    cat >"$N/nginx.conf" <<EOF
daemon off;
master_process off;
error_log $N/error.log info;
pid $N/nginx.pid;
events { worker_connections 64; }
http {
    access_log $N/access.log;
    client_body_temp_path $N/body; proxy_temp_path $N/proxy; fastcgi_temp_path $N/fastcgi;
    uwsgi_temp_path $N/uwsgi; scgi_temp_path $N/scgi;
    server {    # the plain reverse proxy: nginx's defaults
        listen 127.0.0.1:$NH1;
        location / { proxy_pass http://127.0.0.1:$P; }
    }
    server {    # nginx's gRPC proxy over h2c
        listen 127.0.0.1:$NGRPC http2;
        location / { grpc_pass grpc://127.0.0.1:$P; }
    }$tls_servers
}
EOF
    "$NGINX" -p "$N" -c "$N/nginx.conf" </dev/null >"$N/out" 2>&1 &
    pids+=($!)
    if ! listening "$NH1" || ! listening "$NGRPC"; then
        bad "nginx did not start: $(tail -c 400 "$N/error.log" "$N/out" 2>/dev/null)"
    else
        echo "== nginx: $("$NGINX" -v 2>&1)"
        passes "nginx proxy_pass, gateway" "etcd://127.0.0.1:$NH1?ttl=5&transport=gateway"
        # nginx's defaults (HTTP/1.0 to etcd, proxy_buffering on) hold the
        # watch stream back: the waiter looked again and said why
        check "nginx proxy_pass, gateway: the waiter warned of the held-back watch" \
            grep -q "proxy_buffering off" "$T/w.err"
        refused "nginx proxy_pass, gRPC" "etcd://127.0.0.1:$NH1?transport=grpc" "$H1_HINT"
        refused "nginx proxy_pass, the default transport" "etcd://127.0.0.1:$NH1" "$H1_HINT"
        passes "nginx grpc_pass (h2c), gRPC" "etcd://127.0.0.1:$NGRPC?ttl=5&transport=grpc"
        refused "nginx grpc_pass (h2c), gateway" "etcd://127.0.0.1:$NGRPC?transport=gateway"
        if [ -n "$WITH_TLS" ]; then
            C="cacert=$K/ca.pem"
            passes "nginx TLS terminator, gateway" "etcds://127.0.0.1:$NTLS?ttl=5&$C&transport=gateway"
            refused "nginx TLS terminator, gRPC" "etcds://127.0.0.1:$NTLS?$C&transport=grpc" "$H1_HINT"
            passes "nginx TLS + http2 grpc_pass, gRPC" "etcds://127.0.0.1:$NGRPCS?ttl=5&$C&transport=grpc"
            refused "nginx TLS + http2 grpc_pass, gateway" "etcds://127.0.0.1:$NGRPCS?$C&transport=gateway"
        fi
    fi
fi

# ---- haproxy: mode http (the server spoken to in HTTP/1.1), and proto h2
if [ -z "$HAPROXY" ]; then
    echo "skip: haproxy is not installed (apt-get install haproxy)"
    [ "${BATON_REQUIRE_ALL:-0}" = 1 ] && bad "haproxy missing"
else
    read -r HH1 HH2 < <(ports 2)
    H=$T/haproxy
    mkdir -p "$H"
    cat >"$H/haproxy.cfg" <<EOF
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend plain
    bind 127.0.0.1:$HH1
    default_backend plain
backend plain
    server etcd 127.0.0.1:$P
frontend h2
    bind 127.0.0.1:$HH2
    default_backend h2
backend h2
    server etcd 127.0.0.1:$P proto h2
EOF
    "$HAPROXY" -f "$H/haproxy.cfg" -db </dev/null >"$H/out" 2>&1 &
    pids+=($!)
    if ! listening "$HH1" || ! listening "$HH2"; then
        bad "haproxy did not start: $(tail -c 400 "$H/out")"
    else
        echo "== haproxy: $("$HAPROXY" -v 2>&1 | head -1)"
        passes "haproxy mode http, gateway" "etcd://127.0.0.1:$HH1?ttl=5&transport=gateway"
        refused "haproxy mode http, gRPC" "etcd://127.0.0.1:$HH1?transport=grpc" "$H1_HINT"
        passes "haproxy proto h2, gRPC" "etcd://127.0.0.1:$HH2?ttl=5&transport=grpc"
        refused "haproxy proto h2, gateway" "etcd://127.0.0.1:$HH2?transport=gateway"
    fi
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ]
