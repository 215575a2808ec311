"""Block ops: gather (dequantize), requantize between formats, copy with scales; Triton vs torch and vs theory."""

import dataclasses

import pytest
import torch

from oxygen_ros.kernels import KVBlocks, KVQuantSpec, copy_blocks, gather_kv, requantize_blocks

# Element error of a value stored in a format, relative to the value (int8 values: to their row's absmax; int8 keys:
# to their channel's absmax over the block, with 2^-8 for the bf16 rounding of the scale).
STORAGE_REL_ERR = {"fp32": 0.0, "fp16": 2**-11, "bf16": 2**-8, "int8": 1 / 254, "fp8": 2**-4}
FP8_SCALE = 8.0 / 448


def storage_bound(dtype: str, x: torch.Tensor, head_scale: torch.Tensor | None, keys: bool = False,
                  block_size: int = 16) -> torch.Tensor:  # fmt: skip
    """Largest |stored - x| per element of x [n, kvh, d] (fp8: plus the subnormal step 2^-10 * scale). int8 keys:
    x's tokens fill blocks of ``block_size`` from its first, each block quantized once."""
    magnitude = x.abs()
    if dtype == "int8" and keys:
        padded = torch.nn.functional.pad(magnitude, (0, 0, 0, 0, 0, -len(x) % block_size))
        per_block = padded.view(-1, block_size, *x.shape[1:]).amax(dim=1, keepdim=True) * (1 + 2**-8)
        magnitude = per_block.expand(-1, block_size, -1, -1).reshape(-1, *x.shape[1:])[: len(x)]
    elif dtype == "int8":
        magnitude = x.abs().amax(dim=-1, keepdim=True)
    bound = magnitude * STORAGE_REL_ERR[dtype] * (1 + 1e-5)
    if dtype == "fp8":
        bound = bound + 2**-10 * head_scale.to(x.device)[:, None]
    return bound


@pytest.mark.parametrize("dtype,out_dtype,block_size", [
    ("fp16", torch.float16, 16), ("bf16", torch.float32, 12), ("int8", torch.bfloat16, 16), ("fp8", torch.float32, 12),
])
def test_gather_kv(dtype, out_dtype, block_size, make_paged):
    lens = [block_size + 1, 1, 2 * block_size]
    case = make_paged(dtype, lens, block_size, 2, 64)
    num_tokens = max(lens)
    tri = gather_kv(case.blocks, case.tables, num_tokens, out_dtype, backend="triton")
    ref = gather_kv(case.blocks, case.tables, num_tokens, out_dtype, backend="torch")
    for plane, (t, r, original) in enumerate(zip(tri, ref, (case.k, case.v), strict=True)):
        head_scale = case.blocks.planes[plane][1]
        assert t.dtype == out_dtype and t.shape == (len(lens), num_tokens, 2, 64)
        assert torch.equal(t, r)  # exact: same dequantization, rounded to nearest even on both sides
        for b, n in enumerate(lens):
            bound = (storage_bound(dtype, original[b], head_scale, keys=plane == 0, block_size=block_size)
                     + original[b].abs() * torch.finfo(out_dtype).eps)  # fmt: skip
            assert torch.all((t[b, :n].float().cpu() - original[b]).abs() <= bound)


@pytest.mark.parametrize("src_dtype,dst_dtype", [("fp16", "int8"), ("int8", "fp8"), ("fp8", "bf16"), ("bf16", "fp16")])
def test_requantize_blocks(src_dtype, dst_dtype, make_paged, device, assert_same_codes):
    case = make_paged(src_dtype, [30, 17], 16, 2, 64)
    src_ids = case.tables[:, :2].flatten().to(torch.int64)
    dst_ids = torch.tensor([5, 0, 3, 1], device=device)
    pools = {}
    for backend in ("triton", "torch"):
        dst = KVBlocks.allocate(KVQuantSpec.parse(dst_dtype), 6, 16, 2, 64, device)
        if dst.spec.kind == "fp8":  # K/V stay below 8: no saturation
            dst.k_scale.fill_(FP8_SCALE)
            dst.v_scale.fill_(FP8_SCALE)
        requantize_blocks(case.blocks, src_ids, dst, dst_ids, backend=backend)
        pools[backend] = dst
    for name in ("k", "v"):
        assert_same_codes(getattr(pools["triton"], name), getattr(pools["torch"], name))
    if dst_dtype == "int8":
        assert torch.equal(pools["triton"].k_scale, pools["torch"].k_scale)
    # Requantized values sit within the destination's error of the source's values.
    src_k, _ = gather_kv(case.blocks, src_ids.view(1, -1), 4 * 16)
    dst_k, _ = gather_kv(pools["triton"], dst_ids.view(1, -1), 4 * 16)
    bound = storage_bound(dst_dtype, src_k[0], pools["triton"].k_scale, keys=True)
    assert torch.all((dst_k - src_k).abs() <= bound)


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_copy_on_write_int8_with_scales(backend, make_paged, device):
    case = make_paged("int8", [40], 16, 3, 64)
    blocks = case.blocks
    src = case.tables[0, :3].to(torch.int64)
    spare = sorted(set(range(blocks.num_blocks)) - set(src.tolist()))
    dst = torch.tensor(spare, device=device)
    before = dataclasses.replace(blocks, **{f: getattr(blocks, f).clone() for f in ("k", "v", "k_scale", "v_scale")})
    copy_blocks(blocks, src, blocks, dst, backend=backend)
    for field in ("k", "v", "k_scale", "v_scale"):
        assert torch.equal(getattr(blocks, field)[dst], getattr(before, field)[src])
        assert torch.equal(getattr(blocks, field)[src], getattr(before, field)[src])


def test_copy_between_fp8_pools(make_paged, device, assert_same_codes):
    case = make_paged("fp8", [20], 16, 2, 64)
    ids = case.tables[0, :2].to(torch.int64)
    other = KVBlocks.allocate(case.blocks.spec, 4, 16, 2, 64, device)
    with pytest.raises(ValueError, match="different scales"):
        copy_blocks(case.blocks, ids, other, torch.tensor([2, 3], device=device))
    other.k_scale.copy_(case.blocks.k_scale)
    other.v_scale.copy_(case.blocks.v_scale)
    copy_blocks(case.blocks, ids, other, torch.tensor([2, 3], device=device), backend="triton")
    assert_same_codes(other.k[2:], case.blocks.k[ids])
    assert_same_codes(other.v[2:], case.blocks.v[ids])
    with pytest.raises(ValueError, match="needs requantize_blocks"):
        copy_blocks(case.blocks, ids, KVBlocks.allocate(KVQuantSpec.parse("int8"), 4, 16, 2, 64, device), ids)


def test_gather_rejects_tokens_past_the_table(make_paged):
    case = make_paged("fp16", [20], 16, 2, 64)
    with pytest.raises(ValueError, match="exceed"):
        gather_kv(case.blocks, case.tables, case.tables.shape[1] * 16 + 1)
