"""package.xml and requirements/runtime.txt declare what the code really uses."""

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

from catkin_pkg.package import parse_package

import oxygen_ros

REPO = Path(__file__).parents[1]
ROS_PACKAGES = {p.name for p in (Path(sys.prefix) / "share/ament_index/resource_index/packages").iterdir()}
ROBOT_ONLY = {"launch", "launch_ros", "tf2_ros"}  # on every ROS 2 install (tf2_ros with its deps), not installable here
COMPAT = REPO / "msg" / "compat"


def _optional(tree: ast.Module) -> set[ast.AST]:
    """Imports inside `try: ... except ImportError` (or ModuleNotFoundError): the code works without them."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(handler.type, ast.Name) and handler.type.id in {"ImportError", "ModuleNotFoundError"}
            for handler in node.handlers
        ):
            guarded |= {inner for statement in node.body for inner in ast.walk(statement)}
    return guarded


def _imports(*folders: str) -> set[str]:
    """Top-level modules imported (unconditionally) by the Python files under `folders`."""
    names = set()
    for path in (p for folder in folders for p in (REPO / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        optional = _optional(tree)
        for node in ast.walk(tree):
            if node in optional:
                continue
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - {"oxygen_ros", "kernels"}


def _interface_dependencies() -> set[str]:
    """Packages our own interface files name (msg/compat holds other packages' interfaces, not ours)."""
    files = [p for folder in ("msg", "srv", "action") for p in (REPO / folder).iterdir() if p.is_file()]
    text = "\n".join(p.read_text() for p in files)
    return set(re.findall(r"^\s*(\w+)/\w+", text, re.MULTILINE))


def test_package_xml_is_valid_format3():
    package = parse_package(REPO / "package.xml")  # validates, e-mail addresses included
    assert (package.package_format, package.name, package.version) == (3, "oxygen_ros", oxygen_ros.__version__)
    assert package.get_build_type() == "ament_cmake"
    assert [group.name for group in package.member_of_groups] == ["rosidl_interface_packages"]
    assert {"rosidl_default_generators", "ament_cmake"} <= {d.name for d in package.buildtool_depends}
    assert "rosidl_default_runtime" in {d.name for d in package.exec_depends}


def test_every_ros_dependency_is_declared():
    package = parse_package(REPO / "package.xml")
    build = {d.name for d in package.build_depends}
    run = {d.name for d in package.exec_depends}
    assert _interface_dependencies() <= build & run, "interface field types need <depend>"
    used = _imports("oxygen_ros", "kernels", "launch") & (ROS_PACKAGES | ROBOT_ONLY)
    assert used <= run, f"imported but not <exec_depend>: {sorted(used - run)}"


def test_every_python_import_is_a_runtime_requirement():
    lines = (REPO / "requirements" / "runtime.txt").read_text().splitlines()
    pinned = {_normal(re.split(r"[\[=<>~ ]", line)[0]) for line in lines if line.strip() and not line.startswith("#")}
    distributions = importlib.metadata.packages_distributions()
    built_here = {folder.name for folder in COMPAT.iterdir()}  # by the Makefile from msg/compat, not by pip
    third_party = _imports("oxygen_ros", "kernels") - set(sys.stdlib_module_names) - built_here
    missing = {
        module for module in third_party if not {_normal(d) for d in distributions.get(module, [module])} & pinned
    }
    assert not missing, f"imported by the package but not in requirements/runtime.txt: {sorted(missing)}"


def _normal(distribution: str) -> str:
    """A distribution's name as PEP 503 compares them (urdfdom_py is urdfdom-py)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def test_compat_interfaces_are_standalone_packages_colcon_never_sees():
    """msg/compat/<name> is <name> itself (a robot's rosdep key), an interface package the Makefile builds only
    where the prefix lacks it, nested in our folder so colcon never builds it next to the real one."""
    package = parse_package(REPO / "package.xml")
    run = {d.name for d in package.exec_depends}
    for folder in COMPAT.iterdir():
        compat = parse_package(folder / "package.xml")
        assert compat.name == folder.name and compat.name in run
        assert "oxygen_ros compat" in compat.description  # how the Makefile tells its build from the real one
        assert [group.name for group in compat.member_of_groups] == ["rosidl_interface_packages"]
        interfaces = {p.name for p in folder.rglob("*") if p.suffix in {".msg", ".srv", ".action"}}
        assert interfaces and all(name in (folder / "CMakeLists.txt").read_text() for name in interfaces)
