"""Block bookkeeping of the unified KV pool: free list, reference counts, prefix-cache index, eviction.

Storage is counted in units (``kv_cache.py``): a block of format ``fmt`` takes ``units_per_block[fmt]`` units, its
first unit's id is the block's id and the rest are its ``extra_units``; in a single-format pool a block is one unit.
Counts (free, used, cached, available) are in units, so blocks of every format share one budget.

Every block is in exactly one state:
- free:   ref_count 0, no hash; never holds reusable KV;
- cached: ref_count 0, has a hash; its KV can be reused by a later prefix hit until it is evicted;
- used:   ref_count > 0; owned by one request, or shared by several (ref_count > 1).
``check_invariants`` verifies free + used + cached = total (units), that every unit belongs to exactly one block or
the free list and, given the block tables, that every ref_count equals the number of table references.  Allocation
takes free units first and evicts cached blocks only when too few are left, in the order the eviction policy
(``eviction.py``) chooses.  Evicted blocks are handed to ``on_evict`` (the memory tiers) before their units are
reused, so their KV can be demoted instead of lost.
"""

from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from oxygen_ros.engine.eviction import EvictionPolicy, LRUEviction

EvictHook = Callable[[list[int], list[bytes]], None]


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None
    fmt: int = 0  # storage format (index into the pool layout's formats)
    extra_units: list[int] = field(default_factory=list)  # units after the first (the id) of a wide format

    @property
    def num_units(self) -> int:
        return 1 + len(self.extra_units)


