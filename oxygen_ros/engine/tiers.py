"""The KV memory tiers behind the device pool: L0 pool -> L1 host (``HostTier``) -> L2 disk (``DiskTier``).

Eviction from the pool demotes (``demote``): blocks go to L1, L1's overflow to L2 (straight to L2 when L1 is off).
A prefix lookup that misses the pool continues down the tiers (``available``) and the blocks found are promoted
(``promote``) into freshly allocated pool blocks, requantized into the pool's format, instead of being recomputed.
A block of that chain that is still in the pool (its parent was evicted before it) is copied from there: it cannot
be shared, as a promotion cut short by a bad file leaves the rest of the chain to be recomputed in place.
Disk reads run on a daemon worker thread (``DaemonWorker``) ``prefetch_degree`` blocks ahead of the block being
restored, so decompression overlaps the copies (zstd and file reads release the GIL); a read not answered within
``DISK_READ_TIMEOUT_S`` (a stalled disk) is recomputed past, and the disk is not read again, nor persisted to at
shutdown, until that read returns. Its writes, on eviction, are queued for the disk tier's own writer thread
(``DiskTier.store``). On CUDA the host-to-device copies of
restored blocks run on a side stream as compact codes and are requantized on the GPU (``block_moves.py``).  L1 keeps a
promoted block too (inclusive), so a block that bounces between the pool and L1 is copied out only once.

Hit accounting: L0's hits and misses are the pool's prefix counters; a block that misses L0 and is restored from L1
is an L1 hit, from L2 an L2 hit; the rest fall through as misses of every tier below.

Preemption by swap (``preemption.py``): ``save`` copies a running request's blocks into L1 before they are
released (full blocks under their hash, so ``promote`` brings them back like any prefix; the partial last block
under the request's own key, brought back by ``restore_saved`` and then ``discard``-ed).

Restarts: ``persist`` (on engine shutdown) writes what the pool and L1 hold to L2, so a new engine with the same
model and KV format starts with those prefixes on disk.
"""

import logging
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout  # (the builtin TimeoutError only from Python 3.11)
from dataclasses import replace

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kv.block_moves import BlockMover
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.daemon_worker import DaemonWorker
from oxygen_ros.engine.disk_tier import DiskTier
from oxygen_ros.engine.host_tier import HostTier, take_blocks
from oxygen_ros.engine.io import TierUsage
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels import KVBlocks

log = logging.getLogger(__name__)
DISK_READ_TIMEOUT_S = 2.0  # a block read slower than this (a stalled or network disk) is recomputed instead


