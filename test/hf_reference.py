"""The independent reference for token-for-token tests: transformers running SmolLM2 from the same GGUF file.

transformers dequantizes and un-permutes the GGUF with its own code, so agreement with it checks our loader and
model rather than repeating them.
"""

from functools import cache

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from oxygen_ros.models.gguf_loader import smollm2_gguf_path


@cache
def hf_smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """(model, tokenizer) loaded by transformers from the packaged GGUF, fp32, in eval mode; loaded once (~20 s)."""
    path = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model.eval(), tokenizer


@torch.inference_mode()
def hf_greedy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt_ids: list[int], max_new_tokens: int
) -> list[int]:
    """Greedy continuation of `prompt_ids`: only the new tokens, ending with EOS (included) if it was reached."""
    input_ids = torch.tensor([prompt_ids])
    output = model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    return output[0, len(prompt_ids) :].tolist()


def random_causal_lm(config, seed: int, std: float) -> PreTrainedModel:
    """transformers' own model class for ``config`` with seeded random weights that matter: norms ~N(1, 0.1),
    embeddings ~N(0, 1), every other weight ~N(0, ``std``) (its default 0.02 would leave near-ties in the logits)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(1.0, 0.1)
                else:
                    p.normal_(std=1.0 if "embed" in name else std)
    return model
