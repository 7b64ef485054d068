#!/usr/bin/python3
"""Interop: kazoo (python3-kazoo 2.8) and baton on the same ZooKeeper lock
and election.

    interop_kazoo.py PATH/TO/baton PATH/TO/test_election

(Not named kazoo.py: the script's directory comes first on sys.path, and a
kazoo.py there would shadow the kazoo package.)

Reads the port of the test server from $BATON_TEST_SRV/zk/port (the "zk"
ctest fixture). Prints "N passed, N failed"; exits 1 on failure, 77 when the
server or kazoo is missing (unless BATON_REQUIRE_ALL=1).

Path mapping: baton's root is /baton, and the lock (or election) NAME keeps its
contenders as children of /baton/NAME: baton writes Curator's
"_c_<uuid>-lock-<seq>" (elections: LeaderLatch's "_c_<uuid>-latch-<seq>") and
honours kazoo's "<hex>__lock__<seq>". kazoo's Lock sees baton's nodes when
given extra_lock_patterns=("-lock-",) (kazoo >= 2.7.1); its Election is a
Lock without extra patterns, so Election.contenders() sees baton's candidates
only once its lock is given "-latch-" as an extra pattern (done here).

Cases:
  - kazoo holds; `baton run` queues behind it, then a second kazoo client
    queues behind baton: mutual exclusion and FIFO order (kazoo-1, baton,
    kazoo-2); baton's BATON_FENCE is its lock node's czxid; `baton status`
    names the foreign holder by kazoo's identifier; `baton run -n` is busy;
  - baton holds; kazoo's non-blocking acquire fails; kazoo queues, then a
    second `baton run` queues behind kazoo: order baton, kazoo, baton;
  - two baton candidates (test_election --candidate, tests/election): kazoo's
    Election.contenders() lists their values, the leader first; after the
    leader resigns, only the second;
  - a `baton elect --value V` leader: kazoo's stock Election.contenders()
    does not list it (kazoo matches only "__lock__"); with "-latch-" as an
    extra pattern it lists V; such a kazoo Election waits behind baton's
    leader and leads after it resigns, while a stock one leads beside it
    (the documented non-interop: docs/zk-engine.md);
  - a stock kazoo Election.run() leader: `baton elect --leader` prints
    "<czxid of kazoo's node> <kazoo's identifier>", `baton elect -n` is
    busy, `baton elect` waits behind it and then leads with a higher term.
"""
import logging
import os
import re
import shutil
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
        log("FAIL - " + desc + (": " + str(extra) if extra != "" else ""))
    return cond


def skip_or_fail(why):
    if os.environ.get("BATON_REQUIRE_ALL") == "1":
        log("FAIL: %s (BATON_REQUIRE_ALL=1)" % why)
        print("0 passed, 1 failed")
        sys.exit(1)
    log("SKIP: " + why)
    print("0 passed, 0 failed")
    sys.exit(77)


try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import LockTimeout, NoNodeError
except ImportError:
    skip_or_fail("kazoo (python3-kazoo) is missing")

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

if len(sys.argv) != 3:
    log("usage: interop_kazoo.py BATON TEST_ZK_ELECTION")
    sys.exit(2)
BATON = sys.argv[1]
CANDIDATE = sys.argv[2]
srv = os.environ.get("BATON_TEST_SRV", "/nonexistent")
try:
    with open(os.path.join(srv, "zk", "port")) as f:
        PORT = int(f.read().strip())
except (OSError, ValueError):
    skip_or_fail("no test zk server")

HOSTS = "127.0.0.1:%d" % PORT
URI = "zk://%s?session_timeout_ms=4000" % HOSTS
ROOT = "/baton"
TMP = os.path.join(os.environ.get("BATON_TEST_TMP", "."), "interop_kazoo.%d" % os.getpid())
os.makedirs(TMP, exist_ok=True)
PREFIX = "interop-kazoo-%d-" % os.getpid()
# kazoo's lock regex: (?:__lock__|-lock-)(-?\d{10})$ ; Curator's lock node
CURATOR_LOCK_RE = re.compile(r"^_c_[0-9a-fA-F-]+-lock-\d{10}$")
# A wait that is only there to bound a hang (2-core machines, a JVM server).
LONG = 30.0


