# SPDX-License-Identifier: MIT
"""POSIX corner cases of phxfs, measured against tmpfs as in
test_posix_vs_tmpfs.py (posix_ref.py runs the steps on both): fallocate's
times, directories listed again after a rewind, extended attribute names
that are a namespace alone.
"""
import ctypes
import os

import harness as T
from posix_ref import compare, new_dir, new_file, read

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long,
                            ctypes.c_long]


def fallocate(path, off, length):
    fd = os.open(path, os.O_RDWR)
    try:
        if _libc.fallocate(fd, 0, off, length):
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
    finally:
        os.close(fd)


def fallocate_times(r):
    data = T.rand(200000, 41)
    f = new_file(r.p("f"), 0o666, data)
    r.times("inside the file", lambda: fallocate(f, 0, 100), [f],
            want=["mc"])
    r.times("past its end", lambda: fallocate(f, 100000, 200000), [f],
            want=["mc"])
    r.note("size", os.stat(f).st_size, 300000)
    r.note("bytes", read(f) == data + bytes(100000), True)


def test_posix_fallocate_times():
    """fallocate() is a change of the file: mtime and ctime move, whether
    it grew the file or not."""
    compare(fallocate_times)


def list_rewound(d):
    """Names listed, then listed again on the same descriptor after a
    rewind (os.listdir of a descriptor rewinds it first) once an entry
    was added and another removed."""
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        before = sorted(os.listdir(fd))
        T.write(os.path.join(d, "added"), b"")
        os.unlink(os.path.join(d, "e0"))
        os.lseek(fd, 0, os.SEEK_SET)
        return before, sorted(os.listdir(fd))
    finally:
        os.close(fd)


def readdir_rewind(r):
    d = new_dir(r.p("d"), 0o755)
    for i in range(3):
        T.write(os.path.join(d, "e%d" % i), b"")
    r.do("listed again", list_rewound, d,
         want=(["e0", "e1", "e2"], ["added", "e1", "e2"]))


def test_posix_readdir_rewind():
    """A directory read again from its start (rewinddir) shows the
    entries added and removed since it was opened."""
    compare(readdir_rewind)


def xattr_bare_names(r):
    f = new_file(r.p("f"), 0o644, b"data")
    for ns in ("user.", "trusted.", "security."):
        r.do("set " + ns, os.setxattr, f, ns, b"v", want="EINVAL")
        r.do("get " + ns, os.getxattr, f, ns, want="EINVAL")
        r.do("remove " + ns, os.removexattr, f, ns, want="EINVAL")
        r.do("set %sx" % ns, os.setxattr, f, ns + "x", b"v")
    r.note("listed", sorted(n for n in os.listxattr(f)
                            if not n.startswith("user.phx.")),
           ["security.x", "trusted.x", "user.x"])


def test_posix_xattr_bare_names():
    """A name that is a namespace and nothing more (user., trusted.,
    security.) is no attribute: EINVAL, nothing stored."""
    compare(xattr_bare_names)
