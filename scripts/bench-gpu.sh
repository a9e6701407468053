#!/bin/sh
# File <-> GPU benchmark on the GPU machine, in one call: libphoenix
# against raw disk (io_uring O_DIRECT and buffered), cuFile, pread +
# cuMemcpyHtoD and the pinned copy rate, on one file of random bytes,
# ending with one table (see scripts/bench/phx-bench.c).  About 5 minutes
# for the default 4 GiB file; run as root so the page cache can be dropped
# and cuFile finds the file system's udev properties.
#
# Usage: scripts/bench-gpu.sh [DIR] [phx-bench options]
#   DIR   a directory on the disk to measure (default /var/tmp/phx-bench);
#         the random file is created there once and kept for later runs.
# Build phx-bench first with scripts/gpu-bundle.sh (it lands in .gpu/bin).
set -eu
cd "$(dirname "$0")/.."

dir=/var/tmp/phx-bench
case "${1:-}" in
''|-*) ;;
*) dir=$1; shift ;;
esac
bin=${PHX_BENCH:-.gpu/bin/phx-bench}

fail() { echo "bench-gpu: $*" >&2; exit 1; }

[ -x "$bin" ] ||
	fail "$bin not found; run scripts/gpu-bundle.sh where the project builds, then bring .gpu here"
mkdir -p "$dir" || fail "cannot create $dir"

. scripts/bench-disk.sh
bench_disk bench-gpu

# The data file and one written copy, plus slack.
avail=$(df -P -B1 "$dir" | awk 'NR == 2 { print $4 }')
need=$((9 * 1024 * 1024 * 1024))
[ -e "$dir/phx-bench.dat" ] && need=$((need - 4 * 1024 * 1024 * 1024))
[ "$avail" -ge "$need" ] ||
	fail "$dir has $((avail >> 20)) MiB free, $((need >> 20)) MiB needed; free space or pass another directory"

echo "bench-gpu: $dir on $fstype ($majmin), $(nproc) CPUs, $(uname -r)"
# Keep a 600 s call from being cut off without its table.
exec timeout --foreground 590 "$bin" "$@" "$dir"
