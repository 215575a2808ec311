"""What the engine reports: the pool (blocks by state, per task, per tier, how many task types read each block) and
the serving counters the engine thread keeps (``ServingStats``), for stats topics, /diagnostics and benchmarks."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.io import GenerateRequest, PoolStats, RequestOutput, TaskUsage, TierUsage
from oxygen_ros.engine.kv_cache_manager import KVCacheManager
from oxygen_ros.engine.memory import KVFormats
from oxygen_ros.engine.request import Request
from oxygen_ros.engine.tiers import TierManager
from oxygen_ros.errors import ErrorCode


def pool_stats(model_id: str, pool: BlockPool, formats: KVFormats, requests: Iterable[Request], running: int,
               waiting: int, kv_manager: KVCacheManager, tiers: TierManager | None, max_images: int) -> PoolStats:  # fmt: skip
    """A snapshot of the pool; ``running`` and ``waiting`` are the scheduler's counts."""
    bs, layout = formats.block_size, formats.pool_layout
    filled: dict[int, int] = {}
    by_task: dict[str, tuple[str, set[int]]] = {}
    for req in requests:
        for i, block_id in enumerate(req.block_table):
            tokens = min(max(req.num_computed_tokens - i * bs, 0), bs)
            filled[block_id] = max(filled.get(block_id, 0), tokens)
        by_task.setdefault(req.task_id, (req.task_type, set()))[1].update(req.block_table)
    allocated = len(filled) * bs
    names = [lay.name for lay in layout.formats]
    tasks = [
        TaskUsage(
            task_id=task_id,
            task_type=task_type,
            kv_dtype="+".join(dict.fromkeys(names[pool.blocks[b].fmt] for b in sorted(blocks)))
            or names[formats.task_formats[task_type]],
            blocks=len(blocks),
            shared_blocks=sum(1 for b in blocks if pool.blocks[b].ref_count > 1),
            bytes=sum(pool.blocks[b].num_units for b in blocks) * layout.unit_bytes,
        )
        for task_id, (task_type, blocks) in sorted(by_task.items())
    ]
    return PoolStats(
        model=model_id,
        block_size=bs,
        total_blocks=pool.num_blocks,
        free_blocks=pool.num_free,
        cached_blocks=pool.num_cached,
        used_blocks=pool.num_used,
        peak_used_blocks=pool.peak_used,
        shared_blocks=pool.num_shared,
        prefix_hit_rate=pool.prefix_hit_rate,
        fragmentation=1.0 - sum(filled.values()) / allocated if allocated else 0.0,
        evictions=pool.evictions,
        active_requests=running,
        queued_requests=waiting,
        bytes_per_block=layout.unit_bytes,
        max_images=max_images,
        tasks=tasks,
        blocks_by_reader_types=kv_manager.reader_histogram(),
        tiers=tier_usage(pool, layout.unit_bytes, tiers),
    )


def tier_usage(pool: BlockPool, unit_bytes: int, tiers: TierManager | None) -> list[TierUsage]:
    """The device pool (named ``gpu``: L0, on whatever device) first, then the host and disk tiers."""
    held = pool.num_used + pool.num_cached
    misses = pool.prefix_queries - pool.prefix_hits
    l0 = TierUsage("gpu", pool.num_blocks * unit_bytes, held * unit_bytes, held, pool.prefix_hits, misses)
    return [l0, *(tiers.usage(misses) if tiers is not None else [])]


@dataclass(frozen=True)
class ServingStats:
    """A consistent snapshot taken by the engine thread between steps (what stats and diagnostics report)."""

    pool: PoolStats
    device: str  # torch device type the pool lives on: cpu | cuda
    max_queue: int
    prefix_hits: int  # full prompt blocks found in the prefix cache since start
    prefix_queries: int  # full prompt blocks looked up since start
    completed: int  # requests answered without error
    errors: dict[str, int] = field(default_factory=dict)  # requests answered with each error code
    last_error: str = ""  # the latest exception contained by the engine thread
    paced_hold_s: float = 0.0  # time language work was held for action streams since start
    generated_tokens: int = 0  # text tokens decoded since start, answered or dropped (tokens/s for dashboards)

    @property
    def deadline_misses(self) -> int:
        return self.errors.get(ErrorCode.DEADLINE_EXCEEDED.value, 0)

    @property
    def internal_errors(self) -> int:
        return self.errors.get(ErrorCode.INTERNAL.value, 0)


def error_output(greq: GenerateRequest, code: ErrorCode, message: str) -> RequestOutput:
    return RequestOutput(
        request_id=greq.request_id, task_id=greq.task_id, task_type=greq.task_type, error_code=code, message=message
    )
