#!/bin/bash
# docs/recipes.md, run as written: every block marked `# recipe: NAME` is
# extracted and run against a real engine, and what it prints is checked.
#
#   recipes.sh file     BATON    the file engine (always); also the doc-wide
#                                checks: every marked block has a test here and
#                                every test here a block; the systemd unit passes
#                                `systemd-analyze verify`
#   recipes.sh sqlite   BATON    sqlite://<tmp>/recipes.db
#   recipes.sh postgres BATON    the "postgres" fixture ($BATON_TEST_SRV/postgres)
#   recipes.sh etcd     BATON    the "etcd" fixture (etcdctl interop, elections)
#   recipes.sh zk       BATON    the "zk" fixture (the systemd unit's baton elect)
#
# The only substitutions: BATON_URI (and the variables a block itself reads for
# the foreign tool: ETCDCTL_ENDPOINTS, PG*), a PATH with this build's baton
# first, TMPDIR and HOME in the test's directory. `sh` blocks run with /bin/sh.
# Prints "N passed, N failed"; exits 1 on failure, 77 when the engine's server
# is missing (unless BATON_REQUIRE_ALL=1).
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
HERE=$(cd "$(dirname "$0")" && pwd)
DOC="$HERE/../../docs/recipes.md"
TMP=${BATON_TEST_TMP:-$PWD}/docs_recipes_$MODE.$$
rm -rf "$TMP"; mkdir -p "$TMP"; chmod 700 "$TMP"
. "$HERE/../cli/lib.sh"
[ -x "$BATON" ] || { echo "no baton at $BATON" >&2; exit 1; }
BATON=$(cd "$(dirname "$BATON")" && pwd)/$(basename "$BATON")

# ---- the blocks ---------------------------------------------------------------
# $TMP/blocks/NAME holds the block's text, $TMP/blocks/NAME.lang its fence language.
mkdir -p "$TMP/blocks"
awk -v out="$TMP/blocks" '
    /^```[a-z]+$/ && !inb { inb = 1; lang = substr($0, 4); first = 1; name = ""; next }
    /^```$/ && inb { inb = 0; if (name != "") close(out "/" name); next }
    inb && first { first = 0
        if (match($0, /^# recipe: [A-Za-z0-9._-]+$/)) {
            name = substr($0, 11)
            if (seen[name]++) { print "duplicate recipe " name > "/dev/stderr"; exit 1 }
            print lang > (out "/" name ".lang"); close(out "/" name ".lang")
        }
    }
    inb && name != "" { print > (out "/" name) }
' "$DOC" || bad "docs/recipes.md: a recipe name is used twice"

# Which recipes run on which engine (the doc-wide check below keeps this list
# and the doc in step).
declare -A ENGINES=(
    [cron]="file sqlite postgres etcd zk"
    [scheduler.service]="etcd zk"
    [leader]="etcd"
    [fencing-sqlite]="file sqlite"
    [fencing-postgres]="postgres"
    [hold]="file sqlite postgres etcd zk"
    [flock-side-by-side]="file"
    [etcdctl]="etcd"
)

# ---- the engine ---------------------------------------------------------------
port_of() { cat "${BATON_TEST_SRV:-/nonexistent}/$1/port" 2>/dev/null; }
EXTRA_ENV=()
case "$MODE" in
file) URI="file://$TMP/locks" ;;
sqlite) URI="sqlite://$TMP/recipes.db" ;;
postgres)
    PORT=$(port_of postgres) || skip_or_fail "no test postgres server"
    command -v psql >/dev/null || skip_or_fail "psql is not installed (postgresql-client)"
    URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres"
    EXTRA_ENV=(PGHOST=127.0.0.1 PGPORT="$PORT" PGUSER=baton PGPASSWORD=baton-test PGDATABASE=postgres)
    ;;
etcd)
    PORT=$(port_of etcd) || skip_or_fail "no test etcd server"
    command -v etcdctl >/dev/null || skip_or_fail "etcdctl is not installed (etcd-client)"
    # a client lease of 2 s: a revoked or expired lease is noticed within ~0.7 s
    URI="etcd://127.0.0.1:$PORT?ttl=2"
    EXTRA_ENV=(ETCDCTL_API=3 ETCDCTL_ENDPOINTS="127.0.0.1:$PORT")
    ;;
