# SPDX-License-Identifier: MIT
"""POSIX conformance of phxfs, measured against tmpfs.

Each case runs the same steps twice: in a
directory on the phxfs mount under test and in one on a tmpfs mounted
`noatime,nodev` (what phxfs documents: atime is never updated, device
nodes do not open).  Steps run as root or as other users (a forked child
that drops to the uid, its own gid and the given groups), and every result
is recorded: the return value or the errno, modes, owners, link counts,
which of atime/mtime/ctime moved.  The two records must be equal, and the
results that matter most are also asserted outright (`want=`).

Families: modes and owners (chmod/chown by the owner, by others, by root),
sticky directories, special files, hard links, renames, truncation and
times (writes, truncates, chmod, rename, link, utimensat with UTIME_NOW
and UTIME_OMIT, atime never updated).
"""
import ctypes
import errno
import os
import socket
import stat

import harness as T
from harness import need_root
from posix_ref import (GROUP, NOBODY, OTHER, RENAME_EXCHANGE, RENAME_NOREPLACE, RENAME_WHITEOUT, UMASK, UTIME_NOW, UTIME_OMIT, append, compare, create, ls, mode_owner, new_dir, new_file, nlinks, read, renameat2, utimensat)


def modes_and_owners(r):
    f = new_file(r.p("f"), 0o644)
    r.do("other chmod", os.chmod, f, 0o666, user=NOBODY, want="EPERM")
    r.do("other chown to self", os.chown, f, NOBODY, NOBODY, user=NOBODY,
         want="EPERM")
    r.do("other utime", os.utime, f, (1, 2), user=NOBODY, want="EPERM")
    r.do("root chown", os.chown, f, NOBODY, NOBODY)
    r.note("after root chown", mode_owner(f), ("0o644", NOBODY, NOBODY))
    r.do("owner chmod", os.chmod, f, 0o600, user=NOBODY)
    r.note("after owner chmod", mode_owner(f)[0], "0o600")
    r.do("owner chown away", os.chown, f, 0, -1, user=NOBODY, want="EPERM")
    r.do("owner chgrp outside", os.chown, f, -1, 0, user=NOBODY,
         want="EPERM")
    r.do("owner chgrp to a group of its own", os.chown, f, -1, GROUP,
         user=NOBODY, groups=[GROUP])
    r.note("after chgrp", mode_owner(f), ("0o600", NOBODY, GROUP))
    # SGID asked for by an owner outside the file's group: dropped
    r.do("owner chmod 2755 outside group", os.chmod, f, 0o2755,
         user=NOBODY)
    r.note("sgid dropped", mode_owner(f)[0], "0o755")
    r.do("owner chmod 6755 in group", os.chmod, f, 0o6755, user=NOBODY,
         groups=[GROUP])
    r.note("sgid kept", mode_owner(f)[0], "0o6755")
    r.do("root chmod 7777", os.chmod, f, 0o7777)
    r.note("root chmod", mode_owner(f)[0], "0o7777")
    # chown clears SUID and SGID (with group execution), root's too
    g = new_file(r.p("g"), 0o6755)
    r.do("root chown setid file", os.chown, g, NOBODY, -1)
    r.note("chown cleared", mode_owner(g), ("0o755", NOBODY, 0))
    r.do("root chown setid dir", os.chown, new_dir(r.p("sd"), 0o6755),
         NOBODY, -1)
    r.note("dir keeps", mode_owner(r.p("sd"))[0], "0o6755")
    # which class of the mode applies: owner, else group, else other
    h = new_file(r.p("h"), 0o640, owner=(0, GROUP))
    r.do("group read", read, h, user=NOBODY, groups=[GROUP], want=b"data")
    r.do("group write", append, h, user=NOBODY, groups=[GROUP],
         want="EACCES")
    r.do("other read 640", read, h, user=NOBODY, want="EACCES")
    os.chmod(h, 0o604)
    r.do("group member, group bits 0", read, h, user=NOBODY,
         groups=[GROUP], want="EACCES")
    r.do("other read 604", read, h, user=NOBODY, want=b"data")
    os.chown(h, NOBODY, 0)
    os.chmod(h, 0o044)
    r.do("owner bits 0", read, h, user=NOBODY, want="EACCES")
    r.do("root reads 044", read, h, want=b"data")
    x = new_file(r.p("x"), 0o744, b"#!/bin/sh\nexit 0\n")
    r.do("other execs 744", os.execve, x, [x], {}, user=NOBODY,
         want="EACCES")
    # the umask applies to what is created
    pub = new_dir(r.p("pub"), 0o777)

    def made_with_umask(path, mode, mask):
        os.umask(mask)
        return create(path, mode)

    r.do("umask 027", made_with_umask, pub + "/u", 0o666, 0o027,
         user=NOBODY, want=("0o640", NOBODY, NOBODY))
    # directory permissions
    priv = new_dir(r.p("priv"), 0o700)
    new_file(priv + "/in", 0o644)
    r.do("stat below 0700", os.stat, priv + "/in", user=NOBODY,
         want="EACCES")
    xo = new_dir(r.p("xonly"), 0o711)
    new_file(xo + "/in", 0o644)
    r.do("list 0711", ls, xo, user=NOBODY, want="EACCES")
    r.do("read known name in 0711", read, xo + "/in", user=NOBODY,
         want=b"data")
    r.do("create in 0755", create, r.p("no"), user=NOBODY, want="EACCES")
    r.do("mkdir in 0755", os.mkdir, r.p("no"), user=NOBODY, want="EACCES")
    r.do("unlink in 0755", os.unlink, r.p("f"), user=NOBODY,
         want="EACCES")
    # an SGID directory hands its group (and, to directories, its bit) on
    sg = new_dir(r.p("sg"), 0o2777, owner=(0, GROUP))
    r.do("file in sgid dir", create, sg + "/f", 0o755, user=NOBODY,
         want=("0o755", NOBODY, GROUP))

    def mkdir_stat(path):
        os.mkdir(path, 0o755)
        return mode_owner(path)

    r.do("dir in sgid dir", mkdir_stat, sg + "/d", user=NOBODY,
         want=("0o2755", NOBODY, GROUP))


