#!/usr/bin/python3
"""Interop: redis-py's Lock and `baton run -u 'redis://...?layout=simple'` on
the same key exclude each other, in both directions.

    redispy.py PATH/TO/baton

Reads the port of the test server from $BATON_TEST_SRV/redis/port. Prints
"N passed, N failed"; exits 1 on failure, 77 when the server or redis-py is
missing (unless BATON_REQUIRE_ALL=1).
"""
import os
import subprocess
import sys
import threading
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


try:
    import redis
except ImportError:
    skip_or_fail("redis-py (python3-redis) is missing")

BATON = sys.argv[1]
srv = os.environ.get("BATON_TEST_SRV", "/nonexistent")
try:
    with open(os.path.join(srv, "redis", "port")) as f:
        PORT = int(f.read().strip())
except (OSError, ValueError):
    skip_or_fail("no test redis server")

URI = "redis://127.0.0.1:%d?layout=simple" % PORT
TMP = os.path.join(os.environ.get("BATON_TEST_TMP", "."), "interop_redispy.%d" % os.getpid())
os.makedirs(TMP, exist_ok=True)
r = redis.Redis(host="127.0.0.1", port=PORT, db=0)
PREFIX = "interop-py-%d-" % os.getpid()


def baton_run(name, cmd, *opts, wait=True):
    argv = [BATON, "run", "-u", URI] + list(opts) + [name, "--"] + cmd
    if wait:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_file(path, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path):
            return True
        time.sleep(0.02)
    return False


def start_baton_holder(name, tag):
    """baton holds NAME until TMP/tag.go exists; TMP/tag.held has the fence."""
    held, go = os.path.join(TMP, tag + ".held"), os.path.join(TMP, tag + ".go")
    script = 'echo "$BATON_FENCE" > "$1.tmp" && mv "$1.tmp" "$1"; while [ ! -e "$2" ]; do sleep 0.02; done'
    p = baton_run(name, ["sh", "-c", script, "sh", held, go], wait=False)
    ok = wait_file(held, 15)
    return p, ok, go


# 1. redis-py holds; baton is excluded; after release baton gets it.
def test_redispy_holds():
    name = PREFIX + "a"
    lk = r.lock(name, timeout=30)
    check("redis-py acquires %s" % name, lk.acquire(blocking=False))
    token = r.get(name)
    rc, out, err = baton_run(name, ["true"], "-n")
    check("baton run -n is busy while redis-py holds (rc 1)", rc == 1, "rc %d: %s" % (rc, err))
    rc, out, err = baton_run(name, ["true"], "-w", "1")
    check("baton run -w 1 times out while redis-py holds (rc 1)", rc == 1, "rc %d: %s" % (rc, err))
    check("baton left redis-py's key alone", r.get(name) == token and r.pttl(name) > 0)
    lk.release()
    rc, out, err = baton_run(name, ["sh", "-c", 'redis-cli -h 127.0.0.1 -p %d GET "$BATON_LOCK"; '
                                    'redis-cli -h 127.0.0.1 -p %d PTTL "$BATON_LOCK"' % (PORT, PORT)], "-n")
    check("baton run -n gets it after redis-py released (rc 0)", rc == 0, "rc %d: %s" % (rc, err))
    lines = out.splitlines()
    check("while baton holds, the key holds baton's owner token",
          len(lines) == 2 and lines[0] != "" and lines[0].encode() != token, repr(out))
    check("while baton holds, the key has a TTL",
          len(lines) == 2 and lines[1].lstrip("-").isdigit() and int(lines[1]) > 0, repr(out))
    check("baton deleted its key on release", r.exists(name) == 0)


# 2. baton holds; redis-py is excluded; after release redis-py gets it.
def test_baton_holds():
    name = PREFIX + "b"
    p, ok, go = start_baton_holder(name, "b")
    check("baton holds %s" % name, ok)
    if not ok:
        p.kill()
        log(p.communicate()[1].decode(errors="replace"))
        return
    lk = r.lock(name, timeout=30, thread_local=False)
    check("redis-py cannot acquire while baton holds", not lk.acquire(blocking=False))
    check("redis-py with a 0.5 s blocking timeout also fails", not lk.acquire(blocking=True, blocking_timeout=0.5))
    check("the key is a plain string with a TTL", r.type(name) == b"string" and r.pttl(name) > 0)
    # redis-py's owner-checked release cannot touch baton's lock
    try:
        fake = r.lock(name, timeout=30)
        fake.local.token = b"not-the-owner"
        fake.release()
        check("redis-py release with a foreign token fails", False)
    except redis.exceptions.LockError:
        check("redis-py release with a foreign token fails", True)
    check("baton's key survived", r.exists(name) == 1)
    # redis-py waits (it polls) while baton releases
    got = {}

    def waiter():
        t0 = time.monotonic()
        got["ok"] = lk.acquire(blocking=True, blocking_timeout=15)
        got["t"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.3)
    check("redis-py is still waiting", th.is_alive())
    open(go, "w").close()
    try:
        rc = p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -1
    check("baton run exits 0", rc == 0, p.stderr.read().decode(errors="replace"))
    th.join(20)
    check("redis-py got the lock after baton released", got.get("ok") is True, repr(got))
    if got.get("ok"):
        lk.release()


# 3. baton waits while redis-py holds (a foreign releaser publishes nothing:
#    baton notices by polling or when the TTL runs out).
def test_baton_waits():
    name = PREFIX + "c"
    lk = r.lock(name, timeout=6)
    check("redis-py acquires %s" % name, lk.acquire(blocking=False))
    fence_file = os.path.join(TMP, "c.fence")
    t0 = time.monotonic()
    p = baton_run(name, ["sh", "-c", 'echo "$BATON_FENCE" > "$1"', "sh", fence_file], "-w", "20", wait=False)
    time.sleep(0.5)
    check("baton is waiting while redis-py holds", p.poll() is None)
    check("redis-py still holds", r.get(name) == lk.local.token)
    t1 = time.monotonic()
    lk.release()
    try:
        rc = p.wait(timeout=25)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -1
    el = time.monotonic() - t1
    check("baton got it after redis-py released (rc 0, %.2f s after release)" % el, rc == 0,
          p.stderr.read().decode(errors="replace"))
    check("baton waited from start %.2f s, below its -w 20" % (time.monotonic() - t0), el < 20)
    check("baton saw a fence", os.path.exists(fence_file) and open(fence_file).read().strip().isdigit())


# 4. An expired redis-py lock (its holder died) does not block baton for long.
def test_expired_foreign():
    name = PREFIX + "d"
    lk = r.lock(name, timeout=1)
    check("redis-py acquires %s with a 1 s timeout" % name, lk.acquire(blocking=False))
    t0 = time.monotonic()
    rc, out, err = baton_run(name, ["true"], "-w", "10")
    el = time.monotonic() - t0
    check("baton gets it once the foreign lease expires (rc 0, %.2f s)" % el, rc == 0 and el < 9, err)
    try:
        lk.release()
        check("redis-py's stale release is refused", False)
    except redis.exceptions.LockError:
        check("redis-py's stale release is refused", True)


for t in (test_redispy_holds, test_baton_holds, test_baton_waits, test_expired_foreign):
    log("-- " + t.__name__)
    try:
        t()
    except Exception as e:  # a crash in one case is a failure, not an abort
        check(t.__name__ + " raised", False, repr(e))

for k in r.scan_iter(PREFIX + "*"):
    r.delete(k)
print("%d passed, %d failed" % (PASS, FAIL))
if FAIL == 0:
    subprocess.run(["rm", "-rf", TMP])
sys.exit(1 if FAIL else 0)
