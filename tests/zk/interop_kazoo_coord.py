#!/usr/bin/python3
"""Interop: kazoo (python3-kazoo 2.8) and baton's values, counters, groups and
queues on one ZooKeeper server.

    interop_kazoo_coord.py PATH/TO/libbaton.so

baton is driven through its C API (ctypes on the shared library), kazoo
through its recipes, at the paths docs/zk-engine.md gives: value NAME is
/baton-values/NAME, group NAME /baton-groups/NAME, queue NAME
/baton-queues/NAME (the value_root, group_root and queue_root options).

Reads the port of the test server from $BATON_TEST_SRV/zk/port (the "zk"
ctest fixture). Prints "N passed, N failed"; exits 1 on failure, 77 when the
server or kazoo is missing (unless BATON_REQUIRE_ALL=1).

Cases:
  - counter: kazoo Counter(path) and baton_counter on the same name count
    together (decimal text): each sees the other's adds; 2 x 40 concurrent
    increments, one side each, lose none; a node kazoo made empty reads 0;
  - semaphore: kazoo Counter(/baton-semaphores/NAME) is baton_semaphore's
    count: kazoo's += wakes a baton acquire, baton's release is kazoo's value,
    30 kazoo increments and 30 baton acquires at once lose none;
  - value: a kazoo set wakes baton_value_watch with kazoo's data and the
    node's mzxid as version; a baton set is what kazoo's get and DataWatch see;
  - group: a kazoo Party member is listed by baton (id = its node's uuid,
    value = its identifier); a baton member is in kazoo's Party list (its
    value) and len(); a kazoo leave wakes baton's group watch;
  - queue: items put by kazoo's LockingQueue are taken by baton (FIFO with
    baton's own puts) and the other way round; an item baton holds is not
    given to kazoo (kazoo's get times out while it is the only one) until
    baton gives it back; an item kazoo holds is not given to baton until
    kazoo releases it; done on either side removes it for both;
  - two kazoo LockingQueue consumers and two baton takers drain 60 items at
    once: no item held by two at once, each consumed exactly once;
  - kazoo's plain Queue keeps its items directly under the path (no
    entries/): baton does not see them (the documented difference).
"""
import ctypes
import logging
import os
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
except ImportError:
    skip_or_fail("kazoo (python3-kazoo) is missing")

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
if len(sys.argv) != 2:
    log("usage: interop_kazoo_coord.py LIBBATON.so")
    sys.exit(2)
srv = os.environ.get("BATON_TEST_SRV", "/nonexistent")
try:
    with open(os.path.join(srv, "zk", "port")) as f:
        PORT = int(f.read().strip())
except (OSError, ValueError):
    skip_or_fail("no test zk server")

HOSTS = "127.0.0.1:%d" % PORT
URI = ("zk://%s?session_timeout_ms=4000" % HOSTS).encode()
PREFIX = "interop-kazoo-coord-%d-" % os.getpid()

# ---- baton through ctypes ------------------------------------------------------
B = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
U64 = ctypes.c_uint64
ANY = 2**64 - 1
ENOENT, ECONFLICT, ETIMEDOUT = -17, -18, -2


class ValueData(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("len", ctypes.c_size_t), ("version", U64)]