def test_posix_modes_owners():
    """chmod/chown by the owner, others and root, the mode class that
    applies, umask, directory permissions, SGID directories."""
    compare(modes_and_owners)


# ---- sticky directories -----------------------------------------------------

def sticky(r):
    s = new_dir(r.p("s"), 0o1777)
    rf = new_file(s + "/root", 0o666)
    r.do("nobody creates", create, s + "/n", user=NOBODY)
    r.do("other creates", create, s + "/o", user=OTHER)
    r.do("other mkdir", os.mkdir, s + "/od", user=OTHER)
    r.do("nobody writes root's 0666", append, rf, user=NOBODY)
    r.do("nobody unlinks root's", os.unlink, rf, user=NOBODY, want="EPERM")
    r.do("nobody renames root's", os.rename, rf, s + "/x", user=NOBODY,
         want="EPERM")
    r.do("nobody renames over root's", os.rename, s + "/n", rf,
         user=NOBODY, want="EPERM")
    r.do("nobody exchanges with root's", renameat2, s + "/n", rf,
         RENAME_EXCHANGE, user=NOBODY, want="EPERM")
    r.do("nobody unlinks other's", os.unlink, s + "/o", user=NOBODY,
         want="EPERM")
    r.do("nobody rmdir other's", os.rmdir, s + "/od", user=NOBODY,
         want="EPERM")
    r.do("nobody renames own", os.rename, s + "/n", s + "/n2",
         user=NOBODY)
    r.do("nobody unlinks own", os.unlink, s + "/n2", user=NOBODY)
    r.do("root unlinks other's", os.unlink, s + "/o")
    r.note("left", ls(s), ["od", "root"])
    # the directory's owner may remove anything in it
    own = new_dir(r.p("own"), 0o1777, owner=(NOBODY, NOBODY))
    r.do("other creates in nobody's", create, own + "/o", user=OTHER)
    r.do("dir owner unlinks other's", os.unlink, own + "/o", user=NOBODY)
    # without the sticky bit, write permission on the directory is enough
    plain = new_dir(r.p("plain"), 0o777)
    new_file(plain + "/root", 0o600)
    r.do("unlink root's in 0777", os.unlink, plain + "/root", user=NOBODY)
    new_file(plain + "/root2", 0o600)
    r.do("rename root's in 0777", os.rename, plain + "/root2",
         plain + "/mine", user=NOBODY)


