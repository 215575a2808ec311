"""The streamed matrix-vector product (decode steps of one to eight sequences on a CPU) against fp64 torch, over shapes
that end inside an eight-row block and inside a 16-float vector, one to eight input rows, with fp32, bf16, int8
weights (a scale per 32 weights of a row) and GGUF Q4_1 blocks (gguf-py's quantizer and dequantizer, llama.cpp's
reference ports, as the yardstick), and the packed layer's choice between it and oneDNN, including bf16, int8 and Q4_1
weights under fp32 compute."""

import numpy as np
import pytest
import torch

from oxygen_ros.kernels import cpu_matvec
from oxygen_ros.layers.packed_linear import PackedLinear, can_pack, can_pack_bf16

matvec = cpu_matvec.matvec_kernel()
needs_kernel = pytest.mark.skipif(
    matvec is None, reason="the CPU decode kernels do not run here: no AVX-512, AVX2 or NEON, no C compiler, or disabled"
)


@needs_kernel
@pytest.mark.parametrize("n,k", [(1, 16), (7, 5), (8, 16), (37, 50), (576, 576), (1536, 576), (576, 1536), (3, 1001)])
def test_matvec_equals_fp64(n, k):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    weight, x = torch.randn(n, k, generator=gen), torch.randn(k, generator=gen)
    out = matvec(weight, x)
    assert out.shape == (n,) and out.dtype == torch.float32
    reference = weight.double() @ x.double()
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * k**0.5, rtol=0)  # fp32 sums of k terms


@needs_kernel
@pytest.mark.parametrize("n,k", [(1, 16), (7, 5), (37, 50), (960, 576), (3, 1001)])
def test_matvec_widens_bf16_weights_exactly(n, k):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    weight, x = torch.randn(n, k, generator=gen).bfloat16(), torch.randn(k, generator=gen)
    out = matvec(weight, x)
    assert out.dtype == torch.float32
    reference = weight.double() @ x.double()  # bf16 -> fp64 is exact: only the fp32 sums differ
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * k**0.5, rtol=0)
    assert torch.equal(out, matvec(weight.float(), x))  # the same products as the widened fp32 weight


@needs_kernel
@pytest.mark.parametrize("m", [2, 3, 5, 8])
@pytest.mark.parametrize("n,k", [(7, 5), (37, 50), (960, 576), (576, 1536), (3, 1001)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matvec_of_several_input_rows_equals_fp64(m, n, k, dtype):
    gen = torch.Generator().manual_seed(m * 100_000 + n * 1000 + k)
    weight, x = torch.randn(n, k, generator=gen).to(dtype), torch.randn(m, k, generator=gen)
    out = matvec(weight, x)
    assert out.shape == (m, n) and out.dtype == torch.float32
    reference = x.double() @ weight.double().T
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * k**0.5, rtol=0)


@needs_kernel
@pytest.mark.parametrize("shape", [(0, 32), (cpu_matvec.STREAMED_MAX_INPUTS + 1, 32), (2, 3, 32), (2, 16)])
def test_matvec_refuses_inputs_it_does_not_serve(shape):
    with pytest.raises(ValueError, match="1 to 8 contiguous fp32 rows"):
        matvec(torch.randn(16, 32), torch.randn(shape))


@needs_kernel
def test_matvec_uses_torchs_thread_count():
    weight, x = torch.randn(4096, 576), torch.randn(576)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = matvec(weight, x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, matvec(weight, x))  # rows are independent: the split over threads changes nothing


@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="oneDNN packing is unavailable")
def test_packed_layer_streams_up_to_eight_rows_and_packs_the_rest():
    gen = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(576, 960)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(960, 576, generator=gen))
        linear.bias.copy_(torch.randn(960, generator=gen))
    layer = PackedLinear(linear.weight, linear.bias)
    assert (layer.matvec is not None) == (matvec is not None)
    for rows in (1, 3, 8, 9, 33):
        x = torch.randn(rows, 576, generator=gen)
        with torch.inference_mode():
            out = layer(x)
            torch.testing.assert_close(out, linear(x), atol=1e-4, rtol=0)
            if matvec is not None and rows <= cpu_matvec.STREAMED_MAX_INPUTS:
                assert torch.equal(out, matvec(linear.weight.detach(), x) + linear.bias)


