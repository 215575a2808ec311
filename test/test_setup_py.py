"""setup.py: the engine-only install for machines without ROS (what `pip install .` gives a user)."""

import importlib.metadata
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

# -I: no PYTHONPATH, user site or working directory; only the target dir is added, ahead of the venv.
IMPORT_FROM_TARGET = """
import sys
sys.path.insert(0, sys.argv[1])
import oxygen_ros, oxygen_ros.cli.main, oxygen_ros.kernels
print(oxygen_ros.__file__)
print(oxygen_ros.kernels.__file__)
"""


def _files(root) -> set[str]:
    """Files under root (no bytecode), relative to it; the source's kernels symlink is not followed (rglob)."""
    files = (p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return {str(path.relative_to(root)) for path in files}


def test_pip_install_without_ros(package_source, tmp_path):
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target"]
    subprocess.run([*pip, str(target), str(package_source)], check=True, capture_output=True, timeout=600)

    package = target / "oxygen_ros"
    assert (package / "kernels").is_dir() and not (package / "kernels").is_symlink()
    assert _files(package / "kernels") == _files(package_source / "kernels")
    expected = {f for f in _files(package_source / "oxygen_ros") if not f.startswith("nodes/")}
    assert {f for f in _files(package) if not f.startswith("kernels/")} == expected
    for ros_only in ("nodes", "msg", "srv", "action"):
        assert not (package / ros_only).exists(), ros_only

    imported = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT_FROM_TARGET, str(target)],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert imported == [str(package / "__init__.py"), str(package / "kernels" / "__init__.py")]

    (dist,) = importlib.metadata.distributions(path=[str(target)])
    requires = dist.requires or []
    assert "torch>=2.13.0" in requires and not any(r.startswith("ros-") for r in requires), requires
    help_text = subprocess.run(
        [str(target / "bin" / "oxygen-ros"), "--help"],
        env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "version" in help_text
