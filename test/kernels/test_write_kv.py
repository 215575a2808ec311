"""write_kv: the Triton kernel stores exactly the torch reference's codes and scales, and quantization error stays
within theory (int8: |err| <= scale / 2 per element; fp8 e4m3: half a grid step, 2^-4 |x| relative, saturating).
int8 keys: per-channel scales over a block, the block requantized as it fills (a decode step's token, a prefill's
chunk), which costs at most half of each scale a key's channel grows to."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oxygen_ros.kernels import KVBlocks, KVQuantSpec, gather_kv, write_kv
from oxygen_ros.kernels.quant import dequantize, quantize, quantize_channels


def _write_both(dtype: str, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_blocks: int, device,
                head_scale: float = 0.05) -> dict[str, KVBlocks]:
    """The same write through both backends into pools pre-filled with junk (so untouched slots are checked)."""
    pools = {}
    for backend in ("torch", "triton"):
        gen = torch.Generator().manual_seed(3)
        blocks = KVBlocks.allocate(KVQuantSpec.parse(dtype), num_blocks, 16, k.shape[1], k.shape[2], device)
        for data in (blocks.k, blocks.v):
            data.copy_(torch.randint(-100, 100, data.shape, generator=gen).to(data.dtype))
        if blocks.spec.kind == "fp8":
            blocks.k_scale.fill_(head_scale)
            blocks.v_scale.fill_(2 * head_scale)
        write_kv(blocks, slots.to(device), k.to(device), v.to(device), backend=backend)
        pools[backend] = blocks
    return pools


def _runs(gen: torch.Generator, num_blocks: int, block_size: int, tokens: int) -> torch.Tensor:
    """``tokens`` slots as the engine writes them: runs of consecutive offsets in one block each (a sequence's next
    tokens, from any offset: the tokens before it are its earlier ones), blocks in scrambled order, and skipped
    tokens (-1, never kept) between runs."""
    slots: list[int] = []
    for block in torch.randperm(num_blocks, generator=gen).tolist():
        start = int(torch.randint(0, block_size, (1,), generator=gen))
        length = int(torch.randint(1, block_size - start + 1, (1,), generator=gen))
        slots += [-1] + list(range(block * block_size + start, block * block_size + start + length))
    assert len(slots) >= tokens
    return torch.tensor(slots[:tokens])


@pytest.mark.parametrize("dtype,input_dtype", [
    ("fp32", torch.float32), ("fp16", torch.float32), ("bf16", torch.float32), ("bf16", torch.bfloat16),
    ("int8", torch.float16), ("int8", torch.bfloat16), ("fp8", torch.float32),
])
def test_triton_write_matches_torch(dtype, input_dtype, device, assert_same_codes):
    gen = torch.Generator().manual_seed(1)
    tokens, kv_heads, head_dim = 90, 3, 64
    # A strided view (every other token of a bigger tensor), rows of very different magnitudes, one zero row.
    magnitude = 10.0 ** torch.randint(-3, 3, (2 * tokens, kv_heads, 1), generator=gen)
    k = (torch.randn(2 * tokens, kv_heads, head_dim, generator=gen) * magnitude)[::2]
    k[5] = 0
    v = torch.randn(tokens, kv_heads, head_dim, generator=gen) * 3
    slots = _runs(gen, 24, 16, tokens)
    pools = _write_both(dtype, slots, k.to(input_dtype), v.to(input_dtype), 24, device)
    ref, tri = pools["torch"], pools["triton"]
    assert_same_codes(tri.k, ref.k)
    assert_same_codes(tri.v, ref.v)
    if ref.spec.kind == "int8":
        assert torch.equal(tri.k_scale, ref.k_scale) and torch.equal(tri.v_scale, ref.v_scale)


def test_fp8_rounding_matches_torch_everywhere(device, assert_same_codes):
    """Every e4m3 value, every midpoint between neighbours (ties to even) and saturation, through the Triton
    encoder vs torch's own conversion."""
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()  # all finite magnitudes
    mids = (grid[:-1] + grid[1:]) / 2
    nudged = torch.cat([mids * (1 + 2**-20), mids * (1 - 2**-20)])
    values = torch.cat([grid, mids, nudged, torch.tensor([448.0, 460.0, 1e6, 2**-12])])
    values = torch.cat([values, -values])
    values = torch.cat([values, torch.zeros((-len(values)) % 64)]).view(-1, 1, 64)
    slots = torch.arange(len(values))
    pools = _write_both("fp8", slots, values, values, -(-len(values) // 16), device, head_scale=1.0)
    assert_same_codes(pools["triton"].k, pools["torch"].k)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_skipped_slots_and_untouched_blocks(backend, device):
    blocks = KVBlocks.allocate(KVQuantSpec.parse("int8"), 4, 16, 2, 64, device)
    k = torch.ones(3, 2, 64, device=device)
    write_kv(blocks, torch.tensor([-1, 17, -1], device=device), 2 * k, 3 * k, backend=backend)
    written = blocks.k.view(-1, 2, 64).abs().sum(dim=(1, 2)).nonzero().flatten().tolist()
    assert written == [17]
    # block 1's keys: per-channel scales over its tokens (offset 0, before the written one, holds zeros)
    assert torch.equal(blocks.k_scale[1].cpu(), torch.full((1, 2, 64), 2 / 127).to(torch.bfloat16))
    assert torch.equal(blocks.k_scale[[0, 2, 3]].cpu(), torch.ones(3, 1, 2, 64, dtype=torch.bfloat16))
    assert blocks.v_scale.view(-1, 2)[17].tolist() == pytest.approx([3 / 127] * 2)


def test_a_skipped_token_inside_a_blocks_run_leaves_one_writer(device, assert_same_codes):
    """Slot -1 between two tokens of one block (a caller's, never the engine's: its writes name stored tokens only):
    the Triton key write drops it first, so the block has one run and one writer, as in torch."""
    k = torch.randn(3, 2, 64, generator=torch.Generator().manual_seed(5))
    pools = _write_both("int8", torch.tensor([16, -1, 17]), k, k, 4, device)
    assert_same_codes(pools["triton"].k, pools["torch"].k)
    assert torch.equal(pools["triton"].k_scale, pools["torch"].k_scale)
    assert torch.equal(pools["torch"].k_scale[1].cpu(), (k[[0, 2]].abs().amax(0, keepdim=True) / 127).to(torch.bfloat16))


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_int8_keys_filled_in_steps_match_torch_and_stay_within_their_steps(chunk, device, assert_same_codes):
    """A block filled a few tokens at a time (decode: 1, chunked prefill: 5) is requantized each time: Triton and
    torch agree bit for bit, the scales end as those of one write of the whole block (the absmax per channel), and
    each key is off by at most half of each scale it was rounded to (its first, then every one its channel grew
    to); a block written once is off by half its step."""
    gen = torch.Generator().manual_seed(chunk)
    kv_heads, head_dim, tokens = 2, 64, 40
    k = torch.randn(tokens, kv_heads, head_dim, generator=gen) * torch.linspace(0.1, 3, tokens)[:, None, None]
    k[:, :, 7] *= 30  # an outlier channel, growing over the sequence
    table = torch.tensor([3, 0, 2])
    slots = table[torch.arange(tokens) // 16] * 16 + torch.arange(tokens) % 16
    pools, bound = {}, torch.zeros(tokens, kv_heads, head_dim)
    for backend in ("torch", "triton"):
        blocks = KVBlocks.allocate(KVQuantSpec.parse("int8"), 4, 16, kv_heads, head_dim, device)
        before = blocks.k_scale[table].cpu().float()
        for first in range(0, tokens, chunk):
            part = slice(first, first + chunk)
            write_kv(blocks, slots[part].to(device), k[part].to(device), k[part].to(device), backend=backend)
            after = blocks.k_scale[table].cpu().float()
            scale = after.expand(-1, 16, -1, -1).reshape(-1, kv_heads, head_dim)[:tokens]
            grown = (after != before).expand(-1, 16, -1, -1).reshape(-1, kv_heads, head_dim)[:tokens]
            position = torch.arange(tokens)[:, None, None]
            rounded = ((position >= first) & (position < first + chunk)) | (grown & (position < first))
            if backend == "torch":
                bound += torch.where(rounded, scale / 2, 0.0)
            before = after
        pools[backend] = blocks
    assert_same_codes(pools["triton"].k, pools["torch"].k)
    assert torch.equal(pools["triton"].k_scale, pools["torch"].k_scale)
    blocks = pools["torch"]
    whole = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, 8)).view(3, 16, kv_heads, head_dim)
    _, one_write = quantize_channels(whole)
    assert torch.equal(blocks.k_scale[table].cpu(), one_write)
    stored, _ = gather_kv(blocks, table.view(1, -1).to(device), tokens)
    step = one_write.float().expand(-1, 16, -1, -1).reshape(-1, kv_heads, head_dim)[:tokens]
    error = (stored[0].cpu() - k).abs()
    assert torch.all(error <= bound * (1 + 1e-5))
    if chunk == 16:
        assert torch.all(error <= step * (0.5 + 1e-5))
    print(f"chunk {chunk}: largest error {float((error / step).max()):.2f} final steps, mean "
          f"{float((error / step).mean()):.3f} (one write: <= 0.5, mean 0.25)")


@settings(max_examples=60, deadline=None)
@given(log_magnitude=st.floats(-8, 8), seed=st.integers(0, 2**16), head_dim=st.sampled_from([8, 40, 64]))
def test_int8_key_channels_error_at_most_half_a_step(log_magnitude, seed, head_dim):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 16, 2, head_dim, generator=gen) * 10**log_magnitude
    x[:, :, :, 1] *= 50  # an outlier channel takes its own scale, not everyone's
    codes, scale = quantize_channels(x)
    assert scale.shape == (3, 1, 2, head_dim) and scale.dtype == torch.bfloat16
    err = (dequantize(codes, scale) - x).abs()
    assert torch.all(err <= scale.float() * (0.5 + 1e-5))
    assert torch.equal(scale, (x.abs().amax(dim=1, keepdim=True) / 127).to(torch.bfloat16))