def test_posix_sticky_dirs():
    """In a 1777 directory only the file's owner, the directory's owner
    and root remove or rename an entry."""
    compare(sticky)


# ---- special files ----------------------------------------------------------

def bind_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(path)
        s.listen(1)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(path)
        conn, _ = s.accept()
        c.sendall(b"ping")
        got = conn.recv(4)
        for x in (c, conn):
            x.close()
        return got, stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        s.close()


def fifo_round_trip(path):
    rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    wfd = os.open(path, os.O_WRONLY)
    os.write(wfd, b"pipe")
    got = os.read(rfd, 10)
    os.close(wfd)
    os.close(rfd)
    return got


def special(r):
    pub = new_dir(r.p("pub"), 0o777)
    fifo = pub + "/fifo"
    r.do("nobody mkfifo", os.mkfifo, fifo, 0o640, user=NOBODY)
    r.note("fifo", (stat.S_ISFIFO(os.lstat(fifo).st_mode),
                    mode_owner(fifo)), (True, ("0o640", NOBODY, NOBODY)))
    r.do("fifo round trip", fifo_round_trip, fifo, user=NOBODY,
         want=b"pipe")
    r.do("fifo without reader", os.open, fifo,
         os.O_WRONLY | os.O_NONBLOCK, want="ENXIO")
    r.do("mknod S_IFIFO", os.mknod, pub + "/fifo2", stat.S_IFIFO | 0o600,
         user=NOBODY)
    r.do("nobody binds a socket", bind_socket, pub + "/sock",
         user=NOBODY, want=(b"ping", True))
    r.do("bind over an existing name", bind_socket, fifo,
         want="EADDRINUSE")
    r.do("nobody mknod chr", os.mknod, pub + "/c",
         stat.S_IFCHR | 0o666, os.makedev(1, 3), user=NOBODY,
         want="EPERM")
    r.do("nobody mknod blk", os.mknod, pub + "/b",
         stat.S_IFBLK | 0o666, os.makedev(7, 0), user=NOBODY,
         want="EPERM")
    r.do("root mknod chr", os.mknod, pub + "/null",
         stat.S_IFCHR | 0o666, os.makedev(1, 3))
    r.note("rdev", (stat.S_ISCHR(os.lstat(pub + "/null").st_mode),
                    os.lstat(pub + "/null").st_rdev),
           (True, os.makedev(1, 3)))
    r.do("root mknod blk", os.mknod, pub + "/loop",
         stat.S_IFBLK | 0o600, os.makedev(7, 0))
    r.note("blk rdev", os.lstat(pub + "/loop").st_rdev, os.makedev(7, 0))
    r.do("open chr on nodev", os.open, pub + "/null", os.O_WRONLY,
         want="EACCES")
    r.do("mknod S_IFREG", os.mknod, pub + "/reg", stat.S_IFREG | 0o640,
         user=NOBODY)
    r.note("reg", (stat.S_ISREG(os.lstat(pub + "/reg").st_mode),
                   os.lstat(pub + "/reg").st_size), (True, 0))
    r.do("mknod over a name", os.mkfifo, pub + "/reg", want="EEXIST")
    r.do("chmod fifo", os.chmod, fifo, 0o600, user=NOBODY)
    r.do("chown chr", os.chown, pub + "/null", NOBODY, NOBODY)
    r.note("chr owner", mode_owner(pub + "/null"),
           (oct(0o666 & ~UMASK), NOBODY, NOBODY))
    r.do("truncate fifo", os.truncate, fifo, 0, want="EINVAL")
    r.do("link fifo", os.link, fifo, pub + "/fifo3")
    r.note("fifo links", nlinks(fifo, pub + "/fifo3"), [2, 2])
    r.do("rename socket", os.rename, pub + "/sock", pub + "/sock2")
    r.do("unlink chr", os.unlink, pub + "/null")
    r.note("left", ls(pub),
           ["fifo", "fifo2", "fifo3", "loop", "reg", "sock2"])


