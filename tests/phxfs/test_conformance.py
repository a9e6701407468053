# SPDX-License-Identifier: MIT
"""POSIX conformance and security cases of the phxfs suite.

Every case compares phxfs with what the kernel's own file systems do
(tmpfs behaves the same way).
"""
import errno
import os
import struct
import subprocess

import pytest

import harness as T
from harness import expect_errno, need_root, read, sh, write

# security.capability: VFS_CAP_REVISION_2, effective, CAP_NET_BIND_SERVICE
FILE_CAPS = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)


def privileged_file(d, name, mode=0o6777):
    f = os.path.join(d, name)
    write(f, b"old")
    os.chmod(f, mode)
    os.setxattr(f, "security.capability", FILE_CAPS)
    assert os.stat(f).st_mode & 0o7777 == mode
    return f


def has_caps(f):
    try:
        return os.getxattr(f, "security.capability") == FILE_CAPS
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise
        return False


@T.in_modes
def test_suid_sgid_caps_cleared(mode):
    """A write or truncation by anyone but root clears SUID and SGID (in
    both mount modes); file capabilities go on any write, as on ext4."""
    need_root()

    def check(mode):
        d, _ = T.fresh("suid-" + mode)
        cases = {
            "append": "printf x >> %s",
            "truncate": "truncate -s 1 %s",
            "otrunc": ": > %s",
            "otrunc_write": "printf y > %s",
            "dd": "dd if=/dev/zero of=%s bs=1 count=1 seek=5 "
                  "conv=notrunc status=none",
        }
        for name, cmd in cases.items():
            f = privileged_file(d, name)
            sh(cmd % f, user="nobody")
            got = os.stat(f).st_mode & 0o7777
            assert got == 0o777, "%s %s by nobody left mode %o" % (
                mode, name, got)
            assert not has_caps(f), "%s %s kept file capabilities" % (
                mode, name)
        # SGID without group execution is a locking mark: cleared for a
        # writer outside the file's group (nobody is not in root's).  With
        # -o writeback the kernel's FUSE decides alone and keeps it
        # (docs/phxfs.md, "What is not supported").
        f = privileged_file(d, "sgid", 0o2666)
        sh("printf x >> %s" % f, user="nobody")
        want = 0o666 if mode == "direct" else 0o2666
        assert os.stat(f).st_mode & 0o7777 == want, mode
        # root keeps the bits but not the capabilities
        f = privileged_file(d, "root")
        sh("printf x >> %s" % f)
        assert os.stat(f).st_mode & 0o7777 == 0o6777, mode
        assert not has_caps(f), "%s root write kept capabilities" % mode
        # chmod by the owner, and a plain read, change nothing
        f = privileged_file(d, "read")
        sh("cat %s >/dev/null" % f, user="nobody")
        assert os.stat(f).st_mode & 0o7777 == 0o6777 and has_caps(f)

    T.in_mode(check, mode)


def test_status_names_escaped():
    """Names with newlines, tabs, control bytes and invalid UTF-8, made by
    any user in a 1777 device directory, can neither forge a row of
    phx status nor cut it short; they print escaped (\\xHH)."""
    names = {
        b"aab\nDEV fake sim 999 0 0 none 0 0 0 0 evil":
            "aab\\x0aDEV fake sim 999 0 0 none 0 0 0 0 evil",
        b"aaa\nEND": "aaa\\x0aEND",
        b"tab\there": "tab\\x09here",
        b"esc\x1b[2Jx\r\x07": "esc\\x1b[2Jx\\x0d\\x07",
        b"bad\xff\xfe\xc3": "bad\\xff\\xfe\\xc3",
        b"back\\x41": "back\\\\x41",
        "h\u00e9llo".encode(): "h\u00e9llo",
        b"\xed\xa0\x80surrogate": "\\xed\\xa0\\x80surrogate",
    }
    dev = os.fsencode(T.FS.dev)
    for n in names:
        subprocess.run(["runuser", "-u", "nobody", "--", "python3", "-c",
                        "import sys; open(bytes.fromhex(sys.argv[1]), "
                        "'wb').write(b'x')", os.path.join(dev, n).hex()],
                       check=True)
    raw = subprocess.run([T.FS.phx, "status", "-a", T.FS.mp], env=T.FS.env,
                         capture_output=True, check=True).stdout
    for ln in raw.split(b"\n"):
        assert not any(c < 0x20 or c == 0x7f for c in ln), ln
    text = raw.decode("utf-8")  # valid UTF-8 whatever the names hold
    lines = text.split("\n")
    assert lines[-2].startswith("mounted at "), text
    rows = [ln.split() for ln in lines]
    devs = [r for r in rows if len(r) > 2 and r[0] in T.FS.devs and
            r[1] in ("sim", "cuda", "kmod")]
    assert len(devs) == len(T.FS.devs), "forged device rows:\n" + text
    base = "/" + os.path.basename(T.FS.dev) + "/"
    shown = [ln.split("memcpy", 1)[1].strip() for ln in lines
             if " memcpy " in ln and base in ln]
    for n, printed in names.items():
        assert base + printed in shown, (printed, shown)


