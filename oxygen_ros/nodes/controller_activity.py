"""Whether the arm's controller is active, by its controller manager's word (``controller_manager_msgs/srv/
ListControllers``), asked before each goal moves the arm.

A joint_trajectory_controller that is loaded and configured but not active still has its action server and its
trajectory subscriber: it rejects every goal ("Controller is not running") and drops every trajectory on its topic
without a word (its ``subscriber_is_active_``). On the topic a goal would then send chunks to nobody, so a goal is
refused first, naming the controller, its state and the command that activates it (a gripper's controller too: a
GripperActionController deactivated keeps its action server, takes every goal and ends none). The manager is found in
the graph: ros2_control creates a controller's node in its manager's namespace, so it is the node in the controller's
namespace serving ``<manager>/list_controllers``. A controller no manager lists (a vendor driver's own server, a
MoveIt or simulated one) is not judged here; nor when no manager answers in time (the goal goes on, with a warning:
the controller's rejection or the tracking check still stops it). A request unanswered is asked again once (a reply
sent before its path to us was matched is lost), as ``controller_params`` does.
"""

import threading
import time

from controller_manager_msgs.srv import ListControllers
from rclpy.callback_groups import CallbackGroup
from rclpy.client import Client
from rclpy.exceptions import InvalidHandle
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.nodes.future_wait import wait

LIST_TYPE = "controller_manager_msgs/srv/ListControllers"
SUFFIX = "/list_controllers"
ACTIVE = "active"
DEFAULT_MANAGER = "/controller_manager"  # ros2controlcli's `-c` default
POLL_S = 0.05  # how often a client not yet matched to its manager looks again
ROUNDS = 2  # a request asked at most this often, within the one wait
FRESH_S = 5.0  # a state read ahead of a goal's check (while its first chunk is computed) serves it this long
JTC_INACTIVE = "it rejects goals and drops trajectories on its topic unread"
GRIPPER_INACTIVE = "it takes goals and never moves the jaw nor ends them (a GripperActionController deactivated)"


def inactive_reason(controller: str, state: str, manager: str, consequence: str = JTC_INACTIVE) -> str:
    """The refusal for ``controller`` (a fully qualified node name) that ``manager`` lists as ``state``;
    ``consequence``: what the controller does with our commands meanwhile."""
    name = controller.rsplit("/", 1)[-1]
    cli = "ros2 control set_controller_state" + ("" if manager == DEFAULT_MANAGER else f" -c {manager}")
    if state == "unconfigured":
        remedy = f"configure, then activate it (`{cli} {name} inactive`, then `{cli} {name} active`)"
    elif state == "finalized":  # configure, activate and (from Jazzy on) unload all refuse it
        remedy = "restart its controller manager (a finalized controller is never configured nor activated again)"
    else:
        remedy = f"activate it (`{cli} {name} active`, or spawn it active)"
    return f"{controller} is {state}, not active ({manager} lists it so): {consequence}; {remedy}"


