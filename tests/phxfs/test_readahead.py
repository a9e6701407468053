# SPDX-License-Identifier: MIT
"""The daemon's read-ahead (phxfs/daemon/readahead.c) against a phxfs mount.

A read that continues the one before on the same open file has the next
range copied ahead; a read of exactly that range takes it, anything else
throws it away, and so does any change of the file since.  These tests
read through one descriptor while other descriptors, `phx cp`, renames
and a process that maps the file's memory change it, and check every byte
and the file's counters in user.phx.readahead ("served H dropped D"):
whether a read is served from the read-ahead or drops it is decided by
the order of the calls alone, never by timing.  Each pread() of R bytes
is one FUSE request (R is well below the largest request).
"""
import ctypes
import mmap
import os
import random
import threading

import pytest

import harness as T
from harness import MiB, rand

R = 256 << 10


def ra_counts(fd):
    """(reads served from a read-ahead, read-aheads dropped) of the file
    open as @fd."""
    v = os.getxattr(fd, "user.phx.readahead").decode().split()
    assert v[0] == "served" and v[2] == "dropped", v
    return int(v[1]), int(v[3])


class Counted:
    """Checks what the reads inside a with block did to @fd's file's
    counters (@fd stays open: the counters follow the file)."""

    def __init__(self, fd, hits, dropped):
        self.fd, self.want = fd, (hits, dropped)

    def __enter__(self):
        self.before = ra_counts(self.fd)
        return self

    def __exit__(self, kind, *_):
        if kind:
            return False
        after = ra_counts(self.fd)
        got = (after[0] - self.before[0], after[1] - self.before[1])
        assert got == self.want, \
            "read-aheads (served, dropped) %s, want %s" % (got, self.want)
        return False


class Uncounted:
    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def devfuse_only():
    """Reads over io_uring are copied straight into their request's
    payload and are never read ahead (docs/phxfs.md)."""
    if T.over_uring():
        pytest.skip("reads over io_uring have no read-ahead")


def make(d, name, data):
    path = os.path.join(d, name)
    T.write(path, data)
    return path


def read_sequentially(name, seed, hits):
    """cat and a pread loop of R bytes through a file of 8 MiB and a bit
    get every byte; @hits(nreads) is how many are served from the
    read-ahead, and none is made past the end."""
    d, ref = T.fresh(name)
    data = rand(8 * MiB + 100, seed)
    src = make(ref, "src", data)
    f = make(d, "f", data)
    T.sh("cat %s > %s/out" % (T.shq(f), T.shq(ref)))
    T.same(src, ref + "/out")
    nreads = (len(data) + R - 1) // R
    fd = os.open(f, os.O_RDONLY)
    try:
        with Counted(fd, hits(nreads), 0):
            got = [os.pread(fd, R, off) for off in range(0, len(data), R)]
            assert os.pread(fd, R, len(data)) == b""
    finally:
        os.close(fd)
    assert b"".join(got) == data, "sequential preads differ from the file"


def test_readahead_sequential():
    """Every read after the first one is served from the read-ahead."""
    devfuse_only()
    read_sequentially("ra-seq", 60, lambda n: n - 1)


