"""A fleet on one inference node, through real rclpy nodes and the real SmolLM2: two robots under two namespaces
publish different frames, the node keeps each robot's observations apart, and a request is only ever answered about
the asking robot's frames (its newest for an empty observation_id; another robot's id is NOT_FOUND)."""

import numpy as np
import pytest
from inference_client import MODEL_TIMEOUT, infer
from oxygen_ros.srv import AskQuestion
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import call_service, make_context, spin_nodes, wait_until
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from task_graph import INFERENCE

from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.infer_client import inference_at
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros.observations import content_id

PRIVATE_CAMERA = "camera/private"
FRAMES = {"robot1": np.full((32, 48, 3), (200, 30, 30), np.uint8), "robot2": np.full((32, 48, 3), (30, 30, 200), np.uint8)}


@pytest.fixture(scope="module")
def fleet(ros_domain_id):
    context = make_context(ros_domain_id)
    overrides = INFERENCE | {"robots": ["robot1", "/robot2/"]}
    inference = InferenceNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
    # robot1's VQA node on a camera of its own, whose frames the inference node never receives
    vqa = VqaNode(context=context, namespace="robot1", cli_args=inference_at("/"),
                  parameter_overrides=[Parameter("camera_topic", value=PRIVATE_CAMERA)])  # fmt: skip
    client = Node("fleet_test_client", context=context)
    try:
        with spin_nodes(context, inference, vqa, client, num_threads=4):
            assert inference.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert inference.trigger_activate() == TransitionCallbackReturn.SUCCESS
            cameras = {ns: client.create_publisher(Image, f"/{ns}/camera/image_raw", qos_profile_sensor_data)
                       for ns in FRAMES}  # fmt: skip
            cameras["private"] = client.create_publisher(Image, f"/robot1/{PRIVATE_CAMERA}", qos_profile_sensor_data)
            yield client, cameras, vqa
    finally:
        context.try_shutdown()


def _has(client: Node, robot: str, frame_id: str) -> bool:
    return infer(client, "probe", robot=robot, observation_id=frame_id, max_new_tokens=0).error_code != "NOT_FOUND"


def _publish_until_held(client: Node, cameras: dict) -> dict[str, str]:
    """Each robot's frame id, once the inference node holds it (sensor-data QoS is best effort: publish until)."""
    ids = {ns: content_id("", [frame], []) for ns, frame in FRAMES.items()}
    for ns, frame in FRAMES.items():
        wait_until(lambda ns=ns, frame=frame: cameras[ns].publish(rgb_to_image(frame, Header())) or
                   _has(client, ns, ids[ns]), 10.0, f"{ns}'s frame at the inference node")  # fmt: skip
    return ids


def test_each_robot_is_answered_about_its_own_frames_only(fleet):
    client, cameras, _ = fleet
    ids = _publish_until_held(client, cameras)
    for ns in FRAMES:
        latest = infer(client, "What colour is the wall?", robot=ns, max_new_tokens=4)
        assert latest.success and latest.observation_id == ids[ns], (ns, latest.message, latest.observation_id)
    other = infer(client, "What colour is the wall?", robot="robot1", observation_id=ids["robot2"])
    assert other.error_code == "NOT_FOUND" and ids["robot2"] in other.message
    unnamed = infer(client, "What colour is the wall?")
    assert unnamed.error_code == "INVALID_ARGUMENT" and unnamed.message.startswith("robot")
    stranger = infer(client, "What colour is the wall?", robot="robot3")
    assert stranger.error_code == "NOT_FOUND" and "robot3" in stranger.message
    assert infer(client, "What colour is the wall?", robot="/robot2", max_new_tokens=2).success
    arm = infer(client, "What colour is the wall?", robot="robot1/arm", max_new_tokens=2)  # robot1's arm's nodes
    assert arm.success and arm.observation_id == ids["robot1"]


def test_a_fleet_needs_relative_topics(ros_domain_id):
    context = make_context(ros_domain_id)
    overrides = INFERENCE | {"robots": ["robot1"], "camera_topic": "/camera/image_raw"}
    node = InferenceNode(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
    finally:
        node.destroy_node()
        context.try_shutdown()


def test_a_task_nodes_frame_the_inference_node_lacks_falls_back_to_its_own_robots_newest(fleet):
    """robot1's VQA node asks about a frame the inference node never got (NOT_FOUND) and is answered about robot1's
    newest frame there, never robot2's, even when robot2's frame is the newest of all."""
    client, cameras, vqa = fleet
    ids = _publish_until_held(client, cameras)
    cameras["robot2"].publish(rgb_to_image(FRAMES["robot2"], Header()))  # robot2's frame is the newest of all
    private = np.full((32, 48, 3), (30, 200, 30), np.uint8)
    wait_until(lambda: cameras["private"].publish(rgb_to_image(private, Header())) or
               vqa.frame.observation_id() == content_id("", [private], []), 10.0, "the private frame at the VQA node")  # fmt: skip
    assert not _has(client, "robot1", vqa.frame.observation_id())
    answer = call_service(client, AskQuestion, "/robot1/vqa/ask", AskQuestion.Request(
        question="What colour is the wall?", max_new_tokens=4), MODEL_TIMEOUT)  # fmt: skip
    assert answer.success and answer.observation_id == ids["robot1"], (answer.message, answer.observation_id, ids)