zk)
    PORT=$(port_of zk) || skip_or_fail "no test zk server"
    URI="zk://127.0.0.1:$PORT/recipes-$$?session_timeout_ms=4000"
    ;;
*) echo "usage: $0 file|sqlite|postgres|etcd|zk BATON" >&2; exit 2 ;;
esac

mkdir -p "$TMP/bin" "$TMP/tmp" "$TMP/home/bin" "$TMP/work"
ln -s "$BATON" "$TMP/bin/baton"
ENV=(env -u BATON_DIR -u XDG_RUNTIME_DIR -u BATON_ETCD_PASSWORD -u BATON_REDIS_PASSWORD
     PATH="$TMP/bin:$PATH" TMPDIR="$TMP/tmp" HOME="$TMP/home" BATON_URI="$URI" "${EXTRA_ENV[@]}")
unset BATON_URI

# run_block NAME: runs the sh block in $TMP/work; stdout in $TMP/NAME.out,
# stderr in $TMP/NAME.err, the status in RC. 120 s at most.
run_block() {
    local name=$1
    (cd "$TMP/work" && timeout -k 5 120 "${ENV[@]}" sh "$TMP/blocks/$name" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" </dev/null)
    RC=$?
}

# expect_lines NAME REGEX...: the block's stdout is these lines (grep -E, whole line), in order
expect_lines() {
    local name=$1 i=0 line want; shift
    local -a got
    mapfile -t got <"$TMP/$name.out"
    if [ ${#got[@]} -ne $# ]; then
        bad "[$MODE] $name: ${#got[@]} lines printed, want $#: $(tr '\n' '|' <"$TMP/$name.out"); stderr: $(head -c 400 "$TMP/$name.err")"
        return
    fi
    for want in "$@"; do
        line=${got[$i]}
        if ! grep -Eqx -- "$want" <<<"$line"; then
            bad "[$MODE] $name: line $((i + 1)) is '$line', want /$want/; stderr: $(head -c 400 "$TMP/$name.err")"
            return
        fi
        i=$((i + 1))
    done
    ok "[$MODE] $name: prints what the doc says ($# lines)"
}

# ---- cron: the crontab line's command, as two machines at once ----------------
# crontab_env / crontab_cmd: the block's VAR=value lines and its one schedule line
test_cron() {
    local blk="$TMP/blocks/cron" cmd vars=() v log="$TMP/cron.log" p1 p2 rc1 rc2
    while IFS= read -r v; do
        case "$v" in BATON_URI=*) ;; PATH=*) vars+=("PATH=$TMP/bin:${v#PATH=}") ;; *) vars+=("$v") ;; esac
    done < <(grep -E '^[A-Za-z_][A-Za-z0-9_]*=' "$blk")
    check "[$MODE] cron: the crontab sets BATON_URI" grep -q '^BATON_URI=' "$blk"
    check "[$MODE] cron: the crontab sets a PATH (cron's has no /usr/local/bin)" grep -q '^PATH=' "$blk"
    cmd=$(grep -Ev '^[[:space:]]*(#|$)|^[A-Za-z_][A-Za-z0-9_]*=' "$blk" | awk '{ for (i = 1; i <= 5; i++) $i = ""; sub(/^ +/, ""); print }')
    check "[$MODE] cron: one schedule line" [ "$(grep -cEv '^[[:space:]]*(#|$)|^[A-Za-z_][A-Za-z0-9_]*=' "$blk")" = 1 ]
    # the job: 3 s, logs its start (with the fence) and end
    cat >"$TMP/home/bin/nightly-report" <<EOF
#!/bin/sh
echo "start \$\$ \$BATON_FENCE" >>"$log"
sleep 3
echo "end \$\$" >>"$log"
EOF
    chmod +x "$TMP/home/bin/nightly-report"
    : >"$log"
    # cron's environment: HOME, LOGNAME, SHELL, PATH, then the crontab's variables
    local CENV=(env -i HOME="$TMP/home" LOGNAME="$(id -un)" SHELL=/bin/sh PATH="$TMP/bin:/usr/bin:/bin"
                TMPDIR="$TMP/tmp" "${vars[@]}" BATON_URI="$URI")
    "${CENV[@]}" /bin/sh -c "$cmd" >"$TMP/cron1.out" 2>"$TMP/cron1.err" &
    p1=$!
    sleep 0.3
    "${CENV[@]}" /bin/sh -c "$cmd" >"$TMP/cron2.out" 2>"$TMP/cron2.err" &
    p2=$!
    BG_PIDS+=("$p1" "$p2")
    wait_pid "$p1" 60; rc1=$RC
    wait_pid "$p2" 60; rc2=$RC
    check "[$MODE] cron: two machines at once: both exit 0 ($rc1, $rc2)" [ "$rc1" = 0 -a "$rc2" = 0 ]
    check "[$MODE] cron: ...exactly one ran the job ($(grep -c '^start' "$log") starts)" [ "$(grep -c '^start' "$log")" = 1 ]
    check "[$MODE] cron: ...and it ran to its end" [ "$(grep -c '^end' "$log")" = 1 ]
    check "[$MODE] cron: ...nothing printed, so cron mails nothing ($(cat "$TMP"/cron[12].out "$TMP"/cron[12].err | head -c 300))" \
        [ ! -s "$TMP/cron1.out" -a ! -s "$TMP/cron1.err" -a ! -s "$TMP/cron2.out" -a ! -s "$TMP/cron2.err" ]
    "${CENV[@]}" /bin/sh -c "$cmd" >"$TMP/cron3.out" 2>"$TMP/cron3.err"; rc1=$?
    check "[$MODE] cron: the next run, alone, runs the job (exit $rc1)" [ "$rc1" = 0 -a "$(grep -c '^start' "$log")" = 2 ]
    local f1 f2
    f1=$(sed -n '1s/^start [0-9]* //p' "$log"); f2=$(grep '^start' "$log" | sed -n '2s/^start [0-9]* //p')
    check "[$MODE] cron: ...with a higher fence ($f2 > $f1)" gt "$f2" "$f1"
}

