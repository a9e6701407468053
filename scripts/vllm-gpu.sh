#!/bin/sh
# On the GPU machine: install vLLM from the payload that
# scripts/vllm-gpu-payload.sh prepared, then compare vLLM's load formats
# and measure phxio on staged files.  Each step runs under its own time
# limit; its output goes to LOGDIR/STEP.log, one summary line per step to
# stdout, and the tables at the end.
#
# The payload travels in two calls made back to back (one call carries at
# most 64 MiB; the machine keeps /tmp while it is warm):
#   call 1, carrying .vllm1:   sh scripts/vllm-gpu.sh stash
#   call 2, carrying .vllm2:   sh scripts/vllm-gpu.sh run LOGDIR [STEP...]
# Steps of "run" (limit in seconds; default: all, in this order):
#   install 120     join the parts, unpack vLLM, pip-install the wheels
#                   into $WORK/site (no index), mount phxfs at /mnt/phx
#   ckpt 180        a random-init Llama, ~1.64 B parameters, bf16, 4 shards
#   hot 420         phoenix, safetensors, phoenix without direct reads,
#                   phoenix without the set-up beside model construction,
#                   each the first load of a fresh process, hot, in two
#                   rounds of rotated order after an untimed warm-up
#                   process (so no timed one is the machine's first)
#   peers 240       fastsafetensors, runai_streamer, phoenix, safetensors,
#                   hot, one round after the warm-up
#   cold 360        phoenix, safetensors after drop_caches, two rounds
#   staged 200      the checkpoint copied onto phxfs, loaded by phoenix
#                   (direct copies, then views fed to the loaders)
#   staged-file 120 load_safetensors of a staged 4 GiB file (views, copy)
#   streams 90      read_into with torch streams against synchronous
#   first-call 120  load_safetensors of the checkpoint in fresh processes:
#                   first and later call, without and after the loader's
#                   set-up (prepare), and the engines each load built
#   pytests 150     the Python tests of this change on the GPU: release at
#                   exit in every order (torch streams too), the stream
#                   cache, staged checkpoints, bounded groups, direct reads
#                   into parameters in GPU memory
# A step that is cut short leaves the others to run; a later call with
# just the remaining steps works while the machine stays warm.
# PHX_VLLM_ROUNDS sets the rounds of hot and cold (2; 1 when the device
# time left is short).
set -u
WORK=${PHX_VLLM_WORK:-/tmp/phx-vllm}
CK=${PHX_VLLM_CKPT:-/var/tmp/phx-llama-1.6b}
MNT=/mnt/phx
here=$(cd "$(dirname "$0")/.." && pwd)

case ${1:-} in
stash)
	mkdir -p "$WORK" && cp "$here"/.vllm1/vllm.tar.xz.* "$WORK"/ &&
		ls -l "$WORK"
	exit $? ;;
run|_install) ;;
*) echo "usage: $0 stash | run LOGDIR [STEP...]" >&2; exit 2 ;;
esac
export PHX_DEVICE=cuda
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_ENABLE_V1_MULTIPROCESSING=0
unset PHX_LIBRARY
phx=$WORK/bin/phx
bench="python3 $here/scripts/bench-vllm.py"
rounds=${PHX_VLLM_ROUNDS:-2}
nodirect='phoenix{"direct":false}'
noprepare='phoenix{"prepare":false}'

if [ "${1:-}" = _install ]; then
	set -e
	rm -rf "$WORK/site" "$WORK/bin"
	mkdir -p "$WORK/site" "$WORK/bin"
	cp "$here"/.vllm2/vllm.tar.xz.a[b-z] "$WORK"/
	cat "$WORK"/vllm.tar.xz.a? | xz -dc | tar -x -C "$WORK/site"
	python3 -m pip install -q --no-index --no-deps --target "$WORK/site" \
		"$here"/.vllm2/wheels/*.whl "$here"/.vllm2/phxio-*.whl
	cp "$here/.vllm2/phxfs" "$here/.vllm2/phx" "$WORK/bin/"
	python3 -c 'import vllm, phxio; print("vllm", vllm.__version__, "phxio", phxio.__file__)'
	grep -q " $MNT " /proc/mounts || "$phx" mount "$MNT"
	"$phx" status
	exit 0
fi

shift
[ $# -ge 1 ] || { echo "usage: $0 run LOGDIR [STEP...]" >&2; exit 2; }
logs=$1
shift
[ $# -gt 0 ] || set -- install ckpt hot peers cold staged staged-file \
	streams first-call pytests
mkdir -p "$logs" || exit 2

. "$here/scripts/gpu-step.sh"
status=0
for s in "$@"; do
	case $s in
	install) step install 120 sh "$here/scripts/vllm-gpu.sh" _install
		[ $rc = 0 ] || break ;;
	ckpt) [ -f "$CK/model.safetensors.index.json" ] &&
		{ echo "== ckpt: $CK is there"; continue; }
		step ckpt 180 $bench write-ckpt "$CK" ;;
	hot) step hot 420 $bench compare "$CK" --modes hot --repeat $rounds \
		--formats "phoenix,safetensors,$nodirect,$noprepare" \
		--json "$logs/hot.json" ;;
	peers) step peers 240 $bench compare "$CK" --modes hot \
		--formats fastsafetensors,runai_streamer,phoenix,safetensors \
		--json "$logs/peers.json" ;;
	cold) step cold 360 $bench compare "$CK" --modes cold --repeat $rounds \
		--formats phoenix,safetensors --json "$logs/cold.json" ;;
	staged) step staged 200 $bench staged "$CK" --mount "$MNT/gpu0" \
		--phx "$phx" --formats "phoenix,$nodirect" \
		--json "$logs/hot.json" ;;
	staged-file) step staged-file 120 $bench staged-file \
		--mount "$MNT/gpu0" --phx "$phx" --size 4G ;;
	streams) step streams 90 $bench streams --size 1G ;;
	first-call) step first-call 120 $bench first-call "$CK" ;;
	pytests) cp "$WORK"/site/phxio/_libs/*.so "$WORK/bin/"
		# which vLLM, if any, these tests import (not the carried one)
		env -u PYTHONPATH python3 -c 'import vllm; print("pytests import vllm", vllm.__version__, vllm.__file__)' 2>&1 | tail -n 1
		step pytests 150 env -u PYTHONPATH sh "$here/tests/python/run.sh" \
			"$WORK/bin" -q -rs -o faulthandler_timeout=60 \
			-k "exit or stream_cache or staged or weights or direct or open_file or abi" ;;
	*) echo "unknown step $s" >&2; status=1 ;;
	esac
done
for s in hot peers cold staged staged-file streams first-call pytests; do
	[ -f "$logs/$s.log" ] || continue
	echo "---- $s"
	sed -n '/^|/p;/^tokens:/p;/^staged /p;/round [0-9]*:/p;/warm-up:/p;/^load_safetensors/p;/^read_into/p;/passed\|failed\|skipped/p' \
		"$logs/$s.log"
done
exit $status
