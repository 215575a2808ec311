"""`bench --suite tiers` at tiny sizes: every metric is measured, restores really come from their tier, a zero-copy
task switch beats a KV copy, approximate reuse serves the second of two similar frames from the first."""

import math

from oxygen_ros.bench import tiers_suite
from oxygen_ros.cli.bench import SUITES


def test_tiers_suite_measures_restores_and_hit_rates():
    assert SUITES["tiers"] == "oxygen_ros.bench.tiers_suite"
    out = tiers_suite.run(images=1, prompt_tokens=20, repeats=1, rounds=2, scene_tokens=16, answer_tokens=2,
                          reuse_frames=2)  # fmt: skip
    metrics = out["metrics"]
    assert set(metrics) == {"l1_restore_speedup", "l2_restore_speedup", "hit_rate_attention", "hit_rate_lru",
                            "task_switch_us", "kv_copy_switch_us", "reuse_action_error",
                            "reuse_answer_change_rate"}  # fmt: skip
    assert all(math.isfinite(metrics[k]) and metrics[k] > 0 for k in ("l1_restore_speedup", "l2_restore_speedup"))
    restore = out["details"]["restore"]
    full_blocks = (restore["prefix_tokens"] - 1) // 16 * 16
    assert restore["prefix_tokens"] == 256 + 20
    assert restore["recompute_reused_tokens"] == [0]
    assert restore["l1_reused_tokens"] == restore["l2_reused_tokens"] == [full_blocks]
    assert [t["name"] for t in restore["l2_tiers"]] == ["gpu", "disk"] and restore["l2_tiers"][1]["hits"] > 0
    rates = out["details"]["hit_rates"]
    assert rates["tasks"] == 6 and rates["pool_blocks"] < rates["working_set_blocks"]
    for policy in ("lru", "attention"):
        assert 0.0 <= rates[policy]["hit_rate"] <= 1.0 and rates[policy]["same_tokens_as_unpressured"]
    switch = out["details"]["task_switch"]
    assert switch["blocks"] == -(-(256 + 20 + 1) // 16) and switch["bytes_copied"] > 0
    assert 0 < metrics["task_switch_us"] < metrics["kv_copy_switch_us"]  # labels only vs every block copied
    reuse = out["details"]["reuse"]
    assert reuse["pi05_tiny"]["reuse_rate"] == reuse["smollm2"]["reuse_rate"] == 0.5  # frame 1 served from frame 0
    assert reuse["pi05_tiny"]["action_errors"][0] == 0.0 < metrics["reuse_action_error"]  # frame 0 is exact
    assert 0.0 <= metrics["reuse_answer_change_rate"] <= 0.5
    preemption = out["details"]["preemption"]
    assert preemption["swap"]["swapped"] > 0 and preemption["recompute"]["recomputed"] > 0
    assert all(preemption[mode]["same_tokens_as_roomy"] for mode in ("swap", "recompute", "auto"))
