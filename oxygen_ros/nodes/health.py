"""How healthy the inference node is, for /diagnostics (rqt_robot_monitor); ROS-free, the node only translates.

ERROR whenever the node is not serving (an operator must act: configure or activate it). WARN while serving when
the pool is nearly full, the queue is full, or deadlines were missed or requests failed since the last report:
the robot still works, but some task is about to be refused or late.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

from oxygen_ros.engine.stats import ServingStats


class Level(IntEnum):
    """Same values as diagnostic_msgs/DiagnosticStatus levels."""

    OK = 0
    WARN = 1
    ERROR = 2


@dataclass(frozen=True)
class Health:
    level: Level
    message: str
    values: list[tuple[str, str]]


def assess(
    state: str, stats: ServingStats | None, previous: ServingStats | None, warn_fraction: float,
    resources: Sequence[tuple[str, str]] = (),
) -> Health:
    """``state`` is the lifecycle state label; ``previous`` the stats of the last report (None for the first);
    ``resources`` what the node took of the machine at configure (KV budget, sequences, threads), reported as is."""
    values = [("state", state), *resources]
    if stats is None:
        return Health(Level.ERROR, f"not serving: the node is {state}", values)
    pool = stats.pool
    use = pool.used_blocks / pool.total_blocks if pool.total_blocks else 0.0
    values += [
        ("model", pool.model),
        ("device", stats.device),
        ("pool_use_percent", f"{100 * use:.1f}"),
        ("total_blocks", str(pool.total_blocks)),
        ("used_blocks", str(pool.used_blocks)),
        ("peak_used_blocks", str(pool.peak_used_blocks)),
        ("shared_blocks", str(pool.shared_blocks)),
        ("cached_blocks", str(pool.cached_blocks)),
        ("free_blocks", str(pool.free_blocks)),
        ("active_requests", str(pool.active_requests)),
        ("queued_requests", str(pool.queued_requests)),
        ("max_queue", str(stats.max_queue)),
        ("prefix_hit_rate", f"{pool.prefix_hit_rate:.3f}"),
        ("completed_requests", str(stats.completed)),
        ("generated_tokens", str(stats.generated_tokens)),
        ("prefix_hit_blocks", str(stats.prefix_hits)),
        ("deadline_misses", str(stats.deadline_misses)),
        ("internal_errors", str(stats.internal_errors)),
        ("last_error", stats.last_error),
    ]
    if state != "active":
        return Health(Level.ERROR, f"not serving: the node is {state}", values)
    problems = []
    if use >= warn_fraction:
        problems.append(f"KV pool {100 * use:.0f}% in use")
    if pool.queued_requests >= stats.max_queue:
        problems.append(f"queue full ({pool.queued_requests} waiting)")
    missed = stats.deadline_misses - (previous.deadline_misses if previous else 0)
    if missed > 0:
        problems.append(f"{missed} deadline misses")
    failed = stats.internal_errors - (previous.internal_errors if previous else 0)
    if failed > 0:
        problems.append(f"{failed} internal errors: {stats.last_error}")
    if problems:
        return Health(Level.WARN, "; ".join(problems), values)
    return Health(Level.OK, f"serving {pool.active_requests} requests, {pool.queued_requests} queued", values)
