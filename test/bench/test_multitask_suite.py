"""`bench --suite multitask` at toy sizes, through a real graph: every metric is there and consistent, one pool
shares the observation's blocks across tasks and isolated pools never do."""

import math
import os

import pytest

from oxygen_ros.bench import multitask_suite
from oxygen_ros.cli.bench import SUITES
from oxygen_ros.nodes.params import available_cpus


def test_multitask_suite_compares_one_shared_pool_with_isolated_engines():
    out = multitask_suite.run(window_s=2.0, vqa=1, instruction=1, navigation=1, vqa_tokens=4, nav_tokens=2, kv_mib=16,
                              rounds=1)  # fmt: skip
    m = out["metrics"]
    assert len(out["details"]["rounds"]) == 1 and out["details"]["median_round"] == 0
    for mode in multitask_suite.MODES:
        assert sum(out["details"][mode]["errors"].values()) == m[f"{mode}_failed_requests_all_rounds"]
    for name in ("rps_ratio_vs_isolated", "kv_bytes_ratio_vs_isolated", "p99_latency_ms_vqa",
                 "p99_latency_ms_instruction", "p99_latency_ms_navigation"):  # fmt: skip
        assert math.isfinite(m[name]) and m[name] > 0, (name, m[name])
    assert 0.0 <= m["action_deadline_miss_rate"] <= 1.0
    assert m["rps_ratio_vs_isolated"] == m["oxygen_ros_rps"] / m["isolated_rps"]
    assert m["kv_bytes_ratio_vs_isolated"] == m["oxygen_ros_peak_kv_bytes"] / m["isolated_peak_kv_bytes"]
    for mode in multitask_suite.MODES:
        # the horizon-10 chunk at 10 Hz lasts 1 s: two control periods in a 2 s window
        assert m[f"{mode}_action_periods"] == 2
        assert all(m[f"{mode}_requests_{kind}"] >= 1 for kind in multitask_suite.TASK_TYPES)
    # one pool: the later tasks' first requests reuse the observation's prefix; isolated engines each compute it
    assert m["oxygen_ros_warmup_reused_prefix_tokens"] > 0
    assert m["isolated_warmup_reused_prefix_tokens"] == 0
    assert m["isolated_peak_shared_blocks"] == 0  # each engine holds its own copy
    assert out["params"]["vqa"] == 1 and out["suite"] == "multitask"
    # every engine, as it reports on /diagnostics, on the inference node's default threads (half the cores)
    assert m["oxygen_ros_threads"] == m["isolated_threads"] == max(1, available_cpus() // 2)
    assert m["oxygen_ros_engine_restarts"] == m["isolated_engine_restarts"] == 0
    assert m["oxygen_ros_frames_asked_about"] == m["isolated_frames_asked_about"] == 1  # one pinned frame
    assert all(name.endswith(".log") for name in os.listdir(out["details"]["node_logs"]))


def _summary(tokens_per_s: float, failed: int, miss_rate: float, errors: dict[str, int], p99: float) -> dict:
    """One mode's measurement of one round, with the fields ``combine`` reads (as ``measure`` gives them)."""
    return {"tokens_per_s": tokens_per_s, "rps": 2 * tokens_per_s, "peak_kv_bytes": 1000 + tokens_per_s,
            "failed_requests": failed, "action_deadline_miss_rate": miss_rate, "errors": errors,
            "p99_latency_ms_vqa": p99}  # fmt: skip


def test_the_rounds_speak_through_their_median_ratio_with_every_rounds_failures():
    """Three rounds (tokens/s ratios 1.5, 1.2, 1.8): the 1.5 round's figures are the run's, beside the spread, the
    worst round's miss rate and the failures and errors of all; with two, the lower middle."""
    pairs = [{"oxygen_ros": _summary(30.0, 1, 0.0, {"DEADLINE_EXCEEDED": 1}, 100.0),
              "isolated": _summary(20.0, 0, 0.0, {}, 90.0)},
             {"oxygen_ros": _summary(24.0, 0, 0.25, {}, 200.0),
              "isolated": _summary(20.0, 2, 0.5, {"UNAVAILABLE": 2}, 80.0)},
             {"oxygen_ros": _summary(36.0, 2, 0.1, {"DEADLINE_EXCEEDED": 2}, 300.0),
              "isolated": _summary(20.0, 0, 0.0, {}, 70.0)}]  # fmt: skip
    metrics, details = multitask_suite.combine(pairs)
    assert details["median_round"] == 0 and metrics["tokens_per_s_ratio_vs_isolated"] == 1.5
    assert (metrics["tokens_per_s_ratio_vs_isolated_min"], metrics["tokens_per_s_ratio_vs_isolated_max"]) == (1.2, 1.8)
    assert metrics["rps_ratio_vs_isolated"] == 1.5 and metrics["kv_bytes_ratio_vs_isolated"] == 1030 / 1020
    assert metrics["p99_latency_ms_vqa"] == 100.0 and metrics["isolated_p99_latency_ms_vqa"] == 90.0
    assert metrics["action_deadline_miss_rate"] == 0.25  # the worst round's, of the shared pool
    assert (metrics["oxygen_ros_failed_requests_all_rounds"], metrics["isolated_failed_requests_all_rounds"]) == (3, 2)
    assert details["oxygen_ros"]["errors"] == {"DEADLINE_EXCEEDED": 3} and details["isolated"]["errors"] == \
        {"UNAVAILABLE": 2}  # fmt: skip
    assert [r["tokens_per_s_ratio_vs_isolated"] for r in details["rounds"]] == [1.5, 1.2, 1.8]
    assert details["rounds"][1]["isolated_errors"] == {"UNAVAILABLE": 2}
    metrics, details = multitask_suite.combine(pairs[:2])
    assert details["median_round"] == 1 and metrics["tokens_per_s_ratio_vs_isolated"] == 1.2


def test_rounds_are_bounded_before_any_graph_starts():
    for rounds in (0, multitask_suite.MAX_ROUNDS + 1):
        with pytest.raises(ValueError, match=f"rounds must be 1..{multitask_suite.MAX_ROUNDS}, got {rounds}"):
            multitask_suite.run(rounds=rounds)


def test_a_moving_camera_gives_every_engine_each_new_frame():
    """frame_hz 2 over a 2 s window: five frames, each request about the newest; every engine has every frame it is
    asked about (no NOT_FOUND), so both settings answer about several frames."""
    out = multitask_suite.run(window_s=2.0, vqa=1, instruction=1, navigation=1, vqa_tokens=4, nav_tokens=2, kv_mib=16,
                              rounds=1, frame_hz=2.0)  # fmt: skip
    m = out["metrics"]
    for mode in multitask_suite.MODES:
        assert m[f"{mode}_failed_requests_all_rounds"] == 0, out["details"][mode]["errors"]
        assert m[f"{mode}_frames_asked_about"] >= 3  # the pinned default asks about one
    for params, message in (({"frame_hz": 11.0}, "frame_hz must be 0..10, got 11.0"),
                            ({"window_s": 0.0}, r"window_s must be in \(0, 3600\], got 0.0"),
                            ({"window_s": 100.0, "frame_hz": 10.0}, "at most 600 frames, got 1001")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            multitask_suite.run(**params)


def test_bench_cli_knows_the_multitask_suite():
    assert SUITES["multitask"] == "oxygen_ros.bench.multitask_suite"
