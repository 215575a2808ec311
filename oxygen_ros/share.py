"""Where `make install` / `colcon build` put the package's files beside it, found without importing ROS or torch
(the supervisor of `oxygen-ros up` needs them and nothing else).

The package sits in ``<prefix>/lib/pythonX.Y/site-packages/oxygen_ros`` (the venv here, ``install/oxygen_ros`` in a
colcon workspace, ``/opt/ros/<distro>`` for a binary install); its data is in ``<prefix>/share/oxygen_ros`` and the
node executables of `ros2 run` in ``<prefix>/lib/oxygen_ros``.
"""

from collections.abc import Mapping
from pathlib import Path

PACKAGE = "oxygen_ros"
PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
TRANSPORTS_VARIABLE = "FASTDDS_BUILTIN_TRANSPORTS"  # ignored by Fast DDS under a profile that names its transports
FAST_DDS_2 = {"humble", "iron", "jazzy"}  # ROS_DISTRO whose Fast DDS (2.6-2.14) reads only FASTRTPS_DEFAULT_PROFILES_FILE
# absolute, not resolved: under `colcon build --symlink-install` this file is a link into the source tree. Imported
# from a source tree near the filesystem root (not installed: no prefix), the files are looked for under the root
# and reported missing by name, rather than failing every import of the package
_HERE = Path(__file__).absolute()
PREFIX = _HERE.parents[4] if len(_HERE.parents) > 4 else Path(_HERE.anchor)


def config_file(name: str) -> Path:
    """config/``name`` as installed."""
    return PREFIX / "share" / PACKAGE / "config" / name


def default_config() -> Path:
    """config/oxygen.yaml as installed: the parameters of every node."""
    return config_file("oxygen.yaml")


def parameter_file(given: Path | None) -> Path:
    """``given``, or ``default_config()`` when None; FileNotFoundError naming it when it is no file."""
    path = given or default_config()
    if not path.is_file():
        raise FileNotFoundError(f"parameter file {path} not found")
    return path


def presets_dir() -> Path:
    """config/models as installed: one model preset YAML per model (oxygen_ros/nodes/presets.py)."""
    return config_file("models")


def dds_profile() -> Path:
    """The Fast DDS profile oxygen_ros's node processes run with (config/fastdds_profile.xml)."""
    return config_file("fastdds_profile.xml")


def dds_profile_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variable that gives a process ``dds_profile()``: FASTRTPS_DEFAULT_PROFILES_FILE under a ``ROS_DISTRO``
    whose Fast DDS is 2.x (Humble, Iron, Jazzy: the only one it reads), else FASTDDS_DEFAULT_PROFILES_FILE (Fast DDS
    3, Kilted on, which warns that the other is deprecated), unless ``environ`` chooses a profile or the builtin
    transports already (the user's choice wins: the profile names its transports, so Fast DDS would ignore
    FASTDDS_BUILTIN_TRANSPORTS under it) or it is not installed. Fast DDS reads it once, when the process creates its
    first participant: the node processes of `oxygen-ros up` and `ros2 launch` get it in their environment, an
    in-process graph before its rclpy.init (bringup)."""
    chosen = [*PROFILE_VARIABLES, TRANSPORTS_VARIABLE]
    if any(name in environ for name in chosen) or not dds_profile().is_file():
        return {}
    fast_dds_2 = environ.get("ROS_DISTRO", "") in FAST_DDS_2
    return {PROFILE_VARIABLES[1] if fast_dds_2 else PROFILE_VARIABLES[0]: str(dds_profile())}


def node_executable(name: str) -> Path:
    """A node's launcher (CMakeLists.txt ``OXYGEN_ROS_NODES``), what `ros2 run oxygen_ros <name>` runs."""
    return PREFIX / "lib" / PACKAGE / name
