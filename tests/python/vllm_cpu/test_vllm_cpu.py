"""vLLM's load format "phoenix" in vLLM's CPU build, on the simulated device.

A tiny random Llama written by transformers (sharded, with its index) is
generated from greedily with load_format="safetensors" and "phoenix": the
tokens must be identical; with the embedding's rows flipped they must not
be; the format must be found through the package's entry point in vLLM's
own engine process (multiprocessing on), and a checkpoint staged on
phxfs must load from its device memory.  Each generation runs in a child
process (generate.py), as a user's script would.
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
    """The same checkpoint with the embedding's rows in reverse order."""
    d = tmp_path_factory.mktemp("llama") / "tiny-llama-flipped"
    shutil.copytree(ckpt, d)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    shard = d / index["weight_map"][EMBED]
    sd = load_file(shard)
    sd[EMBED] = sd[EMBED].flip(0).contiguous()
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


def test_small_groups_give_the_same_tokens(ckpt, reference):
    res = _generate(ckpt, "phoenix", extra={"group_size": "64KiB",
                                            "threads": 2})
    assert res["tokens"] == reference


def test_flipped_embedding_changes_tokens(flipped, reference):
    res = _generate(flipped, "phoenix")
    assert res["tokens"] != reference
    assert res["tokens"] == _generate(flipped, "safetensors")["tokens"]


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
