"""A gripper on its own controller, as ros2_control arms run one: a joint_trajectory_controller refuses a trajectory
naming a joint it does not own, so each gripper dimension of a chunk goes to its jaw's own action server
(`gripper_action`; one per jaw of a bimanual robot: `gripper_actions`) instead: `control_msgs/GripperCommand`
(GripperActionController) or, with `gripper_action_type`, `control_msgs/ParallelGripperCommand`
(parallel_gripper_controllers: Jazzy on, the only one from Kilted).

The gripper follows the arm's plan: every control period the instruction node hands it the gripper's planned position
one `send_lead_s` ahead (clamped to the same position limits as every target; its speed is the controller's), and a goal
goes out only when that position moved more than `gripper_deadband` from the last one sent, so a steady grip sends
nothing; the plan's last position goes out whatever the deadband, so the jaw ends where the plan does. A goal that ends
without reaching its position is normal for a gripper (it stalls on the object it holds) and is only logged. What the
goal's outcome needs of the jaw is kept per instruction goal (``begin``, ``control.arm.jaw_answers``): goals refused in
a row (a controller that refuses one refuses the next: the instruction node ends the goal at ``max_missed_chunks``), how
long one of ours stood with the controller saying nothing of it (a deactivated GripperActionController takes goals and
ends none), where it last stalled a goal below and one above where the jaw stopped (a jaw whose motors are off stalls
both ways at one place, one holding something one way only), and, from the jaw's readings, how long our goals asked a
jaw that stayed put away above and below it (``stuck``: goals replaced faster than the controller's stall_timeout are
never said stalled). A hold sends nothing more (a position decided before it is dropped) but cancels nothing: a
GripperActionController answers a cancel by commanding the jaw's measured position at its default effort, which takes
the squeeze off whatever the jaw holds, so the last goal keeps its grip.
"""

import math
import threading
import time

from action_msgs.msg import GoalStatus
from control_msgs.action import GripperCommand
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.control.arm.jaw_answers import JawAnswers
from oxygen_ros.nodes import gripper_actions
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.controller_activity import FRESH_S, GRIPPER_INACTIVE, ControllerActivity
from oxygen_ros.nodes.controller_params import ControllerParams
from oxygen_ros.nodes.future_wait import wait

POLL_S = 0.1
PARAMETERS = {  # (default, description), read once
    "gripper_action": ("gripper_controller/gripper_cmd", "the action server of the joint gripper_joint_names names "
                       "(a GripperActionController; two jaws: gripper_actions)"),  # fmt: skip
    "gripper_action_type": ("GripperCommand", gripper_actions.DESCRIPTION),
    "gripper_max_effort": (0.0, "max_effort of each GripperCommand goal (a ParallelGripperCommand goal's effort; 0 "
                           "= none sent), N: an effort-interface GripperActionController clamps its command to it "
                           "(0: the jaw would not move, so a GripperCommand gripper is refused without one); a "
                           "position one passes it on where it has an effort command interface"),  # fmt: skip
    "gripper_deadband": (0.005, "a gripper goal goes out only when its position moved this far from the last one "
                         "sent (rad or m; the plan's last position goes out all the same)"),  # fmt: skip
    "gripper_stall_timeout": (1.0, "the gripper controller's stall_timeout, s (GripperActionController's default): "
                              "a goal of ours it keeps a second longer than this without saying reached or stalled, "
                              "its jaw never moving, is taken for a controller switched off"),  # fmt: skip
}
RANGES = {"gripper_max_effort": (0.0, 1e4), "gripper_deadband": (0.0, 1.0), "gripper_stall_timeout": (0.0, 60.0)}
ANSWER_MARGIN_S = 1.0  # past the controller's stall_timeout: its word on a still jaw is due by then


