#!/usr/bin/python3
"""Interop on a Redis Cluster: redis-py's cluster client (redis.cluster.RedisCluster)
and its Lock, and `baton run -u 'redis-cluster://...?layout=simple'` (and the
default layout) on the same name exclude each other, in both directions. The
lock key is the name itself on both sides, and baton's side keys carry the
name as their hash tag (baton_fence:{NAME}), so every key of the lock is in
the slot of NAME (docs/redis-layout.md, "Redis Cluster").

    redispy_cluster.py PATH/TO/baton

Reads the port of a cluster node from $BATON_TEST_SRV/redis-cluster/port.
Prints "N passed, N failed"; exits 1 on failure, 77 when the cluster or
redis-py's cluster client is missing (unless BATON_REQUIRE_ALL=1).
"""
import os
import subprocess
import sys
import time

PASS = 0
FAIL = 0


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def check(desc, cond, extra=""):
    global PASS, FAIL
    if cond:
        PASS += 1
        log("ok   - " + desc)
    else:
        FAIL += 1
        log("FAIL - " + desc + (": " + extra if extra else ""))


def skip_or_fail(why):
    if os.environ.get("BATON_REQUIRE_ALL") == "1":
        log("FAIL: %s (BATON_REQUIRE_ALL=1)" % why)
        print("0 passed, 1 failed")
        sys.exit(1)
    log("SKIP: " + why)
    print("0 passed, 0 failed")
    sys.exit(77)


def main():
    baton = sys.argv[1]
    try:
        from redis.cluster import RedisCluster
    except ImportError:
        skip_or_fail("redis-py with redis.cluster is not installed")
    pf = os.path.join(os.environ.get("BATON_TEST_SRV", "."), "redis-cluster", "port")
    try:
        port = int(open(pf).read().strip())
    except (OSError, ValueError):
        skip_or_fail("no test cluster (%s)" % pf)
    rc = RedisCluster(host="127.0.0.1", port=port)
    name = "interop-rpc-%d" % os.getpid()
    base = "redis-cluster://127.0.0.1:%d" % port

    def baton_try(layout, *cmd):
        uri = base + ("?layout=simple" if layout == "simple" else "")
        return subprocess.run([baton, "run", "-n", "-u", uri, name, "--"] + list(cmd or ["true"]),
                              capture_output=True, text=True, timeout=30)

    for layout in ("simple", "redisson"):
        lk = rc.lock(name, timeout=20)
        check("redis-py acquires %s" % name, lk.acquire(blocking=False))
        r = baton_try(layout)
        check("baton (layout=%s) is refused while redis-py holds it" % layout, r.returncode == 1,
              "exit %d: %s" % (r.returncode, r.stderr.strip()))
        lk.release()
        r = baton_try(layout)
        check("baton (layout=%s) gets it after redis-py's release" % layout, r.returncode == 0,
              "exit %d: %s" % (r.returncode, r.stderr.strip()))
        p = subprocess.Popen([baton, "run", "-u", base + ("?layout=simple" if layout == "simple" else ""),
                              name, "--", "sleep", "3"], stderr=subprocess.PIPE, text=True)
        end = time.time() + 10
        while not rc.exists(name) and time.time() < end:
            time.sleep(0.02)
        lk2 = rc.lock(name, timeout=20)
        got = lk2.acquire(blocking=False)
        check("redis-py is refused while baton (layout=%s) holds it" % layout, not got)
        if got:
            lk2.release()
        p.wait(timeout=30)
        check("baton (layout=%s) ran and released" % layout, p.returncode == 0, p.stderr.read() if p.stderr else "")
        got = lk2.acquire(blocking=False)
        check("redis-py gets it after baton's release (layout=%s)" % layout, got)
        if got:
            lk2.release()
    print("%d passed, %d failed" % (PASS, FAIL))
    sys.exit(1 if FAIL else 0)


if __name__ == "__main__":
    main()
