#!/usr/bin/python3
"""`baton bench`: every workload runs, briefly, and prints the fields that
bench/run.py and docs/PERFORMANCE.md read, in the same order, under the same
names. Values are not checked (benchmarks are measured, never asserted), only
their shape: engines that count what they serve (Redis, RedLock: the backend's
engine_ops) give numbers for the herd's commands per handoff, the others null.

    bench.py BATON file      the embedded file backend (a temp dir)
    bench.py BATON redis     the test Redis ($BATON_TEST_SRV/redis/port)
    bench.py BATON redlock   a one-node RedLock on that server

Exits 1 on a failure, 77 when the Redis server is missing (unless
BATON_REQUIRE_ALL=1).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BATON, MODE = sys.argv[1], sys.argv[2]

FIELDS = {
    "uncontended": ["peer", "workload", "n", "pairs_per_s", "acquire_p50_us", "acquire_p99_us", "cpu_us_per_pair",
                    "cpu_user_us_per_pair", "cpu_sys_us_per_pair"],
    "contended": ["peer", "workload", "clients", "seconds", "handoffs_per_s", "counter_ok", "wait_p50_ms",
                  "wait_p99_ms", "min_per_client", "max_per_client", "fair"],
    "handoff": ["peer", "workload", "rounds", "samples", "handoff_p50_us", "handoff_p99_us", "fair"],
    "herd": ["peer", "workload", "waiters", "fair", "shared_client", "rounds", "chains", "samples", "commands_per_handoff",
             "requests_per_handoff", "pings", "commands", "handoff_p50_us", "handoff_p99_us", "loop_samples",
             "commands_per_grant_loop", "requests_per_grant_loop", "commands_loop", "loop_handoff_p50_us",
             "loop_handoff_p99_us"],
    "many": ["peer", "workload", "locks", "seconds", "pairs_per_s", "cpu_us_per_pair"],
    "memory": ["peer", "workload", "locks", "fair", "held_bytes_per_lock", "waiting_locks", "waiting_bytes_per_lock",
               "thread_heap_bytes", "thread_stack_bytes", "waiting_rss_bytes_per_lock", "thread_cache"],
    "memory-async": ["peer", "workload", "locks", "fair", "held_bytes_per_lock", "held_rss_bytes_per_lock", "rss_bytes",
                     "lease_ms", "hold_seconds", "commands_per_second", "requests_per_second", "top_per_second",
                     "commands_per_lock_renewal", "requests_per_lock_renewal", "top_per_lock_renewal",
                     "client_cpu_per_second", "waiting_locks", "waiting_bytes_per_lock", "waiting_op_bytes",
                     "waiting_rss_bytes_per_lock", "threads_before", "threads_waiting"],
    "ratelimit": ["peer", "workload", "clients", "rate_per_s", "burst", "seconds", "admitted", "paced", "configured",
                  "error_pct", "commands_per_admission", "requests_per_admission", "commands"],
}
SMALL = {
    "uncontended": ["--n", "30"],
    "contended": ["--clients", "3", "--seconds", "0.3"],
    "handoff": ["--rounds", "6"],
    "herd": ["--waiters", "3", "--rounds", "6"],
    "many": ["--clients", "3", "--seconds", "0.3"],
    "memory": ["--n", "10"],
    "memory-async": ["--n", "10", "--waiters", "5", "--seconds", "0.5"],
    "ratelimit": ["--clients", "3", "--seconds", "0.5"],
}
COUNTS = ["commands_per_handoff", "requests_per_handoff", "pings", "commands", "commands_per_grant_loop",
          "requests_per_grant_loop", "commands_loop"]

passed = failed = 0


def check(desc, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   - " + desc, file=sys.stderr)
    else:
        failed += 1
        print("FAIL - " + desc + (": " + detail if detail else ""), file=sys.stderr)


def bench(*args, timeout=120):
    p = subprocess.run([BATON, "bench", "-u", URI] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


tmp = tempfile.mkdtemp(prefix="bench_%s." % MODE, dir=os.environ.get("BATON_TEST_TMP"))
if MODE == "file":
    URI, FAIR, COUNTING = "file://" + os.path.join(tmp, "locks"), [], False
else:
    try:
        port = open(os.path.join(os.environ.get("BATON_TEST_SRV", "/nonexistent"), "redis", "port")).read().strip()
    except OSError:
        if os.environ.get("BATON_REQUIRE_ALL") == "1":
            print("FAIL: no test Redis server (BATON_REQUIRE_ALL=1)", file=sys.stderr)
            sys.exit(1)
        print("skip: no test Redis server", file=sys.stderr)
        sys.exit(77)
    if MODE == "redis":
        URI, FAIR = "redis://127.0.0.1:%s/0?prefix=bench-test-" % port, [[], ["--fair"]]
    else:
        URI, FAIR = "redlock://127.0.0.1:%s/0?prefix=bench-test-rl-" % port, [[]]
    COUNTING = True
FAIR = FAIR or [[]]

try:
    for fair in FAIR:
        for w, fields in FIELDS.items():
            what = "%s%s" % (w, " --fair" if fair else "")
            rc, out, err = bench("--workload", w, "--json", *(SMALL[w] + fair))
            if w == "ratelimit" and MODE == "redlock":
                check("%s: no rate limiter on RedLock: exit 64" % what, rc == 64 and "no rate limiter" in err,
                      "exit %d: %s" % (rc, err.strip()))
                continue
            lines = out.splitlines()
            check("%s: exit 0" % what, rc == 0, "exit %d: %s" % (rc, err.strip()))
            check("%s: one line on stdout" % what, len(lines) == 1, repr(out))
            try:
                d = json.loads(lines[0]) if lines else {}
            except ValueError as e:
                d = {}
                check("%s: JSON" % what, False, "%s: %r" % (e, lines[0]))
            check("%s: the fields, in order" % what, list(d) == fields, "got %s" % list(d))
            check("%s: peer and workload" % what, d.get("peer") == "baton" and d.get("workload") == w, repr(d))
            if w == "ratelimit":
                # never more than the rate allows (the burst passes at once)
                check("%s: admitted <= rate * seconds + burst + 1" % what,
                      d.get("admitted", 1e9) <= d.get("rate_per_s", 0) * d.get("seconds", 0) + d.get("burst", 0) + 1,
                      repr(d))
                if COUNTING:
                    # The count is the server's, and the fixture server is shared with
                    # the tests running beside this one (14.6 "per admission" seen in a
                    # CI run): the bound (about 1, waiters reserve their slots) is the
                    # benchmark's to show (make bench, docs/PERFORMANCE.md); here the
                    # count must only be there.
                    check("%s: engine requests per admission counted" % what,
                          d.get("requests_per_admission") is not None and d["requests_per_admission"] > 0,
                          repr(d))
                    print("   %s: %.2f engine requests per admission (a shared server: an upper bound)"
                          % (what, d["requests_per_admission"] or 0), file=sys.stderr)
            if w == "contended":
                check("%s: the counter is exact" % what, d.get("counter_ok") is True, repr(d))
            if w == "herd":
                if COUNTING:
                    check("%s: the engine's counts per handoff" % what,
                          all(d.get(k) is not None for k in COUNTS) and d["commands_per_handoff"] > 0
                          and d["commands"], repr(d))
                else:
                    check("%s: no counts where the engine keeps none" % what,
                          all(k in d and d[k] is None for k in COUNTS), repr(d))

    # many --async: N locks cycling acquire_async / release_async on one loop thread.
    # 40 locks: more operations at once than the core's 32 pool workers, so
    # RedLock's first round opens connections to its node from many threads
    # at once (its one-connect-at-a-time rule failed them "still in flight")
    rc, out, err = bench("--workload", "many", "--async", "--locks", "40", "--seconds", "0.3", "--json")
    try:
        d = json.loads(out.splitlines()[0]) if out.strip() else {}
    except ValueError:
        d = {}
    check("many --async: exit 0, the fields, in order", rc == 0 and list(d) == [
        "peer", "workload", "locks", "seconds", "pairs_per_s", "scripts_per_s", "cpu_us_per_pair", "sockets"],
        "exit %d: %r %s" % (rc, out, err.strip()))
    check("many --async: pairs measured on 40 locks", d.get("locks") == 40 and (d.get("pairs_per_s") or 0) > 0,
          repr(d))

    # without --json: a table, the same fields
    rc, out, err = bench("--workload", "handoff", *SMALL["handoff"])
    rows = [l.split()[0] for l in out.splitlines()[1:]]
    check("table: exit 0", rc == 0, err.strip())
    check("table: the workload, then one row per field", out.splitlines()[:1] == ["handoff"]
          and rows == FIELDS["handoff"], repr(out))

    # herd --shared-client: the waiters are threads of one client
    rc, out, err = bench("--workload", "herd", "--json", "--shared-client", *SMALL["herd"])
    try:
        d = json.loads(out.splitlines()[0]) if out.splitlines() else {}
    except ValueError:
        d = {}
    check("herd --shared-client: exit 0", rc == 0, "exit %d: %s" % (rc, err.strip()))
    check("herd --shared-client: shared_client true, every handoff made",
          d.get("shared_client") is True and d.get("samples", 0) > 0, repr(d))
    if COUNTING:
        check("herd --shared-client: the engine's counts per handoff",
              d.get("commands_per_handoff") is not None and d["commands_per_handoff"] > 0, repr(d))

    # --svg: the latency CDF
    svg = os.path.join(tmp, "u.svg")
    rc, out, err = bench("--workload", "uncontended", "--json", "--svg", svg, *SMALL["uncontended"])
    body = open(svg).read() if os.path.exists(svg) else ""
    check("--svg: written", rc == 0 and body.startswith("<?xml") and body.rstrip().endswith("</svg>"), err.strip())

    rc, out, err = bench("--workload", "nonesuch")
    check("an unknown workload: exit 64", rc == 64, "exit %d" % rc)
    rc, out, err = bench("--workload", "many", "--svg", svg)
    check("--svg for many: exit 64", rc == 64, "exit %d" % rc)
    if MODE == "file":
        # the file engine has fair locks since issue 25 (it was the engine
        # without them here): the workload runs on them
        rc, out, err = bench("--workload", "many", "--fair", *SMALL["many"])
        check("many --fair on the file engine's fair locks: exit 0, pairs measured",
              rc == 0 and "pairs_per_s" in out, "exit %d: %r %s" % (rc, out, err.strip()))
finally:
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
