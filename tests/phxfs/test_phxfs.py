#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phxfs integration suite.

Mounts a real phxfs in a temporary directory and drives it with the tools
users have (cp, dd, cat, cmp, sha256sum, truncate, rsync, tar, the shell,
Python's open()) on random data, checking every byte against a copy kept
on a normal file system.

    python3 tests/phxfs/test_phxfs.py [--build DIR] [-k PATTERN]

PHX_DEVICE picks the devices (sim by default; cuda on a GPU machine).
Every mount is capped at 256 MiB per device (1 GiB on GPUs; -o size=,
PHXFS_TEST_SIZE_MIB) so that running out of memory is quick to reach.  Needs root for the permission and mount
helper tests (they are skipped otherwise) and /dev/fuse.
"""
import argparse
import ctypes
import errno
import hashlib
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

MiB = 1 << 20
# Memory phxfs may use per device (-o size=): small, so ENOSPC comes fast.
# GPUs back even a small file with a 2 MiB chunk: give them more room.
_KIND = os.environ.get("PHX_DEVICE", "sim")
CAP = int(os.environ.get("PHXFS_TEST_SIZE_MIB",
                         "256" if _KIND == "sim" else "1024")) * MiB

ARGS = None
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


class Skip(Exception):
    pass


def sh(cmd, check=True, user=None, **kw):
    """Run a shell command; returns CompletedProcess (text)."""
    if user:
        cmd = "runuser -u %s -- sh -c %s" % (user, shq(cmd))
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True,
                       **kw)
    if check and r.returncode:
        raise AssertionError("%r failed (%d): %s" % (cmd, r.returncode,
                                                     r.stderr.strip()))
    return r


def shq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def need(tool):
    if not shutil.which(tool):
        raise Skip("%s not installed" % tool)


def need_root():
    if os.geteuid():
        raise Skip("needs root")


def rand(n, seed=None):
    return random.Random(seed).randbytes(n)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def same(a, b):
    """Byte-for-byte equality of two files, with a useful message."""
    da, db = read(a), read(b)
    if da != db:
        where = next((i for i in range(min(len(da), len(db)))
                      if da[i] != db[i]), min(len(da), len(db)))
        raise AssertionError("%s and %s differ at byte %d (sizes %d, %d)"
                             % (a, b, where, len(da), len(db)))


def expect_errno(err, fn, *a):
    try:
        fn(*a)
    except OSError as e:
        if e.errno != err:
            raise AssertionError("expected %s, got %s" %
                                 (errno.errorcode[err],
                                  errno.errorcode.get(e.errno, e.errno)))
        return
    raise AssertionError("expected %s, got success" % errno.errorcode[err])


class Phxfs:
    """One phxfs mount, started and stopped with the phx command."""

    def __init__(self, build, scratch):
        self.phx = os.path.join(build, "phx")
        self.daemon = os.path.join(build, "phxfs")
        self.mp = os.path.join(scratch, "mnt")
        os.makedirs(self.mp, exist_ok=True)
        os.chmod(scratch, 0o755)
        self.env = dict(os.environ)
        self.env.setdefault("PHX_DEVICE", "sim")
        if self.env["PHX_DEVICE"] == "sim":
            self.env.setdefault("PHX_SIM_DEVICES", "2")
            self.env.setdefault("PHX_SIM_CAPACITY", "1G")
        # libphoenix loaded into this process must see the same devices
        for k in ("PHX_DEVICE", "PHX_SIM_DEVICES", "PHX_SIM_CAPACITY"):
            if k in self.env:
                os.environ[k] = self.env[k]
        self.opts = "size=%d" % CAP
        self.dev_index = 0  # which device directory the tests use

    def mount(self, extra=""):
        opts = self.opts + ("," + extra if extra else "")
        r = subprocess.run([self.phx, "mount", "-o", opts, self.mp],
                           env=self.env, capture_output=True, text=True)
        if r.returncode:
            raise AssertionError("phx mount failed: " + r.stderr)
        self.devs = sorted(os.listdir(self.mp))
        self.dev = os.path.join(self.mp, self.devs[self.dev_index])
        return r

    def umount(self):
        r = subprocess.run([self.phx, "umount", self.mp], env=self.env,
                           capture_output=True, text=True)
        return r

    def daemon_pid(self):
        sock = os.getxattr(self.mp, "user.phx.socket").decode()
        return int(os.path.basename(sock).split(".")[0])

    def run_phx(self, *args, check=True):
        r = subprocess.run([self.phx] + list(args), env=self.env,
                           capture_output=True, text=True)
        if check and r.returncode:
            raise AssertionError("phx %s: %s" % (" ".join(args), r.stderr))
        return r


FS = None
SCRATCH = None


def fresh(name):
    """A new empty directory on the mount and one in scratch."""
    d = os.path.join(FS.dev, name)
    os.mkdir(d)
    os.chmod(d, 0o777)
    ref = os.path.join(SCRATCH, "ref-%d-%s" % (FS.dev_index, name))
    os.makedirs(ref, exist_ok=True)
    return d, ref


# ---- tests ----------------------------------------------------------------

@test
def layout_and_df():
    assert FS.devs, "no device directories"
    for d in FS.devs:
        st = os.stat(os.path.join(FS.mp, d))
        assert st.st_mode & 0o1777 == 0o1777, oct(st.st_mode)
    sv = os.statvfs(FS.dev)
    size = sv.f_blocks * sv.f_frsize
    assert size == CAP, "df size %d, want %d" % (size, CAP)
    out = sh("df -B1 %s" % FS.dev).stdout.split("\n")[1].split()
    assert int(out[1]) == CAP, out
    expect_errno(errno.EPERM, os.mkdir, os.path.join(FS.mp, "newdev"))


@test
def cp_cat_cmp_sha256():
    d, ref = fresh("cp")
    src = os.path.join(ref, "blob")
    write(src, rand(20 * MiB + 12345, 1))
    dst = os.path.join(d, "blob")
    sh("cp %s %s" % (src, dst))
    sh("cmp %s %s" % (src, dst))
    sh("cat %s > %s/out" % (dst, ref))
    same(src, ref + "/out")
    a = sh("sha256sum < %s" % src).stdout
    b = sh("sha256sum < %s" % dst).stdout
    assert a == b
    st = os.stat(dst)
    assert st.st_size == 20 * MiB + 12345
    assert st.st_blksize >= MiB and st.st_blksize & (st.st_blksize - 1) == 0
    assert st.st_blocks * 512 >= st.st_size
    ls = sh("ls -l %s" % dst).stdout.split()
    assert int(ls[4]) == st.st_size, ls


@test
def dd_everything():
    d, ref = fresh("dd")
    src = os.path.join(ref, "src")
    write(src, rand(9 * MiB + 777, 2))
    cmds = [
        "bs=1M", "bs=4k", "bs=3333", "bs=1M oflag=direct",
        "bs=64k seek=10 conv=notrunc", "bs=4k skip=7 count=100",
        "bs=1M seek=3 count=2", "bs=512 seek=1000 count=5 conv=notrunc",
        "bs=2M iflag=fullblock conv=notrunc seek=1",
    ]
    for i, c in enumerate(cmds):
        for base in (d, ref):
            sh("dd if=%s of=%s/f status=none %s" % (src, base, c))
        same(ref + "/f", d + "/f")
    # reading back with dd: skip and odd block sizes
    for c in ["bs=1M", "bs=7777 skip=3", "bs=1M iflag=direct", "bs=4k count=9"]:
        sh("dd if=%s/f of=%s/a status=none %s" % (d, ref, c))
        sh("dd if=%s/f of=%s/b status=none %s" % (ref, ref, c))
        same(ref + "/a", ref + "/b")


@test
def truncate_grow_shrink():
    d, _ = fresh("trunc")
    f = os.path.join(d, "t")
    data = rand(3 * MiB, 3)
    write(f, data)
    sh("truncate -s 5M %s" % f)
    got = read(f)
    assert got[:3 * MiB] == data and got[3 * MiB:] == bytes(2 * MiB)
    sh("truncate -s 1000 %s" % f)
    assert read(f) == data[:1000]
    sh("truncate -s 2M %s" % f)
    got = read(f)
    assert got[:1000] == data[:1000] and got[1000:] == bytes(2 * MiB - 1000)
    sh("truncate -s 0 %s" % f)
    assert os.stat(f).st_size == 0 and read(f) == b""
    # a hole in the middle of a sparse file reads as zeros
    with open(f, "r+b") as fh:
        fh.seek(50 * MiB)
        fh.write(b"tail")
    st = os.stat(f)
    assert st.st_size == 50 * MiB + 4
    assert st.st_blocks * 512 < 50 * MiB, "sparse file fully backed"
    with open(f, "rb") as fh:
        fh.seek(25 * MiB)
        assert fh.read(MiB) == bytes(MiB)


@test
def shell_redirection_and_append():
    d, _ = fresh("sh")
    f = os.path.join(d, "log")
    sh("echo one > %s && echo two >> %s && printf three >> %s" % (f, f, f))
    assert read(f) == b"one\ntwo\nthree"
    sh("cat %s %s > %s.2" % (f, f, f))
    assert read(f + ".2") == b"one\ntwo\nthree" * 2
    sh("echo new > %s" % f)
    assert read(f) == b"new\n"


@test
def python_open():
    d, _ = fresh("py")
    f = os.path.join(d, "p")
    data = rand(2 * MiB + 3, 4)
    with open(f, "wb") as fh:
        fh.write(data)
    with open(f, "r+b") as fh:
        fh.seek(MiB)
        fh.write(b"X" * 10)
        fh.seek(0, os.SEEK_END)
        fh.write(b"END")
    want = data[:MiB] + b"X" * 10 + data[MiB + 10:] + b"END"
    assert read(f) == want
    with open(f, "ab") as fh:
        fh.write(b"++")
    assert read(f) == want + b"++"
    with open(os.path.join(d, "t.txt"), "w") as fh:
        fh.write("héllo\n" * 1000)
    with open(os.path.join(d, "t.txt")) as fh:
        assert fh.read() == "héllo\n" * 1000
    fd = os.open(f, os.O_RDWR)
    os.pwrite(fd, b"abc", 5)
    assert os.pread(fd, 3, 5) == b"abc"
    os.close(fd)


def make_tree(root):
    rng = random.Random(5)
    for i in range(4):
        sub = os.path.join(root, "d%d" % i, "e%d" % (i % 2))
        os.makedirs(sub, exist_ok=True)
        for j in range(5):
            write(os.path.join(sub, "f%d" % j),
                  rng.randbytes(rng.choice([0, 1, 4096, 70000, MiB + 5])))
    os.symlink("d0/e0/f1", os.path.join(root, "link"))
    os.makedirs(os.path.join(root, "empty"))


@test
def cp_r_rsync_tar():
    d, ref = fresh("tree")
    src = os.path.join(ref, "src")
    make_tree(src)
    sh("cp -r %s %s/cpr" % (src, d))
    sh("diff -r %s %s/cpr" % (src, d))
    sh("cp -a %s %s/cpa" % (src, d))
    sh("diff -r %s %s/cpa" % (src, d))
    sh("tar -C %s -cf %s/t.tar ." % (src, ref))
    os.mkdir(d + "/tar")
    sh("tar -x -C %s/tar -f %s/t.tar" % (d, ref))
    sh("diff -r %s %s/tar" % (src, d))
    # and back out of the mount
    os.makedirs(ref + "/back")
    sh("tar -C %s/tar -cf - . | tar -x -C %s/back -f -" % (d, ref))
    sh("diff -r %s %s/back" % (src, ref))
    need("rsync")
    sh("rsync -a %s/ %s/rs/" % (src, d))
    sh("diff -r %s %s/rs" % (src, d))
    write(os.path.join(src, "d1", "e1", "f2"), rand(5000, 6))
    sh("rsync -a %s/ %s/rs/" % (src, d))
    sh("diff -r %s %s/rs" % (src, d))


def parallel(cmds):
    procs = [subprocess.Popen(c, shell=True, stderr=subprocess.PIPE)
             for c in cmds]
    for p, c in zip(procs, cmds):
        _, err = p.communicate()
        assert p.returncode == 0, "%s: %s" % (c, err.decode())


@test
def eight_writers_eight_files():
    d, ref = fresh("par8")
    for i in range(8):
        write("%s/s%d" % (ref, i), rand(6 * MiB + i, 10 + i))
    parallel(["dd if=%s/s%d of=%s/f%d bs=%s status=none" %
              (ref, i, d, i, ["1M", "64k", "4M", "100k"][i % 4])
              for i in range(8)])
    for i in range(8):
        same("%s/s%d" % (ref, i), "%s/f%d" % (d, i))


@test
def four_writers_one_file():
    d, ref = fresh("par4")
    part = 5 * MiB
    src = os.path.join(ref, "src")
    write(src, rand(4 * part, 20))
    # reverse order so that growing and in-place writes race
    parallel(["dd if=%s of=%s/f bs=1M skip=%d seek=%d count=5 "
              "conv=notrunc status=none" % (src, d, 5 * i, 5 * i)
              for i in reversed(range(4))])
    same(src, d + "/f")


@test
def unlink_while_open():
    d, _ = fresh("unl")
    f = os.path.join(d, "u")
    data = rand(8 * MiB, 7)
    write(f, data)
    used0 = FS_used()
    fh = open(f, "r+b")
    os.unlink(f)
    assert not os.path.exists(f)
    assert fh.read() == data
    fh.seek(0)
    fh.write(b"still here")
    fh.seek(0)
    assert fh.read(10) == b"still here"
    assert FS_used() >= used0 - MiB, "freed while still open"
    fh.close()
    # FUSE sends RELEASE asynchronously after close() returns, and nothing
    # a client can call waits for it; the limit only bounds a real leak
    deadline = time.time() + 120
    while FS_used() > used0 - 7 * MiB and time.time() < deadline:
        time.sleep(0.05)
    assert FS_used() <= used0 - 7 * MiB, "not freed after the last close"


def FS_libfuse_minor():
    """The libfuse 3.x minor version the daemon under test was built with."""
    out = subprocess.run([FS.daemon, "--version"], capture_output=True,
                         text=True).stdout
    return int(out.split("FUSE 3.")[1].split(")")[0])


def over_uring():
    """Whether the mount takes requests over io_uring (phx status)."""
    out = FS.run_phx("status", FS.mp).stdout
    return any(x.startswith("FUSE over io_uring") and x.endswith(": on")
               for x in out.splitlines())


def FS_used():
    sv = os.statvfs(FS.dev)
    return (sv.f_blocks - sv.f_bfree) * sv.f_frsize


@test
def mv_rename_link():
    d, _ = fresh("mv")
    data = rand(3 * MiB, 8)
    write(d + "/a", data)
    sh("mv %s/a %s/b" % (d, d))
    assert not os.path.exists(d + "/a") and read(d + "/b") == data
    write(d + "/c", b"over")
    os.rename(d + "/b", d + "/c")
    assert read(d + "/c") == data
    os.makedirs(d + "/x/y")
    write(d + "/x/y/z", b"zz")
    sh("mv %s/x %s/w" % (d, d))
    assert read(d + "/w/y/z") == b"zz"
    expect_errno(errno.EINVAL, os.rename, d + "/w", d + "/w/y/inside")
    os.link(d + "/c", d + "/hard")
    assert os.stat(d + "/c").st_nlink == 2 and read(d + "/hard") == data
    os.unlink(d + "/c")
    assert read(d + "/hard") == data
    os.symlink("hard", d + "/sym")
    assert os.readlink(d + "/sym") == "hard" and read(d + "/sym") == data
    if len(FS.devs) < 2:
        return
    other_dev = FS.devs[(FS.dev_index + 1) % len(FS.devs)]
    other = os.path.join(FS.mp, other_dev)
    sh("mv %s/hard %s/moved" % (d, other))
    assert read(other + "/moved") == data
    assert os.getxattr(other + "/moved", "user.phx.device").decode() == \
        other_dev
    sh("mv %s/w %s/wdir" % (d, other))  # mv copies directories itself
    assert read(other + "/wdir/y/z") == b"zz"
    sh("rm -r %s/moved %s/wdir" % (other, other))


def dev_used(path):
    sv = os.statvfs(path)
    return (sv.f_blocks - sv.f_bfree) * sv.f_frsize


@test
def every_device_at_once():
    """Copies into all devices at once, then every file moves on to the
    next device (a device-to-device copy), all byte-exact; df follows."""
    if len(FS.devs) < 2:
        raise Skip("one device")
    dirs, refs = [], []
    for i, dv in enumerate(FS.devs):
        d = os.path.join(FS.mp, dv, "multi")
        os.mkdir(d)
        ref = os.path.join(SCRATCH, "multi-%d-%d" % (FS.dev_index, i))
        write(ref, rand(5 * MiB + 333 * i, 40 + i))
        dirs.append(d)
        refs.append(ref)
    parallel(["cp %s %s/f" % (shq(r), shq(d)) for r, d in zip(refs, dirs)])
    for r, d in zip(refs, dirs):
        same(r, d + "/f")
    roots = [os.path.dirname(d) for d in dirs]
    used = [dev_used(r) for r in roots]
    n = len(dirs)
    parallel(["mv %s/f %s/from%d" % (shq(dirs[i]), shq(dirs[(i + 1) % n]), i)
              for i in range(n)])
    for i in range(n):
        dst = dirs[(i + 1) % n] + "/from%d" % i
        same(refs[i], dst)
        assert not os.path.exists(dirs[i] + "/f")
        assert os.getxattr(dst, "user.phx.device").decode() == \
            FS.devs[(i + 1) % n]
    for i in range(n):
        # each device now holds its neighbour's file instead of its own
        assert dev_used(roots[i]) > 0
    for i in range(n):
        sh("rm -r %s" % shq(dirs[i]))
        assert dev_used(roots[i]) < used[i], "rm gives the memory back"



@test
def mkdir_rmdir():
    d, _ = fresh("dirs")
    os.makedirs(d + "/a/b/c")
    expect_errno(errno.EEXIST, os.mkdir, d + "/a")
    expect_errno(errno.ENOTEMPTY, os.rmdir, d + "/a")
    write(d + "/a/f", b"1")
    expect_errno(errno.ENOTDIR, os.rmdir, d + "/a/f")
    expect_errno(errno.EISDIR, os.unlink, d + "/a/b")
    sh("rm -r %s/a" % d)
    assert os.listdir(d) == []
    names = ["n%03d" % i for i in range(300)]
    for n in names:
        write(d + "/" + n, b"")
    assert sorted(os.listdir(d)) == names
    st = os.stat(d)
    assert st.st_nlink == 2


@test
def enospc_loses_nothing():
    d, ref = fresh("full")
    keep = rand(40 * MiB, 9)
    write(d + "/keep", keep)
    r = sh("dd if=/dev/zero of=%s/big bs=1M count=%d status=none" %
           (d, CAP * 3 // 2 // MiB), check=False)
    assert r.returncode != 0 and "No space left" in r.stderr, r.stderr
    assert read(d + "/keep") == keep
    size = os.stat(d + "/big").st_size
    assert size < CAP
    # a write into the full device fails cleanly and changes nothing
    fd = os.open(d + "/keep", os.O_WRONLY)
    expect_errno(errno.ENOSPC, os.pwrite, fd, b"x" * MiB, CAP // 2)
    os.close(fd)
    assert os.stat(d + "/keep").st_size == 40 * MiB
    assert read(d + "/keep") == keep
    os.unlink(d + "/big")
    write(d + "/after", rand(8 * MiB, 11))
    assert read(d + "/after") == rand(8 * MiB, 11)
    assert read(d + "/keep") == keep


@test
def permissions_nobody():
    need_root()
    d, _ = fresh("perm")
    write(d + "/secret", b"root only")
    os.chmod(d + "/secret", 0o600)
    r = sh("cat %s/secret" % d, user="nobody", check=False)
    assert r.returncode and "Permission denied" in r.stderr, r.stderr
    r = sh("echo x >> %s/secret" % d, user="nobody", check=False)
    assert r.returncode and "Permission denied" in r.stderr, r.stderr
    os.chmod(d, 0o1777)
    r = sh("rm -f %s/secret" % d, user="nobody", check=False)
    assert r.returncode and os.path.exists(d + "/secret"), "sticky dir"
    sh("echo mine > %s/own && cat %s/own" % (d, d), user="nobody")
    st = os.stat(d + "/own")
    assert st.st_uid == 65534, st.st_uid
    os.chmod(d + "/secret", 0o644)
    assert sh("cat %s/secret" % d, user="nobody").stdout == "root only"
    os.chown(d + "/secret", 65534, 65534)
    assert os.stat(d + "/secret").st_uid == 65534
    r = sh("getfattr -n user.phx.handle %s/own" % d, user="nobody",
           check=False) if shutil.which("getfattr") else None
    if r:
        assert r.returncode == 0, r.stderr


@test
def bad_names():
    d, _ = fresh("names")
    expect_errno(errno.ENAMETOOLONG, os.open, d + "/" + "n" * 256,
                 os.O_CREAT | os.O_WRONLY)
    fd = os.open(d + "/" + "n" * 255, os.O_CREAT | os.O_WRONLY)
    os.close(fd)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, d + "/" + "m" * 300)
    expect_errno(errno.EINVAL, os.open, d + "/.phx.reserved",
                 os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.EINVAL, os.mkdir, d + "/.phx.dir")
    expect_errno(errno.ENOENT, os.open, d + "/no/such", os.O_CREAT |
                 os.O_WRONLY)
    expect_errno(errno.EPERM, os.open, FS.mp + "/file",
                 os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.EBUSY, os.rmdir, FS.dev)
    expect_errno(errno.EBUSY, os.rename, FS.dev, FS.mp + "/renamed")
    expect_errno(errno.EPERM, os.mkfifo, FS.mp + "/fifo")  # top level
    write(d + "/f", b"x")
    expect_errno(errno.ENOTDIR, os.open, d + "/f/child",
                 os.O_CREAT | os.O_WRONLY)


@test
def bad_offsets():
    d, _ = fresh("offs")
    fd = os.open(d + "/f", os.O_CREAT | os.O_RDWR)
    expect_errno(errno.EFBIG, os.pwrite, fd, b"x", 1 << 50)
    expect_errno(errno.EFBIG, os.pwrite, fd, b"xy", (1 << 44) - 1)
    expect_errno(errno.EFBIG, os.ftruncate, fd, 1 << 50)
    expect_errno(errno.EINVAL, os.lseek, fd, -1, os.SEEK_SET)
    assert os.fstat(fd).st_size == 0
    assert os.pread(fd, 10, 1 << 40) == b""
    os.close(fd)
    r = sh("dd if=/dev/zero of=%s/f bs=1 count=1 seek=1P status=none" % d,
           check=False)
    assert r.returncode and "File too large" in r.stderr, r.stderr


@test
def xattrs():
    d, _ = fresh("xattr")
    write(d + "/f", b"data")
    assert os.getxattr(d + "/f", "user.phx.device").decode() == \
        FS.devs[FS.dev_index]
    assert os.getxattr(d + "/f", "user.phx.path").decode() == "memcpy"
    names = os.listxattr(d + "/f")
    assert "user.phx.device" in names and "user.phx.path" in names
    assert "user.phx.handle" in names
    assert "user.phx.socket" in os.listxattr(FS.mp)
    expect_errno(errno.EPERM, os.setxattr, d + "/f", "user.phx.device",
                 b"gpu9")
    expect_errno(errno.ENODATA, os.getxattr, d + "/f", "user.none")
    # user.* beside them: set, replace, list, remove, flags, sizes
    os.setxattr(d + "/f", "user.other", b"1")
    os.setxattr(d + "/f", "user.other", b"22", os.XATTR_REPLACE)
    expect_errno(errno.EEXIST, os.setxattr, d + "/f", "user.other", b"3",
                 os.XATTR_CREATE)
    expect_errno(errno.ENODATA, os.setxattr, d + "/f", "user.new", b"3",
                 os.XATTR_REPLACE)
    big = rand(60000, 11)
    os.setxattr(d + "/f", "user.big", big)
    os.setxattr(d + "/f", "user.empty", b"")
    assert os.getxattr(d + "/f", "user.other") == b"22"
    assert os.getxattr(d + "/f", "user.big") == big
    assert os.getxattr(d + "/f", "user.empty") == b""
    names = os.listxattr(d + "/f")
    assert {"user.other", "user.big", "user.empty",
            "user.phx.device"} <= set(names), names
    os.removexattr(d + "/f", "user.other")
    expect_errno(errno.ENODATA, os.getxattr, d + "/f", "user.other")
    expect_errno(errno.ENODATA, os.removexattr, d + "/f", "user.other")
    expect_errno(errno.EPERM, os.removexattr, d + "/f", "user.phx.path")
    os.mkdir(d + "/sub")
    os.setxattr(d + "/sub", "user.dir", b"yes")
    assert os.getxattr(d + "/sub", "user.dir") == b"yes"
    # ACLs are not supported: the mode bits are the whole story
    expect_errno(errno.EOPNOTSUPP, os.setxattr, d + "/f",
                 "system.posix_acl_access", b"\x02\0\0\0")
    # they go with the file
    os.rename(d + "/f", d + "/g")
    assert os.getxattr(d + "/g", "user.big") == big


@test
def phx_cp_and_status():
    d, ref = fresh("phxcp")
    src = os.path.join(ref, "big")
    write(src, rand(30 * MiB + 5, 12))
    FS.run_phx("cp", src, d + "/big")
    same(src, d + "/big")
    assert os.stat(d + "/big").st_size == 30 * MiB + 5
    path = os.getxattr(d + "/big", "user.phx.path").decode()
    assert path in ("staged", "buffered", "p2p"), path
    FS.run_phx("cp", "-q", src, d)  # into a directory: same name
    same(src, d + "/big")
    out = FS.run_phx("status", "-a", FS.mp).stdout
    assert FS.devs[0] in out and "/phxcp/big" in out, out
    assert "FUSE over io_uring" in out, out
    r = FS.run_phx("cp", "/nonexistent", d + "/x", check=False)
    assert r.returncode and "nonexistent" in r.stderr


@test
def fuse_transport():
    """phx status says whether requests come over io_uring, and why not;
    over io_uring libfuse serves them on one thread per CPU."""
    out = FS.run_phx("status", FS.mp).stdout
    line = [x for x in out.splitlines() if "FUSE over io_uring" in x]
    assert len(line) == 1, out
    pid = FS.daemon_pid()
    rings = set()
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
            comm = f.read().strip()
        if comm.startswith("fuse-ring-"):
            rings.add(comm)
    if ARGS.io_uring == "on":
        assert line[0].endswith(": on"), line[0]
        assert rings == {"fuse-ring-%d" % i
                         for i in range(os.cpu_count())}, rings
        # data through the rings lands whole
        d, ref = fresh("uring")
        data = rand(3 * MiB + 17, 21)
        write(d + "/f", data)
        assert read(d + "/f") == data
    else:
        assert ": off " in line[0] and len(line[0].split(": off ")[1]), line
        assert not rings, rings
        # not the default: large sequential reads are faster without
        assert "not asked for" in line[0], line[0]


@test
def phx_cp_onto_an_existing_file():
    """phx cp over a file keeps its device memory and overwrites every
    byte: larger, smaller, the same size, sparse, and a source of nothing."""
    d, ref = fresh("cpover")
    src = os.path.join(ref, "src")
    for i, (old, new) in enumerate([(9 * MiB + 3, 5 * MiB + 1),
                                    (2 * MiB, 7 * MiB + 4097),
                                    (6 * MiB, 6 * MiB), (0, 3 * MiB),
                                    (4 * MiB, 0)]):
        dst = d + "/f%d" % i
        write(dst, rand(old, 40 + i))
        write(src, rand(new, 50 + i))
        FS.run_phx("cp", "-q", src, dst)
        same(src, dst)
        assert os.stat(dst).st_size == new
    # a sparse file, its holes and data overwritten
    with open(d + "/sparse", "wb") as f:
        f.truncate(16 * MiB)
        f.seek(9 * MiB)
        f.write(rand(MiB, 60))
    write(src, rand(12 * MiB, 61))
    FS.run_phx("cp", "-q", src, d + "/sparse")
    same(src, d + "/sparse")


@test
def phx_cp_out_of_phxfs():
    d, ref = fresh("cpout")
    src = os.path.join(ref, "ckpt")
    write(src, rand(20 * MiB + 4097, 21))
    FS.run_phx("cp", "-q", src, d + "/ckpt")
    out = os.path.join(ref, "back")
    r = FS.run_phx("cp", d + "/ckpt", out)
    same(src, out)
    assert "1 file," in r.stderr and "path" in r.stderr, r.stderr
    os.chmod(out, 0o600)
    write(out, b"old contents")
    FS.run_phx("cp", "-q", d + "/ckpt", out)  # replaces a file
    same(src, out)
    # into a directory: same name; an empty file and a file with a hole
    FS.run_phx("cp", "-q", d + "/ckpt", SCRATCH)
    same(src, os.path.join(SCRATCH, "ckpt"))
    os.unlink(os.path.join(SCRATCH, "ckpt"))
    write(d + "/empty", b"")
    with open(d + "/holes", "wb") as f:
        f.write(b"head")
        f.truncate(3 * MiB)
    for name in ("empty", "holes"):
        FS.run_phx("cp", "-q", d + "/" + name, os.path.join(ref, name))
        same(d + "/" + name, os.path.join(ref, name))
    assert [n for n in os.listdir(ref) if ".phx-" in n] == []


@test
def phx_cp_out_sparse():
    """phx cp out of a sparse file writes only its data runs: the copy
    keeps the holes (as cp --sparse=always does) and the source gains no
    memory."""
    d, ref = fresh("cpsparse")
    f = d + "/sparse"
    size = 96 * MiB
    runs = [(0, rand(4096, 41)), (30 * MiB + 5, rand(70000, 42)),
            (64 * MiB, rand(3 * MiB, 43)), (size - 10, rand(10, 44))]
    with open(f, "wb") as fh:
        fh.truncate(size)
        for off, data in runs:
            fh.seek(off)
            fh.write(data)
    held = os.stat(f).st_blocks
    out = os.path.join(ref, "sparse")
    FS.run_phx("cp", "-q", f, out)
    same(f, out)
    assert os.stat(f).st_blocks == held, "the copy backed the source's holes"
    st = os.stat(out)
    assert st.st_size == size
    # what the source holds bounds what the copy holds (the data runs);
    # the file system under the copy may add a block per run
    assert st.st_blocks <= held + 8 * len(runs), (st.st_blocks, held)
    assert st.st_blocks * 512 < size // 4, st.st_blocks
    # granules are at most 2 MiB (CUDA): the first hole lies before 16 MiB
    # and the second run starts at 30 MiB rounded down to its granule
    fd = os.open(out, os.O_RDONLY)
    try:
        assert os.lseek(fd, 4096, os.SEEK_HOLE) < 16 * MiB
        assert 28 * MiB <= os.lseek(fd, 16 * MiB, os.SEEK_DATA) <= 30 * MiB
    finally:
        os.close(fd)
    # a file never written is all hole
    with open(d + "/none", "wb") as fh:
        fh.truncate(50 * MiB)
    FS.run_phx("cp", "-q", d + "/none", ref + "/none")
    assert os.stat(ref + "/none").st_size == 50 * MiB
    assert os.stat(ref + "/none").st_blocks == 0
    assert os.stat(d + "/none").st_blocks == 0


@test
def phx_cp_r_both_ways():
    d, ref = fresh("cpr")
    tree = os.path.join(ref, "model")
    os.makedirs(os.path.join(tree, "sub", "deeper"))
    files = {"config.json": 123, "model-00001-of-00002.safetensors":
             3 * MiB + 5, "model-00002-of-00002.safetensors": MiB,
             "sub/a.bin": 0, "sub/deeper/b.bin": 70000}
    for i, (name, n) in enumerate(sorted(files.items())):
        write(os.path.join(tree, name), rand(n, 30 + i))
    r = FS.run_phx("cp", "-r", tree + "/", d)
    assert "5 files," in r.stderr, r.stderr
    for name in files:
        same(os.path.join(tree, name), os.path.join(d, "model", name))
    back = os.path.join(ref, "back")
    FS.run_phx("cp", "-r", "-q", os.path.join(d, "model"), back)
    for name in files:
        same(os.path.join(tree, name), os.path.join(back, name))
    os.symlink("config.json", os.path.join(tree, "link"))
    r = FS.run_phx("cp", "-r", "-q", tree, d + "/again", check=False)
    assert r.returncode == 1 and "link: not a regular file" in r.stderr, \
        r.stderr
    same(os.path.join(tree, "config.json"),
         os.path.join(d, "again", "config.json"))


@test
def phx_cp_bad_input():
    d, ref = fresh("cpbad")
    write(d + "/f", rand(1000, 5))
    write(os.path.join(ref, "f"), rand(1000, 6))
    cases = [
        (("/nonexistent", d + "/x"), "/nonexistent: No such file"),
        ((ref, d), "is a directory; use phx cp -r"),
        ((d + "/f", d + "/g"), "both on phxfs"),
        ((os.path.join(ref, "f"), os.path.join(ref, "g")),
         "neither"),
        ((d + "/f", os.path.join(ref, "no", "g")),
         "no/g: No such file or directory"),
        (("/dev/null", d + "/n"), "not a regular file or directory"),
        ((d + "/f",), "usage"),
        (("-z", d + "/f", ref), "usage"),
    ]
    for args, msg in cases:
        r = FS.run_phx("cp", *args, check=False)
        assert r.returncode and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 or msg == "usage", \
            r.stderr
    assert os.listdir(ref) == ["f"], os.listdir(ref)
    assert sorted(os.listdir(d)) == ["f"], os.listdir(d)


LIB = None


def lib():
    global LIB
    path = os.path.join(ARGS.build, "libphoenix.so")
    if not os.path.exists(path):
        raise Skip("no libphoenix.so")
    if os.environ.get("PHX_SANITIZED"):
        # an ASan library cannot be loaded into an uninstrumented Python
        raise Skip("libphoenix.so is built with ASan")
    if LIB is None:
        LIB = ctypes.CDLL(path)
        LIB.phx_device_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        LIB.phx_buf_recv.argtypes = [ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_void_p]
        LIB.phx_memcpy_from_buf.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_uint64, ctypes.c_uint64]
        LIB.phx_memcpy_to_buf.argtypes = [ctypes.c_void_p, ctypes.c_uint64,
                                          ctypes.c_void_p, ctypes.c_uint64]
        LIB.phx_buf_size.argtypes = [ctypes.c_void_p]
        LIB.phx_buf_size.restype = ctypes.c_uint64
        LIB.phx_buf_free.argtypes = [ctypes.c_void_p]
        LIB.phx_device_close.argtypes = [ctypes.c_void_p]
        LIB.phx_strerror_last.restype = ctypes.c_char_p
    return LIB


def ctl_open(path):
    """Ask the daemon to share @path's memory (control socket OPEN):
    returns the connected socket and the reply line."""
    import socket
    sock_path, ino = os.getxattr(path, "user.phx.handle").decode() \
        .rsplit(" ", 1)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(b"OPEN %s\n" % ino.encode())
    line = b""
    while not line.endswith(b"\n"):
        line += s.recv(1)
    return s, line


@test
def share_in_place():
    """Another process maps a file's memory through the control socket."""
    L = lib()
    d, _ = fresh("share")
    data = rand(3 * MiB, 13)
    write(d + "/t", data)
    s, line = ctl_open(d + "/t")
    ok, devname, size = line.decode().split()
    assert ok == "OK" and int(size) == len(data), line
    dev, buf = ctypes.c_void_p(), ctypes.c_void_p()
    env_kind = os.environ.get("PHX_DEVICE", "sim")
    assert L.phx_device_open(devname.encode(), ctypes.byref(dev)) == 0, \
        L.phx_strerror_last()
    ret = L.phx_buf_recv(dev, s.fileno(), ctypes.byref(buf))
    assert ret == 0, L.phx_strerror_last()
    s.close()
    assert L.phx_buf_size(buf) == len(data)
    got = ctypes.create_string_buffer(len(data))
    assert L.phx_memcpy_from_buf(got, buf, 0, len(data)) == 0
    assert got.raw == data
    # a write through the shared mapping shows in the file: same memory
    assert L.phx_memcpy_to_buf(buf, 100, b"SHARED", 6) == 0
    assert read(d + "/t")[100:106] == b"SHARED"
    L.phx_buf_free(buf)
    L.phx_device_close(dev)
    assert env_kind


@test
def mount_helper():
    need_root()
    need("mount.fuse3")
    mp = os.path.join(SCRATCH, "helper")
    os.makedirs(mp, exist_ok=True)
    env = dict(FS.env)
    env["PATH"] = os.path.abspath(ARGS.build) + ":" + env["PATH"]
    helper = os.path.join(os.path.dirname(__file__), "..", "..", "phxfs", "tool",
                          "mount.fuse.phxfs")
    r = subprocess.run([helper, "phxfs", mp, "-o",
                        "size=64M,noauto,_netdev,reserve=0"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        devs = sorted(os.listdir(mp))
        assert devs == FS.devs, devs
        sv = os.statvfs(mp + "/" + devs[0])
        assert sv.f_blocks * sv.f_frsize == 64 * MiB
        assert "fuse.phxfs" in read("/proc/mounts").decode()
    finally:
        subprocess.run([FS.phx, "umount", mp])


@test
def request_sizes():
    """max_write: 16M by default where libfuse and the kernel allow it,
    refused past libfuse 3.14's 1M buffer, capped by the kernel's
    fs.fuse.max_pages_limit with a notice."""
    out = subprocess.run([FS.daemon, "--version"], capture_output=True,
                         text=True).stdout
    minor = int(out.split("FUSE 3.")[1].split(")")[0])
    try:
        with open("/proc/sys/fs/fuse/max_pages_limit") as f:
            kernel_cap = int(f.read()) * os.sysconf("SC_PAGESIZE")
    except OSError:
        kernel_cap = 256 * 4096
    FS.umount()
    try:
        r = FS.mount("max_write=4M")
    except AssertionError as e:
        assert minor < 17, "libfuse 3.%d refused 4M: %s" % (minor, e)
        assert "libfuse 3.%d" % minor in str(e) and "1M" in str(e), str(e)
        FS.mount()
        return
    try:
        assert minor >= 17, "libfuse 3.%d took max_write=4M" % minor
        assert ("caps requests" in r.stderr) == (kernel_cap < 4 * MiB), \
            r.stderr
        d, ref = fresh("big")
        src = os.path.join(ref, "src")
        write(src, rand(20 * MiB + 4097, 9))
        sh("dd if=%s of=%s/f bs=4M status=none" % (src, d))
        sh("dd if=%s/f of=%s/back bs=4M status=none" % (d, ref))
        sh("cmp %s %s/back" % (src, ref))
    finally:
        FS.umount()
        FS.mount()


@test
def kill_daemon_then_recover():
    """Last: kills the daemon mid-copy, checks ENOTCONN, remounts."""
    d, _ = fresh("kill")
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\n"
         "f = open(sys.argv[1], 'wb', buffering=0)\n"
         "b = os.urandom(1 << 20)\n"
         "f.write(b)\n"
         "print('writing', flush=True)\n"
         "try:\n"
         "    while True:\n"
         "        f.seek(0); f.write(b); time.sleep(0.005)\n"
         "except OSError as e:\n"
         "    print(e.errno); sys.exit(3)\n", d + "/victim"],
        stdout=subprocess.PIPE, text=True)
    # kill only once the writer's first write went through the mount
    assert writer.stdout.readline() == "writing\n"
    pid = FS.daemon_pid()
    pidfd = os.pidfd_open(pid)
    try:
        os.kill(pid, signal.SIGKILL)
        # the connection is cut once the daemon has exited and its files
        # are closed (its pidfd turns readable then): over io_uring the
        # kernel cancels queued requests before that, and a call made in
        # between would see ECANCELED rather than ENOTCONN
        select.select([pidfd], [], [])
    finally:
        os.close(pidfd)
    out, _ = writer.communicate(timeout=20)
    # the write in flight sees ECONNABORTED (ECANCELED when it sat in an
    # io_uring queue, whose requests the kernel cancels), or EIO when the
    # kernel had split it into two requests and only one was answered (an
    # unaligned 1 MiB buffer spans 257 pages); later calls see ENOTCONN
    assert writer.returncode == 3 and \
        int(out) in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED,
                     errno.EIO), out
    expect_errno(errno.ENOTCONN, os.listdir, FS.dev)
    expect_errno(errno.ENOTCONN, os.statvfs, FS.mp)
    r = FS.mount()
    assert "stale" in r.stderr, r.stderr
    assert os.listdir(FS.dev) == [], "contents survived the daemon"
    write(FS.dev + "/again", b"ok")
    assert read(FS.dev + "/again") == b"ok"