def test_readahead_other_patterns():
    """A jump, a shorter read of the range and a longer one: only the
    read of (part of) exactly the range read ahead is served from it."""
    devfuse_only()
    d, _ = T.fresh("ra-jump")
    data = rand(16 * R, 61)
    fd = os.open(make(d, "f", data), os.O_RDONLY)
    try:
        with Counted(fd, 1, 2):
            assert os.pread(fd, R, 0) == data[:R]  # reads [R, 2R) ahead
            # elsewhere: dropped; not sequential, so nothing ahead
            assert os.pread(fd, R, 5 * R) == data[5 * R:6 * R]
            # sequential: [7R, 8R) ahead
            assert os.pread(fd, R, 6 * R) == data[6 * R:7 * R]
            # half of it: served; [7.5R, 8R) ahead
            h = 7 * R + R // 2
            assert os.pread(fd, R // 2, 7 * R) == data[7 * R:h]
            # more than was read ahead: dropped
            assert os.pread(fd, R, h) == data[h:h + R]
        # backwards and random: the bytes, whatever is read ahead
        rng = random.Random(62)
        for _ in range(64):
            off = rng.randrange(len(data))
            n = rng.choice([1, 4096, R // 3, R, 2 * R])
            assert os.pread(fd, n, off) == data[off:off + n], (off, n)
    finally:
        os.close(fd)


def change_then_read(d, name, data, change, want_next, counted=True):
    """Read [0, R) of a new file holding @data through one descriptor
    (so [R, 2R) is read ahead), run @change(path), then read [R, 2R):
    it must be @want_next, from the file as changed.  Not @counted: the
    change reads the file itself (a mapping's page faults)."""
    path = make(d, name, data)
    fd = os.open(path, os.O_RDONLY)
    try:
        with Counted(fd, 0, 1) if counted else Uncounted():
            assert os.pread(fd, R, 0) == data[:R]
            moved = change(path)  # the new name, if it moved the file
            path = moved if isinstance(moved, str) else path
            got = os.pread(fd, R, R)
        assert got == want_next, \
            "%s: read after the change got %d bytes, want %d%s" % (
                name, len(got), len(want_next),
                " (the old data)" if got == data[R:2 * R] else "")
        # the read after it is read ahead again, from the new file
        st = os.fstat(fd).st_size
        assert st == os.stat(path).st_size
        want = T.read(path)[2 * R:3 * R]
        more = len(want_next) == R and st > 2 * R
        with Counted(fd, 1 if more else 0, 0) if counted else Uncounted():
            assert os.pread(fd, R, 2 * R) == want
    finally:
        os.close(fd)


def test_readahead_dropped_on_change():
    """Writes, truncates, fallocate, phx cp and a move to another device
    between two sequential reads of one descriptor: the second read sees
    the file as changed, never the bytes read ahead before."""
    devfuse_only()
    d, ref = T.fresh("ra-change")
    data = rand(4 * R, 63)
    new = rand(R, 64)

    def pwrite_other(path):
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, new, R)
        os.close(fd)
    change_then_read(d, "write", data, pwrite_other, new)

    def shrink(n):
        return lambda path: os.truncate(path, n)
    change_then_read(d, "shrink", data, shrink(R + 1000), data[R:R + 1000])
    change_then_read(d, "shrink0", data, shrink(R // 2), b"")

    def regrow(path):
        os.truncate(path, R)
        os.truncate(path, 4 * R)
    change_then_read(d, "regrow", data, regrow, bytes(R))

    def fallocate(path):
        fd = os.open(path, os.O_WRONLY)
        os.posix_fallocate(fd, 0, 8 * R)
        os.close(fd)
    change_then_read(d, "fallocate", data[:2 * R], fallocate, data[R:2 * R])

    other = make(ref, "other", rand(4 * R, 65))
    change_then_read(d, "phxcp", data,
                     lambda p: T.FS.run_phx("cp", "-q", other, p),
                     T.read(other)[R:2 * R])

    def mmap_write(path):
        if T.FS_libfuse_minor() < 17:
            # no shared mappings of direct-I/O files there (docs)
            return os.truncate(path, 4 * R - 1)
        fd = os.open(path, os.O_RDWR)
        with mmap.mmap(fd, 4 * R) as m:
            m[R:2 * R] = new
            m.flush()
        os.close(fd)
    change_then_read(d, "mmap", data, mmap_write,
                     new if T.FS_libfuse_minor() >= 17 else data[R:2 * R],
                     counted=False)

    if len(T.FS.devs) > 1:
        to = os.path.join(T.FS.mp, T.FS.devs[(T.FS.dev_index + 1) %
                                             len(T.FS.devs)], "moved")

        def move(path):
            os.rename(path, to)
            return to
        try:
            change_then_read(d, "move", data, move, data[R:2 * R])
        finally:
            if os.path.exists(to):
                os.unlink(to)

    # the same descriptor writes between its reads
    fd = os.open(make(d, "self", data), os.O_RDWR)
    try:
        with Counted(fd, 0, 1):
            assert os.pread(fd, R, 0) == data[:R]
            os.pwrite(fd, new[:5], R + 7)
            got = os.pread(fd, R, R)
        assert got == data[R:R + 7] + new[:5] + data[R + 12:2 * R]
    finally:
        os.close(fd)


def test_readahead_concurrent_readers():
    """Readers on their own descriptors with different request sizes, and
    four threads sharing one descriptor (each reading its quarter in
    order, so the read-ahead one asked for is often taken or thrown away
    by another), on two files: every byte right."""
    devfuse_only()
    d, _ = T.fresh("ra-many")
    files = [make(d, "f%d" % i, rand(6 * MiB + 4097 * i, 66 + i))
             for i in range(2)]
    datas = [T.read(f) for f in files]
    errors = []

    def reader(i, size):
        try:
            fd = os.open(files[i % 2], os.O_RDONLY)
            try:
                data = datas[i % 2]
                for off in range(0, len(data) + size, size):
                    got = os.pread(fd, size, off)
                    if got != data[off:off + size]:
                        errors.append("reader %d: %d bytes at %d differ" %
                                      (i, size, off))
                        return
            finally:
                os.close(fd)
        except OSError as e:
            errors.append("reader %d: %s" % (i, e))

    shared = os.open(files[0], os.O_RDONLY)

    def quarter(start, end):
        try:
            for _ in range(3):
                for off in range(start, end, R):
                    if os.pread(shared, R, off) != datas[0][off:off + R]:
                        errors.append("shared descriptor: bytes at %d" %
                                      off)
                        return
        except OSError as e:
            errors.append("shared descriptor: %s" % e)

    q = len(datas[0]) // 4 // R * R
    threads = [threading.Thread(target=reader, args=(i, s))
               for i, s in enumerate([64 << 10, R, MiB, 333333, 4096 * 7])]
    threads += [threading.Thread(target=quarter,
                                 args=(i * q, len(datas[0]) if i == 3 else
                                       (i + 1) * q)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(shared)
    assert not errors, errors


def share(path):
    """Map @path's memory in this process (control socket OPEN): returns
    (device, buffer) for phx_memcpy_to_buf()."""
    L = T.lib()
    s, line = T.ctl_open(path)
    ok, devname, _ = line.decode().split()
    assert ok == "OK", line
    dev, buf = ctypes.c_void_p(), ctypes.c_void_p()
    assert L.phx_device_open(devname.encode(), ctypes.byref(dev)) == 0, \
        L.phx_strerror_last()
    assert L.phx_buf_recv(dev, s.fileno(), ctypes.byref(buf)) == 0, \
        L.phx_strerror_last()
    s.close()
    return dev, buf


def test_readahead_off_once_shared():
    """Once another process maps the file's memory it can write it
    unseen: what was read ahead is dropped, nothing is read ahead again."""
    devfuse_only()
    L = T.lib()
    d, _ = T.fresh("ra-share")
    data = rand(6 * R, 67)
    path = make(d, "f", data)
    fd = os.open(path, os.O_RDONLY)
    try:
        with Counted(fd, 0, 1):
            assert os.pread(fd, R, 0) == data[:R]
            dev, buf = share(path)
            assert L.phx_memcpy_to_buf(buf, R + 3, b"MAPPED", 6) == 0
            got = os.pread(fd, R, R)
            assert got == data[R:R + 3] + b"MAPPED" + data[R + 9:2 * R]
            assert L.phx_memcpy_to_buf(buf, 3 * R, b"AGAIN", 5) == 0
            assert os.pread(fd, R, 2 * R) == data[2 * R:3 * R]
            assert os.pread(fd, R, 3 * R)[:5] == b"AGAIN"
        L.phx_buf_free(buf)
        L.phx_device_close(dev)
    finally:
        os.close(fd)


def test_no_readahead_over_io_uring():
    """Over io_uring, sequential reads go straight from device memory into
    the request's payload: nothing is read ahead."""
    if not T.over_uring():
        pytest.skip("requests come through /dev/fuse")
    read_sequentially("ra-uring", 61, lambda n: 0)


def test_readahead_mount_option():
    """-o no_readahead serves each read on its own."""
    T.FS.umount()
    T.FS.mount("no_readahead")
    try:
        d, _ = T.fresh("ra-off")
        data = rand(4 * MiB, 68)
        fd = os.open(make(d, "f", data), os.O_RDONLY)
        try:
            with Counted(fd, 0, 0):
                got = [os.pread(fd, R, o) for o in range(0, len(data), R)]
        finally:
            os.close(fd)
        assert b"".join(got) == data
        T.cleanup()
    finally:
        T.FS.umount()
        T.FS.mount()
