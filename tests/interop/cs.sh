#!/bin/sh
# The critical sections a foreign-client interop test enters from both sides
# (the baton side runs this under `baton run`/`baton elect`; the foreign side
# has its own copy: CuratorInterop.java, or the Python/Node helpers), keeping
# their evidence in DIR:
#
#   cs.sh exclusive DIR WHO   mkdir DIR/x (already there = an overlap); no
#                             DIR/readers/* at entry or exit (else an overlap);
#                             DIR/counter read, 5 ms, written back + 1; rmdir DIR/x
#   cs.sh shared DIR WHO      DIR/readers/<id> while DIR/x is absent at entry and
#                             after 5 ms (else an overlap)
#   cs.sh permit DIR WHO N    DIR/holders/<id> for 10 ms; more than N holders at
#                             once = an overlap
#
# Each piece of evidence appends a line "WHO#SECTION KIND: what" to DIR/overlaps;
# the tests count the sections that saw one. Exits 0 (the section ran).
kind=$1 dir=$2 who=$3
ov() { echo "$who#$$ $kind: $*" >>"$dir/overlaps"; }
busy() { [ -d "$1" ] && [ -n "$(ls -A "$1" 2>/dev/null)" ]; }
case $kind in
exclusive)
    mkdir "$dir/x" 2>/dev/null || ov "entered while x was held"
    busy "$dir/readers" && ov "entered while a reader was in"
    n=$(cat "$dir/counter" 2>/dev/null) || n=0
    sleep 0.005
    echo $((${n:-0} + 1)) >"$dir/counter.sh.$$"
    mv -f "$dir/counter.sh.$$" "$dir/counter"
    busy "$dir/readers" && ov "saw a reader while holding"
    rmdir "$dir/x" 2>/dev/null || ov "x was removed under it"
    ;;
shared)
    mkdir -p "$dir/readers"
    : >"$dir/readers/sh-$$"
    [ -d "$dir/x" ] && ov "entered while a writer was in"
    sleep 0.005
    [ -d "$dir/x" ] && ov "saw a writer while reading"
    rm -f "$dir/readers/sh-$$"
    ;;
permit)
    mkdir -p "$dir/holders"
    : >"$dir/holders/sh-$$"
    in=$(ls -A "$dir/holders" | wc -l)
    [ "$in" -gt "$4" ] && ov "saw $in holders of $4 permits"
    sleep 0.01
    rm -f "$dir/holders/sh-$$"
    ;;
*) echo "cs.sh: unknown section $kind" >&2; exit 64 ;;
esac
exit 0
