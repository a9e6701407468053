#!/bin/sh
# Check libphoenix's layering (docs/architecture.md, "Layers").  The
# folders of lib/src are the layers; a file may use only its own folder
# and the folders of lower layers:
#
#   - every phx_* symbol an object file uses from another file of the
#     library is defined in its own folder or a lower layer's (nm);
#   - every #include "..." of a file names a header of its own folder
#     or of a lower layer's;
#   - a folder's private header (NAME_i.h) is included only there;
#   - folders of one layer (the backends) use nothing of each other;
#   - no circle of files: neither calls (A uses B, B uses ... A) nor
#     includes go round, also inside a folder.
#
# Usage: check-layers.sh OBJECT...  (build/.../lib/src/FOLDER/FILE.o)
set -eu

src=lib/src

# The layer of a folder of lib/src, bottom up.
layer_of() {
	case $1 in
	base) echo 0 ;;
	device) echo 1 ;;
	device/cuda | device/sim | device/kmod) echo 2 ;;
	buf) echo 3 ;;
	engine) echo 4 ;;
	stream) echo 5 ;;
	registry) echo 6 ;;
	*) echo "check-layers: $src/$1 is no layer: add the folder to $0 and docs/architecture.md" >&2
	   exit 1 ;;
	esac
}

# FOLDER/NAME under lib/src of an object (without .o) or a source file.
file_of() {
	echo "$1" | sed -e "s|^.*$src/||" -e 's|\.o$||'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0

# ---- calls -----------------------------------------------------------
for o in "$@"; do
	f=$(file_of "$o")
	nm --defined-only "$o" | awk -v f="$f" '$2 ~ /[TDBR]/ {print $3, f}'
done >"$tmp/defs"
for o in "$@"; do
	f=$(file_of "$o")
	nm -u "$o" | awk '{print $2}' | while read -r sym; do
		owner=$(awk -v s="$sym" '$1 == s {print $2; exit}' "$tmp/defs")
		if [ -n "$owner" ]; then echo "$f $owner $sym"; fi
	done
done >"$tmp/calls"

check_edge() { # FILE OTHER WHAT
	mine=$(dirname "$1")
	theirs=$(dirname "$2")
	[ "$mine" = "$theirs" ] && return 0
	lm=$(layer_of "$mine")
	lt=$(layer_of "$theirs")
	if [ "$lt" -gt "$lm" ]; then
		echo "check-layers: $src/$1 (layer $lm) $3 of $src/$2 (layer $lt): pass it down instead" >&2
		return 1
	fi
	if [ "$lt" -eq "$lm" ]; then
		echo "check-layers: $src/$1 $3 of $src/$2, a folder beside its own: move what both need below them" >&2
		return 1
	fi
	return 0
}

while read -r f owner sym; do
	check_edge "$f" "$owner" "uses $sym" || bad=1
done <"$tmp/calls"

# ---- includes ----------------------------------------------------------
find "$src" -name '*.h' | while read -r h; do
	echo "$(basename "$h") $(file_of "$h")"
done >"$tmp/headers"
find "$src" -name '*.[ch]' | sort | while read -r s; do
	f=$(file_of "$s")
	sed -n 's/^#include "\([^"]*\)".*/\1/p' "$s" | while read -r inc; do
		owner=$(awk -v n="$inc" '$1 == n {print $2; exit}' "$tmp/headers")
		if [ -z "$owner" ]; then
			case $inc in
			*/*) echo "check-layers: $s includes \"$inc\" by a path: name a header of its own folder or a lower one, found through the include path" >&2
			     echo BAD ;;
			esac
			continue
		fi
		echo "$f $owner"
	done
done >"$tmp/includes"
grep -q '^BAD$' "$tmp/includes" && bad=1
grep -v '^BAD$' "$tmp/includes" >"$tmp/inc" || true
while read -r f owner; do
	check_edge "$f" "$owner" "includes the header" || bad=1
	case $owner in
	*_i.h)
		if [ "$(dirname "$f")" != "$(dirname "$owner")" ]; then
			echo "check-layers: $src/$f includes $src/$owner, private to its folder: use the folder's own header" >&2
			bad=1
		fi ;;
	esac
done <"$tmp/inc"

# ---- circles -----------------------------------------------------------
circles() { # KIND FILE-OF-EDGES
	if ! tsort "$2" >/dev/null 2>"$tmp/loop"; then
		echo "check-layers: these files $1 each other in a circle:" \
			$(grep -v 'input contains a loop' "$tmp/loop" |
				sed 's/^tsort: //' | sort -u) >&2
		return 1
	fi
}
awk '{print $1, $2}' "$tmp/calls" | sort -u >"$tmp/call-edges"
circles call "$tmp/call-edges" || bad=1
sort -u "$tmp/inc" >"$tmp/inc-edges"
circles include "$tmp/inc-edges" || bad=1

[ $bad = 0 ] && echo "libphoenix layers: every call and include goes down, no circles ($# files)"
exit $bad