def kazoo_client():
    zk = KazooClient(hosts=HOSTS, timeout=10.0)
    zk.start(timeout=15)
    return zk


def klock(zk, path, ident):
    return zk.Lock(path, ident, extra_lock_patterns=("-lock-",))


def acquire_bounded(lock):
    """kazoo's acquire with a timeout that only bounds a hang: True, or False
    (kazoo raises LockTimeout when the time runs out)."""
    try:
        return lock.acquire(timeout=LONG)
    except LockTimeout:
        log("   kazoo acquire timed out after %ss" % LONG)
        return False


def baton_popen(name, shell_cmd, *opts):
    argv = [BATON, "run", "-u", URI] + list(opts) + [name, "-c", shell_cmd]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def baton_out(*args):
    p = subprocess.run([BATON] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=LONG)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def wait_for(pred, timeout=LONG, step=0.02):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def children(zk, path):
    try:
        return sorted(zk.get_children(path))
    except NoNodeError:
        return []


def read_log(path):
    try:
        with open(path) as f:
            return [l.rstrip("\n") for l in f if l.strip()]
    except OSError:
        return []


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


def reap(p, what):
    try:
        out, err = p.communicate(timeout=LONG)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        check(what + " finished", False, "killed after %ss" % LONG)
        return None
    if p.returncode != 0:
        log("   %s: rc %s stderr %s" % (what, p.returncode, err.decode(errors="replace").strip()))
    return p.returncode


# ---- kazoo first: kazoo-1, baton, kazoo-2 ---------------------------------------
def test_kazoo_first(zk1, zk2):
    log("-- kazoo holds; baton and another kazoo client queue")
    name = PREFIX + "kazoo-first"
    path = ROOT + "/" + name
    order = os.path.join(TMP, "order-a")
    l1 = klock(zk1, path, "kazoo-1")
    check("kazoo-1 acquires", acquire_bounded(l1))
    append(order, "kazoo-1 start")

    rc, out, err = baton_out("status", "-u", URI, name)
    check("baton status: held", rc == 0 and re.search(r"held:\s*yes", out) is not None, out + err)
    check("baton status names kazoo's identifier", "kazoo-1" in out, out)
    rc, out, err = baton_out("run", "-u", URI, "-n", name, "--", "true")
    check("baton run -n while kazoo holds: busy (exit 1)", rc == 1, "rc %d %s" % (rc, err))
    check("no baton node left by -n", len(children(zk1, path)) == 1, children(zk1, path))

    b = baton_popen(name, 'echo "baton start $BATON_FENCE" >> "%s"; sleep 0.5; echo "baton end" >> "%s"'
                    % (order, order))
    kids = wait_for(lambda: len(children(zk1, path)) >= 2 and children(zk1, path))
    check("baton queued a node under %s" % path, len(kids or []) == 2, kids)
    bnodes = [k for k in (kids or []) if "__lock__" not in k]
    bnode = bnodes[0] if bnodes else None
    check("baton's node is Curator-style (_c_<uuid>-lock-<seq>)", bnode is not None and CURATOR_LOCK_RE.match(bnode),
          kids)
    czxid = None
    if bnode:
        st = zk1.exists(path + "/" + bnode)
        czxid = st.czxid if st else None
    check("kazoo sees baton as a contender", len(l1.contenders()) == 2, l1.contenders())

    got2 = []

    def k2():
        l2 = klock(zk2, path, "kazoo-2")
        if acquire_bounded(l2):
            append(order, "kazoo-2 start")
            time.sleep(0.2)
            append(order, "kazoo-2 end")
            l2.release()
            got2.append(True)

    t = threading.Thread(target=k2)
    t.start()
    kids = wait_for(lambda: len(children(zk1, path)) >= 3 and children(zk1, path))
    check("kazoo-2 queued behind baton", len(kids or []) == 3, kids)
    time.sleep(0.5)
    check("nobody ran while kazoo-1 holds", read_log(order) == ["kazoo-1 start"], read_log(order))

    append(order, "kazoo-1 end")
    l1.release()
    rc = reap(b, "baton run")
    check("baton run exits 0", rc == 0)
    t.join(LONG)
    check("kazoo-2 got the lock", got2 == [True])
    lines = read_log(order)
    want = ["kazoo-1 start", "kazoo-1 end", "baton start", "baton end", "kazoo-2 start", "kazoo-2 end"]
    got = [re.sub(r"^baton start.*", "baton start", l) for l in lines]
    check("mutual exclusion and FIFO order: kazoo-1, baton, kazoo-2", got == want, lines)
    fence = None
    for l in lines:
        m = re.match(r"baton start (\d+)$", l)
        if m:
            fence = int(m.group(1))
    check("BATON_FENCE is set", fence is not None and fence > 0, lines)
    check("BATON_FENCE is the lock node's czxid", fence is not None and czxid is not None and fence == czxid,
          "fence %s czxid %s" % (fence, czxid))
    check("nothing left under %s" % path, wait_for(lambda: children(zk1, path) == [], 10.0),
          children(zk1, path))