@settings(max_examples=60, deadline=None)
@given(
    log_magnitude=st.floats(-8, 8),
    seed=st.integers(0, 2**16),
    head_dim=st.sampled_from([8, 40, 64]),
)
def test_int8_error_at_most_half_a_step(log_magnitude, seed, head_dim):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 2, head_dim, generator=gen) * 10**log_magnitude
    codes, scale = quantize(x, torch.int8)
    err = (dequantize(codes, scale) - x).abs()
    assert torch.all(err <= scale.unsqueeze(-1) * (0.5 + 1e-5))
    torch.testing.assert_close(scale, x.abs().amax(dim=-1).clamp_min(1e-30) / 127, rtol=0, atol=0)
    assert codes.abs().max() == 127


@settings(max_examples=60, deadline=None)
@given(log_magnitude=st.floats(-6, 6), seed=st.integers(0, 2**16))
def test_fp8_error_at_most_half_a_step(log_magnitude, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 3, 64, generator=gen) * 10**log_magnitude
    head_scale = x.abs().amax(dim=(0, 2)) / 300  # absmax lands at 300, inside the +-448 range
    codes, _ = quantize(x, torch.float8_e4m3fn, head_scale)
    y = x / head_scale[:, None]
    err = (dequantize(codes, head_scale) / head_scale[:, None] - y).abs()
    half_step = torch.maximum(y.abs() * 2**-4, torch.full_like(y, 2**-10))  # 3 mantissa bits; subnormal step 2^-9
    assert torch.all(err <= half_step * (1 + 1e-6))


def test_fp8_saturates(device):
    blocks = KVBlocks.allocate(KVQuantSpec.parse("fp8"), 1, 16, 1, 64, device)
    x = torch.full((1, 1, 64), 1000.0, device=device)
    x[..., 1::2] = -1000.0
    write_kv(blocks, torch.tensor([0], device=device), x, x, backend="triton")
    k, _ = gather_kv(blocks, torch.zeros(1, 1, dtype=torch.int32, device=device), 1, backend="triton")
    assert torch.equal(k.abs().unique().cpu(), torch.tensor([448.0]))


def test_rejects_mismatched_shapes(device):
    blocks = KVBlocks.allocate(KVQuantSpec.parse("fp16"), 2, 16, 2, 64, device)
    with pytest.raises(ValueError, match="do not fit"):
        write_kv(blocks, torch.zeros(3, dtype=torch.long, device=device), torch.zeros(3, 2, 32, device=device),
                 torch.zeros(3, 2, 32, device=device))
