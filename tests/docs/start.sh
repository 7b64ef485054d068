#!/bin/bash
# docs/getting-started.md, run as written: for one engine, start a server of
# the test's own (tests/servers/*.sh), run the doc's `# start: ENGINE-...`
# blocks in order (grants, then the command) with /bin/sh, and check that
#  - the command prints what it should, as the least-privileged user;
#  - that user can use every primitive the engine has (so the grants are
#    enough) and is refused what the doc says it may not do (so they are
#    least: another prefix or identity, DELETE on the table ...);
#  - Redis: the doc's ACL names every command the engine's sources send and
#    its Lua scripts call (a new redis.call() without a doc update fails).
#
#   start.sh ENGINE BATON    ENGINE: file sqlite redis redlock zookeeper postgres mysql etcd
#
# The only substitutions are the variables the blocks read (REDIS_PORT, PGPORT,
# APP_PASSWORD, ...), a PATH with this build's baton first, HOME and TMPDIR in
# the test's directory. Prints "N passed, N failed"; exits 1 on failure, 77 when
# the server is missing (unless BATON_REQUIRE_ALL=1).
set -u

MODE=${1:?engine}
BATON=${2:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT="$HERE/../.."
DOC="$ROOT/docs/getting-started.md"
SERVERS="$HERE/../servers"
TMP=${BATON_TEST_TMP:-$PWD}/docs_start_$MODE.$$
# the servers' directories: outside $TMP (0700), since PostgreSQL and MariaDB
# run as an unprivileged user when the test runs as root
SRV=${BATON_TEST_TMP:-$PWD}/docs_start_srv_$MODE.$$
rm -rf "$TMP" "$SRV"; mkdir -p "$TMP" "$SRV"; chmod 700 "$TMP"; chmod 755 "$SRV"
. "$HERE/../cli/lib.sh"
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
BATON=$(cd "$(dirname "$BATON")" && pwd)/$(basename "$BATON")

STOP=()   # "script dir" pairs to stop at exit
stop_servers() {
    local s
    for s in "${STOP[@]}"; do bash $s >/dev/null 2>&1; done
    [ $FAIL -eq 0 ] && rm -rf "$SRV"
}
trap 'stop_servers; cleanup' EXIT

# ---- the blocks ---------------------------------------------------------------
mkdir -p "$TMP/blocks"
awk -v out="$TMP/blocks" '
    /^```[a-z]+$/ && !inb { inb = 1; first = 1; name = ""; next }
    /^```$/ && inb { inb = 0; if (name != "") close(out "/" name); next }
    inb && first { first = 0
        if (match($0, /^# start: [a-z0-9-]+$/)) {
            name = substr($0, 10)
            if (seen[name]++) { print "duplicate block " name > "/dev/stderr"; exit 1 }
        }
    }
    inb && name != "" { print > (out "/" name) }
' "$DOC" || bad "docs/getting-started.md: a block name is used twice"

ENGINES="file sqlite redis redlock zookeeper postgres mysql etcd"
# The blocks each engine's section must have, in the order they run.
declare -A BLOCKS=(
    [file]="file-run" [sqlite]="sqlite-run" [redis]="redis-acl redis-run redis-tls" [redlock]="redlock-run"
    [zookeeper]="zookeeper-acl zookeeper-run" [postgres]="postgres-grants postgres-run"
    [mysql]="mysql-grants mysql-run" [etcd]="etcd-grants etcd-run"
)

mkdir -p "$TMP/bin" "$TMP/tmp" "$TMP/home"
ln -s "$BATON" "$TMP/bin/baton"
APP_PASSWORD="app-$$-s3cret"
VARS=(PATH="$TMP/bin:$PATH" HOME="$TMP/home" TMPDIR="$TMP/tmp" APP_PASSWORD="$APP_PASSWORD")
ENV_UNSET=(-u BATON_URI -u BATON_DIR -u XDG_RUNTIME_DIR -u BATON_REDIS_PASSWORD -u REDISCLI_AUTH
           -u BATON_ETCD_PASSWORD -u BATON_ZK_AUTH -u PGPASSWORD -u MYSQL_PWD -u ETCDCTL_USER)

# run_block NAME: runs it with /bin/sh and "${VARS[@]}"; output in $TMP/NAME.out/.err, status in RC
run_block() {
    local name=$1
    if [ ! -f "$TMP/blocks/$name" ]; then bad "[$MODE] no block '# start: $name' in the doc"; RC=999; return; fi
    (cd "$TMP/home" && timeout -k 5 120 env "${ENV_UNSET[@]}" "${VARS[@]}" sh "$TMP/blocks/$name" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null)
    RC=$?
    check "[$MODE] block $name: exit 0 ($RC; $(head -c 300 "$TMP/$name.err"))" [ "$RC" = 0 ]
}
# as_app CMD...: runs CMD (baton ...) with the blocks' variables and the app's secret variable
as_app() { timeout -k 5 60 env "${ENV_UNSET[@]}" "${VARS[@]}" "${APP_ENV[@]}" "$@"; }
expect_app() { # WANT DESC CMD...
    local want=$1 desc=$2 rc; shift 2
    as_app "$@" >"$TMP/app.out" 2>"$TMP/app.err"; rc=$?
    if [ "$rc" = "$want" ]; then ok "[$MODE] $desc (exit $rc)"
    else bad "[$MODE] $desc: exit $rc, want $want; $(head -c 300 "$TMP/app.err")"; fi
}
# the run block printed "got nightly, fence N" (and for SQL, the row mode line)
check_run_output() { # NAME
    check "[$MODE] $1: the command ran with a fence ($(tr '\n' '|' <"$TMP/$1.out"))" \
        grep -Eqx 'got nightly, fence [0-9]+' "$TMP/$1.out"
}
# every primitive the engine has, as the doc's user on the doc's URI: 0, or 64
# "not supported" for a primitive the engine lacks (a missing grant is 69)
prim() { # DESC CMD...
    local desc=$1 rc; shift
    as_app "$@" >"$TMP/app.out" 2>"$TMP/app.err"; rc=$?
    if [ $rc = 0 ]; then ok "[$MODE] the doc's user: $desc"
    elif [ $rc = 64 ] && grep -Eq 'not supported|has no' "$TMP/app.err"; then ok "[$MODE] $desc: the engine has none"
    else bad "[$MODE] the doc's user: $desc: exit $rc; $(head -c 300 "$TMP/app.err")"; fi
}
check_prims() { # URI
    local u=$1
    prim "--shared" baton run -u "$u" --shared rw -- true
    prim "--write" baton run -u "$u" --write rw -- true
    prim "--permits 2" baton run -u "$u" --permits 2 pool -- true
    prim "baton status" baton status -u "$u" nightly
    prim "baton list" baton list -u "$u"
}

# ---- the doc-wide checks (file mode) ------------------------------------------
if [ "$MODE" = file ]; then
    for e in $ENGINES; do
        for b in ${BLOCKS[$e]}; do
            check "getting-started.md has the block '# start: $b'" [ -f "$TMP/blocks/$b" ]
        done
    done
    for f in "$TMP"/blocks/*; do
        n=$(basename "$f")
        check "block '$n' belongs to an engine of this test" grep -qw -- "$n" <<<"${BLOCKS[*]}"
        check "block '$n' is valid sh (sh -n)" sh -n "$f"
    done
    unmarked=$(awk '/^```(sh|ini|crontab)$/ { getline l; if (l !~ /^# start: /) n++ } END { print n + 0 }' "$DOC")
    check "every sh block of the doc is marked '# start: NAME' (unmarked: $unmarked)" [ "$unmarked" = 0 ]
    check "the doc has a section per engine" [ "$(grep -cE '^## (file|SQLite|Redis|RedLock|ZooKeeper|PostgreSQL|MySQL / MariaDB|etcd)$' "$DOC")" = 8 ]
fi

APP_ENV=()
case "$MODE" in
file)
    run_block file-run; check_run_output file-run
    check "[$MODE] ...in the doc's directory" [ -d "$TMP/home/.baton" ]
    ;;
sqlite)
    run_block sqlite-run; check_run_output sqlite-run
    check "[$MODE] ...in the doc's file" [ -f "$TMP/home/.baton/locks.db" ]
    ;;
redis|redlock)
    [ -x /usr/bin/redis-server ] || command -v redis-server >/dev/null || skip_or_fail "redis-server is not installed"
    nodes=1; [ "$MODE" = redlock ] && nodes=3
    ports=()
    # the first node also serves TLS on a second port, with a CA and a
    # certificate for 127.0.0.1 made here (for the redis-tls block)
    tls_args=()
    if [ "$MODE" = redis ] && command -v openssl >/dev/null; then
        . "$SERVERS/lib.sh"
        c="$SRV/tls"; mkdir -p "$c"
        if openssl req -x509 -newkey rsa:2048 -nodes -keyout "$c/ca.key" -out "$c/ca.pem" -days 2 -subj /CN=baton-test-ca 2>/dev/null &&
           openssl req -newkey rsa:2048 -nodes -keyout "$c/srv.key" -out "$c/srv.csr" -subj /CN=127.0.0.1 2>/dev/null &&
           printf 'subjectAltName=IP:127.0.0.1\n' >"$c/ext" &&
           openssl x509 -req -in "$c/srv.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial \
               -out "$c/srv.pem" -days 2 -extfile "$c/ext" 2>/dev/null; then
            chmod 644 "$c"/*
            tls_port=$(free_port)
            tls_args=(--tls-port "$tls_port" --tls-cert-file "$c/srv.pem" --tls-key-file "$c/srv.key"
                      --tls-ca-cert-file "$c/ca.pem" --tls-auth-clients no)
        else
            bad "[$MODE] openssl could not make the test's certificates"
        fi
    fi
    for i in $(seq 1 $nodes); do
        if [ $i = 1 ]; then
            p=$(bash "$SERVERS/redis.sh" start "$SRV/r$i" "${tls_args[@]}" 2>"$TMP/srv.err"); rc=$?
        else
            p=$(bash "$SERVERS/redis.sh" start "$SRV/r$i" 2>"$TMP/srv.err"); rc=$?
        fi
        [ $rc = 77 ] && skip_or_fail "redis-server is not installed"
        [ $rc = 0 ] || { bad "redis.sh start: $(cat "$TMP/srv.err")"; exit 1; }
        STOP+=("$SERVERS/redis.sh stop $SRV/r$i")
        ports+=("$p")
    done
    # the ACL block, as written, on every node
    for p in "${ports[@]}"; do
        VARS+=(REDIS_PORT="$p"); run_block redis-acl; unset 'VARS[${#VARS[@]}-1]'
        check "[$MODE] ...redis-cli said OK" grep -qx OK "$TMP/redis-acl.out"
    done
    APP_ENV=(BATON_REDIS_PASSWORD="$APP_PASSWORD")
    if [ "$MODE" = redis ]; then
        VARS+=(REDIS_PORT="${ports[0]}")
        run_block redis-run; check_run_output redis-run
        if [ ${#tls_args[@]} -gt 0 ]; then
            VARS+=(REDIS_TLS_PORT="$tls_port" REDIS_CA="$c/ca.pem")
            run_block redis-tls; check_run_output redis-tls
            expect_app 69 "rediss:// with the system's CAs (not the test's) is refused" \
                baton run -u "rediss://app@127.0.0.1:$tls_port/0?prefix=app/" nightly -- true
        else
            echo "   openssl is missing: the redis-tls block is not run" >&2
        fi
        U="redis://app@127.0.0.1:${ports[0]}/0?prefix=app/"
        check_prims "$U"
        expect_app 0 "the doc's user: a semaphore" baton sem -u "$U" slots set 3
        expect_app 0 "the doc's user: a latch" baton latch -u "$U" gate set 1
        expect_app 0 "the doc's user: latch down" baton latch -u "$U" gate down
        expect_app 1 "the doc's user: unlock --force (not held: 1, the fence bumped all the same)" baton unlock -u "$U" --force nightly
        # a waiter woken by pub/sub (the plain lock's channel)
        as_app baton run -u "$U" busy -- sleep 1 >/dev/null 2>&1 &
        hp=$!; BG_PIDS+=("$hp"); sleep 0.4
        expect_app 0 "the doc's user: a waiter gets the lock when it is freed" baton run -u "$U" -w 20 busy -- true
        wait_pid "$hp" 20
        # a fair waiter's pattern subscription is what the doc's ACL refuses:
        # baton must say so (once), not degrade silently
        as_app baton run -u "$U" busyfair -- sleep 1 >/dev/null 2>&1 &
        hp=$!; BG_PIDS+=("$hp"); sleep 0.4
        expect_app 0 "the doc's user: a fair waiter gets the lock" baton run -u "$U" --fair -w 20 busyfair -- true
        check "[$MODE] ...and is told that the ACL refused its subscription ($(head -c 200 "$TMP/app.err"))" \
            grep -q "ACL refused a subscription" "$TMP/app.err"
        wait_pid "$hp" 20
        redis-cli -p "${ports[0]}" ACL LOG RESET >/dev/null
        log=$(redis-cli -p "${ports[0]}" ACL LOG 50)
        check "[$MODE] nothing the doc's user did was refused (ACL LOG: $(tr '\n' ' ' <<<"$log" | head -c 300))" [ -z "$log" ]
        # least: another prefix, no prefix, another user's keys
        expect_app 69 "the doc's user without ?prefix=app/ is refused" baton run -u "redis://app@127.0.0.1:${ports[0]}/0" nightly -- true
        expect_app 69 "...and with another prefix" baton run -u "redis://app@127.0.0.1:${ports[0]}/0?prefix=other/" nightly -- true
        out=$(REDISCLI_AUTH="$APP_PASSWORD" redis-cli --no-auth-warning --user app -p "${ports[0]}" GET foo 2>&1)
        check "[$MODE] ...and may not read other keys ($out)" grep -q NOPERM <<<"$out"
        out=$(REDISCLI_AUTH="$APP_PASSWORD" redis-cli --no-auth-warning --user app -p "${ports[0]}" CONFIG GET maxmemory 2>&1)
        check "[$MODE] ...nor run other commands ($out)" grep -q NOPERM <<<"$out"
        # drift: every command of the sources is in the doc's ACL
        acl=$(cat "$TMP/blocks/redis-acl")
        missing=""
        for c in $(grep -ohE "redis\.p?call\('[a-zA-Z]+" "$ROOT"/src/backends/redis/*.[ch] "$ROOT"/src/backends/redlock/*.[ch] | sed "s/.*('//" | tr A-Z a-z | sort -u); do
            # (a command only some deployments need: the doc says when to add it)
            grep -qw -- "+$c" <<<"$acl" || grep -q -- "+$c " "$DOC" || missing="$missing $c"
        done
        # top-level commands the C code sends (argv[0] literals), less the optional ones
        for c in $(grep -ohE '"(EVALSHA|EVAL|PING|SUBSCRIBE|PSUBSCRIBE|UNSUBSCRIBE|PUNSUBSCRIBE|SCAN)"' "$ROOT"/src/backends/redis/*.c | tr -d '"' | tr A-Z a-z | sort -u); do
            grep -qw -- "+$c" <<<"$acl" || missing="$missing $c"
        done
        check "[$MODE] the doc's ACL has every command baton's scripts and C code send (missing:${missing:- none})" [ -z "$missing" ]
        others=$(grep -ohE '"[A-Z]{3,}"' "$ROOT"/src/backends/redis/conn.c "$ROOT"/src/backends/redis/redis.c "$ROOT"/src/backends/redis/sub.c "$ROOT"/src/backends/redis/admin.c \
                 | tr -d '"' | sort -u | grep -vxE 'EVALSHA|EVAL|PING|SUBSCRIBE|PSUBSCRIBE|UNSUBSCRIBE|PUNSUBSCRIBE|SCAN|COUNT|MATCH|AUTH|SELECT|WAIT|INFO|NOSCRIPT|DENIED|OOM|MOVED|ASK|LOADING|BUSY|READONLY|TRYAGAIN|CLUSTERDOWN|CROSSSLOT|MASTERDOWN|NOAUTH|NOPERM|WRONGPASS|ERR|OK|PONG|QUEUED|EXECABORT|WRONGTYPE' || true)
        undiscussed=""
        for c in $others; do
            grep -qi -- "+$c\b" "$DOC" || undiscussed="$undiscussed $c"
        done
        check "[$MODE] no other command word in the C code the doc does not discuss (${undiscussed:- none})" [ -z "$undiscussed" ]
        for c in select wait info; do
            check "[$MODE] the doc says when +$c is needed" grep -q -- "+$c" "$DOC"
        done
    else
        VARS+=(REDIS_NODES="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}")
        run_block redlock-run; check_run_output redlock-run
        expect_app 69 "the doc's user without ?prefix=app/ is refused" \
            baton run -u "redlock://app@127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}/0" nightly -- true
    fi
    ;;
postgres)
    p=$(bash "$SERVERS/postgres.sh" start "$SRV/pg" 2>"$TMP/srv.err"); rc=$?
    [ $rc = 77 ] && skip_or_fail "postgresql is not installed"
    [ $rc = 0 ] || { bad "postgres.sh start: $(cat "$TMP/srv.err")"; exit 1; }
    STOP+=("$SERVERS/postgres.sh stop $SRV/pg")
    command -v psql >/dev/null || skip_or_fail "psql is not installed"
    # the superuser over the server's trusted unix socket
    VARS+=(PGHOST="$SRV/pg/sock" PGPORT="$p" PGUSER=baton PGDATABASE=postgres)
    run_block postgres-grants
    run_block postgres-run
    check_run_output postgres-run
    check "[$MODE] ...and row mode" grep -Eqx 'row mode too, fence [0-9]+' "$TMP/postgres-run.out"
    APP_ENV=(PGPASSWORD="$APP_PASSWORD")
    U="postgres://app@127.0.0.1:$p/appdb"
    check_prims "$U"
    expect_app 0 "the doc's user: lease mode" baton run -u "$U?mode=lease" nightly -- true
    APSQL=(psql -h 127.0.0.1 -p "$p" -U app -d appdb -v ON_ERROR_STOP=1 -Atqc)
    expect_app 0 "the doc's user reads baton_locks" "${APSQL[@]}" "SELECT count(*) FROM baton_locks"
    expect_app 1 "...but may not DELETE from it" "${APSQL[@]}" "DELETE FROM baton_locks"
    expect_app 1 "...nor CREATE in the schema" "${APSQL[@]}" "CREATE TABLE t (i int)"
    expect_app 69 "...nor use another table (baton creates none: exit 69 with the DDL)" baton run -u "$U?table=other_locks" nightly -- true
    check "[$MODE] ...the message gives the DDL" grep -q 'CREATE TABLE' "$TMP/app.err"
    ;;
mysql)
    p=$(bash "$SERVERS/mysql.sh" start "$SRV/my" 2>"$TMP/srv.err"); rc=$?
    [ $rc = 77 ] && skip_or_fail "mariadb-server is not installed"
    [ $rc = 0 ] || { bad "mysql.sh start: $(cat "$TMP/srv.err")"; exit 1; }
    STOP+=("$SERVERS/mysql.sh stop $SRV/my")
    command -v mariadb >/dev/null || skip_or_fail "the mariadb client is not installed"
    # root through the server's unix socket: the admin's ~/.my.cnf names it
    printf '[client]\nsocket=%s\n' "$SRV/my/sock" >"$TMP/home/.my.cnf"
    VARS+=(MYSQL_PORT="$p")
    run_block mysql-grants
    run_block mysql-run
    check_run_output mysql-run
    check "[$MODE] ...and row mode" grep -Eqx 'row mode too, fence [0-9]+' "$TMP/mysql-run.out"
    APP_ENV=(MYSQL_PWD="$APP_PASSWORD")
    U="mysql://app@127.0.0.1:$p/appdb"
    check_prims "$U"
    expect_app 0 "the doc's user: lease mode" baton run -u "$U?mode=lease" nightly -- true
    AMY=(mariadb --no-defaults -h 127.0.0.1 -P "$p" -u app -N -B appdb -e)
    expect_app 0 "the doc's user reads baton_locks" "${AMY[@]}" "SELECT COUNT(*) FROM baton_locks"
    expect_app 1 "...but may not DELETE from it" "${AMY[@]}" "DELETE FROM baton_locks"
    expect_app 1 "...nor CREATE a table" "${AMY[@]}" "CREATE TABLE t (i int)"
    ;;
etcd)
    p=$(bash "$SERVERS/etcd.sh" start "$SRV/etcd" 2>"$TMP/srv.err"); rc=$?
    [ $rc = 77 ] && skip_or_fail "etcd is not installed"
    [ $rc = 0 ] || { bad "etcd.sh start: $(cat "$TMP/srv.err")"; exit 1; }
    STOP+=("$SERVERS/etcd.sh stop $SRV/etcd")
    VARS+=(ETCDCTL_API=3 ETCDCTL_ENDPOINTS="127.0.0.1:$p" ETCD_PORT="$p" ROOT_PASSWORD="root-$$-pw")
    run_block etcd-grants
    run_block etcd-run
    check_run_output etcd-run
    APP_ENV=(BATON_ETCD_PASSWORD="$APP_PASSWORD")
    U="etcd://app@127.0.0.1:$p/app"
    check_prims "$U"
    expect_app 0 "the doc's user: an election" baton elect -u "$U" --value me leader -- true
    expect_app 0 "the doc's user: a waiter woken by a watch" sh -c '
        baton run -u "$1" busy -- sleep 1 & sleep 0.5
        baton run -u "$1" -w 20 busy -- true; rc=$?; wait; exit $rc' sh "$U"
    expect_app 69 "the doc's user without the /app prefix is refused" baton run -u "etcd://app@127.0.0.1:$p" nightly -- true
    expect_app 69 "...and under another prefix" baton run -u "etcd://app@127.0.0.1:$p/other" nightly -- true
    expect_app 69 "a wrong password is refused" env BATON_ETCD_PASSWORD=wrong baton run -u "$U" nightly -- true
    expect_app 69 "no user at all is refused (auth is on)" baton run -u "etcd://127.0.0.1:$p/app" nightly -- true
    ;;
zookeeper)
    p=$(bash "$SERVERS/zk.sh" start "$SRV/zk" 2>"$TMP/srv.err"); rc=$?
    [ $rc = 77 ] && skip_or_fail "zookeeper is not installed"
    [ $rc = 0 ] || { bad "zk.sh start: $(cat "$TMP/srv.err")"; exit 1; }
    STOP+=("$SERVERS/zk.sh stop $SRV/zk")
    [ -x /usr/share/zookeeper/bin/zkCli.sh ] || skip_or_fail "zkCli.sh is not installed (zookeeper)"
    VARS+=(ZK_HOSTS="127.0.0.1:$p")
    run_block zookeeper-acl
    run_block zookeeper-run
    check_run_output zookeeper-run
    APP_ENV=(BATON_ZK_AUTH="app:$APP_PASSWORD")
    U="zk://127.0.0.1:$p/app"
    check_prims "$U"
    expect_app 0 "the doc's user: an election" baton elect -u "$U" --value me leader -- true
    expect_app 69 "another identity is refused under /app" env BATON_ZK_AUTH=other:pw baton run -u "$U" nightly -- true
    expect_app 69 "...as is a wrong password (another identity)" env BATON_ZK_AUTH=app:wrong baton run -u "$U" nightly -- true
    expect_app 69 "...and no identity at all" env -u BATON_ZK_AUTH baton run -u "$U" nightly -- true
    ;;
*) echo "usage: $0 $ENGINES BATON" >&2; exit 2 ;;
esac

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
