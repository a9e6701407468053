# SPDX-License-Identifier: MIT
"""Another local user against phxfs: the control socket and the limits.

Each case is an attack a user without privileges can make on a shared
machine (run as nobody through setpriv, skipped with the reason where that
cannot be done), shown to fail safely while root's work goes on; each runs
in the suite's mount (direct I/O, or io_uring in that run) and again with
-o writeback (the `mode` parameter).  Nothing here waits on
time: the daemon's answers and the ends of connections are the
completions; time-outs only guard against a hang.

The directory permissions, the daemon's threads and descriptors, and
the metadata a user may make (test_attacks_limits.py: the reserve, a
failed copy, the rest).
"""
import errno
import grp
import os
import re
import socket
import struct
import subprocess
import sys

import pytest

import harness as T
from harness import MiB, expect_errno, need, read, write
from attack import (GUARD, need_nobody, as_nobody, hostile, hostile_bg,
                    phx_nobody, sock, root_ok, nobody_dir, in_mode, daemon_fds,
                    status_round_trip)

# ---- 1. directory permissions ------------------------------------------

@T.in_modes
def test_attack_dir_permissions(mode):
    """CPOUT / CP / OPEN by inode of files inside root's 0700 directory
    fail for nobody, with or without a descriptor of another file;
    status shows nobody only what it could stat; supplementary groups
    count as the kernel counts them."""
    need_nobody()
    in_mode(_dir_permissions, mode)


def _dir_permissions(mode):
    d, _ = T.fresh("perm")
    priv = d + "/root-only"
    os.mkdir(priv, 0o700)
    f, g = priv + "/f", priv + "/g"
    write(f, b"secret", 0o644)
    write(g, b"keep", 0o666)
    mine = d + "/mine"
    write(mine, b"nobody's")
    os.chown(mine, 65534, 65534)
    out = nobody_dir()
    evil = os.path.join(out, "evil")
    write(evil, b"EVIL", 0o666)
    dst = os.path.join(out, "dst")
    write(dst, b"", 0o666)
    ino_f, ino_g = os.stat(f).st_ino, os.stat(g).st_ino
    S = sock()
    # by inode with no descriptor of the file, then with one of another
    for line, fds in (("CPOUT %d" % ino_f, ["+" + dst]),
                      ("CPOUT %d" % ino_f, ["+" + dst, mine]),
                      ("CP %d" % ino_g, ["+" + evil]),
                      ("CP %d" % ino_g, ["+" + evil, mine]),
                      ("OPEN %d" % ino_g, [mine]),
                      ("OPEN %d" % ino_g, [])):
        ans = hostile("req", S, line, *fds).strip()
        assert ans.startswith("ERR 13 "), (line, fds, ans)
    assert read(g) == b"keep" and read(dst) == b""
    # and through the paths: the kernel says no before the daemon
    r = phx_nobody("cp", f, dst)
    assert r.returncode and "Permission denied" in r.stderr, r.stderr
    # status: nobody sees its own file, not root's inside 0700
    seen = phx_nobody("status", "-a", T.FS.mp)
    assert seen.returncode == 0, seen.stderr
    assert "/perm/mine" in seen.stdout, seen.stdout
    assert "root-only" not in seen.stdout, seen.stdout
    assert "root-only/f" in status_round_trip()
    # a group nobody is in, as a supplementary group
    users = grp.getgrnam("users").gr_gid if _has_group("users") else None
    if users is not None:
        os.chown(priv, 0, users)
        os.chmod(priv, 0o750)
        os.chown(f, 0, users)
        os.chmod(f, 0o640)
        with_group = phx_nobody("status", "-a", T.FS.mp, groups=users)
        assert "root-only/f" in with_group.stdout, with_group.stdout
        if mode == "direct":
            r = phx_nobody("cp", "-q", f, dst, groups=users)
            assert r.returncode == 0, r.stderr
            assert read(dst) == b"secret"
        ans = hostile("req", S, "CP %d" % ino_f, "+" + evil, f,
                      groups=users).strip()
        assert ans.startswith("ERR 13 "), ans  # 0640: no write for group
    if mode == "direct":
        # what nobody may do it still can, and root all of it
        r = phx_nobody("cp", "-q", mine, os.path.join(out, "back"))
        assert r.returncode == 0, r.stderr
        assert read(os.path.join(out, "back")) == b"nobody's"
        root_ok(T.FS.phx, "cp", "-q", f, os.path.join(out, "root-copy"))
        assert read(os.path.join(out, "root-copy")) == b"secret"
    assert read(f) == b"secret" and read(g) == b"keep"


