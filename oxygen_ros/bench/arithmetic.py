"""The least arithmetic a workload needs, and the fastest fp32 matrix products this process gets: a compute bound.

Batch-1 decode is bounded by memory (``bandwidth``); many sequences decoding together read each weight once for all
of them and are bounded by arithmetic instead.  A workload's floor is the multiply-adds no engine can skip: every
projection and the LM head for each token computed once (a prefix the prompts share counted once, as a prefix cache
gives it), the head only where a token is sampled, and causal attention over exactly the keys each token sees.  Norms,
RoPE, softmax and sampling are left out, so the floor is below the truth.  Divided by the best fp32 product rate
measured here (oneDNN's products at the model's own shapes, several rounds, the fastest kept: this VM's speed moves in
minutes), it is the least time the workload can take in fp32 on this machine.
"""

import time

import torch

from oxygen_ros.models.args import LlamaArgs

PROBE_ROWS = (512, 64)  # the rows of a prefill chunk and of a wide decode step


def token_flops(args: LlamaArgs, keys: int, logits: bool) -> int:
    """Floating-point operations (a multiply-add is two) of one token through the decoder: its projections, its
    attention over ``keys`` keys (itself included) in every layer, and the LM head if its logits are needed."""
    attention = 2 * args.num_heads * args.head_dim * keys  # q . k and the weighted sum of v, per key and query head
    head = 2 * args.vocab_size * args.hidden_size if logits else 0
    return 2 * args.num_layers * (args.layer_weights() + attention) + head


def generation_flops(args: LlamaArgs, prompts: list[list[int]], new_tokens: int) -> int:
    """The operations of prefilling ``prompts`` (each distinct prefix once) and sampling ``new_tokens`` tokens for each:
    the prompt's last position gives the first token, then ``new_tokens - 1`` decode steps."""
    total, previous = 0, []
    for prompt in sorted(prompts):  # a sorted prompt shares its longest cached prefix with the one before it
        shared = next((i for i, (a, b) in enumerate(zip(prompt, previous)) if a != b), min(len(prompt), len(previous)))
        shared = min(shared, len(prompt) - 1)  # the last position is computed for its logits even if seen before
        total += sum(token_flops(args, t + 1, t == len(prompt) - 1) for t in range(shared, len(prompt)))
        total += sum(token_flops(args, len(prompt) + t + 1, True) for t in range(new_tokens - 1))
        previous = prompt
    return total


def gemm_flops_per_s(args: LlamaArgs, repeats: int = 5) -> float:
    """The fastest fp32 rate of torch's products at the model's widest shape (hidden -> intermediate) over
    ``PROBE_ROWS`` rows, with torch's threads (what the engine gets)."""
    weight = torch.randn(args.intermediate_size, args.hidden_size)
    best = 0.0
    for rows in PROBE_ROWS:
        x = torch.randn(rows, args.hidden_size)
        calls = max(1, (1 << 31) // (2 * rows * weight.numel()))  # ~2 GFLOP a round
        x @ weight.T  # warm up
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                x @ weight.T
            best = max(best, 2 * rows * weight.numel() * calls / (time.perf_counter() - start))
    return best
