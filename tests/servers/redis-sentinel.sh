#!/bin/bash
# A Sentinel deployment on loopback: 1 master + 2 replicas + 3 sentinels
# (master name "mymaster", quorum 2), each in DIR/<port>/, with short timers
# (down-after 1000 ms, failover-timeout 3000 ms) so a failover takes seconds.
#
#   redis-sentinel.sh start DIR [extra redis-server args for the data nodes]
#                                    prints the first sentinel's port
#   redis-sentinel.sh stop DIR
#   redis-sentinel.sh sentinels DIR  "h:p,h:p,h:p" (for a redis-sentinel:// URI)
#   redis-sentinel.sh master DIR     the master's port, as the sentinels say
#   redis-sentinel.sh failover DIR   SENTINEL FAILOVER, waits for the new master
#   redis-sentinel.sh kill DIR       SIGKILLs the master, waits for the new one
#   redis-sentinel.sh settle DIR     waits until every live node replicates
#                                    the master (an old master is demoted
#                                    seconds after a switch)
#   redis-sentinel.sh revive DIR     restarts every killed node (the sentinels
#                                    make it a replica of the current master)
#
# DIR/port holds the first sentinel's port while the deployment runs (a ctest
# fixture's {port}). Exits 77 when redis-server is missing.
#
# With REDIS_SENTINEL_PASSWORD=PW in the environment at start, the data nodes
# and the sentinels require PW (requirepass; masterauth and the sentinels'
# auth-pass too); DIR/password keeps it for the other actions.
#
# With REDIS_SENTINEL_TLS=1 at start, everything speaks TLS only (port 0 +
# tls-port on the data nodes and the sentinels, tls-replication yes so the
# replicas and the sentinels reach the master over TLS, no client
# certificate required): DIR/tls/ holds the certificates
# (tests/servers/redis-tls-certs.sh: ca.crt, server.crt/key, wrong.crt) and
# tells the other actions to use TLS.
set -u

