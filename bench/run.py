#!/usr/bin/python3
"""make bench: baton's workloads and the peers' (../shared/peers) back to back in one run, on one
Redis server started here, then a table of baton/peer ratios.

Writes bench/results/<UTC time>.jsonl (one JSON line per result) and rewrites the table in
docs/PERFORMANCE.md between the RESULTS markers. Benchmarks are not tests: nothing here fails on a
number. usage: bench/run.py BATON_BINARY
"""
import datetime, json, os, re, shutil, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(os.path.dirname(ROOT), "shared", "peers")
BATON = sys.argv[1]
SRV = os.path.join(ROOT, "build", "bench-srv")
NODE_MODULES = os.path.join(ROOT, "build", "peers-node", "node_modules")
results = []

def run(cmd, env=None, timeout=300):
    e = dict(os.environ, **(env or {}))
    try:
        out = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, FileNotFoundError) as x:
        print("  skipped: %s" % x, file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            results.append(r)
            print("  " + line, flush=True)
            return r
    print("  no result from %s: %s" % (cmd[:3], out.stderr.strip()[-300:]), file=sys.stderr)
    return None

def start_redis():
    # node's peer script talks to 6379 only; use it when it is free.
    port_free = subprocess.run(["redis-cli", "-p", "6379", "ping"], capture_output=True).returncode != 0
    if os.path.exists(os.path.join(SRV, "pid")):
        subprocess.run(["bash", os.path.join(ROOT, "tests/servers/redis.sh"), "stop", SRV], capture_output=True)
    if port_free:
        os.makedirs(SRV, exist_ok=True)
        subprocess.run(["redis-server", "--port", "6379", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                        "--daemonize", "yes", "--pidfile", os.path.join(SRV, "pid"), "--dir", SRV,
                        "--logfile", os.path.join(SRV, "log")], check=True)
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", "6379", "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            subprocess.run(["sleep", "0.05"])
        return 6379, True
    out = subprocess.run(["bash", os.path.join(ROOT, "tests/servers/redis.sh"), "start", SRV],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip()), False

def stop_redis(own6379):
    if own6379:
        subprocess.run(["redis-cli", "-p", "6379", "shutdown", "nosave"], capture_output=True)
    else:
        subprocess.run(["bash", os.path.join(ROOT, "tests/servers/redis.sh"), "stop", SRV], capture_output=True)

def node_peers():
    if os.path.isdir(os.path.join(NODE_MODULES, "redlock")):
        return True
    if not shutil.which("npm"):
        return False
    d = os.path.dirname(NODE_MODULES)
    os.makedirs(d, exist_ok=True)
    r = subprocess.run("cd %s && npm init -y >/dev/null && npm install --silent redlock@4.2.0 ioredis@5 redis-semaphore@5" % d,
                       shell=True, capture_output=True, text=True)
    return r.returncode == 0

def redis_bench_set(port, clients):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", str(clients), "-n", "20000", "-q", "-t", "set"],
                         capture_output=True, text=True).stdout
    m = re.findall(r"SET: ([0-9.]+) requests per second", out.replace("\r", "\n"))
    r = {"peer": "redis-benchmark", "workload": "set", "clients": clients, "requests_per_s": float(m[-1]) if m else None}
    results.append(r)
    print("  " + json.dumps(r), flush=True)
    return r

