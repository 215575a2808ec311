"""The observation node's pairing, message_filters' approximate-time rule without ROS: equal and jittered stamps pair
frame by frame, a lagging camera pairs while its partners' frames are still queued (and never once they are gone), a
dropped frame costs that one set only, queues stay bounded, frames arriving out of order still pair, and no set is
older than the one before it; the first combination within the slop is the closest-first one, and the rate gate
thins a faster stream to its rate."""

import random

import pytest

from oxygen_ros.perception.frame_sync import NS, FrameSync, RateGate

MS = NS // 1000
PERIOD = 100 * MS  # 10 Hz cameras
SLOP = 0.05


def _sets(sync: FrameSync[str], arrivals: list[tuple[int, int, str]]) -> list[list[tuple[int, str]]]:
    """Feed (topic, stamp, message) in order; each set emitted as [(stamp, message)] in topic order."""
    out = []
    for topic, stamp, message in arrivals:
        emitted = sync.add(topic, stamp, message)
        if emitted is not None:
            out.append([(s.stamp_ns, s.message) for s in emitted])
    return out


def _frames(cameras: int, count: int, jitter_ms: int = 0, seed: int = 0) -> list[tuple[int, int, str]]:
    """``count`` frames of each camera, camera after camera within a frame: message 'c<camera>f<frame>'."""
    rng = random.Random(seed)
    return [(c, k * PERIOD + rng.randint(-jitter_ms, jitter_ms) * MS, f"c{c}f{k}")
            for k in range(count) for c in range(cameras)]  # fmt: skip


def _frame_numbers(found: list[list[tuple[int, str]]]) -> list[set[str]]:
    return [{message.split("f")[1] for _, message in one} for one in found]


def test_exact_stamps_pair_frame_by_frame_in_topic_order():
    sync: FrameSync[str] = FrameSync(3, 10, SLOP)
    assert sync.add(0, 0, "a") is None and sync.add(2, 0, "c") is None
    emitted = sync.add(1, 0, "b")
    assert [(s.stamp_ns, s.message) for s in emitted] == [(0, "a"), (0, "b"), (0, "c")]
    assert sync.queued() == [0, 0, 0]
    found = _sets(sync, _frames(3, 5)[3:])  # frames 1..4
    assert [[m for _, m in one] for one in found] == [[f"c0f{k}", f"c1f{k}", f"c2f{k}"] for k in range(1, 5)]


def test_jittered_stamps_within_the_slop_pair_the_same_frames():
    found = _sets(FrameSync(3, 10, SLOP), _frames(3, 50, jitter_ms=15, seed=1))
    assert len(found) == 50
    for k, one in enumerate(found):
        assert [m for _, m in one] == [f"c{c}f{k}" for c in range(3)]
        stamps = [s for s, _ in one]
        assert max(stamps) - min(stamps) < SLOP * NS


def test_a_lagging_camera_pairs_while_its_partners_frames_are_queued():
    lag = 3  # camera 2's frame k arrives after the others' frame k + 3
    fast = [(c, k * PERIOD, f"c{c}f{k}") for k in range(20) for c in (0, 1)]
    arrivals = []
    for k in range(20):
        arrivals += fast[2 * k : 2 * k + 2]
        if k >= lag:
            arrivals.append((2, (k - lag) * PERIOD, f"c2f{k - lag}"))
    found = _sets(FrameSync(3, 5, SLOP), arrivals)
    assert _frame_numbers(found) == [{str(k)} for k in range(20 - lag)]


def test_a_camera_lagging_past_the_queue_never_pairs_and_the_queues_stay_bounded():
    sync: FrameSync[str] = FrameSync(3, 5, SLOP)
    lag = 8
    arrivals = []
    for k in range(30):
        arrivals += [(0, k * PERIOD, f"c0f{k}"), (1, k * PERIOD, f"c1f{k}")]
        if k >= lag:
            arrivals.append((2, (k - lag) * PERIOD, f"c2f{k - lag}"))
    assert _sets(sync, arrivals) == []
    assert sync.queued() == [5, 5, 5]


def test_a_dropped_frame_costs_its_set_only_and_its_partners_do_not_linger():
    arrivals = [a for a in _frames(3, 8, jitter_ms=10, seed=2) if a[2] != "c1f3"]
    sync: FrameSync[str] = FrameSync(3, 10, SLOP)
    found = _sets(sync, arrivals)
    assert _frame_numbers(found) == [{str(k)} for k in range(8) if k != 3]
    assert sync.queued() == [0, 0, 0]  # frames 3 of cameras 0 and 2 went when the newer set did


def test_queues_are_bounded_when_one_camera_is_alone():
    sync: FrameSync[str] = FrameSync(3, 5, SLOP)
    assert _sets(sync, [(0, k * PERIOD, f"c0f{k}") for k in range(100)]) == []
    assert sync.queued() == [5, 0, 0] and sync.overflowed == 95
    # the oldest went: partners of frame 96 still pair, those of frame 10 do not
    assert sync.add(1, 10 * PERIOD, "c1f10") is None
    assert sync.add(2, 10 * PERIOD, "c2f10") is None
    assert _sets(sync, [(1, 96 * PERIOD, "c1f96"), (2, 96 * PERIOD, "c2f96")]) == [
        [(96 * PERIOD, "c0f96"), (96 * PERIOD, "c1f96"), (96 * PERIOD, "c2f96")]
    ]


