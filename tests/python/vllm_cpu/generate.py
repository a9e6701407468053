"""Greedy tokens from vLLM for one checkpoint and load format (a child
process of test_vllm_cpu.py; prints one JSON line).

    python generate.py MODEL_DIR LOAD_FORMAT [EXTRA_CONFIG_JSON]
"""

import json
import os
import sys

PROMPTS = [[1, 17, 83, 5, 220, 9], [1, 400, 12, 3], [1, 2, 3, 4, 5, 6, 7]]


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model, fmt = sys.argv[1], sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    kw = {"model_loader_extra_config": extra} if extra else {}
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float32",
              enforce_eager=True, max_model_len=128, max_num_seqs=4,
              seed=0, load_format=fmt, **kw)
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True,
                            detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS],
                        params)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    print("TOKENS " + json.dumps({"pid": os.getpid(), "tokens": tokens}),
          flush=True)


if __name__ == "__main__":
    main()
