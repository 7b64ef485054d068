#!/bin/bash
# Start / stop throwaway etcd servers on free loopback ports (Debian's etcd-server
# 3.4 and etcd-client: `etcd`, `etcdctl`).
#
#   etcd.sh start   DIR             a single member; prints the client port (also DIR/port)
#   etcd.sh stop    DIR             stops it (also a paused one); no process is left
#   etcd.sh restart DIR             stop + start on the same ports and the same data
#   etcd.sh pause   DIR             SIGSTOP (clients see a silent server)
#   etcd.sh resume  DIR             SIGCONT
#   etcd.sh kill    DIR             SIGKILL (no clean shutdown); restart brings it back
#
#   etcd.sh cluster-start DIR [N]   N members (default 3) in DIR/m1..mN; prints the endpoints
#                                   127.0.0.1:c1,127.0.0.1:c2,... (also DIR/hosts) once the
#                                   cluster answers as a whole (a leader elected)
#   etcd.sh leader       DIR        prints the number of the member that leads
#   etcd.sh member-stop  DIR K      stops member K (member-pause, member-resume, member-kill too)
#   etcd.sh member-start DIR K      starts member K again (same ports, same data); waits until
#                                   it answers
#   etcd.sh cluster-stop DIR        stops every member
#   etcd.sh stop-all     DIR        stops every server of this script found under DIR (any
#                                   depth): a catch-all cleanup
#
# A server's DIR holds data/, etcd.log (its output), pid, port (while it runs;
# removed by stop/kill), last_port and peer_port (kept for restart). Members are
# such DIRs (DIR/mK); DIR/members holds one line per member: "K CLIENT PEER".
#
# Every URL is on 127.0.0.1 only. etcd 3.4 has no --unsafe-no-fsync (3.5 has):
# every write is fsync'd, as in production; heartbeat 100 ms, election timeout
# 1000 ms (the defaults) make the shortest lease etcd grants 1.5 s
# (3/2 x election timeout), which the lease tests rely on.
#
# Exits 77 when etcd or etcdctl is missing. ETCD_BIN and ETCDCTL_BIN override them.
set -u

