"""Handing a /navigate goal to nav2 (`navigate_to_pose`, nav2_msgs/NavigateToPose): nav2 plans, avoids obstacles
with its costmaps and drives; navigation_node relays its feedback (pose, elapsed, remaining) and its result, and
cancels nav2's goal when its own goal ends first (cancelled, preempted, past max_duration_s, out of reach, nav2 out of
sight), asking again until nav2 confirms (``CANCEL_TRIES``): nav2 driving a goal nobody watches is the failure to
avoid, so the goal's result waits for the answer and names an unconfirmed cancel.

Every number nav2 sends is checked before it is relayed: a feedback with a non-finite pose or distance or a
malformed duration is dropped (logged), and the result's text is cut to ``bounds.TEXT_CHARS``."""

import math
import threading
from collections.abc import Callable

from action_msgs.msg import GoalStatus
from action_msgs.srv import CancelGoal
from builtin_interfaces.msg import Duration
from geometry_msgs.msg import PoseStamped
from nav2_msgs.action import NavigateToPose
from rclpy.action.client import ClientGoalHandle
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.task import Future

from oxygen_ros.errors import ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes.action_client import ActionClient, cancel_if_accepted
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.goal_run import GoalRun

MODES = ("auto", "always", "never")  # navigation_node's nav2 parameter
POLL_S = 0.1  # how often a wait for the server looks again
NS = 1_000_000_000
CANCEL_TRIES = 3  # cancel requests sent before an unanswered or refused cancel is reported


