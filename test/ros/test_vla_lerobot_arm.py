"""A faithful pi0.5 checkpoint in LeRobot's layout (tiny, random weights from stock transformers modules, QUANTILES
stats, three camera keys, a 6-dim state and action) drives the SO-100-shaped simulated arm through the whole ROS
graph, as ros2_control runs one: five joints on a trajectory controller (`arm_sim`, the limits of
config/sim_arm.urdf) and the jaw on its own GripperCommand controller (`gripper_sim`). Two cameras publish under the
robot's own names, one is missing; `observation_node` pairs them with the joint state; `instruction_node` asks for
chunks with the measured state; the inference node maps the camera keys onto the checkpoint's slots (their order
against the reference: test_pi05_engine). Checked: the
goal succeeds with the arm and the jaw moved inside the URDF's limits and speeds (the trajectory controller refuses
a trajectory naming the jaw); every chunk names the keyed observation it came from; that observation, asked about
again, has the image tokens of exactly its two cameras; a camera key the checkpoint does not read is
INVALID_ARGUMENT naming it; with the jaw's controller switched off the goal fails, naming the jaw (and what its
manager lists it as)."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from control_msgs.action import GripperCommand
from control_msgs.msg import GripperCommand as JawCommand
from inference_client import Capture
from manager_stand_in import ControllerManager
from oxygen_ros.action import FollowInstruction
from oxygen_ros.msg import ChunkTrace
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.srv import Infer
from pi05_folders import (
    SO100_LOWER, SO100_MIDDLE, SO100_SPEED, SO100_UPPER, tiny_shapes, write_so100_checkpoint,
)  # fmt: skip
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import make_context, send_goal, set_parameter, spin_nodes, wait_for, wait_until
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Header

from oxygen_ros.nodes.arm_sim import SO100_JOINTS, ArmSim
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.gripper_sim import GripperSim
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.observation_node import ObservationNode
from oxygen_ros.simulation import SO100_ACCELERATION

INSTRUCTION = "pick up the red block"
PERIOD_S = 0.3  # the chunk period: a loaded CPU's chunk arrives with most of its steps ahead
CAMERA_HZ = 10.0
CAMERAS = {"base_0_rgb": "/rig/front/image_raw", "left_wrist_0_rgb": "/rig/wrist/image_raw"}  # right wrist: none
TOKENS_PER_IMAGE = 16  # the tiny SigLIP: (32 / 8)^2 patches
LOWER, UPPER, SPEED, MIDDLE = SO100_LOWER, SO100_UPPER, SO100_SPEED, SO100_MIDDLE
JAW = SO100_JOINTS.index("gripper")


class Cameras:
    """Two cameras publishing frames under the robot's names at CAMERA_HZ, stamped alike on the node clock."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._publishers = [node.create_publisher(Image, topic, qos_profile_sensor_data) for topic in CAMERAS.values()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = np.random.default_rng(0)
        while not self._stop.wait(1.0 / CAMERA_HZ):
            stamp = self._node.get_clock().now().to_msg()
            for publisher in self._publishers:
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                publisher.publish(rgb_to_image(pixels, Header(stamp=stamp, frame_id="camera")))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def robot(ros_domain_id, tmp_path_factory) -> Iterator:
    folder = tmp_path_factory.mktemp("pi05-so100")
    write_so100_checkpoint(folder, INSTRUCTION)
    context = make_context(ros_domain_id)
    with tiny_shapes():
        inference = InferenceNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            "model": str(folder), "kv_cache_bytes": 64 << 20, "max_model_len": 1024, "action_period_s": PERIOD_S,
            "observation_ring": 64}.items()])  # fmt: skip
        observation = ObservationNode(context=context, parameter_overrides=[
            Parameter("camera_topics", value=[f"{key}={topic}" for key, topic in CAMERAS.items()]),
            Parameter("state_joint_names", value=SO100_JOINTS), Parameter("input_timeout_s", value=1.0)])  # fmt: skip
        arm = ArmSim(context=context, parameter_overrides=[
            Parameter("joint_names", value=SO100_JOINTS[:JAW]), Parameter("initial_positions", value=MIDDLE[:JAW].tolist()),
            Parameter("state_rate_hz", value=20.0)])  # fmt: skip
        jaw = GripperSim(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            "joint_name": SO100_JOINTS[JAW], "initial_position": MIDDLE[JAW], "lower": LOWER[JAW], "upper": UPPER[JAW],
            "velocity": SPEED[JAW], "state_rate_hz": 20.0}.items()])  # fmt: skip
        instruction = InstructionNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in {
            "action_joint_names": SO100_JOINTS, "state_joint_names": SO100_JOINTS, "gripper_joint_names": ["gripper"],
            "joint_acceleration_limits": [SO100_ACCELERATION] * len(SO100_JOINTS),
            "gripper_max_effort": 10.0, "gripper_deadband": 0.2, "input_timeout_s": 1.0, "max_start_jump": 0.2,
            "narration_period_s": 30.0, "max_new_tokens": 2}.items()])  # fmt: skip
        client = Node("lerobot_arm_test_client", context=context)
        cameras = Cameras(client)
        try:
            with spin_nodes(context, inference, observation, arm, jaw, instruction, client, num_threads=6):
                assert inference.trigger_configure() == TransitionCallbackReturn.SUCCESS
                assert inference.trigger_activate() == TransitionCallbackReturn.SUCCESS
                client.observations = Capture(client, ObservationMsg, "/oxygen/observation", 1000)
                client.states = Capture(client, JointState, "/joint_states", 1000)
                client.traces = Capture(client, ChunkTrace, "/arm/chunk_trace", 100)
                wait_until(lambda: client.observations.messages and client.states.messages, 20.0,
                           "observations with the arm's state")  # fmt: skip
                yield client
        finally:
            cameras.stop()
            context.try_shutdown()


