"""Paged decode attention: Triton kernel vs torch reference vs naive attention, per storage dtype.

Tolerances (absolute; data: q, K, V ~ N(0, 1), K/V rows scaled by [0.5, 1.5], head_dim 64, sm_scale = d^-0.5):

* Triton vs torch reference and vs naive attention on the same dequantized K/V: only summation order differs,
  then the output is rounded to q's dtype: fp32 2e-5, fp16 2e-3 (1 ulp at |out| < 2), bf16 2e-2 (1 ulp = 2^-8
  relative, at |out| < 4).
* vs naive attention on the ORIGINAL K/V (storage error): a length-1 context returns one stored V row, so the error
  is at least the element error: fp16 2^-11 |v|, bf16 2^-8 |v|, int8 absmax/254, fp8 2^-4 |v| (|v| < ~4.5), i.e.
  0.002 / 0.018 / 0.018 / 0.28; longer contexts average that down but add score error.  Worst seen over 30 seeds:
  0.0012 / 0.015 / 0.016 / 0.15.  Bounds: fp32 2e-5, fp16 3e-3, bf16 3e-2, int8 4e-2, fp8 0.3.
"""

import pytest
import torch

from oxygen_ros.kernels import gather_kv, paged_decode_attention

OUTPUT_ATOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
ORIGINAL_ATOL = {"fp32": 2e-5, "fp16": 3e-3, "bf16": 3e-2, "int8": 4e-2, "fp8": 0.3}
Q_DTYPE = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.float32}

# (storage, kv-heads, GQA ratio, block size, context lengths, head_dim[, query dtype]): lengths hit 1, a block
# boundary and one past it; block size 12 is not a power of two (padded tiles); head_dim 40 is not either (padded
# columns). bf16 queries over int8 / fp8 codes are what the engine sends on a GPU, where the dots run tf32
# (``dot_precision``; the interpreter computes every dot in fp32): pi0.5's 256-wide heads among them.
CASES = [
    ("fp32", 2, 1, 16, [1, 16, 17, 40], 64),
    ("fp16", 3, 3, 12, [12, 13, 1, 30], 64),
    ("bf16", 1, 8, 16, [33, 32, 1], 64),
    ("int8", 3, 3, 16, [1, 16, 17, 64], 64),
    ("int8", 1, 8, 12, [24, 25, 7], 40),
    ("fp8", 2, 1, 12, [1, 36, 37], 64),
    ("fp8", 3, 3, 16, [48, 49, 2], 64),
    ("int8", 2, 4, 16, [1, 16, 17, 40], 64, torch.bfloat16),
    ("int8", 1, 8, 16, [17, 2], 256, torch.bfloat16),
    ("fp8", 1, 8, 16, [33, 1], 256, torch.bfloat16),
]
LSE_ATOL = {torch.bfloat16: 2e-2}  # the Triton kernel's tf32 scores on a GPU; else (and on a CPU) 1e-4


def naive_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], sm_scale: float):
    """fp64 softmax attention, one sequence at a time, GQA by repeating kv-heads: (out [B, H, d], probs per row,
    log-sum-exp of the scores [B, H])."""
    outs, probs, lses = [], [], []
    for b, (k, v) in enumerate(zip(keys, values, strict=True)):
        group = q.shape[1] // k.shape[1]
        k, v = (x.double().cpu().repeat_interleave(group, dim=1) for x in (k, v))
        scores = torch.einsum("hd,nhd->hn", q[b].double().cpu(), k) * sm_scale
        p = scores.softmax(dim=-1)
        outs.append(torch.einsum("hn,nhd->hd", p, v))
        probs.append(p)
        lses.append(scores.logsumexp(dim=-1))
    return torch.stack(outs), probs, torch.stack(lses)


