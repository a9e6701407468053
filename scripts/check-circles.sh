#!/bin/sh
# Check that no files call or include each other in a circle: the graph
# of "a.o calls a function that b.o defines" and of "a includes b.h"
# between the files given must have no loop (a file may call itself).
# Usage: check-circles.sh NAME OBJECT...   (NAME names the part in the
# messages; each object's source is found through its .d file)
set -eu

name=$1
shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for o in "$@"; do
	n=$(basename "$o" .o)
	nm --defined-only "$o" | awk -v n="$n" '$2 ~ /[TDBR]/ {print $3, n}'
done | sort -u >"$tmp/defs"

# calls: caller callee, one line per pair of files
for o in "$@"; do
	n=$(basename "$o" .o)
	nm -u "$o" | awk '{print $2}' | sort -u |
		join - "$tmp/defs" | awk -v n="$n" '$2 != n {print n, $2}'
done | sort -u >"$tmp/calls"

# includes of the part's own headers (from the compiler's .d files; the
# public header's parts in lib/include are not the part's, whatever their
# names)
for o in "$@"; do
	d=${o%.o}.d
	[ -f "$d" ] || continue
	n=$(basename "$o" .o)
	tr ' \\' '\n\n' <"$d" | grep '\.h$' | grep -v -e '^/' -e '^lib/include/' |
		while read -r h; do
			echo "$n $(basename "$h" .h)"
		done
done | sort -u >"$tmp/includes"

bad=0
for kind in calls includes; do
	if ! tsort "$tmp/$kind" >/dev/null 2>"$tmp/err"; then
		loop=$(grep -v 'input contains a loop' "$tmp/err" |
			sed 's/^tsort: //' | tr '\n' ' ')
		echo "check-circles: $name: files whose $kind go round in a circle: $loop- make one of them pass a function or state down instead" >&2
		bad=1
	fi
done
[ $bad = 0 ] &&
	echo "$name: no call or include circles ($# files, $(wc -l <"$tmp/calls") call pairs)"
exit $bad
