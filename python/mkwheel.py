#!/usr/bin/env python3
"""Build the phxio wheel: the package plus the shared libraries it loads.

    python3 python/mkwheel.py BUILD OUTDIR

BUILD holds libphoenix.so, libphxfile.so and libphxfsctl.so; they go into
phxio/_libs/, where the package looks first.  The package calls them
through ctypes, so the wheel is for any Python 3 (py3-none) and its
platform tag is manylinux_2_X_<arch>, X the newest glibc symbol version
the libraries need (they link nothing else but libc: libphoenix carries
liburing and libnuma inside).  Prints the wheel's path.
"""

from __future__ import annotations

import base64
import hashlib
import os
import platform
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

LIBS = ("libphoenix.so", "libphxfile.so", "libphxfsctl.so")
# What a manylinux wheel may link besides glibc (the PEP 600 set we use).
ALLOWED = re.compile(r"^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)"
                     r"\.so")


def fail(msg: str) -> None:
    print(f"mkwheel: {msg}", file=sys.stderr)
    sys.exit(1)


def glibc_needed(lib: Path) -> tuple[int, int]:
    out = subprocess.run(["objdump", "-T", str(lib)], capture_output=True,
                         text=True)
    if out.returncode:
        fail(f"{lib}: objdump -T failed: {out.stderr.strip()}; install "
             "binutils")
    vers = [tuple(map(int, m)) for m in
            re.findall(r"GLIBC_(\d+)\.(\d+)", out.stdout)]
    return max(vers) if vers else (2, 17)


def check_needed(lib: Path) -> None:
    out = subprocess.run(["objdump", "-p", str(lib)], capture_output=True,
                         text=True).stdout
    for name in re.findall(r"NEEDED\s+(\S+)", out):
        if not ALLOWED.match(name):
            fail(f"{lib}: links {name}, which a manylinux wheel cannot "
                 "expect on the target; link it statically")


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
    return f"{name},sha256={digest.rstrip(b'=').decode()},{len(data)}"


def package_version(here: Path) -> str:
    """The one version: phxio.__version__, which must be phoenix.h's
    PHX_VERSION_* where the source tree is there to say."""
    init = (here / "phxio" / "__init__.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"$', init, re.M)
    if not m:
        fail(f"{here / 'phxio' / '__init__.py'}: no __version__ line")
    header = here.parent / "lib" / "include" / "phoenix.h"
    if header.is_file():
        parts = [re.search(rf"^#define PHX_VERSION_{p} (\d+)$",
                           header.read_text(), re.M) for p in
                 ("MAJOR", "MINOR", "PATCH")]
        if None in parts:
            fail(f"{header}: no PHX_VERSION_MAJOR/MINOR/PATCH")
        lib = ".".join(p.group(1) for p in parts)
        if lib != m.group(1):
            fail(f"phxio.__version__ {m.group(1)} is not {header}'s {lib}: "
                 "set both to the release's number")
    return m.group(1)


def main() -> None:
    if len(sys.argv) != 3:
        fail("usage: mkwheel.py BUILD OUTDIR")
    build, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    here = Path(__file__).resolve().parent
    meta = tomllib.loads((here / "pyproject.toml").read_text())["project"]
    name, version = meta["name"], package_version(here)

    libs = []
    need = (2, 17)
    for lib in LIBS:
        p = build / lib
        if not p.is_file():
            fail(f"{p} is missing: run `make` first")
        check_needed(p)
        need = max(need, glibc_needed(p))
        libs.append(p)
    arch = platform.machine()
    tag = f"py3-none-manylinux_{need[0]}_{need[1]}_{arch}"
    dist = f"{name}-{version}.dist-info"

    files: list[tuple[str, bytes, int]] = []
    for src in sorted((here / name).rglob("*.py")):
        rel = src.relative_to(here).as_posix()
        files.append((rel, src.read_bytes(), 0o644))
    for p in libs:
        files.append((f"{name}/_libs/{p.name}", p.read_bytes(), 0o755))

    lines = ["Metadata-Version: 2.1", f"Name: {name}",
             f"Version: {version}", f"Summary: {meta['description']}",
             f"License: {meta['license']['text']}",
             f"Requires-Python: {meta['requires-python']}"]
    for extra, reqs in meta.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {r}; extra == \"{extra}\"" for r in reqs]
    lines += ["Description-Content-Type: text/markdown", "",
              (here / meta["readme"]).read_text()]
    files.append((f"{dist}/METADATA", "\n".join(lines).encode(), 0o644))
    files.append((f"{dist}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: phxio mkwheel.py\n"
        f"Root-Is-Purelib: false\nTag: {tag}\n").encode(), 0o644))
    eps = meta.get("entry-points", {})
    text = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n"
                                             for k, v in items.items()) +
                   "\n" for group, items in eps.items())
    files.append((f"{dist}/entry_points.txt", text.encode(), 0o644))
    files.append((f"{dist}/top_level.txt", f"{name}\n".encode(), 0o644))

    record = [record_line(n, d) for n, d, _ in files]
    record.append(f"{dist}/RECORD,,")
    files.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode(),
                  0o644))

    outdir.mkdir(parents=True, exist_ok=True)
    whl = outdir / f"{name}-{version}-{tag}.whl"
    tmp = whl.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data, mode in files:
            info = zipfile.ZipInfo(n, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, whl)
    print(whl)


if __name__ == "__main__":
    main()