# ---- the systemd unit ---------------------------------------------------------
unit_root() { # makes $TMP/root: the unit, baton and a stand-in scheduler at the unit's paths
    local r="$TMP/root"
    [ -d "$r" ] && return 0
    mkdir -p "$r/usr/local/bin" "$r/etc/systemd/system" "$r/usr/lib/systemd" "$r/etc/baton"
    cp "$BATON" "$r/usr/local/bin/baton"
    cat >"$r/usr/local/bin/scheduler" <<EOF
#!/bin/sh
echo "start \$BATON_FENCE" >>"$TMP/scheduler.log"
exec sleep 1000
EOF
    chmod +x "$r/usr/local/bin/scheduler"
    cp "$TMP/blocks/scheduler.service" "$r/etc/systemd/system/scheduler.service"
    # systemd's own units (sysinit.target, network-online.target ...) for the dependencies
    [ -d /lib/systemd/system ] && cp -r /lib/systemd/system "$r/usr/lib/systemd/system"
}

test_unit_verify() {
    if ! command -v systemd-analyze >/dev/null 2>&1; then
        echo "   systemd-analyze is not installed: the unit is only run, not verified" >&2
        return
    fi
    unit_root
    local r="$TMP/root" out
    out=$(systemd-analyze verify --root="$r" /etc/systemd/system/scheduler.service 2>&1)
    check "[$MODE] scheduler.service: systemd-analyze verify: exit 0, no warning ($out)" [ $? = 0 -a -z "$out" ]
    # the check can fail: a misspelt Restart= and a missing program are reported
    sed 's/^Restart=always$/Restart=alwayz/' "$TMP/blocks/scheduler.service" >"$r/etc/systemd/system/broken.service"
    out=$(systemd-analyze verify --root="$r" /etc/systemd/system/broken.service 2>&1)
    check "[$MODE] ...a misspelt Restart= would be reported" grep -q 'alwayz' <<<"$out"
    mv "$r/usr/local/bin/baton" "$r/usr/local/bin/baton.away"
    out=$(systemd-analyze verify --root="$r" /etc/systemd/system/scheduler.service 2>&1)
    check "[$MODE] ...a missing ExecStart program would be reported" grep -q 'baton' <<<"$out"
    mv "$r/usr/local/bin/baton.away" "$r/usr/local/bin/baton"
    rm -f "$r/etc/systemd/system/broken.service"
}

