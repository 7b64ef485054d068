#!/bin/bash
# Start / stop a throwaway PostgreSQL server (Debian's postgresql-15) on a free
# loopback port.
#
#   postgres.sh start   DIR     initdb in DIR/data (first time), start; prints the port
#   postgres.sh stop    DIR     stops it (also a paused one); no process is left
#   postgres.sh restart DIR     stop + start on the same port and the same data
#   postgres.sh pause   DIR     SIGSTOP the postmaster and every backend (a silent server)
#   postgres.sh resume  DIR     SIGCONT
#   postgres.sh stop-all DIR    stops every server of this script found under DIR (any depth)
#
# DIR holds data/ (the cluster), sock/ (the unix socket), postgres.log, port
# (while it runs), last_port (kept for restart), user and password.
#
# The superuser is "baton" with the password in DIR/password ("baton-test"):
# TCP connections authenticate with scram-sha-256, the unix socket in DIR/sock
# is trusted (for the script itself). The server binds 127.0.0.1 only, with
# fsync off (tests only: a machine crash may lose data, a process kill may not).
#
# PostgreSQL refuses to run as root: as root the cluster belongs to, and the
# server runs as, an unprivileged user (PG_RUN_USER, default nobody; DIR is
# chowned to it, and its parents must be searchable by it).
#
# Exits 77 when the server binaries are missing. PG_BINDIR overrides where
# they are found.
set -u

