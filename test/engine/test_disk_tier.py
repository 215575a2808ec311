"""The disk tier: exact round trips in every format, bad files are misses (and removed), the folder stays bounded
and inside itself, and a restarted engine serves the blocks an earlier one left."""

import hashlib
import os
import subprocess
import sys
import threading
import time

import pytest
import torch
from engine_helpers import make_engine

from oxygen_ros.engine import block_codec as codec
from oxygen_ros.engine import disk_tier as disk_tier_module
from oxygen_ros.engine import tiers as tiers_module
from oxygen_ros.engine.block_codec import encode_block
from oxygen_ros.engine.disk_tier import DiskTier
from oxygen_ros.engine.host_tier import take_blocks
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.kernels import KVBlocks, KVQuantSpec, requantize_blocks

SHAPE = (4, 2, 8)  # block size, kv heads, head dim
KEY = "model-a|fp32"


def _layers(fmt: str, seed: int, num_layers: int = 2) -> list[KVBlocks]:
    """One random block per layer in ``fmt`` (quantized from fp32 values by the kernels)."""
    torch.manual_seed(seed)
    out = []
    for _ in range(num_layers):
        src = KVBlocks(torch.randn(1, *SHAPE), torch.randn(1, *SHAPE))
        dst = KVBlocks.allocate(KVQuantSpec.parse(fmt), 1, *SHAPE)
        if dst.k_scale is not None and dst.k_scale.dim() == 1:
            dst.k_scale.fill_(0.01), dst.v_scale.fill_(0.02)  # fp8 per-head scales
        requantize_blocks(src, torch.tensor([0]), dst, torch.tensor([0]))
        out.append(dst)
    return out


def _h(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def _equal(a: list[KVBlocks], b: list[KVBlocks]) -> bool:
    def same(x: torch.Tensor | None, y: torch.Tensor | None) -> bool:
        return (x is None and y is None) or (x.dtype == y.dtype and torch.equal(x.view(torch.uint8), y.view(torch.uint8)))

    return all(same(p, q) for x, y in zip(a, b, strict=True) for p, q in zip(
        (x.k, x.v, x.k_scale, x.v_scale), (y.k, y.v, y.k_scale, y.v_scale)))  # fmt: skip


def _tier(path, capacity: int = 1 << 20, key: str = KEY) -> DiskTier:
    return DiskTier(path, capacity, key, SHAPE, 2)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "int8", "fp8"])
def test_blocks_come_back_bit_for_bit(tmp_path, fmt):
    tier = _tier(tmp_path)
    layers = _layers(fmt, 0)
    tier.store(_h("a"), layers)
    assert _equal(tier.load(_h("a")), layers)  # queued for the writer: answered from memory
    assert tier.flush(10.0)
    assert _equal(_tier(tmp_path).load(_h("a")), layers)  # a fresh instance: read lazily from the folder


