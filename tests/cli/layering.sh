#!/bin/bash
# The commands' layering (issue 23): src/cli, src/bench and src/check share
# the tool library (src/tool) and never call into one another; the one edge
# allowed is the CLI's main() dispatching to bench's and check's entry points
# (baton__cli_bench, baton__cli_check). Read from the objects themselves:
# every symbol one part leaves undefined must not be defined by another.
#
#   layering.sh --cli OBJ... --bench OBJ... --check OBJ...
# (objects or archives)
set -u
declare -A files=([cli]="" [bench]="" [check]="")
part=""
for a in "$@"; do
    case $a in
    --cli|--bench|--check) part=${a#--} ;;
    *) [ -n "$part" ] || { echo "usage: $0 --cli OBJ... --bench OBJ... --check OBJ..." >&2; exit 2; }
       files[$part]+=" $a" ;;
    esac
done
TMP=${BATON_TEST_TMP:-/tmp}/layering.$$
mkdir -p "$TMP"
trap 'rm -rf "$TMP"' EXIT
for p in cli bench check; do
    [ -n "${files[$p]}" ] || { echo "no objects for $p" >&2; exit 2; }
    # shellcheck disable=SC2086
    nm --defined-only -g ${files[$p]} 2>/dev/null | awk 'NF == 3 { print $3 }' | sort -u >"$TMP/def_$p"
    # shellcheck disable=SC2086
    nm -u ${files[$p]} 2>/dev/null | awk 'NF >= 2 { print $NF }' | sort -u >"$TMP/und_$p"
    [ -s "$TMP/def_$p" ] || { echo "FAIL - $p defines nothing (wrong objects?)" >&2; exit 1; }
done
printf '%s\n' baton__cli_bench baton__cli_check | sort >"$TMP/allowed"
fail=0
for a in cli bench check; do
    for b in cli bench check; do
        [ "$a" = "$b" ] && continue
        comm -12 "$TMP/und_$a" "$TMP/def_$b" | comm -23 - "$TMP/allowed" >"$TMP/x"
        if [ -s "$TMP/x" ]; then
            echo "FAIL - $a calls into $b: $(tr '\n' ' ' <"$TMP/x")" >&2
            fail=$((fail + 1))
        else
            echo "ok   - $a does not call into $b" >&2
        fi
    done
done
echo "$((6 - fail)) passed, $fail failed"
[ $fail -eq 0 ]