# ---- fences around a kazoo holder: baton, kazoo, baton ----------------------------
def status_fence(name):
    rc, out, err = baton_out("status", "-u", URI, name)
    m = re.search(r"^fence:\s*(\d+)", out, re.M)
    return int(m.group(1)) if rc == 0 and m else None


def test_fences_around_kazoo(zk1):
    log("-- fences: baton, then a kazoo holder, then baton again")
    name = PREFIX + "fences"
    path = ROOT + "/" + name
    rc, out, err = baton_out("run", "-u", URI, name, "--", "sh", "-c", 'echo "$BATON_FENCE"')
    f1 = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    check("baton-1 ran with a fence", f1 is not None and f1 > 0, "rc %d %s %s" % (rc, out, err))
    check("status after baton-1: its fence is the last granted", status_fence(name) == f1, status_fence(name))
    l = klock(zk1, path, "kazoo")
    kz = None
    if check("kazoo acquires", acquire_bounded(l)):
        kids = [k for k in children(zk1, path) if "__lock__" in k]
        st = zk1.exists(path + "/" + kids[0]) if kids else None
        kz = st.czxid if st else None
        check("status while kazoo holds: its node's czxid", kz is not None and status_fence(name) == kz,
              "czxid %s status %s" % (kz, status_fence(name)))
        l.release()
    rc, out, err = baton_out("run", "-u", URI, name, "--", "sh", "-c", 'echo "$BATON_FENCE"')
    f2 = int(out.strip()) if rc == 0 and out.strip().isdigit() else None
    check("baton-2's fence exceeds baton-1's and kazoo's", f1 is not None and kz is not None and f2 is not None
          and f2 > kz > f1, "fences %s, kazoo %s, %s" % (f1, kz, f2))
    check("status after baton-2: its fence is the last granted", status_fence(name) == f2, status_fence(name))


# ---- baton first: baton, kazoo, baton -------------------------------------------
def test_baton_first(zk1):
    log("-- baton holds; kazoo and another baton queue")
    name = PREFIX + "baton-first"
    path = ROOT + "/" + name
    order = os.path.join(TMP, "order-b")
    go = os.path.join(TMP, "go-b")
    b1 = baton_popen(name, 'echo "baton-1 start" >> "%s"; while [ ! -e "%s" ]; do sleep 0.05; done; '
                     'echo "baton-1 end" >> "%s"' % (order, go, order))
    check("baton-1 runs", wait_for(lambda: "baton-1 start" in read_log(order)))

    probe = klock(zk1, path, "kazoo-probe")
    check("kazoo's non-blocking acquire fails while baton holds", probe.acquire(blocking=False) is False)
    check("the probe left no node", wait_for(lambda: len(children(zk1, path)) == 1, 10.0), children(zk1, path))

    gotk = []

    def k():
        l = klock(zk1, path, "kazoo")
        if acquire_bounded(l):
            append(order, "kazoo start")
            time.sleep(0.3)
            append(order, "kazoo end")
            l.release()
            gotk.append(True)

    t = threading.Thread(target=k)
    t.start()
    check("kazoo queued", wait_for(lambda: len(children(zk1, path)) >= 2), children(zk1, path))
    b2 = baton_popen(name, 'echo "baton-2 start" >> "%s"; echo "baton-2 end" >> "%s"' % (order, order))
    check("baton-2 queued behind kazoo", wait_for(lambda: len(children(zk1, path)) >= 3), children(zk1, path))
    time.sleep(0.5)
    check("only baton-1 ran so far", read_log(order) == ["baton-1 start"], read_log(order))

    open(go, "w").close()
    check("baton-1 exits 0", reap(b1, "baton-1") == 0)
    t.join(LONG)
    check("kazoo got the lock", gotk == [True])
    check("baton-2 exits 0", reap(b2, "baton-2") == 0)
    want = ["baton-1 start", "baton-1 end", "kazoo start", "kazoo end", "baton-2 start", "baton-2 end"]
    check("mutual exclusion and FIFO order: baton, kazoo, baton", read_log(order) == want, read_log(order))