def renameat2(old, new, flags):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD = -100
    if libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD,
                      os.fsencode(new), flags):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


def test_special_files():
    """FIFOs, Unix sockets and device nodes are inodes the kernel serves;
    tar carries them in and out."""
    import socket
    import stat
    need_root()
    d, ref = T.fresh("special")
    fifo = os.path.join(d, "fifo")
    os.mkfifo(fifo, 0o640)
    st = os.lstat(fifo)
    assert stat.S_ISFIFO(st.st_mode) and st.st_mode & 0o777 == 0o640
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(fifo, os.O_WRONLY)
    os.write(wfd, b"through the pipe")
    assert os.read(rfd, 100) == b"through the pipe"
    os.close(wfd)
    os.close(rfd)
    # a Unix socket bound in the mount
    path = os.path.join(d, "sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect(path)
    conn, _ = srv.accept()
    cli.sendall(b"hello")
    assert conn.recv(5) == b"hello"
    for s in (cli, conn, srv):
        s.close()
    # device nodes: root only (CAP_MKNOD), rdev kept; the kernel opens
    # them unless the mount is nodev
    null = os.path.join(d, "null")
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    os.mknod(d + "/blk", 0o600 | stat.S_IFBLK, os.makedev(7, 0))
    assert os.lstat(d + "/blk").st_rdev == os.makedev(7, 0)
    opts = [ln.split()[3].split(",") for ln in
            read("/proc/mounts").decode().splitlines()
            if ln.split()[1] == T.FS.mp][0]
    if "nodev" in opts:
        expect_errno(errno.EACCES, os.open, null, os.O_WRONLY)
    else:
        fd = os.open(null, os.O_WRONLY)
        assert os.write(fd, b"gone") == 4
        os.close(fd)
    r = sh("mknod %s/n2 c 1 3" % d, check=False, user="nobody")
    assert r.returncode and "Operation not permitted" in r.stderr, r.stderr
    # hard links to special files; tar round trip (tar makes FIFOs anew,
    # unlinked, on tmpfs too)
    os.link(fifo, d + "/fifo2")
    assert os.lstat(fifo).st_nlink == 2
    os.unlink(path)
    sh("tar -C %s -cf %s/t.tar ." % (d, ref))
    os.mkdir(d + "/x")
    sh("tar -C %s/x -xf %s/t.tar" % (d, ref))
    assert stat.S_ISFIFO(os.lstat(d + "/x/fifo").st_mode)
    assert os.lstat(d + "/x/null").st_rdev == os.makedev(1, 3)


def test_renames_exchange_noreplace():
    d, _ = T.fresh("ren")
    write(d + "/a", b"A")
    write(d + "/b", b"B")
    expect_errno(errno.EEXIST, renameat2, d + "/a", d + "/b",
                 RENAME_NOREPLACE)
    renameat2(d + "/a", d + "/c", RENAME_NOREPLACE)
    assert read(d + "/c") == b"A" and not os.path.exists(d + "/a")
    renameat2(d + "/c", d + "/b", RENAME_EXCHANGE)
    assert read(d + "/c") == b"B" and read(d + "/b") == b"A"
    expect_errno(errno.ENOENT, renameat2, d + "/b", d + "/none",
                 RENAME_EXCHANGE)
    # a file and a directory in different parents swap places
    os.makedirs(d + "/p1/dir/sub")
    os.mkdir(d + "/p2")
    write(d + "/p2/f", b"F")
    renameat2(d + "/p1/dir", d + "/p2/f", RENAME_EXCHANGE)
    assert read(d + "/p1/dir") == b"F"
    assert os.path.isdir(d + "/p2/f/sub")
    assert os.stat(d + "/p1").st_nlink == 2
    assert os.stat(d + "/p2").st_nlink == 3
    assert os.path.samefile(d + "/p2/f/..", d + "/p2")
    # a directory may not go below itself
    os.mkdir(d + "/p2/f/sub/deep")
    expect_errno(errno.EINVAL, renameat2, d + "/p2/f", d + "/p2/f/sub/deep",
                 RENAME_EXCHANGE)
    sh("rm -rf %s/p1 %s/p2" % (d, d))


def test_modes_owners_sticky_times():
    need_root()
    d, _ = T.fresh("modes")
    os.chmod(d, 0o1777)
    write(d + "/root", b"r")
    os.chmod(d + "/root", 0o666)
    # sticky directory: others may write the file but not remove it
    sh("printf w > %s/root" % d, user="nobody")
    r = sh("rm -f %s/root" % d, check=False, user="nobody")
    assert r.returncode and os.path.exists(d + "/root"), r.stderr
    sh("printf n > %s/mine && mv %s/mine %s/mine2" % (d, d, d),
       user="nobody")
    assert os.stat(d + "/mine2").st_uid == 65534
    # owner changes: only root gives files away
    r = sh("chown root %s/mine2" % d, check=False, user="nobody")
    assert r.returncode
    os.chown(d + "/mine2", 0, 0)
    assert os.stat(d + "/mine2").st_uid == 0
    # modes and permission checks
    os.chmod(d + "/root", 0o600)
    r = sh("cat %s/root" % d, check=False, user="nobody")
    assert r.returncode and "Permission denied" in r.stderr
    # times: set exactly, and moved by a write
    os.utime(d + "/root", ns=(1_000_000_000_123, 2_000_000_000_456))
    st = os.stat(d + "/root")
    assert st.st_mtime_ns == 2_000_000_000_456, st
    write(d + "/root", b"again")
    assert os.stat(d + "/root").st_mtime_ns > 2_000_000_000_456
    # truncation both ways keeps what it should
    with open(d + "/root", "r+b") as f:
        f.truncate(3)
        assert f.read() == b"aga"
        f.truncate(6)
    assert read(d + "/root") == b"aga\0\0\0"


def libfuse_minor():
    return T.FS_libfuse_minor()


def test_o_tmpfile_and_linkat():
    """O_TMPFILE (libfuse 3.17 builds): a nameless file, then a name."""
    need_root()  # linkat(AT_EMPTY_PATH) needs CAP_DAC_READ_SEARCH
    d, _ = T.fresh("tmpf")
    try:
        fd = os.open(d, os.O_TMPFILE | os.O_RDWR, 0o640)
    except OSError as e:
        if libfuse_minor() >= 17:
            raise
        assert e.errno == errno.EOPNOTSUPP, e
        pytest.skip("O_TMPFILE needs the libfuse 3.17 build")
    try:
        assert os.listdir(d) == []
        os.write(fd, b"nameless")
        assert os.fstat(fd).st_nlink == 0
        # linkat(fd, "", AT_EMPTY_PATH): Python's os.link cannot
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.linkat(fd, b"", -100, os.fsencode(d + "/named"), 0x1000):
            raise OSError(ctypes.get_errno(), "linkat")
        assert read(d + "/named") == b"nameless"
        assert os.stat(d + "/named").st_nlink == 1
        assert os.stat(d + "/named").st_mode & 0o777 == 0o640
    finally:
        os.close(fd)
    # one that never gets a name frees its memory at close
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY)
    os.write(fd, b"x" * 100000)
    os.close(fd)
    assert os.listdir(d) == ["named"]


