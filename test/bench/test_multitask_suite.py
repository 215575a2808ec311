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
                              rounds=2)  # fmt: skip
    m = out["metrics"]
    rounds = out["details"]["rounds"]
    assert len(rounds) == 2 and out["details"]["median_round"] in (0, 1)
    spread = sorted(r["tokens_per_s_ratio_vs_isolated"] for r in rounds)
    assert [m["tokens_per_s_ratio_vs_isolated_min"], m["tokens_per_s_ratio_vs_isolated_max"]] == spread
    assert m["tokens_per_s_ratio_vs_isolated"] == spread[0]  # the lower middle of two rounds
    assert rounds[out["details"]["median_round"]]["rps_ratio_vs_isolated"] == m["rps_ratio_vs_isolated"]
    for mode in multitask_suite.MODES:  # failures of every round, not only the median one's
        assert m[f"{mode}_failed_requests_all_rounds"] == sum(r[f"{mode}_failed_requests"] for r in rounds)
        assert sum(out["details"][mode]["errors"].values()) == m[f"{mode}_failed_requests_all_rounds"]
    assert m["action_deadline_miss_rate"] == max(r["oxygen_ros_action_deadline_miss_rate"] for r in rounds)
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
