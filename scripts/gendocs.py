#!/usr/bin/env python3
"""The docs' engine tables, made from `baton engines --json` (the code).

    scripts/gendocs.py BATON          rewrite the generated blocks in place
    scripts/gendocs.py --check BATON  exit 1 with a diff when a block, or a
                                      doc page's option list, disagrees

Generated blocks sit between BEGIN/END marker lines (README.md,
docs/engines.md, docs/baton.1); everything outside them is prose, checked
only for naming every option of its engine."""
import difflib, json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRIMS = [  # (primitive name in the JSON, row label, API)
    ("lock", "lock (try, wait, lease, extend, fence, reentrant)", "`baton_lock_*`, `baton run`"),
    ("fair", "fair lock (FIFO)", "`baton_lock_options.fair`, `baton run --fair`"),
    ("rwlock", "read-write lock", "`baton_rwlock_*`, `baton run -s`/`-x`"),
    ("semaphore", "semaphore", "`baton_semaphore_*`, `baton sem`"),
    ("permits", "permit-expirable semaphore", "`baton_permits_*`, `baton run --permits`"),
    ("latch", "count-down latch", "`baton_latch_*`, `baton latch`"),
    ("election", "leader election", "`baton_election_*`, `baton elect`"),
    ("value", "value with watch", "`baton_value_*`, `baton value`"),
    ("counter", "shared counter (on values)", "`baton_counter_*`, `baton counter`"),
    ("group", "group membership", "`baton_group_*`, `baton member`/`members`"),
    ("barrier", "double barrier (on groups + values)", "`baton_barrier_*`, `baton barrier`"),
    ("queue", "work queue (at-least-once)", "`baton_queue_*`, `baton queue`"),
    ("ratelimit", "rate limiter (GCRA)", "`baton_ratelimit_*`, `baton rate`"),
    ("status", "lock status", "`baton_lock_info`, `baton status`"),
    ("list", "list held locks", "`baton_lock_list`, `baton list`"),
    ("force-unlock", "force unlock (fence bumped)", "`baton_lock_force_unlock`, `baton unlock --force`"),
]
# the page that documents each engine's options in prose
PAGES = {"file": "docs/file-engine.md", "sqlite": "docs/sqlite-engine.md", "postgres": "docs/postgres-engine.md",
         "mysql": "docs/mysql-engine.md", "redis": "docs/redis-layout.md", "redlock": "docs/redlock.md",
         "zk": "docs/zk-engine.md", "etcd": "docs/etcd-engine.md"}


