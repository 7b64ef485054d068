#!/usr/bin/python3
"""`baton check`, the fault checker, checked itself: short runs (seconds).

    check.py BATON file       file engine, 4 clients, 3 s: exit 0, grants, no overlaps;
                              --json parses and --svg writes an SVG
    check.py BATON usage      bad options: 64, nothing run
    check.py BATON pause      Redis, short lease, pauses at a high rate: leases lost and
                              reported, stale writes refused by the fence, none accepted
    check.py BATON unfenced   the same on a register that ignores fences: the checker
                              must fail (exit 1) with stale writes accepted
    check.py BATON kill       Redis, holders killed: recovery measured, exit 0
    check.py BATON link       Redis, --link-freeze and --link-cut: frozen holders lose their
                              lease and are told; exit 0
    check.py BATON run        Redis, --run (clients are baton run, commands tick), holders
                              paused: no write after another's grant, exit 0; with
                              --run-stubborn (the command ignores SIGTERM) the checker
                              must catch the writes after the grant and exit 1
    check.py BATON file_coord --queue and --group on the file engine with kills: exit 0,
                              every item done, no member listed late
    check.py BATON queue      Redis, --queue with pauses and kills: items taken again after
                              a lost take (told), none held twice unexplained, every item
                              put done (by a taker or the drain), exit 0
    check.py BATON group      Redis, --group with pauses and kills: no member listed late
    check.py BATON group_late ZooKeeper (4 s sessions) checked with -t 0.5: a killed member
                              stays listed for its session, past -t + --bound: the checker
                              must fail (exit 1) with members listed late (a control)

Redis runs use the suite's server ($BATON_TEST_SRV/redis/port); without it
they exit 77 (skip), unless BATON_REQUIRE_ALL=1.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.dom.minidom

BATON, MODE = sys.argv[1], sys.argv[2]
TMP = os.environ.get("BATON_TEST_TMP") or tempfile.mkdtemp()
passed = failed = 0


def check(desc, cond, detail=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok   - " + desc, file=sys.stderr)
    else:
        failed += 1
        print("FAIL - " + desc + (": " + detail if detail else ""), file=sys.stderr)


def run(*args, timeout=120):
    p = subprocess.run([BATON, "check"] + list(args), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_json(*args):
    rc, out, err = run("--json", *args)
    try:
        d = json.loads(out)
    except ValueError:
        d = None
    check("--json is one JSON object", isinstance(d, dict), out[:400] + err[:400])
    return rc, d or {}, out, err


def redis_uri():
    srv = os.environ.get("BATON_TEST_SRV", "")
    try:
        port = open(os.path.join(srv, "redis", "port")).read().strip()
    except OSError:
        if os.environ.get("BATON_REQUIRE_ALL") == "1":
            print("the redis fixture is not running and BATON_REQUIRE_ALL=1", file=sys.stderr)
            sys.exit(1)
        print("skip: no redis server (the redis fixture)", file=sys.stderr)
        sys.exit(77)
    # a prefix of this run's own: names (and fences) fresh every time
    return "redis://127.0.0.1:%s/0?prefix=check-%d-" % (port, os.getpid())


def fixture_port(engine):
    srv = os.environ.get("BATON_TEST_SRV", "")
    try:
        return open(os.path.join(srv, engine, "port")).read().strip()
    except OSError:
        if os.environ.get("BATON_REQUIRE_ALL") == "1":
            print("the %s fixture is not running and BATON_REQUIRE_ALL=1" % engine, file=sys.stderr)
            sys.exit(1)
        print("skip: no %s server (the %s fixture)" % (engine, engine), file=sys.stderr)
        sys.exit(77)


def no_crash(d):
    # a client that died by itself (a sanitizer report, a crash) shows here
    check("no client exited by itself", d.get("client_exits") == 0, show(d))


def show(d):
    keys = ["grants", "overlaps", "overlaps_unexplained", "leases_lost", "losses_reported_before_write",
            "losses_unreported", "stale_writes_refused", "stale_writes_accepted", "plain_lost_updates",
            "fences_increasing", "recovery_p50_s", "pauses", "kills", "client_exits", "ok", "evidence"]
    return json.dumps({k: d.get(k) for k in keys})


if MODE == "file":
    uri = "file://" + os.path.join(TMP, "check_file")
    rc, out, err = run("-u", uri, "--clients", "4", "--seconds", "3", "jobs")
    check("file, 4 clients, 3 s: exit 0", rc == 0, "rc %d\n%s%s" % (rc, out, err))
    grants = [l for l in out.splitlines() if l.strip().startswith("grants")]
    check("the report counts grants", grants and int(grants[0].split()[1]) > 0, out)
    check("no overlaps", "overlaps (plain register)           0 (" in out, out)
    check("says every safety property held", "result: every safety property held" in out, out)
    check("no client exited by itself", "0 failed acquires, 0 exits" in out, out)

    svg = os.path.join(TMP, "check_file.svg")
    if os.path.exists(svg):
        os.unlink(svg)
    rc, d, out, err = run_json("-u", uri, "--clients", "3", "--seconds", "1.5", "--pause", "0.2", "-t", "0.2",
                               "--svg", svg, "jobs2")
    check("--json --svg: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
    check("--json: grants > 0, no overlap unexplained, ok", d.get("grants", 0) > 0 and d.get("overlaps") == 0
          and d.get("ok") is True and d.get("stale_writes_accepted") == 0, show(d))
    # python3 -m json.tool, as a user would pipe it
    p = subprocess.run([sys.executable, "-m", "json.tool"], input=out, capture_output=True, text=True)
    check("python3 -m json.tool reads it", p.returncode == 0, p.stderr)
    no_crash(d)
    try:
        doc = xml.dom.minidom.parse(svg)
        root = doc.documentElement.tagName
        rects = len(doc.getElementsByTagName("rect"))
    except Exception as e:  # noqa: BLE001 - any parse failure is the finding
        root, rects = repr(e), 0
    check("--svg wrote an SVG document", root == "svg", root)
    check("the timeline has a bar per grant", rects >= d.get("grants", 1), "%d rects" % rects)

elif MODE == "usage":
    uri = "file://" + os.path.join(TMP, "check_usage")
    bad = [
        [],                                            # no NAME
        ["a", "b"],                                    # two NAMEs
        ["--clients", "0", "x"], ["--clients", "999", "x"], ["--clients", "many", "x"],
        ["--seconds", "-1", "x"], ["--pause", "1.5", "x"], ["--kill", "abc", "x"],
        ["--pause", "0.7", "--kill", "0.7", "x"],        # more than every grant
        ["--fault-cmd", "stop=true", "x"],              # no start
        ["--fault-cmd", "reboot=true", "x"],
        ["--shared", "--permits", "2", "x"], ["--permits", "0", "x"], ["--fair", "--shared", "x"],
        ["-t", "0.01", "x"], ["--work", "5", "-t", "1", "x"], ["--frobnicate", "x"], ["--seed", "-3", "x"],
        ["--svg", os.path.join(TMP, "no", "such", "dir", "f.svg"), "x"],
        ["--link-freeze", "0.1", "x"],                  # the file engine has no link
        ["--link-freeze", "0.6", "--link-cut", "0.6", "x"],
        ["--run-stubborn", "x"], ["-w", "1", "x"],      # only with --run
        ["--run", "--shared", "x"],
    ]
    for args in bad:
        rc, out, err = run("-u", uri, "--seconds", "0.2", *args)
        check("usage error %s: 64 with a message" % args, rc == 64 and err.strip() != "" and out == "",
              "rc %d out %r err %r" % (rc, out, err))
    rc, out, err = run("--help")
    check("--help: 0 and the options", rc == 0 and "--pause" in out and "--unfenced" in out, err)
    # every option of baton check --help is in baton(1)
    man = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "baton.1")).read()
    man = man.replace("\\-", "-")
    opts = sorted(set(re.findall(r"(?:^|[ ,])(--?[a-zA-Z][a-z-]*)", out, re.M)))
    missing = [o for o in opts if not re.search(re.escape(o) + r"\b", man)]
    check("every option of baton check --help is in baton(1)", opts and not missing, "missing: %s" % missing)
    # an engine nobody listens on: 69 (a port from the range the kernel hands out, closed)
    rc, out, err = run("-u", "redis://127.0.0.1:1/0", "--seconds", "0.2", "x")
    check("unreachable engine: 69 (or 64 without Redis in this build)", rc in (69, 64), "rc %d %s" % (rc, err))

elif MODE in ("pause", "unfenced"):
    uri = redis_uri()
    extra = ["--unfenced"] if MODE == "unfenced" else []
    # lease 0.3 s: a pause is 0.55 s; 60% of grants paused, half of them after the check
    rc, d, out, err = run_json("-u", uri, "--clients", "4", "--seconds", "4", "-t", "0.3", "--pause", "0.6",
                               "--seed", "7", *extra, "jobs-" + MODE)
    if MODE == "pause":
        check("pauses on Redis: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
        check("leases were lost", d.get("leases_lost", 0) > 0, show(d))
        check("every loss reported before the next write", d.get("losses_unreported") == 0
              and d.get("losses_reported_before_write") == d.get("leases_lost"), show(d))
        check("stale writes refused by the fence", d.get("stale_writes_refused", 0) > 0, show(d))
        check("no stale write accepted", d.get("stale_writes_accepted") == 0, show(d))
        check("fences strictly increasing", d.get("fences_increasing") is True, show(d))
        check("no overlap without a lost grant", d.get("overlaps_unexplained") == 0, show(d))
        no_crash(d)
    else:
        check("unfenced register: the check fails (exit 1)", rc == 1, "rc %d %s %s" % (rc, show(d), err))
        check("stale writes accepted > 0", d.get("stale_writes_accepted", 0) > 0, show(d))
        check("the evidence names them", any("stale write accepted" in e for e in d.get("evidence", [])), show(d))
        check("ok is false", d.get("ok") is False, show(d))

elif MODE == "run":
    # --run: each client is a real `baton run` whose command writes ticks.
    # Holders are stopped past the lease, in turn baton alone (its shim's
    # watchdog must kill the command before any other grant) and the whole
    # tree, baton, shim and command (on SIGCONT the command must die before
    # it writes on; 0.5 s of grace: the fence's part). A grant ends when its
    # command does (not when baton run exits, which is later): no overlap may
    # be left unexplained. With --run-stubborn the command hands its work to
    # a process outside its tree, which outlives the lock: the checker must
    # catch its writes after the next client's grant and fail.
    uri = redis_uri()
    for stubborn in (False, True):
        extra = ["--run-stubborn"] if stubborn else []
        rc, d, out, err = run_json("-u", uri, "--clients", "3", "--seconds", "4", "-t", "0.5", "--run",
                                   "--pause", "0.4", "--seed", "3", *extra,
                                   "run-%s" % ("stubborn" if stubborn else "ok"))
        what = "--run%s" % (" --run-stubborn" if stubborn else "")
        runs = {k: d.get(k) for k in ("command_writes", "writes_after_grant", "writes_after_grant_paused",
                                      "run_exits_ok", "run_exits_lost", "run_exits_other", "pauses_holding",
                                      "pauses_baton", "pauses_tree", "watchdog_cases", "watchdog_dead_before_grant",
                                      "commands_killed_by_run", "overlaps_unexplained", "grant_ends")}
        check(what + ": holders were paused and commands wrote", d.get("pauses_holding", 0) > 0
              and d.get("command_writes", 0) > 0, show(d) + json.dumps(runs))
        if not stubborn:
            check(what + ": exit 0", rc == 0, "rc %d %s %s %s" % (rc, show(d), json.dumps(runs), err[-2000:]))
            check(what + ": no write after another's grant", d.get("writes_after_grant") == 0, json.dumps(runs))
            check(what + ": baton run said the lease was lost (75)", d.get("run_exits_lost", 0) > 0, json.dumps(runs))
            check(what + ": no other exit", d.get("run_exits_other") == 0, json.dumps(runs))
            check(what + ": grants end when their commands do", d.get("grant_ends") == "command exit", json.dumps(runs))
            check(what + ": no overlap unexplained", d.get("overlaps_unexplained") == 0, show(d) + json.dumps(runs))
            check(what + ": baton alone and whole trees were paused", d.get("pauses_baton", 0) > 0
                  and d.get("pauses_tree", 0) > 0, json.dumps(runs))
            check(what + ": baton stopped alone: every command dead before another grant (the watchdog)",
                  d.get("watchdog_cases", 0) > 0 and d.get("watchdog_dead_before_grant") == d.get("watchdog_cases"),
                  json.dumps(runs))
            check(what + ": commands killed without a word were counted", d.get("commands_killed_by_run", 0) > 0,
                  json.dumps(runs))
        else:
            check(what + ": the check fails (exit 1)", rc == 1, "rc %d %s %s" % (rc, show(d), json.dumps(runs)))
            check(what + ": writes after another's grant > 0", d.get("writes_after_grant", 0) > 0, json.dumps(runs))
            check(what + ": the evidence names them", any("write after another grant" in e
                                                          for e in d.get("evidence", [])), show(d))
            check(what + ": ok is false", d.get("ok") is False, show(d))

elif MODE == "link":
    # --link-freeze / --link-cut through the checker's own forwarder: a holder
    # whose link froze past its lease loses it (the forwarder really stops
    # relaying) and is told before it writes; cuts reset its connections.
    uri = redis_uri()
    rc, d, out, err = run_json("-u", uri, "--clients", "3", "--seconds", "4", "-t", "0.5", "--link-freeze", "0.3",
                               "--link-cut", "0.2", "--seed", "5", "links")
    links = {k: d.get(k) for k in ("link_freezes", "link_cuts", "links_holding", "links_waiting")}
    check("links on Redis: exit 0", rc == 0, "rc %d %s %s %s" % (rc, show(d), json.dumps(links), err[-2000:]))
    check("links were frozen and cut", d.get("link_freezes", 0) > 0 and d.get("link_cuts", 0) > 0, json.dumps(links))
    check("a frozen holder lost its lease (the forwarder froze)", d.get("leases_lost", 0) > 0, show(d))
    check("every loss reported before the next write", d.get("losses_unreported") == 0, show(d))
    check("no overlap without a lost grant", d.get("overlaps_unexplained") == 0, show(d))
    no_crash(d)

elif MODE == "kill":
    uri = redis_uri()
    rc, d, out, err = run_json("-u", uri, "--clients", "4", "--seconds", "3", "-t", "0.3", "--kill", "0.3",
                               "--seed", "11", "kills")
    check("kills on Redis: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
    check("holders were killed", d.get("kills_holding", 0) > 0, show(d))
    check("recovery measured", d.get("recoveries", 0) > 0 and d.get("recovery_p50_s") is not None, show(d))
    # a killed holder's key outlives it: the next grant waits for its lease
    # (0.3 s; a lower bound, which a slow machine only makes longer)
    check("recovery waits for the lease", (d.get("recovery_p50_s") or 0) >= 0.15, show(d))
    check("no overlaps", d.get("overlaps") == 0, show(d))
    no_crash(d)

elif MODE in ("fair_file", "fair_sqlite", "rw_sqlite"):
    # issue 25: fair locks on file and SQLite (the order kept without
    # faults; exclusion and fences with holders and waiters SIGKILLed), and
    # SQLite's read-write lock with holders SIGKILLed
    eng = MODE.split("_")[1]
    uri = ("file://" + os.path.join(TMP, "check_" + MODE) if eng == "file"
           else "sqlite://" + os.path.join(TMP, "check_" + MODE + ".db"))
    if MODE.startswith("fair"):
        rc, d, out, err = run_json("-u", uri, "--fair", "--clients", "6", "--seconds", "3", "-t", "0.5", "fifo")
        check(eng + " --fair: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
        check("grants > 0, no overlap, fences increasing", d.get("grants", 0) > 0 and d.get("overlaps") == 0
              and d.get("fences_increasing") is True, show(d))
        check("fair order kept", d.get("fair_order") == "kept" and d.get("fair_inversions") == 0,
              "%s %s" % (d.get("fair_order"), d.get("fair_inversions")))
        no_crash(d)
        extra = ["--fair", "--kill-waiting", "0.2"]
    else:
        extra = ["-s"]
    rc, d, out, err = run_json("-u", uri, *extra, "--clients", "6", "--seconds", "4", "-t", "0.5", "--kill", "0.2",
                               "--seed", "25", "killed")
    check(eng + " " + " ".join(extra) + " --kill: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
    check("holders were killed", d.get("kills_holding", 0) > 0, show(d))
    check("no overlaps, no stale write accepted, fences increasing", d.get("overlaps") == 0
          and d.get("stale_writes_accepted") == 0 and d.get("fences_increasing") is True, show(d))
    no_crash(d)

elif MODE in ("zk_pause", "etcd_pause"):
    # Session engines: a holder stopped past its session timeout (ZooKeeper's
    # session, etcd's lease) must see held() = 0 on its first look after it
    # resumes, before the engine's own threads have run (the engine's
    # session_deadline); before that, the checker counted unreported losses.
    if MODE == "zk_pause":
        uri, t = "zk://127.0.0.1:%s?session_timeout_ms=1000" % fixture_port("zk"), "1"
    else:
        uri, t = "etcd://127.0.0.1:%s?ttl=2" % fixture_port("etcd"), "2"
    rc, d, out, err = run_json("-u", uri, "--clients", "4", "--seconds", "12", "-t", t, "--pause", "0.25",
                               "--seed", "5", "check-%s-%d" % (MODE, os.getpid()))
    check("pauses past the session: exit 0", rc == 0, "rc %d %s %s" % (rc, show(d), err))
    check("grants were lost", d.get("leases_lost", 0) > 0, show(d))
    check("every loss reported before the next write", d.get("losses_unreported") == 0
          and d.get("losses_reported_before_write") == d.get("leases_lost"), show(d))
    check("no stale write accepted", d.get("stale_writes_accepted") == 0, show(d))
    check("no overlap without a lost grant", d.get("overlaps_unexplained") == 0, show(d))
    no_crash(d)

elif MODE in ("file_coord", "queue", "group", "group_late"):
    # issue 24's workloads: a work queue (each client puts an item and takes
    # the oldest) and a group (client 0 lists, the others join and leave)
    def coord(prim, uri, *extra):
        rc, d, out, err = run_json("-u", uri, "--" + prim, *extra, "check-%s-%s-%d" % (MODE, prim, os.getpid()))
        keys = [k for k in d if k not in ("engine", "name", "evidence")]
        return rc, d, json.dumps({k: d.get(k) for k in keys + ["evidence"]}), err[-1500:]

    def queue_ok(d, info):
        check("takes were made", d.get("takes", 0) > 0 and d.get("items_put", 0) > 0, info)
        check("no item held by two live takers", d.get("items_double_held_unexplained") == 0, info)
        check("every item put was done (by a taker or the drain)", d.get("items_lost") == 0
              and d.get("drain_short") is False, info)
        check("no stale done, no take after a done", d.get("stale_dones") == 0 and d.get("takes_after_done") == 0, info)
        check("later takes have larger fences", d.get("fence_backs") == 0, info)
        check("no client exited by itself", d.get("client_exits") == 0, info)

    if MODE == "file_coord":
        uri = "file://" + os.path.join(TMP, "check_file_coord")
        rc, d, info, err = coord("queue", uri, "--clients", "4", "--seconds", "3", "--kill", "0.2", "--seed", "3")
        check("file queue with kills: exit 0", rc == 0, "rc %d %s %s" % (rc, info, err))
        queue_ok(d, info)
        check("takers were killed and their items taken again", d.get("kills", 0) > 0
              and d.get("item_back_p50_s") is not None, info)
        rc, d, info, err = coord("group", uri, "--clients", "4", "--seconds", "3", "--work", "0.1", "--kill", "0.3",
                                 "--seed", "3")
        check("file group with kills: exit 0", rc == 0, "rc %d %s %s" % (rc, info, err))
        check("members listed", d.get("memberships", 0) > 0 and d.get("listings", 0) > 0, info)
        check("no member listed late", d.get("listed_late") == 0, info)
    elif MODE == "queue":
        rc, d, info, err = coord("queue", redis_uri(), "--clients", "5", "--seconds", "5", "-t", "0.5", "--pause",
                                 "0.1", "--kill", "0.1", "--seed", "7")
        check("Redis queue with pauses and kills: exit 0", rc == 0, "rc %d %s %s" % (rc, info, err))
        queue_ok(d, info)
        check("paused takers lost their items and were told", d.get("items_lost_by_takers", 0) > 0
              and d.get("losses_told", 0) > 0, info)
        # a killed taker's item waits for its lease (0.5 s) before it is taken again
        check("a killed taker's item comes back after its lease", (d.get("item_back_p50_s") or 0) >= 0.25, info)
    elif MODE == "group":
        rc, d, info, err = coord("group", redis_uri(), "--clients", "5", "--seconds", "5", "-t", "0.5", "--work",
                                 "0.1", "--pause", "0.15", "--kill", "0.15", "--seed", "7")
        check("Redis group with pauses and kills: exit 0", rc == 0, "rc %d %s %s" % (rc, info, err))
        check("members listed", d.get("memberships", 0) > 0 and d.get("listings", 0) > 0, info)
        check("no member listed late", d.get("listed_late") == 0, info)
        check("memberships were lost and told", d.get("memberships_lost", 0) > 0 and d.get("losses_told", 0) > 0, info)
        check("no client exited by itself", d.get("client_exits") == 0, info)
    else:
        # the control: ZooKeeper keeps a dead member for its 4 s session; a
        # check told the lease is 0.5 s must see it listed late and fail
        uri = "zk://127.0.0.1:%s?session_timeout_ms=4000" % fixture_port("zk")
        rc, d, info, err = coord("group", uri, "--clients", "4", "--seconds", "6", "-t", "0.5", "--work", "0.2",
                                 "--kill", "0.3", "--bound", "0.5", "--seed", "9")
        check("a bound shorter than the session: exit 1", rc == 1, "rc %d %s %s" % (rc, info, err))
        check("members listed late", d.get("listed_late", 0) > 0 and d.get("ok") is False, info)
        check("the evidence names one", any("listed late" in e for e in d.get("evidence", [])), info)

else:
    print("unknown mode " + MODE, file=sys.stderr)
    sys.exit(2)

print("%d passed, %d failed" % (passed, failed), file=sys.stderr)
sys.exit(1 if failed else 0)
