"""launch/oxygen.launch.py. `launch` and `launch_ros` are not installable here (no registry carries them), so the
file's imports are held to the real launch API and the file is executed against the stand-ins of
test/launch_stand_ins.py, which record every node, argument and lifecycle event it builds; everything it names
(executables, config files, presets) must exist in what `make install` put into the venv. Where launch_ros is
importable (a robot), the last test evaluates the real launch description the same way."""

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import launch_stand_ins
import pytest
import yaml
from launch_stand_ins import LAUNCH_FILE, LifecycleNode, ParameterValue

from oxygen_ros import parameter_file, share, simulation
from oxygen_ros.nodes import presets
from oxygen_ros.supervisor import GRAPH, graph

PREFIX = Path(sys.prefix)
SHARE = PREFIX / "share" / "oxygen_ros"
ARGUMENTS = {"config", "model_preset", "model", "camera_topic", "autostart", "use_sim", "sim_robot", "namespace",
             "use_sim_time", "log_level", "start_inference", "start_tasks"}  # fmt: skip
CLOCK = {"use_sim_time": False}
AUTOSTART = {"autostart_node": True}
TASK_NODES = {"vqa_node", "instruction_node", "navigation_node"}

# Names these modules export in ROS 2 Jazzy and Kilted (a subset: what a bringup file plausibly uses).
REAL_API = {
    "launch": {"LaunchDescription", "LaunchContext"},
    "launch.actions": {
        "DeclareLaunchArgument", "OpaqueFunction", "IncludeLaunchDescription", "GroupAction", "TimerAction",
        "RegisterEventHandler", "EmitEvent", "LogInfo", "SetEnvironmentVariable", "ExecuteProcess",
    },
    "launch.substitutions": {"LaunchConfiguration", "PathJoinSubstitution", "PythonExpression", "TextSubstitution"},
    "launch.conditions": {"IfCondition", "UnlessCondition"},
    "launch.events": {"matches_action", "Shutdown"},
    "launch_ros.actions": {"Node", "LifecycleNode", "ComposableNodeContainer", "PushRosNamespace", "SetParameter"},
    "launch_ros.event_handlers": {"OnStateTransition"},
    "launch_ros.events.lifecycle": {"ChangeState", "StateTransition"},
    "launch_ros.parameter_descriptions": {"ParameterValue"},
    "launch_ros.substitutions": {"FindPackageShare"},
    "ament_index_python.packages": {"get_package_share_directory", "get_package_prefix"},
}  # fmt: skip
LAUNCH_PACKAGES = {module.split(".")[0] for module in REAL_API}


@pytest.fixture
def launch(monkeypatch):
    """``launch(name=value, ...)``: the launch file executed against the stand-ins with those arguments."""
    launch_stand_ins.install(monkeypatch, SHARE)
    return launch_stand_ins.evaluate


def _config_section(node: str) -> dict:
    config = yaml.safe_load((SHARE / "config" / "oxygen.yaml").read_text())
    assert node in config, f"config/oxygen.yaml has no section for node {node}"
    return config[node]["ros__parameters"]


def _resolved(parameters: list) -> dict:
    """A node's parameters as ROS resolves its list: files and dicts in order, a later value replacing an earlier."""
    out: dict = {}
    for entry in parameters:
        values = yaml.safe_load(Path(entry).read_text())["oxygen_inference"]["ros__parameters"] if isinstance(
            entry, str) else entry  # fmt: skip
        out |= {k: v.value if isinstance(v, ParameterValue) else v for k, v in values.items()}
    return out


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def test_uses_real_launch_api():
    tree = ast.parse(LAUNCH_FILE.read_text(), filename=str(LAUNCH_FILE))
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.split(".")[0] in LAUNCH_PACKAGES:
            names = {alias.name for alias in node.names}
            assert names <= REAL_API.get(node.module, set()), f"not in the launch API: {node.module} {names}"