class TierManager:
    def __init__(
        self, pool: BlockPool, kv: KVCache, host: HostTier | None, disk: DiskTier | None, prefetch_degree: int = 2,
    ) -> None:  # fmt: skip
        """``kv``: the pool's storage, read and written as whole blocks (``KVCache.read_blocks`` / ``write_blocks``),
        so pools of one format and of several are handled alike."""
        self.pool = pool
        self.kv = kv
        self.host = host
        self.disk = disk
        self.prefetch_degree = prefetch_degree
        self.host_hits = 0
        self.disk_hits = 0
        self._worker = DaemonWorker("oxygen-kv-prefetch") if disk else None
        self._stalled_read: Future | None = None  # a disk read past its timeout, still running on the worker
        self.mover = host.mover if host is not None else BlockMover(kv.device, kv.backend.kernels)

    def demote(self, block_ids: list[int], hashes: list[bytes]) -> None:
        """Save evicted pool blocks before their ids are reused (the pool's ``on_evict`` hook)."""
        if self.host is not None:
            self.save(hashes, block_ids)
        elif self.disk is not None:
            for positions, layers, indices in self.kv.read_blocks(block_ids):
                for position, index in zip(positions, indices):
                    self.disk.store(hashes[position], take_blocks(layers, index))

    def _to_host(self, hashes: list[bytes], layers: list[KVBlocks], ids: list[int]) -> None:
        """Blocks into L1; what L1 pushes out goes to L2 when there is one."""
        for block_hash, pushed in self.host.put(hashes, layers, ids):
            if self.disk is not None:
                self.disk.store(block_hash, pushed)

    def available(self, hashes: list[bytes]) -> int:
        """How many leading ``hashes`` some tier (or the pool) holds, without I/O; touched so coming moves keep them."""
        n = 0
        for h in hashes:
            in_tier = (self.host is not None and h in self.host) or (self.disk is not None and h in self.disk)
            if not (in_tier or self.pool.lookup(h) is not None):
                break
            n += 1
        if self.host is not None:
            self.host.touch(hashes[:n])
        return n

    def promote(self, hashes: list[bytes], dst_ids: list[int]) -> int:
        """Restore blocks ``hashes`` (a prefix chain, in order) into pool blocks ``dst_ids``; returns how many
        leading ones were restored (a block that vanished or failed its checks ends the run: the rest is
        recomputed)."""
        pending: dict[bytes, Future] = {}
        done = 0
        try:
            while done < len(hashes):
                in_pool = self.pool.lookup(hashes[done])
                if in_pool is not None:
                    self._copy_in_pool(in_pool, dst_ids[done])
                    done += 1
                    continue
                run = self._host_run(hashes[done:])
                if run:
                    self._from_host(hashes[done : done + run], dst_ids[done : done + run])
                    self.host_hits += run
                    done += run
                    continue
                layers = self._disk_block(hashes, done, pending)
                if layers is None:
                    break
                self._write(layers, dst_ids[done])
                if self.host is not None:
                    self._to_host([hashes[done]], layers, [0])
                self.disk_hits += 1
                done += 1
        finally:
            for future in pending.values():
                future.cancel()
        return done

    def _host_run(self, hashes: list[bytes]) -> int:
        n = 0
        while self.host is not None and n < len(hashes) and hashes[n] in self.host and self.pool.lookup(hashes[n]) is None:
            n += 1
        return n

    def _copy_in_pool(self, src_id: int, dst_id: int) -> None:
        self.pool.prefix_hits += 1  # served by the pool after all
        self.kv.copy_blocks([src_id], [dst_id])

    def _from_host(self, hashes: list[bytes], dst_ids: list[int]) -> None:
        def fill(layers: list[KVBlocks], indices: list[int], positions: list[int]) -> None:
            self.host.restore([hashes[p] for p in positions], layers, indices)

        self.kv.write_blocks(dst_ids, fill)

    def _disk_block(self, hashes: list[bytes], i: int, pending: dict[bytes, Future]) -> list[KVBlocks] | None:
        """Block ``i`` from disk, first queueing reads of the next ``prefetch_degree`` disk-only blocks. None (the
        rest is recomputed) when the disk lacks it or does not answer within ``DISK_READ_TIMEOUT_S``: a stalled disk
        holds the engine thread that long once, then is not read until that read returns."""
        if self.disk is None or self._worker is None:
            return None
        if self._stalled_read is not None:
            if not self._stalled_read.done():
                return None
            self._stalled_read = None
        for h in hashes[i : i + 1 + self.prefetch_degree]:
            if h not in pending and h in self.disk and not (self.host is not None and h in self.host):
                pending[h] = self._worker.submit(self.disk.load, h)
        future = pending.pop(hashes[i], None)
        if future is None:
            return None
        try:
            return future.result(timeout=DISK_READ_TIMEOUT_S)
        except FutureTimeout:
            log.warning("the disk tier did not answer a read within %.1f s: recomputing instead", DISK_READ_TIMEOUT_S)
            self._stalled_read = future
            return None

    def _write(self, layers: list[KVBlocks], dst_id: int) -> None:
        def fill(pool_layers: list[KVBlocks], indices: list[int], _: list[int]) -> None:
            self.mover.move(layers, [0], pool_layers, indices)

        self.kv.write_blocks([dst_id], fill)

    def save(self, hashes: list[bytes], block_ids: list[int]) -> None:
        """Copy pool blocks (still held) into L1 under ``hashes``; L1's overflow goes to L2."""
        if self.host is None:
            return
        for positions, layers, indices in self.kv.read_blocks(block_ids):
            self._to_host([hashes[p] for p in positions], layers, indices)

    def restore_saved(self, key: bytes, dst_id: int) -> bool:
        """Write the L1 block ``key`` into pool block ``dst_id``; False when L1 no longer has it."""
        if self.host is None or key not in self.host:
            return False
        self._from_host([key], [dst_id])
        return True

    def discard(self, key: bytes) -> None:
        """Forget a saved block in every tier."""
        if self.host is not None:
            self.host.discard(key)
        if self.disk is not None:
            self.disk.discard(key)

    def persist(self) -> None:
        """Write the blocks the pool and L1 hold to L2: the pool's first, then L1's most recent first, as many as
        the disk bound holds (counted uncompressed, so nothing written now pushes out anything else written now);
        written least valuable first, so the disk's LRU order ranks them the same way after a restart. First the
        writer finishes what eviction queued, for as long as it makes progress (a slow SD card); nothing is written
        when it wrote nothing for DISK_READ_TIMEOUT_S (a stalled disk)."""
        if self.disk is None:
            return
        left = self.disk.queued_bytes
        while not self.disk.flush(DISK_READ_TIMEOUT_S):
            if self.disk.queued_bytes >= left:
                log.warning("the disk tier's writer wrote nothing for %.1f s: its KV is not persisted",
                            DISK_READ_TIMEOUT_S)  # fmt: skip
                return
            left = self.disk.queued_bytes
        pool_bytes = self.kv.pool_layout.bytes_per_block
        wanted = [(b.block_hash, None, b.block_id, pool_bytes(b.fmt))
                  for b in self.pool.blocks if b.block_hash is not None]  # fmt: skip
        if self.host is not None:
            host_bytes = self.host.layout.bytes_per_block
            wanted += [(h, self.host.layers, slot, host_bytes) for h, slot in reversed(self.host.items())]
        budget, chosen = self.disk.capacity_bytes, []
        for item in wanted:
            if item[3] > budget:
                break
            budget -= item[3]
            chosen.append(item)
        for block_hash, layers, index, _ in reversed(chosen):
            if layers is None:  # a pool block: read one at a time (a wide format is copied out to be read)
                ((_, layers, (index,)),) = self.kv.read_blocks([index])
            self.disk.write(block_hash, take_blocks(layers, index))

    def close(self) -> None:
        """Persist to L2 and stop the prefetch and writer threads, waiting for each at most DISK_READ_TIMEOUT_S; with
        a read known to be stalled, neither persist nor wait (the disk does not answer: the engine's shutdown must not
        wait on it, and the threads, daemons, do not hold up the process's exit)."""
        stalled = self._stalled_read is not None and not self._stalled_read.done()
        if stalled:
            log.warning("the disk tier still has not answered a read: its KV is not persisted")
        else:
            self.persist()
        if self._worker is not None:
            self._worker.shutdown(0.0 if stalled else DISK_READ_TIMEOUT_S)
        if self.disk is not None:  # (a writer that persist found still busy is not waited for again)
            self.disk.close(DISK_READ_TIMEOUT_S if not stalled and self.disk.flush(0.0) else 0.0)

    def usage(self, pool_misses: int) -> list[TierUsage]:
        """L1 and L2 rows of ``PoolStats.tiers``, given how many lookups missed the pool."""
        out = []
        misses = pool_misses
        if self.host is not None:
            misses -= self.host_hits
            out.append(TierUsage("cpu", self.host.capacity_bytes, self.host.used_bytes, self.host.num_blocks,
                                 self.host_hits, misses))  # fmt: skip
        if self.disk is not None:
            misses -= self.disk_hits
            out.append(TierUsage("disk", self.disk.capacity_bytes, self.disk.used_bytes, self.disk.num_blocks,
                                 self.disk_hits, misses))  # fmt: skip
        return out


