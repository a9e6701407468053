#!/bin/sh
# Assemble the device kernels (lib/src/device/kernels.ptx) with ptxas for
# the GPU generations the library targets, so that a PTX mistake fails
# here and not at cuModuleLoadData on a GPU.  ptxas comes from the CUDA toolkit
# when one is installed, else from PyPI's nvidia-cuda-nvcc-cu12 wheel,
# fetched once into BUILD_DIR/ptxas.
#
#   scripts/check-ptx.sh BUILD_DIR
set -eu
build=$1
ptx=lib/src/device/kernels.ptx
cd "$(dirname "$0")/.."

ptxas=$(command -v ptxas || true)
[ -n "$ptxas" ] || [ ! -x /usr/local/cuda/bin/ptxas ] || ptxas=/usr/local/cuda/bin/ptxas
if [ -z "$ptxas" ]; then
	dir=$build/ptxas
	ptxas=$dir/nvidia/cuda_nvcc/bin/ptxas
	if [ ! -x "$ptxas" ]; then
		echo "check-ptx: fetching ptxas (nvidia-cuda-nvcc-cu12) from PyPI"
		rm -rf "$dir"
		mkdir -p "$dir"
		python3 -m pip download -q --no-deps -d "$dir" \
			'nvidia-cuda-nvcc-cu12>=12.4,<13'
		python3 -m zipfile -e "$dir"/nvidia_cuda_nvcc_cu12-*.whl "$dir"
		chmod +x "$ptxas"
	fi
fi
for arch in sm_75 sm_80 sm_90; do
	"$ptxas" -arch=$arch "$ptx" -o "$build/kernels-$arch.cubin" ||
		{ echo "check-ptx: $ptx does not assemble for $arch" >&2; exit 1; }
done
echo "check-ptx: $ptx assembles for sm_75, sm_80 and sm_90 ($("$ptxas" --version | tail -1))"
