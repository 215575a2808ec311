"""The arm as ros2_control shows it to the instruction node: joint state in, limits from the URDF, trajectories out.

The joints' readings and limits (``joint_readings``) are read once for all the action joints; the trajectory goes to
the controller that plays them (``trajectory_controller``: `trajectory_action`, or `trajectory_topic`), or split among
one such controller per arm (`trajectory_actions`, `trajectory_joint_counts`: a bimanual ALOHA or bi-SO-100 runs a
joint_trajectory_controller per arm), and each jaw on a gripper's own controller (`gripper_joint_names`) is left out
of it (``gripper_io``, one per jaw: `gripper_actions`). What one controller does every other does too: a plan goes to
each at once, each starting it as it takes it (one refusing it, or silent for answer_wait_s, holds them all), a hold
stops each, a fault of one ends the goal with all held (but one another client took over), and each controller's
own parameters, its joints among them, are checked before a goal moves the arms.
* `speed_scaling_topic` (std_msgs/Float64, ur_robot_driver's; one per driver: `speed_scaling_topics`): a controller
  scaled below full speed plays a plan slower than it is timed (``slowed``).
"""

import math
import threading
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.exceptions import InvalidParameterTypeException, ParameterUninitializedException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Future
from rcl_interfaces.msg import ParameterDescriptor
from std_msgs.msg import Float64

from oxygen_ros import bounds
from oxygen_ros.control.arm.controller_setup import STARTS_FROM
from oxygen_ros.control.arm.joint_limits import JointLimit
from oxygen_ros.control.arm.joint_map import JointMap
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.control.arm.state_entries import state_entries
from oxygen_ros.errors import EngineError
from oxygen_ros.nodes.future_wait import wait
from oxygen_ros.nodes.gripper_io import GripperIO
from oxygen_ros.nodes.joint_readings import JointReadings
from oxygen_ros.nodes.stamps import seconds
from oxygen_ros.nodes.trajectory_controller import Fault, Sent, TrajectoryController

POLL_S = 0.1
STOP_SLACK_S = 1.0  # beyond a controller's own waits for its stop's answer: the executor's turns
MIN_SPEED_SCALING = 99.0  # percent: a controller scaled below this plays the plan visibly slower than it is timed
PARAMETERS = {  # scalars: (default, description), read once
    "state_topic": ("joint_states", "sensor_msgs/JointState input: the arm's measured joint positions"),
    "description_topic": ("robot_description", "std_msgs/String input (latched): the URDF whose joint limits bound "
                          "every target"),  # fmt: skip
    "trajectory_action": ("arm_controller/follow_joint_trajectory", "control_msgs/FollowJointTrajectory server the "
                          "chunks go to (a joint_trajectory_controller)"),  # fmt: skip
    "trajectory_topic": ("", "trajectory_msgs/JointTrajectory topic to send to instead of trajectory_action (the "
                         "controller's fire-and-forget input); '' = the action"),  # fmt: skip
    "action_space": ("joint_position", "what a chunk's dimensions are: joint_position (absolute targets) or "
                     "joint_delta (relative to the state the chunk was computed from; gripper_joint_names' stay "
                     "absolute)"),  # fmt: skip
    "limit_margin": (0.02, "a target at most this far past a position limit (rad or m) is clamped onto it; further "
                     "is refused and the arm holds"),  # fmt: skip
    "max_start_jump": (0.1, "a plan that starts the arm from rest may put its first target at most this far from the "
                       "measured position (rad or m)"),  # fmt: skip
    "input_timeout_s": (0.5, "joint states, or a camera frame when asked for a chunk, older than this stop the arm "
                        "(FAILED_PRECONDITION), seconds"),  # fmt: skip
    "speed_scaling_topic": ("", "std_msgs/Float64 input, percent (ur_robot_driver's speed_scaling_state_broadcaster/"
                            "speed_scaling): plans are timed at full speed, so a goal is refused, or ended with the "
                            "arm held, while it is under 99 or older than input_timeout_s; '' = none (the controller "
                            "plays at full speed)"),  # fmt: skip
    "answer_wait_s": (1.0, "how long the controller may take to accept a trajectory, and to answer the arm's stop "
                      "before a goal's result (at most 2.5 s there: half a shutdown's wait), seconds"),  # fmt: skip
    "max_tracking_error": (0.3, "a moving arm this far (rad or m) from where its plan has it, checked every period, "
                           "stops the goal with the arm held where it is: it is not following (blocked, a fault, a "
                           "controller that dropped the trajectory, another client)"),  # fmt: skip
    "controller_starts_from": ("measured", "where the arm's controller starts each new trajectory: measured (a "
                               "joint_trajectory_controller's default; from rest for a joint whose driver reports "
                               "no velocity), measured_at_rest (its state_interfaces lack velocity: every joint from "
                               "rest, checked so; the controller plays that first segment as a straight line, a "
                               "velocity step: only with joint_acceleration_limits .inf) or commanded (its "
                               "interpolate_from_desired_state, Humble's open_loop_control): a chunk's first segment "
                               "is checked, and a hold timed, from there; a "
                               "joint_trajectory_controller's own parameters, read before each goal, must agree "
                               "(else the goal is refused)"),  # fmt: skip
}
RANGES = {"limit_margin": (0.0, 1.0), "max_start_jump": (0.0, 10.0), "input_timeout_s": (0.0, 60.0),
          "answer_wait_s": (0.0, 60.0), "max_tracking_error": (0.0, 10.0)}  # fmt: skip