leader_of() { "${ENV[@]}" "$BATON" elect --leader scheduler 2>/dev/null; }
wait_leader() { # VALUE TIMEOUT_S: 0 once the leader's value is VALUE
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        [ "$(leader_of | cut -d' ' -f2-)" = "$1" ] && return 0
        sleep 0.1
    done
    return 1
}

test_unit_run() {
    unit_root
    local blk="$TMP/blocks/scheduler.service" exec_line succ vars=() v
    exec_line=$(sed -n 's/^ExecStart=//p' "$blk")
    check "[$MODE] scheduler.service: one ExecStart ($exec_line)" [ "$(grep -c '^ExecStart=' "$blk")" = 1 ]
    check "[$MODE] ...it is baton elect or baton run" grep -Eq '^/usr/local/bin/baton (elect|run) ' <<<"$exec_line"
    succ="0 $(sed -n 's/^SuccessExitStatus=//p' "$blk")"
    while IFS= read -r v; do
        case "$v" in BATON_URI=*) ;; *) vars+=("$v") ;; esac
    done < <(sed -n 's/^Environment=//p' "$blk")
    # %H is the host name (two machines: node-a, node-b); /usr/local/bin is the scratch root's
    local -a A B
    read -ra A <<<"$(sed -e 's/%H/node-a/g' -e "s|/usr/local/bin/|$TMP/root/usr/local/bin/|g" <<<"$exec_line")"
    read -ra B <<<"$(sed -e 's/%H/node-b/g' -e "s|/usr/local/bin/|$TMP/root/usr/local/bin/|g" <<<"$exec_line")"
    : >"$TMP/scheduler.log"
    local UENV=(env -i PATH=/usr/bin:/bin "${vars[@]}" BATON_URI="$URI")
    "${UENV[@]}" "${A[@]}" >"$TMP/unit-a.out" 2>"$TMP/unit-a.err" &
    local pa=$! pb ta tb
    BG_PIDS+=("$pa")
    if ! wait_leader node-a 30; then
        bad "[$MODE] scheduler.service: node-a never led: $(head -c 300 "$TMP/unit-a.err")"
        return
    fi
    ta=$(leader_of | cut -d' ' -f1)
    ok "[$MODE] scheduler.service: node-a leads (term $ta)"
    "${UENV[@]}" "${B[@]}" >"$TMP/unit-b.out" 2>"$TMP/unit-b.err" &
    pb=$!
    BG_PIDS+=("$pb")
    sleep 1
    check "[$MODE] ...node-b waits: one scheduler runs" [ "$(grep -c '^start' "$TMP/scheduler.log")" = 1 ]
    check "[$MODE] ...node-a still leads" [ "$(leader_of | cut -d' ' -f2-)" = node-a ]
    # systemctl stop with KillMode=mixed: SIGTERM to the main process, baton
    kill -TERM "$pa"
    wait_pid "$pa" 30
    check "[$MODE] ...node-a stopped (SIGTERM): exit $RC is a success for the unit ($succ)" grep -qw -- "$RC" <<<"$succ"
    if wait_leader node-b 30; then
        tb=$(leader_of | cut -d' ' -f1)
        check "[$MODE] ...node-b leads, in a higher term ($tb > $ta)" gt "$tb" "$ta"
        check "[$MODE] ...its scheduler runs (2 starts in all)" [ "$(grep -c '^start' "$TMP/scheduler.log")" = 2 ]
    else
        bad "[$MODE] ...node-b never led: $(head -c 300 "$TMP/unit-b.err")"
    fi
    kill -TERM "$pb"
    wait_pid "$pb" 30
    check "[$MODE] ...node-b stopped: exit $RC is a success for the unit" grep -qw -- "$RC" <<<"$succ"
}