def test_seek_data_hole():
    d, _ = T.fresh("seek")
    f = d + "/sparse"
    with open(f, "wb") as fh:
        fh.truncate(8 << 20)
    fd = os.open(f, os.O_RDONLY)
    try:
        # nothing written: all hole
        expect_errno(errno.ENXIO, os.lseek, fd, 0, os.SEEK_DATA)
        assert os.lseek(fd, 4096, os.SEEK_HOLE) == 4096
        expect_errno(errno.ENXIO, os.lseek, fd, 8 << 20, os.SEEK_HOLE)
    finally:
        os.close(fd)
    write(f, T.rand(3 << 20, 12))
    fd = os.open(f, os.O_RDONLY)
    try:
        # all written: data up to the hole at the end
        assert os.lseek(fd, 5, os.SEEK_DATA) == 5
        assert os.lseek(fd, 5, os.SEEK_HOLE) == 3 << 20
        expect_errno(errno.ENXIO, os.lseek, fd, 3 << 20, os.SEEK_DATA)
        # and the plain whences still work
        assert os.lseek(fd, 0, os.SEEK_END) == 3 << 20
    finally:
        os.close(fd)
    # cp keeps a sparse file sparse and its bytes exact
    with open(f, "r+b") as fh:
        fh.truncate(0)
        fh.seek(6 << 20)
        fh.write(b"end")
    sh("cp --sparse=always %s %s/copy" % (f, d))
    assert read(d + "/copy") == read(f)