def test_a_layer_read_in_place_keeps_no_copy_and_answers_at_every_batch():
    """A tied head over a large vocabulary: its table itself is read (no oneDNN copy), by the C product for up to
    eight rows and by torch's for more; it refuses a storage format (it has no copy to hold one in)."""
    gen = torch.Generator().manual_seed(1)
    table = torch.randn(4000, 96, generator=gen)
    layer = PackedLinear(table, in_place=True)
    assert layer.packed is None and layer.rows.data_ptr() == table.data_ptr()
    for rows in (1, 5, 8, 9, 40):
        x = torch.randn(rows, 96, generator=gen)
        with torch.inference_mode():
            out = layer(x)
        torch.testing.assert_close(out, x @ table.T, atol=1e-4, rtol=0)
        if matvec is not None and rows <= cpu_matvec.STREAMED_MAX_INPUTS:
            assert torch.equal(out, matvec(table, x))
    with pytest.raises(ValueError, match="in place"):
        PackedLinear(table, weight_dtype=torch.bfloat16, in_place=True)


@pytest.mark.skipif(not can_pack_bf16(torch.device("cpu")), reason="oneDNN bf16 products are unavailable here")
def test_packed_layer_with_bf16_weights_under_fp32_compute():
    """Up to eight rows: the bf16 weight widened into fp32 products (exact up to fp32 sums). More rows: oneDNN's bf16
    product, the input rounded to bf16 and the output too (the option's documented loss); the bias added in fp32."""
    gen = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(960, 576, generator=gen), torch.randn(960, generator=gen)
    layer = PackedLinear(weight, bias, weight_dtype=torch.bfloat16)
    assert layer.stored_dtype == torch.bfloat16 and layer.packed.dtype == torch.bfloat16
    rounded = weight.bfloat16().double()
    with torch.inference_mode():
        for count in (1, 5):
            few = torch.randn(count, 576, generator=gen)
            out = layer(few)
            assert out.dtype == torch.float32
            tolerance = 1e-5 * 576**0.5 if matvec is not None else 0.05  # oneDNN also rounds their inputs and outputs
            torch.testing.assert_close(out.double(), few.double() @ rounded.T + bias.double(), atol=tolerance, rtol=0)
        rows = torch.randn(12, 576, generator=gen)
        out = layer(rows)
        exact = rows.bfloat16().double() @ rounded.T  # bf16 inputs, exact sums
        assert out.dtype == torch.float32
        torch.testing.assert_close(out.double() - bias.double(), exact, atol=1e-3, rtol=2**-8)  # one bf16 rounding
        assert (out.double() - bias.double() - exact).abs().max() > 0  # it is the lossy product, not fp32's


def test_quantize_int8_takes_each_group_of_32_by_its_absmax():
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(3, 70, generator=gen) * torch.logspace(-3, 1, 70)  # groups of very different sizes
    weight[1, 32:64] = 0.0
    rows, scales = cpu_matvec.quantize_int8(weight)
    assert rows.dtype == torch.int8 and rows.shape == (3, 70) and scales.dtype == torch.float32
    assert scales.shape == (3, 3)  # 32 + 32 + a partial group of 6
    groups = [weight[:, 0:32], weight[:, 32:64], weight[:, 64:70]]
    expected = torch.stack([g.abs().amax(1) / 127 for g in groups], dim=1)
    expected[1, 1] = 1.0  # an all-zero group: scale 1, integers 0
    torch.testing.assert_close(scales, expected)
    assert not rows[1, 32:64].any() and rows[0, 0:32].abs().max() == 127
    values = cpu_matvec.dequantize_int8(rows, scales)
    step = scales.repeat_interleave(32, dim=1)[:, :70]
    assert ((values - weight).abs() <= step / 2 * (1 + 1e-6)).all()  # round to nearest: half a step at most


def coded_i16(x: torch.Tensor) -> torch.Tensor:
    """What an int8 product of one input row reads of it (kernels/cpu/vector.h, code_i16), in fp64: per group of 32,
    round(x * (32767 / absmax)) in fp32, half to even, times absmax / 32767 (a group below 2^-96: zeros)."""
    k = x.shape[-1]
    groups = torch.nn.functional.pad(x, (0, -k % 32)).view(-1, 32)
    absmax = groups.abs().amax(-1, keepdim=True)
    codes_it = absmax >= 2.0**-96
    inv = torch.where(codes_it, 32767.0 / absmax, torch.zeros_like(absmax))
    scale = torch.where(codes_it, absmax / 32767.0, torch.zeros_like(absmax))
    return (torch.round(groups * inv).double() * scale.double()).view(*x.shape[:-1], -1)[..., :k]


