"""A bimanual robot as ros2_control runs one (ALOHA, bi-SO-100): a joint_trajectory_controller per arm, so one
14-wide chunk (or 12 here: two SO-100s, jaws inside their arms' trajectories) is split among them by
`trajectory_joint_counts`. Two arm_sim nodes, one per namespace, play the arms on one /joint_states and one URDF:
a plan moves both, a hold stops both, another client taking one arm is a fault of that arm alone (the other is
stopped, the taken one left to its new client), and each controller's own parameters are read."""

import threading
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from control_msgs.action import FollowJointTrajectory
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState

from oxygen_ros import share
from oxygen_ros.control.arm.safety import SafeTargets
from oxygen_ros.nodes.arm_io import ArmIO
from oxygen_ros.nodes.arm_sim import PREEMPTED, SO100_JOINTS, ArmSim
from arm_harness import arm_io_for, run_on, trajectory
from ros_harness import make_context, send_goal, spin_nodes, wait_until

SIDES = ("left", "right")
JOINTS = [f"{side}_{joint}" for side in SIDES for joint in SO100_JOINTS]
ACTIONS = [f"/{side}/arm_controller/follow_joint_trajectory" for side in SIDES]


class Robot:
    """Two arm_sims (/left, /right) and a client node recording /joint_states by joint name."""

    def __init__(self, context, urdf: str) -> None:
        self.arms = [ArmSim(context=context, namespace=side, parameter_overrides=[
            Parameter("joint_names", value=[f"{side}_{joint}" for joint in SO100_JOINTS]),
            Parameter("state_topic", value="/joint_states"), Parameter("urdf_path", value=urdf),
            Parameter("description_topic", value="/robot_description" if side == "left" else "description"),
        ]) for side in SIDES]  # fmt: skip
        self.client = Node("bimanual_client", context=context)
        self.position: dict[str, float] = {}
        self.velocity: dict[str, float] = {}
        self.client.create_subscription(JointState, "/joint_states", self._on_state, 100)

    def _on_state(self, msg: JointState) -> None:
        self.position.update(zip(msg.name, msg.position))
        self.velocity.update(zip(msg.name, msg.velocity))

    def where(self) -> np.ndarray:
        wait_until(lambda: all(name in self.position for name in JOINTS), 10.0, "both arms' joint states")
        return np.array([self.position[name] for name in JOINTS])

    def still(self, side: str) -> bool:
        return all(abs(self.velocity[name]) < 1e-9 for name in JOINTS if name.startswith(side))


@pytest.fixture(scope="module")
def robot(ros_domain_id):
    context = make_context(ros_domain_id)
    robot = Robot(context, str(share.config_file("sim_bimanual.urdf")))  # two SO-100s, left_ and right_
    try:
        with spin_nodes(context, *robot.arms, robot.client):
            yield robot
    finally:
        context.try_shutdown()


def arms_io(robot: Robot, counts: tuple[int, int] = (6, 6)) -> ArmIO:
    """instruction_node's side (its defaults) for the 12 joints, ``counts`` to each arm's controller, once both are
    there."""
    io = arm_io_for(robot.client, action_joint_names=JOINTS, trajectory_actions=ACTIONS,
                    trajectory_joint_counts=list(counts))  # fmt: skip
    assert [c.arm_names for c in io.controllers] == [tuple(JOINTS[: counts[0]]), tuple(JOINTS[counts[0]:])]
    assert run_on(robot, io.missing(10.0)) == ""
    wait_until(lambda: io.readings._described, 10.0, "the URDF")
    return io


def ramp(start: np.ndarray, left: float, right: float, seconds: float) -> SafeTargets:
    """From ``start`` to each arm's shoulder_pan moved by ``left`` / ``right`` in ``seconds`` (at rest there)."""
    end = start.copy()
    end[0], end[6] = end[0] + left, end[6] + right
    return SafeTargets(np.vstack([start, end]), np.zeros((2, len(start))), np.array([0.2, seconds]), 0)


def test_one_plan_moves_both_arms_each_on_its_own_controller(robot):
    """Each controller gets the trajectory of its own six joints (a joint_trajectory_controller refuses joints it
    does not own); both play it, and each controller's parameters are read and agree."""
    io = arms_io(robot)
    start = robot.where()
    assert run_on(robot, io.misconfigured(io.readings.limits())) == ""
    assert run_on(robot, io.send(io.readings.now(), ramp(start, 0.3, -0.3, 1.0))) == ""
    wait_until(lambda: np.allclose(robot.where()[[0, 6]], start[[0, 6]] + [0.3, -0.3], atol=1e-6), 5.0, "both moved")
    assert np.allclose(np.delete(robot.where(), [0, 6]), np.delete(start, [0, 6]), atol=1e-6)  # nothing else did
    assert run_on(robot, io.stop_answered(5.0)) == ""
    io.destroy()


