"""Nodes of one process spinning on one executor thread, its inference nodes configured and activated at start:
what `oxygen-ros demo` and tests bring up in-process (``bringup.Graph``), where a robot runs a process per node; and
the benchmarks' camera, clients and simulated arm beside their engine processes (``bringup.EngineProcesses``)."""

import threading

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node

from oxygen_ros.nodes import teardown
from oxygen_ros.nodes.executor import Executor
from oxygen_ros.nodes.inference_node import InferenceNode


class ProcessGraph:
    """``add`` nodes to ``context`` (initialised by the caller), then ``start``; ``close`` tears everything down.
    A context manager: ``with graph:`` starts it and closes it."""

    def __init__(self, context: Context, thread_name: str) -> None:
        self.context = context
        self.executor = Executor(num_threads=6, context=context)
        self.nodes: list[Node] = []
        self.inferences: list[InferenceNode] = []
        self._thread = threading.Thread(target=self._spin, name=thread_name, daemon=True)

    def add(self, node: Node) -> Node:
        self.nodes.append(node)
        self.executor.add_node(node)
        if isinstance(node, InferenceNode):
            self.inferences.append(node)
        return node

    def add_client(self, name: str) -> Node:
        """A plain node in the graph's context and executor (for the CLI's and the benchmarks' calls)."""
        return self.add(Node(name, context=self.context))

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def start(self) -> None:
        """Spin, then configure (loads the model) and activate the inference nodes; RuntimeError if one cannot."""
        self._thread.start()
        for node in self.inferences:
            for step, trigger in (("configure", node.trigger_configure), ("activate", node.trigger_activate)):
                if trigger() != TransitionCallbackReturn.SUCCESS:
                    raise RuntimeError(f"{node.get_fully_qualified_name()} failed to {step}; its log above says why")

    def close(self) -> None:
        self.executor.shutdown()
        for node in self.nodes:
            teardown.destroy_node(node)  # with the action clients made on its client nodes
        rclpy.try_shutdown(context=self.context)

    def __enter__(self) -> "ProcessGraph":
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
