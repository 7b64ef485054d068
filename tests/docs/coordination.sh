#!/bin/bash
# docs/coordination.md, run as written (as recipes.sh runs docs/recipes.md):
# every block marked `# recipe: NAME` (sh) or `/* recipe: FILE */` (C) is
# extracted; each C program is saved as FILE in the directory the sh blocks
# run in (they build it with `cc ... -lbaton`), and each sh block is run
# against a real engine and what it prints is checked.
#
#   coordination.sh file|sqlite|redis|etcd|zk|postgres|mysql BATON LIBBATON
#
# LIBBATON is this build's libbaton.so: the test puts its directory in
# LIBRARY_PATH and LD_LIBRARY_PATH and the source's include/ in
# C_INCLUDE_PATH, so that `cc x.c -lbaton` works as the doc writes it. Every
# C program is also compiled with -std=c11 -Wall -Wextra -Werror -pedantic.
# The doc-wide checks (file mode): every marked block has a test here and
# every test a block, every sh and c block is marked.
# Prints "N passed, N failed"; exits 1 on failure, 77 when no C compiler.
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
LIB=${3:?path to libbaton.so}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
DOC="$SRC/docs/coordination.md"
TMP=${BATON_TEST_TMP:-$PWD}/docs_coordination_$MODE.$$
rm -rf "$TMP"; mkdir -p "$TMP"; chmod 700 "$TMP"
. "$HERE/../cli/lib.sh"
BATON=$(cd "$(dirname "$BATON")" && pwd)/$(basename "$BATON")
LIBDIR=$(cd "$(dirname "$LIB")" && pwd)
command -v cc >/dev/null || skip_or_fail "no cc: the C recipes cannot be built"

# ---- the blocks ---------------------------------------------------------------
mkdir -p "$TMP/blocks"
awk -v out="$TMP/blocks" '
    /^```[a-z]+$/ && !inb { inb = 1; lang = substr($0, 4); first = 1; name = ""; next }
    /^```$/ && inb { inb = 0; if (name != "") close(out "/" name); next }
    inb && first { first = 0
        if (match($0, /^# recipe: [A-Za-z0-9._-]+$/)) name = substr($0, 11)
        else if (match($0, /^\/\* recipe: [A-Za-z0-9._-]+ \*\/$/)) name = substr($0, 12, length($0) - 14)
        if (name != "") {
            if (seen[name]++) { print "duplicate recipe " name > "/dev/stderr"; exit 1 }
            print lang > (out "/" name ".lang"); close(out "/" name ".lang")
        }
    }
    inb && name != "" { print > (out "/" name) }
' "$DOC" || bad "docs/coordination.md: a recipe name is used twice"

# the sh recipes, in the order they run (each C program is built by the one after it)
RECIPES=(config-reload config-reload-c registry registry-c work-queue work-queue-c)
PROGRAMS=(config-watch.c registry.c worker.c)

# the servers: the test fixtures, each run in a namespace of its own (the
# recipes' names are fixed)
port_of() { cat "${BATON_TEST_SRV:-/nonexistent}/$1/port" 2>/dev/null; }
case "$MODE" in
file) URI="file://$TMP/locks" ;;
sqlite) URI="sqlite://$TMP/coordination.db" ;;
redis) PORT=$(port_of redis) || skip_or_fail "no test redis server"
       URI="redis://127.0.0.1:$PORT/0?prefix=docs$$:" ;;
etcd) PORT=$(port_of etcd) || skip_or_fail "no test etcd server"
      URI="etcd://127.0.0.1:$PORT/docs-$$?ttl=2" ;;
zk) PORT=$(port_of zk) || skip_or_fail "no test zk server"
    URI="zk://127.0.0.1:$PORT/docs-$$?session_timeout_ms=2000" ;;
postgres) PORT=$(port_of postgres) || skip_or_fail "no test postgres server"
          URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres?table=docs_$$" ;;
mysql) PORT=$(port_of mysql) || skip_or_fail "no test mysql server"
       URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton?table=docs_$$" ;;
*) echo "usage: $0 file|sqlite|redis|etcd|zk|postgres|mysql BATON LIBBATON" >&2; exit 2 ;;
esac

# an engine of this build without values, groups or queues: the runs are a skip
prims=$("$BATON" engines "$MODE" 2>/dev/null | sed -n 's/^ *primitives: *//p')
CARRIES=1
for p in value group queue; do [[ ", $prims, " == *", $p, "* ]] || CARRIES=0; done

mkdir -p "$TMP/bin" "$TMP/tmp" "$TMP/home" "$TMP/work"
ln -s "$BATON" "$TMP/bin/baton"
if [ -n "${BATON_TEST_CFLAGS:-}" ]; then
    # a sanitized libbaton: the recipes' `cc` builds with its runtime too
    real_cc=$(command -v cc)
    printf '#!/bin/sh\nexec %s "$@" %s\n' "$real_cc" "$BATON_TEST_CFLAGS" >"$TMP/bin/cc"
    chmod +x "$TMP/bin/cc"