die() { echo "redis-sentinel.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REDIS_SERVER=/usr/bin/redis-server
[ -x "$REDIS_SERVER" ] || REDIS_SERVER=$(command -v redis-server 2>/dev/null || true)
NAME=mymaster

TLS_CLI=()
cli() { redis-cli -h 127.0.0.1 "${TLS_CLI[@]}" "$@" 2>/dev/null; }
tls_load() { # DIR: TLS mode if DIR/tls/ca.crt exists
    [ -s "$1/tls/ca.crt" ] && TLS_CLI=(--tls --cacert "$1/tls/ca.crt")
    return 0
}
tls_args() { # DIR PORT: the redis-server / sentinel.conf TLS settings
    local t=$1/tls
    printf '%s\0' port 0 tls-port "$2" tls-cert-file "$t/server.crt" tls-key-file "$t/server.key" \
        tls-ca-cert-file "$t/ca.crt" tls-auth-clients no tls-replication yes
}
pw_load() { # DIR: the deployment's password, if any, for redis-cli
    if [ -s "$1/password" ]; then REDISCLI_AUTH=$(cat "$1/password"); export REDISCLI_AUTH; fi
}

wait_log() { # FILE PATTERN: 10 s
    for _ in $(seq 1 400); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.025; done
    return 1
}

node_start() { # DIR PORT [args...]: a data node (its args kept for revive)
    local base=$1 d=$1/$2 port=$2; shift 2
    mkdir -p "$d"
    [ $# -eq 0 ] || printf '%s\0' "$@" >"$d/args"
    local args=()
    [ -s "$d/args" ] && mapfile -d '' args <"$d/args"
    : >"$d/log"
    [ -z "${REDISCLI_AUTH:-}" ] || args+=(--requirepass "$REDISCLI_AUTH" --masterauth "$REDISCLI_AUTH")
    if [ ${#TLS_CLI[@]} -gt 0 ]; then
        local k v
        while IFS= read -r -d '' k && IFS= read -r -d '' v; do args+=("--$k" "$v"); done < <(tls_args "$base" "$port")
    fi
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$port" --dir "$d" --daemonize yes --pidfile "$d/pid" \
        --logfile "$d/log" --protected-mode no --save '' --appendonly no "${args[@]}" >/dev/null 2>&1 || return 1
    wait_log "$d/log" "Ready to accept connections"
}

sentinel_start() { # DIR PORT MASTER_PORT
    local d=$1/$2
    mkdir -p "$d"
    cat >"$d/sentinel.conf" <<EOF
port $2
bind 127.0.0.1
protected-mode no
daemonize yes
pidfile $d/pid
logfile $d/log
dir $d
sentinel monitor $NAME 127.0.0.1 $3 2
sentinel down-after-milliseconds $NAME 1000
sentinel failover-timeout $NAME 3000
sentinel parallel-syncs $NAME 2
EOF
    if [ -n "${REDISCLI_AUTH:-}" ]; then
        printf 'requirepass %s\nsentinel auth-pass %s %s\n' "$REDISCLI_AUTH" "$NAME" "$REDISCLI_AUTH" >>"$d/sentinel.conf"
    fi
    if [ ${#TLS_CLI[@]} -gt 0 ]; then
        # the last "port" line wins: port 0, the sentinel on tls-port only
        local k v
        while IFS= read -r -d '' k && IFS= read -r -d '' v; do echo "$k $v"; done < <(tls_args "$1" "$2") >>"$d/sentinel.conf"
    fi
    : >"$d/log"
    "$REDIS_SERVER" "$d/sentinel.conf" --sentinel >/dev/null 2>&1 || return 1
    wait_log "$d/log" "+monitor master"
}

pid_of() { cat "$1/$2/pid" 2>/dev/null; }

master_port() {
    local s
    for s in $(cat "$1/sentinel_ports"); do
        cli -p "$s" SENTINEL get-master-addr-by-name $NAME | sed -n 2p && return 0
    done
    return 1
}

# Waits (30 s) until every sentinel names a master other than OLD that says
# ROLE master and has 1+ connected replica; prints it.
wait_new_master() { # DIR OLD
    local s m ok
    for _ in $(seq 1 300); do
        ok=1 m=""
        for s in $(cat "$1/sentinel_ports"); do
            local p
            p=$(cli -p "$s" SENTINEL get-master-addr-by-name $NAME | sed -n 2p)
            [ -n "$p" ] && [ "$p" != "$2" ] || { ok=0; break; }
            [ -z "$m" ] || [ "$m" = "$p" ] || { ok=0; break; }
            m=$p
        done
        if [ $ok = 1 ] && cli -p "$m" ROLE | head -1 | grep -q master; then echo "$m"; return 0; fi
        sleep 0.1
    done
    echo "redis-sentinel.sh: no new master within 30 s" >&2
    return 1
}

# Waits (30 s) until every live data node but the master M is a replica of
# M with its link up: the sentinels demote a reachable old master a few
# seconds after the switch (+convert-to-slave), and the next failover or
# test should start from a settled deployment.
wait_settled() { # DIR M
    local p ok
    for _ in $(seq 1 300); do
        ok=1
        for p in $(cat "$1/data_ports"); do
            [ "$p" = "$2" ] && continue
            [ -f "$1/$p/killed" ] && continue
            cli -p "$p" INFO replication | tr -d '\r' | grep -q "^master_port:$2\$" || { ok=0; break; }
            cli -p "$p" INFO replication | tr -d '\r' | grep -q "^master_link_status:up" || { ok=0; break; }
        done
        [ $ok = 1 ] && return 0
        sleep 0.1
    done
    echo "redis-sentinel.sh: the deployment did not settle within 30 s" >&2
    return 1
}

do_stop() {
    local d pid
    for d in "$1"/*/; do
        [ -s "$d/pid" ] || continue
        pid=$(cat "$d/pid")
        pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null
        rm -f "$d/pid"
    done
    rm -f "$1/port"
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|sentinels|master|failover|kill|revive DIR" >&2; exit 2; }
shift 2
[ "$cmd" = start ] || { pw_load "$dir"; tls_load "$dir"; }

case "$cmd" in
start)
    if [ -z "$REDIS_SERVER" ] || [ ! -x "$REDIS_SERVER" ]; then
        echo "redis-sentinel.sh: redis-server is not installed (apt-get install redis-server)" >&2
        exit 77
    fi
    dir=$(abs_dir "$dir")
    do_stop "$dir"
    rm -rf "${dir:?}"/[0-9]* "$dir/password" "$dir/tls"
    if [ "${REDIS_SENTINEL_TLS:-0}" = 1 ]; then
        bash "$(dirname "${BASH_SOURCE[0]}")/redis-tls-certs.sh" "$dir/tls" || exit $?
        tls_load "$dir"
    fi
    if [ -n "${REDIS_SENTINEL_PASSWORD:-}" ]; then
        printf '%s' "$REDIS_SENTINEL_PASSWORD" >"$dir/password"
        chmod 600 "$dir/password"
    fi
    pw_load "$dir"
    ports=$(free_ports 6) || die "no free ports"
    set -- $ports "$@"
    m=$1 r1=$2 r2=$3 s1=$4 s2=$5 s3=$6
    shift 6
    node_start "$dir" "$m" "$@" || die "master did not start"
    node_start "$dir" "$r1" "$@" --replicaof 127.0.0.1 "$m" || die "replica did not start"
    node_start "$dir" "$r2" "$@" --replicaof 127.0.0.1 "$m" || die "replica did not start"
    for p in $r1 $r2; do
        for _ in $(seq 1 200); do cli -p "$p" INFO replication | grep -q "master_link_status:up" && break; sleep 0.05; done
    done
    echo "$m $r1 $r2" >"$dir/data_ports"
    echo "$s1 $s2 $s3" >"$dir/sentinel_ports"
    for p in $s1 $s2 $s3; do sentinel_start "$dir" "$p" "$m" || die "sentinel $p did not start"; done
    # Ready when every sentinel knows both replicas and the other sentinels.
    for p in $s1 $s2 $s3; do
        for _ in $(seq 1 400); do
            st=$(cli -p "$p" SENTINEL master $NAME | paste -sd' ')
            echo "$st" | grep -q "num-slaves 2" && echo "$st" | grep -q "num-other-sentinels 2" && break
            sleep 0.05
        done
    done
    echo "$s1" >"$dir/port"
    echo "$s1"
    ;;
stop)
    [ -d "$dir" ] && do_stop "$dir"
    exit 0
    ;;
sentinels)
    first=1
    for p in $(cat "$dir/sentinel_ports"); do
        [ $first = 1 ] || printf ','
        printf '127.0.0.1:%s' "$p"
        first=0
    done
    echo
    ;;
master)
    master_port "$dir"
    ;;
failover)
    old=$(master_port "$dir") || die "no master"
    s=$(cut -d' ' -f1 "$dir/sentinel_ports")
    # A failover may be refused while the previous one settles: retry.
    for _ in $(seq 1 50); do
        cli -p "$s" SENTINEL FAILOVER $NAME | grep -q OK && break
        sleep 0.2
    done
    wait_new_master "$dir" "$old"
    ;;
settle)
    wait_settled "$dir" "$(master_port "$dir")"
    ;;
kill)
    old=$(master_port "$dir") || die "no master"
    pid=$(pid_of "$dir" "$old")
    [ -n "$pid" ] && kill -KILL "$pid"
    touch "$dir/$old/killed"
    wait_new_master "$dir" "$old"
    ;;
revive)
    for d in "$dir"/*/; do
        [ -f "$d/killed" ] || continue
        p=$(basename "$d")
        rm -f "$d/killed" "$d/pid"
        node_start "$dir" "$p" || die "node $p did not restart"
    done
    ;;
*)
    echo "usage: $0 start|stop|sentinels|master|failover|kill|revive DIR" >&2; exit 2 ;;
esac