@T.in_modes
def test_attack_copy_descriptors(mode):
    """CP reads its source, and CPOUT writes its destination, only
    through a descriptor the caller opened for that: an O_PATH one (which
    needs no read or write permission) or one open the other way is
    EBADF, and nothing of root's files is read or written."""
    need_nobody()
    in_mode(_copy_descriptors, mode)


def _copy_descriptors(mode):
    d, _ = T.fresh("cpfds")
    out = nobody_dir()
    secret = os.path.join(out, "secret")
    write(secret, b"root's secret", 0o600)
    wonly = os.path.join(out, "write-only")
    write(wonly, b"nobody may not read this", 0o622)
    ronly = os.path.join(out, "read-only")
    write(ronly, b"nobody may not write this", 0o644)
    mine = os.path.join(out, "mine")
    write(mine, b"nobody's own", 0o666)
    stolen = d + "/stolen"
    write(stolen, b"")
    os.chown(stolen, 65534, 65534)
    os.chmod(stolen, 0o600)
    src = d + "/src"
    write(src, b"phxfs data", 0o644)
    S = sock()
    ino_in, ino_out = os.stat(stolen).st_ino, os.stat(src).st_ino
    for line, fds in (("CP %d" % ino_in, [secret, stolen]),
                      ("CP %d" % ino_in, [">" + wonly, stolen]),
                      ("CPOUT %d" % ino_out, [ronly, src]),
                      ("CPOUT %d" % ino_out, ["<" + ronly, src])):
        ans = hostile("req", S, line, *fds).strip()
        assert ans.startswith("ERR 9 "), (line, fds, ans)
    assert read(stolen) == b""
    assert read(ronly) == b"nobody may not write this"
    assert read(wonly) == b"nobody may not read this"
    if mode == "direct":
        # descriptors open the right way still copy, both ways
        ans = hostile("req", S, "CP %d" % ino_in, "<" + mine, stolen)
        assert not ans.startswith("ERR"), ans
        assert read(stolen) == b"nobody's own"
        ans = hostile("req", S, "CPOUT %d" % ino_out, ">" + mine, src)
        assert not ans.startswith("ERR"), ans
        assert read(mine) == b"phxfs data"


def test_attack_open_resize():
    """A user that OPENs its own file gets descriptors of the file's
    memory: it can neither cut nor grow them (EPERM), so the daemon,
    which maps the same memory, goes on serving every file."""
    need_nobody()
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    d, _ = T.fresh("resize")
    data = T.rand(4 * MiB, 21)
    mine = d + "/mine"
    write(mine, data)
    os.chown(mine, 65534, 65534)
    other = d + "/other"
    write(other, data[:MiB])
    ans = hostile("open-resize", sock(), mine).split()
    assert ans[0] == "OK", ans
    tries = ans[3:]
    if T.FS.env["PHX_DEVICE"] == "sim":
        assert tries, ans  # the simulated device sends its memfd
    assert all(t == "EPERM" for t in tries), ans
    assert read(mine) == data
    assert read(other) == data[:MiB]
    assert "/resize/mine" in status_round_trip()


# security.capability: VFS_CAP_REVISION_2, effective, CAP_NET_BIND_SERVICE
FILE_CAPS = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)


def test_attack_cp_keeps_no_privileges():
    """CP replaces a file's contents as a write does: by anyone but
    root it clears SUID, and SGID where it marks group execution or the
    writer is outside the group; by anyone, file capabilities go; the
    file's mtime and ctime move.  Otherwise nobody could make root's
    SUID binary its own program, keeping the bit."""
    need_nobody()
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    d, _ = T.fresh("cppriv")
    src = os.path.join(nobody_dir(), "program")
    write(src, b"nobody's program", 0o644)
    S = sock()

    def victim(name, mode):
        f = os.path.join(d, name)
        write(f, b"root's program")
        os.chmod(f, mode)
        os.setxattr(f, "security.capability", FILE_CAPS)
        os.utime(f, (1000000000, 1000000000))
        return f, os.stat(f).st_ctime_ns

    for name, mode, want in (("suid", 0o6777, 0o777),
                             ("sgid-lock", 0o2666, 0o666)):
        f, ctime = victim(name, mode)
        ans = hostile("req", S, "CP %d" % os.stat(f).st_ino, "<" + src, f)
        assert not ans.startswith("ERR"), ans
        st = os.stat(f)
        assert read(f) == b"nobody's program"
        assert st.st_mode & 0o7777 == want, (name, oct(st.st_mode))
        expect_errno(errno.ENODATA, os.getxattr, f, "security.capability")
        assert st.st_mtime != 1000000000 and st.st_ctime_ns > ctime, name
    # root keeps the bits, not the capabilities
    f, _ = victim("root", 0o6777)
    root_ok(T.FS.phx, "cp", "-q", src, f)
    assert os.stat(f).st_mode & 0o7777 == 0o6777
    expect_errno(errno.ENODATA, os.getxattr, f, "security.capability")
    assert os.stat(f).st_mtime != 1000000000


