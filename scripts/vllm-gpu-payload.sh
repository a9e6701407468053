#!/bin/sh
# Prepare what scripts/vllm-gpu.sh needs on the GPU machine, which has no
# package index: vLLM (the newest release that pins the GPU machine's
# torch), the wheels it imports that the machine lacks, the peer loaders,
# the phxio wheel and phxfs.  One call to that machine carries at most
# 64 MiB, so it goes in two parts, carried by two calls made back to back
# (the machine keeps /tmp while it is warm):
#
#   .vllm1/   the first part of vLLM's stripped tree (vllm.tar.xz.aa)
#   .vllm2/   the rest (vllm.tar.xz.ab), wheels/, phxio's wheel, phxfs, phx
#
# vLLM's wheel is stripped of what that machine does not use: FlashAttention
# 2 (FA3 serves the H200), the MoE and FlashMLA kernels, the Blackwell-only
# qutlass, the Rust frontend binary and deep_gemm for other Pythons.
#
# Usage, from the repository root after `make` and `make wheel`:
#   sh scripts/vllm-gpu-payload.sh            everything
#   sh scripts/vllm-gpu-payload.sh --refresh  only phxio's wheel, phxfs and
#                                             phx, into an existing .vllm2
# Downloads go through pip (its cache is kept); the wheels are for CPython
# 3.12 on manylinux x86_64, as the GPU machine runs.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VLLM=${PHX_VLLM_GPU_VERSION:-0.26.0}
py=${PYTHON:-python3}
dl=$BUILD/vllm-gpu-dl
part=${PHX_PAYLOAD_SPLIT:-58m}

say() { echo "vllm-gpu-payload: $*"; }
fail() { echo "vllm-gpu-payload: $*" >&2; exit 1; }

whl=$(ls "$BUILD"/wheel/phxio-*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || fail "no phxio wheel in $BUILD/wheel: run make wheel"
for f in phxfs phx; do
	[ -x "$BUILD/$f" ] || fail "$BUILD/$f is missing: run make"
done

pipdl() {
	"$py" -m pip download -q --no-deps --only-binary=:all: \
		--python-version 3.12 --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		--platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 \
		--platform manylinux_2_35_x86_64 --platform manylinux_2_39_x86_64 \
		--platform linux_x86_64 --platform any -d "$@" ||
		fail "pip download $* failed (no network?)"
}

if [ "${1:-}" = --refresh ]; then
	[ -d .vllm2/wheels ] || fail "no .vllm2 to refresh: run without --refresh"
	rm -f .vllm2/phxio-*.whl
	cp "$whl" "$BUILD/phxfs" "$BUILD/phx" .vllm2/
	say "refreshed:"
	du -sh .vllm1 .vllm2
	exit 0
fi

mkdir -p "$dl/vllm" "$dl/wheels"
say "vLLM $VLLM"
pipdl "$dl/vllm" "vllm==$VLLM"
say "the $(grep -c . scripts/vllm-gpu-deps.txt) wheels vLLM imports that the GPU machine lacks, and the peer loaders"
# shellcheck disable=SC2046
pipdl "$dl/wheels" $(grep -v '^#' scripts/vllm-gpu-deps.txt) \
	fastsafetensors==0.5.0 runai-model-streamer==0.17.1 humanize

tree=$dl/tree
rm -rf "$tree"
mkdir -p "$tree"
"$py" -m zipfile -e "$dl/vllm/vllm-$VLLM-"*.whl "$tree"
rm -f "$tree/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" \
	"$tree/vllm/_moe_C_stable_libtorch.abi3.so" \
	"$tree"/vllm/_flashmla_C*.so "$tree"/vllm/_flashmla_extension_C*.so \
	"$tree"/vllm/_qutlass_C*.so "$tree/vllm/vllm-rs"
for f in "$tree"/vllm/third_party/deep_gemm/_C.cpython-*.so; do
	case $f in *cpython-312-*) ;; *) rm -f "$f" ;; esac
done
say "packing vLLM's tree (xz, a minute or two)"
rm -rf .vllm1 .vllm2
mkdir -p .vllm1 .vllm2/wheels
tar -C "$tree" -cf - . | xz -T2 -6 >"$dl/vllm.tar.xz"
(cd .vllm1 && split -b "$part" "../$dl/vllm.tar.xz" vllm.tar.xz.)
for p in .vllm1/vllm.tar.xz.a?; do
	[ "$p" = .vllm1/vllm.tar.xz.aa ] || mv "$p" .vllm2/
done
cp "$dl"/wheels/*.whl .vllm2/wheels/
cp "$whl" .vllm2/
cp "$BUILD/phxfs" "$BUILD/phx" .vllm2/
rm -rf "$tree"
say "ready:"
du -sh .vllm1 .vllm2
ls .vllm1 .vllm2
