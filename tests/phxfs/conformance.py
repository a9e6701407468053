# SPDX-License-Identifier: MIT
"""POSIX conformance and security cases of the phxfs suite.

Imported by test_phxfs.py, whose runner mounts phxfs and runs these with
its own tests; every case compares phxfs with what the kernel's own file
systems do (tmpfs behaves the same way).
"""
import errno
import os
import struct
import subprocess

import test_phxfs as T
from test_phxfs import expect_errno, need, need_root, read, sh, test, write

# security.capability: VFS_CAP_REVISION_2, effective, CAP_NET_BIND_SERVICE
FILE_CAPS = struct.pack("<IIIII", 0x02000001, 1 << 10, 0, 0, 0)


def in_both_modes(fn):
    """Run @fn in the default (direct I/O) mount, then with -o writeback."""
    fn("direct")
    T.FS.umount()
    T.FS.mount("writeback")
    try:
        fn("writeback")
    finally:
        T.cleanup()
        T.FS.umount()
        T.FS.mount()


def privileged_file(d, name, mode=0o6777):
    f = os.path.join(d, name)
    write(f, b"old")
    os.chmod(f, mode)
    os.setxattr(f, "security.capability", FILE_CAPS)
    assert os.stat(f).st_mode & 0o7777 == mode
    return f


def has_caps(f):
    try:
        return os.getxattr(f, "security.capability") == FILE_CAPS
    except OSError as e:
        if e.errno != errno.ENODATA:
            raise
        return False


@test
def suid_sgid_caps_cleared():
    """A write or truncation by anyone but root clears SUID and SGID (in
    both mount modes); file capabilities go on any write, as on ext4."""
    need_root()

    def check(mode):
        d, _ = T.fresh("suid-" + mode)
        cases = {
            "append": "printf x >> %s",
            "truncate": "truncate -s 1 %s",
            "otrunc": ": > %s",
            "otrunc_write": "printf y > %s",
            "dd": "dd if=/dev/zero of=%s bs=1 count=1 seek=5 "
                  "conv=notrunc status=none",
        }
        for name, cmd in cases.items():
            f = privileged_file(d, name)
            sh(cmd % f, user="nobody")
            got = os.stat(f).st_mode & 0o7777
            assert got == 0o777, "%s %s by nobody left mode %o" % (
                mode, name, got)
            assert not has_caps(f), "%s %s kept file capabilities" % (
                mode, name)
        # SGID without group execution is a locking mark: cleared for a
        # writer outside the file's group (nobody is not in root's).  With
        # -o writeback the kernel's FUSE decides alone and keeps it
        # (docs/phxfs.md, "What is not supported").
        f = privileged_file(d, "sgid", 0o2666)
        sh("printf x >> %s" % f, user="nobody")
        want = 0o666 if mode == "direct" else 0o2666
        assert os.stat(f).st_mode & 0o7777 == want, mode
        # root keeps the bits but not the capabilities
        f = privileged_file(d, "root")
        sh("printf x >> %s" % f)
        assert os.stat(f).st_mode & 0o7777 == 0o6777, mode
        assert not has_caps(f), "%s root write kept capabilities" % mode
        # chmod by the owner, and a plain read, change nothing
        f = privileged_file(d, "read")
        sh("cat %s >/dev/null" % f, user="nobody")
        assert os.stat(f).st_mode & 0o7777 == 0o6777 and has_caps(f)

    in_both_modes(check)


@test
def status_names_escaped():
    """Names with newlines, tabs, control bytes and invalid UTF-8, made by
    any user in a 1777 device directory, can neither forge a row of
    phx status nor cut it short; they print escaped (\\xHH)."""
    names = {
        b"aab\nDEV fake sim 999 0 0 none 0 0 0 0 evil":
            "aab\\x0aDEV fake sim 999 0 0 none 0 0 0 0 evil",
        b"aaa\nEND": "aaa\\x0aEND",
        b"tab\there": "tab\\x09here",
        b"esc\x1b[2Jx\r\x07": "esc\\x1b[2Jx\\x0d\\x07",
        b"bad\xff\xfe\xc3": "bad\\xff\\xfe\\xc3",
        b"back\\x41": "back\\\\x41",
        "h\u00e9llo".encode(): "h\u00e9llo",
        b"\xed\xa0\x80surrogate": "\\xed\\xa0\\x80surrogate",
    }
    dev = os.fsencode(T.FS.dev)
    for n in names:
        subprocess.run(["runuser", "-u", "nobody", "--", "python3", "-c",
                        "import sys; open(bytes.fromhex(sys.argv[1]), "
                        "'wb').write(b'x')", os.path.join(dev, n).hex()],
                       check=True)
    raw = subprocess.run([T.FS.phx, "status", "-a", T.FS.mp], env=T.FS.env,
                         capture_output=True, check=True).stdout
    for ln in raw.split(b"\n"):
        assert not any(c < 0x20 or c == 0x7f for c in ln), ln
    text = raw.decode("utf-8")  # valid UTF-8 whatever the names hold
    lines = text.split("\n")
    assert lines[-2].startswith("mounted at "), text
    rows = [ln.split() for ln in lines]
    devs = [r for r in rows if len(r) > 2 and r[0] in T.FS.devs and
            r[1] in ("sim", "cuda", "kmod")]
    assert len(devs) == len(T.FS.devs), "forged device rows:\n" + text
    base = "/" + os.path.basename(T.FS.dev) + "/"
    shown = [ln.split("memcpy", 1)[1].strip() for ln in lines
             if " memcpy " in ln and base in ln]
    for n, printed in names.items():
        assert base + printed in shown, (printed, shown)