def test_declares_config_preset_model_camera_autostart_sim_namespace_clock_and_log_level(launch):
    declared = {argument.name: argument for argument in launch().arguments}
    assert set(declared) == ARGUMENTS
    assert declared["config"].default_value == str(SHARE / "config" / "oxygen.yaml")
    assert (SHARE / "config" / "oxygen.yaml").is_file()
    assert declared["autostart"].default_value == "true" and set(declared["autostart"].choices) == {"true", "false"}
    for name in ("use_sim", "use_sim_time"):  # a robot launch simulates nothing unless asked
        assert declared[name].default_value == "false" and set(declared[name].choices) == {"true", "false"}
    assert declared["log_level"].default_value == "info" and "debug" in declared["log_level"].choices
    assert declared["sim_robot"].default_value == "so100"
    assert set(declared["sim_robot"].choices) == {"so100", "bi_so100"}
    assert all(declared[name].default_value == "" for name in ("model_preset", "model", "camera_topic", "namespace"))
    assert all(argument.description for argument in declared.values())


def test_every_executable_is_installed_and_importable(launch):
    nodes = launch().nodes()
    for node in nodes.values():
        assert node.package == "oxygen_ros"
        launcher = PREFIX / "lib" / "oxygen_ros" / node.executable
        assert os.access(launcher, os.X_OK), f"{launcher} is not installed (CMakeLists.txt OXYGEN_ROS_NODES)"
        module = next(line.split()[1] for line in launcher.read_text().splitlines() if line.startswith("from "))
        assert _installed(module), f"{launcher.name} runs {module}, which is not installed"
    (lifecycle,) = [node for node in nodes.values() if isinstance(node, LifecycleNode)]
    assert (lifecycle.name, lifecycle.namespace) == ("oxygen_inference", "")


def test_nodes_match_the_config_and_the_supervisor_and_every_node_respawns_after_a_delay(launch):
    launched = launch(use_sim="true").nodes()
    nodes = {name: node for name, node in launched.items() if node.package == "oxygen_ros"}
    assert set(launched) == {*nodes, "robot_state_publisher"}  # the arm's TF for RViz: ROS's own node, not `up`'s
    assert set(nodes) == {"oxygen_inference", "camera_sim", "arm_sim", "gripper_sim", *TASK_NODES}
    assert all(_config_section(name) for name in nodes), "every node has a ros__parameters section in the config"
    assert {(spec.name, spec.executable, spec.lifecycle) for spec in GRAPH} == {
        (name, node.executable, isinstance(node, LifecycleNode)) for name, node in nodes.items()
    }
    for name, node in launched.items():
        assert node.respawn is True and node.respawn_delay > 0, name
    assert nodes["oxygen_inference"].respawn_delay == 2.0  # nav2_bringup's: a crashing model load is not a busy loop


def test_a_bimanual_sim_runs_a_trajectory_and_a_gripper_controller_per_arm_as_up_does(launch):
    nodes = launch(use_sim="true", sim_robot="bi_so100").nodes()
    arms = {"left_arm_sim": "arm_sim", "right_arm_sim": "arm_sim", "left_gripper_sim": "gripper_sim",
            "right_gripper_sim": "gripper_sim"}  # fmt: skip
    assert _description(nodes.pop("robot_state_publisher")) == (SHARE / "config" / "sim_bimanual.urdf").read_text()
    assert set(nodes) == {"oxygen_inference", "camera_sim", *arms, *TASK_NODES}
    assert {(spec.name, spec.executable, spec.lifecycle) for spec in graph("bi_so100")} == {
        (name, node.executable, isinstance(node, LifecycleNode)) for name, node in nodes.items()}  # fmt: skip
    config = str(SHARE / "config" / "oxygen.yaml")
    for name, executable in arms.items():  # each reads its executable's section, its own names over it
        (file, values) = nodes[name].parameters
        assert file == config and nodes[name].executable == executable
        assert _resolved([values]) == _config_section(executable) | CLOCK | simulation.parameters("bi_so100")[name]
        assert not [v for v in values.values() if isinstance(v, str)], "a string stays a string (_typed)"
    left = _resolved(nodes["left_arm_sim"].parameters[1:])
    assert left["joint_names"] == [f"left_{joint}" for joint in simulation.SO100_ARM]
    assert left["action_name"] == "left_arm_controller/follow_joint_trajectory"
    assert Path(left["urdf_path"]) == SHARE / "config" / "sim_bimanual.urdf"
    instruction = nodes["instruction_node"].parameters[1]
    assert instruction["trajectory_actions"] == [_resolved(nodes[f"{side}_arm_sim"].parameters[1:])["action_name"]
                                                 for side in ("left", "right")]  # fmt: skip
    assert instruction["gripper_actions"] == [_resolved(nodes[f"{side}_gripper_sim"].parameters[1:])["action_name"]
                                              for side in ("left", "right")]  # fmt: skip
    assert instruction["gripper_joint_names"] == ["left_gripper", "right_gripper"]
    with pytest.raises(ValueError, match="sim_robot"):
        launch(use_sim="true", sim_robot="aloha")


