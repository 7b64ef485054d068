#!/bin/bash
# Start / stop a throwaway Redis Cluster on loopback: 3 masters with one
# replica each (6 redis-servers, cluster-enabled yes, cluster-node-timeout
# 1000 ms so a failover takes ~2 s), in temp dirs under DIR.
#
#   redis-cluster.sh start DIR         prints the first master's port
#   redis-cluster.sh stop DIR
#   redis-cluster.sh failover DIR      every replica takes over from its master (CLUSTER FAILOVER FORCE)
#   redis-cluster.sh wait-ok DIR       waits (30 s max) until every live node says cluster_state:ok
#                                      and every live replica is in sync
#
# DIR/port holds the first master's port while the cluster runs (the ctest
# fixture's "{port}"; redis-cluster://127.0.0.1:{port} finds the rest);
# DIR/ports lists every node's port; DIR/nN/ is node N (redis.sh layout:
# pid, log, port). Exits 77 when redis-server or redis-cli is missing.
#
# With REDIS_CLUSTER_TLS=1 at start, the nodes speak TLS only (port 0 +
# tls-port, tls-cluster yes for the bus, tls-replication yes, no client
# certificate required): DIR/tls/ holds the certificates
# (tests/servers/redis-tls-certs.sh: ca.crt, server.crt/key, wrong.crt) and
# tells the other actions to use TLS.
set -u
die() { echo "redis-cluster.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=6

# N ports P where both P and P+10000 (the cluster bus) are free. Both below
# the kernel's ephemeral range: there, any test's outgoing connection (or
# free_port, which binds port 0) could take the bus port between this check
# and the node's bind, and the node could not start (seen in CI).
bus_ports() {
    /usr/bin/python3 -c 'import socket, sys, random
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
hi = max(low - 10001, 12000)
got = []
for _ in range(2000):
    p = random.randint(10000, hi)
    ok = True
    for q in (p, p + 10000):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", q))
        except OSError:
            ok = False
        s.close()
    if ok and p not in got:
        got.append(p)
    if len(got) == int(sys.argv[1]):
        break
print("\n".join(map(str, got)))' "$1"
}

TLS_CLI=()
tls_load() { [ -s "$1/tls/ca.crt" ] && TLS_CLI=(--tls --cacert "$1/tls/ca.crt"); return 0; }
rcli() { redis-cli "${TLS_CLI[@]}" "$@"; }

wait_ok() {
    local dir=$1 p i ok
    for i in $(seq 1 300); do
        ok=1
        for p in $(cat "$dir/ports"); do
            rcli -p "$p" PING >/dev/null 2>&1 || continue   # a killed node does not count
            rcli -p "$p" CLUSTER INFO 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
            # a replica counts once its copy is in sync
            if rcli -p "$p" ROLE 2>/dev/null | head -1 | grep -q slave; then
                rcli -p "$p" INFO replication 2>/dev/null | grep -q 'master_link_status:up' || ok=0
            fi
        done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    return 1
}

cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|wait-ok|failover DIR" >&2; exit 2; }
[ "$cmd" = start ] || tls_load "$dir"
case "$cmd" in
start)
    command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
        echo "redis-cluster.sh: redis-server/redis-cli are not installed" >&2; exit 77; }
    dir=$(abs_dir "$dir")
    [ -s "$dir/port" ] && die "a cluster already runs in $dir"
    rm -rf "$dir/tls"
    tls=()
    if [ "${REDIS_CLUSTER_TLS:-0}" = 1 ]; then
        bash "$here/redis-tls-certs.sh" "$dir/tls" || exit $?
        tls_load "$dir"
        t=$dir/tls
        # after redis.sh's --port: port 0, the node on tls-port only
        tls=(--port 0 --tls-cert-file "$t/server.crt" --tls-key-file "$t/server.key"
             --tls-ca-cert-file "$t/ca.crt" --tls-auth-clients no --tls-replication yes --tls-cluster yes)
    fi
    ports=$(bus_ports $N)
    [ "$(echo "$ports" | wc -l)" = $N ] || die "no free ports"
    : >"$dir/ports"
    i=0 addrs=()
    for p in $ports; do
        i=$((i + 1))
        # a port taken meanwhile (another test's server): a new pair, up to 5 times
        for try in 1 2 3 4 5; do
            rm -rf "$dir/n$i"; mkdir -p "$dir/n$i"
            # redis.sh picks a port; the cluster needs P+10000 free too, so ours
            # goes last on the command line, which redis-server takes.
            if [ ${#tls[@]} -gt 0 ]; then pa=(--tls-port "$p" "${tls[@]}"); else pa=(--port "$p"); fi
            bash "$here/redis.sh" start "$dir/n$i" "${pa[@]}" --cluster-enabled yes \
                --cluster-config-file "$dir/n$i/nodes.conf" --cluster-node-timeout 1000 \
                --cluster-replica-validity-factor 0 --repl-diskless-sync-delay 0 >/dev/null && break
            bash "$here/redis.sh" stop "$dir/n$i" >/dev/null 2>&1
            [ "$try" = 5 ] && die "node $i did not start"
            p=$(bus_ports 1)
            [ -n "$p" ] || die "no free ports"
        done
        # redis-server takes the last --port: ours, not the one redis.sh chose
        echo "$p" >"$dir/n$i/port"
        echo "$p" >>"$dir/ports"
        addrs+=("127.0.0.1:$p")
    done
    rcli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1 || {
        cat "$dir/create.log" >&2; die "cluster create failed"; }
    wait_ok "$dir" || die "the cluster did not reach cluster_state:ok"
    head -1 "$dir/ports" >"$dir/port"
    cat "$dir/port"
    ;;
stop)
    [ -d "$dir" ] || exit 0
    for d in "$dir"/n*; do [ -d "$d" ] && bash "$here/redis.sh" stop "$d"; done
    rm -f "$dir/port"
    ;;
wait-ok)
    wait_ok "$dir"
    ;;
failover)
    # every replica takes over from its master at once, without waiting for
    # its copy to catch up (FORCE): grants the replica had not received are
    # gone, as in a master crash; the old masters become replicas
    for p in $(cat "$dir/ports"); do
        if rcli -p "$p" ROLE 2>/dev/null | head -1 | grep -q slave; then
            rcli -p "$p" CLUSTER FAILOVER FORCE >/dev/null 2>&1
        fi
    done
    ;;
*) echo "usage: $0 start|stop|wait-ok|failover DIR" >&2; exit 2 ;;
esac
