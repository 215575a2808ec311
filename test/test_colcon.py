"""The robot path: `colcon build` of the package in a fresh workspace, with the venv as the ROS underlay, and the
installed interfaces, Python package and launchers used from that workspace's install/ space."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

VENV = Path(sys.prefix)

# Runs after `. install/local_setup.bash`: everything must resolve inside the workspace, not the venv's copy.
CHECK_INSTALL = """
import sys
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from rclpy.serialization import deserialize_message, serialize_message

import oxygen_ros
import oxygen_ros.cli.main
import oxygen_ros.kernels
from oxygen_ros import share
from oxygen_ros.nodes import presets
from oxygen_ros.action import FollowInstruction, Navigate
from oxygen_ros.msg import ActionChunk, KvPoolStats, Observation
from oxygen_ros.srv import AskQuestion, GetPoolStats, Infer

install = Path(sys.argv[1]).resolve()
assert oxygen_ros.__version__  # our __init__.py, not the one rosidl generates for the interfaces
for module in (oxygen_ros, oxygen_ros.msg, oxygen_ros.kernels, oxygen_ros.cli.main):
    assert Path(module.__file__).resolve().is_relative_to(install), module.__file__
assert Path(get_package_share_directory("oxygen_ros")).resolve() == install / "oxygen_ros" / "share" / "oxygen_ros"
assert share.presets_dir().resolve().is_relative_to(install) and presets.load("smollm2-135m")["model"]

stats = KvPoolStats(model="colcon", tasks=[], tiers=[])
assert deserialize_message(serialize_message(stats), KvPoolStats).model == "colcon"
libraries = {line.split()[-1] for line in open("/proc/self/maps") if "liboxygen_ros__" in line}
assert libraries and all(Path(lib).resolve().is_relative_to(install) for lib in libraries), libraries
print("ok")
"""


def _run(command, cwd, env, timeout=900):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_colcon_build_and_use_install_space(package_source, tmp_path):
    workspace = tmp_path / "ws"
    shutil.copytree(package_source, workspace / "src" / "oxygen_ros", symlinks=True)
    env = {
        **os.environ,
        "AMENT_PREFIX_PATH": str(VENV),
        "CMAKE_PREFIX_PATH": str(VENV),
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    colcon = str(VENV / "bin" / "colcon")

    listing = _run([colcon, "list", "--base-paths", "src"], workspace, env)
    assert listing.split()[::3] == ["oxygen_ros"] and "(ros.ament_cmake)" in listing, listing

    _run(
        [colcon, "build", "--base-paths", "src", "--cmake-args", f"-DPython3_EXECUTABLE={sys.executable}"],
        workspace,
        env,
    )

    install = workspace / "install"
    prefix = install / "oxygen_ros"
    for launcher in ("bin/oxygen-ros", "lib/oxygen_ros/inference_node"):
        assert os.access(prefix / launcher, os.X_OK), launcher
    assert (prefix / "share" / "oxygen_ros" / "config" / "oxygen.yaml").is_file()
    installed_presets = {p.name for p in (prefix / "share" / "oxygen_ros" / "config" / "models").glob("*.yaml")}
    assert installed_presets == {p.name for p in (package_source / "config" / "models").glob("*.yaml")}

    source_install = f". {install / 'local_setup.bash'} && "
    check = _run(
        ["bash", "-c", source_install + '"$0" -c "$1" "$2"', sys.executable, CHECK_INSTALL, install], tmp_path, env
    )
    assert check.strip().endswith("ok")
    help_text = _run(["bash", "-c", source_install + "command -v oxygen-ros && oxygen-ros --help"], tmp_path, env)
    assert help_text.startswith(str(prefix / "bin" / "oxygen-ros")) and "version" in help_text
