#!/usr/bin/env bash
# The public headers on their own (every .h under include/, where the
# installed ones live: baton.h, and baton/sys/ where there is one), as a
# user's compiler sees them:
#   - C:   -std=c99 -pedantic -Werror -Wall -Wextra (and -Wstrict-prototypes:
#          an empty parameter list in C is no prototype);
#   - C++: -std=c++11 -pedantic -Werror -Wall -Wextra, and the functions keep
#          their C names (extern "C"): a C++ object that calls baton_version
#          must want the symbol baton_version, not a mangled one.
# Each header is included twice (its guard) and first (it includes what it uses).
#
#   header.sh INCLUDE_DIR CC [CXX]     (no CXX: the C++ half is skipped, exit 77
#                                       at the end unless BATON_REQUIRE_ALL=1)
set -u
inc=$1 cc=$2 cxx=${3:-}
tmp=$(mktemp -d "${BATON_TEST_TMP:-/tmp}/header.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
hdrs=$(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort)
[ -n "$hdrs" ] || { echo "FAIL: no header under $inc"; exit 1; }
for h in $hdrs; do
  # The loop adapters (baton/adapters/) need their loop's header: skipped
  # without it; under strict C99 uv.h wants POSIX (pthread_rwlock_t).
  defs=()
  case $h in
    baton/adapters/libuv.h) dep=uv.h; defs=(-D_POSIX_C_SOURCE=200809L) ;;
    baton/adapters/libevent.h) dep=event2/event.h ;;
    *) dep= ;;
  esac
  if [ -n "$dep" ] && ! printf '#include <%s>\n' "$dep" | "$cc" -E -x c - >/dev/null 2>&1; then
    echo "skip: $h ($dep is not installed: scripts/install-deps.sh)"
    continue
  fi
  printf '#include <%s>\n#include <%s>\nint main(void) { return baton_version() == 0; }\n' "$h" "$h" > "$tmp/t.c"
  if "$cc" -std=c99 -pedantic -Werror -Wall -Wextra -Wstrict-prototypes "${defs[@]}" -I"$inc" -c "$tmp/t.c" -o "$tmp/c.o"; then
    echo "ok: $h as C99"
  else
    echo "FAIL: $h does not compile as C99 (-pedantic -Werror -Wall -Wextra)"; fail=1
  fi
  [ -n "$cxx" ] || continue
  cp "$tmp/t.c" "$tmp/t.cpp"
  if "$cxx" -std=c++11 -pedantic -Werror -Wall -Wextra -I"$inc" -c "$tmp/t.cpp" -o "$tmp/cxx.o"; then
    echo "ok: $h as C++11"
    # the undefined symbols the C++ object wants: baton_version, unmangled
    if nm -u "$tmp/cxx.o" | grep -qw baton_version && ! nm -u "$tmp/cxx.o" | grep -q '_Z.*baton_version'; then
      echo "ok: $h declares C names for C++ (extern \"C\")"
    else
      echo "FAIL: $h: a C++ caller wants a mangled baton_version (extern \"C\" missing):"; nm -u "$tmp/cxx.o"; fail=1
    fi
  else
    echo "FAIL: $h does not compile as C++11 (-pedantic -Werror -Wall -Wextra)"; fail=1
  fi
done
[ $fail = 0 ] || exit 1
if [ -z "$cxx" ]; then
  echo "no C++ compiler: the C++ half was skipped"
  [ "${BATON_REQUIRE_ALL:-0}" = 1 ] && exit 1
  exit 77
fi
exit 0