def test_an_arrival_older_than_a_full_queue_is_dropped_at_once():
    sync: FrameSync[str] = FrameSync(2, 2, SLOP)
    _sets(sync, [(0, 5 * PERIOD, "new"), (0, 6 * PERIOD, "newer")])
    assert sync.add(0, 1 * PERIOD, "old") is None
    assert sync.add(1, 1 * PERIOD, "partner") is None  # "old" is not queued
    assert sync.queued() == [2, 1]


def test_out_of_order_arrivals_pair_and_sets_never_go_back_in_time():
    sync: FrameSync[str] = FrameSync(2, 10, SLOP)
    found = _sets(sync, [(0, PERIOD, "a1"), (0, 0, "a0"), (1, 0, "b0"), (1, PERIOD, "b1")])
    assert found == [[(0, "a0"), (0, "b0")], [(PERIOD, "a1"), (PERIOD, "b1")]]
    # the newer pair first: the older frames then left over are dropped, never a set older than the last one
    found = _sets(sync, [(0, 3 * PERIOD, "a3"), (0, 2 * PERIOD, "a2"), (1, 3 * PERIOD, "b3"), (1, 2 * PERIOD, "b2")])
    assert found == [[(3 * PERIOD, "a3"), (3 * PERIOD, "b3")]]
    assert sync.late == 1 and sync.queued() == [0, 0]


def test_a_clock_that_goes_back_restarts_the_pairing():
    sync: FrameSync[str] = FrameSync(2, 10, SLOP, reset_after_s=1.0)
    assert len(_sets(sync, [(0, 50 * NS, "a"), (1, 50 * NS, "b")])) == 1
    found = _sets(sync, [(0, 2 * PERIOD, "a0"), (1, 2 * PERIOD, "b0")])  # a replayed bag from its start
    assert found == [[(2 * PERIOD, "a0"), (2 * PERIOD, "b0")]] and sync.resets == 1


def test_the_closest_candidate_comes_first_and_the_slop_is_strict():
    sync: FrameSync[str] = FrameSync(2, 10, SLOP)
    _sets(sync, [(1, 0, "far"), (1, 30 * MS, "near")])
    assert _sets(sync, [(0, 20 * MS, "anchor")]) == [[(20 * MS, "anchor"), (30 * MS, "near")]]
    sync = FrameSync(2, 10, SLOP)
    assert _sets(sync, [(0, 0, "a"), (1, 50 * MS, "b")]) == []  # exactly the slop apart: not a set
    assert _sets(sync, [(1, 49 * MS, "c")]) == [[(0, "a"), (49 * MS, "c")]]


def test_combinations_are_tried_until_one_fits():
    """Anchor at 0: topic 1's closest candidate (+40 ms) is 80 ms from topic 2's only one (-40 ms); the next (-45 ms)
    fits, as message_filters finds it."""
    sync: FrameSync[str] = FrameSync(3, 10, SLOP)
    _sets(sync, [(1, 40 * MS, "b+40"), (1, -45 * MS, "b-45"), (2, -40 * MS, "c-40")])
    found = _sets(sync, [(0, 0, "a0")])
    assert found == [[(0, "a0"), (-45 * MS, "b-45"), (-40 * MS, "c-40")]]
    assert sync.queued() == [0, 1, 0]  # b+40 is newer than the set: it stays


def test_one_topic_emits_every_frame():
    sync: FrameSync[str] = FrameSync(1, 3, SLOP)
    assert _sets(sync, [(0, k * PERIOD, str(k)) for k in range(4)]) == [[(k * PERIOD, str(k))] for k in range(4)]


def test_discard_drops_what_the_caller_refuses():
    sync: FrameSync[str] = FrameSync(2, 10, SLOP)
    _sets(sync, [(0, 0, "stale"), (0, PERIOD, "fresh")])
    assert sync.discard(lambda message: message != "stale") == 1
    assert _sets(sync, [(1, 0, "b0")]) == [] and sync.queued() == [1, 1]


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ((0, 10, SLOP), "at least one topic"),
        ((2, 0, SLOP), "queue size"),
        ((3, 1001, SLOP), "queue size"),
        ((4, 1000, SLOP), "combinations"),
        ((2, 10, 0.0), "slop"),
        ((2, 10, float("nan")), "slop"),
    ],
)
def test_bad_arguments_are_refused(arguments, words):
    with pytest.raises(ValueError, match=words):
        FrameSync(*arguments)


def test_an_unknown_topic_is_refused():
    with pytest.raises(IndexError):
        FrameSync(2, 10, SLOP).add(2, 0, "x")


def test_the_rate_gate_thins_a_faster_stream_to_its_rate():
    gate = RateGate(10.0)
    rng = random.Random(3)
    passed = [t for k in range(300) if gate.passes(t := k * NS // 30 + rng.randint(-3, 3) * MS)]  # 30 Hz, 10 s
    assert 98 <= len(passed) <= 101  # 10 Hz, not beating down to 30 / 4 = 7.5
    assert min(b - a for a, b in zip(passed, passed[1:])) >= gate.period_ns // 2
    assert all(sum(1 for t in passed if s <= t < s + NS) <= 11 for s in passed)


def test_the_rate_gate_restarts_after_a_gap_and_when_the_clock_goes_back():
    gate = RateGate(10.0)
    assert gate.passes(0) and not gate.passes(50 * MS) and gate.passes(100 * MS)
    assert gate.passes(5 * NS) and not gate.passes(5 * NS + 60 * MS)  # after a gap: a full period
    assert gate.passes(1 * NS)  # the clock went back (a restarted simulation)
    assert not gate.passes(1 * NS + 10 * MS)
    with pytest.raises(ValueError, match="rate"):
        RateGate(0.0)
