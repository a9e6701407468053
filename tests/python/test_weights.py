"""iter_safetensors(): a checkpoint in bounded groups (vLLM's loader)."""

from __future__ import annotations

import json

import pytest

import phxio
from phxio import _weights

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402


def _checkpoint(d, shards=4, per=6, rows=256):
    d.mkdir()
    wmap = {}
    g = torch.Generator().manual_seed(1)
    for s in range(shards):
        part = {}
        for i in range(per):
            name = f"layers.{s}.w{i}"
            part[name] = torch.randn(rows, 128, generator=g).to(
                [torch.float32, torch.bfloat16, torch.float16][i % 3])
            wmap[name] = f"m-{s}.safetensors"
        save_file(part, str(d / wmap[name]))
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": wmap}))
    return d


def test_groups_are_bounded_and_exact(tmp_path):
    d = _checkpoint(tmp_path / "ck")
    want = {}
    for f in sorted(d.glob("*.safetensors")):
        want.update(load_file(f))
    total = sum(t.numel() * t.element_size() for t in want.values())
    group = 200 << 10
    dev = phxio.device("sim0")
    base = dev.query().used
    peak = 0
    report: dict = {}
    got = {}
    for name, t in _weights.iter_safetensors(d, dev, group_size=group,
                                             report=report):
        peak = max(peak, dev.query().used - base)
        got[name] = t.clone()  # what a weight loader does
        del t
    assert report["groups"] >= total // group
    assert report["tensors"] == len(want) and report["staged"] == 0
    # two groups at most (the one consumed, the one read ahead), each at
    # most one tensor past the bound, plus alignment
    biggest = max(t.numel() * t.element_size() for t in want.values())
    assert peak <= 2 * (group + biggest + (64 << 10)), (peak, total)
    assert peak < total
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert torch.equal(got[k].view(torch.uint8),
                           v.view(torch.uint8)), k


def test_files_replaced_after_their_headers_were_read(tmp_path):
    """The vLLM loader reads the headers, then (the direct pass off) the
    tensors group by group: files renamed over by others of the same
    layout in between are read as the files whose headers were read, and
    their descriptors are closed by close()."""
    d = _checkpoint(tmp_path / "ck")
    want = {}
    for f in sorted(d.glob("*.safetensors")):
        want.update(load_file(f))
    files = _weights.headers(d)
    new = tmp_path / "new"
    new.mkdir()
    for f in sorted(d.glob("*.safetensors")):
        save_file({k: torch.zeros_like(v) for k, v in load_file(f).items()},
                  str(new / f.name))
        (new / f.name).replace(f)
    got = {n: t.clone() for n, t in _weights.iter_files(
        files, "sim0", group_size=200 << 10)}
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert torch.equal(got[k].view(torch.uint8),
                           v.view(torch.uint8)), k
    assert all(f.fd is not None for f in files)
    _weights.close(files)
    assert all(f.fd is None and not f.held.open for f in files)


def test_select_and_missing(tmp_path):
    d = _checkpoint(tmp_path / "ck", shards=2)
    names = [n for n, _ in _weights.iter_safetensors(
        d, "sim0", select="layers.1.")]
    assert names and all(n.startswith("layers.1.") for n in names)
    with pytest.raises(phxio.SafetensorsError, match="no tensor named"):
        list(_weights.iter_safetensors(d, "sim0", select=["nope"]))