die() { echo "etcd.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ETCD_BIN=${ETCD_BIN:-$(command -v etcd 2>/dev/null || true)}
ETCDCTL_BIN=${ETCDCTL_BIN:-$(command -v etcdctl 2>/dev/null || true)}
export ETCDCTL_API=3

need_server() {
    if [ -z "$ETCD_BIN" ] || [ ! -x "$ETCD_BIN" ] || [ -z "$ETCDCTL_BIN" ] || [ ! -x "$ETCDCTL_BIN" ]; then
        echo "etcd.sh: etcd is not installed (apt-get install etcd-server etcd-client)" >&2
        exit 77
    fi
}

# DIR's pid, when that process runs and is our etcd for DIR (not a reused pid).
server_pid() {
    local dir=$1 pid
    [ -s "$dir/pid" ] || return 1
    pid=$(cat "$dir/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--data-dir $dir/data" || return 1
    echo "$pid"
}

# 0 when the member on PORT serves reads through consensus (a leader exists).
# At most 2 s, so a paused server cannot hang the caller.
healthy() {
    timeout 3 "$ETCDCTL_BIN" --endpoints="127.0.0.1:$1" --dial-timeout=1s --command-timeout=2s \
        endpoint health >/dev/null 2>&1
}

# Starts etcd for DIR: NAME, client PORT, peer PPORT, CLUSTER (name=url,...), STATE
# (new|existing). With WAIT_S > 0, waits until it is healthy.
launch() { # DIR NAME PORT PPORT CLUSTER STATE WAIT_S
    local dir=$1 name=$2 port=$3 pport=$4 cluster=$5 state=$6 wait_s=$7
    rm -f "$dir/pid" "$dir/port"
    mkdir -p "$dir/data"
    chmod 700 "$dir/data"
    local curl=http://127.0.0.1:$port purl=http://127.0.0.1:$pport
    # setsid: a signal to the caller's process group (ctest's timeout, ^C) does not
    # reach the server; stop does.
    setsid "$ETCD_BIN" --name "$name" --data-dir "$dir/data" \
        --listen-client-urls "$curl" --advertise-client-urls "$curl" \
        --listen-peer-urls "$purl" --initial-advertise-peer-urls "$purl" \
        --initial-cluster "$cluster" --initial-cluster-state "$state" \
        --initial-cluster-token "$TOKEN" \
        --logger zap --log-outputs stderr --log-level warn \
        </dev/null >>"$dir/etcd.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/pid"
    echo "$port" >"$dir/last_port"
    echo "$pport" >"$dir/peer_port"
    [ "$wait_s" -gt 0 ] || return 0
    local i
    for i in $(seq 1 $((wait_s * 10))); do
        if ! pid_alive "$pid"; then
            echo "etcd.sh: the server in $dir exited during startup" >&2
            tail -n 30 "$dir/etcd.log" >&2
            rm -f "$dir/pid"
            return 1
        fi
        if healthy "$port"; then
            echo "$port" >"$dir/port"
            return 0
        fi
        sleep 0.1
    done
    echo "etcd.sh: the server in $dir did not serve on port $port within ${wait_s}s" >&2
    tail -n 30 "$dir/etcd.log" >&2
    do_stop "$dir"
    return 1
}

do_stop() {
    local dir=$1 pid i
    pid=$(server_pid "$dir") || { rm -f "$dir/pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null
    kill -CONT "$pid" 2>/dev/null   # a paused server handles TERM only once resumed
    for i in $(seq 1 200); do
        pid_alive "$pid" || break
        sleep 0.025
    done
    if pid_alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null
        for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
    fi
    rm -f "$dir/pid"
}

signal_server() { # DIR SIG
    local pid
    pid=$(server_pid "$1") || die "no server runs in $1"
    kill "-$2" "$pid" || die "kill -$2 $pid failed"
}

# The cluster token: one per server or cluster DIR, so members of different
# test clusters never join each other.
token_of() { echo "baton-$(echo "$1" | cksum | cut -d' ' -f1)"; }

# ---- clusters ------------------------------------------------------------

member_field() { # DIR K FIELD(2..3)
    awk -v k="$2" -v f="$3" '$1 == k { print $f }' "$1/members"
}
members_of() { awk '{ print $1 }' "$1/members"; }
initial_cluster() {
    awk '{ printf "%sm%s=http://127.0.0.1:%s", (NR > 1 ? "," : ""), $1, $3 }' "$1/members"
}

member_launch() { # DIR K STATE WAIT_S
    local dir=$1 k=$2
    TOKEN=$(token_of "$dir")
    server_pid "$dir/m$k" >/dev/null && return 0
    mkdir -p "$dir/m$k"
    launch "$dir/m$k" "m$k" "$(member_field "$dir" "$k" 2)" "$(member_field "$dir" "$k" 3)" \
        "$(initial_cluster "$dir")" "$3" "$4"
}

cluster_stop() {
    local dir=$1 k
    [ -f "$dir/members" ] || return 0
    for k in $(members_of "$dir"); do do_stop "$dir/m$k" & done
    wait
    for k in $(members_of "$dir"); do rm -f "$dir/m$k/port"; done
}

member_arg() { # DIR K
    [ -f "$1/members" ] || die "$1 holds no cluster (etcd.sh cluster-start)"
    [ -n "$(member_field "$1" "$2" 1)" ] || die "no member $2 in $1"
}

# ---- commands ------------------------------------------------------------

cmd=${1:-}
dir=${2:-}
usage="usage: $0 start|stop|restart|pause|resume|kill DIR | cluster-start DIR [N] | leader DIR | member-start|member-stop|member-pause|member-resume|member-kill DIR K | cluster-stop DIR | stop-all DIR"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
shift 2

case "$cmd" in
start)
    need_server
    dir=$(abs_dir "$dir")
    TOKEN=$(token_of "$dir")
    if server_pid "$dir" >/dev/null; then die "a server already runs in $dir (port $(cat "$dir/port" 2>/dev/null))"; fi
    rm -rf "$dir/data"
    for attempt in 1 2 3; do
        ports=($(free_ports 2)) || die "no free port"
        if launch "$dir" solo "${ports[0]}" "${ports[1]}" "solo=http://127.0.0.1:${ports[1]}" new 30; then
            echo "${ports[0]}"; exit 0
        fi
        rm -rf "$dir/data"
    done
    exit 1
    ;;
stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    do_stop "$dir"
    rm -f "$dir/port"
    ;;
restart)
    need_server
    [ -d "$dir" ] || die "$dir does not exist"
    dir=$(cd "$dir" && pwd)
    [ -s "$dir/last_port" ] && [ -s "$dir/peer_port" ] && [ -d "$dir/data" ] || die "$dir holds no server (was it started with etcd.sh start?)"
    port=$(cat "$dir/last_port"); pport=$(cat "$dir/peer_port")
    TOKEN=$(token_of "$dir")
    do_stop "$dir"
    rm -f "$dir/port"
    for attempt in 1 2 3; do
        if launch "$dir" solo "$port" "$pport" "solo=http://127.0.0.1:$pport" new 30; then echo "$port"; exit 0; fi
        sleep 0.3
    done
    exit 1
    ;;
pause) dir=$(cd "$dir" && pwd) && signal_server "$dir" STOP ;;
resume) dir=$(cd "$dir" && pwd) && signal_server "$dir" CONT ;;
kill)
    dir=$(cd "$dir" && pwd) || exit 1
    signal_server "$dir" KILL
    pid=$(cat "$dir/pid")
    for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
    rm -f "$dir/pid" "$dir/port"
    ;;
