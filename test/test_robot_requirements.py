"""requirements/robot.txt, what pip adds on a robot over ROS 2 and rosdep's apt packages: with runtime.txt's pins it
covers every third-party import (the rest are rosdep keys in package.xml), and each range holds the version tested
here and the versions Ubuntu 22.04 (Humble, JetPack 6) and 24.04 (Jazzy) ship, so pip keeps apt's numpy, against
which ROS's compiled modules are built."""

import re
from pathlib import Path

from catkin_pkg.package import parse_package
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).parents[1]
# packages.ubuntu.com, jammy-updates and noble: the apt packages rosdep's python3-* keys install
UBUNTU = {
    "22.04": {"numpy": "1.21.5", "pyyaml": "5.4.1", "tqdm": "4.57.0", "jinja2": "3.0.3", "matplotlib": "3.5.1",
              "lxml": "4.8.0", "pillow": "9.0.1"},
    "24.04": {"numpy": "1.26.4", "pyyaml": "6.0.1", "tqdm": "4.66.2", "jinja2": "3.1.2", "matplotlib": "3.6.3",
              "lxml": "5.2.1", "pillow": "10.2.0"},
}  # fmt: skip
ROSDEP = {"numpy": "python3-numpy", "pyyaml": "python3-yaml", "tqdm": "python3-tqdm", "jinja2": "python3-jinja2",
          "matplotlib": "python3-matplotlib", "lxml": "python3-lxml", "pillow": "python3-pil",
          "opencv-python-headless": "python3-opencv", "urdfdom-py": "urdfdom_py"}  # fmt: skip
NEEDS_NEWER = {("22.04", "pillow")}  # named in robot.txt: pip installs a newer one into the venv there


def _requirements(name: str) -> dict[str, Requirement]:
    lines = (REPO / "requirements" / name).read_text().splitlines()
    reqs = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    return {re.sub(r"[-_.]+", "-", r.name).lower(): r for r in reqs}


def test_robot_ranges_hold_the_tested_pins_and_ubuntus_versions():
    robot, runtime = _requirements("robot.txt"), _requirements("runtime.txt")
    for name, req in robot.items():
        (pinned,) = runtime[name].specifier  # the version every test here runs with
        assert req.specifier.contains(pinned.version), f"{name}: {req} excludes the tested {pinned.version}"
    for ubuntu, versions in UBUNTU.items():
        for name, version in versions.items():
            inside = robot[name].specifier.contains(Version(version))
            assert inside != ((ubuntu, name) in NEEDS_NEWER), f"{name} {version} on Ubuntu {ubuntu} vs {robot[name]}"
    assert not [name for name, req in robot.items() if name in UBUNTU["24.04"] and str(req.specifier).startswith("==")]


def test_with_rosdep_keys_it_covers_every_runtime_requirement():
    robot, runtime = _requirements("robot.txt"), _requirements("runtime.txt")
    run = {d.name for d in parse_package(REPO / "package.xml").exec_depends}
    for name in runtime:
        if name.startswith("ros-"):
            continue  # PyPI's ROS wheels: ROS itself on a robot
        assert name in robot or ROSDEP.get(name) in run, f"{name}: neither in robot.txt nor a rosdep key in package.xml"
    assert {ROSDEP[name] for name in UBUNTU["22.04"]} <= run  # apt provides them where the range allows