def test_posix_special_files():
    """FIFOs and sockets by anyone, device nodes by root only (CAP_MKNOD)
    and refused on a nodev mount; they chmod, link, rename like files."""
    compare(special)


def test_posix_nodev_and_dev():
    """phxfs mounts nodev and nosuid (libfuse's default); -o dev lets
    device nodes open."""
    need_root()
    opts = [ln.split()[3].split(",") for ln in
            T.read("/proc/mounts").decode().splitlines()
            if ln.split()[1] == T.FS.mp][0]
    assert "nodev" in opts and "nosuid" in opts, opts
    T.FS.umount()
    T.FS.mount("dev")
    try:
        opts = [ln.split()[3].split(",") for ln in
                T.read("/proc/mounts").decode().splitlines()
                if ln.split()[1] == T.FS.mp][0]
        assert "nodev" not in opts, opts
        null = T.FS.dev + "/null"
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        fd = os.open(null, os.O_RDWR)
        try:
            assert os.write(fd, b"gone") == 4
            assert os.read(fd, 10) == b""
        finally:
            os.close(fd)
        zero = T.FS.dev + "/zero"
        os.mknod(zero, stat.S_IFCHR | 0o444, os.makedev(1, 5))
        with open(zero, "rb") as fh:
            assert fh.read(3) == bytes(3)
    finally:
        T.cleanup()
        T.FS.umount()
        T.FS.mount()


# ---- hard links -------------------------------------------------------------

def links(r):
    f = new_file(r.p("f"), 0o644)
    r.do("link", os.link, f, r.p("l"))
    same = os.lstat(f).st_ino == os.lstat(r.p("l")).st_ino
    r.note("after link", (nlinks(f, r.p("l")), same), ([2, 2], True))
    r.do("second link", os.link, r.p("l"), r.p("l2"))
    r.note("three names", nlinks(f), [3])
    r.do("link over a name", os.link, f, r.p("l"), want="EEXIST")
    d = new_dir(r.p("d"), 0o755)
    r.do("link a directory", os.link, d, r.p("dl"), want="EPERM")
    r.do("link into a missing dir", os.link, f, r.p("no", "x"),
         want="ENOENT")
    r.do("link a missing file", os.link, r.p("none"), r.p("x"),
         want="ENOENT")
    r.do("unlink one name", os.unlink, f)
    r.note("after unlink", (nlinks(r.p("l"), r.p("l2")), read(r.p("l"))),
           ([2, 2], b"data"))
    T.write(r.p("l"), b"through l")
    r.note("shared data", read(r.p("l2")), b"through l")
    fd = os.open(r.p("l"), os.O_RDONLY)
    try:
        r.do("unlink l", os.unlink, r.p("l"))
        r.do("unlink l2", os.unlink, r.p("l2"))
        r.note("open after last unlink", (os.fstat(fd).st_nlink,
                                           os.pread(fd, 9, 0)),
               (0, b"through l"))
    finally:
        os.close(fd)
    # symbolic links are linked themselves, not followed
    os.symlink("target", r.p("sym"))
    r.do("link a symlink", lambda: os.link(r.p("sym"), r.p("sym2"),
                                            follow_symlinks=False))
    r.note("symlink links", (nlinks(r.p("sym")),
                             os.readlink(r.p("sym2"))), ([2], "target"))
    # fs.protected_hardlinks: no link to a file one could not write
    new_file(r.p("secret"), 0o600)
    pub = new_dir(r.p("pub"), 0o777)
    r.do("nobody links root's 0600", os.link, r.p("secret"), pub + "/s",
         user=NOBODY)
    # directory link counts: 2 + subdirectories
    a = new_dir(r.p("a"), 0o755)
    for n in ("b", "c"):
        os.mkdir(a + "/" + n)
    T.write(a + "/file", b"")
    r.note("dir with two subdirs", nlinks(a), [4])
    os.rmdir(a + "/c")
    r.note("after rmdir", nlinks(a), [3])
    os.rename(a + "/b", d + "/b")
    r.note("subdir moved", nlinks(a, d), [2, 3])