def _stored(tmp_path) -> tuple[DiskTier, bytes, os.PathLike]:
    tier = _tier(tmp_path)
    tier.store(_h("a"), _layers("int8", 0))
    assert tier.flush(10.0)
    (path,) = tmp_path.iterdir()
    return tier, _h("a"), path


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "forged"])
def test_damaged_files_are_misses_and_removed(tmp_path, damage):
    _, block_hash, path = _stored(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(os.urandom(len(data)))
    elif damage == "empty":
        data = bytearray()
    else:  # a well-formed, checksummed record whose header is nonsense
        header = b'{"dtypes": [5]}'
        data = codec._PREFIX.pack(codec.MAGIC, codec.VERSION, len(header)) + header + hashlib.blake2b(
            header, digest_size=16).digest()  # fmt: skip
    path.write_bytes(bytes(data))
    tier = _tier(tmp_path)
    assert block_hash in tier and tier.load(block_hash) is None
    assert not path.exists() and block_hash not in tier and tier.used_bytes == 0


def test_a_file_of_the_old_int8_layout_is_a_miss(tmp_path):
    """Version 1 stored int8 keys with per-token fp32 scales; read as today's per-channel layout, its bytes would
    be other numbers. It is a miss (and removed), never a block."""
    import json

    import zstandard

    _, block_hash, path = _stored(tmp_path)
    bs, kvh, dim = SHAPE
    plane = torch.zeros(bs, kvh, dim, dtype=torch.int8).numpy().tobytes() + torch.ones(bs, kvh).numpy().tobytes()
    header = json.dumps({"key": KEY, "hash": block_hash.hex(), "dtypes": ["int8", "int8"]}).encode()
    body = zstandard.ZstdCompressor().compress(plane * 4)
    path.write_bytes(codec._PREFIX.pack(codec.MAGIC, 1, len(header)) + header
                     + hashlib.blake2b(header + body, digest_size=16).digest() + body)  # fmt: skip
    assert codec.VERSION == 2
    tier = _tier(tmp_path)
    assert tier.load(block_hash) is None and not path.exists()


def test_foreign_files_are_misses(tmp_path):
    """A file of another model (same name), or another block's file under this name, never passes for this one."""
    _, block_hash, path = _stored(tmp_path)
    assert _tier(tmp_path, key="model-b|fp32").load(block_hash) is None and not path.exists()
    writer = _tier(tmp_path)
    writer.store(_h("b"), _layers("int8", 1))
    assert writer.flush(10.0)
    other = tmp_path / f"{_h('b').hex()}.kvb"
    os.replace(other, tmp_path / f"{block_hash.hex()}.kvb")
    assert _tier(tmp_path).load(block_hash) is None
    wrong_shape = DiskTier(tmp_path, 1 << 20, KEY, (4, 2, 16), 2)
    wrong_shape.store(_h("c"), [KVBlocks(torch.zeros(1, 4, 2, 16), torch.zeros(1, 4, 2, 16))] * 2)
    assert wrong_shape.flush(10.0)
    assert _tier(tmp_path).load(_h("c")) is None


def test_folder_stays_under_its_bound_dropping_the_least_recently_used(tmp_path):
    size = len(encode_block(KEY, _h("x"), _layers("int8", 0)))
    tier = _tier(tmp_path, capacity=3 * size + size // 2)
    for i in range(3):
        tier.store(_h(f"b{i}"), _layers("int8", i))
    assert tier.flush(10.0) and tier.load(_h("b0")) is not None  # b0 is now the most recently used
    tier.store(_h("b3"), _layers("int8", 3))
    assert tier.flush(10.0)
    assert [_h(f"b{i}") in tier for i in range(4)] == [True, False, True, True]
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= tier.capacity_bytes
    smaller = _tier(tmp_path, capacity=2 * size)  # a restart with a smaller bound trims the folder at once
    assert smaller.num_blocks == 2 and sum(p.stat().st_size for p in tmp_path.iterdir()) <= 2 * size


def test_file_names_are_hashes_only(tmp_path):
    folder = tmp_path / "tier"
    tier = _tier(folder)
    (tmp_path / "keep.txt").write_text("not ours")
    (folder / "notes.kvb").write_text("not ours either")
    tier.store(_h("../../etc/passwd"), _layers("int8", 0))
    with pytest.raises(ValueError):
        tier.store(b"../escape", _layers("int8", 0))
    assert tier.flush(10.0)
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted([f"{_h('../../etc/passwd').hex()}.kvb", "notes.kvb"])
    assert (tmp_path / "keep.txt").exists() and _tier(folder).num_blocks == 1  # others' files are left alone


def _evict_everything(engine) -> None:
    engine.pool.release(engine.pool.allocate(engine.pool.num_available))


def test_a_restarted_engine_serves_the_disk_tier(tiny_bundle, tmp_path):
    greq = GenerateRequest("the robot sees a red cup on the table " * 6, sampling=SamplingParams(max_new_tokens=3))
    first = make_engine(tiny_bundle, disk_tier_path=str(tmp_path))
    expected = first.generate([greq])[0]
    _evict_everything(first)
    assert first.tiers.disk.flush(10.0) and first.tiers.disk.num_blocks > 0
    second = make_engine(tiny_bundle, disk_tier_path=str(tmp_path))
    again = second.generate([greq])[0]
    assert again.token_ids == expected.token_ids
    assert again.reused_prefix_tokens == first.tiers.disk.num_blocks * 16 > 0
    disk = second.stats().tiers[-1]
    assert (disk.name, disk.hits, disk.blocks) == ("disk", first.tiers.disk.num_blocks, first.tiers.disk.num_blocks)
    other_format = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), kv_dtype="int8")
    assert other_format.generate([greq])[0].reused_prefix_tokens == 0  # another KV format: another key, a miss


def test_disk_only_tier_takes_blocks_straight_from_the_pool(tiny_bundle, tmp_path):
    engine = make_engine(tiny_bundle, disk_tier_path=str(tmp_path), kv_dtype="fp16")
    engine.generate([GenerateRequest("a b c d " * 10, sampling=SamplingParams(max_new_tokens=1))])
    held = take_blocks([layer.blocks for layer in engine.kv.layers], 0)
    block_hash = engine.pool.blocks[0].block_hash
    _evict_everything(engine)
    assert engine.tiers.disk.flush(10.0)  # read back from its file, not the writer's queue
    assert _equal(engine.tiers.disk.load(block_hash), held)


