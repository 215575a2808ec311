"""The KV-quantization design study of docs/quantization.md: which 8-bit layouts could get int8 KV near bf16's error.

Two parts, on SmolLM2 and the first 1024 tokens of the quant suite's text (CPU, fp32):

1. relative error (sum of squared errors / sum of squares) of 8-bit symmetric codes with exact scales over the text's
   real K/V, per grouping (also some over the 0.57x byte ceiling, and a Hadamard rotation of each head), against
   bf16's rounding;
2. the teacher-forced KL those layouts cause when K and V are fake-quantized on their way into an fp32 pool (here a
   chunk's own tokens are read back from the pool too, so every KL is ~3.5x the suite's: compare rows, not runs);
3. the same with a sequence's first tokens (the attention sink most heads weigh heavily) kept exact.

    .venv/bin/python scripts/kv_quant_study.py        # ~2 min on 2 CPU cores
"""

from collections.abc import Callable

import torch

from oxygen_ros.bench.quant_distortion import PER_CHANNEL, PER_TOKEN, relative_error, text_kv, uniform_code
from oxygen_ros.bench.quant_text import TextReference, text_token_ids
from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.kv import kv_cache
from oxygen_ros.models.registry import load_model

BLOCK = 16
Quantizer = Callable[[torch.Tensor], torch.Tensor]


def per_token(x: torch.Tensor) -> torch.Tensor:
    return uniform_code(x, 8, PER_TOKEN)


def exact(x: torch.Tensor) -> torch.Tensor:
    return x


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()


def per_channel(scale: Quantizer | None = None) -> Quantizer:
    """One scale per (group, head, channel) over the group's tokens: ``[g, tokens, heads, dim]``."""
    return lambda g: uniform_code(g, 8, PER_CHANNEL, scale)


def in_groups(tokens: int, quantize: Callable[[torch.Tensor], torch.Tensor]) -> Quantizer:
    """``quantize`` over groups of ``tokens`` consecutive tokens ``[g, tokens, heads, dim]`` of ``[T, heads, dim]``
    (zero-padded to a whole block: zeros move no absmax)."""
    def apply(x: torch.Tensor) -> torch.Tensor:
        pad = (-x.shape[0]) % BLOCK
        padded = torch.cat([x, x.new_zeros(pad, *x.shape[1:])]).view(-1, tokens, *x.shape[1:])
        return quantize(padded).reshape(-1, *x.shape[1:])[: x.shape[0]]
    return apply


def e4m3_under_block_base(tokens: int) -> Quantizer:
    """Per channel over ``tokens`` tokens, one-byte e4m3 scales (rounded up) under a bf16 base per block and head."""
    def apply(x: torch.Tensor) -> torch.Tensor:
        pad = (-x.shape[0]) % BLOCK
        padded = torch.cat([x, x.new_zeros(pad, *x.shape[1:])])
        blocks = padded.view(-1, BLOCK, *x.shape[1:])
        base = (blocks.abs().amax(dim=(1, 3), keepdim=True).clamp_min(1e-30) / 127 / 448).bfloat16().float()
        base = base.repeat_interleave(BLOCK // tokens, 0)
        groups = padded.view(-1, tokens, *x.shape[1:])

        def e4m3(step: torch.Tensor) -> torch.Tensor:
            return (step / base * 1.0625).clamp(max=448).to(torch.float8_e4m3fn).float() * base

        out = uniform_code(groups, 8, PER_CHANNEL, e4m3)
        return out.reshape(-1, *x.shape[1:])[: x.shape[0]]
    return apply


def hadamard(dim: int) -> torch.Tensor:
    h = torch.ones(1, 1)
    while h.shape[0] < dim:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)])
    return h / dim**0.5