def duration(seconds: float) -> Duration:
    """A duration message for ``seconds``, clamped to [0, bounds.GOAL_DURATION_S] (NaN = 0)."""
    seconds = min(max(seconds, 0.0), bounds.GOAL_DURATION_S) if math.isfinite(seconds) else 0.0
    ns = round(seconds * NS)
    return Duration(sec=ns // NS, nanosec=ns % NS)


def checked_feedback(msg: NavigateToPose.Feedback) -> str:
    """'' when every number of nav2's feedback can be relayed, else what is wrong with it."""
    pose = msg.current_pose.pose
    values = [getattr(pose.position, a) for a in "xyz"] + [getattr(pose.orientation, a) for a in "xyzw"]
    if not all(math.isfinite(v) for v in values + [msg.distance_remaining]):
        return f"non-finite pose or distance ({values}, {msg.distance_remaining})"
    for name in ("navigation_time", "estimated_time_remaining"):
        value = getattr(msg, name)
        if value.sec < 0 or value.nanosec >= NS:
            return f"{name} {value.sec} s {value.nanosec} ns is not a duration"
    if len(msg.current_pose.header.frame_id) > bounds.ID_CHARS:
        return "current_pose frame_id is too long"
    return ""


def outcome(status: int, result: NavigateToPose.Result) -> tuple[ErrorCode | None, str]:
    """Our ending for nav2's terminal status and result: success, CANCELLED, or its error as ours. The result's
    shape differs by distribution (Humble: no error code; Jazzy: ``error_code`` without ``error_msg``;
    Kilted: both), so each field is read only where the server's type has it."""
    if status == GoalStatus.STATUS_SUCCEEDED:
        return None, "nav2 reached the target"
    if status == GoalStatus.STATUS_CANCELED:
        return ErrorCode.CANCELLED, "nav2 cancelled the goal"
    error = getattr(result, "error_code", None)
    if error is None:
        return ErrorCode.ABORTED, "nav2 gave up (its result carries no error code)"
    code = {getattr(result, name, None): ours for name, ours in (("TF_ERROR", ErrorCode.TF_ERROR),
                                                                 ("TIMEOUT", ErrorCode.DEADLINE_EXCEEDED))}  # fmt: skip
    code.pop(None, None)
    why = str(getattr(result, "error_msg", ""))[: bounds.TEXT_CHARS]
    return code.get(error, ErrorCode.ABORTED), f"nav2 gave up (error_code {error}){': ' + why if why else ''}"


def cancel_confirmed(response: CancelGoal.Response) -> bool:
    """Whether nav2 no longer drives the goal a cancel was for: it is cancelling it (listed in goals_canceling: an
    rclpy server answers a refusal ERROR_NONE with none listed), or the goal is unknown to it or already over."""
    if response.return_code == CancelGoal.Response.ERROR_NONE:
        return len(response.goals_canceling) > 0
    over = (CancelGoal.Response.ERROR_UNKNOWN_GOAL_ID, CancelGoal.Response.ERROR_GOAL_TERMINATED)
    return response.return_code in over


def _first_of(*futures: Future) -> Future:
    """A future done (with None) once any of ``futures`` is: their callbacks may run on different threads."""
    first, lock = Future(), threading.Lock()

    def done(_: Future) -> None:
        with lock:
            if not first.done():
                first.set_result(None)

    for future in futures:
        future.add_done_callback(done)
    return first


class Nav2Handoff:
    def __init__(self, node: Node, action_name: str, group: CallbackGroup) -> None:
        self._node = node
        self.name = node.resolve_topic_name(action_name)  # the full name, as messages quote it
        self.client = ActionClient(node, NavigateToPose, action_name, callback_group=group)
        self.seen = False  # a server was there once: a later wait for it is a wait for a restart

    async def ready(self, wait_s: float) -> bool:
        """Whether a nav2 server is there, waiting up to ``wait_s`` for it (0 = only look)."""
        waited = 0.0
        while not self.client.server_is_ready():
            if waited >= wait_s:
                return False
            await wait(self._node, None, POLL_S)
            waited += POLL_S
        self.seen = True
        return True

    async def drive(self, run: GoalRun, target: PoseStamped, relay: Callable[[NavigateToPose.Feedback], None],
                    answer_s: float, taken: Callable[[], None] = lambda: None) -> str:  # fmt: skip
        """Send ``target`` to nav2 and end ``run`` with its result; ``relay`` gets each checked feedback, ``taken()``
        runs once nav2 accepted the goal (it replaced any goal nav2 drove). Returns '' or, when nav2 may still be
        driving a goal it took (a cancel it never confirmed, a handover that failed), what went wrong."""
        try:
            return await self._drive(run, target, relay, answer_s, taken)
        except Exception as exc:  # rclpy's calls raise synchronously (a destroyed client, a broken handle)
            why = f"handing the goal to nav2 failed ({type(exc).__name__}: {exc})"
            run.end(ErrorCode.UNAVAILABLE, why)
            self._node.get_logger().error(f"{why}: nav2 may still drive")
            return f"{why}: nav2 may still drive"

    async def _drive(self, run: GoalRun, target: PoseStamped, relay: Callable[[NavigateToPose.Feedback], None],
                     answer_s: float, taken: Callable[[], None]) -> str:  # fmt: skip
        if not run.running:  # ended before its drive began (a newer goal, a shutdown): nav2 never hears of it
            return ""
        goal = NavigateToPose.Goal(pose=target)
        sending = self.client.send_goal_async(goal, lambda m: self._relay(m, relay))
        sent, handle = await wait(self._node, sending, answer_s)
        if not sent:  # nav2 may still accept it: then it must not drive a goal nobody watches
            run.end(ErrorCode.UNAVAILABLE, f"nav2 did not answer the goal within {answer_s:g} s")
            late, handle = await wait(self._node, sending, answer_s)  # its answer, to cancel what it took
            if late and handle.accepted:
                taken()
                return await self._cancel(handle, answer_s)
            if late:
                return ""
            sending.add_done_callback(cancel_if_accepted)  # later still: cancelled then, once
            return f"nav2 had not answered the goal after {2 * answer_s:g} s (a goal it takes later is cancelled then)"
        if not handle.accepted:
            run.end(ErrorCode.FAILED_PRECONDITION, "nav2 rejected the goal (is it active and localized?)")
            return ""
        taken()
        result = handle.get_result_async()
        vanished = False  # what gave up the wait, as it was seen then (the graph may change again)

        def gone() -> bool:
            nonlocal vanished
            vanished = not self.client.server_is_ready()
            return vanished

        await wait(self._node, _first_of(result, run.ended), bounds.GOAL_DURATION_S, give_up=gone)
        if result.done():  # nav2's goal reached a terminal state: nothing of it left to cancel
            if run.running:
                run.end(*outcome(result.result().status, result.result().result))
            return ""
        if vanished:  # its result would never come: not a deadline (a discovery glitch may hide a live nav2)
            run.end(ErrorCode.UNAVAILABLE, f"nav2's {self.name} went away during the goal")
        else:
            run.end(ErrorCode.DEADLINE_EXCEEDED, f"nav2 gave no result within {bounds.GOAL_DURATION_S:g} s")
        return await self._cancel(handle, answer_s)

    async def _cancel(self, handle: ClientGoalHandle, answer_s: float) -> str:
        """Cancel nav2's goal, asking up to CANCEL_TRIES times (a lost request, a busy server); '' once nav2
        confirms, else the problem, logged as an error: the base may still move."""
        why = ""
        for _ in range(CANCEL_TRIES):
            answered, response = await wait(self._node, handle.cancel_goal_async(), answer_s)
            if answered and cancel_confirmed(response):
                return ""
            why = f"refused, return code {response.return_code}" if answered else f"no answer within {answer_s:g} s"
        problem = f"nav2 did not confirm the cancel of its goal after {CANCEL_TRIES} requests ({why}): it may still " \
                  "drive the base"  # fmt: skip
        self._node.get_logger().error(problem)
        return problem

    def _relay(self, message: NavigateToPose.Impl.FeedbackMessage, relay: Callable) -> None:
        problem = checked_feedback(message.feedback)
        if problem:
            self._node.get_logger().warning(f"ignoring nav2 feedback: {problem}", throttle_duration_sec=5.0)
            return
        relay(message.feedback)

    def destroy(self) -> None:
        self.client.destroy()  # rclpy's destroy_node leaves action clients alive (see InferClient.destroy)
