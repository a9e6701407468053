"""Checkpoint tensors read straight into parameters (phxio._direct), on a
model built like vLLM's Llama (direct_model.py): which tensors go direct
and land as the file's bytes, which go through the model's loaders, when
the pass gives up, that errors name the file and tensor, and that the
result is always what the model's own loaders give."""

from __future__ import annotations

import os
import re

import pytest

import phxio
from phxio import _weights

torch = pytest.importorskip("torch")

from phxio import _direct  # noqa: E402  (it needs torch)
from direct_model import (DIRECT, FFN, HEAD, HEADS, HIDDEN,  # noqa: E402
                          KV_HEADS, LOADED, THROUGH_LOADERS, Model,
                          assert_same, file_bytes, loaded_through,
                          param_bytes, reference, run_pass, save, state)


def _poison(model):
    """NaN in every floating parameter, so data that did not arrive
    shows."""
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))


@pytest.mark.parametrize("threads", [1, 3])
def test_direct_load_equals_the_models_own(tmp_path, threads, dev):
    """On the default device: a GPU's memory where there is one."""
    where = f"cuda:{dev.index}" if dev.kind == "cuda" else "cpu"
    sd = state()
    paths = save(sd, tmp_path / "ck")
    want, want_loaded = reference(sd, where)
    model = Model().to(where)
    _poison(model)
    loaded, p = run_pass(model, paths, dev, threads)
    assert not p.reason
    assert set(p.direct) == DIRECT
    assert {c.target for c in p.calls if c.target in p.redone} == \
        THROUGH_LOADERS
    # the model's loaders ran for those alone, once each
    assert loaded_through(model) == THROUGH_LOADERS
    assert len(LOADED) == p.replayed == len(THROUGH_LOADERS)
    assert len(p.parts) == 14 and p.packed == 4
    assert loaded == want_loaded
    assert_same(want, model)
    # the loaders are the model's again
    assert model.layers[0].qkv_proj.weight.weight_loader == \
        model.layers[0].qkv_proj.weight_loader
    assert not hasattr(model.norm.weight, "weight_loader")
    assert not hasattr(model.scale, "weight_loader")


@pytest.mark.parametrize("threads", [1, 2])
def test_each_direct_tensor_is_its_files_bytes(tmp_path, threads):
    paths = save(state(), tmp_path / "ck", shards=4)
    model = Model()
    _poison(model)
    _, p = run_pass(model, paths, phxio.device("sim0"), threads)
    files = {t.name: f for f in _weights.headers(paths) for t in f.tensors}
    assert set(p.direct) == DIRECT
    for name, part in p.direct.items():
        f = files[name]
        info = next(t for t in f.tensors if t.name == name)
        assert part.nbytes == info.end - info.begin, name
        assert param_bytes(part) == file_bytes(f.path, f, info), name
    # the stacked parameters are their parts' bytes, end to end
    qkv = model.layers[0].qkv_proj.weight
    assert not torch.isnan(qkv).any()
    assert sum(part.nbytes for part in p.parts["layers.0.qkv_proj.weight"]) \
        == qkv.numel() * qkv.element_size()


def test_rows_of_stacked_parameters(tmp_path):
    paths = save(state(), tmp_path / "ck")
    _, p = run_pass(Model(), paths, phxio.device("sim0"))
    row = HIDDEN * 4
    q, k = HEADS * HEAD, KV_HEADS * HEAD
    got = {n: (pt.param, pt.offset, pt.nbytes) for n, pt in
           p.direct.items()}
    assert got["layers.1.q_proj.weight"] == \
        ("layers.1.qkv_proj.weight", 0, q * row)
    assert got["layers.1.k_proj.weight"] == \
        ("layers.1.qkv_proj.weight", q * row, k * row)
    assert got["layers.1.v_proj.weight"] == \
        ("layers.1.qkv_proj.weight", (q + k) * row, k * row)
    assert got["layers.0.gate_proj.weight"] == \
        ("layers.0.gate_up_proj.weight", 0, FFN * row)
    assert got["layers.0.up_proj.weight"] == \
        ("layers.0.gate_up_proj.weight", FFN * row, FFN * row)