@needs_kernel
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("n,k", [(7, 5), (37, 50), (960, 576), (3, 1001)])
def test_matvec_of_int8_groups_equals_fp64_of_the_values_they_stand_for(m, n, k):
    """Several input rows are read as they are; one (batch-1 decode) as its int16 codes per group of 32."""
    gen = torch.Generator().manual_seed(m * 100_000 + n * 1000 + k)
    rows, scales = cpu_matvec.quantize_int8(torch.randn(n, k, generator=gen))
    x = torch.randn(m, k, generator=gen)
    out = matvec(rows, x, scales)
    assert out.shape == (m, n) and out.dtype == torch.float32
    read = coded_i16(x) if m == 1 else x.double()
    reference = read @ cpu_matvec.dequantize_int8(rows, scales).double().T
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * k**0.5, rtol=0)
    if m == 1:  # the codes are the input to 1 part in 65534 of each group's largest, but not the input
        assert (read - x.double()).abs().max() > 0
        torch.testing.assert_close(read, x.double(), atol=x.abs().max().item() / 65534 * 1.001, rtol=0)


@needs_kernel
def test_an_int8_product_of_one_row_codes_zeros_tiny_groups_and_a_partial_group_and_keeps_nan():
    rows, scales = cpu_matvec.quantize_int8(torch.randn(5, 102, generator=torch.Generator().manual_seed(3)))
    x = torch.randn(1, 102, generator=torch.Generator().manual_seed(4))
    x[0, 32:64] = 0.0  # a group of zeros: scale 0, no division by it
    x[0, 64:96] *= 1e-38  # below 2^-96: coded as zeros, where 32767 / absmax would overflow to infinity
    out = matvec(rows, x, scales)
    reference = coded_i16(x) @ cpu_matvec.dequantize_int8(rows, scales).double().T
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * 102**0.5, rtol=0)
    for bad in (float("nan"), float("inf")):  # as fp32 products would: NaN out, not a finite number
        x[0, 5] = bad
        assert matvec(rows, x, scales).isnan().all()


@needs_kernel
def test_an_int8_product_of_one_row_longer_than_the_coded_limit_reads_it_as_it_is():
    k = 16385  # vector.h's I16_MAX_K + 1: not coded on the threads' stacks
    gen = torch.Generator().manual_seed(5)
    rows, scales = cpu_matvec.quantize_int8(torch.randn(3, k, generator=gen))
    x = torch.randn(1, k, generator=gen)
    reference = x.double() @ cpu_matvec.dequantize_int8(rows, scales).double().T
    torch.testing.assert_close(matvec(rows, x, scales).double(), reference, atol=1e-5 * k**0.5, rtol=0)


@needs_kernel
def test_matvec_refuses_int8_rows_without_their_scales_and_scales_elsewhere():
    rows, scales = cpu_matvec.quantize_int8(torch.randn(16, 64))
    for weight, given in ((rows, None), (rows, scales[:8]), (rows, scales[:, :1].contiguous()), (rows, scales.double()),
                          (rows.float(), scales)):  # fmt: skip
        with pytest.raises(ValueError, match="int8 weights take fp32 scales"):
            matvec(weight, torch.randn(64), given)


def test_int8_groups_hold_gguf_q8_0_blocks_exactly():
    """A Q8_0 GGUF's tensors, dequantized by the loader, are int8 weights' groups as they were: the codes are the
    blocks' own and each scale its block's fp16 d (x = d * q is exact in fp32, its absmax d * 127, and d * 127 / 127
    is d again), so ``weight_dtype: int8`` keeps a Q8_0 file's values (1.125 bytes a weight against its 1.0625). An
    all-zero block (d = 0) keeps its values too, under scale 1."""
    from gguf import GGMLQuantizationType, quants

    weight = torch.randn(24, 96, generator=torch.Generator().manual_seed(5)) * torch.logspace(-3, 1, 96)
    blocks = quants.quantize(weight.numpy(), GGMLQuantizationType.Q8_0).reshape(24, 3, 34)  # fp16 d, 32 int8
    values = torch.from_numpy(quants.dequantize(blocks.reshape(24, -1), GGMLQuantizationType.Q8_0).astype("float32"))
    rows, scales = cpu_matvec.quantize_int8(values)
    assert torch.equal(rows.view(24, 3, 32), torch.from_numpy(blocks[:, :, 2:].copy()).view(torch.int8))
    assert torch.equal(scales, torch.from_numpy(blocks[:, :, :2].copy()).view(torch.float16).view(24, 3).float())
    assert torch.equal(cpu_matvec.dequantize_int8(rows, scales), values)
    zero = torch.zeros(1, 32)
    assert torch.equal(cpu_matvec.dequantize_int8(*cpu_matvec.quantize_int8(zero)), zero)