# ---- election: baton candidates seen by kazoo -------------------------------------
class Candidate:
    def __init__(self, name, value):
        self.p = subprocess.Popen([CANDIDATE, "--candidate", URI, name, value], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)

    def expect(self, prefix, timeout=LONG):
        # one line, bounded by a timer that kills the candidate on a hang
        timer = threading.Timer(timeout, self.p.kill)
        timer.start()
        try:
            line = self.p.stdout.readline().decode(errors="replace").rstrip("\n")
        finally:
            timer.cancel()
        ok = line.startswith(prefix)
        if not ok:
            log("   candidate said %r (wanted %r)" % (line, prefix))
        return line if ok else None

    def send(self, line):
        self.p.stdin.write((line + "\n").encode())

    def close(self):
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            return self.p.wait(timeout=LONG)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def test_election(zk1):
    log("-- baton candidates seen by kazoo's Election")
    if not os.access(CANDIDATE, os.X_OK):
        check("the election helper %s exists" % CANDIDATE, False)
        return
    name = PREFIX + "election"
    path = ROOT + "/" + name
    c1 = Candidate(name, "cand-1")
    ok = c1.expect("CAMPAIGNING")
    if ok is None:
        # an engine without elections answers at election_open
        check("candidate 1 campaigns", False)
        c1.close()
        return
    check("candidate 1 leads", c1.expect("LEADER ") is not None)
    c2 = Candidate(name, "cand-2")
    check("candidate 2 campaigns", c2.expect("CAMPAIGNING") is not None)
    check("two election nodes under %s" % path, wait_for(lambda: len(children(zk1, path)) >= 2),
          children(zk1, path))
    log("   election nodes: %s" % children(zk1, path))

    el = zk1.Election(path, "kazoo-observer")
    log("   stock Election.contenders(): %s" % el.contenders())
    # kazoo's Election is a Lock matching only "__lock__": teach it LeaderLatch's nodes.
    el.lock = zk1.Lock(path, "kazoo-observer", extra_lock_patterns=("-latch-", "-lock-"))
    cs = el.contenders()
    check("Election.contenders(): the leader first, then the waiting candidate", cs == ["cand-1", "cand-2"], cs)

    c1.send("RESIGN")
    check("candidate 1 resigns", c1.expect("RESIGNED 0") is not None)
    check("candidate 2 leads", c2.expect("LEADER ") is not None)
    check("Election.contenders() after the resignation: the new leader only",
          wait_for(lambda: el.contenders() == ["cand-2"], 10.0), el.contenders())
    check("candidate 1 exits 0", c1.close() == 0)
    check("candidate 2 exits 0", c2.close() == 0)
    check("nothing left under %s" % path, wait_for(lambda: children(zk1, path) == [], 10.0),
          children(zk1, path))