def engines(baton):
    out = subprocess.run([baton, "engines", "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


# built by the core on other primitives
DERIVED = {"counter": ("value",), "barrier": ("group", "value")}


def has(e, key):
    return all(k in e["primitives"] for k in DERIVED.get(key, (key,)))


def md_matrix(es):
    rows = ["| primitive | API | " + " | ".join(e["name"] for e in es) + " |",
            "|---|---|" + "---|" * len(es)]
    for key, label, api in PRIMS:
        cells = ["✓" if has(e, key) else "`ENOTSUP`" for e in es]
        rows.append("| %s | %s | %s |" % (label, api, " | ".join(cells)))
    rows.append("")
    rows.append("Behaviour: " + "; ".join("%s: %s" % (e["name"], ", ".join(e["features"]) or "none") for e in es) +
                ". `lease`: grants expire unless renewed; `notify`: waiters are woken by the engine; `fifo`: grants "
                "in arrival order; `session`: the engine itself reports lost grants. What each cell means on each "
                "engine, and why a cell is `ENOTSUP`: [docs/engines.md](docs/engines.md) (`baton engines NAME`).")
    return rows


# A note gives the reason for cells an engine lacks when it starts with the
# primitives' names and ": no (" — "fair, rwlock: no (why)". "not yet" is no
# reason: a cell that is ENOTSUP for want of work is a hole, not a decision.
NOTE_NO = re.compile(r"^([a-z][a-z ,/-]*): no \((.+)\)$")


def why_enotsup(es):
    """[(engine, [primitives], reason)], and the cells no note explains."""
    rows, missing = [], []
    for e in es:
        lacking = [k for k, _, _ in PRIMS if not has(e, k) and k not in DERIVED]
        explained = set()
        for n in e["notes"]:
            m = NOTE_NO.match(n)
            if not m:
                continue
            names = [x.strip().replace(" ", "-") for x in re.split(r"[,/]", m.group(1))]
            names = [x for x in names if x in lacking]
            if names:
                rows.append((e["name"], names, m.group(2)))
                explained.update(names)
        missing += ["%s: %s" % (e["name"], k) for k in lacking if k not in explained]
    return rows, missing


def md_enotsup(es):
    rows = ["| engine | `ENOTSUP` | why |", "|---|---|---|"]
    for name, prims, why in why_enotsup(es)[0]:
        rows.append("| %s | %s | %s |" % (name, ", ".join(prims), why.replace("|", "\\|")))
    return rows


def md_uris(es):
    rows = ["| engine | URI | URI options |", "|---|---|---|"]
    for e in es:
        opts = ", ".join("`%s`" % o["name"] for o in e["options"]) or "none"
        rows.append("| %s | `%s` | %s |" % (e["name"], e["uri"].replace("|", "\\|"), opts))
    return rows


def md_details(es):
    rows = []
    for e in es:
        rows.append("### %s" % e["name"])
        rows.append("")
        rows.append("%s. Schemes: %s. URI: `%s`." % (e["summary"][0].upper() + e["summary"][1:],
                                                     ", ".join("`%s://`" % s for s in e["schemes"]), e["uri"]))
        rows.append("")
        rows.append("Primitives: %s. Behaviour: %s." % (", ".join(e["primitives"]), ", ".join(e["features"]) or "none"))
        rows.append("")
        for n in e["notes"]:
            rows.append("- " + n)
        if e["notes"]:
            rows.append("")
        if e["options"]:
            rows.append("| option | type | default | meaning |")
            rows.append("|---|---|---|---|")
            for o in e["options"]:
                t = o["type"]
                if o.get("choices"):
                    t += ": " + " \\| ".join(o["choices"])
                if "min" in o:
                    t += " %d..%d" % (o["min"], o["max"])
                d = "—" if o["default"] is None else ("`%s`" % o["default"] if o["default"] else '`""`')
                m = o["help"].replace("|", "\\|")
                if o["schemes"]:
                    m += " (%s only)" % ", ".join("`%s://`" % s for s in o["schemes"].split())
                if o["alias"]:
                    m += " (also `%s`)" % o["alias"]
                if o.get("needs"):
                    m += " (used only with %s; a warning otherwise)" % " or ".join("`%s`" % c for c in o["needs"].split())
                rows.append("| `%s` | %s | %s | %s |" % (o["name"], t, d, m))
            rows.append("")
    return rows[:-1] if rows and rows[-1] == "" else rows


def man_esc(s):
    return s.replace("\\", "\\e").replace("-", "\\-").replace("'", "\\(aq")


def man_engines(es):
    rows = [".nh"]  # option names must not be hyphenated
    for e in es:
        rows.append(".TP")
        rows.append(".B %s" % e["name"])
        rows.append(man_esc(e["summary"]) + ".")
        rows.append("Primitives: %s." % man_esc(", ".join(e["primitives"])))
        if e["options"]:
            rows.append("Options:")
            for i, o in enumerate(e["options"]):
                d = "" if o["default"] is None else " (default %s)" % (man_esc(o["default"]) or "empty")
                rows.append(".BR %s%s%s" % (man_esc(o["name"]), man_esc(d).replace(" ", "\\ "),
                                           "," if i + 1 < len(e["options"]) else "."))
    rows.append(".hy")
    return rows


BLOCKS = [  # file, marker name, comment style, generator
    ("README.md", "matrix", "md", md_matrix),
    ("README.md", "uris", "md", md_uris),
    ("docs/engines.md", "enotsup", "md", md_enotsup),
    ("docs/engines.md", "details", "md", md_details),
    ("docs/baton.1", "engines", "man", man_engines),
]


def markers(style, name):
    if style == "md":
        return ("<!-- BEGIN generated by scripts/gendocs.py: %s -->" % name,
                "<!-- END generated: %s -->" % name)
    return ('.\\" BEGIN generated by scripts/gendocs.py: %s' % name, '.\\" END generated: %s' % name)


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    if len(args) != 1:
        sys.exit(__doc__)
    es = engines(args[0])
    bad = 0
    texts = {}
    for path, name, style, gen in BLOCKS:
        full = os.path.join(ROOT, path)
        text = texts.get(path) or open(full, encoding="utf-8").read()
        begin, end = markers(style, name)
        if begin not in text or end not in text:
            print("%s: no generated block '%s' (add the lines %r and %r)" % (path, name, begin, end))
            bad = 1
            continue
        a = text.index(begin) + len(begin) + 1
        b = text.index(end)
        want = "\n".join(gen(es)) + "\n"
        if text[a:b] != want:
            if check:
                print("%s: the '%s' block differs from `baton engines` (run scripts/gendocs.py BATON):" % (path, name))
                sys.stdout.writelines(difflib.unified_diff(text[a:b].splitlines(True), want.splitlines(True),
                                                           "in " + path, "from the code"))
                bad = 1
            text = text[:a] + want + text[b:]
        texts[path] = text
    if not check:
        for path, text in texts.items():
            with open(os.path.join(ROOT, path), "w", encoding="utf-8") as f:
                f.write(text)
    # every ENOTSUP cell of the matrix has its reason in the engine's notes
    for cell in why_enotsup(es)[1]:
        print("%s: ENOTSUP without a reason (add a note \"PRIMITIVE: no (why)\" to the engine's spec.c)" % cell)
        bad = 1
    # every option of an engine is named in its own page's prose, and no page
    # names an option `?x=` its engine does not take
    for e in es:
        page = os.path.join(ROOT, PAGES[e["name"]])
        text = open(page, encoding="utf-8").read()
        for o in e["options"]:
            if not re.search(r"\b%s\b" % re.escape(o["name"]), text):
                print("%s: says nothing of the %s option '%s'" % (PAGES[e["name"]], e["name"], o["name"]))
                bad = 1
    sys.exit(bad)


if __name__ == "__main__":
    main()
