"""Stand-ins for what launch/oxygen.launch.py imports from `launch`, `launch_ros` and `ament_index_python`, so the
file can be executed on a machine without ROS 2's launch (no registry carries it: ../shared/ENVIRONMENT.md).

A test harness, not a product mock: each class only keeps the arguments it was given, under the real keyword names
(a keyword the real class does not take is a TypeError here too), plus the line of the launch file that built it, so
a test reads every node, argument and lifecycle event the file produces. ``evaluate`` runs the file as `ros2 launch`
would: the declared defaults, the given arguments (checked against ``choices``), then each OpaqueFunction.
"""

import importlib.util
import inspect
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAUNCH_FILE = Path(__file__).parents[1] / "launch" / "oxygen.launch.py"


def _launch_file_line() -> int:
    """The line of the launch file whose call is being run (0 when it is not the caller)."""
    return next((frame.lineno for frame in inspect.stack() if frame.filename == str(LAUNCH_FILE)), 0)


class Recorded:
    """Keeps its constructor's arguments as attributes and where in the launch file it was built."""

    def _keep(self, arguments: dict[str, Any]) -> None:
        """``arguments``: the constructor's ``locals()``."""
        self.__dict__.update({name: value for name, value in arguments.items() if name != "self"})
        self.line = _launch_file_line()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


@dataclass
class Context:
    launch_configurations: dict[str, str] = field(default_factory=dict)


class LaunchDescription:
    def __init__(self, initial_entities=None):
        self.entities = list(initial_entities or [])


class DeclareLaunchArgument(Recorded):
    def __init__(self, name, *, default_value=None, description=None, choices=None, condition=None):
        self._keep(locals())


class OpaqueFunction(Recorded):
    def __init__(self, *, function, args=None, kwargs=None, condition=None):
        self._keep(locals())


class LaunchConfiguration(Recorded):
    def __init__(self, variable_name, *, default=None):
        self._keep(locals())

    def perform(self, context: Context) -> str:
        return context.launch_configurations[self.variable_name]


class Node(Recorded):
    def __init__(self, *, executable, package=None, name=None, namespace=None, exec_name=None, parameters=None,
                 remappings=None, ros_arguments=None, arguments=None, output="log", respawn=False, respawn_delay=None,
                 condition=None, additional_env=None):  # fmt: skip
        self._keep(locals())


class LifecycleNode(Node):
    def __init__(self, *, name, namespace, **kwargs):
        super().__init__(name=name, namespace=namespace, **kwargs)


class ParameterValue(Recorded):
    def __init__(self, value, *, value_type=None):
        self._keep(locals())


MODULES = {
    "launch": {"LaunchDescription": LaunchDescription},
    "launch.actions": {"DeclareLaunchArgument": DeclareLaunchArgument, "OpaqueFunction": OpaqueFunction},
    "launch.substitutions": {"LaunchConfiguration": LaunchConfiguration},
    "launch_ros": {},
    "launch_ros.actions": {"Node": Node, "LifecycleNode": LifecycleNode},
    "launch_ros.parameter_descriptions": {"ParameterValue": ParameterValue},
    "ament_index_python": {},
    "ament_index_python.packages": {},
}  # fmt: skip


@dataclass
class Launched:
    """What the launch file produced for one set of arguments."""

    arguments: list[DeclareLaunchArgument]
    actions: list[Any]
    context: Context

    def nodes(self) -> dict[str, Node]:
        return {action.name: action for action in self.actions if isinstance(action, Node)}


def install(monkeypatch, share: Path) -> None:
    """Put the stand-ins into ``sys.modules`` for the test (``monkeypatch`` restores them); the package share
    folder of `oxygen_ros` is ``share``."""

    def get_package_share_directory(package_name: str) -> str:
        if package_name != "oxygen_ros":
            raise LookupError(f"package {package_name!r} not found")
        return str(share)

    for name, attributes in MODULES.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        if name == "ament_index_python.packages":
            module.get_package_share_directory = get_package_share_directory
        monkeypatch.setitem(sys.modules, name, module)


def load():
    """The launch file as a fresh module (run against whatever ``sys.modules`` holds now)."""
    spec = importlib.util.spec_from_file_location("oxygen_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate(**given: str) -> Launched:
    """Run the launch file with ``given`` launch arguments (``name:=value``), as `ros2 launch` would."""
    description = load().generate_launch_description()
    arguments = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    declared = {argument.name: argument for argument in arguments}
    unknown = set(given) - set(declared)
    if unknown:
        raise KeyError(f"not declared by the launch file: {sorted(unknown)}")
    context = Context({name: argument.default_value for name, argument in declared.items()} | given)
    for name, value in context.launch_configurations.items():
        if declared[name].choices is not None and value not in declared[name].choices:
            raise ValueError(f"argument {name}: {value!r} is not one of {declared[name].choices}")
    actions = []
    for entity in description.entities:
        if isinstance(entity, OpaqueFunction):
            actions += entity.function(context, *(entity.args or []), **(entity.kwargs or {}))
    return Launched(arguments, actions, context)
