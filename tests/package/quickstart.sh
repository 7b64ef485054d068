#!/usr/bin/env bash
# The README's C quick start, compiled and run as written: against the file
# engine it takes and releases the lock; against an unreachable Redis it
# prints the error and exits 1 (never a crash or a use of an unset handle).
#   quickstart.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
bld=$2
work="${BATON_TEST_TMP:-/tmp}/quickstart"
rm -rf "$work"; mkdir -p "$work/locks"
awk '/^## C quick start/{f=1} f&&/^```c$/{p=1;next} p&&/^```$/{exit} p' "$src/README.md" > "$work/quickstart.c"
[ -s "$work/quickstart.c" ] || { echo "FAIL: no C block under '## C quick start' in README.md"; exit 1; }
# the static archive's own dependencies, from the build's baton.pc
libs="-lpthread -ldl"
if command -v pkg-config >/dev/null; then
    libs=$(PKG_CONFIG_PATH="$bld" pkg-config --libs --static baton | sed 's/-lbaton\b//; s/-L[^ ]*//g')
fi
cc -std=c11 -Wall -Wextra -Werror -I"$src/include" -o "$work/quickstart" "$work/quickstart.c" "$bld/libbaton.a" $libs
out=$("$work/quickstart" "file://$work/locks")
echo "$out"
echo "$out" | grep -q "holding orders/42 with fence" || { echo "FAIL: file run"; exit 1; }
set +e
err=$("$work/quickstart" "redis://127.0.0.1:1/0?connect_timeout_ms=200" 2>&1); rc=$?
set -e
echo "unreachable: rc=$rc: $err"
[ $rc = 1 ] && [ -n "$err" ] || { echo "FAIL: the error path"; exit 1; }
echo ok
