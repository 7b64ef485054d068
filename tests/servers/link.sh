#!/usr/bin/env bash
# A loopback link that a test can freeze or cut: a socat forwarder in its own
# process group between clients and an engine.
#
#   link.sh start DIR TARGET_PORT [TARGET_HOST]   prints the port clients connect to
#   link.sh freeze DIR    SIGSTOP the forwarder: sockets stay open, no byte moves
#                         (a partition, a dead switch, a paused VM); new connects
#                         complete in the kernel's backlog and then hang too
#   link.sh thaw DIR      SIGCONT: bytes move again
#   link.sh cut DIR       SIGKILL the forwarder: every forwarded connection is reset
#                         (and new connects are refused) until `start` again
#   link.sh stop DIR      cut, and forget DIR's state
#
# DIR holds the state (pid, ports); one DIR per link. Needs socat.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
die() { echo "link.sh: $*" >&2; exit 1; }
cmd=${1:-} dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || die "usage: link.sh start|freeze|thaw|cut|stop DIR [TARGET_PORT [HOST]]"
command -v socat >/dev/null || die "socat is not installed (scripts/install-deps.sh)"
mkdir -p "$dir" || die "cannot create $dir"

up() {
    local port=$1 target=$2 host=$3
    setsid socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" "TCP:$host:$target,nodelay" \
        </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 100); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
        sleep 0.02
    done
    die "socat did not listen on $port"
}
group() { [ -f "$dir/pid" ] && kill "-$1" -- "-$(cat "$dir/pid")" 2>/dev/null; return 0; }

case $cmd in
start)
    target=${3:-} host=${4:-127.0.0.1}
    [ -n "$target" ] || die "start needs TARGET_PORT"
    if [ -f "$dir/port" ]; then port=$(cat "$dir/port"); else port=$(free_port) || die "no free port"; fi
    group KILL
    echo "$port" >"$dir/port"; echo "$target $host" >"$dir/target"
    up "$port" "$target" "$host"
    echo "$port"
    ;;
freeze) group STOP ;;
thaw) group CONT ;;
cut) group CONT; group KILL; rm -f "$dir/pid" ;;
stop) group CONT; group KILL; rm -f "$dir/pid" "$dir/port" "$dir/target" ;;
*) die "unknown command $cmd" ;;
esac