class BlockPool:
    """Hands out block ids of a pool of ``num_blocks`` units; holds no tensors."""

    def __init__(
        self, num_blocks: int, enable_prefix_caching: bool = True, policy: EvictionPolicy | None = None,
        units_per_block: Sequence[int] = (1,),
    ) -> None:
        if num_blocks <= 0:
            raise ValueError(f"the KV pool needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.units_per_block = tuple(units_per_block)
        self._cached_units = 0
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self.policy: EvictionPolicy = policy if policy is not None else LRUEviction()
        self.on_evict: EvictHook | None = None  # called with (block ids, hashes) before evicted ids are reused
        self._by_hash: dict[bytes, int] = {}
        self.evictions = 0
        self.prefix_queries = 0  # full prompt blocks looked up
        self.prefix_hits = 0  # of those, found in the cache
        self.peak_used = 0  # most units referenced at once since the pool was made: what it has had to hold

    # --- counts -------------------------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return self._cached_units

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
    def units_for(self, n: int, fmt: int = 0) -> int:
        """Units that ``n`` blocks of format ``fmt`` take."""
        return n * self.units_per_block[fmt]

    def allocate(self, n: int, fmt: int = 0) -> list[int]:
        """Take ``n`` blocks of format ``fmt`` (ref_count 1); raises MemoryError without side effects if fewer units
        are available.  Cached blocks are evicted, in the policy's order, until enough units are free."""
        width = self.units_per_block[fmt]
        need = n * width
        if need > self.num_available:
            raise MemoryError(f"need {need} KV units ({n} blocks), {self.num_available} available")
        while len(self._free) < need:
            victims = self.policy.pop_victims(-(-(need - len(self._free)) // max(self.units_per_block)))
            if not victims:  # (num_available counted cached blocks the policy does not hold: a broken invariant)
                raise RuntimeError(f"the eviction policy gave no victim with {self._cached_units} units cached")
            hashes = [self._drop_hash(block_id) for block_id in victims]
            self.evictions += len(victims)
            try:
                if self.on_evict is not None:
                    self.on_evict(victims, hashes)
            finally:  # a save that failed loses the victims' KV (recomputed when asked again), never the blocks
                for block_id in victims:
                    self._cached_units -= self.blocks[block_id].num_units
                    self._free_units(block_id)
        out = []
        for _ in range(n):
            block = self.blocks[self._free.popleft()]
            block.ref_count, block.fmt = 1, fmt
            block.extra_units = [self._free.popleft() for _ in range(width - 1)]
            self.policy.reset(block.block_id)
            out.append(block.block_id)
        self.peak_used = max(self.peak_used, self.num_used)
        return out

    def _free_units(self, block_id: int) -> None:
        block = self.blocks[block_id]
        self._free.append(block_id)
        self._free.extend(block.extra_units)
        block.extra_units = []

    def block_units(self, block_id: int) -> tuple[int, list[int]]:
        """A block's format and its units in token order (the first is the block's id)."""
        block = self.blocks[block_id]
        return block.fmt, [block_id, *block.extra_units]

    def units_of_format(self, fmt: int) -> list[int]:
        """Every unit of the blocks of format ``fmt`` that hold KV (used or cached)."""
        return [u for b in self.blocks if b.fmt == fmt and self._holds_kv(b) for u in (b.block_id, *b.extra_units)]

    def _holds_kv(self, block: Block) -> bool:
        return block.ref_count > 0 or block.block_id in self.policy

    def _drop_hash(self, block_id: int) -> bytes:
        block = self.blocks[block_id]
        block_hash = block.block_hash
        del self._by_hash[block_hash]
        block.block_hash = None
        return block_hash

    def lookup(self, block_hash: bytes) -> int | None:
        """Block id holding KV for this hash, if cached or in use."""
        return self._by_hash.get(block_hash) if self.enable_prefix_caching else None

    def acquire(self, block_id: int) -> None:
        """Add a reference to an existing block (a prefix hit or a fork)."""
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self.policy.remove(block_id)
            self._cached_units -= block.num_units
            self.peak_used = max(self.peak_used, self.num_used)
        block.ref_count += 1

    def release(self, block_ids: Iterable[int]) -> None:
        """Drop one reference from each block; unreferenced hashed blocks stay reusable as cached. Every block is
        checked before any is released: a double free changes nothing (else a retry would release the first ones
        again, and they may be shared)."""
        ids = list(block_ids)
        over = sorted(b for b, n in Counter(ids).items() if self.blocks[b].ref_count < n)
        if over:
            raise RuntimeError(f"double free of KV blocks {over}")
        for block_id in ids:
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.block_hash is not None:
                    self.policy.add(block_id)
                    self._cached_units += block.num_units
                else:
                    self._free_units(block_id)

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
        for block_id in self.policy.pop_victims(len(self.policy)):
            self._drop_hash(block_id)
            self._cached_units -= self.blocks[block_id].num_units
            self._free_units(block_id)

    def reclaim_all(self) -> None:
        """Every unit back to free, with no request holding a block (all were aborted after engine internals raised):
        what a failed operation left with no owner comes back; the cached KV is dropped with it."""
        self.policy.pop_victims(len(self.policy))
        self._by_hash.clear()
        for block in self.blocks:
            block.ref_count, block.block_hash, block.extra_units = 0, None, []
        self._free, self._cached_units = deque(range(self.num_blocks)), 0

    # --- checks -------------------------------------------------------------------------------------------------
    def check_invariants(self, block_tables: Iterable[list[int]] = ()) -> None:
        """Raise AssertionError if the pool's bookkeeping is inconsistent (a debug check, O(num_blocks))."""
        free, cached = set(self._free), set(self.policy.cached_ids())
        assert len(free) == len(self._free), "duplicate ids in the free list"
        assert not free & cached, "a block is both free and cached"
        used = {b.block_id for b in self.blocks if b.ref_count > 0}
        assert not used & (free | cached), "a referenced block is on the free or cached list"
        held = used | cached
        owned = [u for b in held for u in (b, *self.blocks[b].extra_units)]
        assert len(set(owned)) == len(owned) and not free & set(owned), "a unit belongs to two blocks"
        assert self._cached_units == sum(self.blocks[b].num_units for b in cached), "cached unit count out of sync"
        assert len(free) + len(owned) == self.num_blocks, "free + used + cached != total"
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
                assert block.block_hash is None and not block.extra_units, "free unit still has a hash or units"
            if block.block_id in held:
                assert block.num_units == self.units_per_block[block.fmt], f"block {block.block_id} has wrong width"
        for block_hash, block_id in self._by_hash.items():
            assert self.blocks[block_id].block_hash == block_hash, "hash index out of sync"
