"""Every field of every request, goal and subscribed message is refused past its bound before it sizes anything, with
INVALID_ARGUMENT (malformed, or a rate/duration outside its interval) or OUT_OF_RANGE (too large), and a message
naming the field, the value and the bound (the table: docs/reliability.md)."""

import math

import pytest
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from oxygen_ros.action import FollowInstruction, Navigate
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.srv import AskQuestion, Infer
from sensor_msgs.msg import Image

from oxygen_ros.control.unicycle import MAX_PATH_POINTS, PATH_STEP_M, Pose2D, straight_path
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes import convert, vqa_node
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode

INVALID, OUT_OF_RANGE = ErrorCode.INVALID_ARGUMENT, ErrorCode.OUT_OF_RANGE
LONG_ID = "i" * (bounds.ID_CHARS + 1)
LONG_TEXT = "t" * (bounds.TEXT_CHARS + 1)


def refused(code: ErrorCode, phrase: str, call, *args, **kwargs) -> None:
    """Assert ``call(*args, **kwargs)`` raises EngineError with ``code`` and ``phrase`` in its message."""
    with pytest.raises(EngineError) as err:
        call(*args, **kwargs)
    assert err.value.code == code and phrase in err.value.message, err.value.message


# --- the primitives -------------------------------------------------------------------------------------------------
def test_text_names_the_field_its_length_a_preview_and_the_bound():
    bounds.text("prompt", "x" * 10, 10)
    refused(OUT_OF_RANGE, "prompt has 11 characters ('xxxx", bounds.text, "prompt", "x" * 11, 10)
    refused(OUT_OF_RANGE, "xx'...), more than the bound of 10", bounds.text, "prompt", "x" * 100, 10)


def test_at_most_and_items_name_the_amount_the_unit_and_the_bound():
    bounds.at_most("image width", 8192, bounds.IMAGE_SIDE, "pixels")
    width = "image width is 8193 pixels, more than the bound of 8192 pixels"
    refused(OUT_OF_RANGE, width, bounds.at_most, "image width", 8193, bounds.IMAGE_SIDE, "pixels")
    far = "distance is 1e+30 m, more than the bound of 100 m"
    refused(OUT_OF_RANGE, far, bounds.at_most, "distance", 1e30, 100.0, "m")
    refused(INVALID, "distance must be a finite number, got nan", bounds.at_most, "distance", math.nan, 100.0, "m")
    refused(OUT_OF_RANGE, "state is 4 elements, more than the bound of 3", bounds.items, "state", [0.0] * 4, 3)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0, 0.0, 50.5])
def test_within_refuses_non_finite_and_outside_values(value):
    phrase = f"rate_hz must be in [0.01, 50] Hz, got {value}"
    refused(INVALID, phrase, bounds.within, "rate_hz", value, 0.01, 50.0, note=" Hz")


def test_within_keeps_the_ends_of_its_interval():
    bounds.within("deadline_s", 0.0, 0.0, bounds.DEADLINE_S)
    bounds.within("deadline_s", bounds.DEADLINE_S, 0.0, bounds.DEADLINE_S)


def test_infer_state():
    convert.check_state([0.0] * 1024)
    refused(OUT_OF_RANGE, "state is 1025 elements", convert.check_state, [0.0] * 1025)
    refused(INVALID, "state[1]", convert.check_state, [0.0, math.nan])


# --- Infer, AskQuestion -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "code", "phrase"),
    [
        ({"task_id": LONG_ID}, OUT_OF_RANGE, "task_id has 257 characters"),
        ({"task_type": LONG_ID}, OUT_OF_RANGE, "task_type has 257 characters"),
        ({"observation_id": LONG_ID}, OUT_OF_RANGE, "observation_id has 257 characters"),
        ({"prompt": "p" * 101}, OUT_OF_RANGE, "prompt has 101 characters"),
        ({"deadline_s": math.nan}, INVALID, "deadline_s must be in [0, 3600] s (0 = none), got nan"),
        ({"deadline_s": math.inf}, INVALID, "deadline_s must be in [0, 3600]"),
        ({"deadline_s": -1.0}, INVALID, "deadline_s must be in [0, 3600]"),
        ({"deadline_s": 1e9}, INVALID, "deadline_s must be in [0, 3600]"),
    ],
)
def test_infer_fields(fields, code, phrase):
    good = {"task_id": "t", "task_type": "vqa", "prompt": "p" * 100, "observation_id": "o", "deadline_s": 3600.0}
    convert.check_infer_request(Infer.Request(**good), max_prompt_chars=100)
    refused(code, phrase, convert.check_infer_request, Infer.Request(**(good | fields)), max_prompt_chars=100)