cluster-start)
    need_server
    n=${1:-3}
    [ "$n" -ge 1 ] 2>/dev/null || die "bad member count: $n"
    dir=$(abs_dir "$dir")
    cluster_stop "$dir"
    for k in $(seq 1 "$n"); do rm -rf "$dir/m$k"; done
    ports=($(free_ports $((2 * n)))) || die "no free ports"
    [ ${#ports[@]} -eq $((2 * n)) ] || die "no free ports"
    : >"$dir/members"
    hosts=""
    for k in $(seq 1 "$n"); do
        i=$(( (k - 1) * 2 ))
        echo "$k ${ports[$i]} ${ports[$((i + 1))]}" >>"$dir/members"
        hosts="$hosts${hosts:+,}127.0.0.1:${ports[$i]}"
    done
    echo "$hosts" >"$dir/hosts"
    # All at once: a member alone has no quorum and waits for the others.
    for k in $(seq 1 "$n"); do member_launch "$dir" "$k" new 0; done
    for i in $(seq 1 600); do
        ok=1
        for k in $(seq 1 "$n"); do
            healthy "$(member_field "$dir" "$k" 2)" || { ok=0; break; }
        done
        if [ $ok = 1 ]; then
            for k in $(seq 1 "$n"); do member_field "$dir" "$k" 2 >"$dir/m$k/port"; done
            echo "$hosts"
            exit 0
        fi
        sleep 0.1
    done
    echo "etcd.sh: the cluster in $dir did not become healthy within 60s" >&2
    for k in $(seq 1 "$n"); do echo "--- member $k:" >&2; tail -n 15 "$dir/m$k/etcd.log" >&2; done
    cluster_stop "$dir"
    exit 1
    ;;
leader)
    [ -f "$dir/members" ] || die "$dir holds no cluster"
    # endpoint status: "endpoint, ID, version, db size, is leader, is learner, ..."
    for k in $(members_of "$dir"); do
        port=$(member_field "$dir" "$k" 2)
        isl=$(timeout 3 "$ETCDCTL_BIN" --endpoints="127.0.0.1:$port" --dial-timeout=1s --command-timeout=2s \
            endpoint status 2>/dev/null | awk -F', ' '{ print $5 }')
        if [ "$isl" = true ]; then echo "$k"; exit 0; fi
    done
    echo "etcd.sh: no member of $dir leads" >&2
    exit 1
    ;;
member-start)
    need_server
    dir=$(cd "$dir" && pwd) || exit 1
    k=${1:-}; member_arg "$dir" "$k"
    # Its data dir knows the cluster already: "existing" is ignored then, as etcd does.
    if member_launch "$dir" "$k" existing 60; then member_field "$dir" "$k" 2; exit 0; fi
    exit 1
    ;;
member-stop)
    dir=$(cd "$dir" && pwd) || exit 1
    k=${1:-}; member_arg "$dir" "$k"
    do_stop "$dir/m$k"
    rm -f "$dir/m$k/port"
    ;;
member-pause|member-resume|member-kill)
    dir=$(cd "$dir" && pwd) || exit 1
    k=${1:-}; member_arg "$dir" "$k"
    case "$cmd" in
    member-pause) signal_server "$dir/m$k" STOP ;;
    member-resume) signal_server "$dir/m$k" CONT ;;
    member-kill)
        pid=$(server_pid "$dir/m$k") || die "member $k of $dir does not run"
        kill -KILL "$pid"
        for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
        rm -f "$dir/m$k/pid" "$dir/m$k/port"
        ;;
    esac
    ;;
cluster-stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    cluster_stop "$dir"
    ;;
stop-all)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    find "$dir" -name etcd.log -print0 2>/dev/null | while IFS= read -r -d '' log; do
        d=$(dirname "$log")
        if server_pid "$d" >/dev/null; then
            echo "etcd.sh: stopping a server left in $d" >&2
            do_stop "$d"
        fi
        rm -f "$d/port" "$d/pid"
    done
    ;;
*)
    echo "$usage" >&2; exit 2 ;;
esac
