"""The simulated bringup closes the loop for a VLA trained on an SO-100: ``bringup.Graph`` (what `oxygen-ros demo`
runs; `up` and the launch file's `use_sim:=true` start the same nodes with the same oxygen_ros/simulation.py
parameters) brings up arm_sim (the five arm joints on a FollowJointTrajectory controller) and gripper_sim (the jaw on
a GripperCommand one) beside camera_sim, and the instruction node maps the checkpoint's six action dimensions onto
them: a FollowInstruction goal succeeds with the arm and the jaw moved inside config/sim_arm.urdf's limits, every
trajectory traced. Only the robot's YAML changes (a longer input timeout for a loaded CPU), as a user's would."""

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
from oxygen_ros.simulation import JAW, SO100_JOINTS

INSTRUCTION = "pick up the red block"
ENGINE = {"action_period_s": 0.3, "kv_cache_bytes": 64 << 20, "max_model_len": 1024}


@pytest.fixture(scope="module")
def sim(ros_domain_id, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pi05-so100")
    write_so100_checkpoint(folder, INSTRUCTION)
    config = yaml.safe_load(default_config().read_text())
    config["instruction_node"]["ros__parameters"] |= {"input_timeout_s": 1.0, "narration_period_s": 30.0}
    path = folder / "robot.yaml"
    path.write_text(yaml.safe_dump(config))
    with tiny_shapes(), Graph(path, str(folder), ENGINE, domain_id=ros_domain_id) as graph:
        client = graph.add_client("sim_arm_test")
        client.states = Capture(client, JointState, "/joint_states", 1000)
        client.traces = Capture(client, ChunkTrace, "/arm/chunk_trace", 100)
        wait_until(lambda: {n for m in client.states.messages for n in m.name} == set(SO100_JOINTS), 20.0,
                   "the arm's and the jaw's joint states")  # fmt: skip
        wait_until(lambda: graph.inference.held_observations(with_images=True) > 0, 20.0,  # a VLA needs pixels
                   "a camera frame with its images in the inference node")
        yield client


def test_an_so100_checkpoint_drives_the_simulated_arm_and_jaw(sim):
    before = len(sim.states.messages)
    goal = FollowInstruction.Goal(instruction=INSTRUCTION, rate_hz=5.0, duration_s=4.0)
    out = send_goal(sim, FollowInstruction, "/follow_instruction", goal).result(timeout=120.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert out.result.chunks_sent >= 2 and out.result.chunks_missed == 0, out.result
    wait_until(lambda: len(sim.traces.messages) >= out.result.chunks_sent, 5.0, "every chunk's trace")
    jaw = SO100_JOINTS.index(JAW)
    for joints, lower, upper in ((list(SO100_JOINTS[:jaw]), SO100_LOWER[:jaw], SO100_UPPER[:jaw]),
                                 ([JAW], SO100_LOWER[jaw:], SO100_UPPER[jaw:])):  # arm_sim's states, gripper_sim's
        q = np.array([m.position for m in sim.states.messages[before:] if list(m.name) == joints])
        assert len(q) > 10, joints
        assert np.abs(q - q[0]).max() > 1e-4, f"{joints} did not move"
        assert (q >= lower - 1e-9).all() and (q <= upper + 1e-9).all(), joints
