"""The nodes `ros2 launch oxygen_ros oxygen.launch.py` starts, in one process: for `oxygen-ros demo`, the multitask
benchmark and tests, which want the whole graph fast and in reach (`oxygen-ros up` runs a process per node instead,
as the robot does: oxygen_ros/supervisor.py).

`launch`/`launch_ros` are not installable from PyPI, so here the graph runs as nodes of one MultiThreadedExecutor.
Parameters come from the same YAML file the launch file passes (the installed config/oxygen.yaml by default),
through rclpy's own ``--params-file`` handling, so the bringups cannot drift.
"""

from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter

from oxygen_ros.nodes.arm_sim import ArmSim
from oxygen_ros.nodes.camera_sim import CameraSim
from oxygen_ros.nodes.gripper_sim import GripperSim
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.process_graph import ProcessGraph
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros import simulation
from oxygen_ros.share import default_config

def remaps(namespace: str) -> list[str]:
    """Arguments that move an inference node into ``namespace`` ('' = none): its names are relative, so every name
    it serves moves with it (`/diagnostics` stays global), and several engines, each with its own pool, can run side
    by side (the multitask benchmark's isolated setting).  Such a node takes its parameters from the declared
    defaults and the overrides, not from the file's `oxygen_inference`."""
    return ["--ros-args", "-r", f"__ns:=/{namespace}"] if namespace else []


def _overrides(values: dict) -> list[Parameter]:
    return [Parameter(name, value=value) for name, value in values.items()]


class Graph(ProcessGraph):
    """The simulated graph (``simulation``): the inference node (configured and active), the camera, the SO-100
    arm's two controllers and the task nodes (vqa, instruction, navigation), spinning on a background thread.  With several ``namespaces`` there is one
    inference node per namespace (see ``remaps``); ``inference`` is the first; the task nodes call the one without a
    namespace.

    ``with Graph(...) as graph:`` brings them up and tears everything down on exit; ``graph.context`` lets a
    client node join the same ROS context.
    """

    def __init__(
        self,
        config: Path | None = None,
        model: str = "",
        overrides: dict | None = None,
        domain_id: int | None = None,
        namespaces: tuple[str, ...] = ("",),
    ) -> None:
        self.config = config or default_config()
        if not self.config.is_file():
            raise FileNotFoundError(f"parameter file {self.config} not found")
        context = Context()
        rclpy.init(args=["--ros-args", "--params-file", str(self.config)], context=context, domain_id=domain_id)
        super().__init__(context, "oxygen-graph")
        simulated = simulation.parameters()
        values = simulated["oxygen_inference"] | (overrides or {}) | ({"model": model} if model else {})
        parameters = _overrides(values)
        try:
            for ns in namespaces:
                self.add(InferenceNode(context=self.context, parameter_overrides=parameters, cli_args=remaps(ns)))
            self.inference = self.inferences[0]
            self.camera = self.add(CameraSim(context=self.context))
            self.arm = [self.add(node(context=self.context, parameter_overrides=_overrides(simulated.get(name, {}))))
                        for name, node in zip(simulation.ARM_NODES, (ArmSim, GripperSim), strict=True)]  # fmt: skip
            self.tasks = [
                self.add(task(context=self.context, parameter_overrides=_overrides(simulated[name])))
                for name, task in zip(simulation.TASK_NODES, (VqaNode, InstructionNode, NavigationNode), strict=True)
            ]
        except BaseException:
            self.close()
            raise

    def add_client(self, name: str) -> Node:
        """A plain node in the graph's context and executor (for the CLI's calls)."""
        return self.add(Node(name, context=self.context))