@needs_kernel
@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="oneDNN packing is unavailable")
def test_packed_layer_with_int8_weights_is_the_same_weights_at_every_batch():
    """Up to eight rows stream the int8 rows; more run oneDNN's fp32 product over the values those rows stand for: the
    same weights either way (only fp32 sums differ, and one row is read as its int16 codes), 9/32 of fp32's bytes
    streamed, and lossy against fp32."""
    gen = torch.Generator().manual_seed(2)
    weight, bias = torch.randn(960, 576, generator=gen), torch.randn(960, generator=gen)
    layer = PackedLinear(weight, bias, weight_dtype=torch.int8)
    assert layer.rows.dtype == torch.int8 and layer.stored_dtype == torch.float32
    assert layer.streamed_bytes == 960 * 576 + 4 * 960 * 576 // 32
    values = cpu_matvec.dequantize_int8(*cpu_matvec.quantize_int8(weight)).double()
    with torch.inference_mode():
        for count in (1, 5, 8, 9, 40):
            x = torch.randn(count, 576, generator=gen)
            out = layer(x)
            read = coded_i16(x) if count == 1 else x.double()
            torch.testing.assert_close(out.double(), read @ values.T + bias.double(), atol=1e-4, rtol=0)
        assert (layer(x).double() - (x.double() @ weight.double().T + bias.double())).abs().max() > 1e-3


def test_quantize_q4_1_writes_gguf_blocks_and_rounds_to_their_grid():
    """Blocks [n, k / 32, 20] as GGUF Q4_1 lays them out (fp16 d and m, then the nibbles: weights 0-15 low, 16-31
    high), each either gguf-py's reference Q4_1 block (d = (max - min) / 15, m = min) or llama.cpp's Q4_0 block of
    the same weights rewritten as Q4_1 (m = -8 * d), every weight within half a step of its block's grid (plus the
    fp16 rounding of d and m), and a constant block exact (d = 0)."""
    from gguf import GGMLQuantizationType, quants

    gen = torch.Generator().manual_seed(6)
    weight = torch.randn(5, 96, generator=gen) * torch.logspace(-2, 1, 96)
    weight[2, 32:64] = 0.25
    blocks = cpu_matvec.quantize_q4_1(weight)
    assert blocks.dtype == cpu_matvec.Q4_1 and blocks.shape == (5, 3, 20) and blocks.is_contiguous()
    assert cpu_matvec.weight_shape(blocks) == (5, 96)
    halves = blocks[..., :4].contiguous().view(torch.float16).float()  # [5, 3, 2]: d, m
    groups = weight.view(5, 3, 32)
    reference = torch.from_numpy(quants.quantize(weight.numpy(), GGMLQuantizationType.Q4_1)).view(5, 3, 20)
    q4_0 = (blocks != reference).any(-1)
    assert 0 < q4_0.sum() < q4_0.numel()  # both kinds occur here
    torch.testing.assert_close(halves[..., 1][q4_0], -8 * halves[..., 0][q4_0], rtol=0, atol=0)
    torch.testing.assert_close(halves[..., 1][~q4_0], groups.amin(-1).half().float()[~q4_0])
    low, high = blocks[..., 4:] & 15, blocks[..., 4:] >> 4
    codes = torch.cat([low, high], dim=-1).float()  # weights 0-15 in the low nibbles, 16-31 in the high ones
    values = cpu_matvec.dequantize_q4_1(blocks)
    torch.testing.assert_close(values.view(5, 3, 32), codes * halves[..., :1] + halves[..., 1:])
    step = halves[..., :1].abs().expand(5, 3, 32).reshape(5, 96)
    assert ((values - weight).abs() <= step / 2 + 2e-3 * weight.abs().amax()).all()
    assert torch.equal(values[2, 32:64], torch.full((32,), 0.25))
    with pytest.raises(ValueError, match="multiple of 32"):
        cpu_matvec.quantize_q4_1(torch.randn(4, 40))