# ---- the doc-wide checks (file mode) ------------------------------------------
if [ "$MODE" = file ]; then
    found=$(cd "$TMP/blocks" && ls | grep -v '\.lang$' | sort)
    check "docs/recipes.md has marked blocks ($(echo $found))" [ -n "$found" ]
    for n in $found; do
        check "recipe '$n' has a test here" [ -n "${ENGINES[$n]:-}" ]
    done
    for n in "${!ENGINES[@]}"; do
        check "the test's recipe '$n' is in docs/recipes.md" [ -f "$TMP/blocks/$n" ]
    done
    unmarked=$(awk '/^```(sh|ini|crontab)$/ { getline l; if (l !~ /^# recipe: /) n++ } END { print n + 0 }' "$DOC")
    check "every sh block of the doc is marked '# recipe: NAME' (unmarked: $unmarked)" [ "$unmarked" = 0 ]
    check "the cron recipe is a crontab" grep -qx crontab "$TMP/blocks/cron.lang"
    check "the unit is an ini block" grep -qx ini "$TMP/blocks/scheduler.service.lang"
    for n in $found; do
        case "$(cat "$TMP/blocks/$n.lang")" in
        sh) check "recipe '$n' is valid sh (sh -n)" sh -n "$TMP/blocks/$n" ;;
        esac
    done
    [ -f "$TMP/blocks/scheduler.service" ] && test_unit_verify
fi

# ---- run this engine's recipes --------------------------------------------------
for n in "${!ENGINES[@]}"; do
    [[ " ${ENGINES[$n]} " == *" $MODE "* ]] || continue
    [ -f "$TMP/blocks/$n" ] || continue
    case "$n" in
    cron) test_cron ;;
    scheduler.service) test_unit_run ;;
    hold)
        run_block hold
        check "[$MODE] hold: exit 0 ($RC)" [ "$RC" = 0 ]
        expect_lines hold 'holding deploy with fence [0-9]+' 'busy for others \(exit 1\)' 'free again'
        ;;
    fencing-sqlite)
        if command -v sqlite3 >/dev/null; then
            run_block fencing-sqlite
            check "[$MODE] fencing-sqlite: exit 0 ($RC)" [ "$RC" = 0 ]
            expect_lines fencing-sqlite 1 0 'from B'
        else
            echo "   sqlite3 is not installed: fencing-sqlite is not run" >&2
        fi
        ;;
    fencing-postgres)
        run_block fencing-postgres
        check "[$MODE] fencing-postgres: exit 0 ($RC)" [ "$RC" = 0 ]
        expect_lines fencing-postgres 'UPDATE 1' 'UPDATE 0' 'from B'
        ;;
    flock-side-by-side)
        if command -v flock >/dev/null; then
            run_block flock-side-by-side
            check "[$MODE] flock-side-by-side: exit 0 ($RC)" [ "$RC" = 0 ]
            expect_lines flock-side-by-side 'flock holds it' 'baton run -n: exit 1' \
                'baton run got it once flock let go' 'flock -n: exit 1'
        else
            echo "   flock(1) is not installed: flock-side-by-side is not run" >&2
        fi
        ;;
    leader)
        run_block leader
        check "[$MODE] leader: exit 0 ($RC)" [ "$RC" = 0 ]
        expect_lines leader 'term [0-9]+: leading' '[0-9]+ node-a' 'lease [0-9a-f]+ revoked' \
            'term [0-9]+: leadership lost, stopping' 'baton elect exited 75'
        check "[$MODE] leader: ...the same term before and after" \
            [ "$(sed -n '1s/^term \([0-9]*\):.*/\1/p' "$TMP/leader.out")" = "$(sed -n '4s/^term \([0-9]*\):.*/\1/p' "$TMP/leader.out")" ]
        check "[$MODE] leader: ...baton says why on stderr" grep -q 'jobs: leadership lost; terminating the command' "$TMP/leader.err"
        ;;
    etcdctl)
        run_block etcdctl
        check "[$MODE] etcdctl: exit 0 ($RC)" [ "$RC" = 0 ]
        expect_lines etcdctl 'etcdctl has deploy' 'baton run -n: exit 1' 'baton has deploy, after etcdctl' \
            'baton has deploy' 'etcdctl has deploy, after baton' 'node-a leads' 'node-a' \
            'node-a steps down' 'etcdctl elect: node-b leads' 'node-b'
        ;;
    *) bad "[$MODE] no runner for recipe '$n'" ;;
    esac
done

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