def test_posix_hard_links():
    """Link counts, unlink of one name, links to directories refused,
    across devices EXDEV, protected_hardlinks, directory link counts."""
    compare(links)
    if len(T.FS.devs) > 1:
        d, _ = T.fresh("xdev")
        T.write(d + "/f", b"x")
        other = os.path.join(T.FS.mp, T.FS.devs[(T.FS.dev_index + 1) %
                                                len(T.FS.devs)])
        T.expect_errno(errno.EXDEV, os.link, d + "/f", other + "/f")


# ---- renames ----------------------------------------------------------------

def renames(r):
    T.write(r.p("a"), b"A")
    T.write(r.p("b"), b"B")
    fd = os.open(r.p("b"), os.O_RDONLY)
    try:
        r.do("file over file", os.rename, r.p("a"), r.p("b"))
        r.note("replaced", (os.path.exists(r.p("a")), read(r.p("b")),
                            os.fstat(fd).st_nlink, os.pread(fd, 1, 0)),
               (False, b"A", 0, b"B"))
    finally:
        os.close(fd)
    r.do("rename to itself", os.rename, r.p("b"), r.p("b"))
    os.link(r.p("b"), r.p("b2"))
    r.do("onto another name of itself", os.rename, r.p("b"), r.p("b2"))
    r.note("both names stay", (ls(r.base), nlinks(r.p("b"))),
           (["b", "b2"], [2]))
    os.makedirs(r.p("d1", "sub"))
    os.mkdir(r.p("empty"))
    os.makedirs(r.p("full", "x"))
    r.do("file over dir", os.rename, r.p("b"), r.p("empty"),
         want="EISDIR")
    r.do("dir over file", os.rename, r.p("d1"), r.p("b"), want="ENOTDIR")
    r.do("dir over non-empty dir", os.rename, r.p("d1"), r.p("full"),
         want="ENOTEMPTY")
    r.do("dir into its child", os.rename, r.p("d1"), r.p("d1", "sub", "x"),
         want="EINVAL")
    r.do("dir into itself", os.rename, r.p("d1"), r.p("d1", "x"),
         want="EINVAL")
    r.do("dir over empty dir", os.rename, r.p("d1"), r.p("empty"))
    r.note("dir moved", (ls(r.base), ls(r.p("empty")), nlinks(r.base)),
           (["b", "b2", "empty", "full"], ["sub"], [4]))
    r.do("dir to another parent", os.rename, r.p("empty"),
         r.p("full", "moved"))
    r.note("parents' links", nlinks(r.base, r.p("full")), [3, 4])
    r.note("dotdot follows", os.stat(r.p("full", "moved", "..")).st_ino ==
           os.stat(r.p("full")).st_ino, True)
    r.do("missing source", os.rename, r.p("none"), r.p("x"),
         want="ENOENT")
    r.do("into a missing dir", os.rename, r.p("b"), r.p("no", "x"),
         want="ENOENT")
    r.do("file with a slash", os.rename, r.p("b"), r.p("c") + "/",
         want="ENOTDIR")
    r.do("noreplace over a name", renameat2, r.p("b"), r.p("b2"),
         RENAME_NOREPLACE, want="EEXIST")
    r.do("noreplace to a new name", renameat2, r.p("b2"), r.p("c"),
         RENAME_NOREPLACE)
    r.do("exchange and noreplace", renameat2, r.p("b"), r.p("c"),
         RENAME_EXCHANGE | RENAME_NOREPLACE, want="EINVAL")
    r.do("exchange with nothing", renameat2, r.p("b"), r.p("none"),
         RENAME_EXCHANGE, want="ENOENT")
    os.unlink(r.p("c"))  # a name of b's inode: a file of its own
    T.write(r.p("c"), b"C")
    r.do("exchange files", renameat2, r.p("b"), r.p("c"), RENAME_EXCHANGE)
    r.note("exchanged", (read(r.p("b")), read(r.p("c"))), (b"C", b"A"))
    r.do("exchange file and dir", renameat2, r.p("c"), r.p("full"),
         RENAME_EXCHANGE)
    r.note("swapped", (os.path.isdir(r.p("c")), read(r.p("full"))),
           (True, b"A"))
    r.do("exchange dir with its child", renameat2, r.p("c"),
         r.p("c", "moved"), RENAME_EXCHANGE, want="EINVAL")
    r.do("rename dot", os.rename, r.p("c", "."), r.p("dot"),
         want="EBUSY")
    # ownership and permissions: the parents' write permission decides
    ro = new_dir(r.p("ro"), 0o755)
    T.write(ro + "/f", b"f")
    pub = new_dir(r.p("pub"), 0o777)
    r.do("out of a dir one cannot write", os.rename, ro + "/f",
         pub + "/f", user=NOBODY, want="EACCES")
    T.write(pub + "/x", b"x")
    r.do("into a dir one cannot write", os.rename, pub + "/x",
         ro + "/x", user=NOBODY, want="EACCES")
    # moving a directory to another parent rewrites its "..": write
    # permission on the directory itself is needed
    new_dir(pub + "/rootdir", 0o755)
    r.do("other's dir to another parent", os.rename, pub + "/rootdir",
         pub + "/c2", user=NOBODY)
    os.mkdir(pub + "/dst")
    os.chmod(pub + "/dst", 0o777)
    r.do("other's dir into a subdir", os.rename, pub + "/c2",
         pub + "/dst/c2", user=NOBODY, want="EACCES")


