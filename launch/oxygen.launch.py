"""Robot bringup: `ros2 launch oxygen_ros oxygen.launch.py [autostart:=true] [model_preset:=NAME] [model:=...]
[config:=...] [camera_topic:=...]`.

Every node reads its parameters from one YAML file (default: the installed config/oxygen.yaml, the same file
`oxygen-ros up` reads). The inference node's parameters, lowest first: that file, then the model preset
config/models/NAME.yaml when `model_preset` is given (oxygen_ros/nodes/presets.py: model, dtype, KV block size,
budget and formats), then `model` and `camera_topic` when given, so the YAML stays the single source of defaults.

The inference node is a lifecycle node. With `autostart:=true` (the default) launch configures it (the model loads)
and activates it once configuring has ended in `inactive`, through launch_ros lifecycle events as nav2's bringup
does; `autostart:=false` leaves it unconfigured for `ros2 lifecycle set /oxygen_inference configure`, then
`activate`.

A process per node; the camera and the task nodes are started again RESPAWN_DELAY_S after they die (their clients
see UNAVAILABLE meanwhile). The inference node is not respawned here: a new process would come up unconfigured (the
autostart events are emitted once per launch); `oxygen-ros up` (oxygen_ros/supervisor.py) restarts it and
configures and activates it itself.
"""

import os
from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

from oxygen_ros.nodes import presets

RESPAWN_DELAY_S = 1.0
TASK_NODES = ("vqa_node", "instruction_node", "navigation_node")  # no model: each calls /oxygen/infer


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


def _change_state(node: LifecycleNode, transition_id: int, condition: IfCondition) -> EmitEvent:
    event = ChangeState(lifecycle_node_matcher=matches_action(node), transition_id=transition_id)
    return EmitEvent(event=event, condition=condition)


def _autostart(inference: LifecycleNode) -> list:
    """Configure the inference node now and activate it when configuring ends in inactive: the handler matches
    configuring -> inactive only, so a later `ros2 lifecycle set ... deactivate` is not undone. It is registered
    before the configure event is emitted, so it cannot miss that transition."""
    when = IfCondition(LaunchConfiguration("autostart"))
    activate = OnStateTransition(
        target_lifecycle_node=inference,
        start_state="configuring",
        goal_state="inactive",
        entities=[_change_state(inference, Transition.TRANSITION_ACTIVATE, when)],
    )
    return [
        RegisterEventHandler(activate, condition=when),
        _change_state(inference, Transition.TRANSITION_CONFIGURE, when),
    ]


def _nodes(context) -> list:
    config = LaunchConfiguration("config").perform(context)
    camera = _typed(_given(context, "camera_topic"))
    inference = LifecycleNode(
        package="oxygen_ros",
        executable="inference_node",
        name="oxygen_inference",
        namespace="",
        output="screen",
        parameters=[config, _typed(_preset(context)), _typed(_given(context, "model")) | camera],
    )
    camera_sim = Node(
        package="oxygen_ros",
        executable="camera_sim",
        name="camera_sim",
        namespace="",
        output="screen",
        parameters=[config, camera],
        respawn=True,
        respawn_delay=RESPAWN_DELAY_S,
    )
    tasks = [
        Node(
            package="oxygen_ros",
            executable=name,
            name=name,
            output="screen",
            parameters=[config],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
        )
        for name in TASK_NODES
    ]
    return [inference, camera_sim, *tasks, *_autostart(inference)]


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
                "camera_topic", default_value="", description="sensor_msgs/Image topic; '' = the config's"
            ),
            DeclareLaunchArgument(
                "autostart",
                default_value="true",
                choices=["true", "false"],
                description="configure and activate the inference node; false = leave it unconfigured",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