def test_a_failed_write_loses_the_block_not_the_caller(tmp_path):
    tier = _tier(tmp_path)
    blocker = tmp_path / f"{_h('a').hex()}.kvb"
    blocker.mkdir()  # a folder with a file where the block's file goes: the rename fails (as a full disk would
    (blocker / "inside").write_text("x")  # refuse the write), even as root
    tier.store(_h("a"), _layers("int8", 0))
    assert tier.flush(10.0)
    assert _h("a") not in tier and tier.used_bytes == 0 and [p.name for p in tmp_path.iterdir()] == [blocker.name]
    assert [p.name for p in blocker.iterdir()] == ["inside"]  # (and the temporary file is gone)


def test_a_stalled_disk_is_recomputed_past_not_waited_on(tiny_bundle, tmp_path, monkeypatch):
    monkeypatch.setattr(tiers_module, "DISK_READ_TIMEOUT_S", 0.2)
    greq = GenerateRequest("the robot sees a red cup on the table " * 6, sampling=SamplingParams(max_new_tokens=3))
    engine = make_engine(tiny_bundle, disk_tier_path=str(tmp_path))
    expected = engine.generate([greq])[0]
    disk, load = engine.tiers.disk, engine.tiers.disk.load
    unstall, loads = threading.Event(), []

    def stalled(block_hash):
        loads.append(block_hash)
        unstall.wait(60)  # a disk that does not answer (a hung network mount)
        return load(block_hash)

    disk.load = stalled
    try:
        for _ in range(2):  # the first waits out the timeout; the second does not ask the stalled disk again
            _evict_everything(engine)
            out = engine.generate([greq])[0]
            assert out.token_ids == expected.token_ids and out.reused_prefix_tokens == 0  # recomputed
            assert len(loads) == 1
    finally:
        unstall.set()
    engine.tiers._stalled_read.result(timeout=10)  # noqa: SLF001 - the stalled read has come back
    monkeypatch.setattr(tiers_module, "DISK_READ_TIMEOUT_S", 60.0)  # (a healthy read late on a loaded machine)
    _evict_everything(engine)
    again = engine.generate([greq])[0]  # the read came back: the disk is asked again
    assert again.token_ids == expected.token_ids and again.reused_prefix_tokens == disk.num_blocks * 16 > 0


class StalledWrites:
    """Holds the tier's writer in each file write (a disk that does not answer) until ``unstall`` is set;
    ``entered`` is set once the first write began."""

    def __init__(self, tier: DiskTier) -> None:
        self.put, self.entered, self.unstall = tier._put_file, threading.Event(), threading.Event()  # noqa: SLF001
        tier._put_file = self._stalled  # noqa: SLF001 - the file write itself

    def _stalled(self, block_hash, layers):
        self.entered.set()
        self.unstall.wait(60)
        return self.put(block_hash, layers)


def test_a_stalled_write_holds_neither_the_caller_nor_the_block(tmp_path):
    """store only queues: with the disk not answering it returns at once, the block is in the tier and served from
    memory, and flush says the writer is not done; once the disk answers the file is there."""
    tier = _tier(tmp_path)
    stalled = StalledWrites(tier)
    layers = _layers("int8", 0)
    try:
        start = time.monotonic()
        tier.store(_h("a"), layers)
        assert time.monotonic() - start < 1.0
        assert _h("a") in tier and tier.num_blocks == 1 and _equal(tier.load(_h("a")), layers)
        assert not tier.flush(0.2) and tier.used_bytes == 0
    finally:
        stalled.unstall.set()
    assert tier.flush(10.0) and tier.queued_bytes == 0 and tier.used_bytes > 0
    assert _equal(_tier(tmp_path).load(_h("a")), layers)