def test_posix_renames():
    """rename over files and directories (empty and not), into its own
    child, onto itself and its other names, NOREPLACE, EXCHANGE, and the
    permissions it needs."""
    compare(renames)


# ---- truncation -------------------------------------------------------------

def otrunc(path, data=b""):
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def ftruncate(path, size, flags=os.O_WRONLY):
    fd = os.open(path, flags)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def truncation(r):
    data = T.rand(100000, 31)
    f = r.p("f")
    T.write(f, data)
    os.chmod(f, 0o666)
    r.do("grow", os.truncate, f, 300000)
    r.note("grown", read(f) == data + bytes(200000), True)
    r.do("shrink", os.truncate, f, 4097)
    r.note("shrunk", read(f) == data[:4097], True)
    r.do("grow again", ftruncate, f, 9000)
    r.note("cut bytes read zero", read(f) == data[:4097] + bytes(4903),
           True)
    r.do("to zero", os.truncate, f, 0)
    r.note("empty", (os.stat(f).st_size, read(f)), (0, b""))
    T.write(f, data)
    r.do("O_TRUNC", otrunc, f, b"new")
    r.note("after O_TRUNC", read(f), b"new")
    r.do("nobody O_TRUNC 0666", otrunc, f, b"nb", user=NOBODY)
    r.note("nobody's", read(f), b"nb")
    r.do("read-only fd", ftruncate, f, 0, os.O_RDONLY, want="EINVAL")
    r.do("negative", os.truncate, f, -1, want="EINVAL")
    r.do("directory", os.truncate, r.base, 0, want="EISDIR")
    os.chmod(f, 0o644)
    r.do("nobody without write", os.truncate, f, 0, user=NOBODY,
         want="EACCES")
    r.do("nobody O_TRUNC without write", otrunc, f, user=NOBODY,
         want="EACCES")
    r.note("kept", read(f), b"nb")
    # SUID/SGID go on truncation by anyone but root
    cases = (("truncate", lambda q: os.truncate(q, 1)),
             ("ftruncate", lambda q: ftruncate(q, 2)),
             ("same size", lambda q: os.truncate(q, 3)),
             ("O_TRUNC", otrunc))
    for name, op in cases:
        for mode in (0o6777, 0o2767):
            q = new_file(r.p("%s-%o" % (name.replace(" ", "_"), mode)),
                         mode, b"old")
            r.do("nobody %s %o" % (name, mode), op, q, user=NOBODY)
            r.note("nobody %s %o mode" % (name, mode), mode_owner(q)[0])
        q = new_file(r.p("root-" + name.replace(" ", "_")), 0o6777, b"old")
        r.do("root " + name, op, q)
        r.note("root %s mode" % name, mode_owner(q)[0], "0o6777")
    r.note("nobody truncate clears", mode_owner(r.p("truncate-6777"))[0],
           "0o777")


