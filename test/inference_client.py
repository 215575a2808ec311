"""Talking to a running `oxygen_inference` from tests, the way a task node or `ros2 lifecycle` would: over its
services and topics, from a client node spinning in the same executor (see ros_harness.spin_nodes)."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from oxygen_ros.msg import KvPoolStats
from oxygen_ros.srv import GetPoolStats, Infer
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import call_service, make_context, spin_nodes

from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.polling import poll_until

NODE = "/oxygen_inference"
MODEL_TIMEOUT = 120  # a configure loads a model; an answer may wait behind others on two shared cores


@contextmanager
def serving(domain_id: int, parameters: dict[str, Any], client_name: str, *, activate: bool = True,
            task_nodes: Callable[[Context], list[Node]] | None = None,
            num_threads: int = 4) -> Iterator[tuple[InferenceNode, Node]]:  # fmt: skip
    """A fresh context on ``domain_id`` spinning an InferenceNode started with ``parameters``, a client node named
    ``client_name`` and the nodes ``task_nodes`` builds in that context; configured and activated unless
    ``activate`` is False. One torch thread while it serves: two cores are shared with the other test runs. Yields
    (inference node, client); on exit the context is shut down and torch's thread count restored."""
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    context = make_context(domain_id)
    try:
        others = task_nodes(context) if task_nodes else []
        overrides = [Parameter(name, value=value) for name, value in parameters.items()]
        node = InferenceNode(context=context, parameter_overrides=overrides)
        client = Node(client_name, context=context)
        with spin_nodes(context, node, *others, client, num_threads=num_threads):
            if activate:
                configure_and_activate(client)
            yield node, client
    finally:
        context.try_shutdown()
        torch.set_num_threads(saved_threads)


def transition(client: Node, transition_id: int) -> bool:
    """Trigger a lifecycle transition (Transition.TRANSITION_*); True if the node reported success."""
    request = ChangeState.Request(transition=Transition(id=transition_id))
    return call_service(client, ChangeState, f"{NODE}/change_state", request, MODEL_TIMEOUT).success


def configure_and_activate(client: Node) -> None:
    assert transition(client, Transition.TRANSITION_CONFIGURE), "configure failed (see the node's log)"
    assert transition(client, Transition.TRANSITION_ACTIVATE)


def lifecycle_state(client: Node) -> str:
    return call_service(client, GetState, f"{NODE}/get_state", GetState.Request()).current_state.label


def infer(client: Node, prompt: str, **fields) -> Infer.Response:
    """One Infer call; text answers by default."""
    request = Infer.Request(prompt=prompt, **({"want_text": True, "max_new_tokens": 16} | fields))
    return call_service(client, Infer, "/oxygen/infer", request, MODEL_TIMEOUT)


def pool_stats(client: Node) -> KvPoolStats:
    return call_service(client, GetPoolStats, "/oxygen/get_pool_stats", GetPoolStats.Request()).stats


def wait_for_observation(client: Node, observation_id: str, timeout: float = 10.0) -> None:
    """Until the node knows ``observation_id``: a request with max_new_tokens 0 about it is refused for the token
    budget (nothing runs) once the id is in the ring, and NOT_FOUND before."""
    poll_until(lambda: infer(client, "probe", observation_id=observation_id, max_new_tokens=0).error_code
               != "NOT_FOUND", timeout, f"observation {observation_id!r} at the node")  # fmt: skip


class Capture:
    """Messages received on a topic, in arrival order."""

    def __init__(self, node: Node, msg_type, topic: str, qos=10) -> None:
        self.messages: list = []
        self._changed = threading.Condition()
        node.create_subscription(msg_type, topic, self._on_message, qos)

    def _on_message(self, msg) -> None:
        with self._changed:
            self.messages.append(msg)
            self._changed.notify_all()

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "a matching message"):
        """The first message (received so far or later) for which ``predicate`` is true."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for msg in self.messages[seen:]:
                    if predicate(msg):
                        return msg
                seen = len(self.messages)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no {what} within {timeout} s ({seen} messages seen)")
                self._changed.wait(remaining)
