# SPDX-License-Identifier: MIT
"""The daemon: the FUSE transport it serves over, the mount helper,
request sizes, what phx umount takes down, and a killed daemon's mount
recovered.
"""
import ctypes
import errno
import os
import select
import signal
import subprocess
import sys

import pytest

import harness as T
from harness import (MiB, sh, need, need_root, rand, write, read, expect_errno,
                      fresh)


def test_fuse_transport():
    """phx status says whether requests come over io_uring, and why not;
    over io_uring libfuse serves them on one thread per CPU."""
    out = T.FS.run_phx("status", T.FS.mp).stdout
    line = [x for x in out.splitlines() if "FUSE over io_uring" in x]
    assert len(line) == 1, out
    pid = T.FS.daemon_pid()
    rings = set()
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
            comm = f.read().strip()
        if comm.startswith("fuse-ring-"):
            rings.add(comm)
    if T.ARGS.io_uring == "on":
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


def test_mount_helper():
    need_root()
    need("mount.fuse3")
    mp = os.path.join(T.SCRATCH, "helper")
    os.makedirs(mp, exist_ok=True)
    env = dict(T.FS.env)
    env["PATH"] = os.path.abspath(T.ARGS.build) + ":" + env["PATH"]
    helper = os.path.join(os.path.dirname(__file__), "..", "..", "phxfs", "tool",
                          "mount.fuse.phxfs")
    r = subprocess.run([helper, "phxfs", mp, "-o",
                        "size=64M,noauto,_netdev,reserve=0"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    try:
        devs = sorted(os.listdir(mp))
        assert devs == T.FS.devs, devs
        sv = os.statvfs(mp + "/" + devs[0])
        assert sv.f_blocks * sv.f_frsize == 64 * MiB
        assert "fuse.phxfs" in read("/proc/mounts").decode()
    finally:
        subprocess.run([T.FS.phx, "umount", mp])


def test_request_sizes():
    """max_write: 16M by default where libfuse and the kernel allow it,
    refused past libfuse 3.14's 1M buffer, capped by the kernel's
    fs.fuse.max_pages_limit with a notice."""
    out = subprocess.run([T.FS.daemon, "--version"], capture_output=True,
                         text=True).stdout
    minor = int(out.split("FUSE 3.")[1].split(")")[0])
    try:
        with open("/proc/sys/fs/fuse/max_pages_limit") as f:
            kernel_cap = int(f.read()) * os.sysconf("SC_PAGESIZE")
    except OSError:
        kernel_cap = 256 * 4096
    T.FS.umount()
    try:
        r = T.FS.mount("max_write=4M")
    except AssertionError as e:
        assert minor < 17, "libfuse 3.%d refused 4M: %s" % (minor, e)
        assert "libfuse 3.%d" % minor in str(e) and "1M" in str(e), str(e)
        T.FS.mount()
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
        T.FS.umount()
        T.FS.mount()


def test_mount_refuses_bad_options():
    """A mount option out of its range is one line on stderr and nothing
    is mounted: a count given as "-5" is not taken as a huge limit."""
    mp = os.path.join(T.SCRATCH, "bad-opts")
    os.makedirs(mp, exist_ok=True)
    for opt in ("ctl_conns=-5", "ctl_conns_uid=5000", "ctl_timeout=99999",
                "size=abc", "root_reserve=200%", "blksize=3"):
        r = T.FS.run_phx("mount", "-o", opt, mp, check=False)
        lines = r.stderr.splitlines()
        assert r.returncode == 1, (opt, r.stderr)
        assert len(lines) == 1 and lines[0].startswith("phxfs: bad "), \
            (opt, r.stderr)
        assert mp not in read("/proc/self/mounts").decode(), opt
    os.rmdir(mp)


def test_umount_takes_down_phxfs_only():
    """phx umount refuses a mount point where another file system is on
    top, leaving it mounted with its files, and a directory where nothing
    is mounted; each with one line that says so."""
    need_root()
    d = os.path.join(T.SCRATCH, "other-fs")
    os.makedirs(d, exist_ok=True)
    sh("mount -t tmpfs phx-test-other %s" % d)
    try:
        write(d + "/kept", b"kept")
        r = T.FS.run_phx("umount", d, check=False)
        assert r.returncode == 1, r.stderr
        assert r.stderr.strip().splitlines() == [
            "phx: %s: not phxfs but tmpfs; phx umount leaves it mounted"
            % d], r.stderr
        assert read(d + "/kept") == b"kept"
    finally:
        sh("umount %s" % d)
    r = T.FS.run_phx("umount", d, check=False)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        "phx: %s: no phxfs is mounted there" % d], r.stderr
    # the suite's own phxfs is still mounted and answers
    assert sorted(os.listdir(T.FS.mp)) == T.FS.devs


def dead_fuse_mount(d, subtype):
    """Mount FUSE at @d as type fuse.@subtype and close its /dev/fuse
    descriptor at once: every call there fails with ENOTCONN, as under a
    daemon that died."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    try:
        opts = "fd=%d,rootmode=40000,user_id=0,group_id=0" % fd
        if libc.mount(b"other", d.encode(), b"fuse." + subtype, 0,
                      opts.encode()):
            pytest.skip("cannot mount FUSE here: %s"
                        % os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)
    expect_errno(errno.ENOTCONN, os.statvfs, d)


def test_mount_leaves_another_dead_fuse_mount():
    """A FUSE file system other than phxfs whose daemon is gone sits at
    the mount point: phx mount does not remove it as it would a dead
    phxfs, and phx umount leaves it too; each says so in one line, the
    type quoted as a path is (a subtype is the mounting user's choice)."""
    need_root()
    d = os.path.join(T.SCRATCH, "dead-other")
    os.makedirs(d, exist_ok=True)
    for subtype, shown in ((b"other", "fuse.other"),
                           (b"ot\x1b[31mher", "fuse.ot\\x1b[31mher")):
        dead_fuse_mount(d, subtype)
        try:
            r = T.FS.run_phx("mount", d, check=False)
            assert r.returncode == 1, r.stderr
            assert r.stderr.strip().splitlines() == [
                "phx: %s: the daemon of the %s mounted there died; "
                "unmount it first (umount -l %s)" % (d, shown, d)], r.stderr
            r = T.FS.run_phx("umount", d, check=False)
            assert r.returncode == 1, r.stderr
            assert r.stderr.strip().splitlines() == [
                "phx: %s: not phxfs but %s; phx umount leaves it "
                "mounted" % (d, shown)], r.stderr
            assert " %s fuse.%s " % (d, subtype.decode()) in \
                read("/proc/mounts").decode()
        finally:
            sh("umount -l %s" % d)


def test_kill_daemon_then_recover():
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
    pid = T.FS.daemon_pid()
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
    # a call that reached the connection before the kernel aborted it (the
    # io_uring queues are torn down after the process has exited) ends
    # with ECONNABORTED or ECANCELED; once aborted, calls see ENOTCONN
    dead = (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED)
    for fn, arg in ((os.listdir, T.FS.dev), (os.statvfs, T.FS.mp)):
        with pytest.raises(OSError) as e:
            fn(arg)
        assert e.value.errno in dead, e.value
    r = T.FS.mount()
    assert "stale" in r.stderr, r.stderr
    assert os.listdir(T.FS.dev) == [], "contents survived the daemon"
    write(T.FS.dev + "/again", b"ok")
    assert read(T.FS.dev + "/again") == b"ok"
