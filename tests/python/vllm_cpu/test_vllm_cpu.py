"""vLLM's load format "phoenix" in vLLM's CPU build, on the simulated device.

A tiny random Llama written by transformers (sharded, with its index) is
generated from greedily with load_format="safetensors" and "phoenix": the
tokens must be identical, with the tensors read straight into the
parameters (q/k/v and gate/up into their stacked ones) and with that off;
with the embedding's rows flipped (and the final norm in half precision,
which goes through its loader) they must not be, and must be
"safetensors"' tokens for that checkpoint; the format must be
found through the package's entry point in vLLM's own engine process
(multiprocessing on), and a checkpoint staged on phxfs must load from its
device memory.  Each generation runs in a child process (generate.py), as
a user's script would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("vllm")
from safetensors.torch import load_file, save_file  # noqa: E402

import phxio  # noqa: E402
from conftest import BUILD, phxfs_built, phxfs_mount  # noqa: E402

HERE = Path(__file__).resolve().parent
EMBED = "model.embed_tokens.weight"
NORM = "model.norm.weight"
DIRECT = re.compile(r"load format phoenix: direct: (\d+) tensors .* into "
                    r"(\d+) parameters, (\d+) of them packed from several "
                    r"tensors, (\d+) tensors copied from files staged on "
                    r"phxfs; (\d+) tensors through the model's weight "
                    r"loaders, (\d+) it left out")


def _write_llama(d: Path) -> None:
    # head_dim 64: one of the sizes vLLM's CPU attention supports
    cfg = transformers.LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    model.save_pretrained(d, max_shard_size="300KB", safe_serialization=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("llama") / "tiny-llama"
    _write_llama(d)
    assert (d / "model.safetensors.index.json").is_file()
    assert len(list(d.glob("*.safetensors"))) >= 3
    return d


@pytest.fixture(scope="module")
def flipped(ckpt, tmp_path_factory) -> Path:
    """The same checkpoint with the embedding's rows in reverse order, and
    the final norm stored in half precision (which vLLM's loader converts:
    a tensor that cannot be read direct)."""
    d = tmp_path_factory.mktemp("llama") / "tiny-llama-flipped"
    shutil.copytree(ckpt, d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    for name in (EMBED, NORM):
        shard = d / index["weight_map"][name]
        sd = load_file(shard)
        sd[name] = sd[name].flip(0).contiguous() if name == EMBED else \
            sd[name].half()
        save_file(sd, shard, metadata={"format": "pt"})
    return d


def _generate(model: Path, fmt: str, multiprocessing: bool = False,
              extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING=
               "1" if multiprocessing else "0", PHX_DEVICE="sim",
               TOKENIZERS_PARALLELISM="false")
    # the package comes from the installed wheel, as for a user
    for k in ("PYTHONPATH", "PHX_LIBRARY"):
        env.pop(k, None)
    args = [sys.executable, str(HERE / "generate.py"), str(model), fmt]
    if extra:
        args.append(json.dumps(extra))
    r = subprocess.run(args, capture_output=True, text=True, env=env,
                       timeout=600, cwd=tempfile.gettempdir())
    out = r.stdout + r.stderr
    line = next((ln for ln in r.stdout.splitlines()
                 if ln.startswith("TOKENS ")), None)
    assert r.returncode == 0 and line, \
        f"vLLM with load_format={fmt} failed ({r.returncode}):\n{out[-6000:]}"
    res = json.loads(line[len("TOKENS "):])
    res["log"] = out
    return res


@pytest.fixture(scope="module")
def reference(ckpt) -> list:
    return _generate(ckpt, "safetensors")["tokens"]


def _direct(res: dict, ckpt: Path) -> tuple[int, ...]:
    """(tensors read direct, parameters, packed ones, tensors copied from
    staged files, tensors through the loaders, tensors left out) from the
    loader's log."""
    m = DIRECT.search(res["log"])
    assert m, res["log"][-4000:]
    got = tuple(map(int, m.groups()))
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    assert got[0] + got[4] + got[5] == len(index["weight_map"])
    return got


