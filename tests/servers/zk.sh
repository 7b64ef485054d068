#!/bin/bash
# Start / stop throwaway ZooKeeper servers on free loopback ports (Debian's
# `zookeeper` package: /usr/share/java/zookeeper.jar, run with java directly).
#
#   zk.sh start   DIR            a standalone server; prints the port
#   zk.sh stop    DIR            stops it (also a paused one); no process is left
#   zk.sh restart DIR            stop + start on the same port and the same data
#                                (ZooKeeper always persists: znodes and sessions survive)
#   zk.sh pause   DIR            SIGSTOP the JVM (clients see a silent server)
#   zk.sh resume  DIR            SIGCONT
#   zk.sh kill    DIR            SIGKILL (no clean shutdown); restart brings it back
#
#   zk.sh ensemble-start DIR [N] N members (default 3) in DIR/m1..mN; prints the
#                                connect string 127.0.0.1:p1,127.0.0.1:p2,... (also DIR/hosts)
#                                once every member reports Mode: leader/follower
#   zk.sh leader       DIR       prints the number of the member that leads
#   zk.sh member-stop  DIR K     stops member K (pause/resume/kill: member-pause, ...)
#   zk.sh member-start DIR K     starts member K again (same ports, same data); waits until
#                                it serves as leader or follower
#   zk.sh ensemble-stop DIR      stops every member
#   zk.sh stop-all DIR           stops every server of this script found under DIR
#                                (standalone or member, any depth): a catch-all cleanup
#
# A server's DIR holds zoo.cfg, data/, zookeeper.log (the server's output), pid,
# port (while it runs; removed by stop/kill) and last_port (kept for restart).
# Members are such DIRs (DIR/mK), plus myid in data/.
#
# The servers bind 127.0.0.1 only (clientPortAddress, quorum and election
# addresses), run with tickTime=200 so session tests are fast: ZooKeeper
# clamps a client's requested session timeout to [2, 20] ticks by default;
# here minSessionTimeout stays 2*tickTime = 400 ms and maxSessionTimeout is
# raised to 60000 ms. All four-letter words are allowed (srvr/ruok are used
# here to wait for readiness), the admin HTTP server is off, forceSync=no
# (data reaches the page cache, so it survives a process kill or restart;
# only a machine crash could lose it: fine for tests).
#
# Exits 77 when java or the ZooKeeper jar is missing. ZK_JAVA and ZK_CLASSPATH
# override where they are found.
set -u

