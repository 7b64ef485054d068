#!/bin/bash
# A Sentinel-style failover of a Redis master and its replica, behind one
# address (a socat front, as a Sentinel-managed virtual IP would be), for
# scripts/check-faults.sh.
#
#   redis-failover.sh DIR init MASTER_PORT REPLICA_PORT FRONT_PORT
#   redis-failover.sh DIR stop [split]
#   redis-failover.sh DIR start
#
# init puts the front on the master. stop promotes the replica; start makes
# the old master a replica of the new one. Plain: stop takes the front down
# with every connection it forwards, start brings it back on the new master
# (clients see the address down for the time between). split: stop moves the
# front to the new master at once, but the connections already made stay on
# the old master, which still takes writes, until start demotes it and cuts
# them: what happens when clients are not told of a failover in time.
set -u
dir=$1 cmd=$2
cd "$dir" || exit 1

# socat runs as its own process group (setsid): the listener and the
# connections it forked go at once. Killing the children first let a
# reconnect be accepted, and kept, before the listener went.
front_up() {
    setsid socat "TCP-LISTEN:$FRONT,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$MASTER" \
        </dev/null >/dev/null 2>&1 &
    echo $! >front.pid
    for _ in $(seq 1 50); do redis-cli -p "$FRONT" PING >/dev/null 2>&1 && return 0; sleep 0.05; done
    return 1
}
group_kill() { [ -f "$1" ] && kill -KILL -- "-$(cat "$1")" 2>/dev/null; rm -f "$1"; }

case $cmd in
init)
    echo "MASTER=$3 REPLICA=$4 FRONT=$5" >state
    . ./state
    front_up
    ;;
stop)
    . ./state
    if [ "${3:-}" = split ]; then
        # the listener alone: its forwarded connections (to the old master) live on
        [ -f front.pid ] && kill -KILL "$(cat front.pid)" 2>/dev/null && mv front.pid old.pid
    else
        group_kill front.pid
    fi
    redis-cli -p "$REPLICA" REPLICAOF NO ONE >/dev/null
    echo "MASTER=$REPLICA REPLICA=$MASTER FRONT=$FRONT" >state
    . ./state
    [ "${3:-}" = split ] && front_up
    exit 0
    ;;
start)
    . ./state
    redis-cli -p "$REPLICA" REPLICAOF 127.0.0.1 "$MASTER" >/dev/null
    group_kill old.pid
    [ -f front.pid ] || front_up
    ;;
down)
    group_kill front.pid
    group_kill old.pid
    ;;
*)
    echo "usage: redis-failover.sh DIR init M R F | stop [split] | start | down" >&2
    exit 2
    ;;
esac
