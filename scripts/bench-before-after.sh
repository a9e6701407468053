#!/bin/sh
# On a GPU machine: the benchmarks a restructuring must not slow, from an
# older tree (.before/, made by scripts/gpu-before-tree.sh) and from this
# one, in turns within one call, each step under its own time limit:
# bench-gpu.sh (files <-> GPU), bench-phxfs.sh (cp, cat, phx cp) and
# bench-safetensors.py (a 2 GiB single file, hot and cold; ROUNDS rounds,
# before and after alternating).  Each step's output goes to
# LOGDIR/STEP-before.log and STEP-after.log; the tail of each is printed.
#
# Usage, as root from the repository root, with .gpu/ and .before/ carried:
#   sh scripts/bench-before-after.sh LOGDIR [SECONDS]
#   ROUNDS=3  (bench-safetensors.py rounds; default 3)
# SECONDS (default 570) bounds the whole run: a step gets what is left.
set -u
[ $# -ge 1 ] || { echo "usage: $0 LOGDIR [SECONDS]" >&2; exit 2; }
logs=$1
budget=${2:-570}
B=.before
[ -x "$B/.gpu/bin/phx-bench" ] ||
	{ echo "bench-before-after: no $B/ (scripts/gpu-before-tree.sh REV)" >&2; exit 2; }
mkdir -p "$logs" || exit 2
logs=$(cd "$logs" && pwd)
export PHX_DEVICE=${PHX_DEVICE:-cuda}
here=$PWD
. "$(dirname "$0")/gpu-step.sh"
status=0
t0=$(date +%s)
# the lesser of $1 and the seconds left, 0 when too few are left
lim() {
	left=$((budget - ($(date +%s) - t0)))
	[ "$left" -gt "$1" ] && left=$1
	[ "$left" -ge 30 ] && echo "$left" || echo 0
}
run() { # NAME LIMIT DIR CMD...
	n=$1 l=$(lim "$2") d=$3
	shift 3
	[ "$l" -gt 0 ] || { echo "== $n skipped: no time left"; return; }
	cd "$d" && step "$n" "$l" "$@"
	cd "$here"
}
# The older tree's binaries find the carried shared libraries beside its own.
cp -r .gpu/lib/. "$B/.gpu/lib/"
for f in libphoenix libphxfile libphxfsctl; do
	[ -f "$B/.gpu/bin/$f.so" ] || continue
	cp "$B/.gpu/bin/$f.so" "$B/.gpu/lib/$f.so"
	cp "$B/.gpu/bin/$f.so" "$B/.gpu/lib/$f.so.0"
done
echo "before: $(cat "$B/REV" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for w in before after; do
	d=$here; [ $w = before ] && d=$here/$B
	run "bench-$w" 150 "$d" sh scripts/bench-gpu.sh -s 2G -r 1 -m 4G
done
for w in before after; do
	d=$here; [ $w = before ] && d=$here/$B
	run "phxfs-$w" 120 "$d" env SIZE=2G URING=on MODES=direct \
		bash scripts/bench-phxfs.sh .gpu/bin
done
# the loader's name in each tree's bench-safetensors.py
loader() { grep -q '"phxio"' "$1/scripts/bench-safetensors.py" && echo phxio || echo phoenix; }
r=1
while [ "$r" -le "${ROUNDS:-3}" ]; do
	for w in before after; do
		d=$here; [ $w = before ] && d=$here/$B
		run "st-$w-$r" 90 "$d" env PHX_LIBRARY=.gpu/bin/libphoenix.so \
			python3 scripts/bench-safetensors.py --dir /var/tmp \
			--size-gib 2 --repeat 1 --cases single \
			--loaders "$(loader "$d"),safetensors"
	done
	r=$((r + 1))
done
for f in "$logs"/*.log; do
	[ -f "$f" ] || continue
	echo "#### $(basename "$f")"
	tail -n 25 "$f"
done
exit $status
