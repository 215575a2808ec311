"""``Engine.close`` writes what the pool and L1 hold to the disk tier, within its bound, so the next engine with the
same model and config (a node restart) starts with those prefixes on disk and serves them from there."""

from engine_helpers import make_engine

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams

SCENE = Observation("scene", "A red cup, a blue box and a green plate are on the kitchen table. " * 6)
ASK = GenerateRequest("What is on the table?", observation=SCENE, sampling=SamplingParams(max_new_tokens=4))


TIERS = {"cpu_tier_bytes": 1 << 20, "cpu_tier_format": "pool"}


def test_a_restarted_engine_serves_the_prefix_from_disk(tiny_bundle, tmp_path):
    first = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), **TIERS)
    (answer,) = first.generate([ASK])
    cached = first.pool.num_cached
    first.pool.release(first.pool.allocate(first.pool.num_available))  # evicted: the prefix is in L1 now, not on disk
    assert first.tiers.host.num_blocks == cached > 0 and first.tiers.disk.num_blocks == 0
    first.close()
    assert len(list(tmp_path.glob("*.kvb"))) == cached

    again = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), **TIERS)
    (repeat,) = again.generate([ASK])
    assert repeat.token_ids == answer.token_ids and repeat.reused_prefix_tokens > 0
    gpu, cpu, disk = again.stats().tiers
    assert disk.hits * 16 == repeat.reused_prefix_tokens and gpu.hits == 0


def test_persisting_respects_the_disk_bound(tiny_bundle, tmp_path):
    bound = 3 * make_engine(tiny_bundle).layout.bytes_per_block  # fewer blocks than the request leaves cached
    bounded = make_engine(tiny_bundle, disk_tier_path=str(tmp_path / "small"), disk_tier_bytes=bound)
    bounded.generate([ASK])
    bounded.close()
    sizes = [f.stat().st_size for f in (tmp_path / "small").glob("*.kvb")]
    assert 0 < len(sizes) <= 3 < bounded.pool.num_cached and sum(sizes) <= bound
