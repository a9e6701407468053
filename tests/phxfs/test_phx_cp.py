# SPDX-License-Identifier: MIT
"""phx cp and phx status: copies into and out of phxfs through the
daemon's transfer engine, sparse files, trees, bad input.
"""
import os
import subprocess

import harness as T
from harness import MiB, rand, write, same, fresh


def test_phx_cp_and_status():
    d, ref = fresh("phxcp")
    src = os.path.join(ref, "big")
    write(src, rand(30 * MiB + 5, 12))
    T.FS.run_phx("cp", src, d + "/big")
    same(src, d + "/big")
    assert os.stat(d + "/big").st_size == 30 * MiB + 5
    path = os.getxattr(d + "/big", "user.phx.path").decode()
    assert path in ("staged", "buffered", "p2p"), path
    T.FS.run_phx("cp", "-q", src, d)  # into a directory: same name
    same(src, d + "/big")
    out = T.FS.run_phx("status", "-a", T.FS.mp).stdout
    assert T.FS.devs[0] in out and "/phxcp/big" in out, out
    assert "FUSE over io_uring" in out, out
    r = T.FS.run_phx("cp", "/nonexistent", d + "/x", check=False)
    assert r.returncode and "nonexistent" in r.stderr


def test_phx_cp_onto_an_existing_file():
    """phx cp over a file keeps its device memory and overwrites every
    byte: larger, smaller, the same size, sparse, and a source of nothing."""
    d, ref = fresh("cpover")
    src = os.path.join(ref, "src")
    for i, (old, new) in enumerate([(9 * MiB + 3, 5 * MiB + 1),
                                    (2 * MiB, 7 * MiB + 4097),
                                    (6 * MiB, 6 * MiB), (0, 3 * MiB),
                                    (4 * MiB, 0)]):
        dst = d + "/f%d" % i
        write(dst, rand(old, 40 + i))
        write(src, rand(new, 50 + i))
        T.FS.run_phx("cp", "-q", src, dst)
        same(src, dst)
        assert os.stat(dst).st_size == new
    # a sparse file, its holes and data overwritten
    with open(d + "/sparse", "wb") as f:
        f.truncate(16 * MiB)
        f.seek(9 * MiB)
        f.write(rand(MiB, 60))
    write(src, rand(12 * MiB, 61))
    T.FS.run_phx("cp", "-q", src, d + "/sparse")
    same(src, d + "/sparse")


def test_phx_cp_in_several_steps():
    """A copy longer than the daemon's step (32 MiB) runs as several
    transfers queued together: every byte lands, into a new file and over
    an existing one, from the page cache and from the disk."""
    d, ref = fresh("cpsteps")
    src = os.path.join(ref, "src")
    write(src, rand(100 * MiB + 4097, 70))
    T.FS.run_phx("cp", "-q", src, d + "/new")  # cached: just written
    same(src, d + "/new")
    write(d + "/old", rand(7 * MiB, 71))
    fd = os.open(src, os.O_RDONLY)  # out of the page cache
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    T.FS.run_phx("cp", "-q", src, d + "/old")
    same(src, d + "/old")
    assert os.stat(d + "/old").st_size == 100 * MiB + 4097
    os.unlink(d + "/new")
    os.unlink(d + "/old")
    os.unlink(src)


def test_phx_cp_read_while_it_fills():
    """A file read while phx cp fills it (its memory backed on the
    daemon's thread as the copy goes) shows, byte by byte, either the
    source's bytes or zeros, never anything else, and the whole source
    once the copy has returned."""
    d, ref = fresh("cpread")
    src = os.path.join(ref, "src")
    data = rand(128 * MiB + 4096, 72)  # more than the first 64 MiB piece
    write(src, data)
    fd = os.open(src, os.O_RDONLY)  # from the disk: the copy takes longer
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    dst = d + "/dst"
    with open(dst, "wb") as f:  # its size, no memory: the copy backs it
        f.truncate(len(data))
    page = 4096
    zero = bytes(page)
    cp = subprocess.Popen([T.FS.phx, "cp", "-q", src, dst], env=T.FS.env,
                          stderr=subprocess.PIPE, text=True)
    try:
        last = False
        while not last:  # the last pass starts after the copy returned
            last = cp.poll() is not None
            with open(dst, "rb", buffering=0) as f:
                off = 0
                while chunk := f.read(4 * MiB):
                    for p in range(0, len(chunk), page):
                        got = chunk[p:p + page]
                        want = data[off + p:off + p + len(got)]
                        if got == want or got == zero[:len(got)]:
                            continue
                        # a page read while it was copied: byte by byte
                        assert all(g == w or not g
                                   for g, w in zip(got, want)), \
                            "page at %d is neither" % (off + p)
                    off += len(chunk)
        err = cp.communicate()[1]
        assert cp.returncode == 0, err
        same(src, dst)
    finally:
        cp.wait()  # done already, or lands before the files go
        os.unlink(dst)
        os.unlink(src)