# ---- election: baton elect (the CLI) and kazoo's Election ---------------------------
def baton_elect_popen(name, value, shell_cmd, *opts):
    argv = [BATON, "elect", "-u", URI, "--value", value] + list(opts) + [name, "-c", shell_cmd]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def leader_of(name):
    """`baton elect --leader NAME`: (fence, value), or None when nobody leads."""
    rc, out, err = baton_out("elect", "-u", URI, "--leader", name)
    if rc != 0:
        return None
    fence, _, value = out.rstrip("\n").partition(" ")
    return int(fence), value


class KazooLeader:
    """kazoo's Election.run() on a thread: its function sets `leading`, then
    waits for `release`. latch=True teaches its lock baton's "-latch-" nodes."""

    def __init__(self, zk, path, ident, latch=False):
        self.el = zk.Election(path, ident)
        if latch:
            self.el.lock = zk.Lock(path, ident, extra_lock_patterns=("-latch-",))
        self.leading = threading.Event()
        self.release = threading.Event()
        self.t = threading.Thread(target=self.el.run, args=(self._lead,))
        self.t.start()

    def _lead(self):
        self.leading.set()
        self.release.wait(LONG)

    def stop(self):
        self.release.set()
        self.el.cancel()
        self.t.join(LONG)
        return not self.t.is_alive()


def test_elect_cli_seen_by_kazoo(zk1, zk2):
    log("-- a baton elect leader seen by kazoo's Election")
    name = PREFIX + "elect-cli"
    path = ROOT + "/" + name
    flag = os.path.join(TMP, "elect-cli.leads")
    go = os.path.join(TMP, "elect-cli.go")
    b = baton_elect_popen(name, "baton-V", 'echo "$BATON_FENCE" > "%s"; while [ ! -e "%s" ]; do sleep 0.05; done'
                          % (flag, go))
    check("baton elect leads", wait_for(lambda: read_log(flag)), b.poll())
    term = int(read_log(flag)[0]) if read_log(flag) else None
    kids = children(zk1, path)
    check("one LeaderLatch-style node (_c_<uuid>-latch-<seq>)",
          len(kids) == 1 and re.match(r"^_c_[0-9a-fA-F-]+-latch-\d{10}$", kids[0]) is not None, kids)
    st = zk1.exists(path + "/" + kids[0]) if kids else None
    check("BATON_FENCE is the candidate node's czxid (the term)", st is not None and st.czxid == term,
          "term %s czxid %s" % (term, st.czxid if st else None))
    stock = zk1.Election(path, "kazoo-observer")
    check("stock kazoo Election.contenders() does not see baton's -latch- node (documented)",
          stock.contenders() == [], stock.contenders())
    taught = zk1.Election(path, "kazoo-observer")
    taught.lock = zk1.Lock(path, "kazoo-observer", extra_lock_patterns=("-latch-",))
    check("with extra_lock_patterns=('-latch-',) kazoo sees baton's leader and its value",
          taught.contenders() == ["baton-V"], taught.contenders())

    # a kazoo Election taught "-latch-" waits behind baton's leader ...
    kt = KazooLeader(zk2, path, "kazoo-taught", latch=True)
    check("kazoo's candidate queued", wait_for(lambda: len(children(zk1, path)) == 2, 10.0), children(zk1, path))
    check("the taught kazoo Election does not lead while baton leads", not kt.leading.wait(1.0))
    check("kazoo sees both, baton's leader first", taught.contenders() == ["baton-V", "kazoo-taught"],
          taught.contenders())
    lead = leader_of(name)
    check("baton elect --leader still names baton's leader", lead == (term, "baton-V"), lead)
    # ... and leads once baton's command exits (baton resigns)
    open(go, "w").close()
    check("baton elect exits 0", reap(b, "baton elect") == 0)
    check("the taught kazoo Election leads after baton resigned", kt.leading.wait(LONG))
    lead = leader_of(name)
    check("baton elect --leader names kazoo, with a higher term", lead is not None and lead[1] == "kazoo-taught"
          and term is not None and lead[0] > term, lead)
    check("kazoo's Election ends", kt.stop())

    # a stock kazoo Election does not see baton's candidate: it leads beside it
    os.unlink(go)
    os.unlink(flag)
    b = baton_elect_popen(name, "baton-W", 'echo "$BATON_FENCE" > "%s"; while [ ! -e "%s" ]; do sleep 0.05; done'
                          % (flag, go))
    check("baton elect leads again", wait_for(lambda: read_log(flag)), b.poll())
    ks = KazooLeader(zk2, path, "kazoo-stock")
    check("a stock kazoo Election leads beside baton's leader (not interoperable: documented)",
          ks.leading.wait(LONG))
    lead = leader_of(name)
    check("baton elect --leader still names baton's leader (its node is older)",
          lead is not None and lead[1] == "baton-W", lead)
    check("the stock kazoo Election ends", ks.stop())
    open(go, "w").close()
    check("baton elect exits 0", reap(b, "baton elect") == 0)
    check("nothing left under %s" % path, wait_for(lambda: children(zk1, path) == [], 10.0), children(zk1, path))