def test_seek_holes_in_the_middle():
    """A partly written sparse file reports its holes exactly: data where
    it was written (to the device's granule), holes between and after."""
    d, _ = T.fresh("seek-mid")
    f = d + "/sparse"
    size, a, b = 128 << 20, 40 << 20, 100 << 20
    da, db = T.rand(4096, 21), T.rand(4096, 22)
    with open(f, "wb") as fh:
        fh.truncate(size)
    fd = os.open(f, os.O_RDWR)
    try:
        os.pwrite(fd, da, a + 100)
        os.pwrite(fd, db, b)
        os.fsync(fd)
        assert os.lseek(fd, 0, os.SEEK_HOLE) == 0
        assert os.lseek(fd, 0, os.SEEK_DATA) == a
        assert os.lseek(fd, a + 50, os.SEEK_DATA) == a + 50
        end_a = os.lseek(fd, a, os.SEEK_HOLE)
        assert a + 100 + 4096 <= end_a <= a + (2 << 20), end_a
        assert os.lseek(fd, end_a, os.SEEK_DATA) == b
        end_b = os.lseek(fd, b + 1, os.SEEK_HOLE)
        assert b + 4096 <= end_b <= b + (2 << 20), end_b
        expect_errno(errno.ENXIO, os.lseek, fd, end_b, os.SEEK_DATA)
        assert os.lseek(fd, end_b, os.SEEK_HOLE) == end_b
        expect_errno(errno.ENXIO, os.lseek, fd, size, os.SEEK_HOLE)
        # the file holds about what was written, not what lies between
        assert os.fstat(fd).st_blocks * 512 <= 2 * (2 << 20)
        assert os.pread(fd, 4096, a + 100) == da
        assert os.pread(fd, 4096, b) == db
        assert os.pread(fd, 4096, a - 4096) == bytes(4096)
    finally:
        os.close(fd)
    # what walks the holes copies the bytes exactly and keeps them sparse
    sh("cp --sparse=always %s %s/copy" % (f, d))
    assert read(d + "/copy") == read(f)
    assert os.stat(d + "/copy").st_blocks * 512 <= 2 * (2 << 20)


@T.in_modes
def test_shared_mmap_both_modes(mode):
    """MAP_SHARED read-write mappings agree with read() and write() at
    once, in the default mode (libfuse 3.17: direct-io-allow-mmap) and
    with -o writeback; with libfuse 3.14 the default mode says ENODEV."""
    import mmap

    def check(mode):
        d, _ = T.fresh("mmap-" + mode)
        f = d + "/m"
        data = bytearray(T.rand(3 << 20, 13))
        write(f, bytes(data))
        fd = os.open(f, os.O_RDWR)
        try:
            try:
                m = mmap.mmap(fd, len(data), mmap.MAP_SHARED)
            except OSError as e:
                if mode == "direct" and libfuse_minor() < 17:
                    assert e.errno == errno.ENODEV, e
                    return
                raise
            with m:
                assert m[:] == data
                m[4096:4101] = b"hello"
                data[4096:4101] = b"hello"
                assert os.pread(fd, 5, 4096) == b"hello"
                os.pwrite(fd, b"WORLD", (2 << 20) + 7)
                data[(2 << 20) + 7:(2 << 20) + 12] = b"WORLD"
                assert m[(2 << 20) + 7:(2 << 20) + 12] == b"WORLD"
                m[-3:] = b"END"
                data[-3:] = b"END"
                m.flush()
            assert read(f) == bytes(data)
        finally:
            os.close(fd)

    T.in_mode(check, mode)
