"""A transformers checkpoint through load_safetensors and save_safetensors
on a GPU: the reloaded model computes the original's logits exactly."""

from __future__ import annotations

import pytest

import phxio

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or phxio.default_kind()[0] != "cuda",
    reason="needs torch with CUDA, transformers and PHX_DEVICE=cuda")


def llama(seed: int, config=None):
    """A small Llama-style model on the GPU, weights from @seed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if config is None:
        config = LlamaConfig(hidden_size=256, intermediate_size=688,
                             num_hidden_layers=4, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=1024,
                             tie_word_embeddings=False,
                             attn_implementation="eager")
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    return model.eval(), config


def logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def inputs():
    g = torch.Generator(device="cuda").manual_seed(5)
    return torch.randint(0, 1024, (2, 19), device="cuda", generator=g)


def test_transformers_sharded_checkpoint(scratch):
    model, config = llama(0)
    model.save_pretrained(str(scratch), max_shard_size="1MB")
    shards = sorted(scratch.glob("*.safetensors"))
    assert len(shards) > 3 and (scratch /
                                "model.safetensors.index.json").exists()
    want = logits(model, inputs())

    sd = phxio.load_safetensors(scratch, device="cuda:0")
    assert all(t.is_cuda for t in sd.values())
    fresh, _ = llama(1, config)
    assert not torch.equal(logits(fresh, inputs()), want)
    fresh.load_state_dict(sd, strict=True)
    assert torch.equal(logits(fresh, inputs()), want)

    # a tensor-parallel style part: only layer 1, nothing else read
    part = phxio.load_safetensors(scratch, device="cuda:0",
                                    select="model.layers.1.")
    assert part and all(k.startswith("model.layers.1.") for k in part)
    for k, t in part.items():
        assert torch.equal(t, sd[k]), k


def test_save_then_transformers_loads(scratch):
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    model, config = llama(2)
    want = logits(model, inputs())
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    files = phxio.save_safetensors(sd, scratch / "model.safetensors",
                                     metadata={"format": "pt"},
                                     max_shard_size="2MB")
    assert files[-1].endswith("model.safetensors.index.json")
    config.save_pretrained(str(scratch))
    for f in files[:-1]:
        for k, t in load_file(f, device="cuda:0").items():
            assert torch.equal(t, sd[k]), k
    again = LlamaForCausalLM.from_pretrained(
        str(scratch), attn_implementation="eager").to("cuda").eval()
    for k, t in again.state_dict().items():
        assert torch.equal(t, sd[k]), k
    # from_pretrained builds the model its own way (kernels may differ in
    # the last bits): the weights are exact, the logits within rounding
    torch.testing.assert_close(logits(again, inputs()), want,
                               rtol=1e-5, atol=1e-5)
    back = phxio.load_safetensors(scratch, device="cuda:0")
    assert set(back) == set(sd)
    for k, t in back.items():
        assert torch.equal(t, sd[k]), k