die() { echo "zk.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ZK_JAVA=${ZK_JAVA:-}
if [ -z "$ZK_JAVA" ]; then
    if [ -x /usr/bin/java ]; then ZK_JAVA=/usr/bin/java; else ZK_JAVA=$(command -v java 2>/dev/null || true); fi
fi
# zookeeper.jar's manifest names its dependencies (Debian); slf4j-simple gives the
# server a log (to its stderr, i.e. DIR/zookeeper.log) instead of slf4j's no-op.
if [ -z "${ZK_CLASSPATH:-}" ]; then
    ZK_CLASSPATH=/usr/share/java/zookeeper.jar
    [ -f /usr/share/java/slf4j-simple.jar ] && ZK_CLASSPATH=$ZK_CLASSPATH:/usr/share/java/slf4j-simple.jar
fi
ZK_JAR=${ZK_CLASSPATH%%:*}

need_server() {
    if [ -z "$ZK_JAVA" ] || [ ! -x "$ZK_JAVA" ]; then
        echo "zk.sh: java is not installed (apt-get install zookeeper default-jre-headless)" >&2
        exit 77
    fi
    if [ ! -f "$ZK_JAR" ]; then
        echo "zk.sh: ZooKeeper is not installed ($ZK_JAR missing; apt-get install zookeeper)" >&2
        exit 77
    fi
}

# DIR's pid, when that process runs and is our JVM for DIR (not a reused pid).
server_pid() {
    local dir=$1 pid
    [ -s "$dir/pid" ] || return 1
    pid=$(cat "$dir/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/zoo.cfg" || return 1
    echo "$pid"
}

# A four-letter word to 127.0.0.1:PORT; prints the answer. At most 2 s, so a
# paused server cannot hang the caller.
fourlw() {
    local port=$1 word=$2
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" || exit 1
printf %s "$1" >&3
cat <&3' "$port" "$word" 2>/dev/null
}

# The Mode: line of srvr ("standalone", "leader", "follower"), empty when not serving.
server_mode() {
    fourlw "$1" srvr | sed -n 's/^Mode: *//p' | tr -d '\r'
}

# Starts the JVM for DIR (zoo.cfg written) on PORT; waits until srvr reports a
# mode matching WANT (a grep -E pattern) within WAIT_S seconds. An empty WANT
# returns at once (an ensemble member: its mode is checked by the caller).
launch() { # DIR PORT WANT WAIT_S
    local dir=$1 port=$2 want=$3 wait_s=$4
    rm -f "$dir/pid" "$dir/port"
    mkdir -p "$dir/data"
    # -Xshare:auto + C1 only + serial GC: ~1-2 s to serve on a small machine;
    # no perf data files in /tmp. setsid: a signal to the caller's process group
    # (ctest's timeout, ^C) does not reach the server; stop does.
    setsid "$ZK_JAVA" -Xmx256m -Xms16m -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
        -XX:-UsePerfData -Djava.net.preferIPv4Stack=true -Djava.awt.headless=true \
        -Dzookeeper.snapshot.trust.empty=true -Dzookeeper.jmx.log4j.disable=true \
        -Dorg.slf4j.simpleLogger.showDateTime=true \
        -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
        -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
        </dev/null >>"$dir/zookeeper.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/pid"
    if [ -z "$want" ]; then
        echo "$port" >"$dir/last_port"
        return 0
    fi
    local i mode steps=$((wait_s * 20))
    for i in $(seq 1 "$steps"); do
        if ! pid_alive "$pid"; then
            echo "zk.sh: the server in $dir exited during startup" >&2
            tail -n 30 "$dir/zookeeper.log" >&2
            rm -f "$dir/pid"
            return 1
        fi
        mode=$(server_mode "$port")
        if [ -n "$mode" ] && echo "$mode" | grep -Eq "$want"; then
            echo "$port" >"$dir/port"
            echo "$port" >"$dir/last_port"
            return 0
        fi
        sleep 0.05
    done
    echo "zk.sh: the server in $dir did not serve on port $port within ${wait_s}s (mode '$mode')" >&2
    tail -n 30 "$dir/zookeeper.log" >&2
    do_stop "$dir"
    return 1
}

do_stop() {
    local dir=$1 pid i
    pid=$(server_pid "$dir") || { rm -f "$dir/pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null
    kill -CONT "$pid" 2>/dev/null   # a paused JVM handles TERM only once resumed
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

write_standalone_cfg() { # DIR PORT
    cat >"$1/zoo.cfg" <<EOF
# written by tests/servers/zk.sh
tickTime=200
dataDir=$1/data
clientPort=$2
clientPortAddress=127.0.0.1
maxSessionTimeout=60000
admin.enableServer=false
4lw.commands.whitelist=*
standaloneEnabled=true
forceSync=no
preAllocSize=4096
maxClientCnxns=0
EOF
}

# ---- ensembles -----------------------------------------------------------
# DIR/members holds one line per member: "K CLIENT QUORUM ELECTION".

member_field() { # DIR K FIELD(2..4)
    awk -v k="$2" -v f="$3" '$1 == k { print $f }' "$1/members"
}

write_member_cfg() { # DIR K
    local dir=$1 k=$2 m=$1/m$2 cport
    cport=$(member_field "$dir" "$k" 2)
    mkdir -p "$m/data"
    echo "$k" >"$m/data/myid"
    {
        echo "# written by tests/servers/zk.sh (member $k of $(wc -l <"$dir/members"))"
        echo "tickTime=200"
        # Generous in ticks: a busy 2-core machine must not drop followers.
        echo "initLimit=50"
        echo "syncLimit=15"
        echo "dataDir=$m/data"
        echo "clientPort=$cport"
        echo "clientPortAddress=127.0.0.1"
        echo "maxSessionTimeout=60000"
        echo "admin.enableServer=false"
        echo "4lw.commands.whitelist=*"
        echo "forceSync=no"
        echo "preAllocSize=4096"
        echo "maxClientCnxns=0"
        echo "cnxTimeout=1000"
        local kk c q e
        while read -r kk c q e; do
            echo "server.$kk=127.0.0.1:$q:$e"
        done <"$dir/members"
    } >"$m/zoo.cfg"
}

members_of() { awk '{ print $1 }' "$1/members"; }

wait_ensemble() { # DIR WAIT_S: every running member leads or follows, exactly one leads
    local dir=$1 wait_s=$2 i k port mode leaders ok
    for i in $(seq 1 $((wait_s * 10))); do
        ok=1; leaders=0
        for k in $(members_of "$dir"); do
            server_pid "$dir/m$k" >/dev/null || continue
            port=$(member_field "$dir" "$k" 2)
            mode=$(server_mode "$port")
            case "$mode" in
            leader) leaders=$((leaders + 1)) ;;
            follower) ;;
            *) ok=0 ;;
            esac
        done
        if [ $ok = 1 ] && [ $leaders = 1 ]; then return 0; fi
        sleep 0.1
    done
    echo "zk.sh: the ensemble in $dir has no leader after ${wait_s}s" >&2
    for k in $(members_of "$dir"); do
        echo "--- member $k:" >&2; tail -n 15 "$dir/m$k/zookeeper.log" >&2
    done
    return 1
}

member_launch() { # DIR K: start member K, return once its JVM runs (mode checked later)
    local dir=$1 k=$2 m=$1/m$2
    server_pid "$m" >/dev/null && return 0
    write_member_cfg "$dir" "$k"
    # A member alone serves nothing (no quorum): the caller waits for the modes.
    launch "$m" "$(member_field "$dir" "$k" 2)" '' 0
}

ensemble_stop() {
    local dir=$1 k
    [ -f "$dir/members" ] || return 0
    for k in $(members_of "$dir"); do
        do_stop "$dir/m$k" &
    done
    wait
    for k in $(members_of "$dir"); do rm -f "$dir/m$k/port"; done
}

member_arg() { # DIR K
    [ -f "$1/members" ] || die "$1 holds no ensemble (zk.sh ensemble-start)"
    [ -n "$(member_field "$1" "$2" 1)" ] || die "no member $2 in $1"
}

# ---- commands ------------------------------------------------------------

cmd=${1:-}
dir=${2:-}
usage="usage: $0 start|stop|restart|pause|resume|kill DIR | ensemble-start DIR [N] | leader DIR | member-start|member-stop|member-pause|member-resume|member-kill DIR K | ensemble-stop DIR | stop-all DIR"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
shift 2

case "$cmd" in
start)
    need_server
    dir=$(abs_dir "$dir")
    if server_pid "$dir" >/dev/null; then die "a server already runs in $dir (port $(cat "$dir/port" 2>/dev/null))"; fi
    for attempt in 1 2 3; do
        port=$(free_ports 1) || die "no free port"
        write_standalone_cfg "$dir" "$port"
        if launch "$dir" "$port" '^standalone$' 30; then echo "$port"; exit 0; fi
    done
    exit 1
    ;;
stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    do_stop "$dir"
    rm -f "$dir/port"   # DIR/port exists only while the server runs
    ;;
restart)
    need_server
    [ -d "$dir" ] || die "$dir does not exist"
    dir=$(cd "$dir" && pwd)
    [ -s "$dir/last_port" ] && [ -f "$dir/zoo.cfg" ] || die "$dir holds no server (was it started with zk.sh start?)"
    port=$(cat "$dir/last_port")
    do_stop "$dir"
    rm -f "$dir/port"
    # ZooKeeper sets SO_REUSEADDR; retry briefly anyway.
    for attempt in 1 2 3; do
        if launch "$dir" "$port" '^standalone$' 30; then echo "$port"; exit 0; fi
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
ensemble-start)
    need_server
    n=${1:-3}
    [ "$n" -ge 1 ] 2>/dev/null || die "bad member count: $n"
    dir=$(abs_dir "$dir")
    ensemble_stop "$dir"
    ports=($(free_ports $((3 * n)))) || die "no free ports"
    [ ${#ports[@]} -eq $((3 * n)) ] || die "no free ports"
    : >"$dir/members"
    for k in $(seq 1 "$n"); do
        i=$(( (k - 1) * 3 ))
        echo "$k ${ports[$i]} ${ports[$((i + 1))]} ${ports[$((i + 2))]}" >>"$dir/members"
    done
    hosts=""
    for k in $(seq 1 "$n"); do
        hosts="$hosts${hosts:+,}127.0.0.1:$(member_field "$dir" "$k" 2)"
    done
    echo "$hosts" >"$dir/hosts"
    # All JVMs at once: they elect a leader as soon as a majority is up.
    rc=0
    for k in $(seq 1 "$n"); do member_launch "$dir" "$k" & done
    for k in $(seq 1 "$n"); do wait -n || rc=1; done
    if [ $rc = 0 ] && wait_ensemble "$dir" 60; then
        for k in $(seq 1 "$n"); do member_field "$dir" "$k" 2 >"$dir/m$k/port"; done
        echo "$hosts"
        exit 0
    fi
    ensemble_stop "$dir"
    exit 1
    ;;
leader)
    [ -f "$dir/members" ] || die "$dir holds no ensemble"
    for k in $(members_of "$dir"); do
        if [ "$(server_mode "$(member_field "$dir" "$k" 2)")" = leader ]; then echo "$k"; exit 0; fi
    done
    echo "zk.sh: no member of $dir leads" >&2
    exit 1
    ;;
member-start)
    need_server
    dir=$(cd "$dir" && pwd) || exit 1
    k=${1:-}; member_arg "$dir" "$k"
    member_launch "$dir" "$k" || exit 1
    # Wait until it has joined (the rest of the ensemble may also be electing).
    for i in $(seq 1 600); do
        case "$(server_mode "$(member_field "$dir" "$k" 2)")" in
        leader|follower) member_field "$dir" "$k" 2 >"$dir/m$k/port"; member_field "$dir" "$k" 2; exit 0 ;;
        esac
        sleep 0.1
    done
    echo "zk.sh: member $k of $dir did not join within 60s" >&2
    tail -n 20 "$dir/m$k/zookeeper.log" >&2
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
ensemble-stop)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    ensemble_stop "$dir"
    ;;
stop-all)
    [ -d "$dir" ] || exit 0
    dir=$(cd "$dir" && pwd)
    find "$dir" -name zoo.cfg -print0 2>/dev/null | while IFS= read -r -d '' cfg; do
        d=$(dirname "$cfg")
        if server_pid "$d" >/dev/null; then
            echo "zk.sh: stopping a server left in $d" >&2
            do_stop "$d"
        fi
        rm -f "$d/port" "$d/pid"
    done
    ;;
*)
    echo "$usage" >&2; exit 2 ;;
esac