def test_a_lerobot_checkpoint_drives_the_arm_from_keyed_cameras_and_its_state(robot):
    before_states, before_traces = len(robot.states.messages), len(robot.traces.messages)
    out = _follow(robot, 5.0).result(timeout=120.0)
    assert out.status == GoalStatus.STATUS_SUCCEEDED, out.result.message
    assert out.result.chunks_sent >= 2, out.result
    for joints, lower, upper, speed, middle in ((SO100_JOINTS[:JAW], LOWER[:JAW], UPPER[:JAW], SPEED[:JAW],
                                                 MIDDLE[:JAW]), (["gripper"], LOWER[JAW:], UPPER[JAW:], SPEED[JAW:],
                                                                  MIDDLE[JAW:])):  # fmt: skip
        msgs = [m for m in robot.states.messages[before_states:] if list(m.name) == joints]  # arm_sim's, gripper_sim's
        q = np.array([m.position for m in msgs])
        times = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9 for m in msgs])
        assert np.abs(q - middle).max() > 1e-4, f"{joints} moved"
        assert (q >= lower).all() and (q <= upper).all()
        speeds = np.abs(np.diff(q, axis=0)) / np.maximum(np.diff(times), 1e-3)[:, None]
        assert (speeds <= speed * 1.01).all()
    wait_until(lambda: len(robot.traces.messages) - before_traces >= out.result.chunks_sent, 5.0, "every trace")
    published = {o.observation_id: o for o in robot.observations.messages}
    for trace in robot.traces.messages[before_traces:]:
        seen = published[trace.observation_id]  # the keyed observation observation_node published
        assert list(seen.image_keys) == list(CAMERAS) and len(seen.state) == len(SO100_JOINTS)
        assert (trace.frame_stamp.sec, trace.frame_stamp.nanosec) == (seen.header.stamp.sec, seen.header.stamp.nanosec)


def _jaw_to_the_middle(robot) -> None:
    """The jaw in the middle again (a goal sent as gripper_sim is switched on again, before its timer saw it, is
    the goal it kept, ended ABORTED then: sent once more)."""
    for _ in range(2):
        back = send_goal(robot, GripperCommand, "/gripper_controller/gripper_cmd", GripperCommand.Goal(
            command=JawCommand(position=float(MIDDLE[JAW]), max_effort=10.0)))  # fmt: skip
        if back.result(timeout=10.0).status == GoalStatus.STATUS_SUCCEEDED:
            return
    raise AssertionError("the jaw did not go back to the middle")


@contextmanager
def _jaw_controller_switched_off(robot) -> Iterator[None]:
    """The jaw in the middle, then its controller deactivated (`ros2 control switch_controllers --deactivate`: its
    action server stays and takes goals, nothing moves the jaw, no goal ends) until the block ends."""
    _jaw_to_the_middle(robot)
    set_parameter(robot, "/gripper_sim", "active", False)
    try:
        yield
    finally:
        set_parameter(robot, "/gripper_sim", "active", True)


@contextmanager
def _controller_manager(robot, states: dict[str, str]) -> Iterator[ControllerManager]:
    """ros2_control's controller manager listing ``states``, answering list_controllers until the block ends."""
    manager = ControllerManager(robot.context, "/", states)
    with spin_nodes(robot.context, manager):
        wait_until(lambda: "/controller_manager/list_controllers" in dict(robot.get_service_names_and_types()), 5.0,
                   "the manager's list_controllers")  # fmt: skip
        yield manager


