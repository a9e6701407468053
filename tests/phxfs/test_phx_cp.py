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
