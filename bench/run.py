#!/usr/bin/python3
"""make bench: baton's workloads and the peers' (../shared/peers) back to back in one run, on
servers started here (Redis, etcd), then a table of baton/peer ratios against the targets of
issue 4.

Writes everything to an untracked place, build/bench-results/<UTC time>/: results.jsonl (one
JSON line per result), the latency plots (*.svg, when `baton bench --svg` exists) and table.md.
With --docs (`make bench-docs`) it also publishes them: bench/results/<UTC time>.jsonl,
docs/bench/*.svg and the table in docs/PERFORMANCE.md between the RESULTS markers. Benchmarks are not tests: nothing here fails on a number, and a
missing peer or an unknown workload is a skipped, n/a row, never an error.
RedLock: baton on `redlock://` over 3 Redis servers of its own (tests/servers/redis.sh; 5 with
--redlock-nodes 5) and node-redlock (bench/peers/redlock.js) on the same servers, interleaved; its
table goes between the REDLOCK markers.
ZooKeeper: one standalone server of its own (tests/servers/zk.sh); on it, interleaved, the raw C
client bound (../shared/peers/zkraw.c, compiled next to BATON at run time), kazoo
(pylocks.py kazoo) and baton on `zk://`, plus baton's herd; its table goes between the ZK markers.
PostgreSQL: one server of its own (tests/servers/postgres.sh); on it, interleaved, pgbench -c 1
running the statements of baton's session and lease modes as custom scripts (the round-trip bound)
and baton on `postgres://` in each mode, contended and handoff per mode, then baton's herd with
pg_stat_statements preloaded; its table goes between the POSTGRES markers. The section is written
for any SQL engine (measure_sql / render_sql over an engine description, PG_ENGINE).
MySQL/MariaDB (MY_ENGINE): one MariaDB server of its own (tests/servers/mysql.sh); on it,
interleaved, a C loop over Connector/C sending baton's session and lease statements
(bench/peers/myraw.c, compiled next to BATON at run time: the round-trip bound), mysqlslap -c 1
running the same statements, and baton on `mysql://` in each mode; then contended, handoff and
the herd (counted by the server's Com_* counters); its table goes between the MYSQL markers.
etcd: one fresh single-member etcd of its own (start_etcd); on it, interleaved, the raw bounds of
a lock cycle over the JSON gateway (../shared/peers/etcdraw.py) and over gRPC
(bench/peers/etcdgrpcraw.py), python-etcd3 (pylocks.py etcd), the write latency (single Puts,
bench/peers/etcdput.py) and baton on `etcd://` (and `?transport=grpc` when this baton takes it),
then `baton run` against `etcdctl lock`; its table goes between the ETCD markers.
--only redis|redlock|zk|postgres|mysql|etcd runs (and publishes) one section.
usage: bench/run.py [--docs] [--only redis|redlock|zk|postgres|mysql|etcd] [--redlock-nodes N] BATON_BINARY
"""
import datetime, hashlib, json, os, re, resource, shutil, signal, socket, statistics, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
def find_peers():
    """The peer clients: $BATON_PEERS_DIR, else ../shared/peers next to this checkout, else next
    to the repository it was cloned from (a fresh clone in /tmp still finds them)."""
    cands = [os.environ.get("BATON_PEERS_DIR", ""), os.path.join(os.path.dirname(ROOT), "shared", "peers")]
    try:
        origin = subprocess.run(["git", "-C", ROOT, "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True).stdout.strip()
        if origin and os.path.isdir(origin):
            cands.append(os.path.join(os.path.dirname(os.path.abspath(origin)), "shared", "peers"))
    except OSError:
        pass
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "pylocks.py")):
            return c
    return cands[1]


PEERS = find_peers()
NODE_MODULES = os.path.join(ROOT, "build", "peers-node", "node_modules")
SVG_DIR = os.path.join(ROOT, "docs", "bench")
PY = "/usr/bin/python3"
UNC_N = 20000          # uncontended pairs, baton and redis-py
RB_N = 20000           # redis-benchmark requests per bound
CLI_LOOPS = 200        # CLI wall-time runs per command
HERD_W = (1, 4, 16, 64, 256)
HERD_ROUNDS = 100
MEM_N = 1000
BOUND_REPS = 5         # alternations of redis-benchmark's bound and baton's uncontended run

REDLOCK_NODES = 3      # redis servers of the RedLock section (--redlock-nodes)
REDLOCK_N = 5000       # uncontended pairs on RedLock, baton and node-redlock
REDLOCK_REPS = 3       # alternations of baton and node-redlock per RedLock workload
REDIS_SH = os.path.join(ROOT, "tests", "servers", "redis.sh")

ZK_N = 3000            # uncontended pairs on ZooKeeper: baton, kazoo and the raw bound alike
ZK_REPS = 3            # rotations of raw / kazoo / baton per ZooKeeper workload (medians kept)
ZK_HERD_ROUNDS = 100
ZK_SH = os.path.join(ROOT, "tests", "servers", "zk.sh")
PG_N = 10000          # uncontended pairs on PostgreSQL: pgbench (transactions) and baton alike
PG_REPS = 3            # rotations of the bound(s) and baton per PostgreSQL workload (medians kept)
PG_HERD_W = (1, 4, 16, 64)   # postgres.sh allows 200 connections; a lease-mode waiter uses two
PG_HERD_ROUNDS = 64
PG_SH = os.path.join(ROOT, "tests", "servers", "postgres.sh")
MY_N = 10000           # uncontended pairs on MariaDB: the C loop bound, mysqlslap and baton alike
MY_REPS = 3            # rotations of the bounds and baton per MariaDB workload (medians kept)
MY_HERD_W = (1, 4, 16, 64)   # mysql.sh allows 300 connections; a session-mode waiter holds one
MY_HERD_ROUNDS = 64
MY_SH = os.path.join(ROOT, "tests", "servers", "mysql.sh")
SECTIONS = ("redis", "redlock", "zk", "postgres", "mysql", "etcd")

PUBLISH = False
_args = []
_av = sys.argv[1:]
while _av:
    a = _av.pop(0)
    if a == "--docs":
        PUBLISH = True
    elif a in ("--only", "--redlock-nodes") and _av:
        v = _av.pop(0)
        if a == "--only":
            if v not in SECTIONS:
                raise SystemExit("bench: --only wants one of %s, not %s" % (", ".join(SECTIONS), v))
            SECTIONS = (v,)
        else:
            REDLOCK_NODES = int(v)
    else:
        _args.append(a)
BATON = os.path.abspath(_args[0]) if _args else os.path.join(ROOT, "build", "baton")
STAMP = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
OUT_DIR = os.path.join(ROOT, "build", "bench-results", STAMP)
results = []           # every JSON line of this run, in order
PROCS = []             # background servers and monitors: (Popen, name)
TMPDIRS = []


def log(msg):
    print(msg, flush=True)


def record(r, label):
    r = dict(r, bench_label=label)
    results.append(r)
    log("  %s: %s" % (label, json.dumps({k: v for k, v in r.items() if k != "bench_label"})))
    return r