def test_phx_cp_out_of_phxfs():
    d, ref = fresh("cpout")
    src = os.path.join(ref, "ckpt")
    write(src, rand(20 * MiB + 4097, 21))
    T.FS.run_phx("cp", "-q", src, d + "/ckpt")
    out = os.path.join(ref, "back")
    r = T.FS.run_phx("cp", d + "/ckpt", out)
    same(src, out)
    assert "1 file," in r.stderr and "path" in r.stderr, r.stderr
    os.chmod(out, 0o600)
    write(out, b"old contents")
    T.FS.run_phx("cp", "-q", d + "/ckpt", out)  # replaces a file
    same(src, out)
    # into a directory: same name; an empty file and a file with a hole
    T.FS.run_phx("cp", "-q", d + "/ckpt", T.SCRATCH)
    same(src, os.path.join(T.SCRATCH, "ckpt"))
    os.unlink(os.path.join(T.SCRATCH, "ckpt"))
    write(d + "/empty", b"")
    with open(d + "/holes", "wb") as f:
        f.write(b"head")
        f.truncate(3 * MiB)
    for name in ("empty", "holes"):
        T.FS.run_phx("cp", "-q", d + "/" + name, os.path.join(ref, name))
        same(d + "/" + name, os.path.join(ref, name))
    assert [n for n in os.listdir(ref) if ".phx-" in n] == []


def test_phx_cp_out_sparse():
    """phx cp out of a sparse file writes only its data runs: the copy
    keeps the holes (as cp --sparse=always does) and the source gains no
    memory."""
    d, ref = fresh("cpsparse")
    f = d + "/sparse"
    size = 96 * MiB
    runs = [(0, rand(4096, 41)), (30 * MiB + 5, rand(70000, 42)),
            (64 * MiB, rand(3 * MiB, 43)), (size - 10, rand(10, 44))]
    with open(f, "wb") as fh:
        fh.truncate(size)
        for off, data in runs:
            fh.seek(off)
            fh.write(data)
    held = os.stat(f).st_blocks
    out = os.path.join(ref, "sparse")
    T.FS.run_phx("cp", "-q", f, out)
    same(f, out)
    assert os.stat(f).st_blocks == held, "the copy backed the source's holes"
    st = os.stat(out)
    assert st.st_size == size
    # what the source holds bounds what the copy holds (the data runs);
    # the file system under the copy may add a block per run
    assert st.st_blocks <= held + 8 * len(runs), (st.st_blocks, held)
    assert st.st_blocks * 512 < size // 4, st.st_blocks
    # granules are at most 2 MiB (CUDA): the first hole lies before 16 MiB
    # and the second run starts at 30 MiB rounded down to its granule
    fd = os.open(out, os.O_RDONLY)
    try:
        assert os.lseek(fd, 4096, os.SEEK_HOLE) < 16 * MiB
        assert 28 * MiB <= os.lseek(fd, 16 * MiB, os.SEEK_DATA) <= 30 * MiB
    finally:
        os.close(fd)
    # a file never written is all hole
    with open(d + "/none", "wb") as fh:
        fh.truncate(50 * MiB)
    T.FS.run_phx("cp", "-q", d + "/none", ref + "/none")
    assert os.stat(ref + "/none").st_size == 50 * MiB
    assert os.stat(ref + "/none").st_blocks == 0
    assert os.stat(d + "/none").st_blocks == 0


def test_phx_cp_r_both_ways():
    d, ref = fresh("cpr")
    tree = os.path.join(ref, "model")
    os.makedirs(os.path.join(tree, "sub", "deeper"))
    files = {"config.json": 123, "model-00001-of-00002.safetensors":
             3 * MiB + 5, "model-00002-of-00002.safetensors": MiB,
             "sub/a.bin": 0, "sub/deeper/b.bin": 70000}
    for i, (name, n) in enumerate(sorted(files.items())):
        write(os.path.join(tree, name), rand(n, 30 + i))
    r = T.FS.run_phx("cp", "-r", tree + "/", d)
    assert "5 files," in r.stderr, r.stderr
    for name in files:
        same(os.path.join(tree, name), os.path.join(d, "model", name))
    back = os.path.join(ref, "back")
    T.FS.run_phx("cp", "-r", "-q", os.path.join(d, "model"), back)
    for name in files:
        same(os.path.join(tree, name), os.path.join(back, name))
    os.symlink("config.json", os.path.join(tree, "link"))
    r = T.FS.run_phx("cp", "-r", "-q", tree, d + "/again", check=False)
    assert r.returncode == 1 and "link: not a regular file" in r.stderr, \
        r.stderr
    same(os.path.join(tree, "config.json"),
         os.path.join(d, "again", "config.json"))