@pytest.mark.parametrize("dtype,kv_heads,group,block_size,lens,head_dim,q_dtype", [(*c, None)[:7] for c in CASES])
def test_paged_decode(dtype, kv_heads, group, block_size, lens, head_dim, q_dtype, make_paged, device):
    case = make_paged(dtype, lens, block_size, kv_heads, head_dim, seed=len(lens) + block_size)
    gen = torch.Generator().manual_seed(7)
    q_dtype = q_dtype or Q_DTYPE.get(dtype, torch.float32)
    q = torch.randn(len(lens), kv_heads * group, head_dim, generator=gen).to(device, q_dtype)
    sm_scale = head_dim**-0.5
    mass, out, lse = {}, {}, {}
    for backend in ("triton", "torch"):
        mass[backend] = torch.zeros(case.tables.shape, device=device)
        lse[backend] = torch.zeros(q.shape[:2], device=device)
        out[backend] = paged_decode_attention(q, case.blocks, case.tables, case.lens, sm_scale,
                                              block_mass=mass[backend], lse=lse[backend], backend=backend)
        assert out[backend].dtype == q_dtype and out[backend].shape == q.shape
    atol = OUTPUT_ATOL[q_dtype]
    torch.testing.assert_close(out["triton"], out["torch"], atol=atol, rtol=0)

    # Naive attention on the K/V as stored: gathered and dequantized by the Triton gather kernel.
    k_all, v_all = gather_kv(case.blocks, case.tables, max(lens), backend="triton")
    stored, probs, stored_lse = naive_attention(q, [k_all[b, :n] for b, n in enumerate(lens)],
                                    [v_all[b, :n] for b, n in enumerate(lens)], sm_scale)
    torch.testing.assert_close(out["triton"].double().cpu(), stored, atol=atol, rtol=0)
    for backend in ("triton", "torch"):  # the log-sum-exp that lets partial attentions be merged
        tf32 = backend == "triton" and torch.device(device).type == "cuda"
        atol = LSE_ATOL.get(q_dtype, 1e-4) if tf32 else 1e-4
        torch.testing.assert_close(lse[backend].double().cpu(), stored_lse, atol=atol, rtol=1e-5)
        alone = torch.zeros(q.shape[:2], device=device)  # asked for without the block mass
        paged_decode_attention(q, case.blocks, case.tables, case.lens, sm_scale, lse=alone, backend=backend)
        torch.testing.assert_close(alone, lse[backend], atol=1e-5, rtol=0)
    original, _, _ = naive_attention(q, case.k, case.v, sm_scale)
    torch.testing.assert_close(out["triton"].double().cpu(), original, atol=ORIGINAL_ATOL[dtype], rtol=0)

    # Block mass: per table entry, softmax probability summed over the block's tokens and all heads.
    expected = torch.zeros(case.tables.shape, dtype=torch.float64)
    for b, p in enumerate(probs):
        per_token = p.sum(dim=0)
        for entry in range(-(-lens[b] // block_size)):
            expected[b, entry] = per_token[entry * block_size : (entry + 1) * block_size].sum()
    torch.testing.assert_close(mass["triton"], mass["torch"], atol=1e-5, rtol=0)
    for backend in ("triton", "torch"):  # per head: what merging partial attentions needs; each head's row sums to 1
        per_head = torch.zeros(len(lens), q.shape[1], case.tables.shape[1], device=device)
        paged_decode_attention(q, case.blocks, case.tables, case.lens, sm_scale, block_mass=per_head, backend=backend)
        torch.testing.assert_close(per_head.sum(dim=1), mass[backend], atol=1e-5, rtol=0)
        torch.testing.assert_close(per_head.sum(dim=2), torch.ones_like(per_head[:, :, 0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(mass["triton"].double().cpu(), expected, atol=1e-4, rtol=0)


def test_block_mass_accumulates(make_paged, device):
    """The mass buffer is added to, so one buffer can collect every layer of a step."""
    case = make_paged("int8", [20, 5], 16, 2, 64)
    q = torch.randn(2, 4, 64, device=device)
    mass = torch.ones(case.tables.shape, device=device)
    paged_decode_attention(q, case.blocks, case.tables, case.lens, 0.125, block_mass=mass, backend="triton")
    paged_decode_attention(q, case.blocks, case.tables, case.lens, 0.125, block_mass=mass, backend="triton")
    torch.testing.assert_close(mass.sum(dim=1).cpu(), torch.full((2,), mass.shape[1] + 2 * 4.0), atol=1e-4, rtol=0)


def test_rejects_mismatched_shapes(make_paged, device):
    case = make_paged("fp16", [4], 16, 2, 64)
    with pytest.raises(ValueError, match="kv-heads"):
        paged_decode_attention(torch.randn(1, 3, 64, device=device), case.blocks, case.tables, case.lens, 1.0)
    with pytest.raises(ValueError, match="block_mass"):
        paged_decode_attention(torch.randn(1, 2, 64, device=device), case.blocks, case.tables, case.lens, 1.0,
                               block_mass=torch.zeros(1, 1, device=device))
