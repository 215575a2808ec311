"""The compute bound's operation count against torch's own FLOP counter over transformers' Llama (eager attention:
every product a matmul it counts), and the prefix a prefix cache shares counted once."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache, LlamaConfig

from oxygen_ros.bench.arithmetic import gemm_flops_per_s, generation_flops, token_flops
from oxygen_ros.models.args import LlamaArgs
from test.hf_reference import random_causal_lm

CONFIG = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=6,
                     num_key_value_heads=2, head_dim=8, tie_word_embeddings=False, attn_implementation="eager")
ARGS = LlamaArgs(vocab_size=97, hidden_size=48, intermediate_size=80, num_layers=3, num_heads=6, num_kv_heads=2,
                 head_dim=8)


def counted(model, ids: list[int], cache: DynamicCache, logits_to_keep: int) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=logits_to_keep)
    return counter.get_total_flops()


@pytest.mark.parametrize("context", [1, 7, 40])
def test_a_decode_step_costs_what_transformers_computes(context):
    model = random_causal_lm(CONFIG, seed=3, std=0.1)
    cache = DynamicCache()
    with torch.no_grad():
        model(torch.arange(context)[None], cache=cache, use_cache=True)
    # one new token attends the context and itself: exactly the keys eager attention multiplies
    assert counted(model, [5], cache, logits_to_keep=1) == token_flops(ARGS, context + 1, logits=True)


def test_a_prefill_is_counted_causally_with_one_row_of_logits():
    model = random_causal_lm(CONFIG, seed=3, std=0.1)
    ids = list(range(11, 31))
    full = counted(model, ids, DynamicCache(), logits_to_keep=1)
    # eager attention multiplies every query by all 20 keys and masks half after; the floor counts what is seen
    masked = 2 * ARGS.num_layers * 2 * ARGS.num_heads * ARGS.head_dim * sum(len(ids) - t - 1 for t in range(len(ids)))
    assert generation_flops(ARGS, [ids], new_tokens=1) == full - masked


def test_a_shared_prefix_is_computed_once_and_every_answer_decodes():
    prefix, a, b = list(range(50)), [60, 61], [60, 62, 63]
    # prompts in any order: the prefix once, a's tail, b's tail after the shared [60]
    got = generation_flops(ARGS, [prefix + b, prefix + a], new_tokens=3)
    want = sum(token_flops(ARGS, t + 1, t == 51) for t in range(52))  # prefix + a, logits at a's last token
    want += sum(token_flops(ARGS, t + 1, t == 52) for t in range(51, 53))  # b's 62, 63 (60 is a's)
    want += sum(token_flops(ARGS, n + t + 1, True) for n in (52, 53) for t in range(2))  # two decode steps each
    assert got == want
    # a prompt asked twice still computes its last position for its own first token
    assert generation_flops(ARGS, [a, a], 1) == token_flops(ARGS, 1, False) + 2 * token_flops(ARGS, 2, True)


def test_the_product_rate_is_measured():
    rate = gemm_flops_per_s(ARGS, repeats=1)
    assert 1e8 < rate < 1e14  # from a slow interpreter-free CPU to far past any CPU here