class GripperIO:
    """The controller of the jaw joint ``name``, at the action server ``action``."""

    def __init__(self, node: Node, settings: dict, name: str, action: str, group: CallbackGroup) -> None:
        self._node, self.name = node, name
        self._effort, self._deadband = settings["gripper_max_effort"], settings["gripper_deadband"]
        self._lock = threading.Lock()  # the clock thread commands, the executor's callbacks answer
        self._sent: float | None = None  # the last position sent since the last hold
        self._newest = b""  # the id of our newest accepted goal
        self._holds = 0
        self._answers = JawAnswers()
        self._silent_s = settings["gripper_stall_timeout"] + ANSWER_MARGIN_S
        self.target = node.resolve_topic_name(action)
        self._action = gripper_actions.action_type(settings["gripper_action_type"], "gripper_action_type")
        if self._action is GripperCommand and not self._effort > 0:
            raise ValueError("parameter gripper_max_effort must be above 0 for GripperCommand goals: an "
                             "effort-interface GripperActionController clamps the jaw's effort to it (0: it never "
                             "moves), a position one passes it on where it has an effort interface; set the jaw's "
                             "grip, N")
        self._client = ActionClient(node, self._action, action, callback_group=group)
        self._serving = ControllerParams(node, self.target, False, group)  # who serves it (its parameters unread)
        self._activity = ControllerActivity(node, group)
        self._unread = ""  # why the manager's word was last not read (warned once)
        self._silence: tuple[Future, str] | None = None  # a read while a goal is unanswered: its task, of which
        self._silence_asked = -math.inf  # when it was started (monotonic s)
        self._said: tuple[str, str, str] | None = None  # (controller, state, manager) the last answered one found

    async def ready(self, wait_s: float) -> bool:
        """Whether the gripper's action server is there, waiting up to ``wait_s``."""
        waited = 0.0
        while not self._client.server_is_ready():
            if waited >= wait_s:
                return False
            await wait(self._node, None, POLL_S)
            waited += POLL_S
        return True

    def check_ahead(self, wait_s: float) -> None:
        """Start asking the jaw controller's manager whether it is active (``ControllerActivity.ahead``), for
        ``inactive`` to find answered."""
        serving = self._serving.controllers()
        if len(serving) == 1:
            self._activity.ahead(serving[0], wait_s)

    async def inactive(self, wait_s: float) -> str:
        """Why the jaw's controller plays none of our goals: its controller manager lists it as not active ('' = it
        is active, no manager says, or several nodes serve the action: ``controller_activity``), within ``wait_s``;
        a manager that did not answer is warned of once."""
        serving = self._serving.controllers()
        if len(serving) != 1:
            return ""
        wrong, unread = await self._activity.refusal(serving[0], wait_s, GRIPPER_INACTIVE)
        if unread and unread != self._unread:
            self._node.get_logger().warning(f"cannot tell whether {serving[0]} is active: {unread}")
        self._unread = unread
        return wrong

    def ask_while_silent(self, wait_s: float) -> None:
        """A goal of ours stands unanswered past the stall timeout: read what the controller's manager says of it,
        again once the last read is answered and FRESH_S old (``listed``; this instruction goal's own reads, apart
        from the read ahead of a goal's check). The clock thread."""
        now = time.monotonic()
        with self._lock:
            if (self._silence is not None and not self._silence[0].done()) or now - self._silence_asked <= FRESH_S:
                return
            self._silence_asked = now
            self._take_silence_read()
        serving = self._serving.controllers()
        if len(serving) == 1:
            task = self._node.executor.create_task(self._activity.state, serving[0], wait_s)
            with self._lock:
                self._silence = task, serving[0]

    def _take_silence_read(self) -> None:
        """Keep what the silence read found, once answered (``_said``). Call with the lock held."""
        reading = self._silence
        if reading is not None and reading[0].done() and not reading[0].cancelled() and reading[0].exception() is None:
            state, manager, _ = reading[0].result()
            if state:  # '': no manager lists it, or none answered
                self._said = reading[1], state, manager

    def listed(self) -> tuple[str, str, str] | None:
        """(the jaw's controller, the state its manager lists it in, that manager) as the newest answered read of
        this instruction goal's silence found it (``ask_while_silent``); None when none did."""
        with self._lock:
            self._take_silence_read()
            return self._said

    def begin(self) -> None:
        """A new instruction goal: what its outcome reads (``refused``, ``unanswered_s``, ``listed``) starts afresh."""
        with self._lock:
            self._answers.begin()
            if self._silence is not None:
                self._silence[0].cancel()
            self._silence, self._silence_asked, self._said = None, -math.inf, None

    @property
    def refused(self) -> int:
        """This instruction goal's gripper goals refused in a row."""
        with self._lock:
            return self._answers.refused

    def unanswered_s(self) -> float:
        """The longest a gripper goal of this instruction goal stood with the controller saying nothing of it, when
        over ``gripper_stall_timeout`` + ANSWER_MARGIN_S and it said of none that it reached or stalled; else 0."""
        now = self._now()
        with self._lock:
            return self._answers.unanswered_s(now, self._silent_s)

    def jammed(self, floor: float) -> tuple[float, float, float] | None:
        """(where, below, above): where the controller stalled this instruction goal's newest gripper goals below and
        above the jaw, and how far short, when each is over ``floor`` and the jaw stopped within ``floor`` of the
        same place (it moves neither way there: its motors off); else None."""
        with self._lock:
            return self._answers.jammed(floor)

    def observe(self, position: float, at: float, floor: float) -> None:
        """The jaw read at ``position`` at node-clock time ``at`` (every control period); ``floor``: less is no
        motion of the jaw."""
        with self._lock:
            self._answers.on_measured(position, at, floor)

    def stuck(self) -> tuple[float, float, float] | None:
        """(where, above_s, below_s) when the jaw stood at one place while this instruction goal's newest gripper
        goal asked it away above and below it, each for over ``gripper_stall_timeout`` + ANSWER_MARGIN_S (goals
        replaced faster than the controller's stall_timeout never stall: a switched-off controller or a jaw whose
        motors are off says nothing of them); else None."""
        with self._lock:
            return self._answers.stuck(self._silent_s)

    def _now(self) -> float:
        return self._node.get_clock().now().nanoseconds * 1e-9

    @property
    def holds(self) -> int:
        """Holds so far: read before deciding on a position, handed to ``command``."""
        with self._lock:
            return self._holds

    def command(self, position: float, holds: int, settled: bool = False) -> None:
        """Send ``position`` unless it is within ``gripper_deadband`` of the last one sent (``settled``, the plan's
        last: unless it is the last one sent, so the jaw ends where the plan does), or a hold came since ``holds``
        was read (it was decided on a plan the hold stopped). Any thread."""
        goal = gripper_actions.goal(self._action, self.name, position, self._effort)
        with self._lock:  # sent under it: a hold comes before the goal is decided or after it went, never between
            band = 0.0 if settled else self._deadband
            if holds != self._holds or (self._sent is not None and abs(position - self._sent) <= band):
                return
            self._sent = position
            generation = self._answers.generation
            sending = self._client.send_goal_async(goal)
        # a send that failed (the server gone as it went) is a refusal: sent again at the next period, and counted
        sending.add_done_callback(
            lambda f: self._on_accepted(f.result() if f.exception() is None else None, generation, position))

    def _on_accepted(self, handle, generation: int, position: float) -> None:
        if handle is None or not handle.accepted:
            with self._lock:
                self._sent = None  # sent again at the next period, not only once the plan moves past the deadband
                self._answers.on_refused(generation)
            self._node.get_logger().warning(f"{self.target} refused a gripper goal", throttle_duration_sec=5.0)
            return
        key, now = bytes(handle.goal_id.uuid), self._now()
        with self._lock:
            self._answers.on_taken(generation, key, now, position)
            self._newest = key  # a hold since it was sent leaves it to finish too: the jaw's last command
        handle.get_result_async().add_done_callback(lambda f: self._on_result(key, f.result(), generation, position))

    def _on_result(self, key: bytes, response, generation: int, position: float) -> None:
        result, now = response.result, self._now()
        where = gripper_actions.result_position(self._action, result)
        stall = (where, position) if result.stalled else None
        with self._lock:
            newest = key == self._newest  # an older goal ends because ours preempted it
            self._answers.on_ended(generation, key, bool(result.reached_goal or result.stalled), now, stall)
        if newest and response.status == GoalStatus.STATUS_ABORTED:
            self._node.get_logger().warning(f"{self.target} stopped the gripper at {where:.3f} (stalled: "
                                            f"{result.stalled})", throttle_duration_sec=5.0)  # fmt: skip

    def hold(self) -> None:
        """Send no more gripper goals for the plan that was held (the next plan's are sent again); the last goal is
        left to finish, keeping its grip (see the module's docstring)."""
        with self._lock:
            self._holds += 1
            self._sent = None

    def destroy(self) -> None:
        with self._lock:
            if self._silence is not None:
                self._silence[0].cancel()
        self._client.destroy()
        self._activity.destroy()