POSITIVE = ("input_timeout_s", "answer_wait_s", "max_start_jump", "max_tracking_error")
# the tolerances a joint may have its own of (a prismatic joint's in m beside revolute ones in rad): the scalar is
# every joint's unless its per-joint list is set
TOLERANCES = {"limit_margin": "joint_limit_margins", "max_start_jump": "joint_max_start_jumps",
              "max_tracking_error": "joint_max_tracking_errors"}  # fmt: skip
NAME_LISTS = {
    "action_joint_names": "the joints of the model's action dimensions, in order (ros2_control names; a gripper "
    "dimension included); empty = the model's chunks go to no arm",
    "state_joint_names": "the model's state, in order: joints (their positions), or joint.pos / joint.vel (LeRobot's "
                         "names); empty = action_joint_names",
    "gripper_joint_names": "the action joints that go to a gripper's own controller (gripper_action; one per arm: "
    "gripper_actions) instead of the trajectory; empty = every action joint in the trajectory",
    "trajectory_actions": "a robot with a joint_trajectory_controller per arm (a bimanual ALOHA, bi-SO-100): their "
    "control_msgs/FollowJointTrajectory servers, each playing trajectory_joint_counts of the trajectory's joints in "
    "action_joint_names order (gripper_joint_names' aside); empty = trajectory_action plays them all",
    "gripper_actions": "one gripper action server per gripper_joint_names joint, in order (two grippers need them); "
    "empty = gripper_action for the one gripper",
    "speed_scaling_topics": "a robot with a driver per arm (two URs): each driver's speed scaling topic, as "
    "speed_scaling_topic says of one; empty = speed_scaling_topic",
    "absolute_joint_names": "action joints whose actions stay absolute under action_space joint_delta, beside the "
    "gripper_joint_names one (a jaw inside the trajectory: openpi's DeltaActions mask); empty = that gripper's only",
}
COUNT_LISTS = {
    "trajectory_joint_counts": "per trajectory_actions server, how many of the trajectory's joints it plays (in "
    "action_joint_names order, gripper_joint_names' aside), e.g. [6, 6]",
}
NUMBER_LISTS = {
    "action_scale": "per action dimension, joint = action_scale * action + action_offset (e.g. 0.01745 for degrees); "
    "empty = 1",
    "action_offset": "per action dimension, added after action_scale (rad or m); empty = 0",
    "joint_lower_limits": "per action joint, a lower position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_upper_limits": "per action joint, an upper position limit tighter than the URDF's (NaN = the URDF's)",
    "joint_velocity_limits": "per action joint, a velocity limit tighter than the URDF's (NaN = the URDF's)",
    "joint_acceleration_limits": "per action joint, an acceleration limit (rad/s^2 or m/s^2; MoveIt's "
    "joint_limits.yaml max_acceleration; a URDF has none): a chunk whose spline accelerates harder is refused; "
    "required for every trajectory joint before a VLA goal runs (empty or NaN: goals refused FAILED_PRECONDITION); "
    ".inf waives the check for a joint whose driver limits acceleration itself",
    "joint_limit_margins": "per action joint, its limit_margin (rad or m: a prismatic joint's in m); empty = "
    "limit_margin for each",
    "joint_max_start_jumps": "per action joint, its max_start_jump (rad or m); empty = max_start_jump for each",
    "joint_max_tracking_errors": "per action joint, its max_tracking_error (rad or m); empty = max_tracking_error for "
    "each",
}