def test_the_write_queue_is_bounded_and_drops_past_it(tmp_path, monkeypatch):
    """WRITE_QUEUE_BYTES of blocks wait for a stalled writer at most: the next is dropped (not in the tier, counted),
    never waited for."""
    block_bytes = sum(blocks.nbytes for blocks in _layers("int8", 0))
    monkeypatch.setattr(disk_tier_module, "WRITE_QUEUE_BYTES", 2 * block_bytes)
    tier = _tier(tmp_path)
    stalled = StalledWrites(tier)
    try:
        for i in range(3):
            tier.store(_h(f"b{i}"), _layers("int8", i))
        assert [_h(f"b{i}") in tier for i in range(3)] == [True, True, False] and tier.dropped_writes == 1
        assert tier.queued_bytes == 2 * block_bytes
    finally:
        stalled.unstall.set()
    assert tier.flush(10.0) and tier.queued_bytes == 0 and _tier(tmp_path).num_blocks == 2


def test_a_block_discarded_while_queued_leaves_no_file(tmp_path):
    """A swapped request's own block discarded before the writer reached it (or while it wrote it) is no file."""
    tier = _tier(tmp_path)
    stalled = StalledWrites(tier)
    try:
        tier.store(_h("first"), _layers("int8", 0))  # the writer is held in this one's write
        tier.store(_h("tail"), _layers("int8", 1))
        assert stalled.entered.wait(10.0)
        tier.discard(_h("first"))  # discarded while written
        tier.discard(_h("tail"))  # discarded while queued
        assert _h("first") not in tier and _h("tail") not in tier
    finally:
        stalled.unstall.set()
    assert tier.flush(10.0) and tier.queued_bytes == 0 and tier.num_blocks == 0
    assert list(tmp_path.iterdir()) == []


def test_an_engine_over_a_stalled_disk_answers_and_closes_without_waiting(tiny_bundle, tmp_path, monkeypatch):
    """Evictions into a disk that does not answer cost the engine nothing (writes are queued), and its close does not
    persist into it or wait for it beyond DISK_READ_TIMEOUT_S."""
    monkeypatch.setattr(tiers_module, "DISK_READ_TIMEOUT_S", 0.2)
    greq = GenerateRequest("the robot sees a red cup on the table " * 6, sampling=SamplingParams(max_new_tokens=3))
    engine = make_engine(tiny_bundle, disk_tier_path=str(tmp_path))
    stalled = StalledWrites(engine.tiers.disk)
    try:
        expected = engine.generate([greq])[0]
        _evict_everything(engine)  # every block queued behind the stalled write
        again = engine.generate([greq])[0]
        assert again.token_ids == expected.token_ids and again.reused_prefix_tokens > 0  # served from the queue
        start = time.monotonic()
        engine.close()
        assert time.monotonic() - start < 2.0
    finally:
        stalled.unstall.set()


def test_a_block_stored_again_after_its_discard_is_the_new_one(tmp_path):
    """A block discarded while the writer wrote it, then stored again with other contents: the second is the file,
    the first's write does not take its place or delete it."""
    tier = _tier(tmp_path)
    stalled = StalledWrites(tier)
    second = _layers("int8", 1)
    try:
        tier.store(_h("a"), _layers("int8", 0))
        assert stalled.entered.wait(10.0)
        tier.discard(_h("a"))
        tier.store(_h("a"), second)
        assert _equal(tier.load(_h("a")), second)
    finally:
        stalled.unstall.set()
    assert tier.flush(10.0) and tier.queued_bytes == 0 and tier.num_blocks == 1
    assert _equal(_tier(tmp_path).load(_h("a")), second)


def test_a_process_that_wrote_to_the_tier_exits_cleanly(tmp_path):
    """The writer thread (it ran torch) is left alone at exit, not ended while the interpreter finalizes, which
    aborted the process (std::terminate, status 134) once a finalizer stopped it there."""
    script = f"""
import torch
from oxygen_ros.engine.disk_tier import DiskTier
from oxygen_ros.kernels import KVBlocks
tier = DiskTier({str(tmp_path)!r}, 1 << 20, "k", (4, 2, 8), 2)
tier.store(bytes(32), [KVBlocks(torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 2, 8))] * 2)
assert tier.flush(10.0)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(tmp_path.iterdir())) == 1


def test_a_write_cut_short_by_a_killed_process_is_deleted_at_the_next_start(tmp_path):
    """A temporary file of a process that no longer runs (killed mid-write) matches no block name: a new tier deletes
    it instead of leaving it on the disk uncounted; one of a live process (its write under way) is left alone."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, live = (tmp_path / f".{_h(name).hex()}.kvb.{pid}.7.tmp" for name, pid in
                  (("a", int(gone.stdout)), ("b", os.getpid())))  # fmt: skip
    dead.write_bytes(b"half a block")
    live.write_bytes(b"a block being written")
    assert _tier(tmp_path).num_blocks == 0
    assert not dead.exists() and live.exists()
