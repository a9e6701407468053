"""The package's ctypes mirrors against the C headers they copy.

phxio declares phoenix.h's enums, flags and structs (and phxfs's STATUS
structs) by hand in Python.  A small C program built from the headers
(phoenix.h, which includes its parts in phoenix/, and phxfs_client.h)
prints every value, sizeof and offsetof the mirrors rely on, and each is
compared with what ctypes has; the name tables are compared with the
library's own phx_kind_name() and phx_path_name(); the version is one
number in phoenix.h, the package and its pyproject.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import phxio
from phxio import _lib, _phxfs

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "lib" / "include"
PHOENIX_H = INCLUDE / "phoenix.h"

# (the header that declares it, C struct, ctypes class, the mirror holds
# every field: sizeof too)
STRUCTS = [
    ("phoenix/device.h", "phx_device_info", _lib.DeviceInfoStruct, True),
    ("phoenix/transfer.h", "phx_io", _lib.IoStruct, True),
    ("phoenix/settings.h", "phx_settings", _lib.SettingsStruct, True),
    ("phoenix/stats.h", "phx_stats", _lib.StatsStruct, True),
    ("phoenix/stats.h", "phx_engine_stats", _lib.EngineStatsStruct, True),
    ("phxfs_client.h", "phxfs_status_dev", _phxfs._StatusDev, True),
    ("phxfs_client.h", "phxfs_status_file", _phxfs._StatusFile, True),
    # read through a pointer the library allocates: the fields phxio
    # uses, a prefix of the struct
    ("phxfs_client.h", "phxfs_status", _phxfs._Status, False),
]

CONSTANTS = ["PHX_DEVICE_NONE", "PHX_DEVICE_CUDA", "PHX_DEVICE_SIM",
             "PHX_DEVICE_KMOD", "PHX_OP_READ", "PHX_OP_WRITE",
             "PHX_STREAM_FIXED", "PHX_BUF_SPARSE", "PHX_BATCH_POLL"]


def _header(name: str) -> Path:
    """The header to include for @name: phoenix.h for its parts (they
    refuse to be included alone), the file itself for phxfs's."""
    if name.startswith("phoenix"):
        if not (INCLUDE / name).is_file():
            pytest.fail(f"{name}: not found under {INCLUDE}")
        return PHOENIX_H
    found = sorted(p for p in (REPO / "phxfs").rglob(name))
    if not found:
        pytest.fail(f"{name}: not found under {REPO / 'phxfs'}; the ctypes "
                    "mirrors of its structs cannot be checked")
    return found[0]


@pytest.fixture(scope="module")
def c_values(tmp_path_factory) -> dict[str, int]:
    """What the C compiler says: "sizeof S", "S.field", "CONSTANT"."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc) to read the headers' layouts with")
    if not PHOENIX_H.is_file():
        pytest.skip(f"{PHOENIX_H}: not there (an installed package without "
                    "the source tree)")
    headers = sorted({_header(h) for h, *_ in STRUCTS})
    lines = ["#include <stddef.h>", "#include <stdio.h>"]
    lines += [f'#include "{h}"' for h in headers]
    lines.append("int main(void)\n{")
    for _, s, cls, _ in STRUCTS:
        lines.append(f'\tprintf("sizeof {s} %zu\\n", sizeof(struct {s}));')
        for field, *_ in cls._fields_:
            lines.append(f'\tprintf("{s}.{field} %zu\\n", '
                         f"offsetof(struct {s}, {field}));")
    for c in CONSTANTS + ["PHX_PATH_COUNT", "PHX_PATH_PASSTHROUGH",
                          "PHX_VERSION_MAJOR", "PHX_VERSION_MINOR",
                          "PHX_VERSION_PATCH"]:
        lines.append(f'\tprintf("{c} %lld\\n", (long long)({c}));')
    lines.append("\treturn 0;\n}\n")
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "abi.c", d / "abi"
    src.write_text("\n".join(lines))
    incs = sorted({f"-I{h.parent}" for h in headers})
    subprocess.run([cc, "-std=gnu11", *incs, "-o", str(exe), str(src)],
                   check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True).stdout
    return {k: int(v) for k, v in (ln.rsplit(" ", 1)
                                   for ln in out.splitlines())}


@pytest.mark.parametrize("header,struct,cls,whole", STRUCTS,
                         ids=[s for _, s, _, _ in STRUCTS])
def test_struct_layout_matches_header(c_values, header, struct, cls, whole):
    for field, *_ in cls._fields_:
        assert getattr(cls, field).offset == c_values[f"{struct}.{field}"], \
            f"struct {struct}.{field}: ctypes offset differs from {header}"
    if whole:
        assert ctypes.sizeof(cls) == c_values[f"sizeof {struct}"], \
            f"struct {struct}: ctypes size differs from {header}"
    else:
        assert ctypes.sizeof(cls) <= c_values[f"sizeof {struct}"]


def test_structs_declared_where_named(c_values):
    for header, struct, *_ in STRUCTS:
        if header.startswith("phoenix"):
            text = (INCLUDE / header).read_text()
            assert f"struct {struct} {{" in text, \
                f"struct {struct} is not declared in {header}"


def test_constants_match_header(c_values):
    for c in CONSTANTS:
        assert getattr(_lib, c) == c_values[c], f"{c} differs from phoenix.h"
    # phx_stats.bytes counts every path but passthrough
    assert len(_lib.PATH_NAMES) == c_values["PHX_PATH_PASSTHROUGH"]
    bytes_t = dict(_lib.StatsStruct._fields_)["bytes"]
    assert bytes_t._length_ == c_values["PHX_PATH_PASSTHROUGH"]


def test_name_tables_match_library():
    lib = ctypes.CDLL(_lib.lib()._name)  # own handle: own prototypes
    lib.phx_kind_name.restype = ctypes.c_char_p
    lib.phx_kind_name.argtypes = [ctypes.c_int]
    lib.phx_path_name.restype = ctypes.c_char_p
    lib.phx_path_name.argtypes = [ctypes.c_int]
    for kind, name in _lib.KIND_NAMES.items():
        assert lib.phx_kind_name(kind).decode() == name
    for path, name in enumerate(_lib.PATH_NAMES):
        assert lib.phx_path_name(path).decode() == name


def test_one_version(c_values):
    want = "{}.{}.{}".format(c_values["PHX_VERSION_MAJOR"],
                             c_values["PHX_VERSION_MINOR"],
                             c_values["PHX_VERSION_PATCH"])
    assert phxio.version() == want
    assert phxio.__version__ == want
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((REPO / "python" / "pyproject.toml")
                              .read_text())
    # the distribution's version is the package's: no second number
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == \
        {"attr": "phxio.__version__"}
    sys.path.insert(0, str(REPO / "python"))
    try:
        import mkwheel
    finally:
        sys.path.pop(0)
    assert mkwheel.package_version(REPO / "python") == want
