#!/bin/sh
# Check that libphoenix's files call only downward (docs/architecture.md):
# every phx_* function an object file uses from another one of the
# library must be defined in its own layer or one below.
# Usage: check-layers.sh OBJECT...  (the library's lib/src/*.o)
set -eu

layer_of() {
	case $1 in
	errors | settings | device) echo 0 ;;
	cuda_driver | dev_cuda | dev_sim | sim_mem | dev_kmod | fdmem) echo 1 ;;
	buf) echo 2 ;;
	fdcache | job | engine | sink | transfer | hostcopy | backing) echo 3 ;;
	stream | ring | feed) echo 4 ;;
	registry) echo 5 ;;
	*) echo "check-layers: $1.o is in no layer: add it to $0" >&2
	   exit 1 ;;
	esac
}

names=
for o in "$@"; do
	dir=$(dirname "$o")
	names="$names $(basename "$o" .o)"
done
defs=$(mktemp)
trap 'rm -f "$defs"' EXIT
for n in $names; do
	nm --defined-only "$dir/$n.o" | awk -v n="$n" '$2 ~ /[TDBR]/ {print $3, n}'
done >"$defs"

bad=0
for n in $names; do
	mine=$(layer_of "$n")
	for sym in $(nm -u "$dir/$n.o" | awk '$2 ~ /^phx_/ {print $2}'); do
		owner=$(awk -v s="$sym" '$1 == s {print $2; exit}' "$defs")
		[ -n "$owner" ] || continue
		theirs=$(layer_of "$owner")
		if [ "$theirs" -gt "$mine" ]; then
			echo "check-layers: $n.c (layer $mine) calls $sym of $owner.c (layer $theirs): pass it down instead" >&2
			bad=1
		fi
	done
done
[ $bad = 0 ] && echo "libphoenix layers: every call goes down ($(echo $names | wc -w) files)"
exit $bad
