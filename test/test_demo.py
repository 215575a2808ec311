"""`oxygen-ros demo` end to end: the installed command brings the graph up with the real SmolLM2 and the simulated
camera, runs the three task nodes at once and must show what the issue asks for, read back from its own output:
the instruction stream at >= 95% of 10 Hz while VQA and navigation run, the frame's prefix blocks computed once and
read by all three task types, tokens decoded, prefix tokens reused, and both pictures written. (Whether all three
hold blocks at the same instant depends on when their requests happen to overlap, so only the per-block record of
readers is asserted.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from ros_harness import acquire_domain_id

OXYGEN_ROS = Path(sys.prefix) / "bin" / "oxygen-ros"
FRAME_PREFIX_BLOCKS = 8  # the scene text the tasks share is ~16 blocks; only its last sentences change per frame


def _number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the demo's output:\n{text}"
    return float(match.group(1))


@pytest.mark.slow
def test_demo_runs_three_tasks_at_once_on_one_shared_pool(tmp_path):
    lease = acquire_domain_id()  # a domain of its own: a camera left publishing by another test would mix scenes
    env = os.environ | {"OMP_NUM_THREADS": "1", "ROS_DOMAIN_ID": str(lease.domain_id)}
    try:
        result = subprocess.run(
            [OXYGEN_ROS, "demo", "--out", str(tmp_path)], capture_output=True, text=True, timeout=240, env=env
        )
    finally:
        lease.release()
    out = result.stdout
    assert result.returncode == 0, f"{out}\n{result.stderr}"

    assert _number(r"chunks on /arm/action_chunk: ([\d.]+) Hz of 10 Hz", out) >= 9.5
    assert _number(r"(\d+) blocks computed once and read by requests of all 3 task types", out) >= FRAME_PREFIX_BLOCKS
    assert out.count("[vqa] ") == 3 and "[navigation] " in out and "[instruction] " in out
    assert _number(r"language: (\d+) tokens in", out) > 0
    assert _number(r"(\d+) prompt tokens \(\d+ blocks\) reused from the shared pool", out) > 0

    for name in ("pool.png", "timeline.png"):
        image = cv2.imread(str(tmp_path / name))
        assert image is not None and image.shape[0] > 100 and image.shape[1] > 100, name