def test_phx_cp_bad_input():
    d, ref = fresh("cpbad")
    write(d + "/f", rand(1000, 5))
    write(os.path.join(ref, "f"), rand(1000, 6))
    cases = [
        (("/nonexistent", d + "/x"), "/nonexistent: No such file"),
        ((ref, d), "is a directory; use phx cp -r"),
        ((d + "/f", d + "/g"), "both on phxfs"),
        ((os.path.join(ref, "f"), os.path.join(ref, "g")),
         "neither"),
        ((d + "/f", os.path.join(ref, "no", "g")),
         "no/g: No such file or directory"),
        (("/dev/null", d + "/n"), "not a regular file or directory"),
        # the top level holds only the devices' directories
        ((os.path.join(ref, "f"), T.FS.mp + "/x"), "top level"),
        ((os.path.join(ref, "f"), T.FS.mp), "top level"),
        (("-r", ref, T.FS.mp + "/"), "top level"),
        ((d + "/f",), "usage"),
        (("-z", d + "/f", ref), "usage"),
    ]
    for args, msg in cases:
        r = T.FS.run_phx("cp", *args, check=False)
        assert r.returncode and msg in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 or msg == "usage", \
            r.stderr
    assert os.listdir(ref) == ["f"], os.listdir(ref)
    assert sorted(os.listdir(d)) == ["f"], os.listdir(d)
    assert sorted(os.listdir(T.FS.mp)) == T.FS.devs


def one_line(r, msg, code=1):
    """@r failed with exit status @code and one line holding @msg."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and msg in lines[0], \
        (r.returncode, r.stderr)


def as_nobody(*argv):
    T.need_root()
    T.need("setpriv")
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                           "--clear-groups", "--"] + list(argv),
                          capture_output=True, text=True, env=T.FS.env)


def test_phx_cp_never_follows_links_in_the_destination():
    """Links another user planted in a destination tree on phxfs (device
    directories are 1777) are refused, never followed: root's files
    outside phxfs keep their bytes."""
    d, ref = fresh("cplinks")
    victim = os.path.join(ref, "victim")
    write(victim, b"root's file\n" * 1000)
    os.chmod(ref, 0o755)
    outside = os.path.join(ref, "outside")
    os.mkdir(outside)
    team = d + "/team"
    os.mkdir(team)
    os.chmod(team, 0o1777)
    for argv in (["mkdir", "-p", team + "/srcd"],
                 ["ln", "-s", victim, team + "/srcd/g"],
                 ["ln", "-s", outside, team + "/srcd/sub"],
                 ["ln", "-s", victim, team + "/f"]):
        r = as_nobody(*argv)
        assert r.returncode == 0, r.stderr
    srcd = os.path.join(ref, "srcd")
    os.makedirs(srcd + "/sub")
    write(srcd + "/g", b"x" * 10)
    write(srcd + "/sub/h", b"y" * 10)
    r = T.FS.run_phx("cp", "-r", "-q", srcd, team, check=False)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and all("symbolic link" in x for x in lines), \
        r.stderr
    write(ref + "/f", b"z" * 10)
    one_line(T.FS.run_phx("cp", ref + "/f", team, check=False),
             "/team/f: a symbolic link")
    assert T.read(victim) == b"root's file\n" * 1000
    assert os.listdir(outside) == []


def test_phx_cp_refused_leaves_the_destination(mode):
    """A copy the daemon refuses (-o writeback), or a source whose size is
    not what it reads (procfs, sysfs), leaves an existing destination
    with its old bytes and makes no new one."""
    def case(mode):
        d, ref = fresh("cprefused")
        old = rand(10 * MiB, 80)
        write(d + "/victim", old)
        write(ref + "/small", b"small")
        r = T.FS.run_phx("cp", ref + "/small", d + "/victim", check=False)
        if mode == "writeback":
            one_line(r, "writeback")
            assert T.read(d + "/victim") == old
        else:
            assert r.returncode == 0, r.stderr
            write(d + "/victim", old)
        for src in ("/proc/cpuinfo",
                    "/sys/kernel/mm/transparent_hugepage/enabled"):
            if not os.path.exists(src):
                continue
            one_line(T.FS.run_phx("cp", src, d + "/victim", check=False),
                     "is not what it reads")
            one_line(T.FS.run_phx("cp", src, d + "/new", check=False),
                     "is not what it reads")
            assert T.read(d + "/victim") == old
            assert not os.path.exists(d + "/new")
    T.in_mode(case, mode)


test_phx_cp_refused_leaves_the_destination = T.in_modes(
    test_phx_cp_refused_leaves_the_destination)


def test_phx_cp_modes():
    """Like cp: a new file gets the source's permission bits less the
    umask, an existing one keeps its mode, both ways; -r makes each
    directory with its source's mode."""
    d, ref = fresh("cpmodes")
    old = os.umask(0o022)
    try:
        src = os.path.join(ref, "secret")
        write(src, b"s" * 5000)
        os.chmod(src, 0o600)
        T.FS.run_phx("cp", "-q", src, d + "/secret")
        assert os.stat(d + "/secret").st_mode & 0o7777 == 0o600
        write(d + "/kept", b"k")
        os.chmod(d + "/kept", 0o640)
        T.FS.run_phx("cp", "-q", src, d + "/kept")
        assert os.stat(d + "/kept").st_mode & 0o7777 == 0o640
        same(src, d + "/kept")
        T.FS.run_phx("cp", "-q", d + "/secret", ref + "/out")
        assert os.stat(ref + "/out").st_mode & 0o7777 == 0o600
        os.chmod(d + "/kept", 0o666)
        write(ref + "/mine", b"mine")
        os.chmod(ref + "/mine", 0o600)
        T.FS.run_phx("cp", "-q", d + "/kept", ref + "/mine")
        assert os.stat(ref + "/mine").st_mode & 0o7777 == 0o600
        same(src, ref + "/mine")
        tree = os.path.join(ref, "tree")
        os.makedirs(tree + "/private")
        write(tree + "/private/f", b"f")
        os.chmod(tree + "/private", 0o500)
        os.chmod(tree, 0o777)
        T.FS.run_phx("cp", "-r", "-q", tree, d + "/tree")
        assert os.stat(d + "/tree").st_mode & 0o7777 == 0o755
        assert os.stat(d + "/tree/private").st_mode & 0o7777 == 0o500
        same(tree + "/private/f", d + "/tree/private/f")
        os.chmod(tree + "/private", 0o700)
    finally:
        os.umask(old)


