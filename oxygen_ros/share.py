"""Where `make install` / `colcon build` put the package's files beside it, found without importing ROS or torch
(the supervisor of `oxygen-ros up` needs them and nothing else).

The package sits in ``<prefix>/lib/pythonX.Y/site-packages/oxygen_ros`` (the venv here, ``install/oxygen_ros`` in a
colcon workspace, ``/opt/ros/<distro>`` for a binary install); its data is in ``<prefix>/share/oxygen_ros`` and the
node executables of `ros2 run` in ``<prefix>/lib/oxygen_ros``.
"""

from pathlib import Path

PACKAGE = "oxygen_ros"
PREFIX = Path(__file__).resolve().parents[4]


def default_config() -> Path:
    """config/oxygen.yaml as installed: the parameters of every node."""
    return PREFIX / "share" / PACKAGE / "config" / "oxygen.yaml"


def presets_dir() -> Path:
    """config/models as installed: one model preset YAML per model (oxygen_ros/nodes/presets.py)."""
    return PREFIX / "share" / PACKAGE / "config" / "models"


def dds_profile() -> Path:
    """The Fast DDS profile `oxygen-ros up` gives its node processes (config/fastdds_profile.xml)."""
    return PREFIX / "share" / PACKAGE / "config" / "fastdds_profile.xml"


def node_executable(name: str) -> Path:
    """A node's launcher (CMakeLists.txt ``OXYGEN_ROS_NODES``), what `ros2 run oxygen_ros <name>` runs."""
    return PREFIX / "lib" / PACKAGE / name