def declare_lists(node: Node) -> dict[str, list]:
    """Declare the array parameters (no defaults: an empty array is not a YAML default) and read them."""
    out: dict[str, list] = {}
    for table, kind in ((NAME_LISTS, Parameter.Type.STRING_ARRAY), (NUMBER_LISTS, Parameter.Type.DOUBLE_ARRAY),
                        (COUNT_LISTS, Parameter.Type.INTEGER_ARRAY)):  # fmt: skip
        for name, description in table.items():
            try:
                node.declare_parameter(name, kind, ParameterDescriptor(description=description, read_only=True))
            except InvalidParameterTypeException as exc:  # a list of the wrong type: [1, 2] where [1.0, 2.0] is wanted
                raise ValueError(f"parameter {name}: {exc}") from exc
            try:
                out[name] = list(node.get_parameter(name).value)
            except ParameterUninitializedException:
                out[name] = []
    for name in NAME_LISTS:
        names = out[name]
        if len(names) > bounds.STATE or len(set(names)) != len(names) or not all(names):
            raise ValueError(f"parameter {name} must be distinct non-empty names (at most {bounds.STATE}): {names}")
    return out


def _answered(futures: list[Future]) -> Future:
    """Done once every one of ``futures`` (goals sent) is answered, or as soon as one is refused or failed (its
    result then True: the others need not be waited for)."""
    out, lock = Future(), threading.Lock()

    def check(_: Future | None = None) -> None:
        refused = any(f.done() and (f.exception() is not None or not f.result().accepted) for f in futures)
        with lock:  # (the callbacks run on several executor threads)
            if not out.done() and (refused or all(f.done() for f in futures)):
                out.set_result(refused)

    for future in futures:
        future.add_done_callback(check)
    check()
    return out


def _split(trajectory: list[int], actions: list[str], counts: list[int], action: str) -> list[tuple[str, list[int]]]:
    """(action server, its columns) per controller: ``trajectory`` (the trajectory's columns) in runs of
    ``counts`` over ``actions``, or all of them to ``action``; ValueError naming the parameter."""
    if not actions:
        if counts:
            raise ValueError("parameter trajectory_joint_counts needs trajectory_actions (one count per server)")
        return [(action, trajectory)]
    if len(counts) != len(actions) or min(counts) < 1 or sum(counts) != len(trajectory):
        raise ValueError(f"parameter trajectory_joint_counts must be one count of at least 1 per trajectory_actions "
                         f"server ({len(actions)}), adding up to the trajectory's {len(trajectory)} joints "
                         f"(action_joint_names less gripper_joint_names): {counts}")  # fmt: skip
    ends = np.cumsum(counts)
    return [(name, trajectory[end - count : end]) for name, count, end in zip(actions, counts, ends)]


