"""Engine-only install without ROS: `pip install .` gives the `oxygen-ros` command and the engine, models, layers
and Triton kernels on a machine with no ROS 2 (benchmarks, notebooks, GPU boxes).

The ROS package (interfaces, nodes, launch files) is built by CMakeLists.txt with colcon or `make`; setuptools cannot
generate ROS interfaces, so `oxygen_ros.nodes`, which needs them, is left out here. `oxygen_ros/kernels` is a symlink
to the top-level `kernels/`, so that package is mapped to the real directory. Dependencies are the non-ROS lines of
requirements/runtime.txt as lower bounds (that file pins the exact versions we test).
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent


def runtime_requirements() -> list[str]:
    lines = (HERE / "requirements" / "runtime.txt").read_text().splitlines()
    reqs = [line.split("#")[0].strip() for line in lines]
    return [r.replace("==", ">=") for r in reqs if r and not r.startswith("ros-")]


def data_files(directory: str) -> list[str]:
    """Non-Python files shipped inside a package directory (e.g. benchmark texts), relative to it."""
    root = HERE / directory
    files = (p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".py")
    return [str(p.relative_to(root)) for p in files if p.relative_to(root).parts[0] != "nodes"]


def version() -> str:
    for line in (HERE / "oxygen_ros" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=")[1].strip().strip("\"'")
    raise RuntimeError("oxygen_ros/__init__.py has no __version__")


packages = find_packages(include=["oxygen_ros", "oxygen_ros.*"], exclude=["oxygen_ros.nodes*", "oxygen_ros.kernels*"])
kernel_packages = ["oxygen_ros.kernels"] + [f"oxygen_ros.kernels.{p}" for p in find_packages("kernels")]

setup(
    name="oxygen_ros",
    version=version(),
    description="Unified paged KV cache and shared inference engine for multi-task robot models",
    python_requires=">=3.10",
    packages=packages + kernel_packages,
    package_dir={"oxygen_ros.kernels": "kernels"},
    package_data={"oxygen_ros": data_files("oxygen_ros"), "oxygen_ros.kernels": data_files("kernels")},
    install_requires=runtime_requirements(),
    entry_points={"console_scripts": ["oxygen-ros = oxygen_ros.cli.main:main"]},
)