# ---- runner -----------------------------------------------------------------

def cleanup():
    """Empty the device directories so each test starts with free memory."""
    for dev in FS.devs:
        for name in os.listdir(os.path.join(FS.mp, dev)):
            p = os.path.join(FS.mp, dev, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            else:
                os.unlink(p)
    assert FS_used() == 0, "device memory still held after rm: %d" % \
        FS_used()


URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def uring_unavailable():
    """Why this run cannot switch FUSE over io_uring on, or None."""
    if not os.path.exists(URING_PARAM):
        return "the kernel has no FUSE over io_uring"
    if os.geteuid():
        return "switching it on needs root"
    return None


def restore_uring(was):
    if was is not None:
        with open(URING_PARAM, "w") as f:
            f.write("1" if was == "Y" else "0")


def main():
    global ARGS, FS, SCRATCH
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("-k", default="", help="run tests whose name has this")
    ap.add_argument("--each-device", action="store_true",
                    help="run the suite once in every device directory")
    ap.add_argument("--io-uring", choices=("on", "off"), default="off",
                    help="on: mount with -o io_uring, the kernel's FUSE "
                    "over io_uring switched on for the run (root)")
    ARGS = ap.parse_args()
    # the case modules import this one by name: give them this instance
    sys.modules["test_phxfs"] = sys.modules[__name__]
    import conformance  # noqa: F401  (registers its tests)
    import posix_vs_tmpfs  # noqa: F401
    import fsx  # noqa: F401
    import readahead  # noqa: F401
    import attacks  # noqa: F401
    if not os.path.exists("/dev/fuse"):
        print("phxfs tests: no /dev/fuse; 0 passed, 0 failed (skipped)")
        return 0
    uring_was = None
    if ARGS.io_uring == "on":
        why = uring_unavailable()
        if why:
            print("phxfs tests over io_uring: skipped (%s); "
                  "0 passed, 0 failed" % why)
            return 0
        with open(URING_PARAM) as f:
            uring_was = f.read().strip()
        with open(URING_PARAM, "w") as f:
            f.write("1")
    base = os.environ.get("PHX_TEST_DIR") or None
    if base:
        os.makedirs(base, exist_ok=True)
    SCRATCH = tempfile.mkdtemp(prefix="phxfs-test-", dir=base)
    FS = Phxfs(ARGS.build, SCRATCH)
    if ARGS.io_uring == "on":
        FS.opts += ",io_uring"
    try:
        FS.mount()
    except BaseException:
        restore_uring(uring_was)
        raise
    print("phxfs tests: %s devices %s, mounted at %s (FUSE over io_uring %s)"
          % (FS.env["PHX_DEVICE"], " ".join(FS.devs), FS.mp, ARGS.io_uring))
    passed = failed = skipped = 0
    t0 = time.time()
    rounds = range(len(FS.devs)) if ARGS.each_device else [0]
    runs = [(i, t) for i in rounds for t in TESTS]
    try:
        for i, t in runs:
            if ARGS.k not in t.__name__:
                continue
            if FS.dev_index != i:
                FS.dev_index = i
                FS.dev = os.path.join(FS.mp, FS.devs[i])
                print("phxfs tests in %s" % FS.devs[i])
            t1 = time.time()
            try:
                t()
                cleanup()
                passed += 1
                status = "ok"
            except Skip as e:
                skipped += 1
                status = "skip (%s)" % e
            except Exception:
                failed += 1
                status = "FAIL"
                traceback.print_exc()
            print("  %-28s %s  %.1fs" % (t.__name__, status,
                                        time.time() - t1), flush=True)
    finally:
        FS.umount()
        shutil.rmtree(SCRATCH, ignore_errors=True)
        restore_uring(uring_was)
    print("phxfs suite took %.0fs" % (time.time() - t0))
    print("phxfs: %d passed, %d failed, %d skipped" %
          (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