def _has_group(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


# ---- 2. no client stalls the daemon ---------------------------------------

@T.in_modes
def test_attack_freeze(mode):
    """A STATUS reader that never reads, and a client that never sends,
    hold up nobody: root's stat, ls, touch, cat and phx status complete;
    the daemon drops both after ctl_timeout."""
    need_nobody()
    in_mode(_freeze, mode, "ctl_timeout=1")


def _freeze(mode):
    d, _ = T.fresh("freeze")
    # a reply far past a socket's buffer (some 200 KiB)
    for i in range(1500):
        os.close(os.open("%s/%04d-%s" % (d, i, "n" * 200),
                         os.O_CREAT | os.O_WRONLY))
    write(d + "/x", b"still here")
    S = sock()
    stuck = hostile_bg("status-noread", S)
    try:
        assert stuck.stdout.readline() == "sent\n"
        root_ok("stat", d + "/x")
        root_ok("ls", d)
        root_ok("touch", d + "/new")
        assert root_ok("cat", d + "/x") == "still here"
        assert "/freeze/x" in status_round_trip()
        # one that sends nothing is told why and dropped
        assert hostile("silent", S).startswith("ERR 110 "), mode
    finally:
        stuck.stdin.close()
        stuck.wait(timeout=GUARD)
    assert stuck.returncode == 0


# ---- 3. descriptors and connections ---------------------------------------

@T.in_modes
def test_attack_descriptors(mode):
    """100 connections that send descriptors over several messages with
    a bad request leave the daemon with the descriptors it had; silent
    connections past the per-user cap are turned away at once while
    root is served; out of descriptors, the daemon refuses and goes on."""
    need_nobody()
    in_mode(_descriptors, mode)


def _descriptors(mode):
    S = sock()
    status_round_trip()
    before = daemon_fds()
    got = hostile("fdflood", S, "100", "16")
    assert got.strip() == "100 ERR 22 unknown request", got
    assert daemon_fds() == before, (before, daemon_fds())
    # nobody holds 20 silent connections: 16 are admitted, 4 turned away
    held = hostile_bg("hold", S, "20")
    try:
        assert held.stdout.readline() == "connected\n"
        out = status_round_trip()
        assert "control connections 16 of 128 (16 per user)" in out, out
        held.stdin.write("check\n")
        held.stdin.flush()
        assert held.stdout.readline() == "refused 4\n"
    finally:
        held.stdin.close()
        held.wait(timeout=GUARD)
    _out_of_descriptors()


def _out_of_descriptors():
    """The daemon keeps one spare descriptor, opened just before the
    listening socket: with the limit at that socket's number, nothing
    below it free, a connection can be had only by giving the spare up,
    to tell the client and close.  The accept blocked when the limit
    fell may hold a number from before (the kernel takes it before it
    waits): that one connection is served."""
    need("prlimit")
    pid = T.FS.daemon_pid()
    S = sock()
    base = "/proc/%d/fd" % pid
    fds = {}
    for n in os.listdir(base):
        try:
            fds[int(n)] = os.readlink(os.path.join(base, n))
        except FileNotFoundError:
            pass
    # the listening socket is the one bound to the control path; a GPU
    # driver's own sockets may hold lower numbers
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f]
    ino = next(r[6] for r in rows
               if len(r) > 7 and r[7] == S and r[3] == "00010000")
    sock_fd = next(n for n, t in fds.items() if t == "socket:[%s]" % ino)
    if any(n not in fds for n in range(sock_fd)):
        pytest.skip("the daemon's descriptors below its socket have gaps")
    with open("/proc/%d/limits" % pid) as f:
        soft = re.search(r"Max open files\s+(\d+)", f.read()).group(1)
    subprocess.run(["prlimit", "--pid", str(pid),
                    "--nofile=%d:" % sock_fd], check=True)
    try:
        answers = []
        for _ in range(2):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(GUARD)
            c.connect(S)
            try:
                c.sendall(b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            answers.append(c.recv(4096))
            try:  # closed by the daemon, unread "\n" or not
                assert c.recv(4096) == b""
            except ConnectionResetError:
                pass
            c.close()
            if answers[-1].startswith(b"ERR 24 "):
                break
            assert answers[-1].startswith(b"ERR 22 "), answers
        assert answers[-1].startswith(b"ERR 24 "), answers
    finally:
        subprocess.run(["prlimit", "--pid", str(pid),
                        "--nofile=%s:" % soft], check=True)
    status_round_trip()  # the accept loop is still there


# ---- 4. metadata is bounded -----------------------------------------------

NOBODY_XATTRS = r"""
import errno, os, sys
d, want = sys.argv[1], int(sys.argv[2])
stored = files = 0
value = b"v" * 60000
try:
    while stored < want:
        f = "%s/x%05d" % (d, files)
        os.close(os.open(f, os.O_CREAT | os.O_WRONLY))
        files += 1
        for i in range(4):
            os.setxattr(f, "user.fill%d" % i, value)
            stored += len(value)
except OSError as e:
    print(errno.errorcode[e.errno], stored)
    sys.exit(0)
print("STORED", stored)
"""

NOBODY_FILES = r"""
import errno, os, sys
d, n = sys.argv[1], 0
try:
    while n < 100000:
        os.close(os.open("%s/f%06d" % (d, n), os.O_CREAT | os.O_WRONLY))
        n += 1
except OSError as e:
    print(errno.errorcode[e.errno], n)
"""


def rss_kib():
    with open("/proc/%d/status" % T.FS.daemon_pid()) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


@T.in_modes
def test_attack_metadata(mode):
    """xattrs and inodes stop at their limits (ENOSPC), shown in phx
    status, and the daemon's memory stays bounded."""
    need_nobody()
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    out = status_round_trip()
    assert "xattrs 0 B of 16.0 MiB (256.0 KiB per file)" in out, out
    assert "of 1048576, control" in out, out
    in_mode(_metadata, mode, "xattr_size=4M,nr_inodes=2000")


def _metadata(mode):
    d, _ = T.fresh("meta")
    rss = rss_kib()
    r = as_nobody([sys.executable, "-c", NOBODY_XATTRS, d, str(64 * MiB)])
    assert r.returncode == 0, r.stderr
    err, stored = r.stdout.split()
    assert err == "ENOSPC" and 3 * MiB < int(stored) <= 4 * MiB, r.stdout
    assert rss_kib() - rss < 24 * 1024, (rss, rss_kib())
    out = status_round_trip()
    assert re.search(r"xattrs [34]\.\d MiB of 4\.0 MiB", out), out
    T.cleanup()
    assert "xattrs 0 B of 4.0 MiB" in status_round_trip()
    d, _ = T.fresh("meta")
    # one file holds at most xattr_file (256K): the fifth 60K value fails
    write(d + "/one", b"")
    for i in range(4):
        os.setxattr(d + "/one", "user.v%d" % i, b"w" * 60000)
    expect_errno(28, os.setxattr, d + "/one", "user.v4", b"w" * 60000)
    write(d + "/root-file", b"root's")
    r = as_nobody([sys.executable, "-c", NOBODY_FILES, d])
    err, n = r.stdout.split()
    assert err == "ENOSPC" and 1900 < int(n) < 2000, r.stdout
    assert os.statvfs(d).f_ffree == 0
    # what was there is intact and root's files still take writes
    assert read(d + "/root-file") == b"root's"
    write(d + "/root-file", b"root's again")
    assert read(d + "/root-file") == b"root's again"
    # names count as inodes do: with inodes to spare but every name
    # taken by hard links, a new file, directory or symlink is ENOSPC
    T.cleanup()
    d, _ = T.fresh("meta")
    write(d + "/target", b"linked")
    n = 0
    try:
        while n < 4000:
            os.link(d + "/target", "%s/l%04d" % (d, n))
            n += 1
    except OSError as e:
        assert e.errno == errno.ENOSPC, e
    assert 1900 < n < 2000, n
    expect_errno(errno.ENOSPC, os.open, d + "/new",
                 os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.ENOSPC, os.mkdir, d + "/newdir")
    expect_errno(errno.ENOSPC, os.symlink, "target", d + "/newlink")
    assert read(d + "/l0000") == b"linked"
