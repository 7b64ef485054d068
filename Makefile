# Common entry points. The build lives in build/ (and build-asan/ for the sanitizer run).
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# Tests mostly wait (on leases, sessions, servers): five per two cores keeps a
# 2-core machine busy without starving them (the suite's CPU time is a
# fraction of its wall time: 365 tests, 51 min of test time, 14 min at -j4).
# Tests a loaded machine slows past their bounds (Sentinel elections) are
# RUN_SERIAL.
CTEST_JOBS ?= $(shell echo $$(( $(JOBS) * 5 / 2 )))
CMAKE_FLAGS ?=
ifeq ($(CI),true)
export BATON_REQUIRE_ALL := 1
endif

.PHONY: all build demo bare deps test test-plain test-asan test-fuzz fuzz asan clean install bench bench-docs check-faults

all: build

build:
	cmake -S . -B build $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS)

# The library and the CLI only (no test program), with whatever optional backends
# this machine has: needs nothing but a C compiler, make and cmake (installed
# first when missing, or named, by install-deps.sh --demo).
demo:
	@command -v cc >/dev/null && command -v cmake >/dev/null || bash scripts/install-deps.sh --demo
	cmake -S . -B build $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS) --target baton
	@bash scripts/demo.sh build/baton

# What CI proves first: every optional backend switched off, no tests, the demo runs.
# Built as Release (-O3, as make bench builds): the optimizer's warnings
# (maybe-uninitialized) differ from the test build's -O2, and -Werror is on.
bare:
	bash scripts/install-deps.sh --demo
	cmake -S . -B build-bare -DCMAKE_BUILD_TYPE=Release -DBATON_WITH_REDIS=OFF -DBATON_WITH_ZK=OFF -DBATON_WITH_POSTGRES=OFF -DBATON_WITH_MYSQL=OFF -DBATON_WITH_SQLITE=OFF -DBATON_WITH_ETCD=OFF -DBUILD_TESTING=OFF >/dev/null
	cmake --build build-bare -j$(JOBS)
	bash scripts/demo.sh build-bare/baton

deps:
	bash scripts/install-deps.sh

asan:
	cmake -S . -B build-asan -DBATON_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS) >/dev/null
	cmake --build build-asan -j$(JOBS)

test-plain:
	cmake -S . -B build -DBUILD_TESTING=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS)
	cd build && ctest --output-on-failure -j$(CTEST_JOBS)

test-asan: asan
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j$(CTEST_JOBS) -E '^redis_sentinel_faults$$'

# (redis_sentinel_faults, 2+ minutes alone, is left to the plain run: its
# Sentinel code runs under the sanitizers in conformance_redis_sentinel and
# redis_sentinel_tls.)
# The parsers fuzzed with libFuzzer (scripts/fuzz.sh: a clang build in
# build-fuzz/, tests/fuzz's targets from their corpora): FUZZ_SECS per target,
# a few seconds in `make test`, minutes in `make fuzz`. Without clang and
# libFuzzer a skip (exit 77), a failure when BATON_REQUIRE_ALL=1 (CI).
FUZZ_TEST_SECS ?= 15
FUZZ_SECS ?= 300
test-fuzz:
	FUZZ_SECS=$(FUZZ_TEST_SECS) bash scripts/fuzz.sh

fuzz:
	FUZZ_SECS=$(FUZZ_SECS) bash scripts/fuzz.sh

# install-deps, build every backend, run the suite, then again under ASan+UBSan,
# then a short fuzzing run. Every phase runs even when one fails; each reports at the end.
test: deps
	@plain=0; asan=0; fuzz=0; \
	$(MAKE) test-plain || plain=$$?; \
	$(MAKE) test-asan || asan=$$?; \
	FUZZ_SECS=$(FUZZ_TEST_SECS) bash scripts/fuzz.sh || fuzz=$$?; \
	echo; echo "make test:"; \
	if [ $$plain = 0 ]; then echo "  plain build           passed"; else echo "  plain build           FAILED"; fi; \
	if [ $$asan = 0 ]; then echo "  ASan + UBSan build    passed"; else echo "  ASan + UBSan build    FAILED"; fi; \
	if [ $$fuzz = 0 ]; then echo "  fuzzing (libFuzzer)   passed"; elif [ $$fuzz = 77 ]; then echo "  fuzzing (libFuzzer)   skipped (no clang/libFuzzer: see above)"; else echo "  fuzzing (libFuzzer)   FAILED"; fi; \
	[ $$plain = 0 ] && [ $$asan = 0 ] && { [ $$fuzz = 0 ] || [ $$fuzz = 77 ]; }

# Baton's workloads and the peers', side by side in one run; see docs/PERFORMANCE.md.
# The peers (etcd, node) are installed best effort; baton is a Release build of its own in
# build/bench, whatever build type build/ was configured with.
# Results go to build/bench-results/<time>/ (untracked); bench-docs also publishes the run
# into docs/PERFORMANCE.md, docs/bench/*.svg and bench/results/.
# BENCH_ARGS="--only redis|redlock|zk|postgres|mysql|etcd" runs one section; "--redlock-nodes 5" for 5 RedLock nodes.
bench:
	bash scripts/install-deps.sh --bench
	cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build build/bench -j$(JOBS) --target baton
	/usr/bin/python3 bench/run.py $(BENCH_ARGS) build/bench/baton

bench-docs:
	bash scripts/install-deps.sh --bench
	cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build build/bench -j$(JOBS) --target baton
	/usr/bin/python3 bench/run.py --docs $(BENCH_ARGS) build/bench/baton

# `baton check` on every engine this build has, on servers started by tests/servers/*.sh, with
# client faults everywhere and server faults where a script can cause them; >= 10,000 grants per
# row (CHECK_GRANTS=N to change, CHECK_ONLY=REGEX for some rows). Writes docs/RELIABILITY.md;
# each row's report and timeline stay in build/check-faults/. Takes many minutes: not in make test.
check-faults:
	cmake -S . -B build $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS) --target baton
	bash scripts/check-faults.sh build/baton

# make install [PREFIX=/usr/local] [DESTDIR=/staging]
PREFIX ?= /usr/local
install:
	cmake -S . -B build -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	cmake --build build -j$(JOBS) --target baton baton_shared baton_static
	DESTDIR=$(DESTDIR) cmake --install build

clean:
	rm -rf build build-asan build-bare build-fuzz
