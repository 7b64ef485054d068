#!/bin/bash
# baton engines: every engine listed (built or not), --json parses and agrees
# with the text form, an unknown name is a usage error.
set -u
B=$1
fail=0
t() { if "$@"; then echo "ok: ${*:1:2}"; else echo "FAIL: ${*:1:3}" | cut -c1-200; fail=1; fi; }
out=$("$B" engines) ; rc=$?
t test "$rc" = 0
for e in file sqlite postgres mysql redis redlock zk etcd; do
    t grep -q "^$e: " <<<"$out"
done
json=$("$B" engines --json)
t python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert len(d) == 8 and all("options" in e for e in d)' "$json"
one=$("$B" engines --json zookeeper)
t python3 -c 'import json,sys; assert json.loads(sys.argv[1])["name"] == "zk"' "$one"
"$B" engines nosuch >/dev/null 2>&1; rc=$?
t test "$rc" = 64
"$B" engines a b >/dev/null 2>&1; rc=$?
t test "$rc" = 64
# an option the engine does not take is refused when the client opens (64)
"$B" status -u 'file:///tmp?bogus=1' x >/dev/null 2>&1; rc=$?
t test "$rc" = 64
exit $fail
