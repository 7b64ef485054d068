#!/usr/bin/env bash
# Fuzzes baton's parsers with libFuzzer (tests/fuzz): configures a clang
# build of its own in build-fuzz/ (-DBATON_FUZZ=ON: the library instrumented,
# ASan + UBSan), builds the targets and runs each for FUZZ_SECS seconds,
# FUZZ_JOBS at a time, starting from its corpus in tests/fuzz/corpus/<target>
# (with the dictionary tests/fuzz/<target>.dict where there is one).
#
#   scripts/fuzz.sh [TARGET...]      every target this build has, or those named
#
#   FUZZ_SECS=N    seconds per target (default 15: `make test`; `make fuzz`: 300)
#   FUZZ_JOBS=N    targets run at once (default: nproc)
#   CC=clang-NN    the clang to use (default: $CC when it is clang, else clang,
#                  else the newest clang-NN on PATH)
#
# New inputs the fuzzer finds stay in build-fuzz/fuzz-corpus/<target>/ (not
# in the tree). A crash, leak, UB report or timeout fails the run: its input
# is in build-fuzz/fuzz-artifacts/<target>/, and the log's last lines are
# shown. To keep it as a regression, copy it to tests/fuzz/corpus/<target>/
# as crash-<what>. Replay one input: build-fuzz/tests/fuzz/fuzz_<target> FILE.
#
# No clang or no libFuzzer (libclang-rt-NN-dev): a skip (exit 77) with the
# reason, or a failure when BATON_REQUIRE_ALL=1 (CI, where install-deps.sh
# installs them).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECS:-15}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
out=build-fuzz

skip() {
  echo "fuzz: SKIPPED: $*"
  if [ "${BATON_REQUIRE_ALL:-0}" = 1 ]; then
    echo "fuzz: BATON_REQUIRE_ALL=1: a skip is a failure (scripts/install-deps.sh installs clang and libclang-rt-dev)" >&2
    exit 1
  fi
  exit 77
}

# the compiler
cc=
if [ -n "${CC:-}" ] && "$CC" --version 2>/dev/null | grep -q clang; then
  cc=$CC
elif command -v clang >/dev/null; then
  cc=clang
else
  cc=$(compgen -c clang- | grep -E '^clang-[0-9]+$' | sort -t- -k2 -n | tail -1)
fi
[ -n "$cc" ] || skip "no clang on PATH (Debian: apt-get install clang libclang-rt-dev)"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' > "$probe/p.c"
"$cc" -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>"$probe/err" ||
  skip "$cc cannot link libFuzzer ($(head -1 "$probe/err")); Debian: apt-get install libclang-rt-dev"

echo "fuzz: $("$cc" --version | head -1), $secs s per target, $jobs at a time"
CC=$cc cmake -S . -B "$out" -DBATON_FUZZ=ON -DBUILD_TESTING=ON -DCMAKE_BUILD_TYPE=Debug >"$out.cmake.log" 2>&1 ||
  { cat "$out.cmake.log"; echo "fuzz: FAILED to configure $out" >&2; exit 1; }
rm -f "$out.cmake.log"
cmake --build "$out" -j"$jobs" --target fuzzers >"$out/fuzz-build.log" 2>&1 ||
  { tail -40 "$out/fuzz-build.log"; echo "fuzz: FAILED to build the targets (log: $out/fuzz-build.log)" >&2; exit 1; }

read -r -a all < "$out/tests/fuzz/targets.txt"
all=(${all[@]//;/ })
targets=("${@:-${all[@]}}")
rm -rf "$out/fuzz-tmp" && mkdir -p "$out/fuzz-tmp"   # the targets' lock dirs and databases

# One target: its log in $out/fuzz-logs/<t>.log, 0 when it found nothing.
run_one() {
  local t=$1 bin=$out/tests/fuzz/fuzz_$1
  [ -x "$bin" ] || { echo "fuzz: no target $t (built: ${all[*]})" >&2; return 1; }
  local dict=
  [ -f "tests/fuzz/$t.dict" ] && dict=-dict=tests/fuzz/$t.dict
  mkdir -p "$out/fuzz-corpus/$t" "$out/fuzz-artifacts/$t" "$out/fuzz-logs"
  # -timeout: one input may take 10 s (the network targets end at the end of
  # the stream, in ms); leaks are checked (ASan's LeakSanitizer)
  TMPDIR=$PWD/$out/fuzz-tmp BATON_TEST_TMP= \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 $dict \
      -artifact_prefix="$out/fuzz-artifacts/$t/" "$out/fuzz-corpus/$t" "tests/fuzz/corpus/$t" \
      >"$out/fuzz-logs/$t.log" 2>&1
}
export -f run_one
export out all secs

start=$(date +%s)
mkdir -p "$out/fuzz-logs"
rm -f "$out/fuzz-logs/results"
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}; echo "{} $?" >> '"$out"'/fuzz-logs/results'
fail=0
for t in "${targets[@]}"; do
  rc=$(awk -v t="$t" '$1 == t { print $2 }' "$out/fuzz-logs/results" 2>/dev/null)
  log=$out/fuzz-logs/$t.log
  runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" 2>/dev/null | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" 2>/dev/null | tail -1)
  if [ "$rc" = 0 ]; then
    printf 'fuzz: %-10s ok      %8s runs, %s\n' "$t" "${runs:-?}" "${cov:-?}"
  else
    fail=1
    printf 'fuzz: %-10s FAILED  (exit %s; input in %s/fuzz-artifacts/%s/, log %s):\n' "$t" "${rc:-?}" "$out" "$t" "$log"
    grep -E 'ERROR|SUMMARY|runtime error|fuzz_[a-z_0-9]+:|Test unit written|#0 |#1 |#2 |#3 ' "$log" | head -20 | sed 's/^/    /'
  fi
done
echo "fuzz: $(( $(date +%s) - start )) s for ${#targets[@]} targets"
exit $fail