def test_posix_truncation():
    """Grow, shrink, to 0, O_TRUNC, the errors, and SUID/SGID cleared by
    truncation by anyone but root."""
    compare(truncation)


# ---- times ------------------------------------------------------------------

def pwrite(path, data, off):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, off)
    finally:
        os.close(fd)


def times(r):
    d = new_dir(r.p("d"), 0o777)
    f = new_file(d + "/f", 0o666, T.rand(10000, 32))
    r.times("write", lambda: pwrite(f, b"x", 5000), [f, d], want=["mc", ""])
    r.times("append", lambda: append(f), [f], want=["mc"])
    r.times("read", lambda: read(f) and None, [f], want=[""])
    r.times("mmap read", lambda: mmap_read(f), [f], want=[""])
    r.times("truncate grow", lambda: os.truncate(f, 20000), [f],
            want=["mc"])
    r.times("truncate same size", lambda: os.truncate(f, 20000), [f])
    r.times("ftruncate shrink", lambda: ftruncate(f, 100), [f],
            want=["mc"])
    r.times("O_TRUNC", lambda: otrunc(f), [f], want=["mc"])
    r.times("O_TRUNC empty", lambda: otrunc(f), [f])
    r.times("open for writing, no write",
            lambda: os.close(os.open(f, os.O_WRONLY)), [f], want=[""])
    r.times("chmod", lambda: os.chmod(f, 0o644), [f], want=["c"])
    r.times("chown", lambda: os.chown(f, NOBODY, NOBODY), [f], want=["c"])
    r.times("setxattr", lambda: os.setxattr(f, "user.t", b"v"), [f],
            want=["c"])
    r.times("removexattr", lambda: os.removexattr(f, "user.t"), [f],
            want=["c"])
    r.times("link", lambda: os.link(f, d + "/g"), [f, d], want=["c", "mc"])
    r.times("unlink one name", lambda: os.unlink(d + "/g"), [f, d],
            want=["c", "mc"])
    r.times("rename in dir", lambda: os.rename(f, d + "/h"), [f, d],
            after=[d + "/h", d], want=["c", "mc"])
    e = new_dir(r.p("e"), 0o777)
    r.times("rename across dirs", lambda: os.rename(d + "/h", e + "/f"),
            [d + "/h", d, e], after=[e + "/f", d, e],
            want=["c", "mc", "mc"])
    f = e + "/f"
    sub = new_dir(d + "/sub", 0o755)
    r.times("rename dir across dirs", lambda: os.rename(sub, e + "/sub"),
            [sub, d, e], after=[e + "/sub", d, e])
    T.write(d + "/victim", b"v")
    keep = os.open(d + "/victim", os.O_RDONLY)
    try:
        T.write(d + "/new", b"n")
        r.times("rename over a file",
                lambda: os.rename(d + "/new", d + "/victim"),
                [d + "/new", d], after=[d + "/victim", d],
                want=["c", "mc"])
    finally:
        os.close(keep)
    r.times("exchange", lambda: renameat2(f, d + "/victim",
                                          RENAME_EXCHANGE),
            [f, d + "/victim", d, e], after=[d + "/victim", f, d, e])
    r.times("create in dir", lambda: T.write(d + "/c", b""), [d],
            want=["mc"])
    r.times("mkdir in dir", lambda: os.mkdir(d + "/m"), [d], want=["mc"])
    r.times("rmdir in dir", lambda: os.rmdir(d + "/m"), [d], want=["mc"])
    r.times("symlink in dir", lambda: os.symlink("x", d + "/s"), [d],
            want=["mc"])
    r.times("mkfifo in dir", lambda: os.mkfifo(d + "/p"), [d],
            want=["mc"])
    r.times("readdir", lambda: ls(d) and None, [d], want=[""])
    r.times("lookup", lambda: os.stat(d + "/c") and None, [d], want=[""])
    f = d + "/c"
    os.chown(f, 0, 0)
    os.chmod(f, 0o666)
    r.times("UTIME_NOW both", lambda: utimensat(f, UTIME_NOW, UTIME_NOW),
            [f], want=["amc"])
    r.times("UTIME_OMIT atime", lambda: utimensat(f, UTIME_OMIT,
                                                  UTIME_NOW),
            [f], want=["mc"])
    r.times("UTIME_OMIT mtime", lambda: utimensat(f, (7, 8), UTIME_OMIT),
            [f], want=["ac"])
    r.note("atime set", os.stat(f).st_atime_ns, 7_000_000_008)
    r.times("UTIME_OMIT both", lambda: utimensat(f, UTIME_OMIT,
                                                 UTIME_OMIT),
            [f], want=[""])
    r.times("utime exact", lambda: utimensat(f, (11, 12), (13, 14)), [f],
            want=["amc"])
    r.note("exact", (os.stat(f).st_atime_ns, os.stat(f).st_mtime_ns),
           (11_000_000_012, 13_000_000_014))
    # another user with write permission may set "now", not a time
    r.times("nobody UTIME_NOW, may write",
            lambda: utimensat(f, UTIME_NOW, UTIME_NOW), [f], user=NOBODY,
            want=["amc"])
    r.do("nobody exact time, may write", utimensat, f, (1, 0), (1, 0),
         user=NOBODY, want="EPERM")
    os.chmod(f, 0o644)
    r.do("nobody UTIME_NOW, may not write", utimensat, f, UTIME_NOW,
         UTIME_NOW, user=NOBODY, want="EACCES")
    r.do("nobody omits both, may not write", utimensat, f, UTIME_OMIT,
         UTIME_OMIT, user=NOBODY)
    r.times("symlink's own times",
            lambda: os.utime(d + "/s", ns=(5, 6), follow_symlinks=False),
            [d + "/s"], want=["amc"])


