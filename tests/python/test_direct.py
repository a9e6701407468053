"""Checkpoint tensors read straight into parameters (phxio._direct), on a
model built like vLLM's Llama from plain torch modules: which tensors go
direct, which through the loaders, when the pass gives up, and that the
result is always what the model's own loaders give."""

from __future__ import annotations

import os

import pytest

import phxio
from phxio import _weights

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402
from torch import nn  # noqa: E402

from phxio import _direct, vllm_loader  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD, FFN, VOCAB = 32, 4, 2, 8, 48, 64


def default_loader(param, weight):
    assert param.shape == weight.shape
    param.data.copy_(weight)


class Linear(nn.Module):
    """Column/row-parallel linear at one rank: a plain copy."""

    def __init__(self, rows, cols, dtype=torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, cols, dtype=dtype),
                                   requires_grad=False)
        self.weight.output_dim = 0
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, weight):
        assert param.shape == weight.shape
        param.data.copy_(weight)


class Merged(Linear):
    """gate/up stacked: shard i at rows sum(output_sizes[:i])."""

    def __init__(self, sizes, cols):
        super().__init__(sum(sizes), cols)
        self.output_sizes = sizes

    def weight_loader(self, param, weight, shard):
        off = sum(self.output_sizes[:shard])
        param.data.narrow(0, off, self.output_sizes[shard]).copy_(weight)


class QKV(Linear):
    def __init__(self, heads, kv_heads, head, cols):
        super().__init__((heads + 2 * kv_heads) * head, cols)
        self.num_heads, self.num_kv_heads = heads, kv_heads
        self.head_size = self.v_head_size = head

    def weight_loader(self, param, weight, shard):
        q = self.num_heads * self.head_size
        k = self.num_kv_heads * self.head_size
        off, n = {"q": (0, q), "k": (q, k), "v": (q + k, k)}[shard]
        param.data.narrow(0, off, n).copy_(weight)


class _Indices:
    def __init__(self, end):
        self.org_vocab_start_index, self.org_vocab_end_index = 0, end


class Embedding(Linear):
    """A vocabulary padded to a multiple of @pad: the loader copies the
    checkpoint's rows and zeroes the rest."""

    def __init__(self, vocab, cols, pad=1):
        super().__init__((vocab + pad - 1) // pad * pad, cols)
        self.shard_indices = _Indices(vocab)

    def weight_loader(self, param, weight):
        param.data[:weight.shape[0]].copy_(weight)
        param.data[weight.shape[0]:].fill_(0)


class Custom(Linear):
    """A loader the table does not know (it scales)."""

    def weight_loader(self, param, weight):
        param.data.copy_(weight * 2)


class Norm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))  # no loader of its own


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv_proj = QKV(HEADS, KV_HEADS, HEAD, HIDDEN)
        self.o_proj = Linear(HIDDEN, HIDDEN)
        self.gate_up_proj = Merged([FFN, FFN], HIDDEN)
        self.down_proj = Linear(HIDDEN, FFN)
        self.input_layernorm = Norm(HIDDEN)
        self.rotary_emb = nn.Module()
        self.rotary_emb.register_buffer("inv_freq", torch.ones(HEAD // 2))


STACKED = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"),
           (".qkv_proj", ".v_proj", "v"), (".gate_up_proj", ".gate_proj", 0),
           (".gate_up_proj", ".up_proj", 1)]


class Model(nn.Module):
    """Loads as vLLM's Llama does: skips rotary inv_freq and a tied
    lm_head, stacks q/k/v and gate/up, loads a persistent buffer; and some
    oddities: a weight loaded in half precision, one through a loader of
    its own, an embedding with padding rows; on request a weight it
    transposes first, or one it loads after its loop."""

    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                              "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, tied=False, pad=1, transpose=False, late=False):
        super().__init__()
        self.embed_tokens = Embedding(VOCAB, HIDDEN, pad)
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.norm = Norm(HIDDEN)
        self.tied, self.transpose, self.late = tied, transpose, late
        self.lm_head = self.embed_tokens if tied else Linear(VOCAB, HIDDEN)
        self.proj = Linear(FFN, HIDDEN)
        self.half = Linear(HIDDEN, HIDDEN, torch.float16)
        self.custom = Custom(HIDDEN, HIDDEN)
        self.register_buffer("scale", torch.zeros(HIDDEN))

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        params.update(self.named_buffers())
        loaded = set()
        later = []
        for name, w in weights:
            if "rotary_emb.inv_freq" in name:
                continue
            if self.tied and name.startswith("lm_head."):
                continue
            if name == "proj.weight" and self.transpose:
                w = w.t().t()
            if name == "proj.weight" and self.late:
                later.append((name, w))
                continue
            for pname, part, shard in STACKED:
                if part in name:
                    name = name.replace(part, pname)
                    p = params[name]
                    p.weight_loader(p, w, shard)
                    break
            else:
                p = params[name]
                getattr(p, "weight_loader", default_loader)(p, w)
            loaded.add(name)
        for name, w in later:
            params[name].weight_loader(params[name], w)
            loaded.add(name)
        return loaded


KINDS = _direct.Kinds({
    None: _direct.COPY, default_loader: _direct.COPY,
    Linear.weight_loader: _direct.COPY,
    Merged.weight_loader: _direct.MERGED, QKV.weight_loader: _direct.QKV,
    Embedding.weight_loader: _direct.EMBED}, default_loader)

LAYER = {f"layers.{i}.{n}.weight" for i in range(2) for n in
         ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
          "down_proj", "input_layernorm")}
