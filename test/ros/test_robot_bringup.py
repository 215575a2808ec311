"""The robot bringup (no simulator) through real rclpy nodes and the real SmolLM2: nothing of ours publishes
odometry, TF or camera frames; the task nodes answer from frames the test publishes on the camera topic; two robots
(robot1, robot2) of task nodes share one inference node, each answered, their KV usage reported per task under
their own names, each answer about its own robot's newest frame (the service and the streaming action); parameters carry types, ranges and read-only flags, and an out-of-range or read-once set is
refused with a reason."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from inference_client import MODEL_TIMEOUT, Capture, wait_for_observation
from oxygen_ros.msg import KvPoolStats
from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.srv import AskQuestion
from rcl_interfaces.msg import ParameterType
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import call_service, make_context, send_goal, spin_nodes, wait_until
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from task_graph import INFERENCE

from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.infer_client import inference_at
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros.observations import content_id

ROBOTS = ("robot1", "robot2")
FRAMES = {ns: np.full((48, 64, 3), colour, dtype=np.uint8) for ns, colour in
          (("", (200, 30, 30)), ("robot1", (30, 200, 30)), ("robot2", (30, 30, 200)))}  # a wall per camera  # fmt: skip
QUESTION = AskQuestion.Request(question="What colour is the wall?", max_new_tokens=24)


@pytest.fixture(scope="module")
def robot(ros_domain_id):
    context = make_context(ros_domain_id)
    inference = InferenceNode(context=context, parameter_overrides=[
        Parameter(k, value=v) for k, v in (INFERENCE | {"stats_rate_hz": 20.0, "robots": ["/", *ROBOTS]}).items()])  # fmt: skip
    local = VqaNode(context=context)
    shared = {ns: VqaNode(context=context, namespace=ns, cli_args=inference_at("/")) for ns in ROBOTS}
    navigation = NavigationNode(context=context, namespace="robot1", cli_args=inference_at("/"))
    client = Node("robot_test_client", context=context)
    try:
        with spin_nodes(context, inference, local, *shared.values(), navigation, client, num_threads=6):
            assert inference.trigger_configure() == TransitionCallbackReturn.SUCCESS
            assert inference.trigger_activate() == TransitionCallbackReturn.SUCCESS
            cameras = {ns: client.create_publisher(Image, camera_topic(ns), qos_profile_sensor_data)
                       for ns in ("", *ROBOTS)}  # fmt: skip
            yield {"client": client, "cameras": cameras, "shared": shared, "navigation": navigation,
                   "inference": inference}  # fmt: skip
    finally:
        context.try_shutdown()


def camera_topic(ns: str) -> str:
    return f"/{ns}/camera/image_raw" if ns else "/camera/image_raw"


def publish_until(robot, ns: str, done) -> None:
    image = rgb_to_image(FRAMES[ns], Header(frame_id="camera_optical_frame"))
    wait_until(lambda: robot["cameras"][ns].publish(image) or done(), 10.0, f"frames on {ns or '/'} camera")


def test_nothing_publishes_odometry_tf_or_camera_frames(robot):
    client = robot["client"]
    for topic in ("/odom", "/tf", "/tf_static", "/robot1/odom"):
        assert client.count_publishers(topic) == 0, topic
    for ns in ("", *ROBOTS):  # only the test's own camera
        assert client.count_publishers(camera_topic(ns)) == 1


def test_the_task_nodes_answer_from_frames_on_the_camera_topic(robot):
    client = robot["client"]
    frame_id = content_id("", [FRAMES[""]], [])
    for _ in range(50):  # sensor-data QoS is best effort: publish until the inference node has the frame
        robot["cameras"][""].publish(rgb_to_image(FRAMES[""], Header()))
        try:
            wait_for_observation(client, frame_id, timeout=0.2)
            break
        except TimeoutError:
            continue
    out = call_service(client, AskQuestion, "/vqa/ask", AskQuestion.Request(question="What colour is the wall?",
                       observation_id=frame_id, max_new_tokens=8), MODEL_TIMEOUT)  # fmt: skip
    assert out.success, out.message
    assert out.answer


def test_two_robots_share_one_inference_node_and_their_kv_is_reported_per_task(robot):
    client = robot["client"]
    inference = robot["inference"]
    ids = {ns: content_id("", [FRAMES[ns]], []) for ns in ROBOTS}
    for ns in ROBOTS:  # each robot's task node and the inference node have that robot's frame
        publish_until(robot, ns, lambda ns=ns: robot["shared"][ns].frame.observation_id() == ids[ns]
                      and inference.held_observations(ns) > 0)  # fmt: skip
    stats = Capture(client, KvPoolStats, "/oxygen/pool_stats", 100)
    with ThreadPoolExecutor(len(ROBOTS)) as pool:
        asked = {ns: pool.submit(call_service, client, AskQuestion, f"/{ns}/vqa/ask", QUESTION, MODEL_TIMEOUT)
                 for ns in ROBOTS}  # fmt: skip
        answers = {ns: future.result() for ns, future in asked.items()}
    for ns, out in answers.items():
        assert out.success and out.answer, (ns, out.message)
        assert out.observation_id == ids[ns], (ns, out.observation_id, ids)  # its own robot's frame, never another's
    goal = AskQuestionAction.Goal(question="What colour is the wall?", max_new_tokens=8)
    streamed = send_goal(client, AskQuestionAction, "/robot2/vqa/ask", goal, MODEL_TIMEOUT).result(MODEL_TIMEOUT).result
    assert streamed.success and streamed.observation_id == ids["robot2"], (streamed.message, streamed.observation_id)
    seen = {usage.task_id for msg in stats.messages for usage in msg.tasks}
    for ns in ROBOTS:
        assert any(task.startswith(f"/{ns}/vqa_node/") for task in seen), (ns, seen)


def test_parameters_have_types_ranges_and_read_only_flags_and_bad_sets_are_refused(robot):
    node = robot["navigation"]
    rate, topic, stamped = node.describe_parameters(["replan_rate_hz", "cmd_vel_topic", "cmd_vel_stamped"])
    assert rate.type == ParameterType.PARAMETER_DOUBLE and not rate.read_only and rate.description
    assert (rate.floating_point_range[0].from_value, rate.floating_point_range[0].to_value) == (0.0, 100.0)
    assert topic.type == ParameterType.PARAMETER_STRING and topic.read_only
    assert stamped.type == ParameterType.PARAMETER_BOOL and stamped.read_only
    tokens = node.describe_parameter("max_new_tokens").integer_range[0]
    assert (tokens.from_value, tokens.to_value) == (1, 4096)
    too_fast, renamed, wrong_type, fine = node.set_parameters([
        Parameter("replan_rate_hz", value=1e6), Parameter("cmd_vel_topic", value="other"),
        Parameter("max_linear_mps", value="fast"), Parameter("max_linear_mps", value=0.2),
    ])  # fmt: skip
    assert not too_fast.successful and "out of range" in too_fast.reason
    assert not renamed.successful and "read-only" in renamed.reason
    assert not wrong_type.successful and wrong_type.reason
    assert fine.successful and node.get_parameter("max_linear_mps").value == 0.2
    with pytest.raises(ValueError, match="replan_rate_hz"):  # an out-of-range override stops the node's start
        NavigationNode(context=node.context, parameter_overrides=[Parameter("replan_rate_hz", value=-1.0)])
    # so does one of the wrong type (`max_linear_mps: 1` in a YAML: an integer), as a ValueError naming it, which
    # the executable's main logs and exits 1 on, instead of a traceback
    with pytest.raises(ValueError, match="max_linear_mps"):
        NavigationNode(context=node.context, parameter_overrides=[Parameter("max_linear_mps", value=1)])
    with pytest.raises(ValueError, match="action_scale"):  # a list of the wrong type: integers
        InstructionNode(context=node.context, parameter_overrides=[Parameter("action_scale", value=[1, 2])])
