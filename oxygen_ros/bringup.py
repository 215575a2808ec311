"""The nodes `ros2 launch oxygen_ros oxygen.launch.py` starts, in one process: for `oxygen-ros demo` and tests, which
want the whole graph fast and in reach (`oxygen-ros up` runs a process per node instead, as the robot does:
oxygen_ros/supervisor.py).

`launch`/`launch_ros` are not installable from PyPI, so here the graph runs as nodes of one MultiThreadedExecutor.
Parameters come from the same YAML file the launch file passes (the installed config/oxygen.yaml by default),
through rclpy's own ``--params-file`` handling, so the bringups cannot drift.

``EngineProcesses`` is the multitask and robot benchmarks' graph: one or several inference nodes, each in its own
process as on the robot (and so the robot benchmark's arm_sim and instruction_node), and the camera here with the
benchmark's clients.
"""

import os
from pathlib import Path
from typing import IO

import rclpy
import yaml
from rclpy.context import Context
from rclpy.parameter import Parameter

from oxygen_ros.nodes.arm_sim import ArmSim
from oxygen_ros.nodes.camera_sim import CameraSim
from oxygen_ros.nodes.gripper_sim import GripperSim
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.process_graph import ProcessGraph
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros import share, simulation
from oxygen_ros.supervisor import NodeSpec, Supervisor

def _overrides(values: dict) -> list[Parameter]:
    return [Parameter(name, value=value) for name, value in values.items()]


def _context(config: Path | None, domain_id: int | None = None) -> tuple[Path, Context]:
    """The parameter file (the installed config/oxygen.yaml by default) and a context whose nodes read it."""
    path = share.parameter_file(config)
    # Fast DDS reads the profile when the process makes its first participant: for the CLI's graphs that is here
    # (a process that made one before, such as a test session, keeps its settings; its children get the profile)
    os.environ.update(share.dds_profile_env(os.environ))
    context = Context()
    rclpy.init(args=["--ros-args", "--params-file", str(path)], context=context, domain_id=domain_id)
    return path, context


def _inference(overrides: dict | None, model: str) -> dict:
    """The inference node's parameters over the file's: the simulated bringup's, ``overrides``, then ``model``."""
    return simulation.parameters()["oxygen_inference"] | (overrides or {}) | ({"model": model} if model else {})


CONTROLLERS = {"arm_sim": ArmSim, "gripper_sim": GripperSim}  # a simulated controller's node, by executable


class Graph(ProcessGraph):
    """The simulated graph (``simulation``): the inference node (configured and active), the camera, the simulated
    ``robot``'s controllers (the SO-100's two by default) and the task nodes (vqa, instruction, navigation), spinning
    on a background thread.

    ``with Graph(...) as graph:`` brings them up and tears everything down on exit; ``graph.context`` lets a
    client node join the same ROS context.
    """

    def __init__(
        self,
        config: Path | None = None,
        model: str = "",
        overrides: dict | None = None,
        domain_id: int | None = None,
        robot: str = simulation.ROBOTS[0],
    ) -> None:
        self.config, context = _context(config, domain_id)
        super().__init__(context, "oxygen-graph")
        try:
            simulated = simulation.parameters(robot, yaml.safe_load(self.config.read_text()))
            self.inference = self.add(InferenceNode(context=self.context,
                                                    parameter_overrides=_overrides(_inference(overrides, model))))
            self.camera = self.add(CameraSim(context=self.context))
            self.arm = [self.add(CONTROLLERS[arm.executable](  # under its name, as launch's name= renames a node
                context=self.context, cli_args=["--ros-args", "-r", f"__node:={arm.name}"],
                parameter_overrides=_overrides(simulated[arm.name]))) for arm in simulation.controllers(robot)]
            self.tasks = [
                self.add(task(context=self.context, parameter_overrides=_overrides(simulated[name])))
                for name, task in zip(simulation.TASK_NODES, (VqaNode, InstructionNode, NavigationNode), strict=True)
            ]
        except BaseException:
            self.close()
            raise


class EngineProcesses(ProcessGraph):
    """An inference node per namespace ('' = none), each a process of its own with its own engine and pool
    (``supervisor.Supervisor``: configured and active before ``start`` returns), each given ``config``'s
    `oxygen_inference` section (which a namespaced node would not read by itself), the simulated bringup's parameters,
    ``overrides`` and ``model``: the same parameters, whatever the namespace; and ``others``, more nodes each with the
    parameters that replace the file's, each a process of its own too (the robot benchmark's arm_sim and
    instruction_node: a controller and a task node do not share an interpreter with the benchmark's clients on a
    robot either). camera_sim runs in this process, spinning with the caller's client nodes (``add_client``), so that
    a benchmark can take one frame and then stop it. The processes' output goes to ``output``."""

    def __init__(self, config: Path | None = None, model: str = "", overrides: dict | None = None,
                 namespaces: tuple[str, ...] = ("",), output: IO | None = None,
                 others: dict[NodeSpec, dict] | None = None) -> None:  # fmt: skip
        self.config, context = _context(config)
        super().__init__(context, "oxygen-engines")
        self.supervisor: Supervisor | None = None  # None only while constructing, or when that failed
        try:
            section = yaml.safe_load(self.config.read_text())["oxygen_inference"]["ros__parameters"]
            inference = section | _inference(overrides, model)
            engines = tuple(NodeSpec("oxygen_inference", "inference_node", lifecycle=True, namespace=ns)
                            for ns in namespaces)  # fmt: skip
            self._engines = {engine.key for engine in engines}
            parameters = {engine.key: inference for engine in engines} | {
                spec.key: values for spec, values in (others or {}).items()}  # fmt: skip
            self.supervisor = Supervisor(self.config, parameters, engines + tuple(others or {}), output=output)
            self.camera = self.add(CameraSim(context=self.context))
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        if self.supervisor is not None:
            self.supervisor.start()
        super().start()

    def restarts(self, engines: bool = True) -> int:
        """Engine processes (else the ``others``) the supervisor started again so far, each one a crash."""
        if self.supervisor is None:
            return 0
        return sum(count for key, count in self.supervisor.restarts().items() if (key in self._engines) == engines)

    def given_up(self) -> str:
        """Why the supervisor gave up on a node (it exited at once at every start), '' while every node runs."""
        return self.supervisor.failure if self.supervisor is not None and self.supervisor.failed.is_set() else ""

    def close(self) -> None:
        try:
            super().close()
        finally:  # the engine processes stop whatever failed here
            if self.supervisor is not None:
                self.supervisor.stop()
