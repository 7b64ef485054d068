#!/usr/bin/env python3
"""Docs hygiene (issue #23), cheap checks that fail on drift a reader meets:

  tables   every Markdown table's header row has as many cells as its
           delimiter row (3 over 4 does not render as a table on GitHub);
  quoting  every URI with '?' or '&' in a shell code block (README.md,
           docs/*.md fenced blocks and inline `baton ...` commands, baton(1)'s
           .nf/.EX blocks, the --help texts of src/cli and src/bench) is
           quoted: unquoted, zsh takes
           '?' as a glob ("no matches found") and any shell takes '&' as
           "run in the background";
  width    `man -l docs/baton.1` at MANWIDTH=80 has no line over 80 columns
           (skipped when man is missing).

usage: lint.py SOURCE_DIR    prints each finding; exit 1 when there is any
"""
import glob
import os
import re
import shutil
import subprocess
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
bad = []


def cells(row):
    """The cells of a Markdown table row: split on '|' not escaped by '\\'."""
    s = row.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|") and not s.endswith("\\|"):
        s = s[:-1]
    return len(re.split(r"(?<!\\)\|", s))


DELIM = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
# a URI with a query or an '&' that is not right after a quote
URI = re.compile(r"(?<![\"'\w])([a-z][a-z0-9+]*://[^\s\"'`)]*[?&][^\s\"'`)]*)")


def md_files():
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


for path in md_files():
    rel = os.path.relpath(path, root)
    lines = open(path, encoding="utf-8").read().split("\n")
    fence = None
    for i, line in enumerate(lines):
        m = re.match(r"^\s*(```+|~~~+)(\S*)", line)
        if m:
            if fence is None:
                fence = (m.group(1), m.group(2))
            elif line.strip().startswith(fence[0]):
                fence = None
            continue
        if fence is not None:
            if fence[1] in ("", "sh", "bash", "shell", "console", "zsh"):
                for u in URI.findall(line):
                    bad.append(f"{rel}:{i + 1}: unquoted URI with ?/& in a shell block: {u}")
            continue
        # a command in an inline code span (`baton run -u ...`) is copied too
        for span in re.findall(r"`([^`]*)`", line):
            if re.match(r"\s*(baton|etcdctl|redis-cli|zkCli.sh|psql|mysql) ", span):
                for u in URI.findall(span):
                    bad.append(f"{rel}:{i + 1}: unquoted URI with ?/& in an inline command: {u}")
        if i > 0 and DELIM.match(line) and "|" in lines[i - 1]:
            h, d = cells(lines[i - 1]), cells(line)
            if h != d:
                bad.append(f"{rel}:{i}: table header has {h} cells over {d} delimiter cells")

# baton(1): the example blocks (.nf ... .fi, .EX ... .EE)
man = os.path.join(root, "docs", "baton.1")
inblock = False
for i, line in enumerate(open(man, encoding="utf-8").read().split("\n")):
    if line.startswith((".nf", ".EX")):
        inblock = True
        continue
    if line.startswith((".fi", ".EE")):
        inblock = False
        continue
    if inblock:
        for u in URI.findall(line.replace("\\-", "-").replace("\\e", "\\")):
            bad.append(f"docs/baton.1:{i + 1}: unquoted URI with ?/& in an example: {u}")

# --help texts: C string literals of the CLI and bench that show a command
for path in sorted(glob.glob(os.path.join(root, "src", "cli", "*.c")) + glob.glob(os.path.join(root, "src", "bench", "*.c"))):
    rel = os.path.relpath(path, root)
    for i, line in enumerate(open(path, encoding="utf-8").read().split("\n")):
        for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', line):
            lit = lit.replace('\\"', '"')
            if "baton " not in lit and " -u " not in lit:
                continue
            for u in URI.findall(lit):
                bad.append(f"{rel}:{i + 1}: unquoted URI with ?/& in a help text: {u}")

# the man page at 80 columns
if shutil.which("man"):
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0", LC_ALL="C.UTF-8")
    out = subprocess.run(["man", "-l", man], capture_output=True, text=True, env=env).stdout
    out = re.sub(r".\x08", "", out)
    for n, line in enumerate(out.split("\n")):
        if len(line) > 80:
            bad.append(f"man -l docs/baton.1 (MANWIDTH=80): line {n + 1} has {len(line)} columns: {line.strip()[:60]}")
else:
    print("man is missing: the width check is skipped")

for b in bad:
    print(b)
print(f"{len(bad)} finding(s)")
sys.exit(1 if bad else 0)
