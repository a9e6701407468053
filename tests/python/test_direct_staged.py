"""Direct reads (phxio._direct) from a checkpoint staged on phxfs: its
files are mapped by the pass's own threads and the tensors copied from
that device memory into the parameters, none read through the mount;
where phxfs does not hand a file over it is read; whichever way the pass
ends, the mappings are freed."""

from __future__ import annotations

import errno
import os
import shutil
import threading

import pytest

import phxio
from phxio import _phxfs, _weights
from test_open_file import mount  # noqa: F401  (the fixture)

torch = pytest.importorskip("torch")

from direct_model import (DIRECT, Model, assert_same,  # noqa: E402
                          file_bytes, param_bytes, reference, run_pass, save,
                          state)


class Opened:
    """open_fd() as the pass calls it (with the descriptor the file's
    header was read from), with what it returned and the thread it ran
    in; @refuse: phxfs hands nothing over."""

    def __init__(self, refuse=False):
        self.refuse = refuse
        self.calls = []  # (path, thread name, buffer or None)
        self.lock = threading.Lock()

    def __call__(self, fd, path):
        buf = None
        try:
            if self.refuse:
                raise phxio.PhoenixError(errno.EPERM, f"{path}: refused")
            buf = _phxfs_open_fd(fd, path)
            return buf
        finally:
            with self.lock:
                self.calls.append((str(path),
                                   threading.current_thread().name, buf))

    def all_freed(self):
        for _, _, buf in self.calls:
            if buf is None:
                continue
            with pytest.raises(phxio.PhoenixError, match="freed"):
                buf.handle
        return True


_phxfs_open_fd = _phxfs.open_fd


def _by_path(path):
    raise AssertionError(f"{path} mapped by its name, not through the "
                         "descriptor its header was read from")


@pytest.fixture
def opened(monkeypatch):
    o = Opened()
    monkeypatch.setattr(_phxfs, "open_fd", o)
    monkeypatch.setattr(_phxfs, "open_file", _by_path)
    return o


def _where(mount):
    dev = phxio.device(mount.name)
    return dev, (f"cuda:{dev.index}" if dev.kind == "cuda" else "cpu")


def _reads(mount):
    st = phxio.phxfs_status(mount)
    return sum(d["read_requests"] for d in st["devices"])


def _stage(mount, tmp_path, name, sd, shards=3):
    """@sd saved as @shards files and copied onto the mount: the staged
    paths, and the files' headers."""
    save(sd, tmp_path / name, shards)
    dst = mount / name
    shutil.copytree(tmp_path / name, dst)
    paths = sorted(str(p) for p in dst.glob("*.safetensors"))
    return paths, _weights.headers(paths)


def _check_bytes(p, files):
    by_name = {t.name: (f, t) for f in files for t in f.tensors}
    for name, part in p.direct.items():
        f, info = by_name[name]
        assert param_bytes(part) == file_bytes(f.path, f, info), name


def _load(mount, sd, paths, files, threads=None):
    """@sd's model loaded from @paths (@files, their headers) by one pass
    with @threads threads, checked against the model its own loaders load
    from @sd, the direct tensors' bytes against the files': the pass, and
    the reads through the mount during it."""
    dev, where = _where(mount)
    want, want_loaded = reference(sd, where)
    model = Model().to(where)
    before = _reads(mount)
    loaded, p = run_pass(model, paths, dev, threads, files=files)
    reads = _reads(mount) - before
    assert not p.reason and loaded == want_loaded
    assert_same(want, model)
    _check_bytes(p, files)
    return p, reads


@pytest.mark.parametrize("threads", [1, 3])
def test_staged_tensors_are_copied_from_device_memory(mount, tmp_path,
                                                      opened, threads):
    dev, _ = _where(mount)
    sd = state()
    paths, files = _stage(mount, tmp_path, f"ck-{threads}", sd)
    assert {f.staged for f in files} == {dev.name}
    p, reads = _load(mount, sd, paths, files, threads)
    # the direct tensors copied from the mapped files, the rest loaded
    # from views of them: through the mount, at most the header of each
    # file the loaders' tensors come from
    of = {t.name: f.path for f in files for t in f.tensors}
    again = {of[c.name] for c in p.calls if c.target in p.redone}
    assert again and reads <= len(again)
    assert set(p.direct) == DIRECT and p.staged_parts == len(DIRECT)
    # each file mapped once, by the pass's threads, and freed at its end
    assert sorted(path for path, _, _ in opened.calls) == paths
    assert all(name.startswith("phx-staged") for _, name, _ in
               opened.calls)
    assert all(buf is not None for _, _, buf in opened.calls)
    assert opened.all_freed()
    shutil.rmtree(mount / f"ck-{threads}")