def _gripper_actions(grippers: list[str], actions: list[str], action: str) -> list[str]:
    """The action server of each gripper joint; ValueError naming the parameter."""
    if actions and len(actions) != len(grippers):
        raise ValueError(f"parameter gripper_actions must name one server per gripper_joint_names joint "
                         f"({len(grippers)}): {actions}")  # fmt: skip
    if not actions and len(grippers) > 1:
        raise ValueError(f"{len(grippers)} gripper_joint_names need as many gripper_actions (one server per jaw)")
    return actions or [action] * len(grippers)


def _per_joint(scalar: str, listed: list[float], default: float, joints: int) -> np.ndarray:
    """Tolerance ``scalar`` per joint [joints]: its list (``TOLERANCES``) if set, one per action joint within the
    scalar's range, else ``default`` for every joint; ValueError naming the list."""
    name, (low, high) = TOLERANCES[scalar], RANGES[scalar]
    if not listed:
        return np.full(joints, default)
    positive = scalar in POSITIVE
    lowest = "above" if positive else "at least"
    if len(listed) != joints or not all((v > low if positive else v >= low) and v <= high for v in listed):
        raise ValueError(f"parameter {name} must be empty or {joints} numbers (one per action joint), each {lowest} "
                         f"{low:g} and at most {high:g}: {listed}")  # fmt: skip
    return np.array(listed, dtype=np.float64)


