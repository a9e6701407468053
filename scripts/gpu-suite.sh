#!/bin/sh
# Run the suites and benchmarks a change needs on a GPU machine, each step
# under its own time limit, so that one hang or one slow step cannot eat
# the others; each step's output goes to LOGDIR/STEP.log and one summary
# line per step to stdout.
#
# Usage, as root from the repository root, with .gpu/ built by
# scripts/gpu-bundle.sh and the peers' wheels in .whl/ (docs/benchmarks.md):
#   sh scripts/gpu-suite.sh LOGDIR STEP...
# Steps (limit in seconds):
#   suites 330        every carried suite (.gpu/run-tests)
#   lib 200           libphoenix's suite only
#   gpu-python 200    the Python suites on the GPU (torch, streams, LMCache's order)
#   no-hang 300       the torch stream stress test in 20 fresh processes
#   bench 200         scripts/bench-gpu.sh -s 2G -r 1 -m 4G
#   interference 150  scripts/bench-stream-interference.py
#   st-single 200     bench-safetensors.py, 2 GiB single file
#   st-sharded 200    bench-safetensors.py, sharded checkpoint and save
#   st-save 300       bench-safetensors.py, the save only, against safetensors
#                     and phx_write, three rounds of one run of each writer
#   st-first 450      bench-safetensors.py, 4 GiB single file and sharded:
#                     each process's first load against its later ones, and
#                     with the device's set-up done before it
#   first 300         scripts/bench-first-load.py --profile: the first load
#                     of a process after each part of the set-up, and
#                     what its first and second loads spend, by function
#   phxfs 300         scripts/bench-phxfs.sh, 4 GiB as its figures are
#                     published (PHXFS_SIZE, MODES from the environment;
#                     default direct, also over io_uring (switched on
#                     for the run) and with 16 MiB st_blksize: cat's
#                     read size)
#   phx-cp 200        scripts/bench-phx-cp.sh: phx cp over an existing file
#                     and into a new one against phx_read, for each build
#                     folder in PHX_CP_BUILDS (default .gpu/bin) in turn
#   hot 150           scripts/bench-hot.py: hot read_into and load_safetensors
#                     of a 2 GiB file against the pinned copy rate, with
#                     the default staging and 128 MiB of it
#   hot-limit 90      scripts/bench-hot-limit.py: the page cache's copy
#                     rate on 4, 8, 16 threads and the pinned copy rate,
#                     alone and at once (what a hot read through the CPU
#                     can reach on the machine)
#   hot-staging 150   scripts/bench-hot.py under staging sizes of 16, 32
#                     and 64 MiB (the readers' pieces 512 KiB to 2 MiB)
#                     and 16 MiB with 8 readers, in turn: whether
#                     readers' slots that stay in the CPU's cache help
#   readers 420       bench-gpu.sh's hot rows (-s 2G -C) under
#                     PHX_HOT_READERS=0, 16 and 32, two rounds in turn
#                     (about a minute a run): single runs swing, so the
#                     settings alternate
#   alloc 100         scripts/bench-alloc.py, 2 GiB, by PHX_ALLOC_CHUNK
#   kv 250            bench-kv.sh kv (LMCache's slab pattern)
#   small 150         bench-kv.sh small (4 KiB random reads)
#   setup 90          bench-kv.sh setup
#   fio 150           bench-kv.sh fio
#   gather 900        bench-kv.sh small (QD 32 and 128, 20000 reads) and
#                     fio (QD 32 and 128) with PHX_GATHER=off, auto, on:
#                     the copy engine's way against the gather kernel
#   lmcache 200       LMCache's own backend module against libphxfile.so
set -u
[ $# -ge 2 ] || { echo "usage: $0 LOGDIR STEP..." >&2; exit 2; }
logs=$1
shift
mkdir -p "$logs" || exit 2
export PHX_DEVICE=${PHX_DEVICE:-cuda}
site=${TMPDIR:-/tmp}/phx-site
wheels() {
	[ -d "$site" ] && return 0
	python3 -m pip install -q --no-index --no-deps --target "$site" \
		.whl/*.whl >"$logs/wheels.log" 2>&1
}
# bench-safetensors.py with the peers' wheels on the path
st="env PYTHONPATH=$site PHX_LIBRARY=.gpu/bin/libphoenix.so python3 scripts/bench-safetensors.py --dir /var/tmp"
. "$(dirname "$0")/gpu-step.sh"
status=0
for s in "$@"; do
	case $s in
	suites) step suites 330 sh .gpu/run-tests ;;
	lib) step lib 200 env LD_LIBRARY_PATH="$PWD/.gpu/lib" \
		sh scripts/test-lib.sh .gpu/bin/test-lib --timeout 120 ;;
	gpu-python) step gpu-python 200 sh tests/python/run.sh .gpu/bin -q -rs \
		-o faulthandler_timeout=120 ;;
	no-hang) step no-hang 300 sh -c 'for i in $(seq 20); do
		echo "== run $i"
		sh tests/python/run.sh .gpu/bin -q -o faulthandler_timeout=60 \
			-k no_hang || exit 1; done' ;;
	bench) step bench 200 sh scripts/bench-gpu.sh -s 2G -r 1 -m 4G ;;
	interference) step interference 150 env PHX_LIBRARY=.gpu/bin/libphoenix.so \
		PYTHONPATH=python python3 scripts/bench-stream-interference.py \
		--dir /var/tmp ;;
	st-single) wheels
		step st-single 200 $st --size-gib 2 --repeat 1 --cases single ;;
	st-sharded) wheels
		step st-sharded 200 $st --repeat 1 --cases sharded,save ;;
	st-save) wheels
		step st-save 300 $st --repeat 3 --cases save \
			--loaders safetensors,phxio ;;
	st-first) wheels
		step st-first 450 $st --size-gib 4 --repeat 3 \
			--cases single,sharded --loaders phxio,phxio-setup-apart ;;
	first) step first 300 env PHX_LIBRARY=.gpu/bin/libphoenix.so \
		PYTHONPATH=python python3 scripts/bench-first-load.py --profile ;;
	phxfs) step phxfs 300 env SIZE="${PHXFS_SIZE:-4G}" URING=on \
		MODES="${MODES:-direct direct,io_uring direct,blksize=16M}" \
		bash scripts/bench-phxfs.sh .gpu/bin ;;
	phx-cp) step phx-cp 200 bash scripts/bench-phx-cp.sh \
		${PHX_CP_BUILDS:-.gpu/bin} ;;
	hot) step hot 150 env PHX_LIBRARY=.gpu/bin/libphoenix.so \
		PYTHONPATH=python python3 scripts/bench-hot.py \
		PHX_STAGING_SIZE=128M ;;
	hot-limit) step hot-limit 90 python3 scripts/bench-hot-limit.py ;;
	hot-staging) step hot-staging 150 env \
		PHX_LIBRARY=.gpu/bin/libphoenix.so PYTHONPATH=python \
		python3 scripts/bench-hot.py --repeat 5 PHX_STAGING_SIZE=16M \
		PHX_STAGING_SIZE=32M "PHX_STAGING_SIZE=16M PHX_HOT_READERS=8" \
		PHX_STAGING_SIZE=64M PHX_STAGING_SIZE=16M ;;
	readers) step readers 420 sh -c 'for round in 1 2; do
		for r in 0 16 32; do echo "== round $round PHX_HOT_READERS=$r"
		PHX_HOT_READERS=$r sh scripts/bench-gpu.sh -s 2G -r 1 -m 4G -C |
			grep -E "^file->GPU hot .*(pinned|phx_read |\(stream\) )"
		done; done' ;;
	alloc) step alloc 100 env PHX_LIBRARY=.gpu/bin/libphoenix.so \
		PYTHONPATH=python python3 scripts/bench-alloc.py --size 2G ;;
	kv) step kv 250 sh scripts/bench-kv.sh kv -s 2G -r 1 -b 16K,4M,16M \
		-n 1,4 -o 128 ;;
	small) step small 150 sh scripts/bench-kv.sh small -s 2G -r 1 -b 4K \
		-q 1,32,128 -o 2000 ;;
	setup) step setup 90 sh scripts/bench-kv.sh setup -r 3 ;;
	fio) step fio 150 sh scripts/bench-kv.sh fio ;;
	gather) for g in off auto on; do
		step gather-$g-small 150 env PHX_GATHER=$g sh scripts/bench-kv.sh \
			small -s 2G -r 1 -b 4K -q 32,128 -o 20000
		step gather-$g-fio 150 env PHX_GATHER=$g FIO_QDS="32 128" \
			sh scripts/bench-kv.sh fio
	done ;;
	lmcache) step lmcache 200 python3 tests/python/lmcache_phx_gpu.py \
		--build .gpu/lib ;;
	*) echo "$0: unknown step $s" >&2; status=2 ;;
	esac
done
exit $status
