# SPDX-License-Identifier: MIT
"""A model-checked random-operation test of phxfs (in the spirit of fsx).

Random write, read, truncate, fallocate, mmap write and read, rename and
unlink on one file, each mirrored on an in-memory reference and every
read compared byte for byte, in both mount modes.  Seeded: the same seed
gives the same operations (PHXFS_FSX_SEED, PHXFS_FSX_OPS per mode).  A
mismatch prints the seed, where it happened and the operations that led
there.
"""
import errno
import mmap
import os
import random

import pytest

import harness as T


MAX_SIZE = 1 << 20  # file sizes stay below this: ops touch what matters
MAX_LEN = 64 << 10


class Mismatch(AssertionError):
    pass


class Fsx:
    def __init__(self, d, seed, mode):
        self.d, self.mode, self.seed = d, mode, seed
        self.rng = random.Random(seed)
        self.ref = bytearray()
        self.names = ["f0", "f1"]
        self.name = "f0"
        self.log = []
        self.fd = os.open(self.path(), os.O_CREAT | os.O_RDWR | os.O_TRUNC,
                          0o644)
        self.mmap_ok = True

    def path(self, name=None):
        return os.path.join(self.d, name or self.name)

    def fail(self, i, what):
        tail = self.log[-60:]
        raise Mismatch(
            "fsx (%s mode, seed %d): op %d: %s\nlast %d of %d operations "
            "(rerun with PHXFS_FSX_SEED=%d):\n  %s" %
            (self.mode, self.seed, i, what, len(tail), len(self.log),
             self.seed, "\n  ".join(tail)))

    def check(self, i, got, off, n):
        want = bytes(self.ref[off:off + n])
        if got != want:
            at = next((k for k in range(min(len(got), len(want)))
                       if got[k] != want[k]), min(len(got), len(want)))
            self.fail(i, "read %d bytes at %d: byte %d differs (got %d "
                      "bytes, want %d)" % (n, off, off + at, len(got),
                                           len(want)))

    def pick_range(self, within):
        size = len(self.ref)
        if within and not size:
            return None
        top = size if within else MAX_SIZE
        off = self.rng.randrange(0, top)
        n = self.rng.randrange(1, MAX_LEN + 1)
        return off, min(n, top - off) if within else min(n, MAX_SIZE - off)

    def op_write(self, i):
        off, n = self.pick_range(False)
        data = self.rng.randbytes(n)
        self.log.append("write off=%d len=%d" % (off, n))
        if os.pwrite(self.fd, data, off) != n:
            self.fail(i, "short write")
        if off > len(self.ref):
            self.ref.extend(bytes(off - len(self.ref)))
        self.ref[off:off + n] = data

    def op_read(self, i):
        size = len(self.ref)
        off = self.rng.randrange(0, size + 2)
        n = self.rng.randrange(0, MAX_LEN + 1)
        self.log.append("read off=%d len=%d" % (off, n))
        self.check(i, os.pread(self.fd, n, off), off, n)

    def op_truncate(self, i):
        size = self.rng.randrange(0, MAX_SIZE)
        self.log.append("truncate size=%d" % size)
        os.ftruncate(self.fd, size)
        if size < len(self.ref):
            del self.ref[size:]
        else:
            self.ref.extend(bytes(size - len(self.ref)))

    def op_fallocate(self, i):
        off, n = self.pick_range(False)
        self.log.append("fallocate off=%d len=%d" % (off, n))
        os.posix_fallocate(self.fd, off, n)
        if off + n > len(self.ref):
            self.ref.extend(bytes(off + n - len(self.ref)))

    def op_mapwrite(self, i):
        r = self.pick_range(True)
        if not r or not self.mmap_ok:
            return self.op_write(i)
        off, n = r
        data = self.rng.randbytes(n)
        self.log.append("mapwrite off=%d len=%d" % (off, n))
        with mmap.mmap(self.fd, len(self.ref), mmap.MAP_SHARED) as m:
            m[off:off + n] = data
        self.ref[off:off + n] = data

    def op_mapread(self, i):
        r = self.pick_range(True)
        if not r or not self.mmap_ok:
            return self.op_read(i)
        off, n = r
        self.log.append("mapread off=%d len=%d" % (off, n))
        with mmap.mmap(self.fd, len(self.ref), mmap.MAP_SHARED,
                       mmap.PROT_READ) as m:
            self.check(i, m[off:off + n], off, n)

    def op_rename(self, i):
        other = self.names[1] if self.name == self.names[0] else \
            self.names[0]
        self.log.append("rename %s -> %s" % (self.name, other))
        os.rename(self.path(), self.path(other))
        self.name = other
        if self.rng.random() < 0.5:
            # reopen by the new name: the same inode, the same bytes
            os.close(self.fd)
            self.fd = os.open(self.path(), os.O_RDWR)

    def op_unlink(self, i):
        self.log.append("unlink %s and create it anew" % self.name)
        # the open descriptor keeps the old file readable until closed
        os.unlink(self.path())
        n = min(len(self.ref), 4096)
        self.check(i, os.pread(self.fd, n, 0), 0, n)
        os.close(self.fd)
        self.fd = os.open(self.path(), os.O_CREAT | os.O_RDWR | os.O_EXCL,
                          0o644)
        self.ref = bytearray()

    OPS = [("write", 30), ("read", 25), ("truncate", 6), ("fallocate", 5),
           ("mapwrite", 14), ("mapread", 14), ("rename", 3), ("unlink", 1)]

    def run(self, nops):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        probe = self.path("probe")
        T.write(probe, b"x")
        fd = os.open(probe, os.O_RDWR)
        try:
            with mmap.mmap(fd, 1, mmap.MAP_SHARED):
                pass
        except OSError as e:
            # libfuse 3.14, default mode: no shared mappings (docs)
            if e.errno != errno.ENODEV or T.FS_libfuse_minor() >= 17:
                raise
            self.mmap_ok = False
        finally:
            os.close(fd)
            os.unlink(probe)
        try:
            for i in range(nops):
                op = self.rng.choices(names, weights)[0]
                try:
                    getattr(self, "op_" + op)(i)
                except OSError as e:
                    self.fail(i, "%s failed: %s" % (self.log[-1], e))
            # the whole file, last
            st = os.fstat(self.fd).st_size
            if st != len(self.ref):
                self.fail(nops, "size %d, want %d" % (st, len(self.ref)))
            self.check(nops, os.pread(self.fd, len(self.ref) + 1, 0), 0,
                       len(self.ref) + 1)
        finally:
            os.close(self.fd)  # or the mount stays busy


@T.in_modes
def test_fsx_random_ops(mode):
    """>= 100,000 random operations per mount mode against a reference."""
    if T.FS.dev_index:
        pytest.skip("runs once, in the first device directory")
    seed = int(os.environ.get("PHXFS_FSX_SEED", "1"))
    # under ASan the daemon is several times slower: fewer, same kinds
    nops = int(os.environ.get("PHXFS_FSX_OPS", "20000" if
                              os.environ.get("PHX_SANITIZED") else "100000"))
    def check(mode):
        d, _ = T.fresh("fsx-" + mode)
        Fsx(d, seed, mode).run(nops)

    T.in_mode(check, mode)
