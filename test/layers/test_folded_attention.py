"""Grouped-query attention of few queries with the query heads of a kv head folded into its rows
(``layers/attention._folded``) against torch's SDPA with ``enable_gqa`` on the same inputs: a ragged batch under a
mask that differs row by row, head by head mapped as torch maps them (query head h reads kv head h // group)."""

import pytest
import torch
import torch.nn.functional as F

from oxygen_ros.layers.attention import _folded


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (8, 1), (9, 3)])
def test_folded_heads_equal_torchs_grouped_attention(heads, kv_heads):
    gen = torch.Generator().manual_seed(heads * 10 + kv_heads)
    batch, max_q, keys_len, dim = 2, 5, 23, 16
    q = torch.randn(batch, max_q, heads, dim, generator=gen)
    k, v = (torch.randn(batch, keys_len, kv_heads, dim, generator=gen) for _ in "kv")
    mask = torch.rand(batch, 1, max_q, keys_len, generator=gen) < 0.6  # every row its own pattern
    mask[..., 0] = True  # no row without a key
    got = _folded(q, k, v, mask, dim**-0.5)
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                                          scale=dim**-0.5, enable_gqa=True).transpose(1, 2)  # fmt: skip
    assert got.shape == (batch, max_q, heads, dim)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    shuffled = _folded(q, k, v, mask.roll(1, dims=2), dim**-0.5)  # the mask's rows matter: a wrong tiling shows
    assert (shuffled - want).abs().max() > 1e-3
