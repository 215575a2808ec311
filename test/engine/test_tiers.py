"""The host tier and the tier chain: demotion on eviction, promotion instead of recomputation, prefetch, stats."""

import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.engine.host_tier import HostTier, host_layout
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.engine.sampling_params import SamplingParams

LAYOUT = KVLayout(num_layers=2, num_kv_heads=3, head_dim=64, block_size=16, dtype=torch.float16)


def _pool(layout: KVLayout = LAYOUT, num_blocks: int = 4) -> list:
    torch.manual_seed(0)
    kv = KVCache(layout, num_blocks, torch.device("cpu"))
    for layer in kv.layers:
        layer.blocks.k.copy_(torch.randn_like(layer.blocks.k, dtype=torch.float32))
        layer.blocks.v.copy_(torch.randn_like(layer.blocks.v, dtype=torch.float32))
    return [layer.blocks for layer in kv.layers]


def test_int8_host_format_halves_fp16_and_keeps_quantized_layouts():
    # per token-head: keys 64 codes + 64 bf16 channel scales / 16 tokens, values 64 codes + one fp32 scale
    assert host_layout(LAYOUT, "int8").bytes_per_block / LAYOUT.bytes_per_block == pytest.approx(70 / 128)
    fp32 = KVLayout(2, 3, 64, 16, torch.float32)
    assert host_layout(fp32, "int8").bytes_per_block / fp32.bytes_per_block == pytest.approx(70 / 256)
    int8 = KVLayout(2, 3, 64, 16, torch.int8, full_precision_layers=(1,))
    assert host_layout(int8, "int8") == KVLayout(2, 3, 64, 16, torch.int8, (1,), torch.int8)
    assert host_layout(LAYOUT, "pool") == LAYOUT


@pytest.mark.parametrize("fmt", ["int8", "pool"])
def test_host_round_trip(fmt):
    src = _pool()
    tier = HostTier(LAYOUT, 2 * host_layout(LAYOUT, fmt).bytes_per_block, fmt)
    hashes = [bytes([i]) * 32 for i in range(2)]
    assert tier.put(hashes, src, [2, 0]) == []
    dst = _pool()
    for layer in dst:
        layer.k.zero_(), layer.v.zero_()
    tier.restore(hashes, dst, [1, 3])
    for a, b in zip(src, dst):
        for s, d in ((2, 1), (0, 3)):
            if fmt == "pool":
                assert torch.equal(a.k[s], b.k[d]) and torch.equal(a.v[s], b.v[d])
            else:  # int8: |error| <= scale / 2, then fp16 rounding; key scales per channel over the block (bf16),
                # value scales per token-head row
                k_bound = a.k[s].float().abs().amax(0, keepdim=True) / 254 * (1 + 2**-8) + 2e-3
                assert ((a.k[s].float() - b.k[d].float()).abs() <= k_bound).all()
                v_bound = a.v[s].float().abs().amax(-1, keepdim=True) / 254 + 2e-3
                assert ((a.v[s].float() - b.v[d].float()).abs() <= v_bound).all()


def test_host_overflow_pushes_out_the_least_recently_used():
    src = _pool()
    tier = HostTier(LAYOUT, 2 * host_layout(LAYOUT, "int8").bytes_per_block)
    a, b, c = (bytes([i]) * 32 for i in range(3))
    tier.put([a, b], src, [0, 1])
    tier.touch([a])
    ((pushed_hash, layers),) = tier.put([c], src, [2])
    assert pushed_hash == b and a in tier and c in tier and b not in tier
    assert layers[0].k.shape == (1, 16, 3, 64) and layers[0].k_scale.shape == (1, 1, 3, 64)
    assert layers[0].v_scale.shape == (1, 16, 3)


PROMPTS = ["the red cup is on the table near the door " * 5, "a blue box sits on the shelf by the window " * 5]


def _answers(engine) -> list:
    greedy = SamplingParams(max_new_tokens=5, ignore_eos=True)
    return [engine.generate([GenerateRequest(p, sampling=greedy)])[0] for p in [*PROMPTS, PROMPTS[0]]]


@pytest.mark.parametrize("tiers", [{"cpu_tier_bytes": 1 << 20, "cpu_tier_format": "pool"},
                                   {"cpu_tier_bytes": 8 << 10, "cpu_tier_format": "pool", "disk": True}])  # fmt: skip
def test_promotion_equals_recomputation_token_for_token(tiny_bundle, tmp_path, tiers):
    """A pool that holds one prompt: the second evicts the first, whose revisit comes back from the tiers."""
    unpressured = make_engine(tiny_bundle)
    expected = _answers(unpressured)
    bytes_per_block = unpressured.layout.bytes_per_block
    options = {k: v for k, v in tiers.items() if k != "disk"}
    if tiers.get("disk"):
        options["disk_tier_path"] = str(tmp_path)
    engine = make_engine(tiny_bundle, kv_cache_bytes=8 * bytes_per_block, **options)
    got = _answers(engine)
    assert [o.token_ids for o in got] == [o.token_ids for o in expected]
    assert got[2].reused_prefix_tokens == expected[2].reused_prefix_tokens > 0
    names = [t.name for t in engine.stats().tiers]
    assert names == (["gpu", "cpu", "disk"] if tiers.get("disk") else ["gpu", "cpu"])
    assert sum(t.hits for t in engine.stats().tiers[1:]) > 0 and engine.pool.evictions > 0
    if tiers.get("disk"):
        assert engine.stats().tiers[2].hits > 0  # the small L1 pushed some blocks on to disk


def test_disk_promotion_prefetches_ahead(tiny_bundle, tmp_path):
    engine = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), prefetch_degree=2)
    greq = GenerateRequest("one two three four " * 20, sampling=SamplingParams(max_new_tokens=1))
    engine.generate([greq])
    engine.pool.release(engine.pool.allocate(engine.pool.num_available))
    loads = []
    load = engine.tiers.disk.load
    engine.tiers.disk.load = lambda h: (loads.append(h), load(h))[1]
    out = engine.generate([greq])[0]
    chain = engine.tiers.disk.num_blocks
    assert out.reused_prefix_tokens == chain * 16 and len(loads) == chain  # each block read once, in chain order
    assert engine.stats().tiers[1].hits == chain


def test_int8_host_tier_keeps_smollm2_answers(smollm2_bundle):
    """The compressed L1 (fp32 pool -> int8, 3.8:1) restores a revisited prompt to the same greedy answer."""
    unpressured = make_engine(smollm2_bundle, kv_cache_bytes=256 << 20)
    expected = _answers(unpressured)
    engine = make_engine(smollm2_bundle, kv_cache_bytes=8 * unpressured.layout.bytes_per_block, cpu_tier_bytes=64 << 20)
    got = _answers(engine)
    assert engine.stats().tiers[1].hits > 0 and got[2].reused_prefix_tokens == expected[2].reused_prefix_tokens
    assert [o.text for o in got] == [o.text for o in expected]
