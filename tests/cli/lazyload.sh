#!/bin/bash
# An engine whose client library is loaded with dlopen on its first open
# (postgres: libpq, mysql: libmariadb) does not cost a program that never
# opens it, and a library that cannot be loaded is a clear error:
#   - neither `baton` nor libbaton.so names SONAME as a needed library;
#   - `baton run` on the file engine never loads it; opening the engine does;
#   - a SONAME that is not a shared object, or one without the functions:
#     exit 64 (BATON_ENOTSUP) naming the library, never a crash.
# No server is needed: the engine is opened against a closed port.
#
#   lazyload.sh ENGINE SONAME PATH/TO/baton PATH/TO/libbaton.so
set -u

MODE=lazyload
ENGINE=${1:?engine}
SONAME=${2:?soname}
BATON=${3:?path to baton}
LIBBATON=${4:?path to libbaton.so}
TMP=${BATON_TEST_TMP:-$PWD}/lazyload_$ENGINE.$$
mkdir -p "$TMP/locks" "$TMP/notelf" "$TMP/nosyms"
chmod 700 "$TMP"

. "$(cd "$(dirname "$0")" && pwd)/lib.sh"
unset BATON_DIR BATON_URI LD_LIBRARY_PATH LD_PRELOAD
# port 1 on loopback: nothing listens there, so the open fails fast after the load
URI="$ENGINE://baton@127.0.0.1:1/baton"

needed() { readelf -d "$1" | grep -F "(NEEDED)" | grep -qF "[$SONAME]"; }
check "$SONAME is not a needed library of baton" not needed "$BATON"
check "$SONAME is not a needed library of libbaton.so" not needed "$LIBBATON"

# LD_DEBUG=libs lists every library the dynamic loader looks for
LD_DEBUG=libs expect_rc 0 "baton run on the file engine" "$BATON" run -u "file://$TMP/locks" lazy -- true
check "the file engine never loads $SONAME" not grep -qF "find library=$SONAME" "$TMP/err"
LD_DEBUG=libs expect_rc 69 "$ENGINE on a closed port: unavailable" "$BATON" run -u "$URI" lazy -- true
check "opening the $ENGINE engine loads $SONAME" grep -qF "find library=$SONAME" "$TMP/err"

# not a shared object at all
echo "not an ELF file" >"$TMP/notelf/$SONAME"
LD_LIBRARY_PATH="$TMP/notelf" expect_rc 64 "$SONAME not loadable: not supported" "$BATON" run -u "$URI" lazy -- true
check "... the message names $SONAME and why" grep -qE "$ENGINE: cannot load $SONAME .*: .*$SONAME" "$TMP/err"

# a shared object of that name without the functions the engine calls
if command -v cc >/dev/null; then
    echo "int baton_lazyload_nothing_here;" >"$TMP/nosyms/empty.c"
    cc -shared -fPIC -o "$TMP/nosyms/$SONAME" "$TMP/nosyms/empty.c"
    LD_LIBRARY_PATH="$TMP/nosyms" expect_rc 64 "$SONAME without its functions: not supported" \
        "$BATON" run -u "$URI" lazy -- true
    check "... the message names $SONAME and the missing function" grep -qE "$ENGINE: $SONAME has no [A-Za-z_]+" "$TMP/err"
else
    echo "skip: no C compiler for the library without functions" >&2
fi

echo "$PASS passed, $FAIL failed"
[ $FAIL -eq 0 ]