def test_kazoo_election_seen_by_baton(zk1, zk2):
    log("-- a kazoo Election.run() leader seen by baton elect")
    name = PREFIX + "elect-kazoo"
    path = ROOT + "/" + name
    flag = os.path.join(TMP, "elect-kazoo.leads")
    k = KazooLeader(zk2, path, "kazoo-leader")
    check("stock kazoo Election.run() leads", k.leading.wait(LONG))
    kids = children(zk1, path)
    st = zk1.exists(path + "/" + kids[0]) if len(kids) == 1 else None
    check("one kazoo node (<hex>__lock__<seq>)", st is not None and "__lock__" in kids[0], kids)
    lead = leader_of(name)
    check("baton elect --leader prints kazoo's czxid and identifier",
          st is not None and lead == (st.czxid, "kazoo-leader"), "leader %s czxid %s" % (lead, st and st.czxid))
    rc, out, err = baton_out("elect", "-u", URI, "-n", name, "--", "true")
    check("baton elect -n while kazoo leads: busy (exit 1)", rc == 1, "rc %d %s" % (rc, err))
    check("no baton node left by -n", wait_for(lambda: len(children(zk1, path)) == 1, 10.0), children(zk1, path))
    b = baton_elect_popen(name, "baton-after", 'echo "$BATON_FENCE" > "%s"' % flag)
    check("baton elect queued behind kazoo", wait_for(lambda: len(children(zk1, path)) == 2, 10.0),
          children(zk1, path))
    time.sleep(0.5)
    check("baton's command has not run while kazoo leads", read_log(flag) == [] and b.poll() is None)
    check("kazoo's Election ends (its leader function returns)", k.stop())
    check("baton elect then leads and exits 0", reap(b, "baton elect") == 0)
    term = read_log(flag)
    check("baton's term is higher than kazoo's", st is not None and len(term) == 1 and int(term[0]) > st.czxid,
          "term %s kazoo czxid %s" % (term, st and st.czxid))
    check("nothing left under %s" % path, wait_for(lambda: children(zk1, path) == [], 10.0), children(zk1, path))


def main():
    try:
        zk1 = kazoo_client()
        zk2 = kazoo_client()
    except Exception as e:  # noqa: BLE001 - any failure to connect is a failure here
        check("kazoo connects to %s" % HOSTS, False, e)
        print("%d passed, %d failed" % (PASS, FAIL))
        return 1
    # baton must reach the server at all; otherwise one clear failure, not a cascade.
    rc, out, err = baton_out("status", "-u", URI, PREFIX + "probe")
    if not check("baton status -u %s works" % URI, rc == 0, "rc %d: %s" % (rc, err.strip())):
        zk2.stop()
        zk1.stop()
        print("%d passed, %d failed" % (PASS, FAIL))
        return 1
    try:
        test_kazoo_first(zk1, zk2)
        test_baton_first(zk1)
        test_fences_around_kazoo(zk1)
        test_election(zk1)
        test_elect_cli_seen_by_kazoo(zk1, zk2)
        test_kazoo_election_seen_by_baton(zk1, zk2)
    finally:
        zk2.stop()
        zk1.stop()
        zk2.close()
        zk1.close()
    print("%d passed, %d failed" % (PASS, FAIL))
    if not FAIL:
        shutil.rmtree(TMP, ignore_errors=True)   # kept for a look after a failure
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
