# SPDX-License-Identifier: MIT
"""Data through the mount: the tools users have (cp, dd, cat, sha256sum,
truncate, rsync, tar, the shell, Python's open()) on random data, checked
byte for byte against a copy on a normal file system; writers side by
side, unlink while open, ENOSPC and bad offsets.
"""
import errno
import os
import random
import time

import harness as T
from harness import (MiB, CAP, sh, need, rand, write, read, same, expect_errno,
                      fresh, parallel)


def test_cp_cat_cmp_sha256():
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


def test_dd_everything():
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


def test_truncate_grow_shrink():
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


def test_shell_redirection_and_append():
    d, _ = fresh("sh")
    f = os.path.join(d, "log")
    sh("echo one > %s && echo two >> %s && printf three >> %s" % (f, f, f))
    assert read(f) == b"one\ntwo\nthree"
    sh("cat %s %s > %s.2" % (f, f, f))
    assert read(f + ".2") == b"one\ntwo\nthree" * 2
    sh("echo new > %s" % f)
    assert read(f) == b"new\n"


def test_python_open():
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


def test_cp_r_rsync_tar():
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



def test_eight_writers_eight_files():
    d, ref = fresh("par8")
    for i in range(8):
        write("%s/s%d" % (ref, i), rand(6 * MiB + i, 10 + i))
    parallel(["dd if=%s/s%d of=%s/f%d bs=%s status=none" %
              (ref, i, d, i, ["1M", "64k", "4M", "100k"][i % 4])
              for i in range(8)])
    for i in range(8):
        same("%s/s%d" % (ref, i), "%s/f%d" % (d, i))


def test_four_writers_one_file():
    d, ref = fresh("par4")
    part = 5 * MiB
    src = os.path.join(ref, "src")
    write(src, rand(4 * part, 20))
    # reverse order so that growing and in-place writes race
    parallel(["dd if=%s of=%s/f bs=1M skip=%d seek=%d count=5 "
              "conv=notrunc status=none" % (src, d, 5 * i, 5 * i)
              for i in reversed(range(4))])
    same(src, d + "/f")


def test_unlink_while_open():
    d, _ = fresh("unl")
    f = os.path.join(d, "u")
    data = rand(8 * MiB, 7)
    write(f, data)
    used0 = T.FS_used()
    fh = open(f, "r+b")
    os.unlink(f)
    assert not os.path.exists(f)
    assert fh.read() == data
    fh.seek(0)
    fh.write(b"still here")
    fh.seek(0)
    assert fh.read(10) == b"still here"
    assert T.FS_used() >= used0 - MiB, "freed while still open"
    fh.close()
    # FUSE sends RELEASE asynchronously after close() returns, and nothing
    # a client can call waits for it; the limit only bounds a real leak
    deadline = time.time() + 120
    while T.FS_used() > used0 - 7 * MiB and time.time() < deadline:
        time.sleep(0.05)
    assert T.FS_used() <= used0 - 7 * MiB, "not freed after the last close"


def test_enospc_loses_nothing():
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


def test_bad_offsets():
    d, _ = fresh("offs")
    fd = os.open(d + "/f", os.O_CREAT | os.O_RDWR)
    expect_errno(errno.EFBIG, os.pwrite, fd, b"x", 1 << 50)
    expect_errno(errno.EFBIG, os.pwrite, fd, b"x", 1 << 44)
    expect_errno(errno.EFBIG, os.ftruncate, fd, 1 << 50)
    expect_errno(errno.EINVAL, os.lseek, fd, -1, os.SEEK_SET)
    assert os.fstat(fd).st_size == 0
    assert os.pread(fd, 10, 1 << 40) == b""
    # a write crossing the largest file (16 TiB) stores what fits, as
    # Linux file systems do, and says so in its count
    assert os.pwrite(fd, b"xyz", (1 << 44) - 2) == 2
    assert os.fstat(fd).st_size == 1 << 44
    assert os.pread(fd, 10, (1 << 44) - 4) == b"\0\0xy"
    expect_errno(errno.EFBIG, os.pwrite, fd, b"x", 1 << 44)
    assert os.pwrite(fd, b"", 1 << 44) == 0
    os.ftruncate(fd, 0)
    os.close(fd)
    r = sh("dd if=/dev/zero of=%s/f bs=1 count=1 seek=1P status=none" % d,
           check=False)
    assert r.returncode and "File too large" in r.stderr, r.stderr


def test_append_fills_the_device():
    """A file appended to grows up to the last of the device's memory:
    where the large piece appends are backed in does not fit, only what
    the write needs is backed (a small file beside it leaves the device
    short of a whole piece)."""
    d, _ = fresh("appendfull")
    write(d + "/small", rand(128 * 1024, 24))
    block = b"\x5a" * MiB
    n = 0
    with open(d + "/big", "wb", buffering=0) as f:
        try:
            while n < 2 * CAP // MiB:
                f.write(block)
                n += 1
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    sv = os.statvfs(d)
    # what is left is less than the write that failed needed
    assert sv.f_bfree * sv.f_frsize < MiB, (n, sv.f_bfree)
    assert os.stat(d + "/big").st_size == n * MiB
    assert read(d + "/small") == rand(128 * 1024, 24)
