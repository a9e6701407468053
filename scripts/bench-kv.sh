#!/bin/sh
# Small-I/O benchmarks on the GPU machine, each ending with its table:
#
#   kv     LMCache's slab pattern: 16K-16M chunks at random slab offsets,
#          1 and 4 streams, hot, cold and writes; libphxfile (as LMCache
#          calls it), phx_io_run, cuFile async and batch, raw io_uring
#   small  4-64 KiB cold random reads at QD 1, 8, 32, 128: IOPS,
#          p50/p99 and the process's CPU time per read of libphoenix
#          (batch, polled, sync), cuFile (batch, sync) and raw io_uring
#          O_DIRECT
#   setup  library load, driver open, 16 MiB / 1 GiB registration, first
#          4 KiB read and close, each in a fresh process, against cuFile
#   fio    4 KiB random reads with fio: its io_uring engine against the
#          Phoenix engine (libphxfio.so) on the same job; IOPS, latency
#          and the job thread's CPU time per I/O
#
# Usage: scripts/bench-kv.sh [DIR] MODE [phx-kvbench options]
#        (fio: FIO_SIZE=4G, FIO_RUNTIME=5 seconds per job, FIO_QDS="1 32 128")
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
-*) echo "bench-kv: options go after the mode: scripts/bench-kv.sh [DIR] kv|small|setup|fio [options]" >&2
	exit 1 ;;
*) dir=$1; shift ;;
esac
mode=${1:-}
[ -n "$mode" ] && shift
bin=${BIN:-.gpu/bin}

fail() { echo "bench-kv: $*" >&2; exit 1; }

case "$mode" in
kv|small|setup|fio) ;;
*) fail "unknown mode \"$mode\": scripts/bench-kv.sh [DIR] kv|small|setup|fio [options]" ;;
esac
[ -x "$bin/phx-kvbench" ] ||
	fail "$bin/phx-kvbench not found; run scripts/gpu-bundle.sh where the project builds, then bring .gpu here (or set BIN)"
bin=$(cd "$bin" && pwd)
[ "$mode" = fio ] && [ $# -gt 0 ] &&
	fail "fio takes no options ($*): set FIO_SIZE, FIO_RUNTIME or FIO_QDS"
mkdir -p "$dir" || fail "cannot create $dir"

. scripts/bench-disk.sh
bench_disk bench-kv
echo "bench-kv: $dir on $fstype ($majmin), $(nproc) CPUs, $(uname -r)"

export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "$mode" != fio ]; then
	exec timeout --foreground 580 "$bin/phx-kvbench" "$@" "$mode" "$dir"
fi

# ---- fio: the same job through io_uring and through the Phoenix engine --
# The bundle's fio (built from Debian's fio 3.33 source by make fio-gpu)
# needs libz, which the bundle carries in lib/ beside bin/.
if [ -d "$bin/../lib" ]; then
	lib=$(cd "$bin/../lib" && pwd)
	export LD_LIBRARY_PATH="$lib:$LD_LIBRARY_PATH"
fi
fio=$bin/fio
[ -f "$fio" ] && [ -x "$fio" ] || fio=$(command -v fio || true)
[ -n "$fio" ] || fail "no fio: carry the one make fio-gpu builds (scripts/gpu-bundle.sh puts it in .gpu/bin)"
"$fio" --version >/dev/null 2>&1 ||
	fail "$fio does not run here: $("$fio" --version 2>&1 | head -n 1)"
[ -f "$bin/libphxfio.so" ] ||
	fail "$bin/libphxfio.so not found; run scripts/gpu-bundle.sh (or make fio-gpu and set BIN)"
engine=$bin/libphxfio.so
data=$dir/phx-fio.dat
size=${FIO_SIZE:-4G}
runtime=${FIO_RUNTIME:-5}
qds=${FIO_QDS:-1 32 128}
for qd in $qds; do
	case "$qd" in
	*[!0-9]*|0) fail "bad FIO_QDS \"$qds\": queue depths of 1 or more, separated by spaces" ;;
	esac
done
[ -n "$qds" ] || fail "FIO_QDS is empty: give queue depths separated by spaces"
case "$runtime" in
''|*[!0-9]*|0) fail "bad FIO_RUNTIME \"$runtime\": seconds per job, 1 or more" ;;
esac
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Every engine runs this job; only --ioengine and its options differ.
common="--name=kv --filename=$data --size=$size --rw=randread --bs=4k --direct=1 --runtime=$runtime --time_based --norandommap --randrepeat=0 --lat_percentiles=1"
echo "bench-kv: $("$fio" --version) ($fio), engine $engine, file $data ($size)"
echo "bench-kv: each job: fio $common --iodepth=QD --ioengine=ENGINE"

