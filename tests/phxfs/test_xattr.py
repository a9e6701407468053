# SPDX-License-Identifier: MIT
"""Extended attributes: the user.phx.* ones phxfs answers and the ones it
stores.
"""
import errno
import os

import harness as T
from harness import rand, write, expect_errno, fresh


def test_xattrs():
    d, _ = fresh("xattr")
    write(d + "/f", b"data")
    assert os.getxattr(d + "/f", "user.phx.device").decode() == \
        T.FS.devs[T.FS.dev_index]
    assert os.getxattr(d + "/f", "user.phx.path").decode() == "memcpy"
    names = os.listxattr(d + "/f")
    assert "user.phx.device" in names and "user.phx.path" in names
    assert "user.phx.handle" in names
    assert "user.phx.socket" in os.listxattr(T.FS.mp)
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