def test_how_far_apart_the_arms_took_a_plan_is_measured(robot):
    """The right arm's trajectory goes out 0.6 s after the left's (a slow delivery, a busy executor): each
    controller starts its arm as it takes it, so the arms play the plan that much out of step, and the send
    measures it (ChunkTrace.taken_spread_ms)."""
    io = arms_io(robot)
    start = robot.where()
    right = io.controllers[1]
    dispatch = right.dispatch
    right.dispatch = lambda safe: (time.sleep(0.6), dispatch(safe))[1]
    end = start.copy()
    end[0], end[6] = end[0] + 0.1, end[6] - 0.1
    plan = SafeTargets(np.vstack([start, end]), np.zeros((2, len(start))), np.array([1.5, 2.5]), 0)
    assert run_on(robot, io.send(io.readings.now(), plan)) == ""
    assert 0.45 <= io.taken_spread_s < 1.0, io.taken_spread_s  # (the left's accept may come a little late)
    wait_until(lambda: np.allclose(robot.where()[[0, 6]], end[[0, 6]], atol=1e-6), 5.0, "both moved")
    io.destroy()


def test_a_split_the_controllers_do_not_play_refuses_naming_the_joints(robot):
    """trajectory_joint_counts [5, 7]: the left arm's jaw would go to the right arm's controller. The controllers'
    own `joints` say so before anything moves (the first one asked, the left, names its jaw that the trajectory
    lacks; either would reject its trajectory, maybe after the other took its)."""
    io = arms_io(robot, counts=(5, 7))
    message = run_on(robot, io.misconfigured(io.readings.limits()))
    assert message.startswith("/left/arm_sim also plays joints ['left_gripper'] and takes only trajectories of all "
                              "its joints"), message  # fmt: skip
    io.destroy()


def test_a_hold_stops_both_arms(robot):
    io = arms_io(robot)
    start = robot.where()
    assert run_on(robot, io.send(io.readings.now(), ramp(start, 1.0, -1.0, 10.0))) == ""
    # both on their way (0.02 rad is 1 s into the 10 s ramp: each starts when its controller takes it, which on two
    # busy cores came a quarter second apart; a fixed sleep of 1 s found one arm 0.006 rad out)
    wait_until(lambda: np.all(np.abs(robot.where()[[0, 6]] - start[[0, 6]]) > 0.02), 10.0, "both arms on their way")
    io.hold(None, print)
    assert run_on(robot, io.stop_answered(5.0)) == ""
    wait_until(lambda: robot.still("left") and robot.still("right"), 5.0, "both arms standing")
    moved = np.abs(robot.where()[[0, 6]] - start[[0, 6]])
    assert np.all((moved > 0.02) & (moved < 0.5)), moved  # stopped on the way, far from the plan's 1.0
    io.destroy()


def test_another_client_taking_one_arm_is_its_fault_and_the_other_arm_is_stopped(robot):
    """An operator's trajectory preempts ours on the left arm: the fault names the left controller, taken over; the
    hold then stops the right arm and sends the left nothing, so the operator's trajectory plays to its end."""
    io = arms_io(robot)
    start = robot.where()
    assert run_on(robot, io.send(io.readings.now(), ramp(start, 0.5, -1.0, 10.0))) == ""
    operator_target = start[:6] - 0.1
    operator = send_goal(robot.client, FollowJointTrajectory, ACTIONS[0], FollowJointTrajectory.Goal(
        trajectory=trajectory([(1.0, operator_target)], JOINTS[:6])))  # fmt: skip
    wait_until(lambda: any(c._fault is not None for c in io.controllers), 5.0, "our left trajectory's end")
    (fault,) = io.take_faults()
    assert fault.taken_over and fault.target == ACTIONS[0] and PREEMPTED in fault.why, fault
    io.hold(None, print)
    assert run_on(robot, io.stop_answered(5.0)) == ""
    assert operator.result(timeout=5.0).status == GoalStatus.STATUS_SUCCEEDED
    wait_until(lambda: np.allclose(robot.where()[:6], operator_target, atol=1e-6), 5.0, "the operator's target")
    wait_until(lambda: robot.still("right"), 5.0, "the right arm standing")
    assert abs(robot.where()[6] - start[6]) < 0.5  # stopped long before its plan's -1.0
    io.destroy()