class Member(ctypes.Structure):
    _fields_ = [("id", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class Members(ctypes.Structure):
    _fields_ = [("members", ctypes.POINTER(Member)), ("n", ctypes.c_size_t)]


for fn, args in {
    "baton_client_open": [ctypes.POINTER(P), ctypes.c_char_p, P],
    "baton_client_close": [P],
    "baton_value_open": [ctypes.POINTER(P), P, ctypes.c_char_p],
    "baton_value_set": [P, ctypes.c_char_p, ctypes.c_size_t, U64, ctypes.POINTER(U64)],
    "baton_value_get": [P, ctypes.POINTER(ValueData)],
    "baton_value_watch": [P, U64, ctypes.POINTER(ValueData), ctypes.c_int64],
    "baton_value_free": [P],
    "baton_counter_open": [ctypes.POINTER(P), P, ctypes.c_char_p],
    "baton_counter_get": [P, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(U64)],
    "baton_counter_add": [P, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)],
    "baton_counter_free": [P],
    "baton_group_open": [ctypes.POINTER(P), P, ctypes.c_char_p, P],
    "baton_group_join": [P, ctypes.c_char_p, ctypes.c_char_p],
    "baton_group_leave": [P],
    "baton_group_members": [P, ctypes.POINTER(Members)],
    "baton_group_watch": [P, ctypes.POINTER(Members), ctypes.c_int64],
    "baton_group_free": [P],
    "baton_members_clear": [ctypes.POINTER(Members)],
    "baton_queue_open": [ctypes.POINTER(P), P, ctypes.c_char_p, P],
    "baton_queue_put": [P, ctypes.c_char_p, ctypes.c_size_t],
    "baton_queue_take": [P, ctypes.POINTER(P), ctypes.c_int64],
    "baton_queue_size": [P, ctypes.POINTER(U64)],
    "baton_queue_free": [P],
    "baton_queue_item_data": [P, ctypes.POINTER(ctypes.c_size_t)],
    "baton_queue_item_fence": [P],
    "baton_queue_done": [P],
    "baton_queue_return": [P],
    "baton_semaphore_open": [ctypes.POINTER(P), P, ctypes.c_char_p],
    "baton_semaphore_acquire": [P, ctypes.c_uint32, ctypes.c_int64],
    "baton_semaphore_release": [P, ctypes.c_uint32],
    "baton_semaphore_available": [P, ctypes.POINTER(U64)],
    "baton_semaphore_free": [P],
    "baton_last_message": [],
}.items():
    if not hasattr(B, fn):
        continue
    getattr(B, fn).argtypes = args
    getattr(B, fn).restype = ctypes.c_int
for fn in ("baton_client_close", "baton_semaphore_free", "baton_value_free", "baton_counter_free", "baton_group_free", "baton_queue_free",
           "baton_members_clear"):
    getattr(B, fn).restype = None
B.baton_queue_item_data.restype = ctypes.c_char_p
B.baton_queue_item_fence.restype = U64
B.baton_value_data_clear.argtypes = [ctypes.POINTER(ValueData)]
B.baton_value_data_clear.restype = None


def open_client():
    c = P()
    rc = B.baton_client_open(ctypes.byref(c), URI, None)
    if rc:
        raise RuntimeError("baton_client_open: %d" % rc)
    return c


def opened(fn, *args):
    h = P()
    rc = fn(ctypes.byref(h), *args)
    if rc:
        raise RuntimeError("%s: %d" % (fn.__name__, rc))
    return h


def members(g, watch_ms=None):
    m = Members()
    rc = B.baton_group_members(g, ctypes.byref(m)) if watch_ms is None else \
        B.baton_group_watch(g, ctypes.byref(m), watch_ms)
    out = {m.members[i].id.decode(): m.members[i].value.decode() for i in range(m.n)} if rc == 0 else None
    B.baton_members_clear(ctypes.byref(m))
    return rc, out


def take(q, wait_ms):
    it = P()
    rc = B.baton_queue_take(q, ctypes.byref(it), wait_ms)
    if rc:
        return rc, None, None
    return 0, it, B.baton_queue_item_data(it, None)


def kazoo_client():
    zk = KazooClient(hosts=HOSTS, timeout=10.0)
    zk.start(timeout=15)
    return zk


# ---- cases --------------------------------------------------------------------
def case_counter(c, zk):
    name = PREFIX + "counter"
    kc = zk.Counter("/baton-values/" + name)
    bc = opened(B.baton_counter_open, c, name.encode())
    n = ctypes.c_int64(-1)
    ver = U64(0)
    # kazoo's first use makes the node empty
    kc.value
    rc = B.baton_counter_get(bc, ctypes.byref(n), ctypes.byref(ver))
    check("counter: a node kazoo's Counter made (empty) reads 0", rc == 0 and n.value == 0, (rc, n.value))
    kc += 5
    rc = B.baton_counter_get(bc, ctypes.byref(n), ctypes.byref(ver))
    check("counter: kazoo's += 5 is baton's 5", rc == 0 and n.value == 5, (rc, n.value))
    _, stat = zk.get("/baton-values/" + name)
    check("counter: baton's version is the node's mzxid", ver.value == stat.mzxid, (ver.value, stat.mzxid))
    rc = B.baton_counter_add(bc, 3, ctypes.byref(n))
    check("counter: baton's add 3 is kazoo's 8", rc == 0 and n.value == 8 and kc.value == 8, (rc, n.value, kc.value))

    def kazoo_side():
        k2 = zk.Counter("/baton-values/" + name)
        for _ in range(40):
            k2 += 1

    def baton_side():
        for _ in range(40):
            if B.baton_counter_add(bc, 1, None) != 0:
                log("   baton_counter_add failed")

    ts = [threading.Thread(target=kazoo_side), threading.Thread(target=baton_side)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rc = B.baton_counter_get(bc, ctypes.byref(n), None)
    check("counter: 40 kazoo and 40 baton increments at once lose none (88)", rc == 0 and n.value == 88 and
          kc.value == 88, (rc, n.value, kc.value))
    data, _ = zk.get("/baton-values/" + name)
    check("counter: the node holds decimal text", data == b"88", data)
    B.baton_counter_free(bc)
    zk.delete("/baton-values/" + name)


def case_semaphore(c, zk):
    """baton_semaphore_* keeps its count as kazoo Counter does (decimal text
    in <sem_root>/NAME, versioned sets): a kazoo += wakes a baton waiter,
    baton's release is kazoo's value, and concurrent changes lose none."""
    name = PREFIX + "sem"
    path = "/baton-semaphores/" + name
    kc = zk.Counter(path)
    bs = opened(B.baton_semaphore_open, c, name.encode())
    av = U64(99)
    kc.value  # kazoo's first use makes the node empty: 0 permits
    rc = B.baton_semaphore_available(bs, ctypes.byref(av))
    check("semaphore: a node kazoo's Counter made (empty) is 0 permits", rc == 0 and av.value == 0, (rc, av.value))
    got = {}

    def waiter():
        got["rc"] = B.baton_semaphore_acquire(bs, 2, 10000)
        got["t"] = time.monotonic()

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(0.3)
    kc += 1
    time.sleep(0.3)
    check("semaphore: one permit from kazoo is not enough for 2", "rc" not in got)
    t0 = time.monotonic()
    kc += 1
    t.join(10)
    check("semaphore: kazoo's += wakes a baton waiter (watch, not polling)",
          got.get("rc") == 0 and got["t"] - t0 < 1.5, got)
    check("semaphore: it took both", kc.value == 0, kc.value)
    rc = B.baton_semaphore_release(bs, 3)
    check("semaphore: baton's release 3 is kazoo's 3", rc == 0 and kc.value == 3, (rc, kc.value))

    def kazoo_side():
        k2 = zk.Counter(path)
        for _ in range(30):
            k2 += 1

    def baton_side():
        for _ in range(30):
            if B.baton_semaphore_acquire(bs, 1, 10000) != 0:
                log("   baton_semaphore_acquire failed")

    ts = [threading.Thread(target=kazoo_side), threading.Thread(target=baton_side)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    data, _ = zk.get(path)
    check("semaphore: 30 kazoo releases and 30 baton acquires at once: back to 3", data == b"3", data)
    B.baton_semaphore_free(bs)
    zk.delete(path, recursive=True)


def case_value(c, zk):
    name = PREFIX + "value"
    path = "/baton-values/" + name
    v = opened(B.baton_value_open, c, name.encode())
    ver = U64(0)
    rc = B.baton_value_set(v, b"from-baton", 10, 0, ctypes.byref(ver))
    data, stat = zk.get(path)
    check("value: a baton set is kazoo's get, version = mzxid", rc == 0 and data == b"from-baton" and
          stat.mzxid == ver.value, (rc, data, stat.mzxid, ver.value))
    seen = []
    ev = threading.Event()

    @zk.DataWatch(path)
    def watcher(d, st):
        seen.append(d)
        if d == b"second":
            ev.set()

    B.baton_value_set(v, b"second", 6, ANY, None)
    check("value: kazoo's DataWatch sees baton's set", ev.wait(15), seen)
    result = {}

    def watch():
        d = ValueData()
        B.baton_value_get(v, ctypes.byref(d))
        known = d.version
        B.baton_value_data_clear(ctypes.byref(d))
        result["rc"] = B.baton_value_watch(v, known, ctypes.byref(d), 15000)
        result["data"] = d.data
        result["version"] = d.version
        B.baton_value_data_clear(ctypes.byref(d))

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.5)
    st = zk.set(path, b"from-kazoo")
    t.join()
    check("value: kazoo's set wakes baton's watch with its data and mzxid", result.get("rc") == 0 and
          result.get("data") == b"from-kazoo" and result.get("version") == st.mzxid, (result, st.mzxid))
    rc = B.baton_value_set(v, b"x", 1, ver.value, None)
    check("value: baton's compare-and-set on a version kazoo changed is a conflict", rc == ECONFLICT, rc)
    B.baton_value_free(v)
    zk.delete(path)


def case_group(c, zk):
    name = PREFIX + "group"
    path = "/baton-groups/" + name
    party = zk.Party(path, "kazoo-member")
    party.join()
    g = opened(B.baton_group_open, c, name.encode(), None)
    rc, m = members(g)
    kid = party.node[:-len("__party__")]
    check("group: baton lists kazoo's Party member (id = its uuid, value = its identifier)",
          rc == 0 and m == {kid: "kazoo-member"}, (rc, m, party.node))
    rc = B.baton_group_join(g, b"b1", b"10.0.0.7:80")
    kl = sorted(zk.Party(path))
    check("group: kazoo's Party lists baton's member (its value) beside its own",
          rc == 0 and kl == sorted(["kazoo-member", "10.0.0.7:80"]), (rc, kl))
    check("group: kazoo's len(Party) counts both", len(zk.Party(path)) == 2, len(zk.Party(path)))
    rc, m = members(g, 0)  # the first watch answers at once
    res = {}

    def watch():
        res["rc"], res["m"] = members(g, 15000)

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.5)
    party.leave()
    t.join()
    check("group: kazoo's leave wakes baton's watch, baton's member stays",
          res.get("rc") == 0 and res.get("m") == {"b1": "10.0.0.7:80"}, res)
    B.baton_group_leave(g)
    check("group: after baton's leave kazoo's Party is empty", len(zk.Party(path)) == 0, list(zk.Party(path)))
    B.baton_group_free(g)


def case_queue(c, zk):
    name = PREFIX + "queue"
    path = "/baton-queues/" + name
    kq = zk.LockingQueue(path)
    q = opened(B.baton_queue_open, c, name.encode(), None)
    kq.put(b"k1")
    B.baton_queue_put(q, b"b1", 2)
    kq.put(b"k2")
    got = []
    fences = []
    for _ in range(3):
        rc, it, data = take(q, 0)
        got.append(data)
        if rc == 0:
            fences.append(B.baton_queue_item_fence(it))
            B.baton_queue_done(it)
    check("queue: baton takes kazoo's and its own puts in order", got == [b"k1", b"b1", b"k2"], got)
    check("queue: fences grow take by take", len(fences) == 3 and fences == sorted(fences) and
          len(set(fences)) == 3, fences)
    B.baton_queue_put(q, b"b2", 2)
    k = zk.LockingQueue(path)
    data = k.get(10)
    check("queue: kazoo's LockingQueue takes baton's put", data == b"b2", data)
    check("queue: kazoo consumes it", k.consume())
    n = U64(9)
    B.baton_queue_size(q, ctypes.byref(n))
    check("queue: then it is empty for baton", n.value == 0, n.value)

    # baton holds the only item: kazoo does not get it
    B.baton_queue_put(q, b"held", 4)
    rc, it, data = take(q, 0)
    k = zk.LockingQueue(path)
    t0 = time.time()
    kd = k.get(1.5)
    check("queue: an item baton holds is not given to kazoo", rc == 0 and data == b"held" and kd is None, (rc, data, kd))
    B.baton_queue_return(it)
    kd = k.get(10)
    check("queue: given back by baton, kazoo takes it", kd == b"held", kd)
    rc, it2, data = take(q, 0)
    check("queue: an item kazoo holds is not given to baton", rc == ENOENT, (rc, data))
    res = {}

    def btake():
        res["rc"], it3, res["data"] = take(q, 15000)
        if it3:
            res["done"] = B.baton_queue_done(it3)

    t = threading.Thread(target=btake)
    t.start()
    time.sleep(0.5)
    k.release()
    t.join()
    check("queue: kazoo's release wakes baton's waiting take, which gets it",
          res.get("rc") == 0 and res.get("data") == b"held" and res.get("done") == 0, res)
    check("queue: done by baton removes it for kazoo", len(zk.get_children(path + "/entries")) == 0,
          zk.get_children(path + "/entries"))
    check("queue: no taken node is left", len(zk.get_children(path + "/taken")) == 0, zk.get_children(path + "/taken"))
    log("   (%.1fs)" % (time.time() - t0))
    B.baton_queue_free(q)

    # kazoo's plain Queue: items at <path>/entry-..., not under entries/
    pname = PREFIX + "plain"
    zk.Queue("/baton-queues/" + pname).put(b"plain")
    q2 = opened(B.baton_queue_open, c, pname.encode(), None)
    rc, it, data = take(q2, 0)
    check("queue: kazoo's plain Queue is another layout (baton sees no item)", rc == ENOENT, (rc, data))
    B.baton_queue_free(q2)
    zk.delete("/baton-queues/" + pname, recursive=True)


def case_queue_drain(c, zk):
    """Two kazoo LockingQueue consumers and two baton takers drain 60 items
    put by both sides, at once; each holds its item a moment and records it.
    No item may be held by two at once, and each is consumed exactly once."""
    name = PREFIX + "drain"
    path = "/baton-queues/" + name
    q = opened(B.baton_queue_open, c, name.encode(), None)
    kq = zk.LockingQueue(path)
    items = []
    for i in range(30):
        kq.put(b"k%d" % i)
        items.append(b"k%d" % i)
        B.baton_queue_put(q, b"b%d" % i, len(b"b%d" % i))
        items.append(b"b%d" % i)
    lock = threading.Lock()
    holding = set()
    consumed = []
    overlaps = [0]

    by_baton = [0]

    def section(data):
        with lock:
            if data in holding:
                overlaps[0] += 1
            holding.add(data)
        time.sleep(0.005)
        with lock:
            holding.discard(data)
            consumed.append(data)

    def kazoo_side():
        z = kazoo_client()
        k = z.LockingQueue(path)
        while True:
            d = k.get(2)
            if d is None:
                break
            section(d)
            k.consume()
        z.stop()
        z.close()

    def baton_side():
        while True:
            rc, it, d = take(q, 2000)
            if rc:
                break
            section(d)
            with lock:
                by_baton[0] += 1
            B.baton_queue_done(it)

    ts = [threading.Thread(target=f) for f in (kazoo_side, kazoo_side, baton_side, baton_side)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    log("   measure: %d items consumed, %d by baton's takers" % (len(consumed), by_baton[0]))
    check("queue drain: no item held by two takers at once (2 kazoo + 2 baton)", overlaps[0] == 0, overlaps[0])
    check("queue drain: every item consumed exactly once", sorted(consumed) == sorted(items),
          (len(consumed), len(set(consumed))))
    B.baton_queue_free(q)
    zk.delete(path, recursive=True)


def main():
    zk = kazoo_client()
    c = open_client()
    try:
        for case in (case_counter, case_semaphore, case_value, case_group, case_queue, case_queue_drain):
            log("-- " + case.__name__)
            try:
                case(c, zk)
            except Exception as e:  # a case that raises is a failure, the others still run
                check(case.__name__ + " ran", False, repr(e))
    finally:
        B.baton_client_close(c)
        for p in ("/baton-groups/" + PREFIX + "group", "/baton-queues/" + PREFIX + "queue"):
            try:
                zk.delete(p, recursive=True)
            except Exception:
                pass
        zk.stop()
        zk.close()
    print("%d passed, %d failed" % (PASS, FAIL))
    sys.exit(1 if FAIL else 0)


main()
