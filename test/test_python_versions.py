"""The package runs on the Pythons robots have: 3.10 (Ubuntu 22.04: Humble, JetPack 6) to 3.12 (Ubuntu 24.04: Jazzy).
vermin reads every module of the package and the launch file and reports the oldest Python whose syntax and standard
library they need; setup.py and ruff's target say the same. The dev venv stays on 3.11."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_package_needs_nothing_newer_than_python_3_10():
    vermin = Path(sys.executable).parent / "vermin"
    done = subprocess.run([str(vermin), "--no-tips", "-t=3.10-", "--violations", "--eval-annotations", "oxygen_ros",
                           "launch"], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Minimum required versions: 3.10" in done.stdout, done.stdout[-2000:]


def test_setup_and_ruff_say_3_10():
    assert re.search(r'python_requires=">=3\.10"', (ROOT / "setup.py").read_text())
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["target-version"] == "py310"
