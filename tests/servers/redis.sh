#!/bin/bash
# Start / stop a throwaway redis-server on a free loopback port.
# DIR/port holds the port while the server runs (removed by stop);
# DIR/last_port keeps it for restart.
#
#   redis.sh start   DIR [extra redis-server args...]   prints the port
#   redis.sh stop    DIR
#   redis.sh restart DIR                                same port, same args
#
# The server binds 127.0.0.1 only, keeps its files in DIR (pid, log, port,
# args) and saves nothing unless the extra args say otherwise. In the extra
# args the word @PORT@ is replaced by the chosen port (e.g. for TLS:
# --port 0 --tls-port @PORT@ ...). Exits 77 when redis-server is missing.
set -u

die() { echo "redis.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REDIS_SERVER=/usr/bin/redis-server
[ -x "$REDIS_SERVER" ] || REDIS_SERVER=$(command -v redis-server 2>/dev/null || true)

need_server() {
    if [ -z "$REDIS_SERVER" ] || [ ! -x "$REDIS_SERVER" ]; then
        echo "redis.sh: redis-server is not installed (apt-get install redis-server)" >&2
        exit 77
    fi
}

is_running() {
    local pid
    [ -s "$1/pid" ] || return 1
    pid=$(cat "$1/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && pid_alive "$pid"
}

launch() { # DIR PORT args...
    local dir=$1 port=$2; shift 2
    local extra=() a have_save=0
    for a in "$@"; do
        a=${a//@PORT@/$port}
        extra+=("$a")
        [ "$a" = "--save" ] && have_save=1
    done
    local base=(--bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize yes
                --pidfile "$dir/pid" --logfile "$dir/log" --protected-mode no)
    [ $have_save = 1 ] || base+=(--save '' --appendonly no)
    rm -f "$dir/pid"
    : >"$dir/log"
    "$REDIS_SERVER" "${base[@]}" "${extra[@]}" >"$dir/stdout" 2>&1 || {
        cat "$dir/stdout" "$dir/log" >&2; return 1; }
    # Wait until the server is ready (10 s max).
    local i
    for i in $(seq 1 400); do
        if grep -q "Ready to accept connections" "$dir/log" 2>/dev/null && is_running "$dir"; then
            echo "$port" >"$dir/port"
            echo "$port" >"$dir/last_port"
            return 0
        fi
        # a port taken meanwhile: the server aborts at once, no need to wait 10 s
        grep -qE "aborting|Failed listening" "$dir/log" 2>/dev/null && break
        sleep 0.025
    done
    echo "redis.sh: redis-server did not become ready on port $port" >&2
    cat "$dir/log" >&2
    do_stop "$dir"
    return 1
}

do_stop() {
    local dir=$1 pid i
    [ -s "$dir/pid" ] || return 0
    pid=$(cat "$dir/pid")
    if [ -n "$pid" ] && pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        for i in $(seq 1 400); do
            pid_alive "$pid" || break
            sleep 0.025
        done
        if pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
            for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
        fi
    fi
    rm -f "$dir/pid"
}

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|restart DIR [redis-server args...]" >&2; exit 2; }
shift 2

case "$cmd" in
start)
    need_server
    mkdir -p "$dir" || die "cannot create $dir"
    dir=$(cd "$dir" && pwd)
    if is_running "$dir"; then die "a server already runs in $dir (port $(cat "$dir/port" 2>/dev/null))"; fi
    : >"$dir/args"
    [ $# -eq 0 ] || printf '%s\0' "$@" >"$dir/args"
    port=""
    for attempt in 1 2 3; do
        port=$(free_port) || die "no free port"
        if launch "$dir" "$port" "$@"; then echo "$port"; exit 0; fi
    done
    exit 1
    ;;
stop)
    [ -d "$dir" ] || exit 0
    do_stop "$dir"
    rm -f "$dir/port"   # DIR/port exists only while the server runs
    ;;
restart)
    need_server
    [ -d "$dir" ] || die "$dir does not exist"
    dir=$(cd "$dir" && pwd)
    [ -s "$dir/last_port" ] || die "$dir/last_port is missing (was the server started with redis.sh start?)"
    port=$(cat "$dir/last_port")
    args=()
    if [ -s "$dir/args" ]; then mapfile -d '' args <"$dir/args"; fi
    do_stop "$dir"
    # The port may linger in TIME_WAIT; redis sets SO_REUSEADDR, retry briefly anyway.
    for attempt in 1 2 3 4 5; do
        if launch "$dir" "$port" "${args[@]}"; then echo "$port"; exit 0; fi
        sleep 0.2
    done
    exit 1
    ;;
*)
    echo "usage: $0 start|stop|restart DIR [redis-server args...]" >&2; exit 2 ;;
esac
