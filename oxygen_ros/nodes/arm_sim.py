"""`arm_sim`: a simulated ros2_control arm, so the instruction node drives the same interface in simulation as on a
robot. It serves `control_msgs/action/FollowJointTrajectory` on `arm_controller/follow_joint_trajectory` and takes
`trajectory_msgs/JointTrajectory` on `arm_controller/joint_trajectory` as ros2_control's joint_trajectory_controller
(JTC) does, publishes the arm's `sensor_msgs/JointState` on `joint_states` and its URDF on `robot_description`
(TRANSIENT_LOCAL, as robot_state_publisher latches it), where the instruction node reads the joint limits, and JTC's
`~/controller_state` (its command: for this servo where the arm is).

The arm is a perfect servo: what it reports ("actual", the JointState) is the trajectory's sampled position at that
instant, so the loop closes without dynamics; velocities are finite differences of consecutive states. Playback and
the rules for refusing a trajectory live in ``oxygen_ros.control.trajectory_playback`` (no ROS); this node moves
messages in and out and keeps JTC's goal life:

- a goal JTC would refuse is rejected, the reason logged;
- accepting a goal cancels the active one (CANCELED, INVALID_GOAL, "Current goal cancelled due to new incoming
  action.") and plays the new trajectory from where the arm is at acceptance, moving as it moves (a straight line to
  the first point when its `state_interfaces` lack velocity, as JTC interpolates from a state whose velocity it
  cannot read up to humble 2.51 / jazzy 4.35, the stricter case; JTC's parameters, `joints` among them,
  are declared so the instruction node can read them); the node's end cancels it too (JTC's deactivation:
  "Current goal cancelled during deactivate transition.");
- a trajectory on the topic replaces the one playing the same way, but leaves the active goal running (JTC's
  preemption policy: the goal then ends with that trajectory);
- a cancel of the active goal holds the arm where it is and ends the goal CANCELED with an empty result;
- the goal SUCCEEDS (SUCCESSFUL, "Goal successfully reached!") once its last point's time has passed; until then it
  gets feedback at state_rate_hz.

Everything is timed on the node clock, so `use_sim_time` is honoured.
"""

import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np
from control_msgs.action import FollowJointTrajectory
from control_msgs.msg import JointTrajectoryControllerState
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.action.server import GoalEvent, ServerGoalHandle
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.task import Future
from sensor_msgs.msg import JointState
from std_msgs.msg import Header, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros import share, simulation
from oxygen_ros.control.arm.joint_limits import MAX_DESCRIPTION_BYTES
from oxygen_ros.control.trajectory_playback import MAX_JOINTS, Point, Trajectory, oversized, rejection
from oxygen_ros.nodes.declare import declare
from oxygen_ros.nodes.qos import ACTION_SERVER_QOS
from oxygen_ros.nodes.spin import run
from oxygen_ros.nodes.stamps import seconds

NODE_NAME = "arm_sim"
Result = FollowJointTrajectory.Result
SO100_JOINTS = list(simulation.SO100_JOINTS)
PREEMPTED = "Current goal cancelled due to new incoming action."  # JTC's words, as its clients may match them
REACHED = "Goal successfully reached!"
SHUTDOWN = "Current goal cancelled during deactivate transition."
PARAMETERS: dict[str, tuple[Any, str]] = {
    "joint_names": (SO100_JOINTS, "the arm's joints, in the order of joint_states (default: a LeRobot SO-100)"),
    "initial_positions": ([0.0] * len(SO100_JOINTS), "where each joint starts, rad (one per joint_names)"),
    "state_rate_hz": (50.0, "joint_states and goal feedback published per second, 1 to 1000"),
    "action_name": ("arm_controller/follow_joint_trajectory", "control_msgs/FollowJointTrajectory server"),
    "trajectory_topic": ("arm_controller/joint_trajectory",
                         "trajectory_msgs/JointTrajectory input: fire and forget, replaces the trajectory playing"),
    "state_topic": ("joint_states", "sensor_msgs/JointState output"),
    "urdf_path": (str(share.config_file("sim_arm.urdf")),
                  "the arm's URDF (default: the installed config/sim_arm.urdf)"),
    "description_topic": ("robot_description", "std_msgs/String output of the URDF's text (TRANSIENT_LOCAL)"),
    "state_interfaces": (["position", "velocity"], "JTC's: without velocity a new trajectory starts with a straight "
                         "line from the arm's position to its first point (the controller reads no velocity), though "
                         "joint_states still carry one"),
    "interpolate_from_desired_state": (False, "JTC's (Jazzy on): a new trajectory starts from the last command, "
                                       "which for this perfect servo is where the arm is, moving as it moves"),
}  # fmt: skip
KNOWN_INTERFACES = ("position", "velocity")  # the state interfaces this arm has
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)  # robot_state_publisher's


