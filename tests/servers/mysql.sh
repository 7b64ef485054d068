#!/bin/bash
# Start / stop a throwaway MariaDB server (Debian's mariadb-server) on a free
# loopback port.
#
#   mysql.sh start   DIR     mariadb-install-db in DIR/data (first time), start; prints the port
#   mysql.sh stop    DIR     stops it (also a paused one); no process is left
#   mysql.sh restart DIR     stop + start on the same port and the same data
#   mysql.sh pause   DIR     SIGSTOP the server (a silent server)
#   mysql.sh resume  DIR     SIGCONT
#   mysql.sh kill    DIR     SIGKILL the server (a crash; restart brings it back)
#   mysql.sh sql     DIR SQL runs SQL as root over the unix socket (tab-separated output)
#
# DIR holds data/, sock (the unix socket), mysql.log, pid, port (while it
# runs), last_port (kept for restart), user and password.
#
# The user "baton"@"127.0.0.1" with the password in DIR/password
# ("baton-test") has every privilege (WITH GRANT OPTION) over TCP; root
# connects over the unix socket only (unix_socket authentication, for this
# script). The server binds 127.0.0.1 only, with the redo log flushed once a
# second and no binary log (tests only: a machine crash may lose data, a
# process kill may not).
#
# As root the server runs as an unprivileged user (MY_RUN_USER, default
# nobody; DIR is chowned to it, and its parents must be searchable by it).
#
# Exits 77 when the server binaries are missing.
set -u

