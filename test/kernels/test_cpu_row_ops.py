"""The batched element-wise kernels (``cpu/row_ops.c``) against the torch ops they replace: RMSNorm with and
without the residual add before it, rotate-half RoPE of a fused projection's q and k heads (v untouched), and
SiLU(gate) * up, over row counts on both sides of the threading threshold and widths that end inside a vector."""

import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.kernels import cpu_row_ops
from oxygen_ros.layers.rotary import RotaryEmbedding

pytestmark = pytest.mark.skipif(cpu_row_ops._kernels() is None, reason="the CPU kernels do not run here")


@pytest.mark.parametrize("rows,n", [(1, 576), (7, 50), (200, 576)])
def test_rms_norm_and_residual_add(rows, n):
    gen = torch.Generator().manual_seed(rows + n)
    h, delta, weight = torch.randn(rows, n, generator=gen), torch.randn(rows, n, generator=gen), torch.randn(n)
    torch.testing.assert_close(cpu_row_ops.rms_norm(h, weight, 1e-5), F.rms_norm(h, (n,), weight, eps=1e-5),
                               atol=2e-6, rtol=2e-6)  # fmt: skip
    total, normed = cpu_row_ops.add_rms_norm(h, delta, weight, 1e-5)
    assert torch.equal(total, h + delta)
    torch.testing.assert_close(normed, F.rms_norm(h + delta, (n,), weight, eps=1e-5), atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("rows,q_heads,kv_heads,head_dim", [(1, 9, 3, 64), (40, 4, 2, 32), (300, 9, 3, 64)])
def test_rotate_heads_in_place(rows, q_heads, kv_heads, head_dim):
    gen = torch.Generator().manual_seed(rows)
    qkv = torch.randn(rows, q_heads + 2 * kv_heads, head_dim, generator=gen)
    rope = RotaryEmbedding(head_dim, 10000.0).angles(torch.randint(0, 4000, (rows,), generator=gen))
    reference = rope.apply_joined(qkv[:, : q_heads + kv_heads])
    values = qkv[:, q_heads + kv_heads :].clone()
    assert cpu_row_ops.rotate_heads_(qkv, q_heads + kv_heads, rope.cos, rope.sin)
    torch.testing.assert_close(qkv[:, : q_heads + kv_heads], reference, atol=1e-5, rtol=1e-5)
    assert torch.equal(qkv[:, q_heads + kv_heads :], values)


@pytest.mark.parametrize("rows,inter", [(1, 1536), (5, 100), (64, 1536)])
def test_silu_mul(rows, inter):
    gate_up = torch.randn(rows, 2 * inter, generator=torch.Generator().manual_seed(inter)) * 6
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(cpu_row_ops.silu_mul(gate_up), F.silu(gate) * up, atol=1e-5, rtol=1e-5)


def test_declines_what_it_cannot_read():
    assert cpu_row_ops.rms_norm(torch.randn(3, 8, dtype=torch.bfloat16), torch.ones(8), 1e-5) is None
    assert cpu_row_ops.silu_mul(torch.randn(4, 6).t()) is None  # not contiguous