def main():
    port, own = start_redis()
    uri = "redis://127.0.0.1:%d/0" % port
    env = {"PEER_REDIS_PORT": str(port)}
    py = "/usr/bin/python3"
    print("bench: Redis on port %d" % port, flush=True)
    try:
        got = {}
        got["bound_set_c1"] = redis_bench_set(port, 1)
        got["bound_set_c50"] = redis_bench_set(port, 50)
        got["baton_unc"] = run([BATON, "bench", "-u", uri, "--workload", "uncontended", "--n", "20000", "--json"])
        got["baton_unc_simple"] = run([BATON, "bench", "-u", uri + "?layout=simple", "--workload", "uncontended", "--n", "20000", "--json"])
        got["py_unc"] = run([py, os.path.join(PEERS, "pylocks.py"), "redis", "uncontended", "20000"], env)
        got["baton_handoff"] = run([BATON, "bench", "-u", uri, "--workload", "handoff", "--rounds", "200", "--json"])
        got["baton_handoff_fair"] = run([BATON, "bench", "-u", uri, "--workload", "handoff", "--rounds", "200", "--fair", "--json"])
        got["py_handoff"] = run([py, os.path.join(PEERS, "pylocks.py"), "redis", "handoff", "50"], env)
        got["baton_cont"] = run([BATON, "bench", "-u", uri, "--workload", "contended", "--clients", "8", "--seconds", "5", "--json"])
        got["baton_cont_fair"] = run([BATON, "bench", "-u", uri, "--workload", "contended", "--clients", "8", "--seconds", "5", "--fair", "--json"])
        got["py_cont"] = run([py, os.path.join(PEERS, "pylocks.py"), "redis", "contended", "8", "5"], env)
        if own and node_peers():
            nenv = dict(env, NODE_PATH=NODE_MODULES)
            got["node_cont"] = run(["node", os.path.join(PEERS, "nodelocks.js"), "redlock", "contended", "8", "5"], nenv)
            got["node_unc"] = run(["node", os.path.join(PEERS, "nodelocks.js"), "redlock", "uncontended", "10000"], nenv)
        got["baton_many"] = run([BATON, "bench", "-u", uri, "--workload", "many", "--clients", "50", "--seconds", "3", "--json"])
    finally:
        stop_redis(own)

    def ratio(a, ka, b, kb):
        try:
            return "%.2f" % (got[a][ka] / got[b][kb])
        except (KeyError, TypeError, ZeroDivisionError):
            return "n/a"

    def val(a, k, fmt="%.1f"):
        try:
            return fmt % got[a][k]
        except (KeyError, TypeError):
            return "n/a"

    rows = [
        ("Redis uncontended pairs/s", val("baton_unc", "pairs_per_s"), "redis-py " + val("py_unc", "pairs_per_s"),
         ratio("baton_unc", "pairs_per_s", "py_unc", "pairs_per_s"), "≥ 1.15"),
        ("Redis uncontended pairs/s vs SET round trips (c=1; a pair is 2 round trips)",
         val("baton_unc", "pairs_per_s"), "SET/2 " + ("%.1f" % (got["bound_set_c1"]["requests_per_s"] / 2) if got.get("bound_set_c1", {}).get("requests_per_s") else "n/a"),
         ("%.2f" % (got["baton_unc"]["pairs_per_s"] / (got["bound_set_c1"]["requests_per_s"] / 2))) if got.get("baton_unc") and got.get("bound_set_c1", {}).get("requests_per_s") else "n/a",
         "≥ 0.9 (of the EVALSHA bound)"),
        ("Redis uncontended, baton CPU µs per pair", val("baton_unc", "cpu_us_per_pair", "%.1f"), "", "", "≤ 0.15 × redis-py"),
        ("Redis handoff p50 µs (default; ratio = peer/baton)", val("baton_handoff", "handoff_p50_us"), "redis-py " + val("py_handoff", "handoff_p50_us"),
         ratio("py_handoff", "handoff_p50_us", "baton_handoff", "handoff_p50_us"), "≤ 500 µs"),
        ("Redis handoff p50 µs (fair)", val("baton_handoff_fair", "handoff_p50_us"), "", "", "≤ 500 µs"),
        ("Redis contended handoffs/s (8 procs)", val("baton_cont", "handoffs_per_s"), "redis-py " + val("py_cont", "handoffs_per_s"),
         ratio("baton_cont", "handoffs_per_s", "py_cont", "handoffs_per_s"), "≥ 1"),
        ("Redis contended fair handoffs/s", val("baton_cont_fair", "handoffs_per_s"), "node redlock " + val("node_cont", "handoffs_per_s"),
         ratio("baton_cont_fair", "handoffs_per_s", "node_cont", "handoffs_per_s"), "≥ 2"),
        ("Redis contended fair wait p99 ms", val("baton_cont_fair", "wait_p99_ms", "%.2f"), "", "", "≤ 10"),
        ("Redis contended fair min/max per client",
         ("%.2f" % (got["baton_cont_fair"]["min_per_client"] / max(1, got["baton_cont_fair"]["max_per_client"]))) if got.get("baton_cont_fair") else "n/a",
         "", "", "≥ 0.8"),
        ("Many: 50 locks on one client, pairs/s", val("baton_many", "pairs_per_s"), "SET c=50 " + val("bound_set_c50", "requests_per_s"),
         "", "≥ 0.5 × EVALSHA c=50"),
    ]
    stamp = datetime.datetime.utcnow().strftime("%Y-%m-%dT%H-%M-%SZ")
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", stamp + ".jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    table = ["| measure | baton | peer | ratio | target |", "|---|---|---|---|---|"]
    table += ["| %s | %s | %s | %s | %s |" % r for r in rows]
    text = "\n".join(table)
    print("\n" + text)
    doc = os.path.join(ROOT, "docs", "PERFORMANCE.md")
    if os.path.exists(doc):
        s = open(doc).read()
        s = re.sub(r"<!-- RESULTS -->.*<!-- /RESULTS -->",
                   "<!-- RESULTS -->\nRun of %s (`make bench`, results in `bench/results/%s.jsonl`):\n\n%s\n<!-- /RESULTS -->" % (stamp, stamp, text),
                   s, flags=re.S)
        open(doc, "w").write(s)

main()