die() { echo "postgres.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PG_BINDIR=${PG_BINDIR:-}
if [ -z "$PG_BINDIR" ]; then
    for d in /usr/lib/postgresql/*/bin; do
        [ -x "$d/postgres" ] && PG_BINDIR=$d
    done
fi
PG_USER=baton
PG_PASSWORD=baton-test
PG_RUN_USER=${PG_RUN_USER:-nobody}

need_server() {
    if [ -z "$PG_BINDIR" ] || [ ! -x "$PG_BINDIR/postgres" ] || [ ! -x "$PG_BINDIR/initdb" ]; then
        echo "postgres.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2
        exit 77
    fi
}

# Runs a command as the user that owns the cluster.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid="$PG_RUN_USER" --regid="$(id -g "$PG_RUN_USER")" --clear-groups \
            env HOME="$DIR" "$@"
    else
        "$@"
    fi
}

# The postmaster's pid, when it runs for DIR.
server_pid() {
    local pid
    [ -s "$DIR/data/postmaster.pid" ] || return 1
    pid=$(head -n 1 "$DIR/data/postmaster.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DIR/data" || return 1
    echo "$pid"
}

# The postmaster and its children (the backends), for pause/resume.
server_tree() {
    local pid=$1
    echo "$pid"
    pgrep -P "$pid" 2>/dev/null
}

init_cluster() {
    [ -f "$DIR/data/PG_VERSION" ] && return 0
    rm -rf "$DIR/data"
    mkdir -p "$DIR/sock"
    printf '%s\n' "$PG_PASSWORD" >"$DIR/pwfile"
    echo "$PG_USER" >"$DIR/user"
    echo "$PG_PASSWORD" >"$DIR/password"
    if [ "$(id -u)" = 0 ]; then
        id "$PG_RUN_USER" >/dev/null 2>&1 || die "no user $PG_RUN_USER to run the server as (set PG_RUN_USER)"
        chown -R "$PG_RUN_USER" "$DIR"
    fi
    as_owner "$PG_BINDIR/initdb" -D "$DIR/data" -U "$PG_USER" --pwfile="$DIR/pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 --no-sync \
        >"$DIR/initdb.log" 2>&1 || { cat "$DIR/initdb.log" >&2; die "initdb failed in $DIR/data"; }
    rm -f "$DIR/pwfile"
}

launch() { # PORT
    local port=$1 i
    rm -f "$DIR/port"
    [ "$(id -u)" = 0 ] && chown -R "$PG_RUN_USER" "$DIR"
    # setsid: a signal to the caller's process group (ctest's timeout, ^C)
    # does not reach the server; stop does.
    as_owner setsid "$PG_BINDIR/postgres" -D "$DIR/data" -p "$port" -k "$DIR/sock" \
        -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
        -c max_connections=200 -c shared_buffers=16MB -c logging_collector=off \
        -c log_min_messages=warning -c unix_socket_permissions=0777 \
        </dev/null >>"$DIR/postgres.log" 2>&1 &
    local spid=$!
    for i in $(seq 1 300); do
        if ! pid_alive "$spid" && ! server_pid >/dev/null; then
            echo "postgres.sh: the server in $DIR exited during startup" >&2
            tail -n 20 "$DIR/postgres.log" >&2
            return 1
        fi
        if as_owner "$PG_BINDIR/pg_isready" -q -h 127.0.0.1 -p "$port" -t 1 2>/dev/null; then
            echo "$port" >"$DIR/port"
            echo "$port" >"$DIR/last_port"
            return 0
        fi
        sleep 0.05
    done
    echo "postgres.sh: the server in $DIR did not serve on port $port within 15 s" >&2
    tail -n 20 "$DIR/postgres.log" >&2
    do_stop
    return 1
}

do_stop() {
    local pid i
    pid=$(server_pid) || return 0
    for p in $(server_tree "$pid"); do kill -CONT "$p" 2>/dev/null; done
    kill -INT "$pid" 2>/dev/null   # fast shutdown: backends are ended, no waiting for clients
    for i in $(seq 1 200); do
        pid_alive "$pid" || break
        sleep 0.025
    done
    if pid_alive "$pid"; then
        for p in $(server_tree "$pid"); do kill -KILL "$p" 2>/dev/null; done
        for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
    fi
}

signal_tree() { # SIG
    local pid
    pid=$(server_pid) || die "no server runs in $DIR"
    for p in $(server_tree "$pid"); do kill "-$1" "$p" 2>/dev/null; done
}

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop|restart|pause|resume|stop-all DIR" >&2; exit 2; }

case "$cmd" in
start)
    need_server
    mkdir -p "$DIR" || die "cannot create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if server_pid >/dev/null; then die "a server already runs in $DIR (port $(cat "$DIR/port" 2>/dev/null))"; fi
    init_cluster
    for attempt in 1 2 3; do
        port=$(free_port) || die "no free port"
        if launch "$port"; then echo "$port"; exit 0; fi
    done
    exit 1
    ;;
stop)
    [ -d "$DIR" ] || exit 0
    DIR=$(cd "$DIR" && pwd)
    do_stop
    rm -f "$DIR/port"
    ;;
restart)
    need_server
    [ -d "$DIR" ] || die "$DIR does not exist"
    DIR=$(cd "$DIR" && pwd)
    [ -s "$DIR/last_port" ] || die "$DIR holds no server (was it started with postgres.sh start?)"
    port=$(cat "$DIR/last_port")
    do_stop
    rm -f "$DIR/port"
    for attempt in 1 2 3; do
        if launch "$port"; then echo "$port"; exit 0; fi
        sleep 0.3
    done
    exit 1
    ;;
pause) DIR=$(cd "$DIR" && pwd) && signal_tree STOP ;;
resume) DIR=$(cd "$DIR" && pwd) && signal_tree CONT ;;
stop-all)
    [ -d "$DIR" ] || exit 0
    top=$(cd "$DIR" && pwd)
    find "$top" -name postmaster.pid -path '*/data/postmaster.pid' 2>/dev/null | while read -r f; do
        DIR=$(dirname "$(dirname "$f")")
        do_stop
        rm -f "$DIR/port"
    done
    ;;
*) echo "usage: $0 start|stop|restart|pause|resume|stop-all DIR" >&2; exit 2 ;;
esac
