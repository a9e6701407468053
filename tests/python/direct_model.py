"""A model built like vLLM's Llama from plain torch modules, for the tests
of direct reads (test_direct.py, test_direct_staged.py): its layers'
weight loaders, the table that names them to phxio._direct, a
checkpoint of it and the pass as vLLM's load format makes it.

Every loader call is logged in LOADED (the parameter it filled), so a
test sees which tensors went through the model's loaders and which did
not."""

from __future__ import annotations

import torch
from safetensors.torch import save_file
from torch import nn

from phxio import _direct, _weights, vllm_loader

HIDDEN, HEADS, KV_HEADS, HEAD, FFN, VOCAB = 32, 4, 2, 8, 48, 64

# the parameters (and buffers) the model's loaders were called for, in
# order; a test clears it before the load it looks at
LOADED: list = []


def default_loader(param, weight):
    assert param.shape == weight.shape
    LOADED.append(param)
    param.data.copy_(weight)


class Linear(nn.Module):
    """Column/row-parallel linear at one rank: a plain copy.  @strided:
    its weight is a transposed view (not contiguous)."""

    def __init__(self, rows, cols, dtype=torch.float32, strided=False):
        super().__init__()
        w = torch.empty(cols, rows, dtype=dtype).t() if strided else \
            torch.empty(rows, cols, dtype=dtype)
        self.weight = nn.Parameter(w, requires_grad=False)
        self.weight.output_dim = 0
        self.weight.weight_loader = self.weight_loader

    def weight_loader(self, param, weight):
        assert param.shape == weight.shape
        LOADED.append(param)
        param.data.copy_(weight)


class Merged(Linear):
    """gate/up stacked: shard i at rows sum(output_sizes[:i])."""

    def __init__(self, sizes, cols):
        super().__init__(sum(sizes), cols)
        self.output_sizes = sizes

    def weight_loader(self, param, weight, shard):
        off = sum(self.output_sizes[:shard])
        LOADED.append(param)
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
        LOADED.append(param)
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
        LOADED.append(param)
        param.data[:weight.shape[0]].copy_(weight)
        param.data[weight.shape[0]:].fill_(0)


class Custom(Linear):
    """A loader the table does not know (it scales); @broken: it refuses
    the tensor, as vLLM's loaders do on a shape they do not expect."""

    broken = False

    def weight_loader(self, param, weight):
        if self.broken:
            raise ValueError(f"shape {tuple(weight.shape)} does not fit")
        LOADED.append(param)
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
    transposes first, one it loads after its loop, one whose parameter is
    not contiguous, a loader that fails."""

    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                              "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, tied=False, pad=1, transpose=False, late=False,
                 strided=False, broken=False):
        super().__init__()
        self.embed_tokens = Embedding(VOCAB, HIDDEN, pad)
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.norm = Norm(HIDDEN)
        self.tied, self.transpose, self.late = tied, transpose, late
        self.lm_head = self.embed_tokens if tied else Linear(VOCAB, HIDDEN)
        self.proj = Linear(FFN, HIDDEN, strided=strided)
        self.half = Linear(HIDDEN, HIDDEN, torch.float16)
        self.custom = Custom(HIDDEN, HIDDEN)
        self.custom.broken = broken
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
# the checkpoint tensors the default model takes direct
DIRECT = LAYER | {"embed_tokens.weight", "norm.weight", "lm_head.weight",
                  "proj.weight"}
# the targets it loads through its loaders: a converted dtype, an unknown
# loader, a buffer (the rotary tables it leaves out)
THROUGH_LOADERS = {"half.weight", "custom.weight", "scale"}


def state(tied=False, half_k=False, seed=0):
    """A checkpoint's tensors for Model(), by name."""
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


def save(sd, d, shards=3):
    """@sd as @shards safetensors files in the new folder @d; their
    paths."""
    d.mkdir()
    names = sorted(sd)
    paths = []
    for s in range(shards):
        part = {n: sd[n].contiguous() for n in names[s::shards]}
        paths.append(str(d / f"m-{s}.safetensors"))
        save_file(part, paths[-1])
    return paths


def run_pass(model, paths, dev, threads=None, last=None, files=None):
    """What the vLLM loader does: (what load_weights returned, the pass),
    or (None, the pass) when the pass gave up (its reason says why).
    @last, a one-item list, gets the tensor being loaded when a loader
    fails; @files: the headers of @paths, when read already."""
    if files is None:
        files = _weights.headers(paths)
    opts = vllm_loader.options({"threads": threads} if threads else None)
    LOADED.clear()
    return vllm_loader._direct(model, files, dev, opts,
                               last if last is not None else [None],
                               lambda: None, KINDS)


def reference(sd, where, **kw):
    """A model loaded by its own loaders from @sd, and what its
    load_weights returned."""
    want = Model(**kw).to(where)
    return want, want.load_weights(sd.items())


def assert_same(want, model):
    """Every parameter and buffer of @model equals @want's."""
    for (name, a), (_, b) in zip(
            list(want.named_parameters()) + list(want.named_buffers()),
            list(model.named_parameters()) + list(model.named_buffers())):
        assert torch.equal(a, b), name


def loaded_through(model):
    """The names of @model's parameters and buffers that its loaders
    filled since LOADED was cleared."""
    names = {id(t): n for n, t in list(model.named_parameters()) +
             list(model.named_buffers())}
    return {names[id(t)] for t in LOADED}


def file_bytes(path, f, info):
    """The bytes the checkpoint file @path holds for tensor @info of its
    header @f, read plainly."""
    with open(path, "rb") as fh:
        fh.seek(f.data_start + info.begin)
        return fh.read(info.end - info.begin)


def param_bytes(part):
    """The bytes of the parameter memory a direct read of @part filled."""
    b = _direct.as_bytes(part.tensor)[part.offset:part.offset + part.nbytes]
    return b.cpu().numpy().tobytes()
