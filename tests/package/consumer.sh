#!/usr/bin/env bash
# Installs baton to a temporary prefix and builds a small consumer against it
# the four ways a user would: CMake find_package (shared and static) and
# pkg-config (shared and static); each consumer takes and releases a lock on
# the file engine.
#   consumer.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
bld=$2
work="${BATON_TEST_TMP:-/tmp}/package"
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$bld" --prefix "$prefix" >/dev/null

cat > "$work/main.c" <<'C'
#include <baton.h>
#include <stdio.h>
int main(int argc, char **argv) {
    baton_client *c = NULL;
    baton_lock *l = NULL;
    int rc = baton_client_open(&c, argc > 1 ? argv[1] : NULL, NULL);
    if (rc) { fprintf(stderr, "open: %s\n", baton_error_last()->message); return 1; }
    if ((rc = baton_lock_open(&l, c, "package-test", NULL)) || (rc = baton_lock_acquire(l, 1000))) {
        fprintf(stderr, "lock: %s\n", baton_error_last()->message);
        return 1;
    }
    printf("fence %llu\n", (unsigned long long)baton_lock_fence(l));
    baton_lock_release(l);
    baton_lock_free(l);
    baton_client_close(c);
    return 0;
}
C
cat > "$work/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(baton REQUIRED)
add_executable(consumer_shared main.c)
target_link_libraries(consumer_shared PRIVATE baton::baton_shared)
add_executable(consumer_static main.c)
target_link_libraries(consumer_static PRIVATE baton::baton_static)
C
uri="file://$work/locks"
mkdir -p "$work/locks"
fail=0
cmake -S "$work" -B "$work/b" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/b" >/dev/null
LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libbaton.so*' | head -1)")" "$work/b/consumer_shared" "$uri" >/dev/null \
    && echo "ok: find_package, shared" || { echo "FAIL: find_package, shared"; fail=1; }
"$work/b/consumer_static" "$uri" >/dev/null && echo "ok: find_package, static" || { echo "FAIL: find_package, static"; fail=1; }
# a private prefix is not on the loader's path: CMake's build RPATH finds it
env -u LD_LIBRARY_PATH "$work/b/consumer_shared" "$uri" >/dev/null \
    && echo "ok: find_package, shared, without LD_LIBRARY_PATH" \
    || { echo "FAIL: find_package, shared, without LD_LIBRARY_PATH"; fail=1; }

pcdir=$(dirname "$(find "$prefix" -name baton.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
if command -v pkg-config >/dev/null; then
    cc -o "$work/pc_shared" "$work/main.c" $(pkg-config --cflags --libs baton)
    LD_LIBRARY_PATH="$(pkg-config --variable=libdir baton)" "$work/pc_shared" "$uri" >/dev/null \
        && echo "ok: pkg-config, shared" || { echo "FAIL: pkg-config, shared"; fail=1; }
    # ... nor without it (issue #23): the .pc of a prefix other than /usr and
    # /usr/local gives the consumer an RPATH to its libdir
    env -u LD_LIBRARY_PATH "$work/pc_shared" "$uri" >/dev/null 2>"$work/pc_shared.err" \
        && echo "ok: pkg-config, shared, without LD_LIBRARY_PATH" \
        || { echo "FAIL: pkg-config, shared, without LD_LIBRARY_PATH: $(head -c 200 "$work/pc_shared.err")"; fail=1; }
    cc -o "$work/pc_static" "$work/main.c" $(pkg-config --cflags baton) \
        "$(pkg-config --variable=libdir baton)/libbaton.a" $(pkg-config --libs --static baton | sed 's/-lbaton//')
    "$work/pc_static" "$uri" >/dev/null && echo "ok: pkg-config, static" || { echo "FAIL: pkg-config, static"; fail=1; }
    inc=$(pkg-config --variable=includedir baton)
    [ -f "$inc/baton.h" ] && echo "ok: includedir $inc" || { echo "FAIL: includedir $inc has no baton.h"; fail=1; }
else
    echo "skip: pkg-config not installed"
fi
exit $fail