@pytest.mark.parametrize(
    ("fields", "code", "phrase"),
    [
        ({"question": LONG_TEXT}, OUT_OF_RANGE, "question has 8193 characters"),
        ({"question": " " * 3}, INVALID, "the question is empty"),
        ({"observation_id": LONG_ID}, OUT_OF_RANGE, "observation_id has 257 characters"),
    ],
)
def test_ask_question_fields(fields, code, phrase):
    vqa_node.check_question(AskQuestion.Request(question="What is there?"))
    refused(code, phrase, vqa_node.check_question, AskQuestion.Request(**({"question": "What is there?"} | fields)))


# --- Observation, Image -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "code", "phrase"),
    [
        ({"observation_id": LONG_ID}, OUT_OF_RANGE, "observation_id has 257 characters"),
        ({"text": "t" * 101}, OUT_OF_RANGE, "text has 101 characters"),
        ({"images": [Image()] * 4}, OUT_OF_RANGE, "images is 4 images, more than the bound of 3"),
        ({"state": [0.0] * (bounds.STATE + 1)}, OUT_OF_RANGE, "state is 1025 elements"),
        ({"state": [0.0, math.nan]}, INVALID, "state[1] must be a finite number"),
    ],
)
def test_observation_fields(fields, code, phrase):
    convert.observation_from_msg(ObservationMsg(text="t" * 100, state=[0.5] * bounds.STATE), max_text_chars=100)
    refused(code, phrase, convert.observation_from_msg, ObservationMsg(**fields), max_text_chars=100)


@pytest.mark.parametrize(
    ("image", "phrase"),
    [
        (Image(width=8193, height=1, encoding="rgb8", step=3 * 8193), "image width is 8193 pixels"),
        (Image(width=1, height=8193, encoding="rgb8", step=3), "image height is 8193 pixels"),
        (Image(width=8000, height=8000, encoding="rgb8", step=24000), "image data (step x height) is 192000000 bytes"),
        (Image(width=4, height=4000, encoding="rgb8", step=1 << 20), "image data (step x height)"),
        (Image(width=8000, height=4000, encoding="mono8", step=8000), "image RGB copy (width x height x 3)"),
        (Image(width=1, height=1, encoding="x" * 300, step=3), "image encoding has 300 characters"),
    ],
    ids=["width", "height", "bytes", "padded-rows", "rgb-copy", "encoding-name"],
)
def test_image_sizes_are_refused_before_any_copy(image, phrase):
    """No data is attached: the bound is checked before the data's length, so nothing this big is ever built."""
    refused(OUT_OF_RANGE, phrase, convert.image_to_rgb, image)


# --- FollowInstruction, Navigate ----------------------------------------------------------------------------------
@pytest.fixture
def instruction_node(ros_context):
    node = InstructionNode(context=ros_context)
    yield node
    node.destroy_node()


@pytest.mark.parametrize(
    ("fields", "code", "phrase"),
    [
        ({"instruction": LONG_TEXT}, OUT_OF_RANGE, "instruction has 8193 characters"),
        ({"instruction": "  "}, INVALID, "the instruction is empty"),
        ({"rate_hz": 0.0}, INVALID, "rate_hz must be in [0.01, 50] Hz, got 0.0"),
        ({"rate_hz": 1e-30}, INVALID, "rate_hz must be in [0.01, 50] Hz"),  # a period longer than any wait here
        ({"rate_hz": 1e30}, INVALID, "rate_hz must be in [0.01, 50] Hz"),
        ({"rate_hz": math.nan}, INVALID, "rate_hz must be in [0.01, 50] Hz"),
        ({"duration_s": -1.0}, INVALID, "duration_s must be in [0, 86400] s (0 = until cancelled)"),
        ({"duration_s": math.inf}, INVALID, "duration_s must be in [0, 86400]"),
    ],
)
def test_follow_instruction_fields(instruction_node, fields, code, phrase):
    good = {"instruction": "pick up the red cube", "rate_hz": 50.0, "duration_s": 0.0}
    instruction_node.check(FollowInstruction.Goal(**good))
    refused(code, phrase, instruction_node.check, FollowInstruction.Goal(**(good | fields)))