die() { echo "mysql.sh: $*" >&2; exit 1; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MARIADBD=${MARIADBD:-$(command -v mariadbd || echo /usr/sbin/mariadbd)}
INSTALL_DB=${INSTALL_DB:-$(command -v mariadb-install-db || echo /usr/bin/mariadb-install-db)}
CLIENT=$(command -v mariadb || command -v mysql || echo /usr/bin/mariadb)
MY_USER=baton
MY_PASSWORD=baton-test
MY_RUN_USER=${MY_RUN_USER:-nobody}

need_server() {
    if [ ! -x "$MARIADBD" ] || [ ! -x "$INSTALL_DB" ] || [ ! -x "$CLIENT" ]; then
        echo "mysql.sh: MariaDB is not installed (apt-get install mariadb-server mariadb-client)" >&2
        exit 77
    fi
}

run_user() { [ "$(id -u)" = 0 ] && echo "$MY_RUN_USER" || id -un; }

# The server's pid, when it runs for DIR.
server_pid() {
    local pid
    [ -s "$DIR/pid" ] || return 1
    pid=$(cat "$DIR/pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && pid_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$DIR/data" || return 1
    echo "$pid"
}

root_sql() { # SQL
    "$CLIENT" --no-defaults -uroot --socket="$DIR/sock" -N -B -e "$1"
}

init_db() {
    [ -d "$DIR/data/mysql" ] && return 0
    rm -rf "$DIR/data"
    mkdir -p "$DIR/data"
    echo "$MY_USER" >"$DIR/user"
    echo "$MY_PASSWORD" >"$DIR/password"
    if [ "$(id -u)" = 0 ]; then
        id "$MY_RUN_USER" >/dev/null 2>&1 || die "no user $MY_RUN_USER to run the server as (set MY_RUN_USER)"
        chown -R "$MY_RUN_USER" "$DIR"
    fi
    # root@localhost authenticates by unix_socket: the script, running as
    # root (or as the server's user), is let in over DIR/sock
    # a temporary directory of its own: two installs (or servers) sharing /tmp
    # collided on their temporary tables once ("Error on delete of
    # '/tmp/#sql-temptable-...MAI'") at ctest -j5
    mkdir -p "$DIR/tmp"
    [ "$(id -u)" = 0 ] && chown "$MY_RUN_USER" "$DIR/tmp"
    "$INSTALL_DB" --no-defaults --datadir="$DIR/data" --tmpdir="$DIR/tmp" --user="$(run_user)" --auth-root-authentication-method=socket \
        --auth-root-socket-user="$(id -un)" --skip-test-db --skip-name-resolve \
        >"$DIR/install.log" 2>&1 || { cat "$DIR/install.log" >&2; die "mariadb-install-db failed in $DIR/data"; }
    echo 1 >"$DIR/needs_user"
}

launch() { # PORT
    local port=$1 i
    rm -f "$DIR/port" "$DIR/pid"
    [ "$(id -u)" = 0 ] && chown -R "$MY_RUN_USER" "$DIR"
    # setsid: a signal to the caller's process group (ctest's timeout, ^C)
    # does not reach the server; stop does.
    mkdir -p "$DIR/tmp"
    setsid "$MARIADBD" --no-defaults --datadir="$DIR/data" --tmpdir="$DIR/tmp" --user="$(run_user)" --port="$port" \
        --skip-networking=0 --bind-address=127.0.0.1 --socket="$DIR/sock" --pid-file="$DIR/pid" \
        --innodb-flush-log-at-trx-commit=0 --skip-log-bin --innodb-buffer-pool-size=16M \
        --innodb-log-file-size=16M --key-buffer-size=1M --performance-schema=0 --max-connections=300 \
        --skip-name-resolve --innodb-doublewrite=0 --innodb-use-native-aio=0 --log-error="$DIR/mysql.log" \
        </dev/null >>"$DIR/mysql.log" 2>&1 &
    local spid=$!
    for i in $(seq 1 600); do
        if ! pid_alive "$spid"; then
            echo "mysql.sh: the server in $DIR exited during startup" >&2
            tail -n 20 "$DIR/mysql.log" >&2
            return 1
        fi
        if [ -S "$DIR/sock" ] && root_sql "SELECT 1" >/dev/null 2>&1; then
            if [ -e "$DIR/needs_user" ]; then
                root_sql "CREATE USER IF NOT EXISTS '$MY_USER'@'127.0.0.1' IDENTIFIED BY '$MY_PASSWORD';
                          GRANT ALL ON *.* TO '$MY_USER'@'127.0.0.1' WITH GRANT OPTION;
                          CREATE DATABASE IF NOT EXISTS baton;" || { do_stop; return 1; }
                rm -f "$DIR/needs_user"
            fi
            echo "$port" >"$DIR/port"
            echo "$port" >"$DIR/last_port"
            return 0
        fi
        sleep 0.05
    done
    echo "mysql.sh: the server in $DIR did not serve on port $port within 30 s" >&2
    tail -n 20 "$DIR/mysql.log" >&2
    do_stop
    return 1
}

do_stop() {
    local pid i
    pid=$(server_pid) || return 0
    kill -CONT "$pid" 2>/dev/null
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 400); do
        pid_alive "$pid" || break
        sleep 0.025
    done
    if pid_alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null
        for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
    fi
    rm -f "$DIR/pid"
}

cmd=${1:-}
DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || { echo "usage: $0 start|stop|restart|pause|resume|kill|sql DIR" >&2; exit 2; }

case "$cmd" in
start)
    need_server
    mkdir -p "$DIR" || die "cannot create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if server_pid >/dev/null; then die "a server already runs in $DIR (port $(cat "$DIR/port" 2>/dev/null))"; fi
    init_db
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
    [ -s "$DIR/last_port" ] || die "$DIR holds no server (was it started with mysql.sh start?)"
    port=$(cat "$DIR/last_port")
    do_stop
    rm -f "$DIR/port"
    for attempt in 1 2 3; do
        if launch "$port"; then echo "$port"; exit 0; fi
        sleep 0.3
    done
    exit 1
    ;;
pause) DIR=$(cd "$DIR" && pwd) && pid=$(server_pid) && kill -STOP "$pid" ;;
resume) DIR=$(cd "$DIR" && pwd) && pid=$(server_pid) && kill -CONT "$pid" ;;
kill)
    DIR=$(cd "$DIR" && pwd)
    pid=$(server_pid) || exit 0
    kill -KILL "$pid"
    for i in $(seq 1 100); do pid_alive "$pid" || break; sleep 0.05; done
    rm -f "$DIR/port" "$DIR/pid"
    ;;
sql) DIR=$(cd "$DIR" && pwd) && root_sql "${3:?SQL}" ;;
*) echo "usage: $0 start|stop|restart|pause|resume|kill|sql DIR" >&2; exit 2 ;;
esac
