"""One controller that plays the arm's trajectories, as ros2_control runs it: a joint_trajectory_controller's
FollowJointTrajectory action (MoveIt's or a vendor's driver's), or its trajectory_msgs/JointTrajectory topic (its
fire-and-forget input; a subscriber that only records or shows it, ``controller_params.OBSERVERS``, is no controller).
It plays the action joints ``columns`` name (a robot with an arm controller per arm has one of these per arm).

A new goal of ours preempts the controller's previous one (JTC ends that goal CANCELED, INVALID_GOAL, "Current goal
cancelled due to new incoming action.": expected, not a fault); any other end of our newest goal is a fault the stream
ends on (``Fault``). Hold = one point at rest just past where the plan has the arm (or from where it is measured),
braking within the limits from the state the controller starts it from, replacing the trajectory playing (on the
action or the topic; a cancel would make the controller hold the measured position at once, a jolt at speed).
Before a goal moves the arm, the controller's own parameters are read (``controller_check``): a
joint_trajectory_controller that starts a trajectory elsewhere than `controller_starts_from` says, compares a freely
turning joint without wraparound, or does not play exactly the joints sent it (its `joints`), refuses the goal.
Joint states and limits come from ``joint_readings``.
"""

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from action_msgs.msg import GoalStatus
from control_msgs.action import FollowJointTrajectory
from rclpy.callback_groups import CallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.task import Future
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros import bounds
from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.control.arm.turns import difference, turning
from oxygen_ros.errors import EngineError
from oxygen_ros.nodes.action_client import ActionClient
from oxygen_ros.nodes.controller_check import ControllerCheck
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.joint_readings import JointReadings
from oxygen_ros.nodes.qos import STOP_ACK_S
from oxygen_ros.nodes.stamps import duration_of

HOLD_MIN_S = 0.1  # the soonest a hold's point is due: the controller decelerates over at least this
MIN_STOP_S = 0.02  # a stop squeezed against a position limit still takes this long
ANSWERS_KEPT = 8  # the controller's latest answer times whose median is a stop's lead (one slow answer moves nothing)


@dataclass(frozen=True)
class Fault:
    """Why the controller ended our newest goal when we did not ask it to. ``taken_over``: it ended CANCELED, as a
    joint_trajectory_controller ends a goal another client's goal preempted, or a goal someone else cancelled, or
    one it dropped on deactivation: the controller holds the arm or plays the other client's trajectory, and a stop
    of ours would preempt that (ABORTED, for a tolerance or an error, it holds the arm where it is)."""

    why: str
    taken_over: bool
    target: str  # the controller's