def build_tiers(config: EngineConfig, kv: KVCache, pool: BlockPool, key: str) -> TierManager | None:
    """The tiers ``config`` asks for behind pool ``kv`` (None when both are off); ``key`` = model id | KV format."""
    if not config.cpu_tier_bytes and not config.disk_tier_path:
        return None
    layout, device = kv.layout, kv.device
    if kv.pool_layout.mixed and config.cpu_tier_bytes and config.cpu_tier_format != "int8":
        raise EngineError(
            ErrorCode.INVALID_ARGUMENT,
            f"cpu_tier_format {config.cpu_tier_format!r} keeps the pool's format, but this pool holds several "
            f"({kv.pool_layout.name}): use int8",
        )
    if kv.pool_layout.mixed:
        layout = replace(layout, dtype=torch.int8)  # L1 stores every format as int8
    try:
        host = HostTier(layout, config.cpu_tier_bytes, config.cpu_tier_format, device, kv.backend.kernels) \
            if config.cpu_tier_bytes else None  # fmt: skip
    except ValueError as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc
    try:
        shape = (layout.block_size, layout.num_kv_heads, layout.head_dim)
        disk = DiskTier(config.disk_tier_path, config.disk_tier_bytes, key, shape, layout.num_layers) \
            if config.disk_tier_path else None  # fmt: skip
    except OSError as exc:
        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"disk_tier_path unusable: {exc}") from exc
    return TierManager(pool, kv, host, disk, config.prefetch_degree)