def mktemp(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    TMPDIRS.append(d)
    return d


def child_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


def kill_group(p, sig=signal.SIGKILL):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_raw(cmd, env=None, timeout=300):
    """Runs cmd in its own process group (a timeout or Ctrl-C ends its workers too). Returns
    (returncode, stdout, stderr, wall_s, cpu_user_s, cpu_sys_s) or None when it could not run.
    CPU is the getrusage(RUSAGE_CHILDREN) delta: the child and every descendant it waited for."""
    e = dict(os.environ, **(env or {}))
    u0, s0 = child_cpu()
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    except OSError as x:
        log("  skipped: %s: %s" % (cmd[0], x))
        return None
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        log("  skipped: %s timed out after %d s" % (" ".join(map(str, cmd[:4])), timeout))
        return None
    except BaseException:
        kill_group(p)
        p.wait()
        raise
    kill_group(p)          # workers a dead parent left behind
    wall = time.perf_counter() - t0
    u1, s1 = child_cpu()
    return p.returncode, out, err, wall, u1 - u0, s1 - s0


def run(cmd, label, env=None, timeout=300):
    """Runs one benchmark command; its first JSON line is the result (with the process's CPU
    as _cpu_user_s/_cpu_sys_s), or None, printed as skipped."""
    r = run_raw(cmd, env, timeout)
    if r is None:
        return None
    rc, out, err, wall, cu, cs = r
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            j.update(_cpu_user_s=round(cu, 6), _cpu_sys_s=round(cs, 6), _wall_s=round(wall, 3))
            return record(j, label)
    log("  skipped %s: no result (exit %s): %s" % (label, rc, (err.strip() or out.strip())[-300:]))
    return None


# ---- servers ----

def port_free(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def background(cmd, name, **kw):
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    PROCS.append((p, name))
    return p


def stop(p, grace=5.0):
    if p.poll() is None:
        kill_group(p, signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            kill_group(p)
            p.wait()
    for i, (q, _) in enumerate(PROCS):
        if q is p:
            del PROCS[i]
            break


REDIS_DIRS = []        # servers started with tests/servers/redis.sh (the RedLock nodes)
ZK_DIRS = []           # servers started with tests/servers/zk.sh
SQL_DIRS = []          # (stop function, dir) of the SQL engines' servers


def stop_servers():
    for p, _ in list(PROCS):
        stop(p)
    for d in REDIS_DIRS:
        subprocess.run(["bash", REDIS_SH, "stop", d], capture_output=True)
    REDIS_DIRS.clear()
    for d in ZK_DIRS:
        subprocess.run(["bash", ZK_SH, "stop", d], capture_output=True)
    ZK_DIRS.clear()
    for stopfn, d in SQL_DIRS:
        stopfn(d)
    SQL_DIRS.clear()


def cleanup():
    stop_servers()
    for d in TMPDIRS:
        shutil.rmtree(d, ignore_errors=True)
    TMPDIRS.clear()


def redis_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def start_redis():
    """Port 6379 when it is free (the node peer script only talks to 6379), else a free port."""
    port = 6379 if port_free(6379) else free_port()
    d = mktemp("baton-bench-redis.")
    p = background(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", d, "--logfile", os.path.join(d, "log")], "redis-server")
    for _ in range(200):
        if redis_ping(port):
            return port, p
        if p.poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit("bench: redis-server did not start (%s)" % open(os.path.join(d, "log")).read()[-500:])


def start_etcd():
    if not (shutil.which("etcd") and shutil.which("etcdctl")):
        log("  skipped: etcd/etcdctl not installed (scripts/install-deps.sh --bench)")
        return None
    d = mktemp("baton-bench-etcd.")
    cport, pport = free_port(), free_port()
    curl, purl = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    logf = open(os.path.join(d, "log"), "w")
    p = background(["etcd", "--name", "bench", "--data-dir", os.path.join(d, "data"),
                    "--listen-client-urls", curl, "--advertise-client-urls", curl,
                    "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                    "--initial-cluster", "bench=" + purl], "etcd", stdout=logf, stderr=logf)
    logf.close()
    for _ in range(100):
        if p.poll() is not None:
            break
        if subprocess.run(["etcdctl", "--endpoints=" + curl, "endpoint", "health"], capture_output=True).returncode == 0:
            return curl
        time.sleep(0.1)
    log("  skipped: etcd did not start: %s" % open(os.path.join(d, "log")).read()[-300:])
    stop(p)
    return None


# ---- the EVALSHA bound: baton's own scripts, captured with MONITOR ----

_ESC = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b", '"': b'"', "\\": b"\\"}


def monitor_args(s):
    """The arguments of one MONITOR line (redis-cli prints them with sdscatrepr quoting)."""
    out = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', s):
        raw, b, i = m.group(1), bytearray(), 0
        while i < len(raw):
            c = raw[i]
            if c == "\\" and i + 1 < len(raw):
                n = raw[i + 1]
                if n == "x" and i + 3 < len(raw):
                    b.append(int(raw[i + 2:i + 4], 16))
                    i += 4
                    continue
                b += _ESC.get(n, n.encode())
                i += 2
                continue
            b += c.encode("latin-1", "replace") if ord(c) < 256 else c.encode()
            i += 1
        out.append(bytes(b))
    return out


def capture_scripts(port, uri, label):
    """Runs `baton bench --workload uncontended --n 3` under MONITOR; returns
    {"acquire": [EVALSHA argv], "release": [...], "bodies": {sha: script}} or None."""
    if not shutil.which("redis-cli"):
        return None
    d = mktemp("baton-bench-monitor.")
    f = open(os.path.join(d, "monitor"), "wb")
    mon = background(["redis-cli", "-p", str(port), "monitor"], "redis-cli monitor", stdout=f, stderr=subprocess.DEVNULL)
    f.close()
    try:
        for _ in range(100):      # MONITOR answers OK once it is on
            if open(os.path.join(d, "monitor"), "rb").read(2) == b"OK":
                break
            time.sleep(0.02)
        subprocess.run([BATON, "bench", "-u", uri, "--workload", "uncontended", "--n", "3", "--json"],
                       capture_output=True, timeout=60)
        time.sleep(0.3)
    finally:
        stop(mon)
    calls, bodies = [], {}
    for line in open(os.path.join(d, "monitor"), "rb").read().decode("latin-1").splitlines():
        m = re.match(r'^[0-9.]+ \[\d+ ([^\]]+)\] (.*)$', line)
        if not m or m.group(1) == "lua":
            continue
        a = monitor_args(m.group(2))
        if not a:
            continue
        cmd = a[0].upper()
        if cmd == b"EVALSHA" and len(a) >= 3:
            calls.append(a)
        elif cmd == b"EVAL" and len(a) >= 3:
            bodies[hashlib.sha1(a[1]).hexdigest()] = a[1]
    if not calls:
        log("  skipped: no EVALSHA seen for %s" % label)
        return None
    acq = calls[0]
    rel = next((c for c in calls[1:] if c[1] != acq[1]), None)
    if rel is None:
        log("  skipped: no release EVALSHA seen for %s" % label)
        return None
    # make sure both scripts are in the server's cache (baton may have sent EVAL first)
    for sha in (acq[1], rel[1]):
        body = bodies.get(sha.decode())
        ex = subprocess.run(["redis-cli", "-p", str(port), "script", "exists", sha], capture_output=True).stdout.strip()
        if ex != b"1" and body:
            subprocess.run([b"redis-cli", b"-p", str(port).encode(), b"script", b"load", body], capture_output=True)
    # What redis-benchmark's repeats do: the first acquire grants, the next ones find the lock held.
    cli = [b"redis-cli", b"-p", str(port).encode()]
    replies = [subprocess.run(cli + c, capture_output=True).stdout.decode("latin-1").split()
               for c in (acq, acq, rel, rel)]
    r = {"acquire": acq, "release": rel}
    record({"peer": "baton", "workload": "scripts", "layout": label,
            "acquire": [x.decode("latin-1") for x in acq], "release": [x.decode("latin-1") for x in rel],
            "replies_acquire_acquire_release_release": replies}, "scripts " + label)
    return r


def redis_benchmark(port, argv, clients, label, rand=0, n=RB_N):
    """redis-benchmark -c CLIENTS -n N with a raw command; requests/s and its own CPU per request."""
    if not shutil.which("redis-benchmark"):
        log("  skipped %s: no redis-benchmark" % label)
        return None
    cmd = [b"redis-benchmark", b"-p", str(port).encode(), b"-c", str(clients).encode(), b"-n", str(n).encode(), b"-q"]
    if rand:
        cmd += [b"-r", str(rand).encode()]
    r = run_raw(cmd + list(argv), timeout=300)
    if r is None:
        return None
    rc, out, err, wall, cu, cs = r
    m = re.findall(r"([0-9.]+) requests per second", out.replace("\r", "\n"))
    if rc != 0 or not m:
        log("  skipped %s: %s" % (label, (err or out).strip()[-300:]))
        return None
    return record({"peer": "redis-benchmark", "workload": label, "clients": clients, "n": n,
                   "requests_per_s": float(m[-1]), "cpu_user_us_per_req": round(cu / n * 1e6, 3),
                   "cpu_sys_us_per_req": round(cs / n * 1e6, 3)}, label)


def randomize_keys(argv, rand_tag="__rand_int__"):
    """The acquire EVALSHA with its lock name replaced by bench-r-__rand_int__ in every key."""
    a = list(argv)
    try:
        nk = int(a[2])
    except ValueError:
        return None
    m = re.search(rb"bench-u\d+", a[3]) if nk >= 1 else None
    for i in range(3, 3 + nk):
        if m:
            a[i] = a[i].replace(m.group(0), b"bench-r-" + rand_tag.encode())
        elif i == 3:
            a[i] = a[i] + b"-" + rand_tag.encode()
    return a


def median_run(runs, field):
    """The run whose `field` is the median of those that produced one (None if none did)."""
    ok = sorted((r for r in runs if r and num(r, field) is not None), key=lambda r: r[field])
    return ok[(len(ok) - 1) // 2] if ok else None


# ---- CPU baselines ----

def startup_cpu(cmd, label, times=5):
    us, ss = [], []
    for _ in range(times):
        r = run_raw(cmd, timeout=60)
        if r is None or r[0] != 0:
            log("  skipped baseline %s" % label)
            return None
        us.append(r[4])
        ss.append(r[5])
    return record({"peer": "baseline", "workload": label, "cpu_user_s": round(statistics.mean(us), 6),
                   "cpu_sys_s": round(statistics.mean(ss), 6)}, "baseline " + label)


def cpu_per_pair(res, base, pairs):
    """(user µs, sys µs) per pair from a run's getrusage deltas minus a startup baseline."""
    if not res or not base or "_cpu_user_s" not in res:
        return None
    u = (res["_cpu_user_s"] - base["cpu_user_s"]) / pairs * 1e6
    s = (res["_cpu_sys_s"] - base["cpu_sys_s"]) / pairs * 1e6
    return max(u, 0.0), max(s, 0.0)


# ---- CLI wall time ----

def cli_walls(cmds, loops, label):
    """Runs each command of cmds (name -> argv) `loops` times, interleaved; median and mean wall."""
    walls = {k: [] for k in cmds}
    for i in range(loops):
        for k, argv in cmds.items():
            if walls[k] is None:
                continue
            t0 = time.perf_counter()
            try:
                rc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode
            except (subprocess.TimeoutExpired, OSError):
                rc = -1
            dt = time.perf_counter() - t0
            if rc != 0:
                log("  skipped %s/%s: exit %s" % (label, k, rc))
                walls[k] = None
                continue
            walls[k].append(dt)
    out = {}
    for k, w in walls.items():
        if w:
            out[k] = record({"peer": k, "workload": "cli " + label, "runs": len(w),
                             "wall_median_ms": round(statistics.median(w) * 1e3, 3),
                             "wall_mean_ms": round(statistics.mean(w) * 1e3, 3)}, "cli %s %s" % (label, k))
    return out


def node_peers():
    if not shutil.which("node"):
        return False
    if os.path.isdir(os.path.join(NODE_MODULES, "redlock")) and os.path.isdir(os.path.join(NODE_MODULES, "redis-semaphore")):
        return True
    if not shutil.which("npm"):
        return False
    d = os.path.dirname(NODE_MODULES)
    os.makedirs(d, exist_ok=True)
    r = subprocess.run("cd '%s' && npm init -y >/dev/null && npm install --silent redlock@4.2.0 ioredis@5 redis-semaphore@5" % d,
                       shell=True, capture_output=True, text=True)
    return r.returncode == 0


def svg_supported(uri, d):
    f = os.path.join(d, "probe.svg")
    r = run_raw([BATON, "bench", "-u", uri, "--workload", "uncontended", "--n", "10", "--svg", f, "--json"], timeout=60)
    return bool(r and r[0] == 0 and os.path.exists(f) and os.path.getsize(f) > 0)


def keep_svg(tmp, name, svgs):
    if os.path.exists(tmp) and os.path.getsize(tmp) > 0:
        os.makedirs(OUT_DIR, exist_ok=True)
        shutil.move(tmp, os.path.join(OUT_DIR, name))
        svgs.append(name)


# ---- the run ----

def measure_redis(got, svgs):
    port, _ = start_redis()
    uri = "redis://127.0.0.1:%d/0" % port
    env = {"PEER_REDIS_PORT": str(port)}
    log("bench: baton %s, Redis on port %d" % (BATON, port))
    work = mktemp("baton-bench-work.")
    svg = svg_supported(uri, work)
    if not svg:
        log("  note: this baton has no --svg; no plots this run")

    def svgarg(name):
        return ["--svg", os.path.join(work, name)] if svg else []

    bench = lambda *a: [BATON, "bench", "-u"] + list(a) + ["--json"]

    log("EVALSHA bound (redis-benchmark -c 1 with baton's own scripts)")
    c50 = None
    for lay, u in (("default", uri), ("simple", uri + "?layout=simple")):
        sc = capture_scripts(port, u, lay)
        # The bound and baton alternate BOUND_REPS times; each keeps its median run, so a burst of
        # load from elsewhere on the machine hits both sides alike.
        key = "baton_unc" if lay == "default" else "baton_unc_simple"
        acqs, rels, uncs, grants = [], [], [], []
        # The literal repeat of one acquire takes the script's cheap "held" path; the same
        # script on a fresh key each time (-r over 10^7 names) takes the granting path that
        # every baton acquire takes.
        ga = randomize_keys(sc["acquire"]) if sc else None
        for rep in range(BOUND_REPS):
            if sc:
                acqs.append(redis_benchmark(port, sc["acquire"], 1, "evalsha-acquire c=1 " + lay))
                rels.append(redis_benchmark(port, sc["release"], 1, "evalsha-release c=1 " + lay))
                if ga:
                    grants.append(redis_benchmark(port, ga, 1, "evalsha-acquire-grant c=1 " + lay, rand=10000000))
            log("baton uncontended (%s layout)" % lay)
            uncs.append(run(bench(u, "--workload", "uncontended", "--n", str(UNC_N)), key))
        got["rb_acq_" + lay] = median_run(acqs, "requests_per_s")
        got["rb_rel_" + lay] = median_run(rels, "requests_per_s")
        got["rb_grant_" + lay] = median_run(grants, "requests_per_s")
        got[key] = median_run(uncs, "pairs_per_s")
        if sc and lay == "default":
            c50 = randomize_keys(sc["acquire"])
    got["rb_set_c1"] = redis_benchmark(port, [b"SET", b"bench-set", b"x", b"NX", b"PX", b"30000"], 1, "set-nx c=1")

    log("redis-py uncontended, CPU baselines")
    got["py_unc"] = run([PY, os.path.join(PEERS, "pylocks.py"), "redis", "uncontended", str(UNC_N)], "py_unc", env)
    got["base_py"] = startup_cpu([PY, "-c", "import redis"], "python3 -c 'import redis'")
    got["base_baton"] = startup_cpu([BATON, "version"], "baton version")
    if svg:
        run(bench(uri, "--workload", "uncontended", "--n", "5000") + svgarg("uncontended.svg"), "baton_unc_svg")
        keep_svg(os.path.join(work, "uncontended.svg"), "uncontended.svg", svgs)

    log("handoff")
    got["baton_handoff"] = run(bench(uri, "--workload", "handoff", "--rounds", "200"), "baton_handoff")
    got["baton_handoff_fair"] = run(bench(uri, "--workload", "handoff", "--rounds", "200", "--fair") + svgarg("handoff-fair.svg"),
                                    "baton_handoff_fair")
    keep_svg(os.path.join(work, "handoff-fair.svg"), "handoff-fair.svg", svgs)
    got["py_handoff"] = run([PY, os.path.join(PEERS, "pylocks.py"), "redis", "handoff", "50"], "py_handoff", env)

    log("contended (8 processes, 5 s)")
    got["baton_cont"] = run(bench(uri, "--workload", "contended", "--clients", "8", "--seconds", "5"), "baton_cont")
    got["baton_cont_fair"] = run(bench(uri, "--workload", "contended", "--clients", "8", "--seconds", "5", "--fair")
                                 + svgarg("contended-fair.svg"), "baton_cont_fair")
    keep_svg(os.path.join(work, "contended-fair.svg"), "contended-fair.svg", svgs)
    got["py_cont"] = run([PY, os.path.join(PEERS, "pylocks.py"), "redis", "contended", "8", "5"], "py_cont", env)
    if port != 6379:
        log("  skipped node peers: port 6379 is taken and nodelocks.js only talks to 6379")
    elif not node_peers():
        log("  skipped node peers: no node/npm or the npm install failed")
    else:
        nenv = dict(env, NODE_PATH=NODE_MODULES)
        for kind in ("redlock", "semaphore"):
            got["node_%s_cont" % kind] = run(["node", os.path.join(PEERS, "nodelocks.js"), kind, "contended", "8", "5"],
                                             "node_%s_cont" % kind, nenv)
            got["node_%s_unc" % kind] = run(["node", os.path.join(PEERS, "nodelocks.js"), kind, "uncontended", "10000"],
                                            "node_%s_unc" % kind, nenv)

    log("many (50 locks, one client), alternating with its c=50 bound")
    manys, c50s = [], []
    for rep in range(3):
        if c50:
            c50s.append(redis_benchmark(port, c50, 50, "evalsha-acquire c=50 r=50 default", rand=50))
        manys.append(run(bench(uri, "--workload", "many", "--clients", "50", "--seconds", "3"), "baton_many"))
    got["rb_acq_c50"] = median_run(c50s, "requests_per_s")
    got["baton_many"] = median_run(manys, "pairs_per_s")

    log("herd (server commands per handoff)")
    # the default lock in both modes, interleaved at each W: a client per waiter (each client
    # still tries once per release) and the W waiters as threads of ONE client (one wake per
    # client: constant); --fair a client per waiter
    for fair, shared in ((True, False), (False, None)):
        for w in HERD_W:
            for sh in ((False, True) if shared is None else (shared,)):
                k = "herd_%d_%s%s" % (w, "fair" if fair else "default", "_shared" if sh else "")
                extra = svgarg("herd-64-fair.svg") if (fair and w == 64) else []
                got[k] = run(bench(uri, "--workload", "herd", "--waiters", str(w), "--rounds", str(HERD_ROUNDS))
                             + (["--fair"] if fair else []) + (["--shared-client"] if sh else []) + extra, k,
                             timeout=300)
            if not got[k] and w == 1:
                log("  (no herd workload in this baton: skipping the other sizes)")
                break
    keep_svg(os.path.join(work, "herd-64-fair.svg"), "herd-64-fair.svg", svgs)

    log("memory per lock")
    got["memory"] = run(bench(uri, "--workload", "memory", "--n", str(MEM_N)), "memory", timeout=300)

    log("CLI wall time (%d runs each, interleaved)" % CLI_LOOPS)
    fdir = mktemp("baton-bench-cli.")
    got["cli_file"] = cli_walls({"baton": [BATON, "run", "-u", "file://" + fdir, "bench-cli", "--", "true"],
                                 "flock": ["flock", os.path.join(fdir, "f"), "true"]} if shutil.which("flock") else
                                {"baton": [BATON, "run", "-u", "file://" + fdir, "bench-cli", "--", "true"]},
                                CLI_LOOPS, "file")
    etcd = start_etcd()
    cmds = {"baton": [BATON, "run", "-u", uri, "bench-cli", "--", "true"]}
    if etcd:
        cmds["etcdctl"] = ["etcdctl", "--endpoints=" + etcd, "lock", "bench-cli", "--", "true"]
    got["cli_redis"] = cli_walls(cmds, CLI_LOOPS, "redis")


def loadavg(label):
    """The machine's load average, recorded with the results (the RedLock doc states it)."""
    try:
        la = [float(x) for x in open("/proc/loadavg").read().split()[:3]]
    except (OSError, ValueError):
        return None
    return record({"peer": "machine", "workload": "loadavg", "when": label, "load1": la[0], "load5": la[1],
                   "load15": la[2], "cpus": os.cpu_count()}, "loadavg " + label)


def start_redlock_nodes(n):
    """n Redis servers on free loopback ports, started by tests/servers/redis.sh; their ports."""
    ports = []
    for i in range(n):
        d = mktemp("baton-bench-redlock-%d." % i)
        r = subprocess.run(["bash", REDIS_SH, "start", d], capture_output=True, text=True)
        if r.returncode != 0:
            log("  skipped RedLock: redis.sh start failed: %s" % (r.stderr.strip()[-300:]))
            return None
        REDIS_DIRS.append(d)
        ports.append(int(r.stdout.strip().splitlines()[-1]))
    return ports


def measure_redlock(got):
    """baton on redlock:// and node-redlock on the same REDLOCK_NODES servers, interleaved:
    each workload runs REDLOCK_REPS times per client, alternating which goes first, and each
    side keeps its median run, so a burst of load from elsewhere hits both alike."""
    ports = start_redlock_nodes(REDLOCK_NODES)
    if not ports:
        return
    got["redlock_nodes"] = len(ports)
    uri = "redlock://%s/0" % ",".join("127.0.0.1:%d" % p for p in ports)
    log("RedLock: baton on %s, node-redlock on the same servers" % uri)
    loadavg("redlock start")
    node = node_peers()
    if not node:
        log("  skipped node-redlock: no node/npm or the npm install failed")
    nenv = {"NODE_PATH": NODE_MODULES, "PEER_REDIS_PORTS": ",".join(map(str, ports))}
    peer = os.path.join(ROOT, "bench", "peers", "redlock.js")
    bench = lambda *a: [BATON, "bench", "-u", uri] + list(a) + ["--json"]
    work = {
        "unc": (["--workload", "uncontended", "--n", str(REDLOCK_N)], ["uncontended", str(REDLOCK_N)], "pairs_per_s"),
        "cont": (["--workload", "contended", "--clients", "8", "--seconds", "5"], ["contended", "8", "5"],
                 "handoffs_per_s"),
        "handoff": (["--workload", "handoff", "--rounds", "200"], ["handoff", "200"], "handoff_p50_us"),
    }
    for key, (bargs, nargs, field) in work.items():
        log("RedLock %s (%d alternations)" % (key, REDLOCK_REPS))
        b, n = [], []
        for rep in range(REDLOCK_REPS):
            sides = [("b", lambda: b.append(run(bench(*bargs), "redlock_baton_" + key)))]
            if node:
                sides.append(("n", lambda: n.append(run(["node", peer] + nargs, "redlock_node_" + key, nenv))))
            for _, go in (sides if rep % 2 == 0 else sides[::-1]):
                go()
        got["redlock_baton_" + key] = median_run(b, field)
        got["redlock_node_" + key] = median_run(n, field)
        got["redlock_runs_" + key] = (len([x for x in b if x]), len([x for x in n if x]))
    loadavg("redlock end")
    got["redlock_load"] = [r for r in results if r.get("workload") == "loadavg"][-2:]


def zkraw_binary():
    """../shared/peers/zkraw.c compiled next to BATON (never committed); None when it cannot be."""
    src = os.path.join(PEERS, "zkraw.c")
    out = os.path.join(os.path.dirname(BATON), "zkraw")
    if not os.path.isfile(src) or not shutil.which("gcc"):
        log("  skipped the raw bound: no %s or no gcc" % src)
        return None
    # THREADED: the C client's synchronous calls (zoo_create, zoo_delete) are declared only then
    r = subprocess.run(["gcc", "-O2", "-DTHREADED", "-o", out, src, "-lzookeeper_mt"], capture_output=True, text=True)
    if r.returncode != 0:
        log("  skipped the raw bound: gcc failed: %s" % r.stderr.strip()[-300:])
        return None
    return out


def measure_zk(got):
    """One standalone ZooKeeper (tests/servers/zk.sh). The raw C client's create+delete bound,
    kazoo and baton run each workload ZK_REPS times, the order rotating from one round to the
    next, and each keeps its median run; then baton's herd at every HERD_W."""
    d = mktemp("baton-bench-zk.")
    r = subprocess.run(["bash", ZK_SH, "start", d], capture_output=True, text=True)
    if r.returncode != 0:
        log("  skipped ZooKeeper: zk.sh start failed (exit %d): %s" % (r.returncode, r.stderr.strip()[-300:]))
        return
    ZK_DIRS.append(d)
    port = int(r.stdout.strip().splitlines()[-1])
    got["zk_cfg"] = {k: v for k, v in (l.strip().split("=", 1) for l in open(os.path.join(d, "zoo.cfg"))
                                      if "=" in l and not l.startswith("#"))}
    uri = "zk://127.0.0.1:%d" % port
    env = {"PEER_ZK_PORT": str(port)}
    log("ZooKeeper: baton on %s, kazoo and the raw C client on the same server" % uri)
    loadavg("zk start")
    raw = zkraw_binary()
    kz = subprocess.run([PY, "-c", "import kazoo"], capture_output=True).returncode == 0
    if not kz:
        log("  skipped kazoo: python3-kazoo is not installed")
    pyl = os.path.join(PEERS, "pylocks.py")
    bench = lambda *a: [BATON, "bench", "-u", uri] + list(a) + ["--json"]
    work = {
        "unc": ("pairs_per_s", [
            ("raw", [raw, "127.0.0.1:%d" % port, str(ZK_N)] if raw else None),
            ("kazoo", [PY, pyl, "kazoo", "uncontended", str(ZK_N)] if kz else None),
            ("baton", bench("--workload", "uncontended", "--n", str(ZK_N)))]),
        "cont": ("handoffs_per_s", [
            ("kazoo", [PY, pyl, "kazoo", "contended", "8", "5"] if kz else None),
            ("baton", bench("--workload", "contended", "--clients", "8", "--seconds", "5"))]),
        "handoff": ("handoff_p50_us", [
            ("kazoo", [PY, pyl, "kazoo", "handoff", "200"] if kz else None),
            ("baton", bench("--workload", "handoff", "--rounds", "200"))]),
    }
    for key, (field, sides) in work.items():
        sides = [(who, cmd) for who, cmd in sides if cmd]
        log("ZooKeeper %s (%d rounds, %s, order rotating)" % (key, ZK_REPS, " / ".join(w for w, _ in sides)))
        runs = {who: [] for who, _ in sides}
        for rep in range(ZK_REPS):
            k = rep % len(sides)
            for who, cmd in sides[k:] + sides[:k]:
                runs[who].append(run(cmd, "zk_%s_%s" % (who, key), env))
        for who in ("raw", "kazoo", "baton"):
            got["zk_%s_%s" % (who, key)] = median_run(runs.get(who, []), field)
            got["zk_runs_%s_%s" % (who, key)] = len([x for x in runs.get(who, []) if x])
    loadavg("zk herd")
    log("ZooKeeper herd (engine operations per handoff: the server's packets_received)")
    for w in HERD_W:
        k = "zk_herd_%d" % w
        got[k] = run(bench("--workload", "herd", "--waiters", str(w), "--rounds", str(ZK_HERD_ROUNDS)), k, timeout=600)
        if not got[k] and w == 1:
            log("  (no herd on zk in this baton: skipping the other sizes)")
            break
    loadavg("zk end")
    got["zk_load"] = [r for r in results if r.get("workload") == "loadavg" and r.get("when", "").startswith("zk")]


# ---- SQL engines (PostgreSQL, MySQL/MariaDB): one section shape ----
#
# An engine description (PG_ENGINE below) says how to start and stop a server, the baton URI of
# each lock mode, and, for the modes that have one, the bound: the engine's own benchmark tool
# running exactly the statements baton sends per lock/unlock pair, one client, the same way
# baton connects (TCP to 127.0.0.1 with a password). measure_sql and sql_rows/render_sql do the
# rest: MY_ENGINE below is the MySQL/MariaDB description. Optional keys: "bound_text" (the
# first bound's row, a format of title, mode and bound name) and "settings" (the server settings
# the table's header names).

def pg_start(d):
    """A server of tests/servers/postgres.sh in D; (host, port, user, password, settings) or None."""
    r = subprocess.run(["bash", PG_SH, "start", d], capture_output=True, text=True)
    if r.returncode != 0:
        log("  skipped PostgreSQL: postgres.sh start failed (exit %d): %s" % (r.returncode, r.stderr.strip()[-300:]))
        return None
    SQL_DIRS.append((pg_stop, d))
    port = int(r.stdout.strip().splitlines()[-1])
    user, pw = open(os.path.join(d, "user")).read().strip(), open(os.path.join(d, "password")).read().strip()
    cfg = {}
    q = pg_sql(("127.0.0.1", port, user, pw), "SELECT name || '=' || setting FROM pg_settings WHERE name IN "
               "('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_connections', "
               "'server_version', 'ssl') ORDER BY name")
    for line in (q or "").splitlines():
        k, _, v = line.partition("=")
        cfg[k] = v
    return ("127.0.0.1", port, user, pw, cfg)


def pg_stop(d):
    subprocess.run(["bash", PG_SH, "stop", d], capture_output=True)


def pg_sql(srv, sql):
    """One statement with psql over TCP, as the bench user; its unaligned output, or None."""
    if not shutil.which("psql"):
        return None
    host, port, user, pw = srv[:4]
    r = subprocess.run(["psql", "-X", "-qAt", "-h", host, "-p", str(port), "-U", user, "-d", "postgres", "-c", sql],
                       capture_output=True, text=True, env=dict(os.environ, PGPASSWORD=pw), timeout=60)
    if r.returncode != 0:
        log("  psql %r failed: %s" % (sql[:60], r.stderr.strip()[-300:]))
        return None
    return r.stdout


def pg_uri(srv, qs=""):
    host, port, user, pw = srv[:4]
    return "postgres://%s:%s@%s:%d/postgres%s" % (user, pw, host, port, qs)


# The statements of baton's session and lease modes (src/backends/postgres/session.c GRANT_TAIL
# with pg_grant_sql(wait = 1): `baton bench` acquires with an infinite wait; lease.c claim_sql and
# release_sql), table "baton_locks", as pgbench scripts: the variables are sent as parameters in
# pgbench's extended and prepared modes, as baton sends them (text, types left to the server). One
# pgbench transaction is one pair. The lease release needs the fence its claim returned: \gset.
PG_SCRIPTS = {
    "session": (
        "WITH g AS (SELECT pg_advisory_lock(:key::bigint)) "
        "INSERT INTO \"baton_locks\" AS l (name, key, fence, owner, holder, acquired_at) "
        "SELECT :name, :key::bigint, 1, :owner, :holder, clock_timestamp() FROM g "
        "ON CONFLICT (name) DO UPDATE SET fence = l.fence + 1, key = EXCLUDED.key, owner = EXCLUDED.owner, "
        "holder = EXCLUDED.holder, acquired_at = EXCLUDED.acquired_at, lease_until = NULL RETURNING l.fence;\n"
        "SELECT pg_advisory_unlock(:key::bigint);\n"),
    "lease": (
        "WITH c AS (INSERT INTO \"baton_locks\" AS l (name, key, fence, owner, holder, lease_until, acquired_at) "
        "VALUES (:name, :key::bigint, 1, :owner, :holder, clock_timestamp() + :ms::bigint * interval '1 millisecond', "
        "clock_timestamp()) "
        "ON CONFLICT (name) DO UPDATE SET fence = l.fence + 1, owner = EXCLUDED.owner, holder = EXCLUDED.holder, "
        "lease_until = EXCLUDED.lease_until, acquired_at = EXCLUDED.acquired_at "
        "WHERE l.owner IS NULL OR l.lease_until IS NULL OR l.lease_until <= clock_timestamp() "
        "OR l.owner = EXCLUDED.owner RETURNING l.fence) "
        "SELECT (SELECT fence FROM c) AS fence, (SELECT ceil(extract(epoch FROM (lease_until - clock_timestamp())) * 1000)"
        "::bigint FROM \"baton_locks\" WHERE name = :name) AS left_ms\n\\gset\n"
        "UPDATE \"baton_locks\" SET owner = NULL, holder = NULL, lease_until = NULL "
        "WHERE name = :name AND owner = :owner AND fence = :fence::bigint RETURNING pg_notify(:chan, name);\n"),
}
# The values: a name, its key and an owner of the lengths baton uses (32 hex digits; "host pid tid").
PG_VARS = {"key": "-6075914839716432371", "owner": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
           "holder": "bench-host 12345 140234567890123", "ms": "30000", "chan": "baton:baton_locks"}


def pgbench_bound(srv, mode, proto, n, label, work):
    """pgbench -n -c 1 -t N -M PROTO over TCP with the password, running mode's script; one
    transaction = one lock/unlock pair, so pairs_per_s = tps (without the connection time)."""
    if not shutil.which("pgbench"):
        log("  skipped %s: no pgbench (postgresql-client)" % label)
        return None
    f = os.path.join(work, "%s.sql" % mode)
    with open(f, "w") as out:
        out.write(PG_SCRIPTS[mode])
    host, port, user, pw = srv[:4]
    cmd = ["pgbench", "-n", "-c", "1", "-t", str(n), "-M", proto, "-f", f, "-h", host, "-p", str(port), "-U", user]
    for k, v in dict(PG_VARS, name="pgbench-%s" % mode).items():
        cmd += ["-D", "%s=%s" % (k, v)]
    r = run_raw(cmd + ["postgres"], env={"PGPASSWORD": pw, "PGSSLMODE": "disable"}, timeout=300)
    if r is None:
        return None
    rc, out, err, wall, cu, cs = r
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out)
    lat = re.search(r"latency average = ([0-9.]+) ms", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if rc != 0 or not tps or (failed and int(failed.group(1))):
        log("  skipped %s: %s" % (label, (err or out).strip()[-300:]))
        return None
    return record({"peer": "pgbench", "workload": "uncontended", "mode": mode, "protocol": proto, "n": n,
                   "pairs_per_s": float(tps.group(1)), "latency_avg_ms": float(lat.group(1)) if lat else None,
                   "_cpu_user_s": round(cu, 6), "_cpu_sys_s": round(cs, 6), "_wall_s": round(wall, 3)}, label)


def pg_herd_prepare(srv, d):
    """pg_stat_statements for the herd's counts (engine_ops): preloaded (a restart on the same
    port) and created in the database. False when it cannot be."""
    if pg_sql(srv, "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'") is None:
        return False
    r = subprocess.run(["bash", PG_SH, "restart", d], capture_output=True, text=True)
    if r.returncode != 0:
        log("  postgres.sh restart failed: %s" % r.stderr.strip()[-300:])
        return False
    return pg_sql(srv, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements") is not None


PG_ENGINE = {
    "key": "pg", "title": "PostgreSQL", "marker": "POSTGRES", "only": "postgres",
    "start": pg_start, "uri": pg_uri, "herd_prepare": pg_herd_prepare,
    # (mode, URI query, bounds: [(name, function(srv, n, label, work))]); the first bound is the target's
    "modes": [
        ("session", "", [("pgbench -M prepared", lambda s, n, lb, w: pgbench_bound(s, "session", "prepared", n, lb, w)),
                         ("pgbench -M extended", lambda s, n, lb, w: pgbench_bound(s, "session", "extended", n, lb, w))]),
        ("lease", "?mode=lease", [("pgbench -M prepared", lambda s, n, lb, w: pgbench_bound(s, "lease", "prepared", n, lb, w)),
                                  ("pgbench -M extended", lambda s, n, lb, w: pgbench_bound(s, "lease", "extended", n, lb, w))]),
        ("row", "?mode=row", []),
    ],
    "n": PG_N, "reps": PG_REPS, "herd_w": PG_HERD_W, "herd_rounds": PG_HERD_ROUNDS, "herd_modes": ("session", "lease"),
}
SQL_ENGINES = {"postgres": PG_ENGINE}


# ---- MySQL / MariaDB ----
#
# tests/servers/mysql.sh's server (MariaDB, redo log flushed once a second, no binary log); the
# bound is bench/peers/myraw.c, one Connector/C connection sending baton's exact statements as
# text (session.c grant_sql and the RELEASE_LOCK; lease.c claim and release), with mysqlslap -c 1
# running the same statements as a second reference.

def my_start(d):
    """A server of tests/servers/mysql.sh in D; (host, port, user, password, settings) or None."""
    r = subprocess.run(["bash", MY_SH, "start", d], capture_output=True, text=True)
    if r.returncode != 0:
        log("  skipped MariaDB: mysql.sh start failed (exit %d): %s" % (r.returncode, r.stderr.strip()[-300:]))
        return None
    SQL_DIRS.append((my_stop, d))
    port = int(r.stdout.strip().splitlines()[-1])
    user, pw = open(os.path.join(d, "user")).read().strip(), open(os.path.join(d, "password")).read().strip()
    cfg = {}
    q = subprocess.run(["bash", MY_SH, "sql", d, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@log_bin, "
                        "@@innodb_doublewrite, @@max_connections, @@have_ssl, @@innodb_buffer_pool_size"],
                       capture_output=True, text=True)
    vals = q.stdout.strip().split("\t") if q.returncode == 0 else []
    for k, v in zip(("server_version", "innodb_flush_log_at_trx_commit", "log_bin", "innodb_doublewrite",
                     "max_connections", "have_ssl", "innodb_buffer_pool_size"), vals):
        cfg[k] = v
    return ("127.0.0.1", port, user, pw, cfg)


def my_stop(d):
    subprocess.run(["bash", MY_SH, "stop", d], capture_output=True)


def my_uri(srv, qs=""):
    host, port, user, pw = srv[:4]
    return "mysql://%s:%s@%s:%d/baton%s" % (user, pw, host, port, qs)


def myraw_binary():
    """bench/peers/myraw.c compiled next to BATON (never committed); None when it cannot be."""
    src = os.path.join(ROOT, "bench", "peers", "myraw.c")
    out = os.path.join(os.path.dirname(BATON), "myraw")
    if not shutil.which("gcc") or not shutil.which("pkg-config"):
        log("  skipped the C loop bound: no gcc or pkg-config")
        return None
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libmariadb"], capture_output=True, text=True)
    if flags.returncode != 0:
        log("  skipped the C loop bound: no libmariadb (libmariadb-dev)")
        return None
    r = subprocess.run(["gcc", "-O2", "-o", out, src] + flags.stdout.split(), capture_output=True, text=True)
    if r.returncode != 0:
        log("  skipped the C loop bound: gcc failed: %s" % r.stderr.strip()[-300:])
        return None
    return out


_MYRAW = []
def myraw_bound(srv, mode, n, label, work):
    """myraw HOST PORT USER baton MODE N: pairs/s over N pairs on one connection (not timed)."""
    if not _MYRAW:
        _MYRAW.append(myraw_binary())
    if not _MYRAW[0]:
        return None
    host, port, user, pw = srv[:4]
    return run([_MYRAW[0], host, str(port), user, "baton", mode, str(n)], label, env={"MYSQL_PWD": pw})


def my_hex(s):
    return "X'%s'" % s.encode().hex()


def mysqlslap_bound(srv, mode, n, label, work):
    """mysqlslap -c 1 over TCP with the password, N pairs = 2N queries of the mode's two
    statements (as text, as baton sends them). Lease mode's release takes the claim's fence as
    LAST_INSERT_ID() (mysqlslap cannot carry a value from one query to the next: the same rows,
    the same round trips). mysqlslap's time includes its connection."""
    slap = shutil.which("mariadb-slap") or shutil.which("mysqlslap")
    if not slap:
        log("  skipped %s: no mysqlslap (mariadb-client)" % label)
        return None
    name, owner, holder = my_hex("mysqlslap-%s" % mode), my_hex(PG_VARS["owner"]), my_hex(PG_VARS["holder"])
    if mode == "session":
        q = ("INSERT INTO `baton_locks` (name, fence, owner, holder, acquired_at, lease_until) "
             "SELECT %s, LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6), NULL FROM DUAL WHERE GET_LOCK(%s, 5.000) = 1 "
             "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), owner = VALUES(owner), "
             "holder = VALUES(holder), acquired_at = VALUES(acquired_at), lease_until = NULL;"
             "SELECT RELEASE_LOCK(%s)" % (name, owner, holder, name, name))
    else:
        q = ("INSERT INTO `baton_locks` (name, fence, owner, holder, lease_until, acquired_at) VALUES (%s, "
             "LAST_INSERT_ID(1), %s, %s, UTC_TIMESTAMP(6) + INTERVAL 30000000 MICROSECOND, UTC_TIMESTAMP(6)) "
             "ON DUPLICATE KEY UPDATE fence = IF(@baton_ok := (owner IS NULL OR lease_until IS NULL OR "
             "lease_until <= UTC_TIMESTAMP(6) OR owner = VALUES(owner)), LAST_INSERT_ID(fence + 1), fence), "
             "holder = IF(@baton_ok, VALUES(holder), holder), acquired_at = IF(@baton_ok, VALUES(acquired_at), "
             "acquired_at), lease_until = IF(@baton_ok, VALUES(lease_until), lease_until), "
             "owner = IF(@baton_ok, VALUES(owner), owner);"
             "UPDATE `baton_locks` SET owner = NULL, holder = NULL, lease_until = NULL WHERE name = %s AND "
             "owner = %s AND fence = LAST_INSERT_ID()" % (name, owner, holder, name, owner))
    host, port, user, pw = srv[:4]
    cmd = [slap, "--no-defaults", "-h", host, "-P", str(port), "-u", user, "--create-schema=baton", "--no-drop",
           "--concurrency=1", "--iterations=1", "--number-of-queries=%d" % (2 * n), "--delimiter=;", "--query=" + q]
    r = run_raw(cmd, env={"MYSQL_PWD": pw}, timeout=300)
    if r is None:
        return None
    rc, out, err, wall, cu, cs = r
    avg = re.search(r"Average number of seconds to run all queries: ([0-9.]+) seconds", out)
    if rc != 0 or not avg or float(avg.group(1)) <= 0:
        log("  skipped %s: %s" % (label, (err or out).strip()[-300:]))
        return None
    return record({"peer": "mysqlslap", "workload": "uncontended", "mode": mode, "n": n,
                   "pairs_per_s": round(n / float(avg.group(1)), 1),
                   "_cpu_user_s": round(cu, 6), "_cpu_sys_s": round(cs, 6), "_wall_s": round(wall, 3)}, label)


MY_ENGINE = {
    "key": "my", "title": "MariaDB", "marker": "MYSQL", "only": "mysql",
    "start": my_start, "uri": my_uri, "herd_prepare": lambda srv, d: True,   # Com_* counters: always on
    "bound_text": "%s %s mode uncontended pairs/s vs `%s`, one connection running the same statements "
                  "(the round-trip bound)",
    "settings": ("innodb_flush_log_at_trx_commit", "log_bin", "innodb_doublewrite", "have_ssl", "max_connections"),
    "modes": [
        ("session", "", [("myraw.c", lambda s, n, lb, w: myraw_bound(s, "session", n, lb, w)),
                         ("mysqlslap -c 1", lambda s, n, lb, w: mysqlslap_bound(s, "session", n, lb, w))]),
        ("lease", "?mode=lease", [("myraw.c", lambda s, n, lb, w: myraw_bound(s, "lease", n, lb, w)),
                                  ("mysqlslap -c 1", lambda s, n, lb, w: mysqlslap_bound(s, "lease", n, lb, w))]),
        ("row", "?mode=row", []),
    ],
    "n": MY_N, "reps": MY_REPS, "herd_w": MY_HERD_W, "herd_rounds": MY_HERD_ROUNDS, "herd_modes": ("session", "lease"),
}
SQL_ENGINES["mysql"] = MY_ENGINE


def measure_sql(got, eng):
    """One server of the engine; per lock mode, interleaved and ENG["reps"] times each (the order
    rotating), its bounds and baton uncontended, then baton contended (8 processes, 5 s) and
    handoff (200 rounds); medians kept. Then baton's herd per mode, counted by engine_ops."""
    k = eng["key"]
    d = mktemp("baton-bench-%s." % k)
    srv = eng["start"](d)
    if not srv:
        return
    got[k + "_cfg"] = srv[4]
    log("%s: baton on %s, its bounds on the same server" % (eng["title"], eng["uri"](srv)))
    loadavg("%s start" % k)
    work = mktemp("baton-bench-%s-work." % k)
    for mode, qs, bounds in eng["modes"]:
        uri = eng["uri"](srv, qs)
        bench = lambda *a: [BATON, "bench", "-u", uri] + list(a) + ["--json"]
        sides = [(name, (lambda fn, lb: lambda: fn(srv, eng["n"], lb, work))(fn, "%s_%s_bound%d" % (k, mode, i)))
                 for i, (name, fn) in enumerate(bounds)]
        sides.append(("baton", lambda: run(bench("--workload", "uncontended", "--n", str(eng["n"])),
                                            "%s_%s_baton_unc" % (k, mode))))
        log("%s %s mode uncontended (%d rounds: %s, order rotating)" % (eng["title"], mode, eng["reps"],
                                                                       " / ".join(n for n, _ in sides)))
        runs = {n: [] for n, _ in sides}
        # baton creates its table (and row mode's sequence) on first use: the bounds need it
        run_raw(bench("--workload", "uncontended", "--n", "20"), timeout=60)
        for rep in range(eng["reps"]):
            j = rep % len(sides)
            for name, go in sides[j:] + sides[:j]:
                runs[name].append(go())
        for i, (name, _) in enumerate(bounds):
            got["%s_%s_bound%d" % (k, mode, i)] = median_run(runs[name], "pairs_per_s")
        got["%s_%s_unc" % (k, mode)] = median_run(runs["baton"], "pairs_per_s")
        for key, args, field in (("cont", ("--workload", "contended", "--clients", "8", "--seconds", "5"), "handoffs_per_s"),
                                 ("handoff", ("--workload", "handoff", "--rounds", "200"), "handoff_p50_us")):
            log("%s %s mode %s (%d runs)" % (eng["title"], mode, key, eng["reps"]))
            got["%s_%s_%s" % (k, mode, key)] = median_run(
                [run(bench(*args), "%s_%s_%s" % (k, mode, key)) for _ in range(eng["reps"])], field)
    loadavg("%s herd" % k)
    if not eng["herd_prepare"](srv, d):
        log("  skipped the herd's counts: the engine's statement statistics are not available")
    for mode, qs, _ in eng["modes"]:
        if mode not in eng["herd_modes"]:
            continue
        uri = eng["uri"](srv, qs)
        log("%s %s mode herd (statements per handoff: engine_ops)" % (eng["title"], mode))
        for w in eng["herd_w"]:
            key = "%s_%s_herd_%d" % (k, mode, w)
            got[key] = run([BATON, "bench", "-u", uri, "--workload", "herd", "--waiters", str(w), "--rounds",
                            str(eng["herd_rounds"]), "--json"], key, timeout=600)
            if not got[key] and w == eng["herd_w"][0]:
                break
    loadavg("%s end" % k)
    got[k + "_load"] = [r for r in results if r.get("workload") == "loadavg" and r.get("when", "").startswith(k + " ")]


def published(label, field):
    """The median FIELD of LABEL's results in the newest bench/results/*.jsonl that has them: the
    Redis and ZooKeeper rows the SQL tables are read beside. (value, stamp) or (None, None)."""
    for fn in sorted(os.listdir(os.path.join(ROOT, "bench", "results")), reverse=True) if os.path.isdir(
            os.path.join(ROOT, "bench", "results")) else []:
        vals = []
        for line in open(os.path.join(ROOT, "bench", "results", fn)):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if j.get("bench_label") == label and num(j, field) is not None:
                vals.append(j[field])
        if vals:
            return statistics.median(vals), fn[:-6]
    return None, None


def sql_rows(got, eng):
    """The SQL engine's table: (measure, baton, peer, ratio, target, met, short, nval) as zk_rows'."""
    k, t = eng["key"], eng["title"]
    g = lambda key, fld: num(got.get(key), fld)
    rows = []

    def row(measure, baton, peer, ratio, target, ok=None, info=False, short=None, nval=None):
        rows.append((measure, baton, peer, ratio if isinstance(ratio, str) else rfmt(ratio), target,
                     "info" if info else ok, short or measure, nval))

    for mode, qs, bounds in eng["modes"]:
        unc = g("%s_%s_unc" % (k, mode), "pairs_per_s")
        for i, (name, _) in enumerate(bounds):
            b = g("%s_%s_bound%d" % (k, mode, i), "pairs_per_s")
            r = div(unc, b)
            if i == 0:
                row(eng.get("bound_text", "%s %s mode uncontended pairs/s vs `%s -c 1` running the same statements "
                                          "(the round-trip bound)") % (t, mode, name),
                    f(unc), "%s %s" % (name, f(b)), r, "≥ 0.9", None if r is None else r >= 0.9,
                    short="%s %s ≥ 0.9 × %s" % (k, mode, name))
            else:
                row(("… vs `%s`" if name.endswith("-c 1") else "… vs `%s -c 1`") % name, f(unc),
                    "%s %s" % (name, f(b)), r, "—", info=True)
        if not bounds:
            row("%s %s mode uncontended pairs/s (no bound: baton only)" % (t, mode), f(unc), "", "—", "—", info=True)
        row("… acquire p50 µs", f(g("%s_%s_unc" % (k, mode), "acquire_p50_us")), "", "—", "—", info=True)
    red_c, red_cs = published("baton_cont", "handoffs_per_s")
    zk_c, zk_cs = published("zk_baton_cont", "handoffs_per_s")
    red_h, red_hs = published("baton_handoff", "handoff_p50_us")
    zk_h, zk_hs = published("zk_baton_handoff", "handoff_p50_us")
    ref = lambda rv, zv: "beside: Redis %s, ZooKeeper %s (baton, their published runs)" % (f(rv), f(zv))
    for mode, qs, _ in eng["modes"]:
        c = "%s_%s_cont" % (k, mode)
        mm = div(g(c, "min_per_client"), g(c, "max_per_client"))
        ok = (got.get(c) or {}).get("counter_ok")
        row("%s %s mode contended handoffs/s, 8 processes (min/max grants per client %s, wait p99 %s ms)"
            % (t, mode, f(mm, "%.2f"), f(g(c, "wait_p99_ms"), "%.2f")), f(g(c, "handoffs_per_s")),
            ref(red_c, zk_c), "—", "—", info=True)
        row("… counter_ok", "n/a" if ok is None else str(ok).lower(), "", "—", "true", ok,
            short="%s %s contended counter_ok" % (k, mode))
        h = "%s_%s_handoff" % (k, mode)
        row("%s %s mode handoff p50 µs, release → the blocked waiter's grant (p99 %s µs)"
            % (t, mode, f(g(h, "handoff_p99_us"))), f(g(h, "handoff_p50_us")), ref(red_h, zk_h), "—", "—", info=True)
    for mode in eng["herd_modes"]:
        for w in eng["herd_w"]:
            key = "%s_%s_herd_%d" % (k, mode, w)
            c, p50, loop = g(key, "commands_per_handoff"), g(key, "handoff_p50_us"), g(key, "commands_per_grant_loop")
            top = (got.get(key) or {}).get("commands") or ""
            cell = "n/a" if c is None else "%.2f (%s; handoff p50 %s µs; in an acquire/release loop %s per grant)" % (
                c, top or "none counted", f(p50), f(loop, "%.2f"))
            row("Herd, %s mode, W = %d: statements per handoff (engine_ops)" % (mode, w), cell, "", "—", "—", info=True)
    got[k + "_refs"] = {"redis": red_hs or red_cs, "zk": zk_hs or zk_cs}
    return rows


def render_sql(got, eng, stamp):
    k = eng["key"]
    rows = sql_rows(got, eng)
    metcell = {True: "met", False: "**not met**", None: "n/a", "info": "—"}
    t = ["| measure | baton | peer / bound | ratio | target | met |", "|---|---|---|---|---|---|"]
    esc = lambda x: str(x).replace("|", "\\|")    # the engine's op names ("sql|with") in a table cell
    t += ["| %s | %s | %s | %s | %s | %s |" % (esc(m), esc(b), esc(p), r, tg, metcell[ok]) for m, b, p, r, tg, ok, _, _ in rows]
    cfg = got.get(k + "_cfg") or {}
    la = got.get(k + "_load") or []
    load = ", ".join("%s %.2f" % (x["when"].split(" ", 1)[-1], x["load1"]) for x in la)
    how = "make bench" if len(SECTIONS) > 1 else "make bench BENCH_ARGS='--only %s'" % eng["only"]
    refs = got.get(k + "_refs") or {}
    s = ("Run of %s (`%s`, results in `bench/results/%s.jsonl`): one %s %s server started by its test script "
         "(%s), every client over TCP to 127.0.0.1 with the password; %d runs of each workload per client, "
         "interleaved (the order rotates), medians kept; uncontended %d pairs, contended 8 processes for 5 s, "
         "handoff 200 rounds, herd %d rounds at W = %s; the Redis and ZooKeeper figures beside are baton's in "
         "their published runs (%s, %s)"
         % (stamp, how, stamp, eng["title"], cfg.get("server_version", "?"),
            ", ".join("%s=%s" % (a, cfg[a]) for a in eng.get("settings", ("fsync", "synchronous_commit",
                                                                           "full_page_writes", "ssl"))
                      if a in cfg), eng["reps"], eng["n"], eng["herd_rounds"], ", ".join(map(str, eng["herd_w"])),
            refs.get("redis") or "none", refs.get("zk") or "none"))
    s += "; load average (1 min) at %s on %s CPUs.\n\n" % (load, os.cpu_count()) if load else ".\n\n"
    s += "\n".join(t)
    notmet = ["%s (%s)" % (sh, nv or r) for m, b, p, r, tg, ok, sh, nv in rows if ok is False]
    na = [sh for *_, ok, sh, _ in rows if ok is None]
    met = sum(1 for row in rows if row[5] is True)
    s += "\n\nTargets met: %d of %d measured." % (met, met + len(notmet))
    if notmet:
        s += " Not met: " + "; ".join(notmet) + "."
    if na:
        s += " Not measured in this run (n/a): " + "; ".join(na) + "."
    return s


# ---- etcd ----
#
# One fresh single-member etcd of its own (start_etcd: etcd's defaults, WAL fsync'd, data in a
# temporary directory) and on it, interleaved: the raw bounds of a lock cycle (the two writes a
# cycle costs at best: a create-if-absent txn and a delete) over each transport, python-etcd3
# (pylocks.py etcd: Debian's python3-etcd3, gRPC), the write latency (single Puts) over each
# transport, and baton on etcd:// over the gateway, plus `?transport=grpc` when this baton
# accepts it. Then `baton run` against `etcdctl lock`.

ETCD_N = 2000          # uncontended pairs: baton, python-etcd3 and the raw bounds alike
ETCD_REPS = 3          # rotations per workload (medians kept)
ETCD_PUT_N = 1000      # single Puts per write-latency run
ETCD_PUT_GAP_MS = 5    # the pause before each isolated Put (the handoff workload's hold is 5 ms too)
ETCD_CLI_LOOPS = 21    # CLI wall-time runs per command
ETCD_PEER_TIMEOUT = 60 # python-etcd3's contended and handoff runs: its lock may fail and hang
ETCD_TRANSPORTS = (("grpc", ""), ("gateway", "?transport=gateway"))   # the first is what etcd:// ships by default


def etcd_grpc_probe(uri):
    """Whether this baton takes URI (`?transport=grpc`): one short `baton bench`. (ok, why)."""
    r = run_raw([BATON, "bench", "-u", uri, "--workload", "uncontended", "--n", "10", "--json"], timeout=60)
    if r is None:
        return False, "the probe did not run"
    rc, out, err = r[:3]
    if rc == 0 and '"pairs_per_s"' in out:
        return True, ""
    why = (err.strip() or out.strip()).splitlines()[-1:] or ["exit %d" % rc]
    return False, why[0][-200:]


def run_may_fail(cmd, label, env=None, timeout=ETCD_PEER_TIMEOUT):
    """run() for a peer that may crash or hang (python-etcd3's lock under contention on Debian):
    its result, or a recorded failure {"failed": the error line} when it exits without one,
    prints a Python exception (it is ended 3 s later: the parent of a crashed worker waits
    forever) or runs past TIMEOUT."""
    e = dict(os.environ, **(env or {}))
    try:
        p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    except OSError as x:
        log("  skipped: %s: %s" % (cmd[0], x))
        return None
    errs = []
    t = threading.Thread(target=lambda: errs.extend(p.stderr), daemon=True)
    t.start()
    t0, crashed = time.perf_counter(), None
    try:
        while p.poll() is None:
            now = time.perf_counter()
            if crashed is None and any(re.match(r"^\w+(Error|Exception)\b", l) for l in errs):
                crashed = now
            if (crashed is not None and now - crashed > 3) or now - t0 > timeout:
                break
            time.sleep(0.1)
    finally:
        kill_group(p)
        p.wait()
    t.join(2)
    out = p.stdout.read()
    for line in out.splitlines():
        if line.strip().startswith("{"):
            try:
                j = json.loads(line)
            except ValueError:
                continue
            j.update(_wall_s=round(time.perf_counter() - t0, 3))
            return record(j, label)
    err = list(dict.fromkeys(l.strip() for l in errs if re.match(r"^\w+(Error|Exception)\b", l)))
    why = "; ".join(err) if err else ("no result within %d s" % timeout if p.returncode in (-9, None) else
                              "exit %s: %s" % (p.returncode, "".join(errs).strip()[-200:]))
    log("  %s failed: %s" % (label, why))
    return record({"peer": os.path.basename(cmd[1]) if len(cmd) > 1 else cmd[0], "workload": " ".join(cmd[2:4]),
                   "failed": why[:300], "tracebacks": sum(l.startswith("Traceback") for l in errs)}, label)


def measure_etcd(got):
    """The etcd section: each workload ETCD_REPS times per client, the order rotating, medians
    kept; python-etcd3's contended and handoff runs once more only when they did not fail."""
    url = start_etcd()
    if not url:
        return
    port = int(url.rsplit(":", 1)[1])
    base = "etcd://127.0.0.1:%d" % port
    ver = subprocess.run(["etcd", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    data = [d for d in TMPDIRS if os.path.basename(d).startswith("baton-bench-etcd.")][-1]
    fs = subprocess.run(["stat", "-f", "-c", "%T", data], capture_output=True, text=True).stdout.strip()
    got["etcd_cfg"] = {"version": ver.replace("etcd Version: ", ""), "data_fs": fs or "?"}
    log("etcd: baton on %s, the raw bounds and python-etcd3 on the same server" % base)
    loadavg("etcd start")
    transports = []
    for name, qs in ETCD_TRANSPORTS:
        ok, why = (True, "") if not qs else etcd_grpc_probe(base + qs)
        got["etcd_transport_" + name] = why or "ok"
        if ok:
            transports.append((name, base + qs))
        else:
            log("  skipped baton over %s (%s): %s" % (name, qs, why))
    pyok = subprocess.run([PY, "-c", "import etcd3, grpc"], capture_output=True).returncode == 0
    if not pyok:
        log("  skipped python-etcd3 and the gRPC bound and Put: python3-etcd3 is not installed")
    pyl, here = os.path.join(PEERS, "pylocks.py"), os.path.join(ROOT, "bench", "peers")
    env = {"PEER_ETCD_PORT": str(port)}
    bench = lambda uri, *a: [BATON, "bench", "-u", uri] + list(a) + ["--json"]
    py = lambda *a: [PY, pyl, "etcd"] + list(a) if pyok else None
    # (who, command or None, its field, may fail)
    work = {
        "unc": [("raw_gateway", [PY, os.path.join(PEERS, "etcdraw.py"), str(port), str(ETCD_N)], "pairs_per_s", False),
                ("raw_grpc", [PY, os.path.join(here, "etcdgrpcraw.py"), str(port), str(ETCD_N)] if pyok else None,
                 "pairs_per_s", False),
                ("py", py("uncontended", str(ETCD_N)), "pairs_per_s", False)]
               + [("baton_" + t, bench(u, "--workload", "uncontended", "--n", str(ETCD_N)), "pairs_per_s", False)
                  for t, u in transports],
        "cont": [("py", py("contended", "8", "5"), "handoffs_per_s", True)]
                + [("baton_" + t, bench(u, "--workload", "contended", "--clients", "8", "--seconds", "5"),
                    "handoffs_per_s", False) for t, u in transports],
        # the write latency sits in the handoff's rotation: the same load for the two figures compared
        "handoff": [("put_gateway", [PY, os.path.join(here, "etcdput.py"), "gateway", str(port), str(ETCD_PUT_N)],
                     "put_p50_us", False),
                    ("put_grpc", [PY, os.path.join(here, "etcdput.py"), "grpc", str(port), str(ETCD_PUT_N)] if pyok else None,
                     "put_p50_us", False),
                    ("putgap_gateway", [PY, os.path.join(here, "etcdput.py"), "gateway", str(port), str(ETCD_PUT_N // 2),
                                        str(ETCD_PUT_GAP_MS)], "put_p50_us", False),
                    ("putgap_grpc", [PY, os.path.join(here, "etcdput.py"), "grpc", str(port), str(ETCD_PUT_N // 2),
                                     str(ETCD_PUT_GAP_MS)] if pyok else None, "put_p50_us", False),
                    ("py", py("handoff", "200"), "handoff_p50_us", True)]
                   + [("baton_" + t, bench(u, "--workload", "handoff", "--rounds", "200"), "handoff_p50_us", False)
                      for t, u in transports],
    }
    for key, sides in work.items():
        sides = [s for s in sides if s[1]]
        log("etcd %s (%d rounds, %s, order rotating)" % (key, ETCD_REPS, " / ".join(s[0] for s in sides)))
        runs = {s[0]: [] for s in sides}
        for rep in range(ETCD_REPS):
            k = rep % len(sides)
            for who, cmd, field, may_fail in sides[k:] + sides[:k]:
                label = "etcd_%s_%s" % (who, key)
                if may_fail:
                    if any(r and "failed" in r for r in runs[who]):
                        continue          # it failed once: the same failure again only costs the timeout
                    runs[who].append(run_may_fail(cmd, label, env))
                else:
                    runs[who].append(run(cmd, label, env))
        for who, cmd, field, _ in sides:
            got["etcd_%s_%s" % (who, key)] = median_run(runs[who], field)
            got["etcd_runs_%s_%s" % (who, key)] = len([x for x in runs[who] if x and "failed" not in x])
            fail = [x for x in runs[who] if x and "failed" in x]
            if fail:
                got["etcd_%s_%s_failed" % (who, key)] = fail[0]["failed"]
    loadavg("etcd cli")
    log("etcd CLI wall time (%d runs each, interleaved)" % ETCD_CLI_LOOPS)
    cmds = {"baton " + t: [BATON, "run", "-u", u, "bench-cli", "--", "true"] for t, u in transports}
    cmds["etcdctl"] = ["etcdctl", "--endpoints=" + url, "lock", "bench-cli", "true"]
    got["etcd_cli"] = cli_walls(cmds, ETCD_CLI_LOOPS, "etcd")
    loadavg("etcd end")
    got["etcd_load"] = [r for r in results if r.get("workload") == "loadavg" and r.get("when", "").startswith("etcd")]


def etcd_rows(got):
    """The etcd table: the targets of issue 14 per baton transport, against the raw bound of that
    transport, python-etcd3 and the write latency, all measured in this run."""
    g = lambda k, fld: num(got.get(k), fld)
    rows = []

    def row(measure, baton, peer, ratio, target, ok=None, info=False, short=None, nval=None):
        rows.append((measure, baton, peer, ratio if isinstance(ratio, str) else rfmt(ratio), target,
                     "info" if info else ok, short or measure, nval))

    if "etcd_cfg" not in got:
        row("etcd: not measured (no etcd server: etcd/etcdctl missing, or it did not start)", "n/a", "", "—", "—",
            info=True)
        return rows
    pyfail = lambda key: got.get("etcd_py_%s_failed" % key)
    pycell = lambda key, fld, spec="%.1f": ("python-etcd3 failed: %s" % pyfail(key)[:200] if pyfail(key)
                                            else "python-etcd3 " + f(g("etcd_py_" + key, fld), spec))
    bounds = {"gateway": ("etcdraw.py: the JSON gateway, one keep-alive HTTP/1.1 connection", "raw_gateway"),
              "grpc": ("etcdgrpcraw.py: gRPC, python3-etcd3's stubs, one channel", "raw_grpc")}
    py = g("etcd_py_unc", "pairs_per_s")
    for t, qs in ETCD_TRANSPORTS:
        uri = "`etcd://…%s`" % qs
        if got.get("etcd_transport_" + t) != "ok":
            row("etcd over %s (%s): not measured, this baton does not take it (%s)" % (
                t, uri, str(got.get("etcd_transport_" + t, "no etcd"))[:120]), "n/a", "", "—", "—", info=True)
            continue
        unc = g("etcd_baton_%s_unc" % t, "pairs_per_s")
        text, key = bounds[t]
        b = g("etcd_%s_unc" % key, "pairs_per_s")
        r = div(unc, b)
        row("etcd uncontended pairs/s, baton %s vs the raw bound of its transport (%s: create-if-absent txn + "
            "delete)" % (uri, text), f(unc), "raw bound %s" % f(b), r, "≥ 0.9", None if r is None else r >= 0.9,
            short="etcd %s uncontended ≥ 0.9 × %s bound" % (t, t))
        r = div(unc, py)
        row("… vs python-etcd3 (gRPC, three writes per cycle)", f(unc), "python-etcd3 " + f(py), r, "≥ 1.3",
            None if r is None else r >= 1.3, short="etcd %s uncontended ≥ 1.3 × python-etcd3" % t)
        bp, pp = g("etcd_baton_%s_unc" % t, "acquire_p50_us"), g("etcd_py_unc", "acquire_p50_us")
        row("… acquire p50 µs (ratio = python-etcd3 / baton)", f(bp), "python-etcd3 " + f(pp), div(pp, bp), "—",
            info=True)
    bg, br = g("etcd_baton_gateway_unc", "pairs_per_s"), g("etcd_baton_grpc_unc", "pairs_per_s")
    if bg is not None and br is not None:
        row("baton uncontended pairs/s: gRPC (the default) vs `?transport=gateway`", f(br), "gateway " + f(bg), div(br, bg), "—",
            info=True)
    rg, rr = g("etcd_raw_gateway_unc", "pairs_per_s"), g("etcd_raw_grpc_unc", "pairs_per_s")
    row("Raw bounds: gRPC vs the gateway (pairs/s)", "", "gRPC %s, gateway %s" % (f(rr), f(rg)), div(rr, rg), "—",
        info=True)
    for kind, text in (("put", "back to back"), ("putgap", "each after a %d ms pause (an isolated write)" % ETCD_PUT_GAP_MS)):
        pg, pgr = got.get("etcd_%s_gateway_handoff" % kind) or {}, got.get("etcd_%s_grpc_handoff" % kind) or {}
        row("etcd write latency: one Put, p50 µs (p99), one connection, %s" % text, "",
            "gateway %s (%s), gRPC %s (%s)" % (f(num(pg, "put_p50_us")), f(num(pg, "put_p99_us")),
                                               f(num(pgr, "put_p50_us")), f(num(pgr, "put_p99_us"))), "—", "—", info=True)

    for t, qs in ETCD_TRANSPORTS:
        if got.get("etcd_transport_" + t) != "ok":
            continue
        c = "etcd_baton_%s_cont" % t
        v, p = g(c, "handoffs_per_s"), g("etcd_py_cont", "handoffs_per_s")
        row("etcd contended handoffs/s, 8 processes, baton over %s" % t, f(v), pycell("cont", "handoffs_per_s"),
            "—" if pyfail("cont") else div(v, p), "—", info=True)
        mm = div(g(c, "min_per_client"), g(c, "max_per_client"))
        row("… min/max grants per client (FIFO)", f(mm, "%.2f"), "", "—", "≥ 0.8", None if mm is None else mm >= 0.8,
            short="etcd %s contended FIFO min/max" % t)
        row("… wait p50 / p99 ms", "%s / %s" % (f(g(c, "wait_p50_ms"), "%.2f"), f(g(c, "wait_p99_ms"), "%.2f")), "",
            "—", "—", info=True)
        ok = (got.get(c) or {}).get("counter_ok")
        row("… counter_ok", "n/a" if ok is None else str(ok).lower(), "", "—", "true", ok,
            short="etcd %s contended counter_ok" % t)
        h = "etcd_baton_%s_handoff" % t
        v = g(h, "handoff_p50_us")
        w = num(got.get("etcd_put_%s_handoff" % t), "put_p50_us")
        r = div(v, w)
        row("etcd handoff p50 µs, release → the blocked waiter's grant, baton over %s (ratio = handoff / the Put "
            "p50 over %s)" % (t, t), f(v), "Put p50 %s" % f(w), r, "≤ 2", None if r is None else r <= 2,
            short="etcd %s handoff p50 ≤ 2 × write latency" % t)
        w = num(got.get("etcd_putgap_%s_handoff" % t), "put_p50_us")
        row("… the same handoff p50 against an isolated Put's p50 over %s (%d ms pause before each)"
            % (t, ETCD_PUT_GAP_MS), f(v), "isolated Put p50 %s" % f(w), div(v, w), "—", info=True)
        row("… handoff p99 µs; python-etcd3's handoff", f(g(h, "handoff_p99_us")),
            pycell("handoff", "handoff_p50_us") + ("" if pyfail("handoff") else " p50"), "—", "—", info=True)

    cl = got.get("etcd_cli") or {}
    wall = lambda k: "n/a" if k not in cl else "%s ms (mean %s)" % (f(num(cl[k], "wall_median_ms"), "%.2f"),
                                                                    f(num(cl[k], "wall_mean_ms"), "%.2f"))
    for t, qs in ETCD_TRANSPORTS:
        if got.get("etcd_transport_" + t) != "ok":
            continue
        r = div(num(cl.get("baton " + t), "wall_median_ms"), num(cl.get("etcdctl"), "wall_median_ms"))
        row("CLI: `baton run -u etcd://…%s NAME -- true` median wall" % qs, wall("baton " + t),
            "`etcdctl lock NAME true` " + wall("etcdctl"), r, "≤ 0.5", None if r is None else r <= 0.5,
            short="etcd %s CLI ≤ 0.5 × etcdctl lock" % t)
    return rows


def render_etcd(got, stamp):
    rows = etcd_rows(got)
    metcell = {True: "met", False: "**not met**", None: "n/a", "info": "—"}
    t = ["| measure | baton | peer / bound | ratio | target | met |", "|---|---|---|---|---|---|"]
    esc = lambda x: str(x).replace("|", "\\|")
    t += ["| %s | %s | %s | %s | %s | %s |" % (esc(m), esc(b), esc(p), r, tg, metcell[ok]) for m, b, p, r, tg, ok, _, _ in rows]
    cfg = got.get("etcd_cfg") or {}
    la = got.get("etcd_load") or []
    load = ", ".join("%s %.2f" % (x["when"].split(" ", 1)[-1], x["load1"]) for x in la)
    how = "make bench" if len(SECTIONS) > 1 else "make bench BENCH_ARGS='--only etcd'"
    s = ("Run of %s (`%s`, results in `bench/results/%s.jsonl`): one fresh single-member etcd %s (its defaults: "
         "the WAL fsync'd at every write, data on %s), the raw bounds, the Put latency, python-etcd3 and baton "
         "`etcd://` on it, %d runs of each workload per client, interleaved (the order rotates), medians kept; "
         "uncontended %d pairs, contended 8 processes for 5 s, handoff 200 rounds, Puts %d per run back to back "
         "and %d after a %d ms pause each, CLI %d runs per command" % (
             stamp, how, stamp, cfg.get("version", "?"), cfg.get("data_fs", "?"), ETCD_REPS, ETCD_N, ETCD_PUT_N,
             ETCD_PUT_N // 2, ETCD_PUT_GAP_MS, ETCD_CLI_LOOPS))
    s += "; load average (1 min) at %s on %s CPUs.\n\n" % (load, os.cpu_count()) if load else ".\n\n"
    s += "\n".join(t)
    notmet = ["%s (%s)" % (sh, nv or r) for m, b, p, r, tg, ok, sh, nv in rows if ok is False]
    na = [sh for *_, ok, sh, _ in rows if ok is None]
    met = sum(1 for row in rows if row[5] is True)
    s += "\n\nTargets met: %d of %d measured." % (met, met + len(notmet))
    if notmet:
        s += " Not met: " + "; ".join(notmet) + "."
    if na:
        s += " Not measured in this run (n/a): " + "; ".join(na) + "."
    return s


def measure():
    got, svgs = {}, []
    if "redis" in SECTIONS:
        measure_redis(got, svgs)
    if "redlock" in SECTIONS:
        stop_servers()                    # the Redis section's servers and etcd: done with
        measure_redlock(got)
    if "zk" in SECTIONS:
        stop_servers()                    # the RedLock nodes too
        measure_zk(got)
    for name, eng in SQL_ENGINES.items():
        if name in SECTIONS:
            stop_servers()
            measure_sql(got, eng)
    if "etcd" in SECTIONS:
        stop_servers()
        measure_etcd(got)
    return got, svgs


# ---- the table ----

def num(r, k):
    v = r.get(k) if isinstance(r, dict) else None
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def rfmt(r):
    """A ratio: three decimals below 10 (so 0.897 does not read as a met 0.90), one above."""
    return "n/a" if r is None else ("%.3f" % r if r < 10 else "%.1f" % r)


def f(v, spec="%.1f"):
    return "n/a" if v is None else spec % v


def div(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def bound(got, lay):
    a, r = num(got.get("rb_acq_" + lay), "requests_per_s"), num(got.get("rb_rel_" + lay), "requests_per_s")
    return 1 / (1 / a + 1 / r) if a and r else None


def build_rows(got):
    rows = []   # (measure, baton, peer, ratio, target, met, short); met: True, False, None (n/a), "info"

    def row(measure, baton, peer, ratio, target, ok=None, info=False, short=None, nval=None):
        """ratio: a number, None (n/a) or a string ("—": no ratio for this row)."""
        met = "info" if info else ok
        rows.append((measure, baton, peer, ratio if isinstance(ratio, str) else rfmt(ratio), target, met,
                     short or measure, nval))

    g = lambda k, fld: num(got.get(k), fld)
    unc, py = g("baton_unc", "pairs_per_s"), g("py_unc", "pairs_per_s")
    r = div(unc, py)
    row("Redis uncontended pairs/s", f(unc), "redis-py " + f(py), r, "≥ 1.15", None if r is None else r >= 1.15,
        short="uncontended ≥ 1.15 × redis-py")
    for lay, key in (("default (Redisson) layout", "default"), ("`?layout=simple`", "simple")):
        b = bound(got, key)
        v = g("baton_unc" if key == "default" else "baton_unc_simple", "pairs_per_s")
        r = div(v, b)
        row("Redis uncontended pairs/s vs the EVALSHA bound, %s" % lay, f(v),
            "redis-benchmark c=1 acquire %s / release %s → %s pairs/s" % (
                f(g("rb_acq_" + key, "requests_per_s"), "%.0f"), f(g("rb_rel_" + key, "requests_per_s"), "%.0f"), f(b)),
            r, "≥ 0.9", None if r is None else r >= 0.9, short="uncontended ≥ 0.9 × EVALSHA bound (%s layout)" % key)
        ga, rl = g("rb_grant_" + key, "requests_per_s"), g("rb_rel_" + key, "requests_per_s")
        bg = 1.0 / (1.0 / ga + 1.0 / rl) if ga and rl else None
        r = div(v, bg)
        row("… the same bound with the acquire on a fresh key each time (the granting path baton's acquires take), %s" % lay,
            f(v), "redis-benchmark c=1 granting acquire %s / release %s → %s pairs/s" % (f(ga, "%.0f"), f(rl, "%.0f"), f(bg)),
            r, "≥ 0.9", None if r is None else r >= 0.9,
            short="uncontended ≥ 0.9 × EVALSHA granting bound (%s layout)" % key)

    pairs = UNC_N + min(UNC_N // 10, 200)     # timed pairs + the warm-up both clients run
    bc = cpu_per_pair(got.get("baton_unc"), got.get("base_baton"), pairs)
    pc = cpu_per_pair(got.get("py_unc"), got.get("base_py"), pairs)
    tot = lambda c: None if c is None else c[0] + c[1]
    r = div(tot(bc), tot(pc))
    cell = lambda c: "n/a" if c is None else "%.1f (user %.1f, sys %.1f)" % (c[0] + c[1], c[0], c[1])
    row("Redis uncontended client CPU µs per pair, user+sys (getrusage of the child, startup subtracted)",
        cell(bc), "redis-py " + cell(pc), r, "≤ 0.15", None if r is None else r <= 0.15,
        short="CPU per pair ≤ 0.15 × redis-py")
    row("… user CPU only", f(bc and bc[0]), "redis-py " + f(pc and pc[0]), div(bc and bc[0], pc and pc[0]), "—", info=True)
    rb = [got.get("rb_acq_default"), got.get("rb_rel_default")]
    rbcpu = None
    if all(rb):
        rbcpu = statistics.mean(num(x, "cpu_user_us_per_req") + num(x, "cpu_sys_us_per_req") for x in rb)
    row("… baton CPU per pair vs 2 × redis-benchmark's CPU per request (the loopback round-trip floor)",
        f(tot(bc)), "2 × %s" % f(rbcpu, "%.2f"), div(tot(bc), rbcpu and 2 * rbcpu), "—", info=True)
    ip = got.get("baton_unc") or {}
    row("… baton's in-process CPU per pair (its own getrusage)",
        f(num(ip, "cpu_us_per_pair"), "%.1f") + ("" if num(ip, "cpu_user_us_per_pair") is None else " (user %.1f, sys %.1f)" % (
            num(ip, "cpu_user_us_per_pair"), num(ip, "cpu_sys_us_per_pair") or 0)), "", "—", "—", info=True)
    for kind, label in (("redlock", "node redlock"), ("semaphore", "node redis-semaphore")):
        v = g("node_%s_unc" % kind, "pairs_per_s")
        row("Redis uncontended pairs/s vs %s" % label, f(unc), label + " " + f(v), div(unc, v), "—", info=True)
    s1 = g("rb_set_c1", "requests_per_s")
    row("redis-py pairs/s vs plain SET NX round trips (c=1, a pair = 2)", f(py), "SET NX/2 " + f(s1 and s1 / 2),
        div(py, s1 and s1 / 2), "—", info=True)

    for key, label in (("baton_handoff", "default"), ("baton_handoff_fair", "fair")):
        v, p = g(key, "handoff_p50_us"), g("py_handoff", "handoff_p50_us")
        row("Redis handoff p50 µs, %s lock (ratio = redis-py / baton)" % label, f(v), "redis-py " + f(p),
            div(p, v), "≤ 500 µs", None if v is None else v <= 500, short="handoff p50 (%s)" % label)

    v, p = g("baton_cont", "handoffs_per_s"), g("py_cont", "handoffs_per_s")
    r = div(v, p)
    row("Redis contended handoffs/s, 8 processes, default lock", f(v), "redis-py " + f(p), r, "≥ 1", None if r is None else r >= 1,
        short="contended ≥ redis-py")
    v = g("baton_cont_fair", "handoffs_per_s")
    p = g("node_redlock_cont", "handoffs_per_s")
    r = div(v, p)
    row("Redis contended handoffs/s, 8 processes, `--fair`", f(v), "node redlock " + f(p), r, "≥ 2", None if r is None else r >= 2,
        short="contended --fair ≥ 2 × node redlock")
    p = g("node_semaphore_cont", "handoffs_per_s")
    row("… vs node redis-semaphore", f(v), "redis-semaphore " + f(p), div(v, p), "—", info=True)
    v, p = g("baton_cont_fair", "wait_p99_ms"), g("node_redlock_cont", "wait_p99_ms")
    row("Redis contended `--fair` wait p99 ms", f(v, "%.2f"), "node redlock " + f(p, "%.2f"), div(p, v), "≤ 10 ms",
        None if v is None else v <= 10, short="contended --fair wait p99")
    mm = lambda k: div(g(k, "min_per_client"), g(k, "max_per_client"))
    v = mm("baton_cont_fair")
    row("Redis contended `--fair` min/max grants per client", f(v, "%.2f"), "node redlock " + f(mm("node_redlock_cont"), "%.2f"),
        "—", "≥ 0.8", None if v is None else v >= 0.8, short="contended --fair min/max")
    oks = [(k, (got.get(k) or {}).get("counter_ok")) for k in ("baton_cont", "baton_cont_fair")]
    okv = [o for _, o in oks if o is not None]
    row("Redis contended counter_ok (default, fair)", ", ".join("n/a" if o is None else str(o).lower() for _, o in oks),
        "", "—", "true", all(okv) if okv else None, short="contended counter_ok")

    v = g("baton_many", "pairs_per_s")
    b = g("rb_acq_c50", "requests_per_s")
    r = div(v and 2 * v, b)
    row("Many: 50 locks on one client, scripts/s (2 × pairs/s)", f(v and 2 * v), "redis-benchmark c=50 acquire EVALSHA " + f(b),
        r, "≥ 0.5", None if r is None else r >= 0.5, short="many ≥ 0.5 × EVALSHA c=50")

    fair_cmds = []
    for fair in (True, False):
        for w in HERD_W:
            k = "herd_%d_%s" % (w, "fair" if fair else "default")
            c, p50 = g(k, "commands_per_handoff"), g(k, "handoff_p50_us")
            loop = g(k, "commands_per_grant_loop")
            if fair and c is not None:
                fair_cmds.append(c)
            cell = "n/a" if c is None else "%.1f (handoff p50 %s µs; in an acquire/release loop %s per grant, re-queueing included)" % (
                c, f(p50), f(loop))
            if fair:
                row("Herd, `--fair`, W = %d: server commands per handoff" % w, cell, "", "—", "≤ 6",
                    None if c is None else c <= 6, short="herd --fair ≤ 6 commands per handoff W=%d" % w, nval=f(c))
            else:
                row("Herd, default lock, a client per waiter, W = %d: server commands per handoff" % w, cell, "", "—", "—",
                    info=True)
    shared_cmds = []
    for w in HERD_W:
        k = "herd_%d_default_shared" % w
        c, p50 = g(k, "commands_per_handoff"), g(k, "handoff_p50_us")
        loop = g(k, "commands_per_grant_loop")
        if c is not None:
            shared_cmds.append(c)
        cell = "n/a" if c is None else "%.1f (handoff p50 %s µs; in an acquire/release loop %s per grant, re-queueing included)" % (
            c, f(p50), f(loop))
        row("Herd, default lock, one client, W = %d: server commands per handoff" % w, cell, "", "—", "—", info=True)
    if len(shared_cmds) == len(HERD_W):
        spread = max(shared_cmds) - min(shared_cmds)
        row("Herd, default lock, one client: commands per handoff constant over 1…256 waiters (max − min)",
            "%.1f" % spread, "", "—", "≤ 2", spread <= 2, short="herd default one client constant")
    else:
        row("Herd, default lock, one client: commands per handoff constant over 1…256 waiters (max − min)", "n/a", "",
            "—", "≤ 2", None, short="herd default one client constant")
    if len(fair_cmds) == len(HERD_W):
        spread = max(fair_cmds) - min(fair_cmds)
        row("Herd, `--fair`: commands per handoff constant over 1…256 waiters (max − min)", "%.1f" % spread, "", "—",
            "≤ 1", spread <= 1, short="herd --fair constant")
    else:
        row("Herd, `--fair`: commands per handoff constant over 1…256 waiters (max − min)", "n/a", "", "—", "≤ 1", None,
            short="herd --fair constant")

    m = got.get("memory") or {}
    for fld, label, lim in (("held_bytes_per_lock", "held", 1024), ("waiting_bytes_per_lock", "waiting", 2048)):
        v = num(m, fld)
        row("Memory: client heap per %s lock, bytes" % label, f(v, "%.0f"), "", "—", "≤ %d" % lim, None if v is None else v <= lim,
            short="memory per %s lock" % label)

    cf, cr = got.get("cli_file") or {}, got.get("cli_redis") or {}
    wall = lambda d, k: "n/a" if k not in d else "%s ms (mean %s)" % (f(num(d[k], "wall_median_ms"), "%.2f"), f(num(d[k], "wall_mean_ms"), "%.2f"))
    med = lambda d, k: num(d.get(k), "wall_median_ms")
    r = div(med(cf, "baton"), med(cf, "flock"))
    row("CLI: `baton run -u file://DIR NAME -- true` median wall", wall(cf, "baton"), "`flock FILE true` " + wall(cf, "flock"),
        r, "≤ 1.5", None if r is None else r <= 1.5, short="CLI file ≤ 1.5 × flock")
    r = div(med(cr, "baton"), med(cr, "etcdctl"))
    row("CLI: `baton run -u redis://… NAME -- true` median wall", wall(cr, "baton"), "`etcdctl lock NAME true` " + wall(cr, "etcdctl"),
        r, "≤ 0.5", None if r is None else r <= 0.5, short="CLI Redis ≤ 0.5 × etcdctl lock")
    return rows


def redlock_rows(got):
    """The RedLock table: baton on redlock:// against node-redlock on the same servers. No
    targets were set for RedLock: ratios only."""
    g = lambda k, fld: num(got.get(k), fld)
    rows = []
    def row(measure, bk, nk, fld, spec="%.1f", inverse=False):
        b, n = g(bk, fld), g(nk, fld)
        rows.append((measure, f(b, spec), "node-redlock " + f(n, spec), rfmt(div(n, b) if inverse else div(b, n))))
    row("RedLock uncontended pairs/s (ratio = baton / node-redlock)", "redlock_baton_unc", "redlock_node_unc", "pairs_per_s")
    row("… acquire p50 µs (ratio = node-redlock / baton)", "redlock_baton_unc", "redlock_node_unc", "acquire_p50_us",
        inverse=True)
    row("RedLock contended handoffs/s, 8 processes (ratio = baton / node-redlock)", "redlock_baton_cont",
        "redlock_node_cont", "handoffs_per_s")
    row("… wait p99 ms (ratio = node-redlock / baton)", "redlock_baton_cont", "redlock_node_cont", "wait_p99_ms", "%.2f",
        inverse=True)
    mm = lambda k: div(g(k, "min_per_client"), g(k, "max_per_client"))
    rows.append(("… min/max grants per client", f(mm("redlock_baton_cont"), "%.2f"),
                 "node-redlock " + f(mm("redlock_node_cont"), "%.2f"), "—"))
    ok = lambda k: "n/a" if (got.get(k) or {}).get("counter_ok") is None else str(got[k]["counter_ok"]).lower()
    rows.append(("… counter_ok", ok("redlock_baton_cont"), "node-redlock " + ok("redlock_node_cont"), "—"))
    row("RedLock handoff p50 µs, release → the blocked waiter's grant (ratio = node-redlock / baton)",
        "redlock_baton_handoff", "redlock_node_handoff", "handoff_p50_us", inverse=True)
    row("… handoff p99 µs (ratio = node-redlock / baton)", "redlock_baton_handoff", "redlock_node_handoff",
        "handoff_p99_us", inverse=True)
    return rows


def render_redlock(got, stamp):
    rows = redlock_rows(got)
    t = ["| measure | baton | peer | ratio |", "|---|---|---|---|"]
    t += ["| %s | %s | %s | %s |" % r for r in rows]
    runs = got.get("redlock_runs_unc") or (0, 0)
    la = got.get("redlock_load") or []
    load = ", ".join("%s %.2f" % (x["when"].split()[-1], x["load1"]) for x in la)
    how = "make bench" if len(SECTIONS) > 1 else "make bench BENCH_ARGS='--only redlock'"
    s = ("Run of %s (`%s`, results in `bench/results/%s.jsonl`): %d local Redis servers "
         "(tests/servers/redis.sh, no persistence), baton `redlock://` and node-redlock 4.2.0 on the same "
         "servers, %d runs of each workload per client, interleaved (the order alternates), medians kept"
         % (stamp, how, stamp, got.get("redlock_nodes", 0), REDLOCK_REPS))
    s += "; load average (1 min) at %s on %s CPUs.\n\n" % (load, os.cpu_count()) if load else ".\n\n"
    s += "\n".join(t)
    if runs[1] == 0:
        s += "\n\nnode-redlock did not run (node or its npm packages missing): its cells read n/a."
    return s


ZK_HERD_SPREAD = 0.5   # "constant": max − min of the herd's operations per handoff over HERD_W


def zk_rows(got):
    """The ZooKeeper table: the targets of issue 12, against kazoo and the raw C client's bound
    measured in the same run. Rows as build_rows' (measure, baton, peer, ratio, target, met, short, nval)."""
    g = lambda k, fld: num(got.get(k), fld)
    rows = []

    def row(measure, baton, peer, ratio, target, ok=None, info=False, short=None, nval=None):
        rows.append((measure, baton, peer, ratio if isinstance(ratio, str) else rfmt(ratio), target,
                     "info" if info else ok, short or measure, nval))

    unc, rawb, kz = g("zk_baton_unc", "pairs_per_s"), g("zk_raw_unc", "pairs_per_s"), g("zk_kazoo_unc", "pairs_per_s")
    r = div(unc, rawb)
    row("ZooKeeper uncontended pairs/s vs the raw bound (zkraw.c: the C client's synchronous create + delete "
        "of an ephemeral sequential node, one session)", f(unc), "raw bound " + f(rawb), r, "≥ 0.9",
        None if r is None else r >= 0.9, short="zk uncontended ≥ 0.9 × raw bound")
    r = div(unc, kz)
    row("ZooKeeper uncontended pairs/s vs kazoo", f(unc), "kazoo " + f(kz), r, "≥ 1.5",
        None if r is None else r >= 1.5, short="zk uncontended ≥ 1.5 × kazoo")
    b, k = g("zk_baton_unc", "acquire_p50_us"), g("zk_kazoo_unc", "acquire_p50_us")
    row("… acquire p50 µs (ratio = kazoo / baton)", f(b), "kazoo " + f(k), div(k, b), "—", info=True)
    row("… raw bound vs kazoo (pairs/s)", f(rawb), "kazoo " + f(kz), div(rawb, kz), "—", info=True)

    v, p = g("zk_baton_cont", "handoffs_per_s"), g("zk_kazoo_cont", "handoffs_per_s")
    r = div(v, p)
    row("ZooKeeper contended handoffs/s, 8 processes", f(v), "kazoo " + f(p), r, "≥ 1.5",
        None if r is None else r >= 1.5, short="zk contended ≥ 1.5 × kazoo")
    mm = lambda key: div(g(key, "min_per_client"), g(key, "max_per_client"))
    v = mm("zk_baton_cont")
    row("… min/max grants per client (FIFO)", f(v, "%.2f"), "kazoo " + f(mm("zk_kazoo_cont"), "%.2f"), "—", "≥ 0.8",
        None if v is None else v >= 0.8, short="zk contended min/max")
    b, k = g("zk_baton_cont", "wait_p99_ms"), g("zk_kazoo_cont", "wait_p99_ms")
    row("… wait p99 ms (ratio = kazoo / baton)", f(b, "%.2f"), "kazoo " + f(k, "%.2f"), div(k, b), "—", info=True)
    ok = lambda key: None if (got.get(key) or {}).get("counter_ok") is None else got[key]["counter_ok"]
    okb = ok("zk_baton_cont")
    row("… counter_ok", "n/a" if okb is None else str(okb).lower(),
        "kazoo " + ("n/a" if ok("zk_kazoo_cont") is None else str(ok("zk_kazoo_cont")).lower()), "—", "true", okb,
        short="zk contended counter_ok")

    v, p = g("zk_baton_handoff", "handoff_p50_us"), g("zk_kazoo_handoff", "handoff_p50_us")
    r = div(p, v)
    row("ZooKeeper handoff p50 µs, release → the blocked waiter's grant (ratio = kazoo / baton)", f(v), "kazoo " + f(p),
        r, "≤ kazoo (ratio ≥ 1)", None if r is None else r >= 1, short="zk handoff p50 ≤ kazoo")
    b, k = g("zk_baton_handoff", "handoff_p99_us"), g("zk_kazoo_handoff", "handoff_p99_us")
    row("… handoff p99 µs (ratio = kazoo / baton)", f(b), "kazoo " + f(k), div(k, b), "—", info=True)

    counts = []
    for w in HERD_W:
        key = "zk_herd_%d" % w
        c, p50, loop = g(key, "commands_per_handoff"), g(key, "handoff_p50_us"), g(key, "commands_per_grant_loop")
        if c is not None:
            counts.append(c)
        cell = "n/a" if c is None else "%.2f (handoff p50 %s µs; in an acquire/release loop %s per grant, re-queueing included)" % (
            c, f(p50), f(loop, "%.2f"))
        row("Herd, W = %d: ZooKeeper operations per handoff (the server's packets_received)" % w, cell, "", "—", "—",
            info=True)
    if len(counts) == len(HERD_W):
        spread = max(counts) - min(counts)
        row("Herd: operations per handoff constant over 1…256 waiters (max − min)", "%.2f" % spread, "", "—",
            "≤ %.1f" % ZK_HERD_SPREAD, spread <= ZK_HERD_SPREAD, short="zk herd constant")
    else:
        row("Herd: operations per handoff constant over 1…256 waiters (max − min)", "n/a", "", "—",
            "≤ %.1f" % ZK_HERD_SPREAD, None, short="zk herd constant")
    return rows


def render_zk(got, stamp):
    rows = zk_rows(got)
    metcell = {True: "met", False: "**not met**", None: "n/a", "info": "—"}
    t = ["| measure | baton | peer / bound | ratio | target | met |", "|---|---|---|---|---|---|"]
    t += ["| %s | %s | %s | %s | %s | %s |" % (m, b, p, r, tg, metcell[ok]) for m, b, p, r, tg, ok, _, _ in rows]
    cfg = got.get("zk_cfg") or {}
    la = got.get("zk_load") or []
    load = ", ".join("%s %.2f" % (x["when"].split(" ", 1)[-1], x["load1"]) for x in la)
    how = "make bench" if len(SECTIONS) > 1 else "make bench BENCH_ARGS='--only zk'"
    s = ("Run of %s (`%s`, results in `bench/results/%s.jsonl`): one standalone ZooKeeper started by "
         "tests/servers/zk.sh as it is (tickTime=%s, forceSync=%s), the raw bound, kazoo and baton `zk://` on it, "
         "%d runs of each workload per client, interleaved (the order rotates), medians kept; uncontended %d pairs, "
         "contended 8 processes for 5 s, handoff 200 rounds, herd %d rounds at each W"
         % (stamp, how, stamp, cfg.get("tickTime", "?"), cfg.get("forceSync", "yes"), ZK_REPS, ZK_N, ZK_HERD_ROUNDS))
    s += "; load average (1 min) at %s on %s CPUs.\n\n" % (load, os.cpu_count()) if load else ".\n\n"
    s += "\n".join(t)
    notmet = ["%s (%s)" % (sh, nv or r) for m, b, p, r, tg, ok, sh, nv in rows if ok is False]
    na = [sh for *_, ok, sh, _ in rows if ok is None]
    met = sum(1 for row in rows if row[5] is True)
    s += "\n\nTargets met: %d of %d measured." % (met, met + len(notmet))
    if notmet:
        s += " Not met: " + "; ".join(notmet) + "."
    if na:
        s += " Not measured in this run (n/a): " + "; ".join(na) + "."
    return s


def render(rows, stamp, svgs):
    metcell = {True: "met", False: "**not met**", None: "n/a", "info": "—"}
    t = ["| measure | baton | peer / bound | ratio | target | met |", "|---|---|---|---|---|---|"]
    t += ["| %s | %s | %s | %s | %s | %s |" % (m, b, p, r, tg, metcell[ok]) for m, b, p, r, tg, ok, _, _ in rows]
    # the narrative: one entry per target; the herd sizes of one target share an entry
    notmet = {}
    for m, b, p, r, tg, ok, sh, nv in rows:
        if ok is False:
            notmet.setdefault(re.sub(r" W=\d+$", "", sh), []).append(
                (nv or (r if r not in ("—", "n/a") else b)) + (" at W=" + sh.rsplit("=", 1)[1] if re.search(r" W=\d+$", sh) else ""))
    notmet = ["%s (%s)" % (k, ", ".join(v)) for k, v in notmet.items()]
    na = list(dict.fromkeys(re.sub(r" W=\d+$", "", sh) for *_, ok, sh, _ in rows if ok is None))
    met = sum(1 for row in rows if row[5] is True)
    s = "Run of %s (`make bench`, results in `bench/results/%s.jsonl`):\n\n%s\n\n" % (stamp, stamp, "\n".join(t))
    s += "Targets met: %d of %d measured." % (met, met + len(notmet))
    if notmet:
        s += " Not met: " + "; ".join(notmet) + "."
    if na:
        s += " Not measured in this run (n/a: a peer, server or workload was missing): " + "; ".join(na) + "."
    if svgs:
        s += "\n\nLatency distributions (CDF) of this run: " + ", ".join("[%s](bench/%s)" % (n[:-4], n) for n in svgs) + "."
    return s


def main():
    def on_term(sig, frm):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:   # nohup keeps it ignored
        signal.signal(signal.SIGHUP, on_term)
    if not os.access(BATON, os.X_OK):
        raise SystemExit("bench: no baton binary at %s" % BATON)
    try:
        got, svgs = measure()
    except KeyboardInterrupt:
        cleanup()
        print("\nbench: interrupted; servers stopped, temporary files removed", file=sys.stderr)
        sys.exit(130)
    finally:
        cleanup()

    stamp = STAMP
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "results.jsonl"), "w") as out:
        for r in results:
            out.write(json.dumps(r) + "\n")
    blocks = {}   # marker -> text
    if "redis" in SECTIONS:
        blocks["RESULTS"] = render(build_rows(got), stamp, svgs)
    if "redlock" in SECTIONS:
        blocks["REDLOCK"] = render_redlock(got, stamp)
    if "zk" in SECTIONS:
        blocks["ZK"] = render_zk(got, stamp)
    for name, eng in SQL_ENGINES.items():
        if name in SECTIONS:
            blocks[eng["marker"]] = render_sql(got, eng, stamp)
    if "etcd" in SECTIONS:
        blocks["ETCD"] = render_etcd(got, stamp)
    text = "\n\n".join(blocks.values())
    open(os.path.join(OUT_DIR, "table.md"), "w").write(text + "\n")
    print("\n" + text)
    print("\nbench: results in %s" % os.path.relpath(OUT_DIR, ROOT))
    if not PUBLISH:
        print("bench: docs left as they are (make bench-docs publishes a run into docs/)")
        return
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    shutil.copy(os.path.join(OUT_DIR, "results.jsonl"), os.path.join(ROOT, "bench", "results", stamp + ".jsonl"))
    os.makedirs(SVG_DIR, exist_ok=True)
    for n in svgs:
        shutil.copy(os.path.join(OUT_DIR, n), os.path.join(SVG_DIR, n))
    doc = os.path.join(ROOT, "docs", "PERFORMANCE.md")
    if os.path.exists(doc):
        s = open(doc).read()
        for mark, body in blocks.items():
            s = re.sub(r"<!-- %s -->.*<!-- /%s -->" % (mark, mark),
                       lambda _: "<!-- %s -->\n%s\n<!-- /%s -->" % (mark, body, mark), s, flags=re.S)
        open(doc, "w").write(s)
    print("bench: published into docs/PERFORMANCE.md, docs/bench/ and bench/results/")

if __name__ == "__main__":
    main()