def mmap_read(path):
    import mmap
    with open(path, "rb") as fh:
        # private: a shared one is ENODEV with libfuse 3.14 (direct I/O)
        with mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ) as m:
            m[:10]


def test_posix_times():
    """mtime and ctime move on write, truncate, chmod, chown, xattrs,
    link, rename; parents' on entries made and removed; utimensat with
    UTIME_NOW and UTIME_OMIT and who may use it; atime never moves but
    when set (phxfs is documented as noatime: the reference is a noatime
    tmpfs)."""
    compare(times)


def test_posix_all_with_writeback():
    """The same cases with -o writeback (the kernel's page cache)."""
    need_root()
    T.FS.umount()
    T.FS.mount("writeback")
    # POSIX moves mtime and ctime on truncate() when the size changes;
    # with writeback_cache the kernel keeps the times and leaves them
    # where they were when truncate(2) keeps the size (tmpfs moves them).
    differ = ("truncate same size moved",)
    try:
        for case in (modes_and_owners, sticky, special, links, renames,
                     truncation, times):
            compare(case, differ)
            T.cleanup()
    finally:
        T.cleanup()
        T.FS.umount()
        T.FS.mount()


def test_posix_unsupported():
    """What docs/phxfs.md lists as unsupported fails as it says and
    changes nothing."""
    d, _ = T.fresh("unsup")
    f = d + "/f"
    data = T.rand(3 << 20, 33)
    T.write(f, data)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int,
                               ctypes.c_long, ctypes.c_long]
    # FALLOC_FL_KEEP_SIZE, PUNCH_HOLE | KEEP_SIZE, ZERO_RANGE,
    # COLLAPSE_RANGE, INSERT_RANGE
    fd = os.open(f, os.O_RDWR)
    try:
        for mode in (0x01, 0x03, 0x10, 0x08, 0x20):
            assert libc.fallocate(fd, mode, 1 << 20, 1 << 20) == -1, mode
            err = ctypes.get_errno()
            assert err == errno.EOPNOTSUPP, (mode, err)
        assert libc.fallocate(fd, 0, 4 << 20, 1 << 20) == 0
    finally:
        os.close(fd)
    assert T.read(f) == data + bytes(2 << 20)
    T.expect_errno(errno.EOPNOTSUPP, os.setxattr, f,
                   "system.posix_acl_access", b"\x02\0\0\0")
    T.expect_errno(errno.EINVAL, renameat2, f, d + "/g", RENAME_WHITEOUT)
    assert os.listdir(d) == ["f"]
