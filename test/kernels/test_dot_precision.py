"""What tf32 dots cost the paged decode kernel on a GPU (the interpreter computes every dot in fp32, so the cost is
measured here in torch): bf16 queries and K/V codes in bf16, fp16 or fp8 are exact in tf32, so only the
probabilities lose bits (a tf32 dot truncates an fp32 operand to 11 significant bits, toward zero), and the attention
output moves less than the bf16 rounding the kernel applies to it anyway; int8 keys enter the dot times their bf16
channel scales and lose less than their int8 rounding cost them. fp16 queries (an fp16 output, rounded 8x finer) and
fp32 queries or pools keep ieee dots (``dot_precision``)."""

import pytest
import torch

from oxygen_ros.kernels.quant import dequantize, quantize, quantize_channels
from oxygen_ros.kernels.triton_impl.paged_decode import dot_precision


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> tf32 (10 explicit mantissa bits) as the tensor cores read an fp32 operand a plain tf32 dot gives them:
    the low 13 bits dropped (truncation toward zero; Triton inserts no rounding conversion)."""
    return (x.float().contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def test_the_codes_the_dots_read_are_exact_in_tf32():
    x = torch.randn(4096) * 3
    for dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn):  # fp16 codes: 11 significant bits, as tf32
        values = x.clamp(-448, 448).to(dtype).float()
        assert torch.equal(tf32(values), values), dtype
    codes = torch.arange(-127, 128, dtype=torch.float32)  # int8 codes: their scales multiply after the dot
    assert torch.equal(tf32(codes), codes)
    assert not torch.equal(tf32(x), x)  # fp32 values are not: fp32 queries and pools keep ieee dots


def test_tf32_moves_int8_keys_times_their_channel_scales_by_under_a_quarter_of_the_int8_rounding_bound():
    """int8 keys enter the dot times their bf16 channel scales, which tf32 does not hold exactly; truncating a value
    |x| <= 127 scale to 11 significant bits moves it by under 127 / 1024 < 1/8 of a scale, a quarter of the half
    scale the rounding to its code may have moved it: tf32 adds little to what int8 already costs."""
    torch.manual_seed(0)
    k = torch.randn(64, 16, 2, 128) * (0.5 + 3 * torch.rand(1, 1, 2, 128))  # [blocks, tokens, kv-heads, channels]
    codes, scales = quantize_channels(k)
    values = codes.float() * scales.float()
    assert not torch.equal(tf32(values), values)
    truncation, rounding = (tf32(values) - values).abs(), (values - k).abs()
    assert (truncation < scales.float() / 8).all() and (rounding <= scales.float() / 2 + 1e-6).all()
    assert truncation.mean() < rounding.mean() / 4, (float(truncation.mean()), float(rounding.mean()))
    assert dot_precision(torch.bfloat16, torch.int8) == dot_precision(torch.bfloat16, torch.float8_e4m3fn) == "tf32"
    assert dot_precision(torch.float16, torch.int8) == dot_precision(torch.bfloat16, torch.float32) == "ieee"


@pytest.mark.parametrize("storage", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
@pytest.mark.parametrize("head_dim", [64, 256])
def test_tf32_dots_move_the_output_less_than_its_bf16_rounding(storage, head_dim):
    torch.manual_seed(head_dim)
    heads, tokens = 8, 300
    q = torch.randn(heads, head_dim).to(torch.bfloat16).float()
    k, v = (torch.randn(tokens, 1, head_dim) for _ in "kv")
    scale = torch.full((1,), 0.05) if storage == torch.float8_e4m3fn else None
    (k_codes, k_scale), (v_codes, v_scale) = (quantize(x, storage, scale) for x in (k, v))
    k_scale, v_scale = (s if s is not None else scale for s in (k_scale, v_scale))
    k_vals, v_vals = (dequantize(c, s)[:, 0].double() for c, s in ((k_codes, k_scale), (v_codes, v_scale)))
    sm_scale = head_dim**-0.5
    exact = torch.softmax(q.double() @ k_vals.T * sm_scale, dim=-1) @ v_vals

    # the kernel: codes into the dots, scales on score / probability columns; tf32 operands, fp32 accumulation
    ks = torch.ones(tokens) if k_scale is None else k_scale.reshape(-1).expand(tokens)
    vs = torch.ones(tokens) if v_scale is None else v_scale.reshape(-1).expand(tokens)
    k_in, v_in = (c[:, 0].float() for c in (k_codes, v_codes))
    scores = (tf32(q) @ tf32(k_in).T) * (ks * sm_scale)
    p = torch.softmax(scores, dim=-1)
    out = tf32(p * vs) @ tf32(v_in)
    tf32_error = (out.double() - exact).abs().max()
    bf16_rounding = (exact.to(torch.bfloat16).double() - exact).abs().max()
    assert tf32_error < bf16_rounding, (float(tf32_error), float(bf16_rounding))