fi
ENV=(env -u BATON_DIR -u XDG_RUNTIME_DIR PATH="$TMP/bin:$PATH" TMPDIR="$TMP/tmp" HOME="$TMP/home"
     BATON_URI="$URI" C_INCLUDE_PATH="$SRC/include" LIBRARY_PATH="$LIBDIR" LD_LIBRARY_PATH="$LIBDIR")
unset BATON_URI

run_block() { # NAME: stdout in $TMP/NAME.out, stderr in $TMP/NAME.err, status in RC
    local name=$1
    (cd "$TMP/work" && timeout -k 5 40 "${ENV[@]}" sh "$TMP/blocks/$name" \
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

versions_grow() { # NAME: the two "(version N)" of its output grow
    local a b
    a=$(sed -n '1s/.*(version \([0-9]*\))$/\1/p' "$TMP/$1.out")
    b=$(sed -n '2s/.*(version \([0-9]*\))$/\1/p' "$TMP/$1.out")
    check "[$MODE] $1: ...the version grows ($a < $b)" gt "$b" "$a"
}

# ---- the doc-wide checks ---------------------------------------------------------
if [ "$MODE" = file ]; then
    found=$(cd "$TMP/blocks" && ls | grep -v '\.lang$' | sort | tr '\n' ' ')
    want=$(printf '%s\n' "${RECIPES[@]}" "${PROGRAMS[@]}" | sort | tr '\n' ' ')
    check "every marked block of docs/coordination.md has a test, every test a block ($found)" [ "$found" = "$want" ]
    unmarked=$(awk '/^```(sh|c)$/ { getline l; if (l !~ /^(# recipe: |\/\* recipe: )/) n++ } END { print n + 0 }' "$DOC")
    check "every sh and c block of the doc is marked (unmarked: $unmarked)" [ "$unmarked" = 0 ]
    for n in "${RECIPES[@]}"; do
        check "recipe '$n' is an sh block, valid sh (sh -n)" sh -c '[ "$(cat "$1.lang")" = sh ] && sh -n "$1"' sh "$TMP/blocks/$n"
    done
    for p in "${PROGRAMS[@]}"; do
        check "$p is a c block" grep -qx c "$TMP/blocks/$p.lang"
        # the doc's C is held to the project's warnings
        if cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$SRC/include" -c -o "$TMP/$p.o" "$TMP/blocks/$p" 2>"$TMP/$p.cc"; then
            ok "$p compiles with -std=c11 -Wall -Wextra -Werror -pedantic"
        else
            bad "$p: $(head -c 600 "$TMP/$p.cc")"
        fi
    done
fi

# ---- run them ----------------------------------------------------------------------
if [ $CARRIES = 0 ]; then
    [ "${BATON_REQUIRE_ALL:-}" = 1 ] && bad "the $MODE engine has no values, groups or queues in this build"
    echo "SKIP: the $MODE engine has no values, groups or queues in this build ($prims)" >&2
    echo "$PASS passed, $FAIL failed"
    [ $FAIL -eq 0 ] && exit 77
    exit 1
fi
for p in "${PROGRAMS[@]}"; do cp "$TMP/blocks/$p" "$TMP/work/$p"; done
T=$'\t'
for n in "${RECIPES[@]}"; do
    [ -f "$TMP/blocks/$n" ] || continue
    run_block "$n"
    check "[$MODE] $n: exit 0 ($RC)" [ "$RC" = 0 ]
    case "$n" in
    config-reload|config-reload-c)
        expect_lines "$n" 'reloaded: workers=4 \(version [0-9]+\)' 'reloaded: workers=8 \(version [0-9]+\)'
        versions_grow "$n"
        ;;
    registry)
        expect_lines "$n" "web-1${T}10\.0\.0\.1:8080" "web-2${T}10\.0\.0\.2:8080" "web-2${T}10\.0\.0\.2:8080"
        ;;
    registry-c)
        expect_lines "$n" 'web-1 10\.0\.0\.1:8080' 'web-3 10\.0\.0\.3:8080' "web-1${T}10\.0\.0\.1:8080"
        ;;
    work-queue|work-queue-c)
        expect_lines "$n" 'done: photo-1\.jpg' 'failed: photo-2\.jpg' 'done: photo-[23]\.jpg' 'done: photo-[23]\.jpg' 0
        check "[$MODE] $n: ...the failed item came back and was done ($(tr '\n' '|' <"$TMP/$n.out"))" \
            [ "$(grep -c '^done: photo-2.jpg$' "$TMP/$n.out")" = 1 -a "$(grep -c '^done: photo-3.jpg$' "$TMP/$n.out")" = 1 ]
        ;;
    esac
    # a recipe leaves nothing running behind it
    check "[$MODE] $n: ...no group member left" [ -z "$("${ENV[@]}" "$BATON" members web 2>&1)" ]
done

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