def test_phx_cp_r_leaves_the_mount_inside_the_source():
    """A tree that holds the destination's mount is copied without it:
    one line, exit 1, and no copy of a copy."""
    T.need_root()
    d, ref = fresh("cpself")
    rt = os.path.join(ref, "rt")
    os.makedirs(rt + "/m")
    write(rt + "/a", b"a" * 100)
    T.sh("mount --bind %s %s" % (d, rt + "/m"))
    try:
        r = T.FS.run_phx("cp", "-r", "-q", rt, rt + "/m/", check=False)
        one_line(r, "rt/m: on the file system copied into")
        assert sorted(os.listdir(d + "/rt")) == ["a"]
        same(rt + "/a", d + "/rt/a")
    finally:
        T.sh("umount %s" % (rt + "/m"))


def test_phx_cp_long_paths():
    """A destination longer than PATH_MAX is refused, never cut to another
    file's name; a name of NAME_MAX bytes copies out (its temporary file
    has a short name of its own)."""
    d, ref = fresh("cplong")
    write(d + "/victim", b"victim")
    write(ref + "/src", b"source")
    pre = d + "/" + "./" * ((4095 - len(d) - 1 - len("victim")) // 2)
    pre += "/" * (4095 - len(pre) - len("victim"))
    dst = pre + "victim" + "-longer"
    assert len(pre + "victim") == 4095
    one_line(T.FS.run_phx("cp", ref + "/src", dst, check=False),
             "File name too long")
    assert T.read(d + "/victim") == b"victim"
    name = "n" * 255
    write(d + "/" + name, b"long name")
    T.FS.run_phx("cp", "-q", d + "/" + name, ref)
    same(d + "/" + name, ref + "/" + name)
    T.FS.run_phx("cp", "-q", ref + "/src", d + "/" + name)
    same(ref + "/src", d + "/" + name)


def test_phx_cp_out_through_a_link():
    """Copied out over a symbolic link, the copy replaces the file the
    link leads to, as cp writes through it; a link to nothing is
    refused."""
    d, ref = fresh("cpoutlink")
    write(d + "/f", rand(3 * MiB, 81))
    os.mkdir(ref + "/real")
    write(ref + "/real/target", b"old")
    os.symlink("real/target", ref + "/link")
    T.FS.run_phx("cp", "-q", d + "/f", ref + "/link")
    assert os.readlink(ref + "/link") == "real/target"
    same(d + "/f", ref + "/real/target")
    os.symlink("nothing", ref + "/dangling")
    one_line(T.FS.run_phx("cp", d + "/f", ref + "/dangling", check=False),
             "a symbolic link to nothing")
    assert [n for n in os.listdir(ref) if ".phx-" in n] == []


def test_phx_cp_messages():
    """A phxfs file the caller may not read says so; a copy out that
    cannot be written names the destination; phx mount inside phxfs is
    refused."""
    d, ref = fresh("cpmsg")
    write(d + "/secret", b"s" * 100)
    os.chmod(d + "/secret", 0o600)
    os.chmod(ref, 0o777)
    r = as_nobody(T.FS.phx, "cp", d + "/secret", ref + "/x")
    one_line(r, "secret: Permission denied")
    small = os.path.join(ref, "small")
    os.mkdir(small)
    T.sh("mount -t tmpfs -o size=1m phx-test-small %s" % small)
    try:
        write(d + "/big", rand(4 * MiB, 82))
        r = T.FS.run_phx("cp", d + "/big", small + "/big", check=False)
        one_line(r, "small/big: No space left on device")
        assert os.listdir(small) == []
    finally:
        T.sh("umount %s" % small)
    r = T.FS.run_phx("mount", d + "/secret", check=False)
    one_line(r, "inside a mounted phxfs")


def test_phx_arguments():
    """Usage errors are one line that names the command, exit 2; nothing
    is mounted or unmounted."""
    mp = os.path.join(T.SCRATCH, "not-mounted")
    os.makedirs(mp, exist_ok=True)
    for argv, msg in [(("mount", mp, mp + "2"), "phx mount: one mount point"),
                      (("umount", "-x"), "phx umount: invalid option -x"),
                      (("umount", mp, mp), "phx umount: one mount point"),
                      (("status", T.FS.mp, mp), "phx status: one mount"),
                      (("cp", "-z", "a", "b"), "phx cp: invalid option -z"),
                      (("mount", "-o"), "phx mount: option -o needs"),
                      (("cp", "a"), "phx cp: SRC and DST are needed"),
                      (("mount", "-o", "size=1m," + "x" * 1100, mp),
                       "longer than 1023 bytes"),
                      (("nosuch",), "unknown command")]:
        one_line(T.FS.run_phx(*argv, check=False), msg, 2)
    assert not os.path.ismount(mp)
    assert not os.path.exists(mp + "2")
    assert sorted(os.listdir(T.FS.mp)) == T.FS.devs


def wait_for(pred, proc):
    """Spin until @pred() holds or @proc ended; whether it held."""
    while proc.poll() is None:
        if pred():
            return True
    return pred()


def test_phx_cp_stopped_by_a_signal():
    """SIGINT or SIGTERM during a copy removes what the copy made (the
    new file in phxfs, the temporary file out of it) and exits 130 or
    143 with one line; a copy that ended first is whole."""
    d, ref = fresh("cpsig")
    src = os.path.join(ref, "src")
    write(src, rand(100 * MiB, 83))
    T.FS.run_phx("cp", "-q", src, d + "/whole")
    for sig, code, a, b, made in [
            (15, 143, d + "/whole", ref + "/back",
             lambda: any(".phx-cp-" in n for n in os.listdir(ref))),
            (2, 130, src, d + "/dst",
             lambda: os.path.exists(d + "/dst"))]:
        used = T.FS_used()
        fd = os.open(src, os.O_RDONLY)  # from the disk: the copy is longer
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        p = subprocess.Popen([T.FS.phx, "cp", "-q", a, b], env=T.FS.env,
                             stderr=subprocess.PIPE, text=True)
        if wait_for(made, p):
            p.send_signal(sig)
        err = p.communicate()[1]
        if p.returncode == 0:
            same(a, b)  # it ended before the signal came
            os.unlink(b)
            continue
        assert p.returncode == code, (p.returncode, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "stopped by" in lines[0], err
        assert "removed" in lines[0], err
        assert not os.path.exists(b)
        assert [n for n in os.listdir(ref) if ".phx-" in n] == []
        # phx returned once the daemon had let go of the files
        assert T.FS_used() == used
