"""launch/oxygen.launch.py, checked statically: `launch` and `launch_ros` are not installable here (no registry
carries them), so the file is parsed, its imports are held to the real launch API, and everything it names
(executables, config files, parameters) must exist in what `make install` put into the venv."""

import ast
import importlib.util
import os
import sys
from pathlib import Path

import yaml

LAUNCH_FILE = Path(__file__).parents[1] / "launch" / "oxygen.launch.py"
PREFIX = Path(sys.prefix)
SHARE = PREFIX / "share" / "oxygen_ros"

# Names these modules export in ROS 2 Jazzy and Kilted (a subset: what a bringup file plausibly uses).
REAL_API = {
    "launch": {"LaunchDescription", "LaunchContext"},
    "launch.actions": {
        "DeclareLaunchArgument", "OpaqueFunction", "IncludeLaunchDescription", "GroupAction", "TimerAction",
        "RegisterEventHandler", "EmitEvent", "LogInfo", "SetEnvironmentVariable", "ExecuteProcess",
    },
    "launch.substitutions": {"LaunchConfiguration", "PathJoinSubstitution", "PythonExpression", "TextSubstitution"},
    "launch.conditions": {"IfCondition", "UnlessCondition"},
    "launch_ros.actions": {"Node", "LifecycleNode", "ComposableNodeContainer", "PushRosNamespace", "SetParameter"},
    "launch_ros.substitutions": {"FindPackageShare"},
    "ament_index_python.packages": {"get_package_share_directory", "get_package_prefix"},
}  # fmt: skip
LAUNCH_PACKAGES = {module.split(".")[0] for module in REAL_API}
NODE_ACTIONS = {"Node", "LifecycleNode"}


def _tree() -> ast.Module:
    return ast.parse(LAUNCH_FILE.read_text(), filename=str(LAUNCH_FILE))


def _calls(name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(_tree())
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == name
    ]


def _keyword(call: ast.Call, name: str):
    return next((ast.literal_eval(k.value) for k in call.keywords if k.arg == name), None)


def _node_calls() -> list[ast.Call]:
    return [call for name in NODE_ACTIONS for call in _calls(name)]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _declared_arguments() -> set[str]:
    return {ast.literal_eval(call.args[0]) for call in _calls("DeclareLaunchArgument")}


def _parameters(node_name: str) -> dict:
    config = yaml.safe_load((SHARE / "config" / "oxygen.yaml").read_text())
    assert node_name in config, f"config/oxygen.yaml has no section for node {node_name}"
    return config[node_name]["ros__parameters"]


def test_uses_real_launch_api():
    tree = _tree()
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in LAUNCH_PACKAGES:
            names = {alias.name for alias in node.names}
            assert names <= REAL_API.get(node.module, set()), f"not in the launch API: {node.module} {names}"
            imported |= names
    assert {"LaunchDescription", "DeclareLaunchArgument"} <= imported and imported & NODE_ACTIONS


def test_declares_model_config_and_camera_arguments():
    assert _declared_arguments() == {"model", "config", "camera_topic"}


def test_every_executable_is_installed_and_importable():
    calls = _node_calls()
    assert calls, "the launch file starts no node"
    for call in calls:
        assert _keyword(call, "package") == "oxygen_ros"
        launcher = PREFIX / "lib" / "oxygen_ros" / _keyword(call, "executable")
        assert os.access(launcher, os.X_OK), f"{launcher} is not installed (CMakeLists.txt OXYGEN_ROS_NODES)"
        module = next(line.split()[1] for line in launcher.read_text().splitlines() if line.startswith("from "))
        assert _installed(module), f"{launcher.name} runs {module}, which is not installed"
        if getattr(call.func, "id", None) == "LifecycleNode":
            assert _keyword(call, "name") and _keyword(call, "namespace") is not None, "LifecycleNode needs both"


def test_referenced_share_files_are_installed():
    referenced = {
        tuple(ast.literal_eval(arg) for arg in call.args[1:])
        for call in _calls("join")
        if call.args and isinstance(call.args[0], ast.Call) and call.args[0].func.id == "get_package_share_directory"
    }
    assert ("config", "oxygen.yaml") in referenced
    for path in referenced:
        assert SHARE.joinpath(*path).is_file(), f"share/oxygen_ros/{'/'.join(path)} is not installed"


def test_nodes_and_overridable_arguments_match_the_config():
    launched = {_keyword(call, "name"): set(_parameters(_keyword(call, "name"))) for call in _node_calls()}
    assert set(launched) == {"oxygen_inference", "camera_sim", "vqa_node", "instruction_node", "navigation_node"}
    assert all(launched.values()), "every launched node has a ros__parameters section in the config"
    for argument in _declared_arguments() - {"config"}:
        assert any(argument in parameters for parameters in launched.values()), f"{argument} is no node's parameter"


def test_the_camera_and_task_nodes_respawn_and_the_supervisor_runs_the_same_nodes():
    from oxygen_ros.supervisor import GRAPH

    calls = {_keyword(call, "name"): call for call in _node_calls()}
    respawned = {name for name, call in calls.items() if any(k.arg == "respawn" for k in call.keywords)}
    assert respawned == {"camera_sim", "vqa_node", "instruction_node", "navigation_node"}
    for name in respawned:
        assert _keyword(calls[name], "respawn") is True
        assert any(k.arg == "respawn_delay" for k in calls[name].keywords), f"{name} respawns without a delay"
    assert {(spec.name, spec.executable) for spec in GRAPH} == {
        (name, _keyword(call, "executable")) for name, call in calls.items()
    }
