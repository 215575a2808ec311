"""Diagnostics levels: ERROR when not serving, WARN when the pool or queue is nearly full or deadlines were missed."""

import pytest

from oxygen_ros.engine.stats import ServingStats
from oxygen_ros.engine.io import PoolStats
from oxygen_ros.nodes.health import Level, assess


def _stats(used: int = 10, queued: int = 0, errors: dict[str, int] | None = None) -> ServingStats:
    pool = PoolStats(
        model="m", block_size=16, total_blocks=100, free_blocks=100 - used, cached_blocks=0, used_blocks=used,
        peak_used_blocks=used,
        shared_blocks=0, prefix_hit_rate=0.0, fragmentation=0.0, evictions=0, active_requests=1,
        queued_requests=queued, bytes_per_block=1024,
    )  # fmt: skip
    return ServingStats(pool, "cpu", 8, 0, 0, 5, errors or {})


@pytest.mark.parametrize("state", ["unconfigured", "inactive", "finalized"])
def test_not_serving_is_an_error(state):
    report = assess(state, _stats() if state == "inactive" else None, None, 0.9)
    assert report.level == Level.ERROR and state in report.message and ("state", state) in report.values


def test_serving_is_ok_with_values_for_the_monitor():
    report = assess("active", _stats(), None, 0.9)
    assert report.level == Level.OK
    values = dict(report.values)
    assert (values["pool_use_percent"], values["max_queue"], values["deadline_misses"]) == ("10.0", "8", "0")


@pytest.mark.parametrize(
    ("stats", "phrase"),
    [(_stats(used=90), "KV pool 90% in use"), (_stats(queued=8), "queue full (8 waiting)")],
)
def test_nearly_full_pool_or_full_queue_warns(stats, phrase):
    report = assess("active", stats, None, 0.9)
    assert report.level == Level.WARN and phrase in report.message


def test_new_deadline_misses_warn_once():
    before = _stats(errors={"DEADLINE_EXCEEDED": 1})
    after = _stats(errors={"DEADLINE_EXCEEDED": 3})
    assert assess("active", after, before, 0.9).message == "2 deadline misses"
    assert assess("active", after, after, 0.9).level == Level.OK
