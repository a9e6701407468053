#!/bin/bash
# Benchmark: cp of a hot file into phxfs and cat back out, against the same
# commands on /dev/shm, in one run; then `phx cp` hot and cold.  Median of
# 3, every copy into phxfs checked byte for byte once; `phx cp` out of
# phxfs to the disk against phx_write of the same bytes (both to fsync).
# Prints a table of GB/s and ratios to /dev/shm (and to phx_write).
#
#   scripts/bench-phxfs.sh [BUILD_DIR]
#
#   SIZE=4G            file size (at least 4G for the published figures)
#   BENCH_FILE=path    source file (default /var/tmp/phx-bench.bin; made
#                      of random bytes if missing or of another size)
#   PHX_MOUNT=/mnt/phx mount point;  PHX_DEVICE=cuda|sim  devices
#   MODES="direct writeback"   phxfs modes to measure, each with more
#                      mount options after a comma (direct,blksize=64M;
#                      direct,no_readahead: without the daemon's read-ahead;
#                      direct,io_uring: requests over io_uring)
#
# As root it raises fs.fuse.max_pages_limit (16 MiB requests) for the run
# (and enable_uring with URING=on), and puts them back after.
#   URING=as-is|on     on: switch the kernel's FUSE over io_uring on (the
#                      fuse module's enable_uring, root) for the run, which
#                      modes with io_uring need
#   RUNS=3
set -euo pipefail

BUILD=${1:-build}
SIZE=${SIZE:-4G}
FILE=${BENCH_FILE:-/var/tmp/phx-bench.bin}
MP=${PHX_MOUNT:-/mnt/phx}
MODES=${MODES:-direct writeback}
RUNS=${RUNS:-3}
PHX="$BUILD/phx"
SHM=/dev/shm/phx-bench.$$

