# SPDX-License-Identifier: MIT
"""Another local user against phxfs: the control socket and the limits.

Each case is an attack a user without privileges can make on a shared
machine (run as nobody through setpriv, skipped with the reason where that
cannot be done), shown to fail safely while root's work goes on; each runs
in the suite's mount (direct I/O, or io_uring in that run) and again with
-o writeback (the `mode` parameter).  Nothing here waits on
time: the daemon's answers and the ends of connections are the
completions; time-outs only guard against a hang.
"""
import errno
import grp
import os
import pwd
import re
import shutil
import socket
import struct
import subprocess
import sys

import pytest

import harness as T
from harness import MiB, expect_errno, need, read, write

HOSTILE = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "hostile.py")).read()
# how long any one step may take before the test calls it a hang
GUARD = 60


def need_nobody():
    if os.geteuid():
        pytest.skip("needs root to act as another user")
    need("setpriv")
    try:
        pwd.getpwnam("nobody")
        grp.getgrnam("nogroup")
    except KeyError:
        pytest.skip("no user nobody or group nogroup")


def nobody_argv(argv, groups=None):
    return (["setpriv", "--reuid=nobody", "--regid=nogroup"] +
            (["--groups=%s" % groups] if groups else ["--clear-groups"]) +
            ["--"] + list(argv))


def as_nobody(argv, groups=None, **kw):
    return subprocess.run(nobody_argv(argv, groups), capture_output=True,
                          text=True, timeout=GUARD, env=T.FS.env, **kw)


def hostile(*args, groups=None):
    r = as_nobody([sys.executable, "-c", HOSTILE] + list(args), groups)
    assert r.returncode == 0, r.stderr
    return r.stdout


def hostile_bg(*args):
    return subprocess.Popen(
        nobody_argv([sys.executable, "-c", HOSTILE] + list(args)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=T.FS.env)


def phx_nobody(*args, groups=None):
    return as_nobody([T.FS.phx] + list(args), groups)


def sock():
    return os.getxattr(T.FS.mp, "user.phx.socket").decode()


def root_ok(*argv):
    """A command of root's that must complete; the time-out only guards."""
    r = subprocess.run(list(argv), capture_output=True, text=True,
                       timeout=5)
    assert r.returncode == 0, (argv, r.stderr)
    return r.stdout


def nobody_dir():
    """A directory outside phxfs that nobody may write."""
    d = os.path.join(T.SCRATCH, "nobody")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o777)
    return d


def in_mode(fn, mode, extra=""):
    """harness.in_mode(), once per mount: the daemon is the same for
    every device directory."""
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    T.in_mode(fn, mode, extra)


def daemon_fds():
    """The daemon's open descriptors but its /dev/fuse clones (one per
    FUSE worker thread, which libfuse starts as requests come)."""
    base = "/proc/%d/fd" % T.FS.daemon_pid()
    out = []
    for n in os.listdir(base):
        try:
            t = os.readlink(os.path.join(base, n))
        except FileNotFoundError:
            continue
        if t != "/dev/fuse":
            out.append(t)
    return sorted(out)


def status_round_trip():
    """Root's STATUS, read to the end: the daemon closed that connection
    (and what it held) once we see the end."""
    return root_ok(T.FS.phx, "status", "-a", T.FS.mp)


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
