#!/bin/bash
# docs/ratelimit.md, run as written (as coordination.sh runs
# docs/coordination.md): every block marked `# recipe: NAME` (sh) or
# `/* recipe: FILE */` (C) is extracted, each C program saved as FILE where
# the sh blocks run (they build it with `cc ... -lbaton`), each sh block run
# against a real engine and what it prints checked.
#
#   ratelimit.sh file|sqlite|redis|postgres|etcd|zk|mysql BATON LIBBATON
#
# Prints "N passed, N failed"; exits 1 on failure, 77 when no C compiler or
# no server.
set -u

MODE=${1:?mode}
BATON=${2:?path to baton}
LIB=${3:?path to libbaton.so}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
DOC="$SRC/docs/ratelimit.md"
TMP=${BATON_TEST_TMP:-$PWD}/docs_ratelimit_$MODE.$$
rm -rf "$TMP"; mkdir -p "$TMP"; chmod 700 "$TMP"
. "$HERE/../cli/lib.sh"
BATON=$(cd "$(dirname "$BATON")" && pwd)/$(basename "$BATON")
LIBDIR=$(cd "$(dirname "$LIB")" && pwd)
command -v cc >/dev/null || skip_or_fail "no cc: the C recipe cannot be built"

mkdir -p "$TMP/blocks"
awk -v out="$TMP/blocks" '
    /^```[a-z]+$/ && !inb { inb = 1; lang = substr($0, 4); first = 1; name = ""; next }
    /^```$/ && inb { inb = 0; if (name != "") close(out "/" name); next }
    inb && first { first = 0
        if (match($0, /^# recipe: [A-Za-z0-9._-]+$/)) name = substr($0, 11)
        else if (match($0, /^\/\* recipe: [A-Za-z0-9._-]+ \*\/$/)) name = substr($0, 12, length($0) - 14)
        if (name != "") print lang > (out "/" name ".lang")
    }
    inb && name != "" { print > (out "/" name) }
' "$DOC"

RECIPES=(throttle throttle-c)
PROGRAMS=(limited.c)

port_of() { cat "${BATON_TEST_SRV:-/nonexistent}/$1/port" 2>/dev/null; }
case "$MODE" in
file) URI="file://$TMP/locks" ;;
sqlite) URI="sqlite://$TMP/ratelimit.db" ;;
redis) PORT=$(port_of redis) || skip_or_fail "no test redis server"
       URI="redis://127.0.0.1:$PORT/0?prefix=docs$$:" ;;
postgres) PORT=$(port_of postgres) || skip_or_fail "no test postgres server"
          URI="postgres://baton:baton-test@127.0.0.1:$PORT/postgres?table=docs_rl_$$" ;;
etcd) PORT=$(port_of etcd) || skip_or_fail "no test etcd server"
      URI="etcd://127.0.0.1:$PORT/docs-rl-$$?ttl=2" ;;
zk) PORT=$(port_of zk) || skip_or_fail "no test zk server"
    URI="zk://127.0.0.1:$PORT/docs-rl-$$?session_timeout_ms=2000" ;;
mysql) PORT=$(port_of mysql) || skip_or_fail "no test mysql server"
       URI="mysql://baton:baton-test@127.0.0.1:$PORT/baton?table=docs_rl_$$" ;;
*) echo "usage: $0 file|sqlite|redis|postgres|etcd|zk|mysql BATON LIBBATON" >&2; exit 2 ;;
esac

mkdir -p "$TMP/bin" "$TMP/tmp" "$TMP/home" "$TMP/work"
ln -s "$BATON" "$TMP/bin/baton"
if [ -n "${BATON_TEST_CFLAGS:-}" ]; then
    # a sanitized libbaton: the recipe's `cc` builds with its runtime too
    real_cc=$(command -v cc)
    printf '#!/bin/sh\nexec %s "$@" %s\n' "$real_cc" "$BATON_TEST_CFLAGS" >"$TMP/bin/cc"
    chmod +x "$TMP/bin/cc"
fi
ENV=(env -u BATON_DIR -u XDG_RUNTIME_DIR PATH="$TMP/bin:$PATH" TMPDIR="$TMP/tmp" HOME="$TMP/home"
     BATON_URI="$URI" C_INCLUDE_PATH="$SRC/include" LIBRARY_PATH="$LIBDIR" LD_LIBRARY_PATH="$LIBDIR")
unset BATON_URI

if [ "$MODE" = file ]; then
    found=$(cd "$TMP/blocks" && ls | grep -v '\.lang$' | sort | tr '\n' ' ')
    want=$(printf '%s\n' "${RECIPES[@]}" "${PROGRAMS[@]}" | sort | tr '\n' ' ')
    check "every marked block of docs/ratelimit.md has a test, every test a block ($found)" [ "$found" = "$want" ]
    unmarked=$(awk '/^```(sh|c)$/ { getline l; if (l !~ /^(# recipe: |\/\* recipe: )/) n++ } END { print n + 0 }' "$DOC")
    check "every sh and c block of the doc is marked (unmarked: $unmarked)" [ "$unmarked" = 0 ]
    check "limited.c compiles with -std=c11 -Wall -Wextra -Werror -pedantic" \
        cc -std=c11 -Wall -Wextra -Werror -pedantic -I"$SRC/include" -c -o "$TMP/limited.o" "$TMP/blocks/limited.c"
fi

cp "$TMP/blocks/limited.c" "$TMP/work/limited.c"
for n in "${RECIPES[@]}"; do
    t0=$(now_ms)
    (cd "$TMP/work" && timeout -k 5 60 "${ENV[@]}" sh "$TMP/blocks/$n" >"$TMP/$n.out" 2>"$TMP/$n.err" </dev/null)
    RC=$?
    el=$(($(now_ms) - t0))
    check "[$MODE] $n: exit 0 ($RC; stderr: $(head -c 300 "$TMP/$n.err"))" [ "$RC" = 0 ]
    case "$n" in
    throttle)
        check "[$MODE] throttle prints what the doc says" \
            [ "$(cat "$TMP/$n.out")" = "$(printf 'rate: 5 per 1000 ms, burst 1\n10')" ]
        # ten calls admitted 200 ms apart: 1.8 s from the first to the last
        # admission; the commands' own start-up jitters by tens of ms, and
        # without the limiter the span would be tens of ms: at least 1.5 s
        span=$(sort -n "$TMP/work/calls.log" | sed -n '1p;$p' | tr '\n' ' ' | awk '{ printf "%d", ($2 - $1) / 1000000 }')
        check "[$MODE] throttle: the calls span >= 1500 ms ($span)" [ "${span:-0}" -ge 1500 ]
        ;;
    throttle-c)
        check "[$MODE] throttle-c prints what the doc says" \
            [ "$(cat "$TMP/$n.out")" = "$(printf 'burst: 2, next in at most 100 ms\nsent: 7 at 10 per 1000 ms, burst 2')" ]
        check "[$MODE] throttle-c: 5 paced permits took >= 400 ms ($el)" [ "$el" -ge 400 ]
        ;;
    esac
done

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