def read_description(path: str) -> str:
    """The URDF's text; FileNotFoundError / ValueError naming the parameter when it cannot be the description."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"parameter urdf_path: {path} does not exist")
    if file.stat().st_size > MAX_DESCRIPTION_BYTES:
        raise ValueError(f"parameter urdf_path: {path} has more than {MAX_DESCRIPTION_BYTES} bytes")
    return file.read_text()


def check_joints(names: list[str], initial: list[float]) -> None:
    """ValueError unless ``names`` are 1..MAX_JOINTS distinct non-empty names with one finite start position each."""
    if not 0 < len(names) <= MAX_JOINTS or len(set(names)) != len(names) or not all(names):
        raise ValueError(f"parameter joint_names must be 1 to {MAX_JOINTS} distinct non-empty names, got {names}")
    if len(initial) != len(names) or not np.all(np.isfinite(initial)):
        raise ValueError(f"parameter initial_positions must be {len(names)} finite numbers, got {list(initial)}")


def check_interfaces(interfaces: list[str]) -> None:
    """ValueError unless ``interfaces`` are JTC's state interfaces this arm has: position, and velocity or not."""
    if "position" not in interfaces or not set(interfaces) <= set(KNOWN_INTERFACES) or \
            len(set(interfaces)) != len(interfaces):  # fmt: skip
        raise ValueError(f"parameter state_interfaces must be [position] or [position, velocity], got {interfaces}")


def points_of(msg: JointTrajectory) -> list[Point]:
    return [Point(seconds(p.time_from_start), p.positions, p.velocities, p.accelerations, p.effort) for p in msg.points]


class ActiveGoal:
    """The goal being played and the future its execute coroutine waits on for the result."""

    def __init__(self, handle: ServerGoalHandle, node: Node) -> None:
        self.handle = handle
        self._executor = node.executor
        self.ended = Future(executor=self._executor)

    def end(self, state: Literal["succeed", "abort", "canceled"], result: Result) -> None:
        """Set the goal's terminal ``state`` now and hand ``result`` to its execute coroutine. A goal nobody asked to
        cancel is marked cancelling first: rclcpp's ``canceled()`` does so for JTC, rclpy's only for a cancel request
        (the same rcl_action transition, taken here through the handle's own state update)."""
        if state == "canceled" and not self.handle.is_cancel_requested:
            self.handle._update_state(GoalEvent.CANCEL_GOAL)  # noqa: SLF001
        getattr(self.handle, state)()
        self.ended.set_result(result)
        self._executor.wake()


