#!/bin/sh
# Run the phxfs suites with pytest against the binaries in the build
# folder $1; the other arguments go to pytest (--each-device,
# --io-uring on, -k ...).  Uses $PYTHON when it can import pytest (with
# $1/pylib on its path if that folder exists), else the virtual
# environment of $1 or of the default build folder (make test-python
# makes one), else one made in $1/pyvenv, filled from the package index.
set -eu
build=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}

if [ -d "$build/pylib" ]; then
	PYTHONPATH="$(cd "$build/pylib" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
	export PYTHONPATH
fi
if ! "$py" -c 'import pytest' 2>/dev/null; then
	venv=$build/pyvenv
	for v in "$build/pyvenv" "$here/../../build/pyvenv"; do
		if [ -x "$v/bin/python" ] && "$v/bin/python" -c 'import pytest' 2>/dev/null; then
			venv=$v
			break
		fi
	done
	if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import pytest' 2>/dev/null; then
		echo "phxfs tests: installing pytest into $venv"
		rm -rf "$venv"
		"$py" -m venv "$venv"
		"$venv/bin/python" -m pip install -q pytest
	fi
	py=$venv/bin/python
fi
exec "$py" -m pytest -p no:cacheprovider -rs "$here" --build "$build" "$@"
