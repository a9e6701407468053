#!/bin/bash
# Benchmark: `phx cp` of a cached file into phxfs, over an existing file
# and into a new one, against phx_read of the same bytes into device
# memory allocated beforehand, at three sizes (4 KiB: the command's
# fixed cost; 512 MiB; 2 GiB).  With several build folders their phxfs
# daemons are mounted in turn on one mount point, in rounds, so a change
# to the daemon is measured beside what it replaces in one run.  Every
# copy is compared with cmp once.  Prints medians in ms and ratios.
#
#   scripts/bench-phx-cp.sh [BUILD_DIR...]     (default: build)
#
#   ROUNDS=2  RUNS=5 (timed copies a figure)  PHX_MOUNT=/mnt/phx
#   BENCH_DIR=/var/tmp (where the source files are made once)
#   PHX_DEVICE=cuda|sim   the devices the daemon and phx_read use
set -euo pipefail

builds=("$@")
[ ${#builds[@]} -gt 0 ] || builds=(build)
ROUNDS=${ROUNDS:-2}
RUNS=${RUNS:-5}
MP=${PHX_MOUNT:-/mnt/phx}
DIR=${BENCH_DIR:-/var/tmp}
here=$(cd "$(dirname "$0")" && pwd)

for b in "${builds[@]}"; do
	for f in phx phxfs libphoenix.so; do
		[ -x "$b/$f" ] || [ -f "$b/$f" ] || {
			echo "bench-phx-cp: $b/$f missing; build it first" >&2
			exit 1
		}
	done
done

files=("$DIR/phx-cp-4k" "$DIR/phx-cp-512m" "$DIR/phx-cp-2g")
sizes=(4096 $((512 << 20)) $((2048 << 20)))
for i in 0 1 2; do
	f=${files[$i]}
	if [ ! -f "$f" ] || [ "$(stat -c %s "$f")" != "${sizes[$i]}" ]; then
		echo "making $f (${sizes[$i]} random bytes)..."
		head -c "${sizes[$i]}" /dev/urandom > "$f"
	fi
	cat "$f" > /dev/null # hot in the page cache
done

median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'; }
# ms CMD...: milliseconds CMD took, on the shell's own clock
ms() {
	local t0=$EPOCHREALTIME t1
	"$@"
	t1=$EPOCHREALTIME
	awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'
}

cleanup() { "${builds[0]}/phx" umount "$MP" >/dev/null 2>&1 || true; }
trap cleanup EXIT

declare -A RES
for round in $(seq "$ROUNDS"); do
	for b in "${builds[@]}"; do
		phx=$b/phx
		"$phx" umount "$MP" >/dev/null 2>&1 || true
		out=$("$phx" mount "$MP" 2>&1) || { echo "$out" >&2; exit 1; }
		dev=$(ls "$MP" | head -n 1)
		dst=$MP/$dev/phx-cp-bench
		for i in 0 1 2; do
			f=${files[$i]}
			"$phx" cp -q "$f" "$dst"
			cmp "$f" "$dst" || { echo "MISMATCH: $b, $f" >&2; exit 1; }
			all=""
			for _ in $(seq "$RUNS"); do
				all="$all$(ms "$phx" cp -q "$f" "$dst")"$'\n'
			done
			RES[$round,$b,$i,existing]=$(printf '%s' "$all" | median)
			all=""
			for _ in $(seq "$RUNS"); do
				rm -f "$dst"
				all="$all$(ms "$phx" cp -q "$f" "$dst")"$'\n'
			done
			cmp "$f" "$dst" || { echo "MISMATCH (new): $b, $f" >&2; exit 1; }
			RES[$round,$b,$i,new]=$(printf '%s' "$all" | median)
		done
		rm -f "$dst"
		"$phx" umount "$MP"
	done
	# phx_read of the same files, as the peer, once a round
	read -r RES[$round,read,0] RES[$round,read,1] RES[$round,read,2] < <(
		PHX_LIBRARY="${builds[0]}/libphoenix.so" \
		PYTHONPATH="$here/../python:$here" python3 - "$RUNS" "${files[@]}" <<'EOF'
import os, sys
import phxio
from bench_safetensors_sim import median_time
runs, files = int(sys.argv[1]), sys.argv[2:]
dev = phxio.device()
out = []
for f in files:
    buf = dev.alloc(os.path.getsize(f))
    t = median_time(lambda: phxio.read_into(f, buf), runs)
    buf.free()
    out.append("%.2f" % (t * 1000))
print(*out)
EOF
	)
done

echo
echo "phx cp of a cached file, median of $RUNS in ms (x phx_read of the same bytes), $(date -u +%Y-%m-%dT%H:%MZ)"
printf '%-5s %-9s %-28s %20s %20s %10s\n' round size build "over an existing file" "into a new file" phx_read
for round in $(seq "$ROUNDS"); do
	for i in 0 1 2; do
		for b in "${builds[@]}"; do
			r=${RES[$round,read,$i]}
			e=${RES[$round,$b,$i,existing]}
			n=${RES[$round,$b,$i,new]}
			printf '%-5s %-9s %-28s %11s (%6.3fx) %11s (%6.3fx) %10s\n' \
				"$round" "$(numfmt --to=iec "${sizes[$i]}")" "$b" \
				"$e" "$(awk -v a="$r" -v b="$e" 'BEGIN { print a / b }')" \
				"$n" "$(awk -v a="$r" -v b="$n" 'BEGIN { print a / b }')" \
				"$r"
		done
	done
done