def _braking_times(gap: np.ndarray, moving: np.ndarray, start_velocity: np.ndarray,
                   acceleration: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per joint, the shortest T over which the controller's cubic, from the measured state (``gap`` from where the
    stop starts, moving at ``start_velocity``) to rest at ``moving T / 2`` past it, keeps within ``acceleration``:
    its acceleration is linear in time, 6 gap / T^2 - (4 v0 - 3 v) / T at the start and -6 gap / T^2 - (3 v - 2 v0)
    / T at the end, so A T^2 - w T - 6 gap >= 0 with w the larger velocity term (|v| when v0 = v: braking at A
    from speed v takes v / A)."""
    w = np.maximum(np.abs(4 * start_velocity - 3 * moving), np.abs(3 * moving - 2 * start_velocity))
    with np.errstate(invalid="ignore", divide="ignore"):
        times = (w + np.sqrt(w * w + 24 * acceleration * np.abs(gap))) / (2 * acceleration)
    return np.where(np.isfinite(acceleration), times, 0.0)


def _or_rest(velocity: np.ndarray | None, columns: list[int]) -> np.ndarray:
    return np.zeros(len(columns)) if velocity is None else np.nan_to_num(velocity[columns], nan=0.0)


def _goal_id(handle) -> bytes:
    return bytes(handle.goal_id.uuid)


@dataclass
class Sent:
    """A trajectory on its way to the controller's action (``dispatch``): its answer, the holds counted when it went,
    ``handled``, done once its answer is handled (a goal's result waits for that), and when the answer came (node
    clock, s; inf until it does): the controller starts the trajectory then."""

    future: Future
    holds: int
    handled: Future
    answered_at: float = math.inf


class TrajectoryController:
    """The controller at ``action`` (an action server, or with ``on_topic`` a topic), playing the action joints
    ``columns`` (indices into ``readings.names``); ``tolerances``: per action joint."""

    def __init__(self, node: Node, settings: dict, readings: JointReadings, columns: list[int], action: str,
                 on_topic: bool, tolerances: dict[str, np.ndarray], group: CallbackGroup) -> None:  # fmt: skip
        self._node, self._settings, self._readings = node, settings, readings
        self.columns, self._tolerances = columns, tolerances
        self.arm_names = tuple(readings.names[i] for i in columns)  # what the trajectory names
        self._lock = threading.Lock()  # what the executor's callbacks and the goal's clock thread share
        self._fault: Fault | None = None  # why the controller ended our newest goal when we did not ask it to
        self._newest = None  # the handle of our newest accepted goal (the one the controller plays)
        self._live: dict[bytes, object] = {}  # our accepted goals not ended yet, by goal id
        self._cancelled: set[bytes] = set()  # of those, the ones we ended (cancelled, or replaced by a stop)
        self._stops: dict[bytes, int] = {}  # of those, our stop trajectories (``hold``): the count of sends each was
        self._stopping = False  # a stop was sent and no trajectory since: a hold now has nothing to stop
        self._holds = 0  # counts holds: a goal accepted after a hold that followed its sending is stopped at once
        self._sends = 0  # counts what went to the controller (trajectories and stops): what is newest
        # counting a send and sending it are one step (the controller gets them in the order counted: a dispatch and
        # a stop from an executor thread never cross between the two; reentrant: a hold made inside a send, on its
        # thread, goes after it)
        self._ordered = threading.RLock()
        self._taken_at: int | None = None  # ``_sends`` when another client took the controller, until a new goal
        # the newest stop goal's send on the action and our goals it replaces, until a trajectory is sent: a goal's
        # result waits for its answer (``stop_answered``)
        self._stop_sent: tuple[Future, set[bytes]] | None = None
        # our trajectories on their way, each done once the controller's answer is handled: until when a CANCELED
        # end of our newest goal is taken for their preempting it (inf; answer_wait_s past a give-up)
        self._unanswered: dict[Future, float] = {}
        self._answer_times: deque[float] = deque(maxlen=ANSWERS_KEPT)  # s from sending a goal to its acceptance
        self._topic = action if on_topic else ""
        if self._topic:
            self._publisher = node.create_publisher(JointTrajectory, self._topic, 10)
        else:
            self._client = ActionClient(node, FollowJointTrajectory, action, callback_group=group)
        self.target = node.resolve_topic_name(action)
        # its command timed on this node's clock, as the joint states are (``now``, whatever it is)
        self.controller = ControllerCheck(node, self.target, on_topic, settings["controller_starts_from"], group,
                                          lambda: readings.now())  # fmt: skip

    def command_now(self, start: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``start`` / ``velocity`` [len(names)] with the arm joints where the controller commands them now
        (``ControllerCheck.command_of``), where it starts a trajectory while no plan of ours plays; None when it did
        not say, or does not start from its command there."""
        said = self.controller.command_of(self.arm_names, self._settings["input_timeout_s"])
        if said is None:
            return None
        positions, velocities = np.array(start, dtype=np.float64), np.array(velocity, dtype=np.float64)
        positions[self.columns], velocities[self.columns] = said
        return positions, velocities

    def listening(self) -> bool:
        """The action server is there, or on the topic a subscriber that is no observer (``controller_params``)."""
        return self._client.server_is_ready() if not self._topic else bool(self.controller.controllers())

    async def misconfigured(self, limits: list[JointLimit]) -> str:
        """Why the controller, by its own word, plays our trajectories otherwise than they are checked ('' = it
        does not, or cannot tell: ``ControllerCheck``), within ``answer_wait_s``; ``limits``: the action joints',
        which say the joints that turn freely."""
        reported = not self._readings.no_velocity(self.arm_names).all()
        accelerated = [self._readings.names[i] for i in self.columns if math.isfinite(limits[i].acceleration)]
        return await self.controller.misconfigured(self.arm_names, self._turning(limits), reported,
                                                   self._settings["answer_wait_s"], accelerated)  # fmt: skip

    def check_ahead(self) -> None:
        """Start reading what ``misconfigured`` will ask of the controller (``ControllerCheck.read_ahead``), for the
        limits known now (none yet: it reads then)."""
        try:
            limits = self._readings.limits()
        except EngineError:
            return
        self.controller.read_ahead(self.arm_names, self._turning(limits), self._settings["answer_wait_s"])

    def _turning(self, limits: list[JointLimit]) -> list[str]:
        """The trajectory's joints that turn freely (no position limits)."""
        turns = turning(limits)
        return [self._readings.names[i] for i in self.columns if turns[i]]

    def forget_fault(self) -> None:
        """A new goal starts: what ended an earlier one's trajectory is not its fault."""
        with self._lock:
            self._fault, self._taken_at = None, None

    def taken_over(self) -> bool:
        """Whether another client took the controller during this goal (``Fault.taken_over``): nothing more of ours
        is sent to it."""
        with self._lock:
            return self._taken_at is not None

    def take_fault(self) -> Fault | None:
        """Why the controller ended our newest goal since the last call, when we did not ask it to (None: it did
        not)."""
        with self._lock:
            fault, self._fault = self._fault, None
        return fault

    def dispatch(self, safe: SafeTargets) -> Sent | None:
        """Send ``safe`` (its points due ``safe.times`` after the controller takes it) now; its ``Sent`` on the
        action (``taken`` once answered, else ``give_up``), None on the topic (nothing answers). Sent unstamped
        (stamp 0: the controller starts it when it takes it), so a slow delivery or a controller's clock ahead of
        ours delays the plan instead of having the controller sample it mid-segment, a jump. A hold while the goal
        is on its way replaces it with a braking stop as soon as it is accepted, however late that is: no
        trajectory outlives a hold."""
        arm = self.columns
        points = [JointTrajectoryPoint(positions=p[arm].tolist(), velocities=v[arm].tolist(),
                                       time_from_start=duration_of(t))
                  for p, v, t in zip(safe.positions, safe.velocities, safe.times)]  # fmt: skip
        trajectory = JointTrajectory(header=Header(), joint_names=list(self.arm_names), points=points)
        handled = None if self._topic else Future()
        with self._ordered:
            with self._lock:
                before = self._sends, self._stopping, self._stop_sent
                self._sends += 1
                holds, sent_as, self._stopping, self._stop_sent = self._holds, self._sends, False, None
                if handled is not None:  # before it goes: what it preempts may end before it is answered
                    self._unanswered[handled] = math.inf
            if self._topic:
                self._publisher.publish(trajectory)
                return None
            try:
                future = self._send_goal(trajectory)
            except BaseException:  # never sent: as if not tried (an entry left unanswered would hide a takeover's
                with self._lock:  # CANCELED, a count of sends moved on one the takeover's mark no longer meets)
                    self._unanswered.pop(handled, None)
                    self._sends, self._stopping, self._stop_sent = before
                handled.set_result(False)
                raise
        sent = Sent(future, holds, handled)
        future.add_done_callback(lambda f: setattr(sent, "answered_at", self._readings.now()))
        future.add_done_callback(lambda f: self._on_answer(f, holds, sent_as, handled))
        return sent

    def taken(self, start: float, safe: SafeTargets, sent: Sent | None) -> str:
        """'' when the controller took ``sent`` (answered: ``safe``, planned from node-clock time ``start``, point i
        due at ``start + safe.times[i]``), else why not. One taken after its first target was due is refused and
        replaced by a braking stop from where the arm is (a stale plan; a cancel would have the controller hold the
        measured position at once, a jolt)."""
        if sent is None:
            return ""
        if sent.future.exception() is not None:
            return f"the trajectory could not be sent to {self.target} ({sent.future.exception()})"
        if not sent.future.result().accepted:
            return f"{self.target} rejected the trajectory (see the controller's log)"
        with self._lock:
            if self._holds != sent.holds:
                return "the arm was told to hold while the trajectory was on its way"
        # (its time is stamped by another of the answer's callbacks, which may not have run yet: now is later)
        answered_at = sent.answered_at if math.isfinite(sent.answered_at) else self._readings.now()
        late = answered_at - start - float(safe.times[0])
        if late > 0:  # its plan is stale (the arm would be that late on every target): a stop replaces it here, so
            # it never plays on, whatever the caller does next (a hold of its own then finds the arm stopping)
            self.hold(None, self._node.get_logger().warning)
            return (f"{self.target} took the trajectory {late:.3f} s after its first target was due (raise "
                    "send_lead_s for a controller this slow)")  # fmt: skip
        return ""

    def give_up(self, sent: Sent) -> None:
        """``sent``, unanswered, is waited for no longer: a goal's end does not wait for it either (taken after the
        hold that follows, it is stopped at once). Taken a little later all the same, it preempts our newest goal: a
        CANCELED end of that within answer_wait_s is still its doing, not another client's takeover (which would have
        the hold send this controller nothing while it plays)."""
        now = time.monotonic()
        with self._lock:
            self._unanswered = {f: until for f, until in self._unanswered.items() if until > now}  # (never answered)
            if sent.handled in self._unanswered:
                self._unanswered[sent.handled] = now + self._settings["answer_wait_s"]
        if not sent.handled.done():
            sent.handled.set_result(False)

    def _on_answer(self, future: Future, holds: int, sent_as: int, handled: Future) -> None:
        """The controller's answer to our trajectory handled (``_on_accepted``), then ``handled`` done: a goal's
        result waits for it (``stop_answered``)."""
        try:
            self._on_accepted(future.result() if future.exception() is None else None, holds, sent_as)
        finally:
            with self._lock:
                self._unanswered.pop(handled, None)
            if not handled.done():  # (given up on)
                handled.set_result(True)

    def _send_goal(self, trajectory: JointTrajectory) -> Future:
        """``trajectory`` as a goal on the action; its answer, once taken, is timed (``_stop_lead``)."""
        asked = self._readings.now()
        future = self._client.send_goal_async(FollowJointTrajectory.Goal(trajectory=trajectory))
        future.add_done_callback(lambda f: self._time_answer(f, asked))
        return future

    def _time_answer(self, future: Future, asked: float) -> None:
        """The round trip of a goal of ours sent at ``asked`` and taken (``_stop_lead``)."""
        handle = future.result() if future.exception() is None else None
        if handle is not None and handle.accepted:
            answered = max(self._readings.now() - asked, 0.0)  # (a simulated clock gone back)
            with self._lock:
                self._answer_times.append(answered)

    def _stop_lead(self) -> float:
        """How long after it is sent a stop reaches the controller: half the median round trip of its recent
        acceptances of our goals (the request's way; at most answer_wait_s; 0 on the topic, which answers nothing).
        The arm moves on meanwhile; the controller's next update, up to one period later, comes on top."""
        with self._lock:
            times = list(self._answer_times)
        return min(float(np.median(times)) / 2, self._settings["answer_wait_s"]) if times else 0.0

    def _on_accepted(self, handle, holds: int, sent_as: int) -> None:
        """Our trajectory (the ``sent_as``-th thing sent) taken. A hold came while it was on its way: it is ours to
        end (its ending is no fault); whatever was sent after it (the hold's stop, a newer trajectory) replaces it
        in the controller, and if nothing was (the hold could plan no stop), a stop from where the arm is does."""
        if handle is None or not handle.accepted:
            return
        key = _goal_id(handle)
        with self._lock:
            self._live[key] = handle
            self._newest = handle
            stale = self._holds != holds
            if stale:
                self._cancelled.add(key)
            unreplaced = stale and self._sends == sent_as
        handle.get_result_async().add_done_callback(lambda f: self._on_result(handle, f.result()))
        if unreplaced:
            self._send_stop(self._stop_point(None, None, self._node.get_logger().warning), {key})

    def _cancel(self, handle) -> None:
        with self._lock:
            self._cancelled.add(_goal_id(handle))
        handle.cancel_goal_async()

    def _cancel_live(self, keys: set[bytes]) -> None:
        """Cancel those of our goals ``keys`` names that have not ended."""
        with self._lock:
            handles = [self._live[key] for key in keys if key in self._live]
        for handle in handles:
            self._cancel(handle)

    def _on_result(self, handle, response) -> None:
        """Our newest goal ending any way but SUCCEEDED or cancelled by us is a fault: another client preempted
        it, someone cancelled it, or the controller aborted it (tolerances). An older goal ending is our own doing
        (the newest one preempted it). Our braking stop ended CANCELED with nothing of ours sent since is another
        client's goal (or cancel, or the controller's deactivation) taking the arm: a fault too, so that nothing of
        ours preempts theirs (``taken_over``)."""
        key = _goal_id(handle)
        with self._lock:
            self._live.pop(key, None)
            ours, stop_sent_as = key in self._cancelled, self._stops.pop(key, None)
            self._cancelled.discard(key)
            result = response.result
            said = result.error_string[: bounds.TEXT_CHARS] or "cancelled by another client"
            if stop_sent_as is not None:  # our stop: anything ending it but another client's is no fault (a newer
                # goal of ours preempted it, or it played out)
                if not ours and response.status == GoalStatus.STATUS_CANCELED and self._sends == stop_sent_as:
                    self._fault = Fault(f"{self.target} ended our braking stop (status {response.status}, error_code "
                                        f"{result.error_code}): {said}", taken_over=True, target=self.target)
                    self._taken_at = self._sends
                return
            if handle is not self._newest or ours or response.status == GoalStatus.STATUS_SUCCEEDED:
                return
            if response.status == GoalStatus.STATUS_CANCELED and any(until > time.monotonic() for until in
                                                                     self._unanswered.values()):  # fmt: skip
                return  # our trajectory on its way preempted it (its acceptance, which makes it the newest, may come
                # second: the two answers reach the executor's threads apart)
            self._fault = Fault(f"{self.target} ended the trajectory (status {response.status}, error_code "
                                f"{result.error_code}): {said}",
                                taken_over=response.status == GoalStatus.STATUS_CANCELED, target=self.target)  # fmt: skip
            if self._fault.taken_over:
                self._taken_at = self._sends

    def destroy(self) -> None:
        self.controller.destroy()
        if self._topic:  # a last hold acknowledged by the controller before the node goes
            self._publisher.wait_for_all_acked(Duration(seconds=STOP_ACK_S))
        else:
            self._client.destroy()  # rclpy's destroy_node leaves action clients alive (see InferClient.destroy)

    def hold(self, at: np.ndarray | None, log: Callable[[str], None], *, velocity: np.ndarray | None = None) -> None:
        """Stop the arm, decelerating: one trajectory point, at rest, replacing the one playing (on the action too: a
        cancel makes a joint_trajectory_controller hold the measured position at once, a jolt at speed). From
        ``at`` moving at ``velocity`` (where and how fast the plan has the arm now), else from the measured state
        carried forward, both carried on to when the stop will start (``_stop_lead``), the arm stops ``v T / 2``
        further on over ``T``: as long as the joints' acceleration limits need (at least HOLD_MIN_S), and as long as
        the controller's cubic from the measured position needs to stay within the velocity limits (1.5 x the mean
        speed); a position limit nearer than that, sooner, the steady deceleration that ends on it (at least
        MIN_STOP_S: a limit nearer than the arm moves in a third of that is passed by a few mrad);
        with joint states too old to read, from ``at`` timed for the farthest the arm may be from it (each joint's
        max_tracking_error: what the tracking check allows), a limit within the braking distance braked for so that
        the controller's cubic from that far on stays short of it.
        A goal of ours taken after the hold is replaced by another such stop, from where the arm is then; on the
        action, a stop the controller refuses (or none that can be planned: no joint states, no plan) cancels ours
        instead (the controller then holds where the arm is). Another client took the controller (``taken_over``) and
        nothing of ours went to it since: another's goal plays, nothing of ours does, and nothing is sent (a stop
        would preempt theirs); something of ours sent after the takeover (on its way as it came) is braked as above."""
        with self._lock:
            self._holds += 1
            if self._stopping:  # nothing sent since the last stop: it is braking already (a second would cancel it)
                return
            if self._taken_at is not None and self._sends == self._taken_at:
                self._stopping, self._stop_sent = True, None
                return
            replaced = set(self._live)  # what the stop replaces (and a refused one cancels): ours to end
            self._cancelled.update(replaced)
        self._send_stop(self._stop_point(at, velocity, log), replaced)

    def _send_stop(self, stop: JointTrajectoryPoint | None, replaced: set[bytes]) -> None:
        """``stop`` to the controller, replacing our goals ``replaced``; None (no stop could be planned): those
        cancelled on the action instead."""
        with self._ordered:
            with self._lock:
                self._sends += stop is not None
                mine = self._sends
            if stop is None:
                if not self._topic:
                    self._cancel_live(replaced)
                    self._mark_stopped(None, mine)  # cancelled: held where it is
                else:  # (a JTC rejects an empty trajectory: there is no stop to publish without a position)
                    self._node.get_logger().error(
                        f"no stop could be planned for {self.target} (no joint states to stop from): the trajectory "
                        "it plays runs to its end (a plan ends at rest)")  # fmt: skip
                return
            trajectory = JointTrajectory(joint_names=list(self.arm_names), points=[stop])
            sent = None
            if self._topic:
                self._publisher.publish(trajectory)
            else:
                sending = self._send_goal(trajectory)
                sending.add_done_callback(lambda f: self._on_stop(f, replaced, mine))
                sent = (sending, replaced)
        self._mark_stopped(sent, mine)  # sent: a hold before the next trajectory has nothing more to stop

    def _mark_stopped(self, sent: tuple[Future, set[bytes]] | None, mine: int) -> None:
        """The arm is stopping (``sent``: the stop on its way), unless something was sent after it (a trajectory
        sent meanwhile plays: a hold must stop it)."""
        with self._lock:
            if self._sends == mine:
                self._stopping, self._stop_sent = True, sent

    async def stop_answered(self, wait_s: float) -> str:
        """Wait up to ``wait_s`` for the controller's answer to the newest stop, so that a goal's result (and a
        shutdown, which waits for it) comes after it: a refused stop has ours cancelled then, while the node can
        still send. A trajectory still on its way (within its ``answer_wait_s``) is waited for first, up to
        ``wait_s`` too: taken after the hold, it brings a stop of its own (``_on_accepted``), which is then the
        newest, given its own ``wait_s``. '' when it was taken (or none is on the action's way), else what
        happened."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            unanswered = list(self._unanswered)
        for handled in unanswered:
            if not handled.done() and time.monotonic() < deadline:
                await wait(self._node, handled, deadline - time.monotonic())
        with self._lock:
            pending = self._stop_sent
        if pending is None:
            return ""
        sending, replaced = pending
        if not sending.done():
            await wait(self._node, sending, wait_s)
        answered = sending.done() and sending.exception() is None
        handle = sending.result() if answered else None
        if answered and handle.accepted:
            return ""
        with self._lock:  # a trajectory sent since has replaced what the stop was to replace: nothing to cancel
            current = self._stop_sent is pending
        if current:  # what the stop replaces may play on: ours are cancelled (the controller holds the arm there)
            self._cancel_live(replaced)
        if answered:
            return f"{self.target} refused the arm's stop: our trajectory was cancelled (the arm holds where it is)"
        if sending.done():
            return f"the arm's stop could not be sent to {self.target} ({sending.exception()}): our trajectory was " \
                "cancelled"  # fmt: skip
        return f"{self.target} did not answer the arm's stop within {wait_s:g} s: our trajectory was cancelled"

    def _stop_point(self, at: np.ndarray | None, velocity: np.ndarray | None,
                    log: Callable[[str], None]) -> JointTrajectoryPoint | None:  # fmt: skip
        """The stop ``hold`` sends (None, logged, when nothing says where the arm is)."""
        arm = self.columns
        try:
            limits = self._readings.limits()
        except EngineError as exc:  # a description changed since: the limits the goal ran with still bound the hold
            if self._readings.known_limits is None:
                log(f"cannot hold on {self.target}: {exc.message}")
                return None
            limits = self._readings.known_limits
        speeds, turns = np.array([lim.velocity for lim in limits])[arm], turning(limits)[arm]
        braking = np.array([lim.acceleration for lim in limits])[arm]
        lead = self._stop_lead()  # the arm plays on at its speed until the controller starts the stop
        try:  # the trajectory's joints only: a gripper on its own controller may report late, or not at all
            start, start_velocity = self._readings.start_state(self.arm_names, lead)
            start_velocity = np.clip(start_velocity, -speeds, speeds)  # a spike of a differenced velocity
            if at is None:
                here, moving = start, start_velocity
            else:  # a wrist: the short way
                moving = _or_rest(velocity, arm)
                here = start + difference(at[arm] + moving * lead, start, turns)
            rest = self._readings.from_rest(self.arm_names)
            start_velocity = np.where(rest, 0.0, start_velocity)  # as the controller starts it
            distance, unknown, stale = np.abs(here - start), 0.0, False
        except EngineError as exc:
            if at is None:
                log(f"cannot hold on {self.target}: {exc.message}, and no plan says where the arm is")
                return None
            log(f"holding on {self.target} where the plan has the arm: {exc.message}")
            moving = start_velocity = _or_rest(velocity, arm)
            here = start = at[arm] + moving * lead
            distance = unknown = self._tolerances["max_tracking_error"][arm]  # where the arm is, within this
            stale = True
        braking_s = max(float(np.max(_braking_times(distance, moving, start_velocity, braking), initial=0.0)),
                        HOLD_MIN_S)  # fmt: skip
        lower, upper = (np.array([getattr(lim, side) for lim in limits])[arm] for side in ("lower", "upper"))
        # an arm already past a limit (jogged past a URDF's soft limit) is never moved onto it by a hold
        lower, upper = np.minimum(lower, here), np.maximum(upper, here)
        stop = np.clip(here + moving * braking_s / 2, lower, upper)  # steady deceleration to rest
        squeezed = (np.abs(stop - here) < np.abs(moving) * braking_s / 2 - 1e-12) & (moving != 0)
        slowest = max(float(np.max(1.5 * (distance + np.abs(stop - here)) / speeds, initial=0.0)), braking_s)
        if squeezed.any():  # a position limit within the braking distance: the steady deceleration from the start
            # state at v0 that ends on it (T = 2 d / v0: the gentlest that stays short of it, v0^2 / 2d; the cubic
            # passes it for T > 3 d / v0, so by 4 v0 MIN_STOP_S / 27 at most, 3 mrad at 1 rad/s, where the floor
            # lengthens T); every joint brakes in the shortest such T, the one that sets it onto its limit. Unread,
            # the arm is anywhere within its tracking error e of the plan: T = 3 (d - e) / v0, the longest with which
            # the cubic from e on stays short (d 0.2, e 0.1, v0 1: at most 13 rad/s^2 from e behind; 35 at 2 (d-e)/v0);
            # a limit nearer than e (the arm may be on it already): 3 d / v0, short of it from where the plan has it
            toward = np.sign(start_velocity) == np.sign(moving)
            room = np.maximum((stop - start) * np.sign(moving), 0.0)  # none: the arm is past it already
            room = np.where(room > unknown, room - unknown, room)
            with np.errstate(divide="ignore", invalid="ignore"):
                times = np.where(toward & (start_velocity != 0), (3 if stale else 2) * room / np.abs(start_velocity),
                                 np.inf)  # fmt: skip
            slowest = max(min(slowest, float(times[squeezed].min())), MIN_STOP_S)
            binding = squeezed & (times <= slowest)  # another squeezed joint stops short of its limit in this T
            stop = np.where(binding, stop, np.clip(here + moving * slowest / 2, lower, upper))
        return JointTrajectoryPoint(positions=stop.tolist(), velocities=[0.0] * len(arm),
                                    time_from_start=duration_of(slowest))  # fmt: skip

    def _on_stop(self, future: Future, replaced: set[bytes], sent_as: int) -> None:
        """The stop (the ``sent_as``-th thing sent) taken: it plays (never cancelled as stale: a cancel would jolt);
        refused, or lost: ours it was to replace are cancelled (the controller holds where the arm is)."""
        handle = future.result() if future.exception() is None else None
        if handle is None or not handle.accepted:
            self._node.get_logger().error(f"{self.target} refused the stop trajectory: cancelling ours instead")
            self._cancel_live(replaced)
            return
        key = _goal_id(handle)
        with self._lock:
            self._live[key] = handle
            self._stops[key] = sent_as
        handle.get_result_async().add_done_callback(lambda f: self._on_result(handle, f.result()))