def test_the_task_nodes_come_from_one_loop(launch):
    nodes = launch().nodes()
    lines = {name: node.line for name, node in nodes.items()}
    assert {name for name, line in lines.items() if line == lines["vqa_node"]} == TASK_NODES, lines
    for name in TASK_NODES:
        assert (nodes[name].executable, nodes[name].parameters) == (name, [str(SHARE / "config" / "oxygen.yaml"), CLOCK])


def test_without_arguments_no_simulator_runs_and_every_node_reads_only_the_config(launch):
    nodes = launch().nodes()
    config = str(SHARE / "config" / "oxygen.yaml")
    assert set(nodes) == {"oxygen_inference", *TASK_NODES}, "no camera_sim: nothing publishes odom, TF or frames"
    assert nodes["oxygen_inference"].parameters == [config, {}, {}, CLOCK | AUTOSTART]
    assert all(nodes[name].parameters == [config, CLOCK] for name in TASK_NODES)
    config_values = {name: _config_section(name) for name in TASK_NODES}
    assert all(values["use_sim"] is False for values in config_values.values()), "the config is a robot's"
    assert _config_section("oxygen_inference")["allow_random_weights"] is False


def test_use_sim_adds_the_simulator_and_the_simulation_parameters(launch):
    nodes = launch(use_sim="true").nodes()
    config = str(SHARE / "config" / "oxygen.yaml")
    assert nodes["camera_sim"].parameters == [config, CLOCK]
    simulated = simulation.parameters()
    assert nodes["oxygen_inference"].parameters[-1] == CLOCK | simulated["oxygen_inference"] | AUTOSTART
    for name in TASK_NODES:
        assert nodes[name].parameters == [config, CLOCK | simulated[name]]
        assert simulated[name]["use_sim"] is True
    publisher = nodes["robot_state_publisher"]  # the simulated arm's TF, from the URDF arm_sim publishes
    assert (publisher.package, publisher.executable) == ("robot_state_publisher", "robot_state_publisher")
    assert _description(publisher) == Path(_resolved(nodes["arm_sim"].parameters[1:])["urdf_path"]).read_text()
    assert publisher.parameters[0]["use_sim_time"] is False


def _description(node) -> str:
    """robot_state_publisher's robot_description, the URDF's text, kept a string."""
    (values,) = node.parameters
    description = values["robot_description"]
    assert isinstance(description, ParameterValue) and description.value_type is str
    return description.value


def test_namespace_tf_clock_and_log_level_reach_every_node(launch):
    nodes = launch(use_sim="true", namespace="robot1", use_sim_time="true", log_level="debug").nodes()
    for name, node in nodes.items():
        assert node.namespace == "robot1", name
        assert node.remappings == [("/tf", "tf"), ("/tf_static", "tf_static")], name  # /robot1/tf, as nav2_bringup
        assert node.ros_arguments == ["--log-level", "debug"], name
        assert node.parameters[-1]["use_sim_time"] is True, name
    with pytest.raises(ValueError, match="log_level"):
        launch(log_level="loud")


@pytest.mark.parametrize("namespace", ["", "robot1", "fleet/robot1"])
def test_every_node_gets_its_config_section_in_a_namespace_too(launch, namespace):
    """rcl gives a node a parameter file's section only under the node's full name (or /**): the file each node is
    handed, loaded by rclpy itself into a node of that name in that namespace, gives it its config/oxygen.yaml
    section (under a namespace a bare section would give it nothing)."""
    import rclpy
    from rclpy.node import Node

    for name, node in launch(use_sim="true", namespace=namespace).nodes().items():
        if name == "robot_state_publisher":  # no section of ours: its description comes as a dictionary
            continue
        file = node.parameters[0]
        context = rclpy.Context()
        rclpy.init(args=["--ros-args", "--params-file", file], context=context)
        try:
            loaded = Node(name, namespace=namespace, context=context,
                          automatically_declare_parameters_from_overrides=True)  # fmt: skip
            got = {key: p.value for key, p in loaded.get_parameters_by_prefix("").items()}
            section = _config_section(name)
            wrong = {key: got.get(key) for key, value in section.items()
                     if got.get(key) != value and not (value != value and got.get(key) != got.get(key))}  # NaN is NaN
            assert section and not wrong, (name, wrong)
            loaded.destroy_node()
        finally:
            context.try_shutdown()


