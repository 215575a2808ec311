"""The Python bringup: the nodes `ros2 launch oxygen_ros oxygen.launch.py` starts, in one process.

`launch`/`launch_ros` are not installable from PyPI, so here (and in `oxygen-ros up` / `demo`) the graph runs as
nodes of one MultiThreadedExecutor.  Parameters come from the same YAML file the launch file passes (the installed
config/oxygen.yaml by default), through rclpy's own ``--params-file`` handling, so the two bringups cannot drift.
"""

import threading
from pathlib import Path
from types import TracebackType

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter

from oxygen_ros.nodes.camera_sim import CameraSim
from oxygen_ros.nodes.inference_node import InferenceNode


def default_config() -> Path:
    """config/oxygen.yaml as installed beside this package: ``<prefix>/share/oxygen_ros`` where the package sits in
    ``<prefix>/lib/pythonX.Y/site-packages/oxygen_ros`` (the venv here, ``install/oxygen_ros`` in a colcon
    workspace, ``/opt/ros/<distro>`` for a binary install)."""
    prefix = Path(__file__).resolve().parents[4]
    return prefix / "share" / "oxygen_ros" / "config" / "oxygen.yaml"


class Graph:
    """The inference node (configured and active) and the camera, spinning on a background thread.

    ``with Graph(...) as graph:`` brings them up and tears everything down on exit; ``graph.context`` lets a
    client node join the same ROS context.
    """

    def __init__(
        self, config: Path | None = None, model: str = "", overrides: dict | None = None, domain_id: int | None = None
    ) -> None:
        self.config = config or default_config()
        if not self.config.is_file():
            raise FileNotFoundError(f"parameter file {self.config} not found")
        self.context = Context()
        rclpy.init(args=["--ros-args", "--params-file", str(self.config)], context=self.context, domain_id=domain_id)
        values = (overrides or {}) | ({"model": model} if model else {})
        parameters = [Parameter(name, value=value) for name, value in values.items()]
        self.executor = MultiThreadedExecutor(num_threads=6, context=self.context)
        self.nodes: list[Node] = []
        try:
            self.inference = self._add(InferenceNode(context=self.context, parameter_overrides=parameters))
            self.camera = self._add(CameraSim(context=self.context))
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._spin, name="oxygen-graph", daemon=True)

    def _add(self, node: Node) -> Node:
        self.nodes.append(node)
        self.executor.add_node(node)
        return node

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def start(self) -> None:
        """Spin, then configure (loads the model) and activate the inference node; RuntimeError if it cannot."""
        self._thread.start()
        steps = (("configure", self.inference.trigger_configure), ("activate", self.inference.trigger_activate))
        for step, trigger in steps:
            if trigger() != TransitionCallbackReturn.SUCCESS:
                raise RuntimeError(f"the inference node failed to {step}; its log above says why")

    def add_client(self, name: str) -> Node:
        """A plain node in the graph's context and executor (for the CLI's calls)."""
        return self._add(Node(name, context=self.context))

    def close(self) -> None:
        self.executor.shutdown()
        for node in self.nodes:
            node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    def __enter__(self) -> "Graph":
        self.start()
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