class ArmSim(Node):
    """Raises ValueError / FileNotFoundError (saying which parameter is wrong) when it cannot start."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        value = declare(self, PARAMETERS, ranges={"state_rate_hz": (1.0, 1000.0)}, read_only=list(PARAMETERS))
        try:
            check_joints(value["joint_names"], value["initial_positions"])
            check_interfaces(value["state_interfaces"])
            description = read_description(value["urdf_path"])
        except (ValueError, FileNotFoundError):
            super().destroy_node()  # half-built: nothing of its own to release yet
            raise
        self._joints: list[str] = list(value["joint_names"])
        self.declare_parameter("joints", self._joints, ParameterDescriptor(
            description="JTC's: the joints it plays (joint_names; a trajectory must name them all)",
            read_only=True))  # fmt: skip
        self._reads_velocity = "velocity" in value["state_interfaces"]
        # where a new trajectory starts: moving as the arm moves, or with a straight line (JTC with no velocity to read)
        self._no_start_velocity = not self._reads_velocity and not value["interpolate_from_desired_state"]
        self._lock = threading.Lock()  # the trajectory, the active goal and the last published state
        now = self._now()
        self._trajectory = Trajectory.hold(np.array(value["initial_positions"], dtype=np.float64), now)
        self._active: ActiveGoal | None = None
        self._starting: dict[bytes, ActiveGoal] = {}  # accepted goals whose execute coroutine has not yet begun
        self._last = (now, self._trajectory.sample(now))  # the last published (time, positions)
        self._description = self.create_publisher(String, value["description_topic"], LATCHED)
        self._description.publish(String(data=description))
        self._states = self.create_publisher(JointState, value["state_topic"], 10)
        # JTC's ~/controller_state (the command, which for a perfect servo is where the arm is)
        self._controller_state = self.create_publisher(JointTrajectoryControllerState, "~/controller_state", 10)
        group = ReentrantCallbackGroup()
        self.create_subscription(JointTrajectory, value["trajectory_topic"], self._on_trajectory, 10,
                                 callback_group=group)  # fmt: skip
        self._server = ActionServer(
            self, FollowJointTrajectory, value["action_name"], execute_callback=self._execute,
            goal_callback=self._on_goal, handle_accepted_callback=self._on_accepted,
            cancel_callback=self._on_cancel, callback_group=group, **ACTION_SERVER_QOS,
        )  # fmt: skip
        self.create_timer(1.0 / value["state_rate_hz"], self._tick, callback_group=group)

    def destroy_node(self) -> None:
        with self._lock:
            if self._active is not None:  # JTC's deactivation
                self._active.end("canceled", Result(error_code=Result.INVALID_GOAL, error_string=SHUTDOWN))
                self._active = None
        self._server.destroy()
        super().destroy_node()

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _rejection(self, msg: JointTrajectory) -> str | None:
        """Why a controller refuses ``msg`` (sizes first: nothing is read from an oversized one)."""
        too_large = oversized(len(msg.joint_names), len(msg.points))
        if too_large:
            return too_large
        return rejection(self._joints, msg.joint_names, points_of(msg), seconds(msg.header.stamp), self._now())

    def _play(self, msg: JointTrajectory) -> None:
        """Replace the trajectory by ``msg`` (valid), from where the arm is now. Call with the lock held."""
        now = self._now()
        self._trajectory = Trajectory.accepted(self._joints, msg.joint_names, points_of(msg), seconds(msg.header.stamp),
                                               now, self._trajectory.sample(now), self._trajectory.velocity(now),
                                               reads_velocity=not self._no_start_velocity)  # fmt: skip

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        reason = self._rejection(msg)
        if reason:
            self.get_logger().error(f"trajectory on the topic ignored: {reason}")
            return
        with self._lock:
            self._play(msg)

    def _on_goal(self, goal: FollowJointTrajectory.Goal) -> GoalResponse:
        reason = self._rejection(goal.trajectory)
        if reason:
            self.get_logger().error(f"goal rejected: {reason}")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_accepted(self, handle: ServerGoalHandle) -> None:
        with self._lock:
            if self._active is not None:
                self._active.end("canceled", Result(error_code=Result.INVALID_GOAL, error_string=PREEMPTED))
            self._play(handle.request.trajectory)
            self._active = self._starting[bytes(handle.goal_id.uuid)] = ActiveGoal(handle, self)
            handle.execute()

    def _on_cancel(self, handle: ServerGoalHandle) -> CancelResponse:
        """Accepted, as JTC does; the next tick holds the arm and ends the goal (rclpy marks it CANCELING only after
        this returns, and only a CANCELING goal may end CANCELED)."""
        self.get_logger().info("cancel requested: the arm will hold where it is")
        return CancelResponse.ACCEPT

    async def _execute(self, handle: ServerGoalHandle) -> Result:
        with self._lock:
            active = self._starting.pop(bytes(handle.goal_id.uuid))
        return await active.ended  # ended by the tick, a newer goal or the node's end

    def _tick(self) -> None:
        with self._lock:
            clock = self.get_clock().now()
            now = clock.nanoseconds * 1e-9
            active = self._active
            if active is not None and active.handle.is_cancel_requested:
                self._trajectory = Trajectory.hold(self._trajectory.sample(now), now)
                active.end("canceled", Result())
                active = self._active = None
            positions = self._trajectory.sample(now)
            last_time, last_positions = self._last
            velocities = (
                (positions - last_positions) / (now - last_time) if now > last_time else np.zeros_like(positions)
            )
            self._last = (now, positions)
            stamp = clock.to_msg()
            self._states.publish(JointState(header=Header(stamp=stamp), name=self._joints, position=positions.tolist(),
                                            velocity=velocities.tolist()))  # fmt: skip
            speeds = self._trajectory.velocity(now).tolist()  # the command's (the spline's slope)
            feedback = JointTrajectoryPoint(positions=positions.tolist(),
                                            velocities=speeds if self._reads_velocity else [])  # fmt: skip
            self._controller_state.publish(JointTrajectoryControllerState(
                header=Header(stamp=stamp), joint_names=self._joints, speed_scaling_factor=1.0, feedback=feedback,
                reference=JointTrajectoryPoint(positions=positions.tolist(), velocities=speeds),
                error=JointTrajectoryPoint(positions=[0.0] * len(self._joints))))  # fmt: skip
            if active is None:
                return
            self._feedback(active, now, positions, velocities, stamp)
            if self._trajectory.done(now):
                active.end("succeed", Result(error_code=Result.SUCCESSFUL, error_string=REACHED))
                self._active = None

    def _feedback(self, active: ActiveGoal, now: float, positions: np.ndarray, velocities: np.ndarray,
                  stamp: Any) -> None:  # fmt: skip
        """JTC's feedback: desired = actual (a perfect servo), so the error is zero."""
        since_start = Duration(nanoseconds=round((now - self._trajectory.start_s) * 1e9)).to_msg()
        desired = JointTrajectoryPoint(positions=positions.tolist(), time_from_start=since_start)
        actual = JointTrajectoryPoint(positions=positions.tolist(), velocities=velocities.tolist(),
                                      time_from_start=since_start)  # fmt: skip
        error = JointTrajectoryPoint(positions=[0.0] * len(self._joints), time_from_start=since_start)
        feedback = trajectory_feedback(FollowJointTrajectory.Feedback, self._joints, desired, actual, error,
                                       self._trajectory.index(now))  # fmt: skip
        feedback.header.stamp = stamp
        active.handle.publish_feedback(feedback)


def trajectory_feedback(feedback_type: type, joints: list[str], desired: JointTrajectoryPoint,
                        actual: JointTrajectoryPoint, error: JointTrajectoryPoint, index: int) -> Any:  # fmt: skip
    """A FollowJointTrajectory feedback of whichever shape this distribution's control_msgs has: the point being
    played (``index``) only where the message has the field (control_msgs 5+, Kilted; Humble's and Jazzy's have
    none, and a message refuses a field it does not have)."""
    feedback = feedback_type(joint_names=joints, desired=desired, actual=actual, error=error)
    if "index" in feedback.get_fields_and_field_types():
        feedback.index = index
    return feedback


def main(args: list[str] | None = None) -> int:
    """`ros2 run oxygen_ros arm_sim [--ros-args -p joint_names:="[...]" -p initial_positions:="[...]"]`."""
    return run(ArmSim, SingleThreadedExecutor, NODE_NAME, args)


if __name__ == "__main__":
    raise SystemExit(main())
