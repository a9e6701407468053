# SPDX-License-Identifier: MIT
"""Another local user against phxfs, continued (test_attacks.py has the
rest): root's reserve and the space a user sees, a failed phx cp, and the
smaller ones.  Run as nobody through setpriv; nothing waits on time."""
import os
import re
import shutil
import socket
import sys

import pytest

import harness as T
from harness import MiB, read, write
from attack import (GUARD, need_nobody, as_nobody, phx_nobody, sock, root_ok,
                    nobody_dir, in_mode, status_round_trip)

# ---- 5. root's reserve ----------------------------------------------------

# Files of 1 MiB writes until one cannot take its first: buffers grow in
# chunks up to 64 MiB, so a large file stops short of the reserve and
# small ones go on.
NOBODY_FILL = r"""
import errno, os, sys
d, block = sys.argv[1], b"\0" * (1 << 20)
for i in range(4096):
    fd = os.open("%s/fill%04d" % (d, i), os.O_CREAT | os.O_WRONLY)
    n = 0
    try:
        while True:
            os.write(fd, block)
            os.fsync(fd)  # with -o writeback the error comes here
            n += 1
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        if not n:
            print("ENOSPC after", i, "files")
            break
    finally:
        os.close(fd)
"""


@T.in_modes
def test_attack_fill_device(mode):
    """nobody fills the device up to the root reserve (ENOSPC); root's
    writes still succeed; nothing stored is lost."""
    need_nobody()
    in_mode(_fill_device, mode)


def _fill_device(mode):
    d, ref = T.fresh("fill")
    out = status_round_trip()
    m = re.search(r"%s\s+keeps ([\d.]+) (MiB|KiB|GiB) for root" %
                  T.FS.devs[T.FS.dev_index], out)
    assert m, out
    r = as_nobody([sys.executable, "-c", NOBODY_FILL, d])
    assert r.returncode == 0 and r.stdout.startswith("ENOSPC"), \
        (r.stdout, r.stderr)
    if mode == "direct":
        small = os.path.join(nobody_dir(), "small")
        write(small, T.rand(MiB, 3))
        r = phx_nobody("cp", "-q", small, d + "/more")
        assert r.returncode and "root_reserve" in r.stderr, r.stderr
        assert not os.path.exists(d + "/more")
    data = T.rand(4 * MiB, 4)
    write(d + "/root", data)
    assert read(d + "/root") == data
    held = sum(os.stat(d + "/" + n).st_blocks * 512 for n in os.listdir(d)
               if n.startswith("fill"))
    assert held > T.CAP // 2, held
    if mode == "direct":
        src = os.path.join(ref, "src")
        write(src, data)
        root_ok(T.FS.phx, "cp", "-q", src, d + "/root-cp")
        assert read(d + "/root-cp") == data


