"""The simulated bringup closes the loop for a VLA trained on the simulated robot: ``bringup.Graph`` (what `oxygen-ros
demo` runs; `up` and the launch file's `use_sim:=true` start the same nodes with the same oxygen_ros/simulation.py
parameters) brings up the robot's controllers beside camera_sim (the SO-100: arm_sim with the five arm joints on a
FollowJointTrajectory controller and gripper_sim with the jaw on a GripperCommand one; the bimanual bi-SO-100
(`sim_robot:=bi_so100`, `up --sim-robot bi_so100`): such a pair per arm), and the instruction node maps the
checkpoint's six action dimensions per arm onto them: a FollowInstruction goal succeeds with every arm and jaw moved
inside the URDF's limits, each on its own controller, every trajectory traced. Only the robot's YAML changes (a
longer input timeout and 20 Hz joint states for a loaded CPU; every side controller reads its executable's section),
as a user's would."""

import re

import numpy as np
import pytest
import yaml
from action_msgs.msg import GoalStatus
from inference_client import Capture
from oxygen_ros.action import FollowInstruction
from oxygen_ros.msg import ChunkTrace
from pi05_folders import SO100_LOWER, SO100_UPPER, tiny_shapes, write_so100_checkpoint
from ros_harness import send_goal, wait_until
from sensor_msgs.msg import JointState

from oxygen_ros.bringup import Graph
from oxygen_ros.share import default_config
from oxygen_ros.simulation import parameters

INSTRUCTION = "pick up the red block"
ENGINE = {"action_period_s": 0.3, "kv_cache_bytes": 64 << 20, "max_model_len": 1024}
ARMS = {"so100": 1, "bi_so100": 2}


@pytest.fixture(scope="module", params=list(ARMS))
def sim(request, ros_domain_id, tmp_path_factory):
    robot = request.param
    folder = tmp_path_factory.mktemp(f"pi05-{robot}")
    write_so100_checkpoint(folder, INSTRUCTION, ARMS[robot])
    config = yaml.safe_load(default_config().read_text())
    config["instruction_node"]["ros__parameters"] |= {"input_timeout_s": 1.0, "narration_period_s": 30.0}
    for controller in ("arm_sim", "gripper_sim"):  # 20 Hz joint states: four controllers share this process's cores
        config[controller]["ros__parameters"]["state_rate_hz"] = 20.0
    path = folder / "robot.yaml"
    path.write_text(yaml.safe_dump(config))
    joints = parameters(robot)["instruction_node"]["action_joint_names"]
    with tiny_shapes(), Graph(path, str(folder), ENGINE, domain_id=ros_domain_id, robot=robot) as graph:
        client = graph.add_client("sim_arm_test")
        client.robot, client.joints = robot, joints
        client.states = Capture(client, JointState, "/joint_states", 2000)
        client.traces = Capture(client, ChunkTrace, "/arm/chunk_trace", 100)
        wait_until(lambda: {n for m in client.states.messages for n in m.name} == set(joints), 20.0,
                   "every arm's and jaw's joint states")  # fmt: skip
        wait_until(lambda: graph.inference.held_observations(with_images=True) > 0, 20.0,  # a VLA needs pixels
                   "a camera frame with its images in the inference node")
        yield client


def test_a_checkpoint_for_the_simulated_robot_drives_every_arm_and_jaw(sim):
    before = len(sim.states.messages)
    goal = FollowInstruction.Goal(instruction=INSTRUCTION, rate_hz=5.0, duration_s=4.0)
    out = send_goal(sim, FollowInstruction, "/follow_instruction", goal).result(timeout=120.0)
    # (one chunk late on a loaded 2-core machine is timing, not the robot's wiring: test_instruction_vla holds the rate;
    # the goal's last chunk late, played but the arm run short, is the goal's honest failure all the same)
    last_late = out.status == GoalStatus.STATUS_ABORTED and re.fullmatch(
        r"the goal's last 1 chunk\(s\) missed: the chunk came [0-9.]+ s late", out.result.message)  # fmt: skip
    assert out.status == GoalStatus.STATUS_SUCCEEDED or last_late, out.result.message
    assert out.result.chunks_sent >= 2 and out.result.chunks_missed <= 1, out.result
    wait_until(lambda: len(sim.traces.messages) >= out.result.chunks_sent, 5.0, "every chunk's trace")
    lower, upper = np.tile(SO100_LOWER, ARMS[sim.robot]), np.tile(SO100_UPPER, ARMS[sim.robot])
    mapping = parameters(sim.robot)["instruction_node"]
    jaws = mapping["gripper_joint_names"]
    arm = [j for j in sim.joints if j not in jaws]
    ends = np.cumsum(mapping.get("trajectory_joint_counts", [len(arm)]))
    groups = [arm[end - count : end] for count, end in zip(np.diff(ends, prepend=0), ends)] + [[jaw] for jaw in jaws]
    states = sim.states.messages[before:]
    assert {tuple(m.name) for m in states} == {tuple(g) for g in groups}, "each controller publishes its own joints"
    for joints in groups:
        columns = [sim.joints.index(j) for j in joints]
        q = np.array([m.position for m in states if list(m.name) == joints])
        assert len(q) > 10, joints
        assert np.abs(q - q[0]).max() > 1e-4, f"{joints} did not move"
        assert (q >= lower[columns] - 1e-9).all() and (q <= upper[columns] + 1e-9).all(), joints
