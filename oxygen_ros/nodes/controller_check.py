"""Whether the arm's controller plays our trajectories as the instruction node checks them, by the controller's own
word: its parameters, read before each goal moves the arm (``controller_params``, the read started while the model
computes the goal's first chunk: ``read_ahead``; ``control.arm.controller_setup`` says where it starts a trajectory
and whether it wraps each freely turning joint), and, where it starts from its command, that command as it publishes
it (``controller_command``); and that it is active, by its controller manager's word (``controller_activity``). What
cannot be read is taken on the user's word (``controller_starts_from``), with a warning once for each reason in turn.
"""

import time
from collections.abc import Callable

import numpy as np

from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.control.arm.controller_setup import asked, disagreement, setup_of
from oxygen_ros.nodes.controller_activity import JTC_INACTIVE, ControllerActivity
from oxygen_ros.nodes.controller_command import ControllerCommand
from oxygen_ros.nodes.controller_params import ControllerParams
from oxygen_ros.nodes.future_wait import wait


class ControllerCheck:
    """The controller serving ``target`` (a resolved action name, or with ``on_topic`` a topic), checked against
    ``claimed`` (controller_starts_from); ``clock``: node-clock seconds."""

    def __init__(self, node: Node, target: str, on_topic: bool, claimed: str, group: CallbackGroup,
                 clock: Callable[[], float]) -> None:  # fmt: skip
        self._node, self._target, self._claimed = node, target, claimed
        self._params = ControllerParams(node, target, on_topic, group)
        self._activity = ControllerActivity(node, group)
        # its command, where it starts a trajectory while no plan of ours plays: read only where that is needed
        self.command = ControllerCommand(node, clock) if claimed == "commanded" else None
        self._warned: dict[str, str] = {}  # the last text of each warning
        self._ahead: Future | None = None  # a read started ahead of the goal's check (``read_ahead``)

    def command_of(self, joints: tuple[str, ...], timeout_s: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Where the controller commands ``joints`` now and how fast (``ControllerCommand.now``); None when it did not
        say, or does not start from its command (its parameters say so: nothing is followed)."""
        return self.command.now(joints, timeout_s) if self.command is not None else None

    def destroy(self) -> None:
        if self._ahead is not None:
            self._ahead.cancel()  # (a goal preparing as the node goes)
        if self.command is not None:
            self.command.follow("")
        self._activity.destroy()

    def read_ahead(self, joints: tuple[str, ...], turning_joints: list[str], wait_s: float) -> None:
        """Start reading what ``misconfigured`` asks of the controller now, so that it finds the answer read: the
        goal's first inference and the read overlap (a first goal, or one after the controller was reloaded, would
        otherwise wait for the read between its first chunk's answer and the arm); its manager is asked now too
        (``ControllerActivity.ahead``). Any thread the executor runs."""
        if self._ahead is None or self._ahead.done():
            self._ahead = self._node.executor.create_task(self._params.read, asked(joints, turning_joints), wait_s)
        serving = self._params.controllers()
        if len(serving) == 1:
            self._activity.ahead(serving[0], wait_s)

    def controllers(self) -> list[str]:
        return self._params.controllers()

    async def misconfigured(self, joints: tuple[str, ...], turning_joints: list[str], velocity_reported: bool,
                            wait_s: float, accelerated: list[str]) -> str:  # fmt: skip
        """Why the controller plays trajectories of ``joints`` otherwise than they are checked, or none at all (its
        manager lists it as not active) ('' = it does not, or it cannot tell); ``velocity_reported``: the driver
        reports the joints' velocity; ``accelerated``: the joints with an acceleration limit. Waits up to ``wait_s``
        in all, first for a read ahead still under way (whose answer it then finds kept); its manager is asked
        meanwhile."""
        deadline = time.monotonic() + wait_s
        serving = self._params.controllers()
        if len(serving) == 1:
            self._activity.ahead(serving[0], wait_s)
        if self._ahead is not None and not self._ahead.done():
            await wait(self._node, self._ahead, wait_s)
        left = max(deadline - time.monotonic(), 0.0)
        controller, values, why = await self._params.read(asked(joints, turning_joints), left)
        if controller:
            wrong, unread = await self._activity.refusal(controller, max(deadline - time.monotonic(), 0.0),
                                                         JTC_INACTIVE)  # fmt: skip
            if wrong:
                return wrong
            if unread:
                self._warn_once("activity", f"cannot tell whether {controller} is active: {unread}")
            else:
                self._warned.pop("activity", None)
        setup = setup_of(values, joints, turning_joints) if values is not None else None
        if self.command is not None:
            self.command.follow(f"{controller}/controller_state" if setup is not None and setup.from_command else "")
        if setup is None:
            self._warn_once("unread", f"cannot read where {controller or 'the controller of ' + self._target} "
                            f"starts a trajectory ({why or 'it has no joint_trajectory_controller parameters'}): "
                            f"taking controller_starts_from: {self._claimed} as said")  # fmt: skip
            return ""
        self._warned.pop("unread", None)
        if self.command is not None and self.command.topic and not self.command.heard():
            self._warn_once("silent", f"nothing publishes {self.command.topic}: a chunk with no plan of ours playing "
                            "is checked from the measured state only")  # fmt: skip
        return disagreement(self._claimed, setup, controller, velocity_reported, accelerated)

    def _warn_once(self, kind: str, text: str) -> None:
        if self._warned.get(kind) != text:
            self._warned[kind] = text
            self._node.get_logger().warning(text)