# one job: NAME QD ENGINE-ARGS...; leaves its JSON in $out/NAME-QD
job() {
	name=$1 qd=$2
	shift 2
	sync
	[ -w /proc/sys/vm/drop_caches ] && echo 1 >/proc/sys/vm/drop_caches
	# $common is a list of options: split on purpose
	if ! timeout -k 5 $((runtime + 60)) "$fio" $common --iodepth="$qd" \
		--output-format=json --output="$out/$name-$qd" "$@" \
		>/dev/null 2>"$out/err"; then
		echo "bench-kv: fio $name at QD $qd failed:"
		sed 's/^/  /' "$out/err"
		rm -f "$out/$name-$qd"
	fi
}
# lay the file out once (fio writes it on first use)
timeout 300 "$fio" --name=layout --filename="$data" --size="$size" --rw=read \
	--bs=1M --io_size=1M --output=/dev/null >/dev/null ||
	fail "fio could not create $data"
for qd in $qds; do
	job io_uring "$qd" --ioengine=io_uring
	job phx-batch "$qd" --ioengine=external:"$engine" --phx_mode=batch
	job phx-poll "$qd" --ioengine=external:"$engine" --phx_mode=poll
done
job phx-sync 1 --ioengine=external:"$engine" --phx_mode=sync

python3 - "$out" "$runtime" <<'EOF'
import json, os, sys
out, runtime = sys.argv[1], sys.argv[2]
engines = ["io_uring", "phx-batch", "phx-poll", "phx-sync"]
rows = {}
for f in os.listdir(out):
    name, _, qd = f.rpartition("-")
    if name not in engines:
        continue
    try:
        j = json.load(open(os.path.join(out, f)))["jobs"][0]
    except (ValueError, KeyError, IndexError):
        continue
    r = j["read"]
    if j.get("error") or not r.get("total_ios"):
        continue
    pct = r.get("lat_ns", {}).get("percentile", {})
    # fio's own CPU share of the job's thread, per I/O, in us
    cpu = ((j.get("usr_cpu", 0) + j.get("sys_cpu", 0)) / 100 *
           j.get("job_runtime", 0) * 1e3 / r["total_ios"])
    rows[(int(qd), name)] = (r["iops"], pct.get("50.000000", 0) / 1e3,
                             pct.get("99.000000", 0) / 1e3, cpu)
print("\nfio 4 KiB random reads, cold, %s s per job, the same job on each engine:"
      % runtime)
print("IOPS (x io_uring), p50/p99 latency in us; io_uring = fio's engine into "
      "host memory (the limit), phx-* = libphxfio.so into device memory")
print(("%-4s" % "QD" + "".join(" %-26s" % e for e in engines)).rstrip())
for qd in sorted({q for q, _ in rows}):
    ref = rows.get((qd, "io_uring"), (0,))[0]
    line = "%-4d" % qd
    for e in engines:
        if (qd, e) not in rows:
            line += " %-26s" % ("-" if e == "phx-sync" and qd != 1 else "n/a")
            continue
        iops, p50, p99, _ = rows[(qd, e)]
        ratio = " (%.2fx)" % (iops / ref) if ref and e != "io_uring" else ""
        line += " %-26s" % ("%.1fk%s %.0f/%.0f" % (iops / 1e3, ratio, p50, p99))
    print(line.rstrip())
print("\nCPU time of the job's thread per I/O (fio's usr + sys), us (x io_uring):")
print(("%-4s" % "QD" + "".join(" %-26s" % e for e in engines)).rstrip())
for qd in sorted({q for q, _ in rows}):
    ref = rows.get((qd, "io_uring"), (0, 0, 0, 0))[3]
    line = "%-4d" % qd
    for e in engines:
        cpu = rows[(qd, e)][3] if (qd, e) in rows else None
        cell = "n/a" if cpu is None else "%.1f" % cpu
        if cpu is not None and ref and e != "io_uring":
            cell += " (%.2fx)" % (cpu / ref)
        line += " %-26s" % cell
    print(line.rstrip())
EOF