class ArmIO:
    """Raises ValueError naming a bad parameter (``settings``: PARAMETERS' values; ``lists``: declare_lists')."""

    def __init__(self, node: Node, settings: dict, lists: dict[str, list], group: CallbackGroup) -> None:
        self._node, self._settings = node, settings
        if settings["controller_starts_from"] not in STARTS_FROM:
            raise ValueError(f"parameter controller_starts_from must be one of {list(STARTS_FROM)}, got "
                             f"{settings['controller_starts_from']!r}")  # fmt: skip
        self.names: tuple[str, ...] = tuple(lists["action_joint_names"])
        for listed in ("gripper_joint_names", "absolute_joint_names"):
            if not set(lists[listed]) <= set(self.names):
                raise ValueError(f"parameter {listed} must name action_joint_names, got {lists[listed]}")
        grippers, absolute = lists["gripper_joint_names"], lists["absolute_joint_names"]
        self.gripper_columns = [self.names.index(name) for name in grippers]
        self.tolerances = {scalar: _per_joint(scalar, lists[listed], settings[scalar], len(self.names))
                           for scalar, listed in TOLERANCES.items()}  # fmt: skip
        try:
            joint_map = JointMap.build(list(self.names), lists["action_scale"], lists["action_offset"],
                                       settings["action_space"], tuple(grippers) + tuple(absolute))  # fmt: skip
        except EngineError as exc:
            raise ValueError(exc.message) from exc
        trajectory = [i for i in range(len(self.names)) if i not in self.gripper_columns]
        if self.names and not trajectory:
            raise ValueError(f"parameter gripper_joint_names leave no action joint to the trajectory: {grippers}")
        on_topic = bool(settings["trajectory_topic"])
        if on_topic and lists["trajectory_actions"]:
            raise ValueError("parameter trajectory_topic plays every joint on one controller: unset it, or "
                             "trajectory_actions")  # fmt: skip
        split = _split(trajectory, lists["trajectory_actions"], lists["trajectory_joint_counts"],
                       settings["trajectory_topic"] or settings["trajectory_action"])  # fmt: skip
        limit_lists = [lists[k] for k in ("joint_lower_limits", "joint_upper_limits", "joint_velocity_limits",
                                          "joint_acceleration_limits")]  # fmt: skip
        accelerations = lists["joint_acceleration_limits"]
        if len(accelerations) != len(self.names):  # (empty: none given; another count is refused with the limits)
            accelerations = [math.nan] * len(self.names)
        # trajectory joints whose acceleration limit nobody gave: a VLA goal is refused until one is (.inf: waived)
        self.acceleration_unset = tuple(self.names[i] for i in trajectory if math.isnan(accelerations[i]))
        limited = [self.names[i] for i in trajectory if math.isfinite(accelerations[i])]
        if settings["controller_starts_from"] == "measured_at_rest" and limited:
            raise ValueError(f"parameter joint_acceleration_limits bounds {limited}, but controller_starts_from is "
                             "measured_at_rest: a joint_trajectory_controller whose state_interfaces lack velocity "
                             "plays each trajectory's first segment as a straight line from the measured position "
                             "(ros2_controllers' Trajectory::interpolate_between_points), a step in velocity no "
                             "acceleration limit holds: set its interpolate_from_desired_state (Humble: "
                             "open_loop_control) and controller_starts_from: commanded, or waive those limits with "
                             ".inf")  # fmt: skip
        state = state_entries(tuple(lists["state_joint_names"]) or self.names)
        self.readings = JointReadings(node, settings, self.names, state, tuple(grippers), joint_map, limit_lists,
                                      group)  # fmt: skip
        self.map = joint_map
        scaling_topics = lists["speed_scaling_topics"]
        if scaling_topics and settings["speed_scaling_topic"]:
            raise ValueError("parameter speed_scaling_topics replaces speed_scaling_topic: set one of them")
        # each driver's speed scaling (percent, arrival), by resolved topic
        self._scalings: dict[str, tuple[float, float] | None] = {}
        for topic in scaling_topics or [settings["speed_scaling_topic"]] * bool(settings["speed_scaling_topic"]):
            where = node.resolve_topic_name(topic)
            self._scalings[where] = None
            node.create_subscription(Float64, topic, partial(self._on_scaling, where), 10, callback_group=group)
        self.grippers = [GripperIO(node, settings, name, action, group)
                         for name, action in zip(grippers, _gripper_actions(grippers, lists["gripper_actions"],
                                                                            settings["gripper_action"]))]  # fmt: skip
        self.controllers = [TrajectoryController(node, settings, self.readings, columns, action, on_topic,
                                                 self.tolerances, group)
                            for action, columns in split]  # fmt: skip
        targets = [c.target for c in self.controllers] + [g.target for g in self.grippers]
        if len(set(targets)) != len(targets):
            raise ValueError(f"parameters trajectory_actions and gripper_actions must name distinct servers: {targets}")
        # a hold comes before every controller's trajectory or after them all (reentrant: a hold made on the thread
        # that sends, inside a callback of the sending, goes on at once instead of waiting for itself)
        self._sending = threading.RLock()
        # how far apart the controllers took the last plan they all took (s; 0 with one controller, or on topics,
        # which answer nothing): each starts its arm as it takes it, so a bimanual plan's arms are this much out of
        # step (ChunkTrace.taken_spread_ms)
        self.taken_spread_s = 0.0

    @property
    def configured(self) -> bool:
        return bool(self.names)

    def command_now(self, start: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``start`` / ``velocity`` [len(names)] with each controller's joints where it commands them now, where it
        starts a trajectory while no plan of ours plays (``TrajectoryController.command_now``; a controller that
        did not say, or does not start from its command: its joints as given); None when none said."""
        said = False
        for controller in self.controllers:
            command = controller.command_now(start, velocity)
            if command is not None:
                (start, velocity), said = command, True
        return (start, velocity) if said else None

    def _on_scaling(self, where: str, msg: Float64) -> None:
        self._scalings[where] = (float(msg.data), self.readings.now())

    def slowed(self) -> str:
        """Why a controller would play a plan slower than it is timed ('' = none would, as far as we know): on a
        speed scaling topic (a UR's scaled_joint_trajectory_controller; one per driver), a scaling under
        MIN_SPEED_SCALING (the pendant's slider, a reduced or protective mode), none yet, or one older than
        input_timeout_s. Plans are timed at full speed: played slower, the arm falls behind them (chunks refused
        from a moving start, then not following)."""
        timeout = self._settings["input_timeout_s"]
        for where, scaling in self._scalings.items():
            if scaling is None:
                return f"no speed scaling on {where} yet: the controller may play plans slower than they are timed"
            percent, arrival = scaling
            age = self.readings.now() - arrival
            if age > timeout:
                return f"the speed scaling on {where} is {age:.2f} s old, over input_timeout_s {timeout:g}"
            if not percent >= MIN_SPEED_SCALING:
                return (f"the controller's speed scaling on {where} is {percent:.0f}% (the pendant's slider, or a "
                        "reduced or protective mode): plans are timed at full speed; set it to 100% and lower "
                        "joint_velocity_limits instead")  # fmt: skip
        return ""

    async def missing(self, wait_s: float) -> str:
        """The controller that is not there ('' = all are: each arm's action server or a subscriber to its topic,
        and each gripper's server), waiting up to ``wait_s`` in all."""
        deadline = time.monotonic() + wait_s
        for controller in self.controllers:
            while not controller.listening():
                if time.monotonic() >= deadline:
                    return controller.target
                await wait(self._node, None, POLL_S)
        for gripper in self.grippers:
            if not await gripper.ready(max(deadline - time.monotonic(), 0.0)):
                return gripper.target
        return ""

    async def misconfigured(self, limits: list[JointLimit]) -> str:
        """Why a controller, by its own word, plays our trajectories otherwise than they are checked, or a gripper's
        controller none of its goals (its manager lists it as not active) ('' = none does, or they cannot tell:
        ``ControllerCheck``, ``GripperIO.inactive``), each within ``answer_wait_s``; ``limits``: the action joints'."""
        for gripper in self.grippers:  # asked while the arm's controllers are
            gripper.check_ahead(self._settings["answer_wait_s"])
        for controller in self.controllers:
            wrong = await controller.misconfigured(limits)
            if wrong:
                return wrong
        for gripper in self.grippers:
            wrong = await gripper.inactive(self._settings["answer_wait_s"])
            if wrong:
                return wrong
        return ""

    def check_ahead(self) -> None:
        """Start reading what ``misconfigured`` will ask of each controller (``ControllerCheck.read_ahead``,
        ``GripperIO.check_ahead``)."""
        for controller in self.controllers:
            controller.check_ahead()
        for gripper in self.grippers:
            gripper.check_ahead(self._settings["answer_wait_s"])

    def forget_fault(self) -> None:
        """A new goal starts: what ended an earlier one's trajectories is not its fault."""
        for controller in self.controllers:
            controller.forget_fault()

    def take_faults(self) -> list[Fault]:
        """Why each controller that ended our newest goal on it since the last call, when we did not ask it to, did
        so (empty: none did)."""
        faults = [controller.take_fault() for controller in self.controllers]
        return [fault for fault in faults if fault is not None]

    async def send(self, start: float, safe: SafeTargets, wanted: Callable[[], bool] = lambda: True) -> str:
        """Play ``safe`` (every action joint's; each controller its own), planned from node-clock time ``start``
        (point i due at ``start + safe.times[i]``); '' when every controller took it, else why not, as soon as one
        refused it or within answer_wait_s, with those that took it stopped (nothing of a refused plan plays). All
        go out before any answer is awaited (each controller starts its trajectory as it takes it), and a hold
        comes before them all or after them all; ``wanted()`` false by then (a hold came while the plan was being
        made ready: the caller's mark of it), nothing goes."""
        for controller in self.controllers:
            if not controller.listening():
                return f"{controller.target} is not there (no action server, or no subscriber to the topic)"
            if controller.taken_over():  # its fault ends the goal: theirs plays on, nothing of ours
                return (f"{controller.target} was taken over (another client's goal, a cancel or the controller's "
                        "deactivation): nothing sent")  # fmt: skip
        with self._sending:
            if not wanted():  # a hold came first: this plan would play after its stop, as if newer
                return "the arm was told to hold while the trajectory was made ready: nothing sent"
            sent = [(controller, controller.dispatch(safe)) for controller in self.controllers]
        answered: list = []
        unanswered: list = []
        try:
            _, refused = await wait(self._node, _answered([each.future for _, each in sent if each is not None]),
                                    self._settings["answer_wait_s"])  # fmt: skip
        finally:  # (also when the wait broke off: nothing is left waited for; the caller holds them all)
            for controller, each in sent:
                (answered if each is None or each.future.done() else unanswered).append((controller, each))
            for controller, each in unanswered:
                controller.give_up(each)
        taken = [controller.taken(start, safe, each) for controller, each in answered]  # the refusal first
        problems = taken + [f"{controller.target}'s answer was not awaited (another controller refused)" if refused
                            else f"{controller.target} did not answer within answer_wait_s "
                            f"{self._settings['answer_wait_s']:g} s" for controller, _ in unanswered]  # fmt: skip
        self.taken_spread_s = 0.0 if any(problems) else _spread([each for _, each in answered if each is not None])
        if any(problems):  # the arms move together or not at all: one that took it is stopped here (braking from
            # where it is), so it never plays on, whatever the caller does next; one that takes it later, once the
            # caller holds
            with self._sending:
                for (controller, _), problem in zip(answered, taken, strict=True):
                    if not problem:
                        controller.hold(None, self._node.get_logger().warning)
        return "; ".join(problem for problem in problems if problem)

    def hold(self, at: np.ndarray | None, log: Callable[[str], None], *, velocity: np.ndarray | None = None) -> None:
        """Stop the arms, decelerating, each from ``at`` moving at ``velocity`` [len(names)] (where and how fast the
        plan has them now), else from where they are measured (``TrajectoryController.hold``: one another client
        took over is sent nothing); the grippers send no more goals."""
        for gripper in self.grippers:
            gripper.hold()
        with self._sending:
            for controller in self.controllers:
                controller.hold(at, log, velocity=velocity)

    async def stop_answered(self, wait_s: float) -> str:
        """Each controller's answer to its newest stop, all waited for at once, each within its ``wait_s``
        (``TrajectoryController.stop_answered``): '' when each took it, else what happened."""
        waits = [self._node.executor.create_task(controller.stop_answered, wait_s) for controller in self.controllers]
        problems = []
        for controller, waiting in zip(self.controllers, waits, strict=True):
            done, problem = await wait(self._node, waiting, 2 * wait_s + STOP_SLACK_S)
            failed = waiting.exception() if waiting.done() else None
            problems.append(problem if done else f"{controller.target}: its stop's answer was not had "
                            f"({failed or 'no word in time'})")  # fmt: skip
        return "; ".join(problem for problem in problems if problem)

    def destroy(self) -> None:
        for gripper in self.grippers:
            gripper.destroy()
        for controller in self.controllers:
            controller.destroy()


def _spread(taken: list[Sent]) -> float:
    """How far apart the controllers took their shares of one plan: by the accept stamps of their goal responses (a
    controller manager's clock, when it took each: one clock for the arms of one manager), or, where a server
    leaves them 0, by when the answers came here (this node's callbacks: later by their scheduling)."""
    stamps = [seconds(sent.future.result().stamp) for sent in taken]
    if len(stamps) < 2:
        return 0.0
    if not all(stamps):
        stamps = [sent.answered_at for sent in taken if math.isfinite(sent.answered_at)]
    return max(stamps) - min(stamps) if len(stamps) > 1 else 0.0
