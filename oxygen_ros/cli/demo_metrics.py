"""What `oxygen-ros demo` concludes from what it recorded: how well the action stream kept its ticks, and how many
KV blocks all three task types shared. ROS-free arithmetic, so it is tested on its own.
"""

import bisect
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

TASK_TYPES = ("vqa", "instruction", "navigation")


@dataclass(frozen=True)
class ChunkTiming:
    chunks: int
    achieved_hz: float  # (chunks - 1) / (last arrival - first arrival), as the instruction node measures it
    due: list[float]  # the requested stream's ticks: one period apart, for the goal's requested duration
    missed: list[float]  # ticks with no chunk arriving within half a period of them
    worst_late_ms: float  # latest arrival after its tick


def chunk_timing(arrivals: list[float], rate_hz: float, duration_s: float) -> ChunkTiming:
    """``arrivals``: when each chunk reached a subscriber (seconds). The ticks start at the first chunk, in the
    phase the arrivals say the node's timer runs at (their median offset from the first chunk's period grid, so
    skipped or late chunks do not move it); a tick is met by a chunk arriving less than half a period from it."""
    period = 1.0 / rate_hz
    times = sorted(arrivals)
    if not times:
        return ChunkTiming(0, 0.0, [], [], 0.0)
    phase = times[0] + statistics.median((t - times[0] + period / 2) % period - period / 2 for t in times)
    due = [phase + k * period for k in range(max(1, round(duration_s * rate_hz)))]
    missed, worst = [], 0.0
    for tick in due:
        i = bisect.bisect_left(times, tick - period / 2)
        if i == len(times) or times[i] >= tick + period / 2:
            missed.append(tick)
        else:
            worst = max(worst, times[i] - tick)
    span = times[-1] - times[0]
    achieved = (len(times) - 1) / span if span > 0 else 0.0
    return ChunkTiming(len(times), achieved, due, missed, worst * 1e3)


def held_blocks(stats: Any) -> int:
    """Blocks some request holds in a KvPoolStats snapshot (neither free nor cached for reuse)."""
    return stats.total_blocks - stats.free_blocks - stats.cached_blocks


def per_type(stats: Any, task_types: Iterable[str] = TASK_TYPES) -> dict[str, Any]:
    """The task of each type holding the most shared blocks in a KvPoolStats snapshot (types holding none left
    out)."""
    best: dict[str, Any] = {}
    for task in stats.tasks:
        if task.task_type in task_types and (
            task.task_type not in best or task.shared_blocks > best[task.task_type].shared_blocks
        ):
            best[task.task_type] = task
    return best


def shared_by_all(stats: Any, task_types: tuple[str, ...] = TASK_TYPES) -> int:
    """A lower bound, from one KvPoolStats snapshot, on the blocks held at once by a task of every type in
    ``task_types``. Each task's shared blocks are a subset of the pool's shared blocks S, so k such sets A_i
    intersect in at least sum |A_i| - (k - 1) |S| blocks (every block of S missing from the intersection is
    missing from at least one A_i)."""
    best = per_type(stats, task_types)
    if len(best) < len(task_types):
        return 0
    total = sum(task.shared_blocks for task in best.values())
    return max(0, total - (len(task_types) - 1) * stats.shared_blocks)


def read_by_every_type(stats: Any, task_types: tuple[str, ...] = TASK_TYPES) -> int:
    """Blocks in a KvPoolStats snapshot whose KV, computed once, requests of as many task types as
    ``task_types`` have read (the pool keeps this per block, so it does not depend on the tasks overlapping in
    time)."""
    return sum(stats.blocks_by_reader_types[len(task_types) - 1 :])


def most_shared(samples: list[tuple[float, Any]]) -> tuple[float, Any]:
    """The (time, KvPoolStats) sample with the most blocks shared by all three task types, then the most shared."""
    return max(samples, key=lambda sample: (shared_by_all(sample[1]), sample[1].shared_blocks))