bytes=$(numfmt --from=iec "$SIZE")
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# gbps SECONDS: throughput of $bytes in GB/s
gbps() { awk -v b="$bytes" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

# time_cmd CMD...: seconds CMD took, on the shell's own clock (a `date`
# started for each reading would put a process start inside the time)
time_cmd() {
	local t0=$EPOCHREALTIME t1
	"$@"
	t1=$EPOCHREALTIME
	awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.4f\n", b - a }'
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }

# 16 MiB FUSE requests need fs.fuse.max_pages_limit raised (Linux 6.13+,
# root); put it back after.
LIMIT=/proc/sys/fs/fuse/max_pages_limit
old_limit=""
if [ -w "$LIMIT" ]; then
	old_limit=$(cat "$LIMIT")
	echo 4096 > "$LIMIT"
fi
URING_PARAM=/sys/module/fuse/parameters/enable_uring
old_uring=""
if [ "${URING:-as-is}" = on ] && [ -w "$URING_PARAM" ]; then
	old_uring=$(cat "$URING_PARAM")
	echo 1 > "$URING_PARAM"
fi

cleanup() {
	rm -f "$SHM"
	"$PHX" umount "$MP" >/dev/null 2>&1 || true
	[ -z "$old_limit" ] || echo "$old_limit" > "$LIMIT"
	[ -z "$old_uring" ] || { [ "$old_uring" = Y ] && echo 1 || echo 0; } > "$URING_PARAM"
}
trap cleanup EXIT

if [ ! -f "$FILE" ] || [ "$(stat -c %s "$FILE")" != "$bytes" ]; then
	echo "making $FILE ($SIZE of random bytes)..."
	python3 - "$FILE" "$bytes" <<'EOF'
import os, random, sys
n, r = int(sys.argv[2]), random.Random(1)
with open(sys.argv[1], "wb") as f:
    while n:
        k = min(n, 64 << 20)
        f.write(r.randbytes(k))
        n -= k
EOF
fi
cat "$FILE" > /dev/null # hot in the page cache

declare -A RES
# measure_after PREP NAME CMD...: median seconds of RUNS runs of CMD into
# RES[NAME], PREP (a command, untimed) before each
measure_after() {
	local prep=$1 name=$2 t all=""
	shift 2
	for _ in $(seq "$RUNS"); do
		$prep
		t=$(time_cmd "$@")
		all="$all$t"$'\n'
	done
	RES[$name]=$(printf '%s' "$all" | median)
	printf '  %-28s %s s (%s GB/s)\n' "$name" "${RES[$name]}" \
		"$(gbps "${RES[$name]}")"
}

# measure NAME CMD...: the same with nothing before each run
measure() { measure_after : "$@"; }

cp_shm() { rm -f "$SHM"; cp "$FILE" "$SHM"; }
cat_shm() { cat "$SHM" > /dev/null; }
echo "peer: /dev/shm"
measure shm.cp cp_shm
measure shm.cat cat_shm
rm -f "$SHM"

for mode in $MODES; do
	# MODE[,OPTION...]: more mount options, e.g. direct,blksize=64M
	o=""
	case $mode in *,*) o=${mode#*,} ;; esac
	[ "${mode%%,*}" = writeback ] && o="writeback${o:+,$o}"
	opts=${o:+-o $o}
	"$PHX" umount "$MP" >/dev/null 2>&1 || true
	# shellcheck disable=SC2086
	"$PHX" mount $opts "$MP"
	dev=$(ls "$MP" | head -n 1)
	dst="$MP/$dev/bench"
	echo "phxfs ($mode) on $dev"
	"$PHX" status "$MP" | grep "io_uring" || true
	cp "$FILE" "$dst" && cmp "$FILE" "$dst" || {
		echo "MISMATCH: $dst differs from $FILE" >&2
		exit 1
	}
	cp_phx() { rm -f "$dst"; cp "$FILE" "$dst"; }
	cat_phx() { cat "$dst" > /dev/null; }
	measure "$mode.cp" cp_phx
	measure "$mode.cat" cat_phx
	rm -f "$dst"
done

echo "phx cp (the daemon reads the file through libphoenix)"
"$PHX" umount "$MP" >/dev/null 2>&1 || true
"$PHX" mount "$MP" # phx cp needs the default (direct) mode
dst="$MP/$(ls "$MP" | head -n 1)/bench"
pcp() { "$PHX" cp -q "$FILE" "$dst"; }
pcp && cmp "$FILE" "$dst" || { echo "MISMATCH after phx cp" >&2; exit 1; }
# over the file of the run before (its device memory reused), and into a
# new one (allocated as it fills)
measure phxcp.hot pcp
pcp_new() { rm -f "$dst"; }
measure_after pcp_new phxcp.new pcp
# phx cp cold is timed below, each run beside a cold phx_read: the disk's
# rate drifts between runs more than the two differ.

echo "phx cp out of phxfs (the daemon writes through libphoenix) vs phx_write"
OUTF="$(dirname "$FILE")/phx-bench.out"
pout() { "$PHX" cp -q "$dst" "$OUTF"; sync "$OUTF"; }
rm -f "$OUTF"
pout && cmp "$FILE" "$OUTF" || { echo "MISMATCH after phx cp out" >&2; exit 1; }
# As for phx_write below: the old copy is removed and everything synced
# before the clock starts, so neither pays for the other's unlink.
pout_prep() { rm -f "$OUTF"; sync; }
measure_after pout_prep phxcp.out pout
# phx_write of the same bytes from one device buffer, up to fsync; then,
# to tell the daemon's cost from its file's, into a file sized first (as
# phx cp out sizes its file) and from a sparse buffer filled by 256 MiB
# reads (as phx cp fills a phxfs file).  The peers of phx cp in: phx_read
# of the hot file into a buffer allocated before, and the allocation of
# that much device memory alone; cold, phx_read and phx cp in turns.
read -r RES[phx_write] RES[phx_write.sized] RES[phx_write.sparse] \
	RES[phx_read] RES[alloc] RES[phx_read.cold] RES[phxcp.cold] < <(
	PHX_LIBRARY="$BUILD/libphoenix.so" \
	PYTHONPATH="$(dirname "$0")/../python" python3 - "$FILE" "$OUTF" \
	"$RUNS" "$PHX" "$dst" <<'EOF'
import os, statistics, subprocess, sys, time
import phxio
src, out, runs, phx, dst = sys.argv[1:6]
runs = int(runs)
size = os.path.getsize(src)
dev = phxio.Device()


def timed(buf, sized):
    times = []
    for _ in range(runs):
        if os.path.exists(out):
            os.unlink(out)
        os.sync()
        t0 = time.perf_counter()
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        if sized:
            os.ftruncate(fd, size)
        phxio.write_from(fd, buf)
        os.fsync(fd)
        os.close(fd)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


t = time.perf_counter()
buf = dev.alloc(size)
t_alloc = time.perf_counter() - t
phxio.read_into(src, buf)
reads = []
for _ in range(runs):
    t = time.perf_counter()
    phxio.read_into(src, buf)
    reads.append(time.perf_counter() - t)


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        pass  # not root: the "cold" reads are as warm as the file


colds, cp_colds = [], []
for _ in range(runs):
    drop_caches()
    t = time.perf_counter()
    phxio.read_into(src, buf)
    colds.append(time.perf_counter() - t)
    drop_caches()
    t = time.perf_counter()
    subprocess.run([phx, "cp", "-q", src, dst], check=True)
    cp_colds.append(time.perf_counter() - t)
res = [timed(buf, False), timed(buf, True)]
buf.free()
buf = dev.alloc(size, sparse=True)
step = 256 << 20
for off in range(0, size, step):
    phxio.read_into(src, buf[off:off + step], off)
res.append(timed(buf, False))
buf.free()
allocs = [t_alloc]
for _ in range(runs - 1):
    t = time.perf_counter()
    buf = dev.alloc(size)
    allocs.append(time.perf_counter() - t)
    buf.free()
print(*res, statistics.median(reads), statistics.median(allocs),
      statistics.median(colds), statistics.median(cp_colds))
EOF
)
cmp "$FILE" "$OUTF" || { echo "MISMATCH after phx_write" >&2; exit 1; }
rm -f "$OUTF"
"$PHX" status "$MP"

echo
echo "size $SIZE, median of $RUNS, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r)"
echo "phxfs: $("$(dirname "$PHX")/phxfs" --version 2>&1 | grep -i fuse | head -n 1)," \
	"max_pages_limit $(cat "$LIMIT" 2>/dev/null || echo n/a)," \
	"kernel's FUSE over io_uring (enable_uring):" \
	"$(cat "$URING_PARAM" 2>/dev/null || echo absent) during the run"
printf '%-34s %10s %12s\n' case GB/s "vs /dev/shm"
row() { printf '%-34s %10s %12s\n' "$1" "$(gbps "${RES[$2]}")" \
	"$(ratio "${RES[$3]}" "${RES[$2]}")"; }
row "cp -> /dev/shm" shm.cp shm.cp
row "cat <- /dev/shm" shm.cat shm.cat
for mode in $MODES; do
	row "cp -> phxfs ($mode)" "$mode.cp" shm.cp
	row "cat <- phxfs ($mode)" "$mode.cat" shm.cat
done
printf '%-34s %10s\n' "phx_read, hot" "$(gbps "${RES[phx_read]}")"
printf '%-34s %10s %12s\n' "phx cp, hot" "$(gbps "${RES[phxcp.hot]}")" \
	"$(ratio "${RES[phx_read]}" "${RES[phxcp.hot]}")x phx_read"
printf '%-34s %10s %12s\n' "phx cp, hot, new file" \
	"$(gbps "${RES[phxcp.new]}")" \
	"$(ratio "${RES[phx_read]}" "${RES[phxcp.new]}")x phx_read"
printf '%-34s %10s\n' "device memory allocation" "$(gbps "${RES[alloc]}")"
printf '%-34s %10s\n' "phx_read, cold" "$(gbps "${RES[phx_read.cold]}")"
printf '%-34s %10s %12s\n' "phx cp, cold" "$(gbps "${RES[phxcp.cold]}")" \
	"$(ratio "${RES[phx_read.cold]}" "${RES[phxcp.cold]}")x phx_read"
printf '%-34s %10s %12s\n' "phx cp out (fsync)" "$(gbps "${RES[phxcp.out]}")" \
	"$(ratio "${RES[phx_write]}" "${RES[phxcp.out]}")x phx_write"
printf '%-34s %10s\n' "phx_write (fsync)" "$(gbps "${RES[phx_write]}")"
printf '%-34s %10s %12s\n' "phx_write, file sized first" \
	"$(gbps "${RES[phx_write.sized]}")" \
	"$(ratio "${RES[phx_write]}" "${RES[phx_write.sized]}")x phx_write"
printf '%-34s %10s %12s\n' "phx_write, sparse buffer" \
	"$(gbps "${RES[phx_write.sparse]}")" \
	"$(ratio "${RES[phx_write]}" "${RES[phx_write.sparse]}")x phx_write"
