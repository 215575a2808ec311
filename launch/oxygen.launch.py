"""Robot bringup: `ros2 launch oxygen_ros oxygen.launch.py [use_sim:=false] [sim_robot:=so100] [namespace:=robot1]
[use_sim_time:=false] [log_level:=info] [autostart:=true] [model_preset:=NAME] [model:=...] [config:=...]
[camera_topic:=...] [start_inference:=true] [start_tasks:=true]`.

Remote inference (README "Remote inference") splits the graph in two: the robot runs `start_inference:=false`, the
GPU machine `start_tasks:=false` (one of each node: the same launch on both would serve every goal twice).

On a robot (the default, `use_sim:=false`) no node of this file publishes odometry, TF or camera frames: the inference
node and the task nodes read the robot's camera on `camera_topic`, and the task nodes command the robot's own
`cmd_vel` and the arm's controllers. `use_sim:=true` adds camera_sim (simulated frames, odometry, a laser scan, a
simulated base), the simulated arm's controllers (arm_sim and gripper_sim for `sim_robot:=so100`; a pair per arm for
the bimanual `bi_so100`), robot_state_publisher with that arm's URDF (its links' TF, for RViz's RobotModel; the
arm_sims publish the same description on robot_description as it does) and the parameters of
``oxygen_ros.simulation``. Every name is relative, and /tf and /tf_static are remapped to relative names as
nav2_bringup does, so `namespace:=robot1` moves the whole graph, its transforms included (`/diagnostics` stays
global; its status names carry the namespace), and its parameters: rcl applies a file's section only under the
node's full name (or /**), so the nodes get a copy of the file with each bare section keyed /robot1/<name>
(``oxygen_ros.parameter_file``).

Every node reads its parameters from one YAML file (default: the installed config/oxygen.yaml, the same file
`oxygen-ros up` reads). The inference node's parameters, lowest first: that file, then the model preset
config/models/NAME.yaml when `model_preset` is given (oxygen_ros/nodes/presets.py: model, dtype, KV block size,
budget and formats), then `model` and `camera_topic` when given, so the YAML stays the single source of defaults.

A process per node, each started again after it dies: the task nodes and the camera RESPAWN_DELAY_S later, the
inference node INFERENCE_RESPAWN_DELAY_S later (nav2_bringup's delay). The inference node is a lifecycle node that
configures and activates itself when `autostart:=true` (the default: its `autostart_node` parameter, as nav2's
nodes do), so a respawned process serves again with no manual step (after its model loads); task nodes answer
UNAVAILABLE meanwhile and find it again by name. `autostart:=false` leaves it unconfigured, on every start, for
`ros2 lifecycle set /oxygen_inference configure`, then `activate`.

What this file imports needs neither torch nor OpenCV (a robot's `ros2 launch` runs the system Python): presets are
checked by the torch-free parameter table (oxygen_ros/config.py, oxygen_ros/nodes/params.py).
"""

import os
from pathlib import Path

import yaml
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

from oxygen_ros import parameter_file, share, simulation
from oxygen_ros.nodes import presets

# nav2_bringup's: TF is /tf and /tf_static (absolute, as tf2 publishes it), so under namespace:=robot1 each robot's
# nodes must read and write /robot1/tf; at the root namespace this maps /tf onto itself.
TF_REMAPPINGS = [("/tf", "tf"), ("/tf_static", "tf_static")]
RESPAWN_DELAY_S = 1.0
INFERENCE_RESPAWN_DELAY_S = 2.0
TASK_NODES = simulation.TASK_NODES  # no model: each calls oxygen/infer


def _share(*parts: str) -> str:
    return os.path.join(get_package_share_directory("oxygen_ros"), *parts)


def _given(context, *names: str) -> dict:
    """The launch arguments among ``names`` that were given (not ''), as parameters."""
    values = {name: LaunchConfiguration(name).perform(context) for name in names}
    return {name: value for name, value in values.items() if value}


def _typed(values: dict) -> dict:
    """Strings kept strings: launch reads a plain string parameter as YAML (a folder named 2025 would be an int)."""
    return {name: ParameterValue(v, value_type=str) if isinstance(v, str) else v for name, v in values.items()}


def _preset(context) -> dict:
    """The model preset's parameters; ValueError naming the preset and the folder when there is none such."""
    name = LaunchConfiguration("model_preset").perform(context)
    return presets.load(name, Path(_share("config", "models"))) if name else {}


def _flag(context, name: str) -> bool:
    return LaunchConfiguration(name).perform(context) == "true"


def _switch(name: str, default: bool, description: str) -> DeclareLaunchArgument:
    """A true / false launch argument (read with ``_flag``)."""
    return DeclareLaunchArgument(name, default_value=str(default).lower(), choices=["true", "false"],
                                 description=description)  # fmt: skip