def test_missing_shard_names_the_index(tmp_path):
    d = _checkpoint(tmp_path / "ck", shards=2)
    (d / "m-1.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="m-1.safetensors"):
        list(_weights.iter_safetensors(d, "sim0"))


def test_vllm_options():
    from phxio import vllm_loader as v

    assert v.options(None)["group_size"] == _weights.DEFAULT_GROUP
    assert v.options({"group_size": "64MiB"})["group_size"] == 64 << 20
    assert v.options({"threads": 4, "tp_slices": False})["threads"] == 4
    assert v.options(None)["direct"] and v.options(None)["prepare"]
    assert v.options({"direct": False})["direct"] is False
    assert v.options({"prepare": False})["prepare"] is False
    for bad, what in [({"group_sise": 1}, "unknown option 'group_sise'"),
                      ({"group_size": "lots"}, "option group_size='lots'"),
                      ({"threads": 0}, "option threads=0"),
                      ({"tp_slices": "yes"}, "option tp_slices='yes'"),
                      ({"direct": 1}, "option direct=1: give true or "
                       "false"),
                      # not taken for 1 worker
                      ({"threads": True}, "option threads=True: give a "
                       "number of workers"),
                      ({"threads": 2.5}, "option threads=2.5"),
                      ({"threads": 65}, "option threads=65: give a number "
                       "of workers, 1 to 64"),
                      ({"threads": "1000000000"}, "option "
                       "threads='1000000000'"),
                      ({"group_size": "1XB"}, "option group_size='1XB'"),
                      ({"group_size": "-1"}, "option group_size='-1'"),
                      ('{"threads": 2}', "model_loader_extra_config is str "
                       "'{\"threads\": 2}': give a JSON object"),
                      ([("threads", 2)], "model_loader_extra_config is "
                       "list")]:
        with pytest.raises(ValueError, match=what):
            v.options(bad)


def test_rows_read_only_the_slice(tmp_path):
    d = _checkpoint(tmp_path / "ck", shards=1, per=3, rows=512)
    want = load_file(d / "m-0.safetensors")
    dev = phxio.Device("sim0")
    moved = sum(dev.stats()[k] for k in ("staged", "buffered", "p2p",
                                          "memcpy"))
    rows = {"layers.0.w0": (128, 256), "layers.0.w2": (0, 1)}
    got = phxio.load_safetensors(d, device=dev, framework="pt", rows=rows)
    after = sum(dev.stats()[k] for k in ("staged", "buffered", "p2p",
                                          "memcpy"))
    for name, (a, b) in rows.items():
        assert got[name].shape == want[name].shape
        assert torch.equal(got[name][a:b].view(torch.uint8),
                           want[name][a:b].view(torch.uint8)), name
    assert torch.equal(got["layers.0.w1"].view(torch.uint8),
                       want["layers.0.w1"].view(torch.uint8))
    full = sum(t.numel() * t.element_size() for t in want.values())
    part = (want["layers.0.w0"][128:256].numel() * 4 +
            want["layers.0.w1"].numel() * 2 + 128 * 2)
    # what was read: the slices and the whole tensor, give or take the
    # alignment of each range's start
    assert after - moved < full and after - moved <= part + 3 * 4096


class _P:
    def __init__(self, n, output_dim=0):
        self.shape = (n, 64)
        self.output_dim = output_dim


class ColumnParallelLinear:
    def __init__(self, n):
        self.weight = _P(n)
        self.bias = None


class MergedColumnParallelLinear(ColumnParallelLinear):
    def __init__(self, sizes, tp):
        super().__init__(sum(sizes) // tp)
        self.output_sizes = sizes


class QKVParallelLinear(ColumnParallelLinear):
    def __init__(self, heads, kv_heads, head, tp):
        self.num_heads = heads // tp
        self.num_kv_heads = max(1, kv_heads // tp)
        self.num_kv_head_replicas = max(1, tp // kv_heads)
        self.head_size = head
        super().__init__((self.num_heads + 2 * self.num_kv_heads) * head)


class RowParallelLinear:
    def __init__(self):
        self.weight = _P(64, output_dim=None)


class _Model:
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"],
                              "gate_up_proj": ["gate_proj", "up_proj"]}

    def __init__(self, tp):
        self.mods = {
            "layers.0.attn.qkv_proj": QKVParallelLinear(8, 2, 16, tp),
            "layers.0.mlp.gate_up_proj":
                MergedColumnParallelLinear([256, 256], tp),
            "layers.0.mlp.down_proj": RowParallelLinear(),
            "layers.0.mlp.proj": ColumnParallelLinear(96 // tp),
        }

    def named_modules(self):
        return iter(self.mods.items())


def test_tp_rows():
    from phxio._tp import tp_rows

    assert tp_rows(_Model(1), 1, 0) == {}
    r = tp_rows(_Model(4), 4, 3)
    # q: 2 of 8 heads of 16 per rank; k/v: 2 KV heads for 4 ranks, each
    # replicated twice: rank 3 has KV head 1
    assert r["layers.0.attn.q_proj.weight"] == (96, 128)
    assert r["layers.0.attn.k_proj.weight"] == (16, 32)
    assert r["layers.0.attn.v_proj.weight"] == (16, 32)
    assert r["layers.0.mlp.gate_proj.weight"] == (192, 256)
    assert r["layers.0.mlp.up_proj.weight"] == (192, 256)
    assert r["layers.0.mlp.proj.weight"] == (72, 96)
    assert not any("down_proj" in k for k in r)


class _Cfg:
    def __init__(self, model):
        self.model = str(model)
        self.revision = None
        self.quantization = None


class _Broken(torch.nn.Module):
    """A model whose weight loader refuses one tensor, as vLLM's do on a
    shape mismatch."""

    def __init__(self, bad):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.bad = bad

    def load_weights(self, weights):
        for name, t in weights:
            assert name != self.bad, f"shape {tuple(t.shape)} does not fit"
        return {"w"}


def test_vllm_loader_errors_name_file_and_tensor(tmp_path):
    pytest.importorskip("vllm")
    try:  # where vLLM 0.26 to 0.32 all export it
        from vllm.config import LoadConfig
    except ImportError:
        from vllm.config.load import LoadConfig

    from phxio import vllm_loader

    d = _checkpoint(tmp_path / "ck", shards=2)
    vllm_loader.register()
    loader = vllm_loader._loader_class(LoadConfig(load_format="phoenix"))
    with pytest.raises(RuntimeError,
                       match=r"m-1\.safetensors: tensor 'layers\.1\.w2': "
                       r"shape \(256, 128\)"):
        loader.load_weights(_Broken("layers.1.w2"), _Cfg(d))
    with pytest.raises(ValueError, match="no weight for parameter 'w2'"):
        class _Missing(_Broken):
            def __init__(self):
                super().__init__("none")
                self.w2 = torch.nn.Parameter(torch.zeros(1))
        loader.load_weights(_Missing(), _Cfg(d))
    with pytest.raises(ValueError, match="unknown option 'x'"):
        vllm_loader._loader_class(LoadConfig(
            load_format="phoenix", model_loader_extra_config={"x": 1}))


_PREPARE = """
import json, sys
import phxio
from phxio import _pipeline, _weights
d, threads = sys.argv[1], int(sys.argv[2])
dev = phxio.device("sim0")
out = {"open": dev.engine_stats()}
if threads:
    _pipeline.prepare(dev, threads)
out["prepared"] = dev.engine_stats()
got = dict(_weights.iter_safetensors(d, dev, threads=max(threads, 1)))
out["loaded"] = dev.engine_stats()
out["sum"] = float(sum(t.double().sum() for t in got.values()))
print(json.dumps(out))
"""


def test_prepare_builds_the_engines_the_load_borrows(tmp_path):
    """In fresh processes (a device's engines outlive every test's use
    of it): opening the device builds one engine, on its staging thread,
    and the load borrows it; prepare() builds the rest a load of several
    workers borrows."""
    import subprocess
    import sys

    d = _checkpoint(tmp_path / "ck")
    want = float(sum(t.double().sum() for f in sorted(d.glob("*.safetensors"))
                     for t in load_file(str(f)).values()))

    def run(threads):
        r = subprocess.run([sys.executable, "-c", _PREPARE, str(d),
                            str(threads)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.splitlines()[-1])

    cold = run(0)
    # the open's engine may still be on its way when asked
    assert cold["open"]["built"] <= 1 and cold["loaded"]["built"] == 1
    assert cold["sum"] == pytest.approx(want)
    for threads in (1, 3):
        st = run(threads)
        assert st["prepared"]["built"] == threads
        assert st["prepared"]["idle"] == threads
        assert st["prepared"]["staging_bytes"] > 0
        # the load borrowed the prepared engines and built none
        assert st["loaded"]["built"] == threads
        assert st["sum"] == pytest.approx(want)


@pytest.mark.parametrize("enabled", [True, False])
def test_weight_phase_holds_the_collector_and_restores_it(enabled):
    import gc

    from phxio import vllm_loader

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with vllm_loader._collector_held():
            assert not gc.isenabled()
        assert gc.isenabled() == enabled
        with pytest.raises(RuntimeError):
            with vllm_loader._collector_held():
                raise RuntimeError("a load that fails")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