@pytest.fixture
def navigation_node(ros_context):
    node = NavigationNode(context=ros_context)
    yield node
    node.destroy_node()


def _goal(x: float, y: float, frame_id: str = "map", instruction: str = "", qw: float = 1.0) -> Navigate.Goal:
    target = PoseStamped()
    target.header.frame_id = frame_id
    target.pose.position.x, target.pose.position.y, target.pose.orientation.w = x, y, qw
    return Navigate.Goal(target=target, instruction=instruction)


def _odometry(x: float, y: float) -> Odometry:
    odom = Odometry()
    odom.pose.pose.position.x, odom.pose.pose.position.y, odom.pose.pose.orientation.w = x, y, 1.0
    return odom


@pytest.mark.parametrize(
    ("goal", "code", "phrase"),
    [
        (_goal(math.nan, 1.0), INVALID, "target pose position.x must be a finite number, got nan"),
        (_goal(1.0, math.inf), INVALID, "target pose position.y must be a finite number, got inf"),
        (_goal(1.0, 1.0, qw=math.nan), INVALID, "target pose orientation.w must be a finite number"),
        (_goal(1.0, 1.0, frame_id=LONG_ID), OUT_OF_RANGE, "target frame_id has 257 characters"),
        (_goal(1.0, 1.0, frame_id="base_link"), INVALID, "frame 'map' or 'odom', got 'base_link'"),
        (_goal(1.0, 1.0, instruction=LONG_TEXT), OUT_OF_RANGE, "instruction has 8193 characters"),
        (_goal(1e30, 1.0, "odom"), OUT_OF_RANGE, "distance from the robot is 1e+30 m, more than the bound of 100 m"),
        (_goal(1e6, 2.0, "odom"), OUT_OF_RANGE, "distance from the robot is 999999 m"),
        (_goal(1.0, 1.0e308, "odom"), OUT_OF_RANGE, "distance from the robot is 1e+308 m"),
    ],
)
def test_navigate_fields(navigation_node, goal, code, phrase):
    navigation_node._on_odom(_odometry(1.0, 2.0))
    navigation_node.check(_goal(90.0, 2.0, "odom"))  # 89 m away: within the default 100 m
    navigation_node.check(_goal(1e30, 1.0))  # in map, with no map -> odom known yet: each replan measures it
    refused(code, phrase, navigation_node.check, goal)


def test_a_far_target_is_measured_from_the_robot(navigation_node):
    goal = _goal(150.0, 0.0, "odom")
    navigation_node.check(goal)  # no odometry yet: the first replan measures it
    navigation_node._on_odom(_odometry(100.0, 0.0))
    navigation_node.check(goal)  # 50 m from where the robot is
    navigation_node._on_odom(_odometry(0.0, 0.0))
    refused(OUT_OF_RANGE, "is 150 m", navigation_node.check, goal)
    navigation_node._on_odom(_odometry(math.nan, 0.0))  # ignored: the last finite pose stays
    refused(OUT_OF_RANGE, "is 150 m", navigation_node.check, goal)


# --- the path the navigation node publishes -------------------------------------------------------------------------
def test_straight_path_is_capped_in_points_not_in_distance():
    start = Pose2D(0.0, 0.0, 0.0)
    near = straight_path(start, (1.0, 0.0))
    assert len(near) == round(1.0 / PATH_STEP_M) + 1 and near[-1] == (1.0, 0.0)
    for far in ((1e3, 0.0), (1e30, -1e30)):
        path = straight_path(start, far)
        assert len(path) == MAX_PATH_POINTS and path[0] == (0.0, 0.0) and path[-1] == far
    with pytest.raises(ValueError, match="finite"):
        straight_path(start, (math.inf, 0.0))
