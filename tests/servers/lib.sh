# Shared by the server scripts in this directory (sourced, not run):
# free loopback ports, a liveness test for a pid, absolute directories.

# N free loopback ports, one a line: all bound at once, so they differ.
# Without python3: random ports nothing listens on (ss).
free_ports() {
    local n=$1 p got=0
    if [ -x /usr/bin/python3 ]; then
        /usr/bin/python3 -c 'import socket, sys
ss = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    ss.append(s)
for s in ss:
    print(s.getsockname()[1])
for s in ss:
    s.close()' "$n"
        return
    fi
    for _ in $(seq 1 2000); do
        p=$(( (RANDOM % 20000) + 30000 ))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
            echo "$p"; got=$((got + 1))
            [ $got -ge "$n" ] && return 0
        fi
    done
    return 1
}

free_port() { free_ports 1; }

# 0 when PID runs (a zombie does not count: it has exited).
pid_alive() {
    local st
    kill -0 "$1" 2>/dev/null || return 1
    st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
    [ "$st" != Z ] && [ "$st" != X ]
}

# DIR made if missing, printed as an absolute path.
abs_dir() { mkdir -p "$1" || die "cannot create $1"; (cd "$1" && pwd); }
