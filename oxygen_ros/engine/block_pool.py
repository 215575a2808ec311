"""Block bookkeeping of the unified KV pool: free list, reference counts, prefix-cache index, eviction.

Every block is in exactly one state:
- free:   ref_count 0, no hash; never holds reusable KV;
- cached: ref_count 0, has a hash; its KV can be reused by a later prefix hit until it is evicted;
- used:   ref_count > 0; owned by one request, or shared by several (ref_count > 1).
``check_invariants`` verifies free + used + cached = total and, given the block tables, that every ref_count equals
the number of table references.  Allocation takes free blocks first and evicts cached ones only when none are left,
in the order the eviction policy chooses (LRU here; the memory-pressure work plugs in attention-aware scoring).
"""

from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None


class LRUEviction:
    """Evicts the cached block released longest ago."""

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()

    def add(self, block_id: int) -> None:
        self._order[block_id] = None
        self._order.move_to_end(block_id)

    def remove(self, block_id: int) -> None:
        self._order.pop(block_id, None)

    def pop_victim(self) -> int:
        block_id, _ = self._order.popitem(last=False)
        return block_id

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._order


class BlockPool:
    """Hands out block ids of a pool of ``num_blocks`` blocks; holds no tensors."""

    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks <= 0:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self._cached = LRUEviction()
        self._by_hash: dict[bytes, int] = {}
        self.evictions = 0
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0  # of those, found in the cache

    # --- counts -------------------------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free - self.num_cached

    @property
    def num_available(self) -> int:
        """Blocks an allocation can get now (free ones plus evictable cached ones)."""
        return self.num_free + self.num_cached

    @property
    def num_shared(self) -> int:
        return sum(1 for b in self.blocks if b.ref_count > 1)

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else 0.0

    # --- allocation ---------------------------------------------------------------------------------------------
    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks (ref_count 1); raises MemoryError without side effects if fewer are available."""
        if n > self.num_available:
            raise MemoryError(f"need {n} KV blocks, {self.num_available} available")
        out = []
        for _ in range(n):
            block_id = self._free.popleft() if self._free else self._evict()
            block = self.blocks[block_id]
            block.ref_count = 1
            out.append(block_id)
        return out

    def _evict(self) -> int:
        block_id = self._cached.pop_victim()
        block = self.blocks[block_id]
        del self._by_hash[block.block_hash]
        block.block_hash = None
        self.evictions += 1
        return block_id

    def lookup(self, block_hash: bytes) -> int | None:
        """Block id holding KV for this hash, if cached or in use."""
        return self._by_hash.get(block_hash) if self.enable_prefix_caching else None

    def acquire(self, block_id: int) -> None:
        """Add a reference to an existing block (a prefix hit or a fork)."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self._cached.remove(block_id)
        block.ref_count += 1

    def release(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block; unreferenced hashed blocks stay reusable as cached."""
        for block_id in block_ids:
            block = self.blocks[block_id]
            if block.ref_count <= 0:
                raise RuntimeError(f"double free of KV block {block_id}")
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.block_hash is not None:
                    self._cached.add(block_id)
                else:
                    self._free.append(block_id)

    def register_hash(self, block_id: int, block_hash: bytes) -> None:
        """Publish a full, computed block under its hash so later prompts can reuse it."""
        if not self.enable_prefix_caching or self.blocks[block_id].block_hash is not None:
            return
        if block_hash in self._by_hash:  # computed twice concurrently: keep the first copy
            return
        self.blocks[block_id].block_hash = block_hash
        self._by_hash[block_hash] = block_id

    def reset_prefix_cache(self) -> None:
        """Drop every cached (unreferenced) block back to free, e.g. before a benchmark."""
        while len(self._cached):
            block_id = self._evict()
            self.evictions -= 1
            self._free.append(block_id)

    # --- checks -------------------------------------------------------------------------------------------------
    def check_invariants(self, block_tables: Iterable[list[int]] = ()) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent (a debug check, O(num_blocks))."""
        free, cached = set(self._free), set(self._cached._order)
        assert len(free) == len(self._free), "duplicate ids in the free list"
        assert not free & cached, "a block is both free and cached"
        used = {b.block_id for b in self.blocks if b.ref_count > 0}
        assert not used & (free | cached), "a referenced block is on the free or cached list"
        assert len(free) + len(used) + len(cached) == self.num_blocks, "free + used + cached != total"
        refs = [0] * self.num_blocks
        for table in block_tables:
            for block_id in table:
                refs[block_id] += 1
        for block in self.blocks:
            assert block.ref_count == refs[block.block_id], (
                f"block {block.block_id}: ref_count {block.ref_count} != {refs[block.block_id]} table references"
            )
            assert block.ref_count >= 0
            if block.block_id in cached:
                assert block.block_hash is not None, "cached block without hash"
            if block.block_id in free:
                assert block.block_hash is None, "free block still has a hash"
        for block_hash, block_id in self._by_hash.items():
            assert self.blocks[block_id].block_hash == block_hash, "hash index out of sync"