def test_a_robots_own_section_is_laid_over_the_shared_one_and_absolute_keys_stay():
    sections = {"navigation_node": {"ros__parameters": {"max_linear_mps": 0.3, "nav2": "auto"}},
                "/robot1/navigation_node": {"ros__parameters": {"max_linear_mps": 0.2}},
                "/**": {"ros__parameters": {"use_sim_time": True}}, "robot2": {"vqa_node": {"ros__parameters": {}}}}
    assert parameter_file.into_namespace(sections, "/robot1/") == {
        "/robot1/navigation_node": {"ros__parameters": {"max_linear_mps": 0.2, "nav2": "auto"}},
        "/**": {"ros__parameters": {"use_sim_time": True}}, "robot2": {"vqa_node": {"ros__parameters": {}}}}
    assert parameter_file.into_namespace(sections, "")["/navigation_node"] == sections["navigation_node"]
    # wildcards and relative paths are rcl's to place; nested groups are laid over one parameter at a time
    sections = {"**": {"ros__parameters": {"use_sim_time": True}}, "robot1/vqa_node": {"ros__parameters": {}},
                "vqa_node": {"ros__parameters": {"qos": {"depth": 5, "history": "keep_last"}}},
                "/robot1/vqa_node": {"ros__parameters": {"qos": {"depth": 10}}}}
    assert parameter_file.into_namespace(sections, "robot1") == {
        "/robot1/vqa_node": {"ros__parameters": {"qos": {"depth": 10, "history": "keep_last"}}},
        "**": {"ros__parameters": {"use_sim_time": True}}, "robot1/vqa_node": {"ros__parameters": {}}}


def test_remote_inference_splits_the_graph_between_the_robot_and_the_gpu_machine(launch):
    robot = launch(use_sim="true", start_inference="false").nodes()
    assert "oxygen_inference" not in robot and TASK_NODES <= set(robot) and "camera_sim" in robot
    assert set(launch(use_sim="true", start_tasks="false").nodes()) == {"oxygen_inference"}
    with pytest.raises(ValueError, match="would start nothing"):
        launch(start_inference="false", start_tasks="false")


def test_every_node_runs_with_the_packages_fast_dds_profile_unless_the_robot_chose_one(launch, monkeypatch):
    monkeypatch.delenv("FASTDDS_DEFAULT_PROFILES_FILE", raising=False)
    monkeypatch.delenv("FASTRTPS_DEFAULT_PROFILES_FILE", raising=False)
    monkeypatch.delenv("FASTDDS_BUILTIN_TRANSPORTS", raising=False)
    monkeypatch.delenv("ROS_DISTRO", raising=False)  # (this machine's rclpy wheels are Kilted's: Fast DDS 3)
    for name, node in launch(use_sim="true").nodes().items():
        assert node.additional_env == {"FASTDDS_DEFAULT_PROFILES_FILE": str(share.dds_profile())}, name
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/robot/fastdds.xml")
    for name, node in launch(use_sim="true").nodes().items():
        assert node.additional_env == {}, name  # the robot's own profile reaches the nodes from the environment


