"""Robot bringup: `ros2 launch oxygen_ros oxygen.launch.py [model:=...] [config:=...] [camera_topic:=...]`.

Every node reads its parameters from one YAML file (default: the installed config/oxygen.yaml, the same file
`oxygen-ros up` reads); `model` and `camera_topic` override that file only when given, so the YAML stays the single
source of defaults. The inference node is a lifecycle node: configure it to load the model, activate it to serve
(`ros2 lifecycle set /oxygen_inference configure`, then `activate`).

A process per node; the camera and the task nodes are started again RESPAWN_DELAY_S after they die (their clients
see UNAVAILABLE meanwhile). The inference node is not respawned here: a new process would come up unconfigured and
wait for `ros2 lifecycle set` again; `oxygen-ros up` (oxygen_ros/supervisor.py) restarts it and configures and
activates it itself.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node

RESPAWN_DELAY_S = 1.0


def _nodes(context):
    config = LaunchConfiguration("config").perform(context)
    overrides = {}
    for name in ("model", "camera_topic"):
        value = LaunchConfiguration(name).perform(context)
        if value:
            overrides[name] = value
    return [
        LifecycleNode(
            package="oxygen_ros",
            executable="inference_node",
            name="oxygen_inference",
            namespace="",
            output="screen",
            parameters=[config, overrides],
        ),
        Node(
            package="oxygen_ros",
            executable="camera_sim",
            name="camera_sim",
            namespace="",
            output="screen",
            parameters=[config, {"camera_topic": overrides["camera_topic"]} if "camera_topic" in overrides else {}],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
        ),
        # the task nodes: no model, each calls /oxygen/infer (literal names: test/test_launch.py reads them)
        Node(
            package="oxygen_ros",
            executable="vqa_node",
            name="vqa_node",
            output="screen",
            parameters=[config],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
        ),
        Node(
            package="oxygen_ros",
            executable="instruction_node",
            name="instruction_node",
            output="screen",
            parameters=[config],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
        ),
        Node(
            package="oxygen_ros",
            executable="navigation_node",
            name="navigation_node",
            output="screen",
            parameters=[config],
            respawn=True,
            respawn_delay=RESPAWN_DELAY_S,
        ),
    ]


def generate_launch_description():
    default_config = os.path.join(get_package_share_directory("oxygen_ros"), "config", "oxygen.yaml")
    return LaunchDescription(
        [
            DeclareLaunchArgument("config", default_value=default_config, description="parameter YAML file"),
            DeclareLaunchArgument("model", default_value="", description="model name or folder; '' = the config's"),
            DeclareLaunchArgument(
                "camera_topic", default_value="", description="sensor_msgs/Image topic; '' = the config's"
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
