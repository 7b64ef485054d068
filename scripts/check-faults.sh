#!/bin/bash
# make check-faults: `baton check` on every engine this build has, on servers
# started by tests/servers/*.sh, with client faults on every row and server
# faults where a script can cause them; writes docs/RELIABILITY.md.
#
#   scripts/check-faults.sh [BATON]        default build/baton
#
# Environment:
#   CHECK_GRANTS=N   grants per row (default 10000)
#   CHECK_RUN_GRANTS=N  grants of the --run rows (default 1000, at most
#                    CHECK_GRANTS): each grant there starts a `baton run`
#   CHECK_ONLY=RE    only the rows whose id matches the extended regex RE
#   CHECK_OUT=FILE   where the table goes (default docs/RELIABILITY.md)
#   CHECK_MAX_S=S    a row's time limit (default 900): a slow engine's row
#                    then has fewer grants, and says so
#
# A row whose server cannot be started (not installed) is left out, and the
# page says so. Each row's JSON report and SVG timeline are kept in
# build/check-faults/ (untracked), with --record's event list (ID.rec).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BATON=$(readlink -f "${1:-$ROOT/build/baton}")
SRV=$ROOT/tests/servers
GRANTS=${CHECK_GRANTS:-10000}
RUN_GRANTS=${CHECK_RUN_GRANTS:-1000}
[ "$RUN_GRANTS" -le "$GRANTS" ] || RUN_GRANTS=$GRANTS
ONLY=${CHECK_ONLY:-}
OUT=${CHECK_OUT:-$ROOT/docs/RELIABILITY.md}
MAXS=${CHECK_MAX_S:-900}
RUN=$ROOT/build/check-faults
[ -x "$BATON" ] || { echo "check-faults: $BATON is not built (make build)" >&2; exit 2; }
# CHECK_ONLY reruns some rows: the others' results stay (the page has them all)
[ -n "$ONLY" ] || rm -rf "$RUN"
mkdir -p "$RUN"
RES=$RUN/results.jsonl
touch "$RES"
SKIPPED=$RUN/skipped
: >"$SKIPPED"

# rare enough that a row reaches its grants in minutes (every pause and every
# kill of a holder costs a lease), frequent enough for dozens of each per row
CLIENT_FAULTS=(--pause 0.004 --kill 0.002 --pause-waiting 0.002 --kill-waiting 0.002)
# issue 21's class: links frozen or reset past the lease (the checker's own
# forwarder), and commands of real `baton run` clients that must not write
# after another client's grant. More often than the faults above: these rows
# are about them (a freeze costs 1.5 leases; 300 grants give a dozen or so).
FREEZE=(--link-freeze 0.03)
CUT=(--link-cut 0.03)
RUNF=(--grants "$RUN_GRANTS" --run --pause 0.02 --kill 0.005 --pause-waiting 0.005 --kill-waiting 0.005 --link-freeze 0.03 --link-cut 0.02)

# link_rows ID ENGINE WHAT URI LEASE [extra...]: the three rows of the class
link_rows() {
    local id=$1 eng=$2 what=$3 uri=$4 lease=$5
    shift 5
    row "$id-link-freeze" "$eng" "$what: holders' and waiters' links frozen past the lease, + client faults" \
        "a frozen link is a silent engine: the holder's lease runs out on its own clock and it is told before it writes" \
        "$uri" "$lease" "$@" "${FREEZE[@]}"
    row "$id-link-cut" "$eng" "$what: holders' and waiters' connections reset, + client faults" \
        "a reset connection is reconnected or the grant is reported lost; never two holders" "$uri" "$lease" "$@" "${CUT[@]}"
    row "$id-run" "$eng" "$what: clients are baton run, commands tick; paused (baton alone, or its whole tree), killed, links frozen and reset" \
        "baton run kills the command when the lease is lost: no command writes after another client's grant" \
        "$uri" "$lease" "$@" "${RUNF[@]}"
}

