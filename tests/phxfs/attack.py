# SPDX-License-Identifier: MIT
"""What the suites of another local user's attacks share: acting as
nobody (setpriv), the hostile client (hostile.py), root's own calls that
must complete, and the daemon's descriptors.  Time-outs only guard
against a hang."""
import grp
import os
import pwd
import subprocess
import sys

import pytest

import harness as T
from harness import need


HOSTILE = open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "hostile.py")).read()
# how long any one step may take before the test calls it a hang
GUARD = 60


def need_nobody():
    if os.geteuid():
        pytest.skip("needs root to act as another user")
    need("setpriv")
    try:
        pwd.getpwnam("nobody")
        grp.getgrnam("nogroup")
    except KeyError:
        pytest.skip("no user nobody or group nogroup")


def nobody_argv(argv, groups=None):
    return (["setpriv", "--reuid=nobody", "--regid=nogroup"] +
            (["--groups=%s" % groups] if groups else ["--clear-groups"]) +
            ["--"] + list(argv))


def as_nobody(argv, groups=None, **kw):
    return subprocess.run(nobody_argv(argv, groups), capture_output=True,
                          text=True, timeout=GUARD, env=T.FS.env, **kw)


def hostile(*args, groups=None):
    r = as_nobody([sys.executable, "-c", HOSTILE] + list(args), groups)
    assert r.returncode == 0, r.stderr
    return r.stdout


def hostile_bg(*args):
    return subprocess.Popen(
        nobody_argv([sys.executable, "-c", HOSTILE] + list(args)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=T.FS.env)


def phx_nobody(*args, groups=None):
    return as_nobody([T.FS.phx] + list(args), groups)


def sock():
    return os.getxattr(T.FS.mp, "user.phx.socket").decode()


def root_ok(*argv):
    """A command of root's that must complete; the time-out only guards."""
    r = subprocess.run(list(argv), capture_output=True, text=True,
                       timeout=5)
    assert r.returncode == 0, (argv, r.stderr)
    return r.stdout


def nobody_dir():
    """A directory outside phxfs that nobody may write."""
    d = os.path.join(T.SCRATCH, "nobody")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o777)
    return d


def in_mode(fn, mode, extra=""):
    """harness.in_mode(), once per mount: the daemon is the same for
    every device directory."""
    if T.FS.dev_index:
        pytest.skip("once per mount, in the first device directory")
    T.in_mode(fn, mode, extra)


def daemon_fds():
    """The daemon's open descriptors but its /dev/fuse clones (one per
    FUSE worker thread, which libfuse starts as requests come)."""
    base = "/proc/%d/fd" % T.FS.daemon_pid()
    out = []
    for n in os.listdir(base):
        try:
            t = os.readlink(os.path.join(base, n))
        except FileNotFoundError:
            continue
        if t != "/dev/fuse":
            out.append(t)
    return sorted(out)


def status_round_trip():
    """Root's STATUS, read to the end: the daemon closed that connection
    (and what it held) once we see the end."""
    return root_ok(T.FS.phx, "status", "-a", T.FS.mp)