def test_installed_from_the_wheel():
    assert "site-packages" in phxio.__file__, phxio.__file__
    assert "/_libs/" in phxio._lib.lib()._phx_path


def test_phoenix_tokens_equal_safetensors_in_engine_process(ckpt, reference):
    res = _generate(ckpt, "phoenix", multiprocessing=True)
    assert res["tokens"] == reference
    # loaded by the engine's own process, which found the format through
    # the package's entry point
    m = re.search(r"load format phoenix: \d+ tensors .* \(pid (\d+)\)",
                  res["log"])
    assert m, res["log"][-4000:]
    assert int(m.group(1)) != res["pid"]
    assert "Loading weights took" in res["log"]
    # the set-up ran beside model construction: the load built no engine
    m = re.search(r"load format phoenix: sim0 and its engines prepared in "
                  r"[\d.]+ s .* built (\d+) engines", res["log"])
    assert m, res["log"][-4000:]
    assert m.group(1) == "0"
    # every tensor straight into its parameter: the Llama's 2 layers'
    # q/k/v and gate/up each stacked into one
    tensors, params, packed, staged, rest, _ = _direct(res, ckpt)
    assert tensors > 0 and rest == 0 and staged == 0
    assert packed == 4 and params == tensors - 6


def test_loaders_alone_in_small_groups_give_the_same_tokens(ckpt,
                                                            reference):
    res = _generate(ckpt, "phoenix", extra={"group_size": "64KiB",
                                            "threads": 2, "direct": False})
    assert res["tokens"] == reference
    assert "load format phoenix: direct reads off: option direct is " \
        "false" in res["log"]
    m = re.search(r"the rest read in (\d+) groups", res["log"])
    assert m and int(m.group(1)) > 1, res["log"][-4000:]


def test_flipped_embedding_changes_tokens(flipped, reference):
    res = _generate(flipped, "phoenix")
    assert res["tokens"] != reference
    assert res["tokens"] == _generate(flipped, "safetensors")["tokens"]
    # the flipped embedding was among the tensors read direct, the norm
    # went through its loader
    assert _direct(res, flipped)[4] == 1


def test_bad_option_is_one_clear_error(ckpt):
    with pytest.raises(AssertionError) as e:
        _generate(ckpt, "phoenix", extra={"group_sise": 1})
    assert "unknown option 'group_sise'" in str(e.value)


def _mounted(r):
    assert r.returncode == 0, f"phx mount: {r.stderr.strip()}"


@pytest.fixture
def mount():
    if not phxfs_built():
        pytest.fail(f"phxfs is not built in {BUILD}: run make")
    env = dict(os.environ, PHX_DEVICE="sim")
    with phxfs_mount(env, "phx-vllm-mnt-", _mounted) as d:
        yield d


def test_staged_checkpoint_loads_from_device_memory(ckpt, reference, mount):
    dst = mount / "tiny-llama"
    r = subprocess.run([str(BUILD / "phx"), "cp", "-r", str(ckpt),
                        str(mount) + "/"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    nfiles = len(list(dst.glob("*.safetensors")))
    res = _generate(dst, "phoenix")
    assert res["tokens"] == reference
    # every shard used in place (test_staged.py proves that such a load
    # reads none of the weights through the mount)
    m = re.search(r"load format phoenix: .* from (\d+) files .* (\d+) files "
                  r"staged on phxfs used in place, the rest read in (\d+) "
                  r"groups", res["log"])
    assert m, res["log"][-4000:]
    assert m.groups() == (str(nfiles), str(nfiles), "0")
    # nothing to read: the loaders get views of the staged memory
    assert "load format phoenix: direct reads off: every file is staged " \
        "on phxfs on" in res["log"], res["log"][-4000:]
