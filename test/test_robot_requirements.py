"""requirements/robot.txt, what pip adds on a robot over ROS 2 and rosdep's apt packages: with runtime.txt's pins it
covers every third-party import (the rest are rosdep keys in package.xml), and each range holds the version tested
here and the versions Ubuntu 22.04 (Humble, JetPack 6) and 24.04 (Jazzy) ship, so pip keeps apt's packages, except
where robot.txt names a floor (22.04's numpy 1.21.5 cannot run gguf's dequantization: a newer 1.x, never 2, against
which ROS's compiled modules were not built but still run)."""

import re
from pathlib import Path

from catkin_pkg.package import parse_package
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).parents[1]
PYTHON = {"22.04": "3.10", "24.04": "3.12", "here": "3.11"}  # each Ubuntu's python3, and this venv's
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
NEEDS_NEWER = {("22.04", "pillow"), ("22.04", "numpy")}  # named in robot.txt: pip installs a newer one there


def _requirements(name: str, python: str = PYTHON["here"]) -> dict[str, Requirement]:
    """The file's requirements whose markers hold on ``python``, by normalized name (one line per name)."""
    lines = (REPO / "requirements" / name).read_text().splitlines()
    reqs = [Requirement(line.split("#")[0]) for line in lines if line.split("#")[0].strip()]
    chosen = [r for r in reqs if r.marker is None or r.marker.evaluate({"python_version": python})]
    names = [re.sub(r"[-_.]+", "-", r.name).lower() for r in chosen]
    assert len(set(names)) == len(names), f"{name}: more than one line per package on Python {python}"
    return dict(zip(names, chosen, strict=True))


def test_robot_ranges_hold_the_tested_pins_and_ubuntus_versions():
    robot, runtime = _requirements("robot.txt"), _requirements("runtime.txt")
    for name, req in robot.items():
        (pinned,) = runtime[name].specifier  # the version every test here runs with
        assert req.specifier.contains(pinned.version), f"{name}: {req} excludes the tested {pinned.version}"
    for ubuntu, versions in UBUNTU.items():
        robot = _requirements("robot.txt", PYTHON[ubuntu])
        for name, version in versions.items():
            inside = robot[name].specifier.contains(Version(version))
            assert inside != ((ubuntu, name) in NEEDS_NEWER), f"{name} {version} on Ubuntu {ubuntu} vs {robot[name]}"
    assert not [name for name, req in robot.items() if name in UBUNTU["24.04"] and str(req.specifier).startswith("==")]
    # where pip must replace apt's numpy (22.04), it stays on 1.x: apt's compiled modules run on any later 1.x only
    assert not _requirements("robot.txt", PYTHON["22.04"])["numpy"].specifier.contains("2.0.0")


def test_with_rosdep_keys_it_covers_every_runtime_requirement():
    robot, runtime = _requirements("robot.txt"), _requirements("runtime.txt")
    run = {d.name for d in parse_package(REPO / "package.xml").exec_depends}
    for name in runtime:
        if name.startswith("ros-"):
            continue  # PyPI's ROS wheels: ROS itself on a robot
        assert name in robot or ROSDEP.get(name) in run, f"{name}: neither in robot.txt nor a rosdep key in package.xml"
    assert {ROSDEP[name] for name in UBUNTU["22.04"]} <= run  # apt provides them where the range allows
