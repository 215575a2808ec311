"""Helpers of the arm tests that drive a simulated controller (test_arm_sim, test_bimanual)."""

import numpy as np
from rclpy.duration import Duration
from rclpy.time import Time
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from ros_harness import wait_until


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
