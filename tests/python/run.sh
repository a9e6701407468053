#!/bin/sh
# Run the Python suites against the libraries in the build folder $1.
# Uses $PYTHON when it can import numpy, safetensors and pytest (with
# $1/pylib on its path if that folder exists), else a virtual environment
# in $1/pyvenv that pip fills from the package index once.
set -eu
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
need='import numpy, safetensors, pytest'

if [ -d "$build/pylib" ]; then
	PYTHONPATH="$build/pylib${PYTHONPATH:+:$PYTHONPATH}"
	export PYTHONPATH
fi
if ! "$py" -c "$need" 2>/dev/null; then
	venv=$build/pyvenv
	if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "$need" 2>/dev/null; then
		echo "test-python: installing numpy, safetensors, pytest into $venv"
		rm -rf "$venv"
		"$py" -m venv "$venv"
		"$venv/bin/python" -m pip install -q numpy safetensors pytest
	fi
	py=$venv/bin/python
fi

PHX_LIBRARY=$build/libphoenix.so
PHX_BUILD_DIR=$build
PHX_PHXFILE_LIBRARY=$build/libphxfile.so
PYTHONPATH="$here/../../python${PYTHONPATH:+:$PYTHONPATH}"
PHX_TEST_DIR=${PHX_TEST_DIR:-$build/scratch}
mkdir -p "$PHX_TEST_DIR"
export PHX_LIBRARY PHX_BUILD_DIR PHX_PHXFILE_LIBRARY PYTHONPATH PHX_TEST_DIR

set +e
"$py" -m pytest -q -p no:cacheprovider --ignore="$here/vllm_cpu" "$here" "$@"
rc=$?
set -e
# 5: nothing collected (every suite skipped at import): not a failure
[ "$rc" = 5 ] && rc=0
exit "$rc"