@pytest.mark.parametrize("case", ["padded", "tied", "half_k", "late",
                                  "strided"])
def test_what_falls_back_still_loads_as_the_model_does(tmp_path, case):
    """A padded vocabulary (its loader zeroes the padding), a tied head
    (skipped), one part of a stacked parameter that cannot go direct
    (then none of it does), a call after the loop, a parameter that is
    not contiguous."""
    kw = {"padded": {"pad": 48}, "tied": {"tied": True}, "half_k": {},
          "late": {"late": True}, "strided": {"strided": True}}[case]
    sd = state(tied=case == "tied", half_k=case == "half_k")
    paths = save(sd, tmp_path / "ck")
    want, want_loaded = reference(sd, "cpu", **kw)
    model = Model(**kw)
    _poison(model)
    loaded, p = run_pass(model, paths, phxio.device("sim0"))
    assert not p.reason and loaded == want_loaded
    assert_same(want, model)
    through = loaded_through(model)
    if case == "padded":
        assert "embed_tokens.weight" in p.redone
        assert "embed_tokens.weight" not in p.direct
        assert through == THROUGH_LOADERS | {"embed_tokens.weight"}
    elif case == "tied":
        assert "lm_head.weight" not in p.direct
        assert "embed_tokens.weight" in p.direct
        assert through == THROUGH_LOADERS
    elif case == "half_k":
        qkv = "layers.0.qkv_proj.weight"
        assert qkv in p.redone
        assert not {f"layers.0.{n}_proj.weight" for n in "qkv"} & \
            set(p.direct)
        assert "layers.1.k_proj.weight" in p.direct
        # q, k and v all through the loader, in the model's order
        assert through == THROUGH_LOADERS | {qkv}
        assert sum(t is model.layers[0].qkv_proj.weight
                   for t in LOADED) == 3
    elif case == "late":
        assert "proj.weight" in p.direct
        assert through == THROUGH_LOADERS
    else:
        assert "proj.weight" in p.redone and "proj.weight" not in p.direct
        assert not model.proj.weight.is_contiguous()
        assert through == THROUGH_LOADERS | {"proj.weight"}


def test_a_changed_stand_in_ends_the_pass(tmp_path):
    sd = state()
    paths = save(sd, tmp_path / "ck")
    model = Model(transpose=True)
    loaded, p = run_pass(model, paths, phxio.device("sim0"))
    assert loaded is None and "'proj.weight'" in p.reason
    assert LOADED == []  # no loader saw a stand-in
    # as the vLLM loader then does: everything through the loaders
    want, want_loaded = reference(sd, "cpu", transpose=True)
    assert model.load_weights(sd.items()) == want_loaded
    assert_same(want, model)
    assert model.proj.weight.weight_loader == model.proj.weight_loader


def test_a_model_that_refuses_stand_ins_ends_the_pass(tmp_path):
    paths = save(state(), tmp_path / "ck")

    class Picky(Model):
        def load_weights(self, weights):
            for name, w in weights:
                w.sum().item()  # meta tensors hold no data
            return set()

    loaded, p = run_pass(Picky(), paths, phxio.device("sim0"))
    assert loaded is None and "did not take stand-ins" in p.reason


def _file_of(files, name):
    return next(f for f in files if name in {t.name for t in f.tensors})


def _named(path, model):
    """A pattern for an error about a tensor of the file @path read into
    a parameter of @model; its groups: the tensor and the parameter."""
    return re.escape(path) + r"[^:]*: tensor '([^']+)' \(into parameter " \
        r"'([^']+)'\)"