def test_one_arm_refusing_is_answered_at_once_and_the_arm_that_took_it_is_stopped(robot):
    """The right arm's controller rejects its share (a last point still moving: JTC's rule), the left's takes its:
    the send says so as soon as the rejection comes (not after answer_wait_s) and stops the left arm on its way by
    itself (the arms move together or not at all, whatever the caller does next: a goal that ended meanwhile
    holds nothing)."""
    io = arms_io(robot)
    start = robot.where()
    plan = ramp(start, 1.0, -1.0, 10.0)
    plan.velocities[-1, 6] = 0.1
    sent_at = time.monotonic()
    refused = run_on(robot, io.send(io.readings.now(), plan))
    assert refused == f"{ACTIONS[1]} rejected the trajectory (see the controller's log)", refused
    assert time.monotonic() - sent_at < 0.9  # answer_wait_s is 1 s
    assert run_on(robot, io.stop_answered(5.0)) == ""
    time.sleep(1.0)  # past the plan's first 0.2 s, where it stands still anyway
    wait_until(lambda: robot.still("left"), 5.0, "the left arm standing")
    assert abs(robot.where()[0] - start[0]) < 0.05  # stopped about where it was, far from its plan's +1.0
    io.destroy()


def test_a_hold_while_the_plan_goes_out_comes_after_every_arms_trajectory(robot):
    """A hold (the goal ending on the clock thread) while the plan is being handed to the controllers waits until
    both have it, so both are stopped: it never falls between them, leaving the second arm playing a plan its goal
    no longer watches."""
    io = arms_io(robot)
    start = robot.where()
    right, holder = io.controllers[1], threading.Thread(target=io.hold, args=(None, print))
    dispatch, waited = right.dispatch, []

    def hold_meanwhile(safe):
        holder.start()
        holder.join(0.3)
        waited.append(holder.is_alive())  # it waits for the right arm's trajectory to go out too
        return dispatch(safe)

    right.dispatch = hold_meanwhile
    run_on(robot, io.send(io.readings.now(), ramp(start, 1.0, -1.0, 10.0)))
    holder.join(5.0)
    assert waited == [True] and not holder.is_alive()
    assert run_on(robot, io.stop_answered(5.0)) == ""
    time.sleep(1.0)
    wait_until(lambda: robot.still("left") and robot.still("right"), 5.0, "both arms standing")
    assert np.all(np.abs(robot.where()[[0, 6]] - start[[0, 6]]) < 0.1), robot.where()[[0, 6]] - start[[0, 6]]
    io.destroy()


def test_a_plan_held_before_it_goes_out_is_sent_to_no_arm(robot):
    """A hold that came while the plan was made ready (its caller's mark says so when the sending lock is taken):
    nothing goes, so no trajectory planned before the hold plays after its stop as if it were newer."""
    io = arms_io(robot)
    start = robot.where()
    refused = run_on(robot, io.send(io.readings.now(), ramp(start, 0.3, -0.3, 1.0), wanted=lambda: False))
    assert refused == "the arm was told to hold while the trajectory was made ready: nothing sent"
    time.sleep(1.5)
    assert np.allclose(robot.where()[[0, 6]], start[[0, 6]], atol=1e-6)
    io.destroy()


def test_an_arm_controller_that_is_not_there_is_named_and_nothing_is_sent(robot):
    """One arm's controller missing (a typo, a controller not loaded): the goal is refused naming it, and neither
    arm gets the plan (the arms move together or not at all)."""
    broken = arm_io_for(robot.client, action_joint_names=JOINTS, trajectory_joint_counts=[6, 6],
                        trajectory_actions=[ACTIONS[0], "/rihgt/arm_controller/follow_joint_trajectory"])  # fmt: skip
    assert run_on(robot, broken.missing(0.5)) == "/rihgt/arm_controller/follow_joint_trajectory"
    start = robot.where()
    refused = run_on(robot, broken.send(broken.readings.now(), ramp(start, 0.3, 0.3, 1.0)))
    assert refused.startswith("/rihgt/arm_controller/follow_joint_trajectory is not there"), refused
    time.sleep(0.5)
    assert np.allclose(robot.where(), start, atol=1e-9)
    broken.destroy()
