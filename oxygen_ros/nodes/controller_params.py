"""The arm controller's own parameters, read from the node that serves our trajectories through its parameter service
(rcl_interfaces/GetParameters), so what ``control.arm.controller_setup`` needs is asked of the controller itself.

The node is found in the graph, not guessed from the action's name: the one publishing the action's status (an
action server's node: a joint_trajectory_controller's is the controller, named as in the controller manager), or on
the trajectory topic the one subscriber that is no observer (``OBSERVERS``). Each parameter is asked alone: from
Jazzy on rclcpp answers a request naming any parameter its node lacks with no values at all, so an older or newer
controller's missing names (open_loop_control is gone in Kilted) would hide the rest. A request unanswered is asked
again once (a reply sent before its path to us was matched is lost). The answer is kept for as long as the same
endpoints serve (a controller reloaded or reconfigured makes new ones): the start parameters are read-only and the
gains are taken only when a controller is configured.
"""

import time
from typing import Any

from rcl_interfaces.srv import GetParameters
from rclpy.callback_groups import CallbackGroup
from rclpy.client import Client
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python

from oxygen_ros.nodes.future_wait import wait

POLL_S = 0.1
ROUNDS = 2  # each request asked at most this often, within the one wait
# nodes that subscribe to a topic to show or record it (ros2 topic echo, rosbag2, bridges, GUIs): on the trajectory
# topic they are no controller, so a goal with only them listening is refused, not played to nobody
OBSERVERS = ("_ros2cli", "rosbag2", "foxglove_bridge", "rosbridge", "rqt", "rviz", "plotjuggler")
UNKNOWN = "_NODE_NAME_UNKNOWN_"  # rmw's name for an endpoint whose node is not known yet
SHOWN = 4  # nodes named in a message


class ControllerParams:
    """Reads parameters of the controller at ``target`` (a resolved action name, or with ``on_topic`` a topic)."""

    def __init__(self, node: Node, target: str, on_topic: bool, group: CallbackGroup) -> None:
        self._node, self._target, self._on_topic, self._group = node, target, on_topic, group
        self._client: tuple[str, Client] | None = None  # the serving controller's parameter client
        self._kept: tuple[tuple, list[str], dict[str, Any]] | None = None  # (endpoints, names, values) last read

    def _serving(self) -> tuple[list, list[str]]:
        """The endpoints serving ``target`` now, and their nodes' fully qualified names (sorted, distinct)."""
        if self._on_topic:
            endpoints = self._node.get_subscriptions_info_by_topic(self._target)
        else:
            endpoints = self._node.get_publishers_info_by_topic(f"{self._target}/_action/status")
        endpoints = [i for i in endpoints if i.node_name != UNKNOWN and not i.node_name.startswith(OBSERVERS)]
        return endpoints, sorted({f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in endpoints})

    def controllers(self) -> list[str]:
        """The fully qualified names of the nodes serving ``target`` now."""
        return self._serving()[1]

    async def read(self, names: list[str], wait_s: float) -> tuple[str, dict[str, Any] | None, str]:
        """(the controller, its value of each of ``names``: None where it has no such parameter, why not read),
        within ``wait_s`` in all; the values are None, and the reason says why, when no single controller serves
        ``target`` (none within ``wait_s``, or several: the controller is then ''), or its parameter service does not
        answer in time."""
        deadline = time.monotonic() + wait_s
        endpoints, serving = self._serving()
        while not serving and time.monotonic() < deadline:  # (several stay several: no wait for them)
            await wait(self._node, None, POLL_S)
            endpoints, serving = self._serving()
        if len(serving) != 1:
            return "", None, f"{len(serving)} nodes serve {self._target}: {serving[:SHOWN]}"
        controller, key = serving[0], (serving[0], tuple(sorted(tuple(i.endpoint_gid) for i in endpoints)))
        if self._kept is not None and self._kept[:2] == (key, names):
            return controller, self._kept[2], ""
        client = self._client_of(controller)
        try:
            while not client.service_is_ready():
                if time.monotonic() >= deadline:
                    return controller, None, "its parameter service did not appear within answer_wait_s"
                await wait(self._node, None, POLL_S)
            values = await self._ask(client, names, deadline)
        except InvalidHandle:  # replaced meanwhile by another goal's read of another controller
            return controller, None, "the controller serving changed while it was read"
        if values is None:
            return controller, None, "its parameter service did not answer within answer_wait_s"
        self._kept = key, names, values
        return controller, values, ""

    async def _ask(self, client: Client, names: list[str], deadline: float) -> dict[str, Any] | None:
        """Each of ``names`` asked alone, all at once; those unanswered asked again, the rounds sharing the time
        left until ``deadline``."""
        values: dict[str, Any] = {}
        for left_rounds in range(ROUNDS, 0, -1):
            left = [name for name in names if name not in values]
            asked = [client.call_async(GetParameters.Request(names=[name])) for name in left]
            round_end = time.monotonic() + max(deadline - time.monotonic(), 0.0) / left_rounds
            for name, future in zip(left, asked):
                if not future.done():
                    await wait(self._node, future, max(round_end - time.monotonic(), 0.0))
                if future.done() and future.exception() is None:
                    response = future.result()
                    values[name] = parameter_value_to_python(response.values[0]) if response.values else None
                else:
                    client.remove_pending_request(future)  # an answer after this is dropped, not kept
            if len(values) == len(names):
                return values
        return None

    def _client_of(self, controller: str) -> Client:
        if self._client is None or self._client[0] != controller:
            if self._client is not None:
                self._node.destroy_client(self._client[1])
            self._client = controller, self._node.create_client(GetParameters, f"{controller}/get_parameters",
                                                                callback_group=self._group)  # fmt: skip
        return self._client[1]