def relative_errors(k: torch.Tensor, v: torch.Tensor) -> None:
    """Part 1: K/V whole blocks ``[n, 16, heads, dim]``, errors relative to bf16's."""
    rotation = hadamard(k.shape[-1])
    for plane, x in (("keys", k), ("values", v)):
        rounded = relative_error(x, bf16(x))
        n, bs, h, d = x.shape
        layouts = {
            "per token-head": uniform_code(x, 8, PER_TOKEN),
            "per channel over 16 tokens": uniform_code(x, 8, PER_CHANNEL),
            "per (token, 16 channels)": uniform_code(x.view(n, bs, h, d // 16, 16), 8, PER_TOKEN).view_as(x),
            "per (token, 8 channels)": uniform_code(x.view(n, bs, h, d // 8, 8), 8, PER_TOKEN).view_as(x),
            "per channel over 4 tokens": uniform_code(x.view(n * 4, bs // 4, h, d), 8, PER_CHANNEL).view_as(x),
            "Hadamard, per token-head": uniform_code(x @ rotation, 8, PER_TOKEN) @ rotation.T,
            "Hadamard, per channel over 16 tokens": uniform_code(x @ rotation, 8, PER_CHANNEL) @ rotation.T,
        }
        print(f"{plane}: bf16 relative error {rounded:.3g}")
        for name, stored in layouts.items():
            print(f"  8-bit {name:38s} {relative_error(x, stored) / rounded:6.2f}x bf16's")


def kl_by_plane(engine: Engine, reference: TextReference) -> None:
    """Part 2: KL of fake-quantized K and V (values per token unless named)."""
    keys16 = in_groups(BLOCK, per_channel(bf16))
    rows: dict[str, tuple[Quantizer, Quantizer]] = {
        "bf16 keys and values": (bf16, bf16),
        "int8 as shipped (keys per channel / 16 tokens, values per token)": (keys16, per_token),
        "int8 keys, exact values": (keys16, exact),
        "exact keys, int8 values": (exact, per_token),
        "int8 keys, values per channel / 16 tokens": (keys16, in_groups(BLOCK, per_channel())),
        "exact keys, values per channel / 16 tokens": (exact, in_groups(BLOCK, per_channel())),
        "keys per channel / 8 tokens, bf16 scales": (in_groups(8, per_channel(bf16)), per_token),
        "keys per channel / 8 tokens, e4m3 scales": (e4m3_under_block_base(8), per_token),
        "keys per channel / 4 tokens, e4m3 scales": (e4m3_under_block_base(4), per_token),
    }
    write = kv_cache.LayerKV.write
    try:
        for name, (keys, values) in rows.items():
            kv_cache.LayerKV.write = lambda self, k, v, writes, keys=keys, values=values: write(
                self, keys(k.float()), values(v.float()), writes)
            score = reference.score(engine)
            print(f"  {name:66s} KL {score.kl:.2e}  top-1 {score.top1:.4f}")
    finally:
        kv_cache.LayerKV.write = write


def kl_with_exact_sink(engine: Engine, reference: TextReference) -> None:
    """Part 3: the shipped int8 with a sequence's first tokens (the attention sink) kept exact in every layer."""
    keys, write = in_groups(BLOCK, per_channel(bf16)), kv_cache.LayerKV.write
    for sink in (1, 16, 64):
        written: dict[int, int] = {}  # tokens each layer has stored so far

        def store(self, k, v, writes, sink=sink, written=written):
            k, v = k.float(), v.float()
            kq, vq = keys(k), per_token(v)
            exact_rows = max(0, min(sink - written.get(id(self), 0), k.shape[0]))
            kq[:exact_rows], vq[:exact_rows] = k[:exact_rows], v[:exact_rows]
            written[id(self)] = written.get(id(self), 0) + k.shape[0]
            write(self, kq, vq, writes)

        kv_cache.LayerKV.write = store
        try:
            score = reference.score(engine)
        finally:
            kv_cache.LayerKV.write = write
        name = f"int8 as shipped, the first {sink} token{'s' if sink > 1 else ''} exact"
        print(f"  {name:66s} KL {score.kl:.2e}  top-1 {score.top1:.4f}")


def main() -> None:
    bundle = load_model("smollm2-135m", torch.device("cpu"), torch.float32)
    engine = Engine(EngineConfig(kv_dtype="fp32", kv_cache_bytes=256 << 20), bundle=bundle)
    ids = text_token_ids(engine, 1024)
    relative_errors(*text_kv(engine, ids, 32))
    print("teacher-forced KL against fp32 KV (1024 tokens, 32 a pass):")
    reference = TextReference.of(engine, ids, 32)
    kl_by_plane(engine, reference)
    kl_with_exact_sink(engine, reference)


if __name__ == "__main__":
    main()