def test_q4_1_blocks_hold_a_q4_0_files_values_exactly_and_other_weights_no_worse_than_the_reference():
    """Values of Q4_0 blocks as gguf-py's Q4_0 quantizer writes them (what a Q4_0 GGUF holds, d * (q - 8)) come back
    from our Q4_1 blocks exactly, also in blocks whose codes do not reach both 0 and 15 (one-sided, or of few
    levels), where the reference Q4_1 grid alone moves them; on weights never quantized every block is at least as
    close as the reference quantizer's, and the whole closer."""
    from gguf import GGMLQuantizationType, quants

    gen = torch.Generator().manual_seed(12)
    weight = torch.randn(64, 256, generator=gen)
    weight[:, :32] = -weight[:, :32].abs()  # one-sided blocks
    weight[:, 32:64] = torch.randint(-3, 4, (64, 32), generator=gen) * 0.1  # few levels
    q4_0 = GGMLQuantizationType.Q4_0
    values = torch.from_numpy(quants.dequantize(quants.quantize(weight.numpy(), q4_0), q4_0).astype(np.float32))
    assert torch.equal(cpu_matvec.dequantize_q4_1(cpu_matvec.quantize_q4_1(values)), values)
    q4_1 = GGMLQuantizationType.Q4_1
    reference = torch.from_numpy(quants.quantize(values.numpy(), q4_1)).view(64, 8, 20)
    assert not torch.equal(cpu_matvec.dequantize_q4_1(reference), values)  # the reference grid moves them
    weight = torch.randn(64, 256, generator=gen) * torch.logspace(-2, 1, 256)
    ours = cpu_matvec.quantize_q4_1(weight)
    reference = torch.from_numpy(quants.quantize(weight.numpy(), q4_1)).view(64, 8, 20)
    groups = weight.view(64, 8, 32)
    errors = [(cpu_matvec.dequantize_q4_1(b).view(64, 8, 32) - groups).pow(2).sum(-1) for b in (ours, reference)]
    assert (errors[0] <= errors[1]).all() and errors[0].sum() < errors[1].sum()


@needs_kernel
@pytest.mark.parametrize("m", [1, 2, 5, 8])
@pytest.mark.parametrize("n,k", [(1, 32), (7, 64), (37, 96), (960, 576), (576, 1536)])
def test_matvec_of_q4_1_blocks_equals_fp64_of_the_values_they_stand_for(m, n, k):
    gen = torch.Generator().manual_seed(m * 100_000 + n * 1000 + k)
    blocks = cpu_matvec.quantize_q4_1(torch.randn(n, k, generator=gen))
    x = torch.randn(m, k, generator=gen)
    out = matvec(blocks, x)
    assert out.shape == (m, n) and out.dtype == torch.float32
    reference = x.double() @ cpu_matvec.dequantize_q4_1(blocks).double().T
    torch.testing.assert_close(out.double(), reference, atol=1e-5 * k**0.5, rtol=0)


@needs_kernel
def test_one_row_of_q4_1_blocks_sums_as_fp32_rows_of_their_values():
    """One input row: the blocks' product is the fp32 rows' product over the values they stand for, bit for bit (the
    same multiply-adds in the same order), which is why Q4_1 over a Q4_1 GGUF answers as the fp32 path does."""
    gen = torch.Generator().manual_seed(9)
    blocks = cpu_matvec.quantize_q4_1(torch.randn(300, 576, generator=gen))
    x = torch.randn(576, generator=gen)
    assert torch.equal(matvec(blocks, x), matvec(cpu_matvec.dequantize_q4_1(blocks).contiguous(), x))


@needs_kernel
def test_matvec_refuses_q4_1_blocks_of_another_shape_and_scales():
    blocks = cpu_matvec.quantize_q4_1(torch.randn(16, 64))
    with pytest.raises(ValueError, match="Q4_1: blocks"):
        matvec(blocks.view(16, 40), torch.randn(64))
    with pytest.raises(ValueError, match="other formats none"):
        matvec(blocks, torch.randn(64), torch.ones(16, 2))


@needs_kernel
@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="oneDNN packing is unavailable")
def test_packed_layer_with_q4_1_weights_is_the_same_weights_at_every_batch():
    """Up to eight rows stream the blocks (5/8 of a byte a weight); more run oneDNN's fp32 product over the values
    they stand for: the same weights either way."""
    gen = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(960, 576, generator=gen), torch.randn(960, generator=gen)
    layer = PackedLinear(weight, bias, weight_dtype=cpu_matvec.Q4_1)
    assert layer.rows.dtype == cpu_matvec.Q4_1 and layer.stored_dtype == torch.float32
    assert layer.streamed_bytes == 960 * 576 * 5 // 8
    values = cpu_matvec.dequantize_q4_1(cpu_matvec.quantize_q4_1(weight)).double()
    with torch.inference_mode():
        for count in (1, 5, 8, 9, 40):
            x = torch.randn(count, 576, generator=gen)
            torch.testing.assert_close(layer(x).double(), x.double() @ values.T + bias.double(), atol=1e-4, rtol=0)
