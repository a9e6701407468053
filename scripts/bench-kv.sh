#!/bin/sh
# Small-I/O benchmarks on the GPU machine, each ending with its table:
#
#   kv     LMCache's slab pattern: 16K-16M chunks at random slab offsets,
#          1 and 4 streams, hot, cold and writes; libphxfile (as LMCache
#          calls it), phx_io_run, cuFile async and batch, raw io_uring
#   small  4-64 KiB cold random reads at QD 1, 8, 32, 128: IOPS and
#          p50/p99 of libphoenix (batch, polled, sync), cuFile (batch,
#          sync) and raw io_uring O_DIRECT
#   setup  library load, driver open, 16 MiB / 1 GiB registration, first
#          4 KiB read and close, each in a fresh process, against cuFile
#   fio    4 KiB random reads with fio: its io_uring engine against the
#          Phoenix engine (libphxfio.so) on the same job
#
# Usage: scripts/bench-kv.sh [DIR] MODE [phx-kvbench options]
#        (fio: FIO_SIZE=4G FIO_RUNTIME=5 seconds per job)
#   DIR   a directory on the disk to measure (default /var/tmp/phx-bench);
#         the 4 GiB data file is created there once and kept.
# Each mode fits one 10-minute call (the script stops it at 580 s).  Run
# as root: cold runs drop the page cache, cuFile needs the udev data
# written below.  Build the binaries first with scripts/gpu-bundle.sh
# (they land in .gpu/bin) or point BIN at a build folder.
set -eu
cd "$(dirname "$0")/.."

dir=/var/tmp/phx-bench
case "${1:-}" in
kv|small|setup|fio|'') ;;
*) dir=$1; shift ;;
esac
mode=${1:-}
[ -n "$mode" ] && shift
bin=${BIN:-.gpu/bin}

fail() { echo "bench-kv: $*" >&2; exit 1; }

case "$mode" in
kv|small|setup|fio) ;;
*) fail "usage: scripts/bench-kv.sh [DIR] kv|small|setup|fio [options]" ;;
esac
[ -x "$bin/phx-kvbench" ] ||
	fail "$bin/phx-kvbench not found; run scripts/gpu-bundle.sh where the project builds, then bring .gpu here (or set BIN)"
mkdir -p "$dir" || fail "cannot create $dir"

. scripts/bench-disk.sh
bench_disk bench-kv
echo "bench-kv: $dir on $fstype ($majmin), $(nproc) CPUs, $(uname -r)"

export LD_LIBRARY_PATH="$PWD/$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "$mode" != fio ]; then
	exec timeout --foreground 580 "$bin/phx-kvbench" "$@" "$mode" "$dir"
fi

# ---- fio: the same job through io_uring and through the Phoenix engine --
fio=$bin/fio
[ -f "$fio" ] && [ -x "$fio" ] || fio=$(command -v fio || true)
[ -n "$fio" ] || fail "no fio: carry the one make fio-gpu builds (in .gpu/bin)"
[ -f "$bin/libphxfio.so" ] || fail "$bin/libphxfio.so not found"
engine=$(cd "$bin" && pwd)/libphxfio.so
data=$dir/phx-fio.dat
size=${FIO_SIZE:-4G}
runtime=${FIO_RUNTIME:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "bench-kv: $("$fio" --version), engine $engine, file $data ($size)"

# one job: NAME QD ENGINE-ARGS...; prints its JSON into $out/NAME-QD
job() {
	name=$1 qd=$2
	shift 2
	sync
	[ -w /proc/sys/vm/drop_caches ] && echo 1 >/proc/sys/vm/drop_caches
	timeout -k 5 60 "$fio" --name=kv --filename="$data" --size="$size" \
		--rw=randread --bs=4k --direct=1 --iodepth="$qd" \
		--runtime="$runtime" --time_based --norandommap --randrepeat=0 \
		--lat_percentiles=1 \
		--output-format=json --output="$out/$name-$qd" "$@" >/dev/null 2>"$out/err" ||
		{ echo "bench-kv: fio $name at QD $qd failed:"; cat "$out/err"; return 0; }
}
# lay the file out once (fio writes it on first use)
timeout 300 "$fio" --name=layout --filename="$data" --size="$size" --rw=read \
	--bs=1M --io_size=1M --output=/dev/null >/dev/null ||
	fail "fio could not create $data"
for qd in 1 8 32 128; do
	job io_uring "$qd" --ioengine=io_uring
	job phx-batch "$qd" --ioengine=external:"$engine" --phx_mode=batch
	job phx-poll "$qd" --ioengine=external:"$engine" --phx_mode=poll
done
job phx-sync 1 --ioengine=external:"$engine" --phx_mode=sync

python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = {}
for f in sorted(os.listdir(out)):
    if "-" not in f or f == "err":
        continue
    name, qd = f.rsplit("-", 1)
    try:
        j = json.load(open(os.path.join(out, f)))["jobs"][0]["read"]
    except (ValueError, KeyError, IndexError):
        continue
    pct = j.get("lat_ns", {}).get("percentile", {})
    rows[(int(qd), name)] = (j["iops"], pct.get("50.000000", 0) / 1e3,
                             pct.get("99.000000", 0) / 1e3)
print("\nfio 4 KiB random reads, cold, %s s each (x io_uring = IOPS against fio's io_uring engine)" % os.environ.get("FIO_RUNTIME", "5"))
print("%-4s %-12s %12s %10s %10s %12s" % ("QD", "engine", "IOPS", "p50 us",
                                           "p99 us", "x io_uring"))
for (qd, name) in sorted(rows):
    iops, p50, p99 = rows[(qd, name)]
    ref = rows.get((qd, "io_uring"), (0,))[0]
    print("%-4d %-12s %12.0f %10.1f %10.1f %11.2fx" %
          (qd, name, iops, p50, p99, iops / ref if ref else float("nan")))
EOF