# the servers started, "ENGINE DIR" a line (start runs in a $(...) subshell)
STARTED=$RUN/started
: >"$STARTED"
cleanup() {
    while read -r eng dir how; do
        if [ "$eng" = redis-failover ]; then bash "$SRV/$eng.sh" "$dir" down; continue; fi
        bash "$SRV/$eng.sh" "${how:-stop}" "$dir" >/dev/null 2>&1
    done <"$STARTED"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start ENGINE DIR [args]: the port, or nothing (and a note) when it cannot
start() {
    local eng=$1 dir=$2 port
    shift 2
    echo "$eng $dir" >>"$STARTED"
    if ! port=$(bash "$SRV/$eng.sh" start "$dir" "$@" 2>"$dir.err"); then
        echo "$eng: the server did not start ($(tail -1 "$dir.err"))" >>"$SKIPPED"
        return 1
    fi
    echo "$port" | tail -1
}

# built SCHEME: does this baton have the engine? (a compiled-out one says so)
built() {
    ! "$BATON" status -u "$1://127.0.0.1:1" probe 2>&1 | grep -q "not built here"
}

# row ID ENGINE FAULT PROMISE URI LEASE [extra check options...]
row() {
    local id=$1 eng=$2 fault=$3 promise=$4 uri=$5 lease=$6 rc asked=$GRANTS prev=
    shift 6
    # a row's own --grants (the --run rows) is what it asked for
    for a in "$@"; do [ "$prev" = --grants ] && asked=$a; prev=$a; done
    if [ -n "$ONLY" ] && ! [[ $id =~ $ONLY ]]; then return; fi
    echo "check-faults: $id ($fault) ..." >&2
    "$BATON" check -u "$uri" --clients 4 --grants "$GRANTS" --seconds "$MAXS" -t "$lease" --work 0.001 \
        --seed 1 --json --svg "$RUN/$id.svg" --record "$RUN/$id.rec" "${CLIENT_FAULTS[@]}" "$@" "cf-$id-$$" \
        >"$RUN/$id.json" 2>"$RUN/$id.err"
    rc=$?
    grep -v "\"id\": \"$id\"" "$RES" >"$RES.tmp"; mv "$RES.tmp" "$RES"
    /usr/bin/python3 - "$RUN/$id.json" "$id" "$eng" "$fault" "$promise" "$rc" "$asked" >>"$RES" <<'EOF'
import json, sys
path, id_, eng, fault, promise, rc, grants = sys.argv[1:]
try:
    d = json.load(open(path))
except ValueError:
    d = {}
d.update(id=id_, row_engine=eng, fault=fault, promise=promise, rc=int(rc), grants_asked=int(grants))
print(json.dumps(d))
EOF
    echo "check-faults: $id: exit $rc, $(/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("grants"), "grants, stale accepted", d.get("stale_writes_accepted"))' "$RUN/$id.json" 2>/dev/null)" >&2
}

# leader_row ID ENGINE UP DOWN URI-TAIL LEASE FAULT PROMISE: a 3-member
# cluster started by tests/servers/ENGINE.sh UP (stopped by DOWN at the end),
# whose leader is killed at every server fault and started again after it
leader_row() {
    local id=$1 eng=$2 up=$3 down=$4 tail=$5 lease=$6 fault=$7 promise=$8 dir=$RUN/$1 hosts
    local S="bash $SRV/$2.sh"
    if [ -n "$ONLY" ] && ! [[ $id =~ $ONLY ]]; then return; fi
    echo "$eng $dir $down" >>"$STARTED"
    if ! hosts=$($S "$up" "$dir" 3 2>"$dir.err"); then
        echo "$eng: the 3-member cluster did not start ($(tail -1 "$dir.err"))" >>"$SKIPPED"
        return
    fi
    row "$id" "$eng" "$fault" "$promise" "$eng://$hosts$tail" "$lease" \
        --fault-cmd "stop=L=\$($S leader $dir) && echo \$L >$dir/killed && $S member-kill $dir \$L" \
        --fault-cmd "start=$S member-start $dir \$(cat $dir/killed) >/dev/null"
}

# ---- file, sqlite: no server ----
row file file "client faults" "flock(2): the kernel frees a dead holder's lock at once; no lease, so a pause loses nothing" \
    "file://$RUN/file-locks" 0.5
if built sqlite; then
    row sqlite sqlite "client faults" "a row per lock in one database file, lease rows renewed by the client" \
        "sqlite://$RUN/sqlite.db" 0.5
fi

# ---- Redis ----
if built redis && port=$(start redis "$RUN/redis"); then
    U="redis://127.0.0.1:$port/0"
    R=(--fault-cmd "stop=bash $SRV/redis.sh stop $RUN/redis" --fault-cmd "start=bash $SRV/redis.sh restart $RUN/redis >/dev/null")
    row redis redis "client faults" "a lease (PEXPIRE) renewed at lease/3; fences max(counter + 1, server TIME in µs)" "$U" 0.5
    row redis-restart redis "restart without persistence every 5 s, + client faults" \
        "the lock keys are gone after a restart: holders lose their leases; fences keep increasing through TIME" "$U" 0.5 "${R[@]}"
fi
if built redis && port=$(start redis "$RUN/redis-aof" --appendonly yes --appendfsync always); then
    U="redis://127.0.0.1:$port/0"
    R=(--fault-cmd "stop=bash $SRV/redis.sh stop $RUN/redis-aof" --fault-cmd "start=bash $SRV/redis.sh restart $RUN/redis-aof >/dev/null")
    row redis-aof-restart redis "restart with appendfsync always every 5 s, + client faults" \
        "the keys and their TTLs survive a restart" "$U" 0.5 "${R[@]}"
fi
if built redis && port=$(start redis "$RUN/redis-link"); then
    link_rows redis redis "lease 0.5 s" "redis://127.0.0.1:$port/0" 0.5
fi

# ---- RedLock: 3 masters ----
if built redlock; then
    ok=1
    for i in 1 2 3; do
        p=$(start redis "$RUN/rl$i") || { ok=0; break; }
        eval "rp$i=$p"
    done
    if [ $ok = 1 ]; then
        U="redlock://127.0.0.1:$rp1,127.0.0.1:$rp2,127.0.0.1:$rp3/0"
        row redlock redlock "client faults" "a majority of 3 independent masters; fences the largest of the granting nodes'" "$U" 0.5
        R=(--fault-cmd "stop=bash $SRV/redis.sh stop $RUN/rl1; bash $SRV/redis.sh stop $RUN/rl2"
           --fault-cmd "start=bash $SRV/redis.sh restart $RUN/rl1 >/dev/null; bash $SRV/redis.sh restart $RUN/rl2 >/dev/null")
        row redlock-2of3 redlock "2 of 3 nodes restarted without persistence every 5 s, + client faults" \
            "without persistence a majority that restarts forgets the lock: RedLock's known weakness; the fence must still hold" \
            "$U" 0.5 "${R[@]}"
    fi
fi

# ---- Redis: failover to a replica, as Sentinel does it, behind one address ----
# A master and a replica of it behind a socat front (the address clients use,
# as a Sentinel-managed virtual IP would be). Every fault: the front goes (its
# connections drop), the replica is promoted (REPLICAOF NO ONE); a second
# later the front points at the new master and the old one becomes its
# replica. Without wait_replicas a grant the replica had not yet received is
# gone after the promotion; with it, a grant not acknowledged is not counted.
# The servers resync at once (repl-diskless-sync-delay 0; Redis's default
# waits 5 s, longer than a fault cycle here, so WAIT would never succeed).
if built redis && command -v socat >/dev/null && command -v redis-cli >/dev/null &&
    pa=$(start redis "$RUN/rf-a" --repl-diskless-sync-delay 0) &&
    pb=$(start redis "$RUN/rf-b" --repl-diskless-sync-delay 0 --replicaof 127.0.0.1 "$pa"); then
    mkdir -p "$RUN/rf"
    echo "redis-failover $RUN/rf down" >>"$STARTED"
    FO="bash $SRV/redis-failover.sh $RUN/rf"
    $FO init "$pa" "$pb" "$(bash -c ". '$SRV/lib.sh'; free_port")"
    U="redis://127.0.0.1:$(. "$RUN/rf/state"; echo "$FRONT")/0"
    F=(--fault-cmd "stop=$FO stop" --fault-cmd "start=$FO start" --fault-every 2)
    row redis-failover redis "failover to the replica every 2 s (promote, 1 s, the old master rejoins as replica), + client faults" \
        "asynchronous replication: a grant the replica had not received is gone after the promotion; fences keep increasing through TIME" \
        "$U" 0.5 "${F[@]}"
    row redis-failover-wait redis "the same failovers, wait_replicas=1, + client faults" \
        "a grant or renewal the replica did not acknowledge (WAIT 1) is not counted: a promotion loses no counted grant" \
        "$U?wait_replicas=1&wait_ms=200" 0.5 "${F[@]}"
    S=(--fault-cmd "stop=$FO stop split" --fault-cmd "start=$FO start" --fault-every 2)
    row redis-split redis "failover every 2 s where clients already connected stay on the old master for 1 s (until it is demoted), + client faults" \
        "none without WAIT: the old master goes on granting to the clients still on it while the new one grants to the others; only the fence protects the resource" \
        "$U" 0.5 "${S[@]}"
    row redis-split-wait redis "the same split failovers, wait_replicas=1, + client faults" \
        "the old master has lost its replica: WAIT 1 fails, its grants are undone and renewals on it fail; no two holders" \
        "$U?wait_replicas=1&wait_ms=200" 0.5 "${S[@]}"
elif built redis; then
    command -v socat >/dev/null || echo "redis failover: socat is not installed (it fronts the master)" >>"$SKIPPED"
fi

# ---- Redis Cluster: every master fails over to its replica (issue 26) ----
# 3 masters + 3 replicas (tests/servers/redis-cluster.sh). Every fault: each
# replica takes over at once (CLUSTER FAILOVER FORCE, no catch-up wait), so a
# grant it had not received is gone, as in a master crash; "start" waits until
# the cluster is whole again. The lock's slot changes master at every fault.
if built redis && command -v redis-cli >/dev/null && pc=$(start redis-cluster "$RUN/rcl"); then
    CF="bash $SRV/redis-cluster.sh"
    U="redis-cluster://127.0.0.1:$pc"
    F=(--fault-cmd "stop=$CF failover $RUN/rcl" --fault-cmd "start=$CF wait-ok $RUN/rcl" --fault-every 2)
    row redis-cluster-failover redis "Redis Cluster: every master fails over to its replica every 2 s (FORCE), + client faults" \
        "asynchronous replication: a grant the replica had not received is gone after the takeover; fences keep increasing through TIME" \
        "$U" 0.5 "${F[@]}"
    row redis-cluster-failover-wait redis "the same cluster failovers, wait_replicas=1, + client faults" \
        "a grant or renewal the slot's replica did not acknowledge (WAIT 1) is not counted: a takeover loses no counted grant" \
        "$U?wait_replicas=1&wait_ms=200" 0.5 "${F[@]}"
fi
# ---- Redis behind Sentinel: the client follows the master itself (issue 26) ----
# 1 master + 2 replicas + 3 sentinels (tests/servers/redis-sentinel.sh). The
# failover rows: SENTINEL FAILOVER at every fault (the old master stays up and
# is demoted by the sentinels seconds later); the kill rows: the master is
# SIGKILLed (clients see it gone for down-after, 1 s, plus the election) and
# started again as a replica at the fault's end. baton follows
# +promoted-slave/+switch-master and re-checks every held lock on the new master.
if built redis && command -v redis-cli >/dev/null &&
    start redis-sentinel "$RUN/rs" --repl-diskless-sync-delay 0 >/dev/null; then
    SN="bash $SRV/redis-sentinel.sh"
    U="redis-sentinel://$($SN sentinels "$RUN/rs")/0?master=mymaster"
    F=(--fault-cmd "stop=$SN failover $RUN/rs" --fault-cmd "start=$SN settle $RUN/rs" --fault-every 2)
    row redis-sentinel-failover redis "SENTINEL FAILOVER every ~4 s, + client faults" \
        "asynchronous replication: a grant the new master had not received is gone (its holder is told LOST); the old master takes writes until demoted: a split may show" \
        "$U" 0.5 "${F[@]}"
    row redis-sentinel-failover-wait redis "the same failovers, wait_replicas=1, + client faults" \
        "a grant or renewal no replica acknowledged is not counted" \
        "$U&wait_replicas=1&wait_ms=200" 0.5 "${F[@]}"
    K=(--fault-cmd "stop=$SN kill $RUN/rs" --fault-cmd "start=$SN revive $RUN/rs && $SN settle $RUN/rs" --fault-every 2)
    row redis-sentinel-kill redis "the master SIGKILLed every ~5 s (Sentinel promotes a replica), + client faults" \
        "a grant the promoted replica had not received is gone (its holder is told LOST); no split (the old master is dead)" \
        "$U" 0.5 "${K[@]}"
    row redis-sentinel-kill-wait redis "the same kills, wait_replicas=1, + client faults" \
        "a grant or renewal no replica acknowledged is not counted: a promotion loses no counted grant" \
        "$U&wait_replicas=1&wait_ms=200" 0.5 "${K[@]}"
fi

# ---- RedLock: 5 masters, 2 or 3 of them down ----
if built redlock; then
    ok=1
    for i in 1 2 3 4 5; do
        p=$(start redis "$RUN/r5-$i") || { ok=0; break; }
        eval "r5p$i=$p"
    done
    if [ $ok = 1 ]; then
        U="redlock://127.0.0.1:$r5p1,127.0.0.1:$r5p2,127.0.0.1:$r5p3,127.0.0.1:$r5p4,127.0.0.1:$r5p5/0"
        R=(--fault-cmd "stop=bash $SRV/redis.sh stop $RUN/r5-1; bash $SRV/redis.sh stop $RUN/r5-2"
           --fault-cmd "start=bash $SRV/redis.sh restart $RUN/r5-1 >/dev/null; bash $SRV/redis.sh restart $RUN/r5-2 >/dev/null")
        row redlock5-2down redlock "2 of 5 nodes down 1 s every 2 s (restarted without persistence), + client faults" \
            "3 of 5 is still a majority: grants go on; a restarted node has forgotten its keys" "$U" 0.5 "${R[@]}" \
            --fault-every 2
        R=(--fault-cmd "stop=for i in 1 2 3; do bash $SRV/redis.sh stop $RUN/r5-\$i; done"
           --fault-cmd "start=for i in 1 2 3; do bash $SRV/redis.sh restart $RUN/r5-\$i >/dev/null; done")
        row redlock5-3down redlock "3 of 5 nodes down 1 s every 2 s (restarted without persistence), + client faults" \
            "no majority while they are down: acquires fail, holders lose their lease at the next renewal and are told" \
            "$U" 0.5 "${R[@]}" --fault-every 2
    fi
fi

# ---- ZooKeeper: the lease is the session ----
if built zk && port=$(start zk "$RUN/zk"); then
    U="zk://127.0.0.1:$port?session_timeout_ms=1000"
    R=(--fault-cmd "stop=bash $SRV/zk.sh stop $RUN/zk" --fault-cmd "start=bash $SRV/zk.sh restart $RUN/zk >/dev/null")
    row zk zk "client faults (-t = the 1 s session timeout)" "ephemeral sequential nodes: a holder's node goes with its session" "$U" 1
    row zk-restart zk "server restart every 5 s, + client faults" "ZooKeeper persists nodes and sessions: a short restart loses nothing" "$U" 1 "${R[@]}"
    link_rows zk zk "1 s session" "$U" 1
fi

# ---- ZooKeeper: a 3-member ensemble, its leader killed ----
if built zk; then
    leader_row zk-leader zk ensemble-start ensemble-stop "?session_timeout_ms=2000" 2 \
        "the ensemble's leader killed every 5 s (-t = the 2 s session timeout), + client faults" \
        "a grant is a node a majority committed: it survives the leader; clients move to another member and keep their sessions if back within lost_after_ms"
fi

# ---- PostgreSQL, MariaDB: session locks ----
if built postgres && port=$(start postgres "$RUN/pg"); then
    U="postgres://baton:baton-test@127.0.0.1:$port/postgres"
    R=(--fault-cmd "stop=bash $SRV/postgres.sh stop $RUN/pg" --fault-cmd "start=bash $SRV/postgres.sh restart $RUN/pg >/dev/null")
    row postgres postgres "client faults" "advisory locks held by the session; a pause keeps the session, so nothing is lost" "$U" 0.5
    row postgres-lease postgres "client faults, mode=lease" "a lease row renewed by the client" "$U?mode=lease" 0.5
    row postgres-restart postgres "server restart every 5 s, + client faults" "a restart ends every session: holders are told" "$U" 0.5 "${R[@]}"
    T=(--fault-cmd "stop=PGPASSWORD=baton-test psql -h 127.0.0.1 -p $port -U baton -d postgres -Atqc \"select count(pg_terminate_backend(pid)) from pg_stat_activity where usename = 'baton' and pid <> pg_backend_pid()\" >/dev/null"
       --fault-cmd "start=true")
    row postgres-terminate postgres "pg_terminate_backend of every client session every 2 s, + client faults" \
        "a terminated session's advisory locks are released by the server: its holder is told" "$U" 0.5 "${T[@]}" \
        --fault-every 2
    row postgres-row-terminate postgres "mode=row, pg_terminate_backend of every client session every 2 s (holders work 0.1 s), + client faults" \
        "a terminated session's transaction is rolled back, its row lock freed at once: its holder is told" \
        "$U?mode=row" 0.5 "${T[@]}" --fault-every 2 --work 0.1
    row postgres-row-terminate-run postgres "mode=row, clients are baton run (0.4 s commands), pg_terminate_backend of every session every 2 s, + client faults" \
        "baton run kills the command of a holder whose session was terminated before another client's grant" \
        "$U?mode=row" 0.5 "${T[@]}" --fault-every 2 --run --work 0.4 --grants "$RUN_GRANTS"
    for m in session row lease; do
        link_rows "postgres-$m" postgres "mode=$m" "$U?mode=$m" 0.5
    done
fi
if built mysql && port=$(start mysql "$RUN/my"); then
    U="mysql://baton:baton-test@127.0.0.1:$port/baton"
    R=(--fault-cmd "stop=bash $SRV/mysql.sh stop $RUN/my" --fault-cmd "start=bash $SRV/mysql.sh restart $RUN/my >/dev/null")
    row mysql mysql "client faults" "GET_LOCK held by the session" "$U" 0.5
    row mysql-restart mysql "server restart every 5 s, + client faults" "a restart ends every session: holders are told" "$U" 0.5 "${R[@]}"
    # KILL CONNECTION of every client connection: listed first, then killed
    # one by one (a killer listed in its own list would kill itself first)
    KL="MYSQL_PWD=baton-test mysql -h 127.0.0.1 -P $port -u baton"
    K=(--fault-cmd "stop=for i in \$($KL -N -e \"select id from information_schema.processlist where user = 'baton' and id <> connection_id()\"); do $KL -e \"KILL CONNECTION \$i\" 2>/dev/null; done; true"
       --fault-cmd "start=true")
    row mysql-kill mysql "KILL CONNECTION of every client connection every 2 s (holders work 0.1 s), + client faults" \
        "a killed connection's GET_LOCK is released by the server at once: its holder is told" "$U" 0.5 "${K[@]}" --fault-every 2 --work 0.1
    row mysql-row-kill mysql "mode=row, KILL CONNECTION of every client connection every 2 s (holders work 0.1 s), + client faults" \
        "a killed connection's transaction is rolled back, its row lock freed at once: its holder is told" \
        "$U?mode=row" 0.5 "${K[@]}" --fault-every 2 --work 0.1
    row mysql-kill-run mysql "clients are baton run (0.4 s commands), KILL CONNECTION of every client connection every 2 s, + client faults" \
        "baton run kills the command of a holder whose connection was killed before another client's grant" \
        "$U" 0.5 "${K[@]}" --fault-every 2 --run --work 0.4 --grants "$RUN_GRANTS"
    row mysql-row-kill-run mysql "mode=row, clients are baton run (0.4 s commands), KILL CONNECTION of every connection every 2 s, + client faults" \
        "baton run kills the command of a holder whose connection was killed before another client's grant" \
        "$U?mode=row" 0.5 "${K[@]}" --fault-every 2 --run --work 0.4 --grants "$RUN_GRANTS"
    for m in session row lease; do
        link_rows "mysql-$m" mysql "mode=$m" "$U?mode=$m" 0.5
    done
fi

# ---- etcd: a lease per client (TTL >= 1.5 s on the test server) ----
if built etcd && port=$(start etcd "$RUN/etcd"); then
    U="etcd://127.0.0.1:$port/cf?ttl=2"
    R=(--fault-cmd "stop=bash $SRV/etcd.sh stop $RUN/etcd" --fault-cmd "start=bash $SRV/etcd.sh restart $RUN/etcd >/dev/null")
    row etcd etcd "client faults (-t = the 2 s lease TTL)" "the client's lease, kept alive every TTL/3; fences the key's revision" "$U" 2
    row etcd-restart etcd "server restart every 5 s, + client faults" "etcd persists (fsync'd): leases survive a short restart" "$U" 2 "${R[@]}"
    link_rows etcd etcd "2 s lease TTL" "$U" 2
fi

# ---- etcd: a 3-member cluster, its leader killed ----
if built etcd; then
    leader_row etcd-leader etcd cluster-start cluster-stop "/cf?ttl=2" 2 \
        "the cluster's leader killed every 5 s (-t = the 2 s lease TTL), + client faults" \
        "a grant is a key a majority committed, on a lease the new leader keeps (its TTL restarts); calls during the election are asked again; a holder whose keep-alive cannot get through before its TTL (2 s) gives the lease up and is told"
fi

/usr/bin/python3 "$ROOT/scripts/reliability-md.py" "$RES" "$SKIPPED" "$GRANTS" >"$OUT.tmp" && mv "$OUT.tmp" "$OUT"
echo "check-faults: wrote $OUT (reports and timelines in $RUN)" >&2
# exit 1 when a row failed a safety property: the table says which
/usr/bin/python3 -c 'import json,sys; sys.exit(any(json.loads(l).get("ok") is not True for l in open(sys.argv[1]) if l.strip()))' "$RES"
