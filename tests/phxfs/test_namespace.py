# SPDX-License-Identifier: MIT
"""The mount's namespace: one directory per device, df, mv / rename / ln
within and across devices, every device at once, mkdir and rmdir,
permissions of another user, names phxfs refuses.
"""
import errno
import os
import shutil

import pytest

import harness as T
from harness import (MiB, CAP, sh, shq, need_root, rand, write, read, same,
                      expect_errno, fresh, dev_used, parallel)


def test_layout_and_df():
    assert T.FS.devs, "no device directories"
    for d in T.FS.devs:
        st = os.stat(os.path.join(T.FS.mp, d))
        assert st.st_mode & 0o1777 == 0o1777, oct(st.st_mode)
    sv = os.statvfs(T.FS.dev)
    size = sv.f_blocks * sv.f_frsize
    assert size == CAP, "df size %d, want %d" % (size, CAP)
    out = sh("df -B1 %s" % T.FS.dev).stdout.split("\n")[1].split()
    assert int(out[1]) == CAP, out
    expect_errno(errno.EPERM, os.mkdir, os.path.join(T.FS.mp, "newdev"))


def test_mv_rename_link():
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
    if len(T.FS.devs) < 2:
        return
    other_dev = T.FS.devs[(T.FS.dev_index + 1) % len(T.FS.devs)]
    other = os.path.join(T.FS.mp, other_dev)
    sh("mv %s/hard %s/moved" % (d, other))
    assert read(other + "/moved") == data
    assert os.getxattr(other + "/moved", "user.phx.device").decode() == \
        other_dev
    sh("mv %s/w %s/wdir" % (d, other))  # mv copies directories itself
    assert read(other + "/wdir/y/z") == b"zz"
    sh("rm -r %s/moved %s/wdir" % (other, other))


def test_every_device_at_once():
    """Copies into all devices at once, then every file moves on to the
    next device (a device-to-device copy), all byte-exact; df follows."""
    if len(T.FS.devs) < 2:
        pytest.skip("one device")
    dirs, refs = [], []
    for i, dv in enumerate(T.FS.devs):
        d = os.path.join(T.FS.mp, dv, "multi")
        os.mkdir(d)
        ref = os.path.join(T.SCRATCH, "multi-%d-%d" % (T.FS.dev_index, i))
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
            T.FS.devs[(i + 1) % n]
    for i in range(n):
        # each device now holds its neighbour's file instead of its own
        assert dev_used(roots[i]) > 0
    for i in range(n):
        sh("rm -r %s" % shq(dirs[i]))
        assert dev_used(roots[i]) < used[i], "rm gives the memory back"


def test_mkdir_rmdir():
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


def test_permissions_nobody():
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


def test_bad_names():
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
    expect_errno(errno.EPERM, os.open, T.FS.mp + "/file",
                 os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.EBUSY, os.rmdir, T.FS.dev)
    expect_errno(errno.EBUSY, os.rename, T.FS.dev, T.FS.mp + "/renamed")
    expect_errno(errno.EPERM, os.mkfifo, T.FS.mp + "/fifo")  # top level
    write(d + "/f", b"x")
    expect_errno(errno.ENOTDIR, os.open, d + "/f/child",
                 os.O_CREAT | os.O_WRONLY)