def test_truncated_file_names_file_and_tensor(tmp_path):
    paths = save(state(), tmp_path / "ck")
    files = _weights.headers(paths)
    f = _file_of(files, "norm.weight")
    # the file shrinks after its header was read
    os.truncate(f.path, f.data_start + 8)
    model = Model()
    with pytest.raises(phxio.SafetensorsError,
                       match=_named(f.path, model) + ": truncated") as ei:
        run_pass(model, paths, phxio.device("sim0"), files=files)
    tensor, param = re.search(_named(f.path, model), str(ei.value)).groups()
    assert tensor in {t.name for t in f.tensors}
    assert param in dict(model.named_parameters())


def test_failed_read_names_file_tensor_and_error(tmp_path):
    paths = save(state(), tmp_path / "ck")
    files = _weights.headers(paths)
    f = _file_of(files, "norm.weight")
    # the descriptor its header was read from, which the pass reads
    # through, is open for writing only now: the engine's reads of it
    # fail (EBADF)
    w = os.open(f.path, os.O_WRONLY)
    os.dup2(w, f.fd, inheritable=False)
    os.close(w)
    model = Model()
    with pytest.raises(phxio.PhoenixError) as ei:
        run_pass(model, paths, phxio.device("sim0"), files=files)
    assert re.search(r"reading " + re.escape(f.path) + r" at offset \d+ "
                     r"into sim0: tensor '[^']+' \(into parameter "
                     r"'[^']+'\): " + re.escape(os.strerror(ei.value.errno)),
                     str(ei.value)), str(ei.value)
    tensor = re.search(r"tensor '([^']+)'", str(ei.value)).group(1)
    assert tensor in {t.name for t in f.tensors}


def test_files_replaced_after_their_headers_were_read(tmp_path):
    """Each file renamed over by another of the same layout and other
    values between the read of the headers (which the vLLM loader does
    before the pass) and the pass: the model is loaded from the files
    whose headers were read, the tensors read direct and those through
    the loaders alike, where the new files' bytes were read at the old
    headers' offsets."""
    sd = state()
    paths = save(sd, tmp_path / "ck")
    files = _weights.headers(paths)
    new = save({k: torch.full_like(v, 7) for k, v in sd.items()},
               tmp_path / "new")
    for a, b in zip(new, paths):
        os.replace(a, b)
    want, want_loaded = reference(sd, "cpu")
    model = Model()
    _poison(model)
    loaded, p = run_pass(model, paths, phxio.device("sim0"), files=files)
    assert not p.reason and set(p.direct) == DIRECT
    assert loaded == want_loaded
    assert_same(want, model)


def test_failing_loader_leaves_its_tensor_named(tmp_path):
    """A loader called again with the real tensor fails: the error goes
    out as it is, the tensor it was given is what the load format names
    (with its file)."""
    paths = save(state(), tmp_path / "ck")
    last = [None]
    with pytest.raises(ValueError, match=r"shape \(32, 32\) does not fit"):
        run_pass(Model(broken=True), paths, phxio.device("sim0"),
                 last=last)
    assert last[0] == "custom.weight"


def test_vllm_load_format_names_the_failing_loaders_file(tmp_path):
    pytest.importorskip("vllm")
    try:  # where vLLM 0.26 to 0.32 all export it
        from vllm.config import LoadConfig
    except ImportError:
        from vllm.config.load import LoadConfig

    from phxio import vllm_loader

    class Cfg:
        model, revision, quantization = str(tmp_path / "ck"), None, None

    paths = save(state(), tmp_path / "ck")
    path = _file_of(_weights.headers(paths), "custom.weight").path
    vllm_loader.register()
    loader = vllm_loader._loader_class(LoadConfig(load_format="phoenix"))
    with pytest.raises(RuntimeError,
                       match=r"load format phoenix: " + re.escape(path) +
                       r": tensor 'custom\.weight': shape \(32, 32\)"):
        loader.load_weights(Model(broken=True), Cfg())
