# SPDX-License-Identifier: MIT
"""How the POSIX cases (test_posix_vs_tmpfs.py) run their steps on phxfs
and on tmpfs, as root or as other users, and record what they saw."""
import ctypes
import errno
import os
import pickle
import time
import traceback

import harness as T
from harness import need_root

NOBODY = 65534  # nobody, group nogroup
OTHER = 65533  # a uid with no passwd entry, gid 65533
GROUP = 1234  # a group given to NOBODY where a case says so
OLD_A, OLD_M = 1_000_000_007_000, 1_500_000_011_000  # ns, in the past
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT = 1, 2, 4
UMASK = os.umask(0o022)
os.umask(UMASK)
CLOCK_REALTIME_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5)

_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime):
    """utimensat(2); a time is (sec, nsec), UTIME_NOW or UTIME_OMIT."""
    ts = (_Timespec * 2)()
    for t, v in zip(ts, (atime, mtime)):
        t.tv_sec, t.tv_nsec = (0, v) if isinstance(v, int) else v
    if _libc.utimensat(-100, os.fsencode(path), ts, 0):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)


def renameat2(old, new, flags):
    if _libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new),
                       flags):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old)


def _call(fn, args):
    """"ok", ("ok", value) or the errno's name."""
    try:
        v = fn(*args)
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
    return "ok" if v is None else ("ok", v)


def as_user(uid, groups, fn, args):
    """_call(fn, args) in a child running as @uid (gid @uid, @groups)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rfd)
            os.setgroups(list(groups))
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            res = _call(fn, args)
        except BaseException:
            res = ("exception", traceback.format_exc())
        try:
            with os.fdopen(wfd, "wb") as f:
                f.write(pickle.dumps(res))
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0 and data, "child as uid %d died (%d)" % (uid, status)
    res = pickle.loads(data)
    if isinstance(res, tuple) and res[0] == "exception":
        raise AssertionError("as uid %d: %s" % (uid, res[1]))
    return res


def tick_past(ns):
    """Wait until the coarse clock passes @ns: any time stamp taken after
    it (the kernel's, the daemon's) is then later than @ns, so a ctime that
    did not move is one the operation did not touch."""
    while time.clock_gettime_ns(CLOCK_REALTIME_COARSE) <= ns:
        time.sleep(0.001)


class Rec:
    """The record of one run of a case in directory @base."""

    def __init__(self, base, name):
        self.base, self.name = base, name
        self.log = []
        self.bad = []

    def p(self, *names):
        return os.path.join(self.base, *names)

    def do(self, label, fn, *args, user=None, groups=(), want=None):
        if user is None:
            res = _call(fn, args)
        else:
            res = as_user(user, groups, fn, args)
        self.log.append((label, res))
        if want is not None and res != want and res != ("ok", want):
            self.bad.append("%s: %r, want %r" % (label, res, want))
        return res

    def note(self, label, value, want=None):
        self.log.append((label, value))
        if want is not None and value != want:
            self.bad.append("%s: %r, want %r" % (label, value, want))

    def times(self, label, op, paths, after=None, user=None, groups=(),
              want=None):
        """Run @op with @paths' atime and mtime set in the past; record
        which of a, m, c moved on each ("" for none), the op's result."""
        for q in paths:
            os.utime(q, ns=(OLD_A, OLD_M), follow_symlinks=False)
        before = [os.lstat(q) for q in paths]
        tick_past(max(st.st_ctime_ns for st in before))
        res = self.do(label, op, user=user, groups=groups)
        now = time.time_ns()
        moved = []
        for b, q in zip(before, after or paths):
            a = os.lstat(q)
            m = ""
            for k, x, y in (("a", b.st_atime_ns, a.st_atime_ns),
                            ("m", b.st_mtime_ns, a.st_mtime_ns),
                            ("c", b.st_ctime_ns, a.st_ctime_ns)):
                if x != y:
                    m += k
                    if y > now:
                        self.bad.append("%s: %s time %d after now %d" %
                                        (label, k, y, now))
            moved.append(m)
        self.note(label + " moved", moved, want)


def mode_owner(path):
    st = os.lstat(path)
    return oct(st.st_mode & 0o7777), st.st_uid, st.st_gid


def create(path, mode=0o644):
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
    return mode_owner(path)


def new_file(path, mode, data=b"data", owner=(0, 0)):
    T.write(path, data)
    os.chown(path, *owner)
    os.chmod(path, mode)
    return path


def new_dir(path, mode, owner=(0, 0)):
    os.mkdir(path)
    os.chown(path, *owner)
    os.chmod(path, mode)
    return path


def read(path):
    with open(path, "rb") as f:
        return f.read()


def append(path, data=b"+"):
    with open(path, "ab") as f:
        f.write(data)


def ls(path):
    return sorted(os.listdir(path))


def nlinks(*paths):
    return [os.lstat(q).st_nlink for q in paths]


def tmpfs_ref():
    """A tmpfs mounted noatime,nodev in the scratch directory."""
    mp = os.path.join(T.SCRATCH, "tmpfs-ref")
    os.makedirs(mp, exist_ok=True)
    T.sh("mount -t tmpfs -o noatime,nodev,size=64m,mode=755 tmpfs %s" % mp)
    return mp


def compare(case, may_differ=()):
    """Run @case on phxfs and on tmpfs; fail on any difference but in the
    steps labelled in @may_differ."""
    need_root()
    ref = tmpfs_ref()
    try:
        recs = []
        for name, root in (("phxfs", T.FS.dev), ("tmpfs", ref)):
            base = os.path.join(root, "posix-" + case.__name__)
            new_dir(base, 0o755)
            rec = Rec(base, name)
            case(rec)
            recs.append(rec)
    finally:
        T.sh("umount %s" % ref)
    phx, tmp = recs
    if os.environ.get("PHXFS_POSIX_LOG"):
        for step in phx.log:
            print("    %s: %r" % step)
    diff = ["%s: phxfs %r, tmpfs %r" % (a[0], a[1], b[1])
            for a, b in zip(phx.log, tmp.log)
            if a != b and a[0] not in may_differ]
    assert len(phx.log) == len(tmp.log)
    bad = ["phxfs " + x for x in phx.bad] + ["tmpfs " + x for x in tmp.bad]
    assert not diff and not bad, "\n".join(diff + bad)
    return phx


# ---- modes and owners -------------------------------------------------------

