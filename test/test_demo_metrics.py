"""The demo's conclusions from what it recorded: tick timing of the action stream and blocks shared by all three
task types, on hand-made arrivals and pool snapshots whose right answers are known."""

from types import SimpleNamespace

import pytest

from oxygen_ros.cli.demo_metrics import chunk_timing, most_shared, read_by_every_type, shared_by_all


def test_a_steady_stream_meets_every_tick_whatever_its_phase():
    arrivals = [5.037 + k * 0.1 for k in range(50)]
    timing = chunk_timing(arrivals, 10.0, 5.0)
    assert timing.chunks == 50 and timing.achieved_hz == pytest.approx(10.0)
    assert len(timing.due) == 50 and timing.missed == [] and timing.worst_late_ms == pytest.approx(0.0, abs=1e-6)


def test_skipped_and_late_chunks_miss_their_ticks():
    arrivals = [k * 0.1 for k in range(50) if k not in (10, 11)]
    arrivals[30] += 0.07  # more than half a period late: misses its tick, and lands near the next one's
    timing = chunk_timing(arrivals, 10.0, 5.0)
    assert [round(t, 3) for t in timing.missed] == [1.0, 1.1, 3.2]
    assert timing.chunks == 48 and timing.achieved_hz == pytest.approx(47 / 4.9)


def test_a_stream_that_stopped_early_misses_the_rest_of_its_ticks():
    timing = chunk_timing([k * 0.1 for k in range(20)], 10.0, 3.0)
    assert len(timing.due) == 30 and len(timing.missed) == 10
    assert chunk_timing([], 10.0, 3.0).chunks == 0


def _task(task_type: str, shared: int) -> SimpleNamespace:
    return SimpleNamespace(task_type=task_type, blocks=shared + 2, shared_blocks=shared)


def _stats(pool_shared: int, *tasks: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(shared_blocks=pool_shared, tasks=list(tasks))


def test_blocks_shared_by_all_three_types_are_bounded_from_the_counts():
    # three tasks holding the same 16 prefix blocks: all 16 are shared by all three
    assert shared_by_all(_stats(16, _task("vqa", 16), _task("instruction", 16), _task("navigation", 16))) == 16
    # pairs sharing different blocks (vqa+instruction 8, instruction+navigation 8): nothing is common to all three
    assert shared_by_all(_stats(16, _task("vqa", 8), _task("instruction", 16), _task("navigation", 8))) == 0
    # a type missing, or sharing nothing, means no block is held by all three
    assert shared_by_all(_stats(16, _task("vqa", 16), _task("instruction", 16))) == 0
    # the best task of a type counts (a second VQA question sharing less changes nothing)
    tasks = (_task("vqa", 16), _task("vqa", 3), _task("instruction", 14), _task("navigation", 16))
    assert shared_by_all(_stats(16, *tasks)) == 14


def test_the_most_shared_snapshot_wins():
    quiet = _stats(16, _task("vqa", 16), _task("instruction", 16))
    busy = _stats(16, _task("vqa", 16), _task("instruction", 12), _task("navigation", 16))
    assert most_shared([(0.5, quiet), (1.0, busy)]) == (1.0, busy)


def test_blocks_read_by_every_type_count_three_or_more_reader_types():
    stats = SimpleNamespace(blocks_by_reader_types=[5, 3, 2, 1])  # 5 read by one type, 3 by two, 2 by three, 1 by 4
    assert read_by_every_type(stats) == 3
    assert read_by_every_type(SimpleNamespace(blocks_by_reader_types=[5, 3])) == 0