def _follow(robot, duration_s: float):
    goal = FollowInstruction.Goal(instruction=INSTRUCTION, rate_hz=5.0, duration_s=duration_s)
    return send_goal(robot, FollowInstruction, "/follow_instruction", goal)


def _the_jaw_did_not_move(out) -> str:
    """The goal's message, once it says the jaw never moved (ABORTED)."""
    assert out.status == GoalStatus.STATUS_ABORTED, out.result.message
    assert out.result.message.startswith("the gripper did not move: its plan took gripper "), out.result.message
    return out.result.message


def test_a_jaw_whose_controller_is_switched_off_fails_the_goal(robot):
    """The gripper's controller switched off: the arm moves, the jaw the plan sends 0.4 away never does while our
    goal stands past the controller's stall timeout unanswered, so the goal does not succeed, and says why."""
    with _jaw_controller_switched_off(robot):
        out = _follow(robot, 6.0).result(timeout=120.0)
    assert "/gripper_controller/gripper_cmd kept a goal" in _the_jaw_did_not_move(out)


def test_a_silent_jaw_controller_is_named_by_its_managers_word_read_while_it_was_silent(robot):
    """The jaw's controller takes goals and ends none; its manager lists it active when the goal starts (the goal's
    check lets it through), then inactive: asked while the controller stays silent, it is what the failure names,
    with the command that activates it (what `unmoved` says of each answer: test_arm_tracking)."""
    with _jaw_controller_switched_off(robot), \
            _controller_manager(robot, {"arm_sim": "active", "gripper_sim": "active"}) as manager:  # fmt: skip
        before = len(robot.traces.messages)
        handle = _follow(robot, 6.0)
        wait_until(lambda: len(robot.traces.messages) > before, 60.0, "the goal's first chunk on the arm")
        manager.states["gripper_sim"] = "inactive"  # (past the goal's own check, which found it active)
        out = handle.result(timeout=120.0)
    said = _the_jaw_did_not_move(out)
    assert "; /gripper_sim is inactive, not active (/controller_manager lists it so)" in said


def test_a_jaw_controller_its_manager_lists_inactive_refuses_the_goal_before_anything_moves(robot):
    """With ros2_control's controller manager to ask (listing the arm's and the jaw's controllers), the deactivated
    jaw controller is named before any chunk goes out: FAILED_PRECONDITION, nothing sent."""
    with _controller_manager(robot, {"arm_sim": "active", "gripper_sim": "inactive"}):
        out = _follow(robot, 4.0).result(timeout=120.0)
    assert (out.status, out.result.error_code, out.result.chunks_sent) == \
        (GoalStatus.STATUS_ABORTED, "FAILED_PRECONDITION", 0), out.result.message  # fmt: skip
    assert out.result.message.startswith("/gripper_sim is inactive, not active (/controller_manager lists it so)")


def _infer(robot: Node, request: Infer.Request) -> Infer.Response:
    client = robot.create_client(Infer, "/oxygen/infer")
    assert client.wait_for_service(timeout_sec=10.0)
    return wait_for(client.call_async(request), 60.0)


def test_the_checkpoint_reads_exactly_the_cameras_it_names(robot):
    """The newest observation's two keyed cameras fill two of the checkpoint's three slots: its prompt holds one
    image's tokens more than the same observation with the wrist camera dropped (a missing camera adds none), and the
    same pixels under a key the checkpoint does not read are refused, naming the key."""
    latest = robot.observations.messages[-1]
    state = list(latest.state)

    def ask(**observation) -> Infer.Response:
        return _infer(robot, Infer.Request(task_id="probe", task_type="instruction", prompt=INSTRUCTION,
                                           want_actions=True, max_new_tokens=1, state=state, **observation))  # fmt: skip

    both = ask(observation_id=latest.observation_id)
    assert both.success, both.message
    assert both.observation_id == latest.observation_id and both.actions.action_dim == len(SO100_JOINTS)
    one = ask(observation=[ObservationMsg(images=[latest.images[0]], image_keys=["base_0_rgb"], state=state)])
    assert one.success, one.message
    assert both.prompt_tokens - one.prompt_tokens == TOKENS_PER_IMAGE and one.prompt_tokens > TOKENS_PER_IMAGE
    bad = ObservationMsg(images=list(latest.images), image_keys=["gripper_cam", "left_wrist_0_rgb"], state=state)
    refused = ask(observation=[bad])
    assert refused.error_code == "INVALID_ARGUMENT" and "image_keys[0] 'gripper_cam'" in refused.message
