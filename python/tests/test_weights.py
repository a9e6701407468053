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
    for bad, what in [({"group_sise": 1}, "unknown option 'group_sise'"),
                      ({"group_size": "lots"}, "option group_size='lots'"),
                      ({"threads": 0}, "option threads=0"),
                      ({"tp_slices": "yes"}, "option tp_slices='yes'")]:
        with pytest.raises(ValueError, match=what):
            v.options(bad)