def test_files_phxfs_does_not_hand_over_are_read(mount, tmp_path,
                                                 monkeypatch):
    refused = Opened(refuse=True)
    monkeypatch.setattr(_phxfs, "open_fd", refused)
    sd = state()
    paths, files = _stage(mount, tmp_path, "ck-refused", sd)
    p, reads = _load(mount, sd, paths, files)
    # the direct tensors' data through the mount, beyond the headers
    assert reads > len(files)
    assert set(p.direct) == DIRECT and p.staged_parts == 0
    assert sorted(path for path, _, _ in refused.calls) == paths
    shutil.rmtree(mount / "ck-refused")


def test_staged_and_plain_files_in_one_checkpoint(mount, tmp_path, opened):
    dev, _ = _where(mount)
    sd = state()
    staged, _ = _stage(mount, tmp_path, "ck-mixed", sd)
    # the last shard from the local copy instead of the mount
    plain = str(tmp_path / "ck-mixed" / "m-2.safetensors")
    paths = staged[:2] + [plain]
    files = _weights.headers(paths)
    assert [f.staged for f in files] == [dev.name, dev.name, None]
    p, _ = _load(mount, sd, paths, files)
    on_mount = {t.name for f in files[:2] for t in f.tensors}
    assert p.staged_parts == len(set(p.direct) & on_mount) > 0
    assert set(p.direct) == DIRECT
    assert sorted(path for path, _, _ in opened.calls) == staged[:2]
    assert opened.all_freed()
    shutil.rmtree(mount / "ck-mixed")


def test_a_pass_that_gives_up_frees_the_mappings(mount, tmp_path, opened):
    dev, where = _where(mount)
    sd = state()
    paths, files = _stage(mount, tmp_path, "ck-refusing", sd)
    model = Model(transpose=True).to(where)
    loaded, p = run_pass(model, paths, dev, files=files)
    assert loaded is None and "'proj.weight'" in p.reason
    # the files of the tensors copied before it gave up were mapped (the
    # others may have been dropped unstarted); all are freed
    of = {t.name: f.path for f in files for t in f.tensors}
    used = {of[c.name] for c in p.calls if c.part is not None}
    mapped = {path for path, _, buf in opened.calls if buf is not None}
    assert used and used <= mapped <= set(paths)
    assert opened.all_freed()
    want, want_loaded = reference(sd, where, transpose=True)
    assert model.load_weights(sd.items()) == want_loaded
    assert_same(want, model)
    shutil.rmtree(mount / "ck-refusing")


def test_staged_files_replaced_after_their_headers_were_read(mount,
                                                             tmp_path):
    """Each staged file renamed over by another of the same layout and
    other values between the read of the headers and the pass (whose
    threads map the files): the tensors copied direct are the mapped
    memory of the files whose headers were read, and so are those
    through the loaders, where the new files' were used at the old
    headers' offsets."""
    dev, where = _where(mount)
    sd = state()
    paths, files = _stage(mount, tmp_path, "ck-swap", sd)
    new, _ = _stage(mount, tmp_path, "ck-swap-new",
                    {k: torch.full_like(v, 7) for k, v in sd.items()})
    for a, b in zip(new, paths):
        os.replace(a, b)
    want, want_loaded = reference(sd, where)
    model = Model().to(where)
    loaded, p = run_pass(model, paths, dev, files=files)
    assert not p.reason and loaded == want_loaded
    assert set(p.direct) == DIRECT and p.staged_parts == len(DIRECT)
    assert_same(want, model)
    shutil.rmtree(mount / "ck-swap")
    shutil.rmtree(mount / "ck-swap-new")