def test_a_preset_replaces_the_configs_values_and_explicit_arguments_replace_the_presets(launch, tmp_path):
    config = yaml.safe_load((SHARE / "config" / "oxygen.yaml").read_text())
    config["oxygen_inference"]["ros__parameters"] |= {"max_model_len": 512, "seed": 7, "stats_rate_hz": 4.0}
    (tmp_path / "oxygen.yaml").write_text(yaml.safe_dump(config))
    preset = presets.load("pi05-causal-tiny")
    launched = launch(config=str(tmp_path / "oxygen.yaml"), model_preset="pi05-causal-tiny", model="smollm2-135m",
                      camera_topic="/cam/image")  # fmt: skip
    nodes = launched.nodes()
    resolved = _resolved(nodes["oxygen_inference"].parameters)
    assert resolved["model"] == "smollm2-135m" != preset["model"]  # explicit beats the preset
    assert (resolved["max_model_len"], resolved["seed"]) == (preset["max_model_len"], preset["seed"])  # preset > file
    assert resolved["stats_rate_hz"] == 4.0  # what the preset does not set stays the file's
    assert resolved["camera_topic"] == "/cam/image"
    assert all(nodes[name].parameters[1]["camera_topic"].value == "/cam/image" for name in TASK_NODES)
    strings = [v for entry in nodes["oxygen_inference"].parameters[1:] for v in entry.values() if not isinstance(
        v, int | float)]  # fmt: skip
    assert all(isinstance(v, ParameterValue) and v.value_type is str for v in strings), "a string stays a string"


def test_an_unknown_preset_names_itself_and_the_folder(launch):
    with pytest.raises(ValueError, match=rf"'no-such-model'.*{SHARE / 'config' / 'models'}.*smollm2-135m"):
        launch(model_preset="no-such-model")


def test_autostart_is_the_inference_nodes_own_on_every_start_and_false_leaves_it_unconfigured(launch):
    """The node configures and activates itself (``autostart_node``), so a respawned process serves again: no
    launch-time lifecycle event, which would fire once per launch and leave a respawn unconfigured."""
    for given, expected in (("true", True), ("false", False)):
        launched = launch(autostart=given)
        assert launched.nodes()["oxygen_inference"].parameters[-1]["autostart_node"] is expected
        assert all(isinstance(action, LifecycleNode | launch_stand_ins.Node) for action in launched.actions)
    with pytest.raises(ValueError, match="autostart"):
        launch(autostart="maybe")


def test_the_launch_file_and_its_imports_need_neither_torch_nor_opencv(tmp_path):
    """As a robot's `ros2 launch` runs it: the system Python, where torch and OpenCV may be absent. Run in a fresh
    interpreter where importing either fails, against the stand-ins, with a preset (checked by the parameter table)."""
    script = f"""
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "cv2", "triton"):
            raise ImportError(f"{{name}} is blocked: a robot's system Python may not have it")
sys.meta_path.insert(0, Blocked())
sys.path.insert(0, {str(Path(__file__).parent)!r})
import launch_stand_ins
from pathlib import Path
class Patch:
    def setitem(self, mapping, key, value):
        mapping[key] = value
launch_stand_ins.install(Patch(), Path({str(SHARE)!r}))
nodes = launch_stand_ins.evaluate(model_preset="pi05-causal-tiny", use_sim="true").nodes()
assert "oxygen_inference" in nodes, nodes
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "cv2", "triton"))
assert not loaded, loaded
print("launched without torch and OpenCV:", sorted(nodes))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)  # the installed package, as every test imports it, not the source tree
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launched without torch and OpenCV" in done.stdout


def test_the_real_launch_description_where_launch_ros_is_installed():
    pytest.importorskip(
        "launch_ros",
        reason="launch_ros is not installable here (../shared/ENVIRONMENT.md): the stand-in tests above check the "
        "same nodes, arguments and respawns",
    )
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.utilities import normalize_to_list_of_substitutions, perform_substitutions
    from launch_ros.actions import LifecycleNode as RealLifecycleNode
    from launch_ros.actions import Node as RealNode

    description = launch_stand_ins.load().generate_launch_description()
    context = LaunchContext()
    declared = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    assert {argument.name for argument in declared} == ARGUMENTS
    for argument in declared:
        argument.execute(context)
    context.launch_configurations["use_sim"] = "true"  # every node of the supervisor's graph
    actions = [a for e in description.entities if isinstance(e, OpaqueFunction) for a in e.execute(context)]

    def text(value) -> str:
        return perform_substitutions(context, normalize_to_list_of_substitutions(value))

    nodes = [a for a in actions if isinstance(a, RealNode)]
    executables = sorted(text(node.node_executable) for node in nodes)
    assert executables == sorted([*(spec.executable for spec in GRAPH), "robot_state_publisher"])  # RViz's arm TF
    assert len([node for node in nodes if isinstance(node, RealLifecycleNode)]) == 1
