"""`bench --suite robot` at toy sizes, through real nodes (a VLA on arm_sim, VQA beside it, one engine or two): every
metric is there and consistent, and in both settings the goal ends SUCCEEDED with chunks on the arm."""

import math
from pathlib import Path

from action_msgs.msg import GoalStatus

from oxygen_ros.bench import robot_suite
from oxygen_ros.cli.bench import SUITES
from oxygen_ros.nodes.vla_arm import MISSED


def test_robot_suite_measures_the_arm_beside_vqa_on_one_engine_and_on_two():
    out = robot_suite.run(window_s=6.0, vqa=1, vqa_tokens=2, kv_mib=64)  # chunks of 50 actions: 5 s of margin
    m = out["metrics"]
    assert m["chunk_window_ms"] == 2500.0  # (50 - 25) actions at 10 Hz
    for mode in robot_suite.MODES:
        assert out["details"][mode]["goal"].startswith(f"status {GoalStatus.STATUS_SUCCEEDED}: OK"), out["details"]
        asked, sent, missed = (m[f"chunks_{kind}_{mode}"] for kind in ("asked", "sent", "missed"))
        assert 1 <= sent <= asked and missed <= asked and m[f"action_miss_rate_{mode}"] == missed / asked
        assert 0 < m[f"action_latency_p50_ms_{mode}"] <= m[f"action_latency_p99_ms_{mode}"] < 60_000
        assert m[f"underruns_{mode}"] >= 0 and math.isfinite(m[f"vqa_answers_per_s_{mode}"])
        assert out["details"][mode]["vqa_errors"] == {}
        assert m[f"engine_restarts_{mode}"] == 0 and m[f"node_restarts_{mode}"] == 0  # arm_sim, instruction_node
        warnings = out["details"][mode]["arm_warnings"]  # every missed chunk warned, saying why, and all kept
        logged = (Path(out["details"]["node_logs"]) / f"{mode}_instruction_node.log").read_text().splitlines()
        assert len(logged) == warnings["count"] >= missed and logged[:5] == warnings["first"]
        assert sum(MISSED in line for line in logged) == missed
    assert out["suite"] == "robot" and SUITES["robot"] == "oxygen_ros.bench.robot_suite"