class ControllerActivity:
    """Asks the controller managers in a controller's namespace for its state; any executor thread."""

    def __init__(self, node: Node, group: CallbackGroup) -> None:
        self._node, self._group = node, group
        self._lock = threading.Lock()  # the clients and the read ahead, which concurrent goals' checks share
        self._clients: dict[str, Client] = {}  # list_controllers service name -> its client
        self._ahead: tuple[str, Future, float] | None = None  # a read started for a controller, not yet taken, when

    def ahead(self, controller: str, wait_s: float) -> None:
        """Start asking for ``controller``'s state now, unless a read of it started so within FRESH_S is not taken
        yet: the goal's first inference (or its parameter read) runs meanwhile, and ``refusal`` takes the answer."""
        with self._lock:
            if self._fresh(controller):
                return
            replaced = self._ahead
            self._ahead = controller, self._node.executor.create_task(self.state, controller, wait_s), time.monotonic()
        if replaced is not None:
            replaced[1].cancel()

    def _fresh(self, controller: str) -> bool:
        """A read of ``controller`` started ahead within FRESH_S waits to be taken. Call with the lock held."""
        return self._ahead is not None and self._ahead[0] == controller and \
            time.monotonic() - self._ahead[2] <= FRESH_S  # fmt: skip

    async def refusal(self, controller: str, wait_s: float, consequence: str) -> tuple[str, str]:
        """(why a goal is refused: ``controller`` is not active, as ``inactive_reason`` says with ``consequence``;
        why its state was not read) within ``wait_s``, each '' where there is nothing to say. Takes the read started
        ``ahead`` for it, else starts one."""
        with self._lock:
            fresh, taken, self._ahead = self._fresh(controller), self._ahead, None
        if taken is not None and not fresh:
            taken[1].cancel()
        task = taken[1] if fresh else self._node.executor.create_task(self.state, controller, wait_s)
        if not task.done():
            await wait(self._node, task, wait_s)
        if not task.done() or task.exception() is not None:
            task.cancel()
            return "", "its controller manager was not read within answer_wait_s"
        state, manager, unread = task.result()
        return ("" if state in ("", ACTIVE) else inactive_reason(controller, state, manager, consequence)), unread

    def managers(self, controller: str) -> list[str]:
        """The list_controllers services of the managers in ``controller``'s namespace, sorted, each with a client
        made; clients of managers gone are dropped."""
        namespace = controller.rsplit("/", 1)[0] + "/"
        depth = namespace.count("/") + 1
        services = sorted(name for name, types in self._node.get_service_names_and_types()
                          if LIST_TYPE in types and name.startswith(namespace) and name.endswith(SUFFIX)
                          and name.count("/") == depth)  # fmt: skip
        with self._lock:
            for service in [s for s in self._clients if s not in services]:  # a manager gone, or renamed
                self._node.destroy_client(self._clients.pop(service))
            for service in services:
                if service not in self._clients:
                    self._clients[service] = self._node.create_client(ListControllers, service,
                                                                      callback_group=self._group)  # fmt: skip
        return services

    async def state(self, controller: str, wait_s: float) -> tuple[str, str, str]:
        """(``controller``'s state as a manager in its namespace lists it: 'active', 'inactive', 'unconfigured' or
        'finalized'; that manager's node; why no state was read) within ``wait_s`` in all. The state is '' where no
        manager lists the controller (why is then '' too: not ros2_control's, not judged) or one that did not answer
        might (why says so)."""
        deadline = time.monotonic() + wait_s
        name, unanswered = controller.rsplit("/", 1)[-1], []
        for service in self.managers(controller):
            with self._lock:
                client = self._clients.get(service)
            if client is None:  # dropped meanwhile by another goal's look at the graph
                continue
            try:
                listed = await self._ask(client, deadline)
            except InvalidHandle:  # destroyed meanwhile: its manager went
                continue
            manager = service[: -len(SUFFIX)]
            if listed is None:  # another manager may list it yet
                unanswered.append(manager)
            elif name in listed:
                return listed[name], manager, ""
        if unanswered:
            return "", "", f"{', '.join(unanswered)} did not answer list_controllers within answer_wait_s"
        return "", "", ""

    async def _ask(self, client: Client, deadline: float) -> dict[str, str] | None:
        """Every controller's state the manager at ``client`` lists (None: no answer before ``deadline``)."""
        while not client.service_is_ready():
            if time.monotonic() >= deadline:
                return None
            await wait(self._node, None, POLL_S)
        for rounds_left in range(ROUNDS, 0, -1):
            future = client.call_async(ListControllers.Request())
            round_end = time.monotonic() + max(deadline - time.monotonic(), 0.0) / rounds_left
            done, response = await wait(self._node, future, max(round_end - time.monotonic(), 0.0))
            if done:
                return {listed.name: listed.state for listed in response.controller}
            client.remove_pending_request(future)  # an answer after this is dropped, not kept
        return None

    def destroy(self) -> None:
        with self._lock:
            if self._ahead is not None:
                self._ahead[1].cancel()
                self._ahead = None
            for client in self._clients.values():
                self._node.destroy_client(client)
            self._clients.clear()
