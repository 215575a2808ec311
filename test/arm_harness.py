"""Helpers of the arm tests that drive a simulated controller (test_arm_sim, test_bimanual)."""

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.time import Time
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from oxygen_ros.nodes import arm_io, gripper_io
from oxygen_ros.nodes.arm_io import COUNT_LISTS, NAME_LISTS, NUMBER_LISTS, ArmIO
from ros_harness import wait_until


def arm_io_for(node: Node, settings: dict | None = None, **lists) -> ArmIO:
    """instruction_node's side of the arm on ``node``: its defaults (joint states kept 60 s, a test's pauses
    aside), but ``settings`` and the array parameters ``lists``."""
    defaults = {name: default for name, (default, _) in (arm_io.PARAMETERS | gripper_io.PARAMETERS).items()}
    empty = {name: [] for name in (*NAME_LISTS, *NUMBER_LISTS, *COUNT_LISTS)}
    return ArmIO(node, defaults | {"input_timeout_s": 60.0} | (settings or {}), empty | lists, ReentrantCallbackGroup())


def trajectory(rows: list[tuple[float, np.ndarray]], names: list[str], stamp: float = 0.0) -> JointTrajectory:
    """``rows`` of (time from start s, positions) for ``names``, stamped ``stamp`` (0: start when taken)."""
    msg = JointTrajectory(joint_names=list(names))
    msg.header.stamp = Time(seconds=stamp).to_msg()
    msg.points = [JointTrajectoryPoint(positions=[float(x) for x in p], time_from_start=Duration(seconds=t).to_msg())
                  for t, p in rows]  # fmt: skip
    return msg


def run_on(owner, coroutine):
    """Run one of ArmIO's coroutines on the executor of ``owner.client`` (a node), as instruction_node's goals do;
    its result."""
    task = owner.client.executor.create_task(coroutine)
    wait_until(task.done, 10.0, "the controller's answer")
    return task.result()
