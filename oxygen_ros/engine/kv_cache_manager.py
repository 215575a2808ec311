"""Per-request view of the pool: block tables, prefix reuse, slot growth, copy-on-write, preemption, release.

The block pool knows blocks; this class knows which request holds which blocks, what their tokens hash to and, in a
mixed-format pool, which format each block of a request is stored in (``Request.block_format``).  Room is counted in
pool units, so a wide block costs what it occupies.
"""

import time
from collections.abc import Callable

from oxygen_ros.engine.block_hash import block_hash_chain, root_hash
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.engine.preemption import PreemptionCosts, SwapRecord, swap_key
from oxygen_ros.engine.request import Request
from oxygen_ros.engine.tiers import TierManager


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class KVCacheManager:
    def __init__(
        self, pool: BlockPool, kv: KVCache, model_id: str, kv_dtype: str, tiers: TierManager | None = None,
        preemption_mode: str = "recompute",
    ) -> None:  # fmt: skip
        self.pool = pool
        self.kv = kv
        self.mixed = kv.pool_layout.mixed
        self.tiers = tiers
        self.block_size = kv.layout.block_size
        self.model_id = model_id
        self.kv_dtype = kv_dtype
        host = tiers.host if tiers is not None else None
        lossless_host = host is not None and not self.mixed and all(
            host.layout.layer_spec(i) == kv.layout.layer_spec(i) for i in range(kv.layout.num_layers)
        )
        self.costs = PreemptionCosts(preemption_mode, lossless_host)
        self.swapped: dict[str, SwapRecord] = {}  # preempted requests whose KV waits in L1, by request id
        # Task types that have read each block since its KV was written (stale for free blocks: the next
        # allocation overwrites it). What shows an observation's prefix computed once and read by every task.
        self.readers: dict[int, set[str]] = {}

    def _root(self, req: Request) -> bytes:
        return root_hash(self.model_id, self.kv_dtype, req.cache_salt)

    def reusable_hashes(self, req: Request) -> list[bytes]:
        """Hashes of the full blocks a waiting request may reuse (its last token is always computed).

        A preempted request resumes through the same path: its generated tokens' blocks are hits too.
        """
        return self._hashes(req, (req.num_tokens - 1) // self.block_size)

    def cached_prefix_tokens(self, req: Request) -> int:
        """Leading tokens of a waiting request whose blocks the pool holds now: what admitting it would not compute
        (blocks only a tier holds are not counted: restoring them is work too). Changes nothing but the request's
        memo of its block hashes."""
        return len(self._pool_hits(self.reusable_hashes(req))) * self.block_size

    def _pool_hits(self, hashes: list[bytes]) -> list[int]:
        """The pool's blocks for the leading run of ``hashes`` it holds."""
        hits: list[int] = []
        for h in hashes:
            block_id = self.pool.lookup(h)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def _hashes(self, req: Request, num_full: int) -> list[bytes]:
        """The hashes of the request's first ``num_full`` full blocks: kept on the request and extended, never
        recomputed, so a request waiting many steps or resuming after preemption hashes each block once."""
        known = req.token_block_hashes
        if num_full > len(known):
            parent = known[-1] if known else None
            tokens = req.all_token_ids[: num_full * self.block_size]
            known.extend(block_hash_chain(self._root(req), tokens, self.block_size, req.mm_spans, len(known), parent,
                                          self._fmt(req)))  # fmt: skip
        return known[:num_full]

    def _fmt(self, req: Request) -> Callable[[int], int] | None:
        """What the block hashes must know of the formats: nothing in a single-format pool."""
        return req.block_format if self.mixed else None

    def _units(self, req: Request, first: int, count: int) -> int:
        """Pool units that blocks ``first .. first + count - 1`` of ``req`` take."""
        return sum(self.pool.units_for(1, req.block_format(i)) for i in range(first, first + count))

    def _allocate(self, req: Request, first: int, count: int) -> list[int]:
        """Blocks ``first .. first + count - 1`` of ``req``, each in its format (runs of one format at a time); on a
        failure, the runs already taken are given back."""
        out: list[int] = []
        try:
            while len(out) < count:
                fmt = req.block_format(first + len(out))
                run = 1
                while len(out) + run < count and req.block_format(first + len(out) + run) == fmt:
                    run += 1
                out += self.pool.allocate(run, fmt)
        except BaseException:
            self.pool.release(reversed(out))
            raise
        self._written_by(req, out)
        return out

    def _written_by(self, req: Request, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self.readers[block_id] = {req.task_type}

    def _read_by(self, req: Request, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self.readers.setdefault(block_id, set()).add(req.task_type)

    def reader_histogram(self) -> list[int]:
        """``[k]``: blocks holding KV (used or cached) that requests of k + 1 distinct task types have read since
        it was written."""
        counts: list[int] = []
        for block in self.pool.blocks:
            if block.ref_count > 0 or block.block_hash is not None:
                k = len(self.readers.get(block.block_id, ()))
                if k:
                    counts.extend([0] * (k - len(counts)))
                    counts[k - 1] += 1
        return counts

    def admit(self, req: Request, hashes: list[bytes] | None = None) -> bool:
        """Give a waiting request blocks for all its tokens, reusing the longest cached prefix: the pool's blocks,
        then blocks promoted from the memory tiers into new pool blocks.

        Returns False, changing nothing in the pool, when it cannot hold the prompt now.
        """
        hashes = self.reusable_hashes(req) if hashes is None else hashes
        hits = self._pool_hits(hashes)
        need = cdiv(req.num_tokens, self.block_size) - len(hits)
        reclaimable_hits = sum(self.pool.blocks[b].num_units for b in hits if self.pool.blocks[b].ref_count == 0)
        if self._units(req, len(hits), need) > self.pool.num_available - reclaimable_hits:
            return False
        self.pool.prefix_queries += len(hashes)
        self.pool.prefix_hits += len(hits)
        for block_id in hits:
            self.pool.acquire(block_id)
        self._read_by(req, hits)
        in_tiers = self.tiers.available(hashes[len(hits) :]) if self.tiers is not None else 0
        new: list[int] = []
        try:
            new = self._allocate(req, len(hits), need)
            start = time.perf_counter()  # (the restore's own time, which the swap costs learn from)
            restored = self.tiers.promote(hashes[len(hits) : len(hits) + in_tiers], new[:in_tiers]) if in_tiers else 0
        except BaseException:  # (a fault evicting or copying KV in) the request never got them: no block may leak
            self.pool.release(reversed(hits + new))
            raise
        for block_id, h in zip(new[:restored], hashes[len(hits) :]):
            self.pool.register_hash(block_id, h)
        reused = len(hits) + restored
        req.block_table = hits + new
        req.block_hashes = hashes[:reused]
        req.num_computed_tokens = reused * self.block_size
        record = self.swapped.pop(req.request_id, None)
        if record is not None:
            self._swap_in(req, record, restored, start)
        req.num_cached_tokens = min(max(req.num_cached_tokens, req.num_computed_tokens), req.num_prompt_tokens)
        return True

    def units_needed(self, req: Request, num_new_tokens: int) -> int:
        """Pool units to allocate before ``num_new_tokens`` more tokens can be written (copy-on-write included)."""
        need = cdiv(req.num_computed_tokens + num_new_tokens, self.block_size) - len(req.block_table)
        units = self._units(req, len(req.block_table), max(need, 0))
        if self._write_block_is_shared(req):
            units += self.pool.blocks[req.block_table[req.num_computed_tokens // self.block_size]].num_units
        return units

    def _write_block_is_shared(self, req: Request) -> bool:
        idx = req.num_computed_tokens // self.block_size
        if req.num_computed_tokens % self.block_size == 0 or idx >= len(req.block_table):
            return False
        return self.pool.blocks[req.block_table[idx]].ref_count > 1

    def reserve(self, req: Request, num_new_tokens: int) -> bool:
        """Make room to write ``num_new_tokens`` tokens; False, changing nothing, when the pool is too full."""
        if self.units_needed(req, num_new_tokens) > self.pool.num_available:
            return False
        if self._write_block_is_shared(req):
            idx = req.num_computed_tokens // self.block_size
            old = req.block_table[idx]
            (new,) = self.pool.allocate(1, self.pool.blocks[old].fmt)
            try:
                self.kv.copy_blocks([old], [new])
            except BaseException:
                self.pool.release([new])
                raise
            self._written_by(req, [new])
            self.pool.release([old])
            req.block_table[idx] = new
        need = cdiv(req.num_computed_tokens + num_new_tokens, self.block_size) - len(req.block_table)
        if need > 0:
            req.block_table.extend(self._allocate(req, len(req.block_table), need))
        return True

    def commit(self, req: Request) -> None:
        """Publish blocks that became full and computed so later requests (any task) can reuse them."""
        num_full = req.num_computed_tokens // self.block_size
        if num_full <= len(req.block_hashes):
            return
        new = self._hashes(req, num_full)[len(req.block_hashes) :]
        for i, h in enumerate(new, start=len(req.block_hashes)):
            self.pool.register_hash(req.block_table[i], h)
        req.block_hashes.extend(new)

    def fork(self, src: Request, dst: Request) -> None:
        """``dst`` continues from ``src``'s KV without copying: the blocks are shared, the tail copied on write."""
        for block_id in src.block_table:
            self.pool.acquire(block_id)
        self._read_by(dst, src.block_table)
        dst.block_table = list(src.block_table)
        dst.block_hashes = list(src.block_hashes)
        dst.num_computed_tokens = src.num_computed_tokens

    def preempt(self, req: Request) -> None:
        """Release a running request's blocks, first swapping the KV only it holds to L1 when that is the cheaper
        way back (``preemption.py``); otherwise it is recomputed, less what the prefix cache still has then."""
        full, tail = divmod(req.num_computed_tokens, self.block_size)
        own = [i for i in range(full) if self.pool.blocks[req.block_table[i]].ref_count == 1]
        keys = [req.block_hashes[i] for i in own]
        ids = [req.block_table[i] for i in own]
        if tail:
            keys.append(swap_key(req.request_id))
            ids.append(req.block_table[full])
        recompute = req.num_computed_tokens - (full - len(own)) * self.block_size
        num_bytes = sum(self.pool.blocks[i].num_units for i in ids) * self.kv.pool_layout.unit_bytes
        if not self.costs.should_swap(num_bytes, recompute):
            self.costs.recomputed += 1
            self.free(req)
            return
        start = time.perf_counter()
        try:
            self.tiers.save(keys, ids)
        except BaseException:  # (a fault copying out) the request keeps its blocks; nothing is left saved under its key
            if tail:
                self.tiers.discard(keys[-1])
            raise
        self.costs.observe_swap(num_bytes, time.perf_counter() - start)
        self.costs.swapped += 1
        record = SwapRecord(req.num_computed_tokens, keys[-1] if tail else None)
        self.free(req)
        self.swapped[req.request_id] = record

    def _swap_in(self, req: Request, record: SwapRecord, restored: int, start: float) -> None:
        """Finish a swapped request's readmission: its partial last block comes back from L1 too when every block
        before it did (otherwise the rest is recomputed)."""
        computed = req.num_computed_tokens
        if record.tail_key is not None:
            try:
                if computed == record.tokens // self.block_size * self.block_size and self.tiers.restore_saved(
                    record.tail_key, req.block_table[len(req.block_hashes)]
                ):
                    req.num_computed_tokens = record.tokens
                    restored += 1
            finally:  # used or not, restored or failed: nothing else reads it
                self.tiers.discard(record.tail_key)
        restored_bytes = restored * self.kv.pool_layout.bytes_per_block(req.kv_format)
        self.costs.observe_swap(restored_bytes, time.perf_counter() - start)

    def free(self, req: Request) -> None:
        """Release every block (and anything a swap left in L1 for it); tail blocks go to the cached list first so
        prefixes are evicted last."""
        record = self.swapped.pop(req.request_id, None)
        if record is not None and record.tail_key is not None:
            self.tiers.discard(record.tail_key)
        self.pool.release(reversed(req.block_table))
        req.block_table = []
        req.block_hashes = []
        req.num_computed_tokens = 0