DIRECT = LAYER | {"embed_tokens.weight", "norm.weight", "lm_head.weight",
                  "proj.weight"}


def _state(tied=False, half_k=False, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    sd = {"embed_tokens.weight": r(VOCAB, HIDDEN), "norm.weight": r(HIDDEN),
          "proj.weight": r(FFN, HIDDEN), "half.weight": r(HIDDEN, HIDDEN),
          "custom.weight": r(HIDDEN, HIDDEN), "scale": r(HIDDEN)}
    if not tied:
        sd["lm_head.weight"] = r(VOCAB, HIDDEN)
    for i in range(2):
        p = f"layers.{i}."
        sd.update({p + "q_proj.weight": r(HEADS * HEAD, HIDDEN),
                   p + "k_proj.weight": r(KV_HEADS * HEAD, HIDDEN),
                   p + "v_proj.weight": r(KV_HEADS * HEAD, HIDDEN),
                   p + "o_proj.weight": r(HIDDEN, HIDDEN),
                   p + "gate_proj.weight": r(FFN, HIDDEN),
                   p + "up_proj.weight": r(FFN, HIDDEN),
                   p + "down_proj.weight": r(HIDDEN, FFN),
                   p + "input_layernorm.weight": r(HIDDEN),
                   p + "rotary_emb.inv_freq": r(HEAD // 2)})
    if half_k:
        sd["layers.0.k_proj.weight"] = sd["layers.0.k_proj.weight"].half()
    return sd


def _save(sd, d, shards=3):
    d.mkdir()
    names = sorted(sd)
    paths = []
    for s in range(shards):
        part = {n: sd[n].contiguous() for n in names[s::shards]}
        paths.append(str(d / f"m-{s}.safetensors"))
        save_file(part, paths[-1])
    return paths


def _pass(model, paths, dev, threads=None):
    """What the vLLM loader does: the pass, or None and why not."""
    files = _weights.headers(paths)
    opts = vllm_loader.options({"threads": threads} if threads else None)
    last = [None]
    loaded, p = vllm_loader._direct(model, files, dev, opts, last,
                                    lambda: None, KINDS)
    return loaded, p


def _reference(sd, where, **kw):
    want = Model(**kw).to(where)
    return want, want.load_weights(sd.items())


def _same(want, model):
    for (name, a), (_, b) in zip(
            list(want.named_parameters()) + list(want.named_buffers()),
            list(model.named_parameters()) + list(model.named_buffers())):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("threads", [1, 3])
def test_direct_load_equals_the_models_own(tmp_path, threads, dev):
    """On the default device: a GPU's memory where there is one."""
    where = f"cuda:{dev.index}" if dev.kind == "cuda" else "cpu"
    sd = _state()
    paths = _save(sd, tmp_path / "ck")
    want, want_loaded = _reference(sd, where)
    model = Model().to(where)
    loaded, p = _pass(model, paths, dev, threads)
    assert not p.reason
    assert set(p.direct) == DIRECT
    # through the loaders: a converted dtype, an unknown loader, a buffer;
    # left out: the rotary tables
    assert {c.target for c in p.calls if c.target in p.redone} == \
        {"half.weight", "custom.weight", "scale"}
    assert len(p.parts) == 14 and p.packed == 4
    assert loaded == want_loaded
    _same(want, model)
    # the loaders are the model's again
    assert model.layers[0].qkv_proj.weight.weight_loader == \
        model.layers[0].qkv_proj.weight_loader
    assert not hasattr(model.norm.weight, "weight_loader")
    assert not hasattr(model.scale, "weight_loader")


def test_rows_of_stacked_parameters(tmp_path):
    paths = _save(_state(), tmp_path / "ck")
    _, p = _pass(Model(), paths, phxio.device("sim0"))
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
    assert got["layers.0.up_proj.weight"] == \
        ("layers.0.gate_up_proj.weight", FFN * row, FFN * row)


@pytest.mark.parametrize("case", ["padded", "tied", "half_k", "late"])
def test_what_falls_back_still_loads_as_the_model_does(tmp_path, case):
    """A padded vocabulary (its loader zeroes the padding), a tied head
    (skipped), one part of a stacked parameter that cannot go direct
    (then none of it does), a call after the loop."""
    kw = {"padded": {"pad": 48}, "tied": {"tied": True},
          "half_k": {}, "late": {"late": True}}[case]
    sd = _state(tied=case == "tied", half_k=case == "half_k")
    paths = _save(sd, tmp_path / "ck")
    want, want_loaded = _reference(sd, "cpu", **kw)
    model = Model(**kw)
    loaded, p = _pass(model, paths, phxio.device("sim0"))
    assert not p.reason and loaded == want_loaded
    _same(want, model)
    if case == "padded":
        assert "embed_tokens.weight" in p.redone
        assert "embed_tokens.weight" not in p.direct
    elif case == "tied":
        assert "lm_head.weight" not in p.direct
        assert "embed_tokens.weight" in p.direct
    elif case == "half_k":
        assert "layers.0.qkv_proj.weight" in p.redone
        assert not {f"layers.0.{n}_proj.weight" for n in "qkv"} & \
            set(p.direct)
        assert "layers.1.k_proj.weight" in p.direct
    else:
        assert "proj.weight" in p.direct


def test_a_changed_stand_in_ends_the_pass(tmp_path):
    sd = _state()
    paths = _save(sd, tmp_path / "ck")
    model = Model(transpose=True)
    loaded, p = _pass(model, paths, phxio.device("sim0"))
    assert loaded is None and "'proj.weight'" in p.reason
    # as the vLLM loader then does: everything through the loaders
    want, want_loaded = _reference(sd, "cpu", transpose=True)
    assert model.load_weights(sd.items()) == want_loaded
    _same(want, model)
    assert model.proj.weight.weight_loader == model.proj.weight_loader


def test_a_model_that_refuses_stand_ins_ends_the_pass(tmp_path):
    paths = _save(_state(), tmp_path / "ck")

    class Picky(Model):
        def load_weights(self, weights):
            for name, w in weights:
                w.sum().item()  # meta tensors hold no data
            return set()

    loaded, p = _pass(Picky(), paths, phxio.device("sim0"))
    assert loaded is None and "did not take stand-ins" in p.reason


def test_read_errors_name_file_and_tensor(tmp_path):
    paths = _save(_state(), tmp_path / "ck")
    files = _weights.headers(paths)
    f = next(f for f in files if "norm.weight" in {t.name for t in
                                                   f.tensors})
    # the file shrinks after its header was read
    os.truncate(f.path, f.data_start + 8)
    last = [None]
    with pytest.raises(phxio.SafetensorsError,
                       match=r"m-\d\.safetensors: tensor '[^']+' \(into "
                       r"parameter '[^']+'\): truncated"):
        vllm_loader._direct(Model(), files, phxio.device("sim0"),
                            vllm_loader.options(None), last, lambda: None,
                            KINDS)
