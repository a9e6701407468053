# SPDX-License-Identifier: MIT
"""What the phxfs suites share: the mount under test and the helpers.

conftest.py mounts a real phxfs in a temporary directory for the session
(phx mount, -o size= capped so that running out of memory is quick to
reach) and points FS at it; the suites (test_*.py) drive it with the
tools users have and check every byte against a copy on a normal file
system.  PHX_DEVICE picks the devices (sim by default; cuda on a GPU
machine).  Every mount is capped at 256 MiB per device (1 GiB on GPUs;
PHXFS_TEST_SIZE_MIB).  Needs root for the permission and mount helper
tests (they are skipped otherwise) and /dev/fuse.
"""
import ctypes
import errno
import os
import random
import shutil
import subprocess
import types

import pytest

MiB = 1 << 20
# Memory phxfs may use per device (-o size=): small, so ENOSPC comes fast.
# GPUs back even a small file with a 2 MiB chunk: give them more room.
_KIND = os.environ.get("PHX_DEVICE", "sim")


CAP = int(os.environ.get("PHXFS_TEST_SIZE_MIB",
                         "256" if _KIND == "sim" else "1024")) * MiB



# The run's options (conftest.py): the build folder, whether every device
# directory gets the suites, and whether the mount takes io_uring.
ARGS = types.SimpleNamespace(build="build", each_device=False,
                             io_uring="off")

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
        pytest.skip("%s not installed" % tool)


def need_root():
    if os.geteuid():
        pytest.skip("needs root")


def rand(n, seed=None):
    return random.Random(seed).randbytes(n)


def write(path, data, mode=None):
    """@data into @path, then its permission bits set to @mode if given."""
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)


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

def parallel(cmds):
    procs = [subprocess.Popen(c, shell=True, stderr=subprocess.PIPE)
             for c in cmds]
    for p, c in zip(procs, cmds):
        _, err = p.communicate()
        assert p.returncode == 0, "%s: %s" % (c, err.decode())


# The mount modes a case runs in, as a parameter: the suite's mount
# ("direct": requests through /dev/fuse, or over io_uring in that run)
# and the same with -o writeback (the kernel's page cache).
MODES = ("direct", "writeback")
in_modes = pytest.mark.parametrize("mode", MODES)


def in_mode(fn, mode, extra=""):
    """Run @fn(@mode) in the suite's mount with @extra options, and
    -o writeback added for mode "writeback"; remounted with those and
    back to the suite's mount after."""
    opts = ",".join(o for o in ("writeback" if mode == "writeback" else "",
                                extra) if o)
    if not opts:
        fn(mode)
        return
    FS.umount()
    FS.mount(opts)
    try:
        fn(mode)
    finally:
        cleanup()
        FS.umount()
        FS.mount()


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


def dev_used(path):
    sv = os.statvfs(path)
    return (sv.f_blocks - sv.f_bfree) * sv.f_frsize


LIB = None


def lib():
    global LIB
    path = os.path.join(ARGS.build, "libphoenix.so")
    if not os.path.exists(path):
        pytest.skip("no libphoenix.so")
    if os.environ.get("PHX_SANITIZED"):
        # an ASan library cannot be loaded into an uninstrumented Python
        pytest.skip("libphoenix.so is built with ASan")
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