def _nodes(context) -> list:
    namespace = LaunchConfiguration("namespace").perform(context)
    config = LaunchConfiguration("config").perform(context)
    camera = _typed(_given(context, "camera_topic"))
    use_sim = _flag(context, "use_sim")
    robot = LaunchConfiguration("sim_robot").perform(context)
    simulated = simulation.parameters(robot, yaml.safe_load(Path(config).read_text())) if use_sim else {}
    config = parameter_file.written_into_namespace(config, namespace)  # its sections keyed by the nodes' full names
    clock = {"use_sim_time": _flag(context, "use_sim_time")}
    common = {
        "namespace": namespace,
        "ros_arguments": ["--log-level", LaunchConfiguration("log_level").perform(context)],
        "remappings": TF_REMAPPINGS,
        "output": "screen",
        "additional_env": share.dds_profile_env(os.environ),  # config/fastdds_profile.xml unless one is chosen
    }
    inference = LifecycleNode(
        package="oxygen_ros",
        executable="inference_node",
        name="oxygen_inference",
        parameters=[config, _typed(_preset(context)), _typed(_given(context, "model")) | camera,
                    clock | simulated.get("oxygen_inference", {}) | {"autostart_node": _flag(context, "autostart")}],
        respawn=True,
        respawn_delay=INFERENCE_RESPAWN_DELAY_S,
        **common,
    )  # fmt: skip
    inference_here, tasks_here = _flag(context, "start_inference"), _flag(context, "start_tasks")
    if not (inference_here or tasks_here):
        raise ValueError("start_inference and start_tasks are both false: this launch would start nothing")
    nodes = [inference] if inference_here else []
    if not tasks_here:  # the robot's half (its task nodes, its simulated camera and arm) runs on the robot
        return nodes
    if use_sim:
        nodes.append(Node(package="oxygen_ros", executable="camera_sim", name="camera_sim",
                          parameters=[config, camera | clock], respawn=True, respawn_delay=RESPAWN_DELAY_S,
                          **common))  # fmt: skip
        nodes += [Node(package="oxygen_ros", executable=arm.executable, name=arm.name,
                       parameters=[config, _typed(clock | simulated[arm.name])], respawn=True,
                       respawn_delay=RESPAWN_DELAY_S, **common)
                  for arm in simulation.controllers(robot)]  # fmt: skip
        # the simulated arm in RViz (RobotModel): its links' TF from its URDF and joint_states, as on a robot
        urdf = Path(_share("config", simulation.URDFS[robot])).read_text()
        description = {"robot_description": ParameterValue(urdf, value_type=str)}
        nodes.append(Node(package="robot_state_publisher", executable="robot_state_publisher",
                          name="robot_state_publisher", parameters=[description | clock], respawn=True,
                          respawn_delay=RESPAWN_DELAY_S, **common))  # fmt: skip
    tasks = [
        Node(
            package="oxygen_ros",
            executable=name,
            name=name,
            parameters=[config, camera | clock | simulated.get(name, {})],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
            **common,
        )
        for name in TASK_NODES
    ]
    return [*nodes, *tasks]


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "config", default_value=_share("config", "oxygen.yaml"), description="parameter YAML file"
            ),
            DeclareLaunchArgument(
                "model_preset",
                default_value="",
                description="a model preset, config/models/<name>.yaml, over the config's values; '' = none",
            ),
            DeclareLaunchArgument(
                "model", default_value="", description="model name or folder; '' = the preset's or config's"
            ),
            DeclareLaunchArgument(
                "camera_topic", default_value="", description="the robot's sensor_msgs/Image topic; '' = the config's"
            ),
            _switch(
                "use_sim", False, "run camera_sim (simulated camera, odometry, base and arm); false = the robot's own"
            ),
            DeclareLaunchArgument(
                "sim_robot",
                default_value=simulation.ROBOTS[0],
                choices=list(simulation.ROBOTS),
                description="with use_sim: the simulated arm, an SO-100 or a bimanual bi-SO-100 "
                "(oxygen_ros/simulation.py)",
            ),
            DeclareLaunchArgument(
                "namespace", default_value="", description="namespace of every node and name; '' = none"
            ),
            _switch("use_sim_time", False, "every node's use_sim_time (a simulator's or a bag's /clock)"),
            DeclareLaunchArgument(
                "log_level",
                default_value="info",
                choices=["debug", "info", "warn", "error", "fatal"],
                description="every node's log level",
            ),
            _switch(
                "autostart",
                True,
                "the inference node configures and activates itself on every start (its "
                "autostart_node parameter); false = leave it unconfigured",
            ),
            _switch(
                "start_inference",
                True,
                "start the inference node on this machine; false = it runs on another (remote inference)",
            ),
            _switch(
                "start_tasks",
                True,
                "start the task nodes (and with use_sim the simulated robot) on this machine; "
                "false = a GPU machine serving a robot's task nodes (remote inference)",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