NOBODY_MOVE = r"""
import errno, os, sys
try:
    os.rename(sys.argv[1], sys.argv[2])
    print("moved")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def test_attack_move_into_reserve():
    """A file moved to another device is a write there: once nobody has
    filled that device up to root's reserve, moving a file into it is
    ENOSPC and the file stays where it was, whole; root's move of it
    succeeds."""
    need_nobody()
    if T.FS.dev_index or len(T.FS.devs) < 2:
        pytest.skip("once per mount, with two device directories")
    d, _ = T.fresh("mvsrc")
    there = os.path.join(T.FS.mp, T.FS.devs[1], "mvdst")
    os.mkdir(there)
    os.chmod(there, 0o777)
    r = as_nobody([sys.executable, "-c", NOBODY_FILL, there])
    assert r.returncode == 0 and r.stdout.startswith("ENOSPC"), \
        (r.stdout, r.stderr)
    data = T.rand(8 * MiB, 22)
    f = d + "/moved"
    write(f, data)
    os.chown(f, 65534, 65534)
    used = T.dev_used(there)
    r = as_nobody([sys.executable, "-c", NOBODY_MOVE, f, there + "/moved"])
    assert r.stdout.strip() == "ENOSPC", (r.stdout, r.stderr)
    assert read(f) == data and not os.path.exists(there + "/moved")
    assert T.dev_used(there) == used
    os.rename(f, there + "/moved")
    assert read(there + "/moved") == data


def raw_status():
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(GUARD)
    c.connect(sock())
    c.sendall(b"STATUS\n")
    out = b""
    while chunk := c.recv(1 << 20):
        out += chunk
    c.close()
    return out.decode().splitlines()


def test_attack_df_avail():
    """df's available space is what a user other than root may still
    fill: the free memory less root's reserve (as on ext4), on one
    device and summed over the mount."""
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    write(T.FS.dev + "/some", T.rand(3 * MiB, 23))
    reserve = {ln.split()[1]: int(ln.split()[2]) for ln in raw_status()
               if ln.startswith("ROOTRESERVE ")}
    assert reserve[T.FS.devs[0]] > 0, reserve
    sv = os.statvfs(T.FS.dev)
    assert sv.f_bavail == sv.f_bfree - (reserve[T.FS.devs[0]] + 4095) // \
        4096 or sv.f_bavail == sv.f_bfree - reserve[T.FS.devs[0]] // 4096, \
        (sv.f_bavail, sv.f_bfree, reserve)
    whole = os.statvfs(T.FS.mp)
    assert whole.f_bfree - whole.f_bavail >= \
        sum(reserve.values()) // 4096 - len(reserve), (whole, reserve)


# ---- 6. a failed phx cp ---------------------------------------------------

@T.in_modes
def test_attack_failed_cp(mode):
    """A phx cp larger than the device fails, and the file it created is
    gone with the memory it took; one it overwrote is reported, and keeps
    the bytes the device had room for."""
    in_mode(_failed_cp, mode)


def _failed_cp(mode):
    d, ref = T.fresh("failcp")
    big = os.path.join(ref, "big")
    with open(big, "wb") as f:
        f.truncate(T.CAP + 64 * MiB)
    r = T.FS.run_phx("cp", "-q", big, d + "/new", check=False)
    assert r.returncode, r.stderr
    assert not os.path.exists(d + "/new"), os.listdir(d)
    assert T.FS_used() == 0, T.FS_used()
    write(d + "/old", b"old contents")
    r = T.FS.run_phx("cp", "-q", big, d + "/old", check=False)
    assert r.returncode, r.stderr
    if mode == "direct":
        assert "overwritten in place" in r.stderr, r.stderr
        # the bytes the device had room for arrived, and are the source's
        kept = int(re.search(r"holds only the first (\d+) bytes",
                             r.stderr).group(1))
        assert kept >= 64 * MiB, r.stderr
        assert os.stat(d + "/old").st_size == kept
        with open(d + "/old", "rb") as f:
            while chunk := f.read(16 * MiB):
                assert chunk == bytes(len(chunk))
    else:
        assert read(d + "/old") == b"old contents"
    os.unlink(d + "/old")
    small = os.path.join(ref, "small")
    write(small, T.rand(MiB, 5))
    if mode == "direct":
        T.FS.run_phx("cp", "-q", small, d + "/after")
        assert read(d + "/after") == read(small)


# ---- 7. the smaller ones --------------------------------------------------

@T.in_modes
def test_attack_status_rows(mode):
    """A path longer than a line is listed cut to .../NAME, not dropped;
    names with control bytes print escaped."""
    in_mode(_status_rows, mode)


def _status_rows(mode):
    d, _ = T.fresh("rows")
    p = os.fsencode(d)
    for _ in range(11):
        p += b"/" + b"\x01" * 200
        os.mkdir(p)
    write(os.fsdecode(p + b"/deep"), b"hidden?")
    write(d + "/\x1b[2Jclear", b"x")
    st = T.FS.run_phx("status", "-a", T.FS.mp).stdout
    assert ".../deep" in st, st
    assert "\x1b" not in st and "\\x1b[2Jclear" in st, st
    rows = [ln for ln in st.splitlines() if "/rows/" in ln or
            ".../" in ln]
    assert len(rows) == 2, rows


def test_attack_status_capped():
    """STATUS stops walking where its reply is full (16 MiB): the files
    past it are counted in UNLISTED (rows and UNLISTED make every file of
    the mount), and the closing lines still come.  The walk lets go of
    the namespace lock every few thousand entries, so root's work goes on
    beside it however many files there are."""
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    d, _ = T.fresh("capped")
    # rows of about 1 KiB: a name of 240 control bytes, escaped \xHH
    n = 17000
    base = os.fsencode(d) + b"/"
    for i in range(n):
        os.close(os.open(base + b"\x01" * 240 + b"%05d" % i,
                         os.O_CREAT | os.O_WRONLY))
    lines = raw_status()
    rows = sum(1 for ln in lines if ln.startswith("FILE "))
    unlisted = [int(ln.split()[1]) for ln in lines
                if ln.startswith("UNLISTED ")]
    assert 15000 < rows < n and unlisted == [n - rows], (rows, unlisted)
    # the reply's bytes: every line ends with a newline
    assert sum(len(ln.encode()) + 1 for ln in lines) <= 16 << 20
    assert lines[-1] == "END" and lines[-2].startswith("MOUNT "), lines[-3:]
    root_ok("stat", d)
    shutil.rmtree(d)


def test_attack_mount_targets():
    """phx mount refuses a regular file and a non-empty directory (unless
    -o nonempty); phx cp names a missing directory; paths in messages
    are escaped."""
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    f = os.path.join(T.SCRATCH, "a-file")
    write(f, b"x")
    r = T.FS.run_phx("mount", f, check=False)
    assert r.returncode and "not a directory" in r.stderr, r.stderr
    assert f not in read("/proc/mounts").decode()
    full = os.path.join(T.SCRATCH, "full")
    os.makedirs(full, exist_ok=True)
    write(full + "/kept", b"kept")
    r = T.FS.run_phx("mount", full, check=False)
    assert r.returncode and "not empty" in r.stderr, r.stderr
    assert read(full + "/kept") == b"kept"
    r = T.FS.run_phx("mount", "-o", "size=16M,nonempty", full, check=False)
    assert r.returncode == 0, r.stderr
    try:
        assert "kept" not in os.listdir(full)
    finally:
        T.FS.run_phx("umount", full)
    assert read(full + "/kept") == b"kept"
    src = os.path.join(T.SCRATCH, "src")
    write(src, b"data")
    r = T.FS.run_phx("cp", src, T.FS.dev + "/no/such/f", check=False)
    assert r.returncode and "no such directory on phxfs" in r.stderr, \
        r.stderr
    bad = os.path.join(T.SCRATCH, "no\x1b[31mfile")
    r = T.FS.run_phx("cp", bad, T.FS.dev + "/x", check=False)
    assert r.returncode and "\x1b" not in r.stderr and "\\x1b" in r.stderr, \
        r.stderr
    shutil.rmtree(full)
