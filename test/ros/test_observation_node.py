"""`observation_node` through real rclpy nodes (needs the installed package: `make install`): three cameras (two
sensor_msgs/Image, one JPEG sensor_msgs/CompressedImage) with jittered stamps and a JointState make ONE Observation per
synchronized set, its images in camera_topics order with their keys, rotated and resized as asked, the state in
state_joint_names order and the content hash of what it carries as its id; a camera that stops holds the observations
back (named in a warning) while the others' queues stay bounded; a stale joint state leaves the observations without
state (named too); bad parameters stop the node with the parameter named."""

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager

import cv2
import numpy as np
import pytest
from builtin_interfaces.msg import Time
from oxygen_ros.msg import Observation as ObservationMsg
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import spin_nodes, wait_until
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Header

from oxygen_ros.nodes.convert import image_to_rgb
from oxygen_ros.nodes.observation_node import NS, ObservationNode, main
from oxygen_ros.observations import content_id
from oxygen_ros.nodes.spin import EXIT_ON_REFUSAL

TOP, WRIST, SIDE = "observation.images.top", "observation.images.wrist", "observation.images.side"
TOPICS = {TOP: "/rig/top/image_raw", WRIST: "/rig/wrist/image_raw", SIDE: "/rig/side/image_raw/compressed"}
KEYS = [TOP, WRIST, SIDE]
PERIOD_S = 0.1
JITTER_S = 0.015  # each camera's stamp off the frame's by up to this; sync_slop_s 0.05 pairs them
TIMEOUT_S = 0.5
SIDE_COLOURS = ((200, 40, 40), (40, 40, 200))  # the side camera's top half, bottom half (RGB)


def _time(ns: int) -> Time:
    return Time(sec=ns // NS, nanosec=ns % NS)


def top_frame(k: int) -> np.ndarray:
    return np.full((48, 64, 3), (k % 200, 10, 20), dtype=np.uint8)


def wrist_frame(k: int) -> np.ndarray:
    return np.full((60, 80, 3), (k % 200, 100, 200), dtype=np.uint8)


def side_frame() -> np.ndarray:
    """48 wide, 32 high: two flat halves on the JPEG's 16-pixel blocks, so the decoded colours are near exact."""
    rgb = np.empty((32, 48, 3), dtype=np.uint8)
    rgb[:16], rgb[16:] = SIDE_COLOURS
    return rgb


class Rig:
    """The cameras, the arm's joint states and a listener on /oxygen/observation, in one client node."""

    def __init__(self, context) -> None:
        self.node = Node("camera_rig", context=context)
        self.top = self.node.create_publisher(Image, TOPICS[TOP], qos_profile_sensor_data)
        self.wrist = self.node.create_publisher(Image, TOPICS[WRIST], qos_profile_sensor_data)
        self.side = self.node.create_publisher(CompressedImage, TOPICS[SIDE], qos_profile_sensor_data)
        self.joints = self.node.create_publisher(JointState, "/joint_states", 10)
        self.observations: list[ObservationMsg] = []
        self.node.create_subscription(ObservationMsg, "/oxygen/observation", self.observations.append, 100)
        self.stamps: dict[str, dict[int, int]] = {key: {} for key in KEYS}  # key -> {stamp ns: frame number}
        self._rng = random.Random(5)
        self.base_ns = time.time_ns() - NS // 10  # (a frame's stamp before it is sent, jitter and all)

    def wait_matched(self, node: ObservationNode) -> None:
        publishers = (self.top, self.wrist, self.side, self.joints)
        wait_until(lambda: all(p.get_subscription_count() > 0 for p in publishers), 10.0, "the node subscribed")
        wait_until(lambda: node.count_subscribers("/oxygen/observation") > 0, 10.0, "the rig listening")

    def _header(self, key: str, k: int) -> Header:
        stamp = self.base_ns + round((k * PERIOD_S + self._rng.uniform(-JITTER_S, JITTER_S)) * NS)
        self.stamps[key][stamp] = k
        return Header(stamp=_time(stamp), frame_id=key.rsplit(".", 1)[1])

    def publish_frames(self, k: int, keys: tuple[str, ...] = tuple(KEYS)) -> None:
        """Frame ``k`` of each of ``keys``, in a shuffled order (a camera's frame may come before or after another's)."""
        sends = {
            TOP: lambda: self.top.publish(image_msg(top_frame(k), self._header(TOP, k), "rgb8")),
            WRIST: lambda: self.wrist.publish(image_msg(wrist_frame(k), self._header(WRIST, k), "bgr8")),
            SIDE: lambda: self.side.publish(jpeg_msg(side_frame(), self._header(SIDE, k))),
        }
        for key in self._rng.sample(keys, len(keys)):
            sends[key]()

    def publish_state(self, k: int) -> None:
        """shoulder = 1 + k moving at 10 + k, elbow = -(1 + k), and a joint the node does not read."""
        msg = JointState(name=["shoulder", "wrist_roll", "elbow"], position=[1.0 + k, 7.0, -(1.0 + k)],
                         velocity=[10.0 + k, 0.0, 0.0])  # fmt: skip
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.joints.publish(msg)


def image_msg(rgb: np.ndarray, header: Header, encoding: str) -> Image:
    pixels = rgb[..., ::-1] if encoding == "bgr8" else rgb
    height, width, _ = rgb.shape
    return Image(header=header, height=height, width=width, encoding=encoding, step=width * 3,
                 data=np.ascontiguousarray(pixels).tobytes())  # fmt: skip


def jpeg_msg(rgb: np.ndarray, header: Header) -> CompressedImage:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
    assert ok
    return CompressedImage(header=header, format="rgb8; jpeg compressed bgr8", data=data.tobytes())


OVERRIDES = [
    Parameter("camera_topics", value=[f"{key}={topic}" for key, topic in TOPICS.items()]),
    Parameter("resize", value=[f"{WRIST}=32x24"]),
    Parameter("rotate", value=[f"{SIDE}=90"]),
    Parameter("state_joint_names", value=["elbow", "shoulder.pos", "shoulder.vel"]),  # LeRobot's names work too
    Parameter("input_timeout_s", value=TIMEOUT_S),
    Parameter("max_rate_hz", value=100.0),
]


@contextmanager
def graph(context) -> Iterator[tuple[ObservationNode, Rig]]:
    node = ObservationNode(context=context, parameter_overrides=OVERRIDES)
    rig = Rig(context)
    with spin_nodes(context, node, rig.node):
        rig.wait_matched(node)
        yield node, rig


def _frame_of(rig: Rig, key: str, image: Image) -> int:
    return rig.stamps[key][image.header.stamp.sec * NS + image.header.stamp.nanosec]


def _wait_logged(capfd, text: str, timeout: float = 5.0) -> None:
    """Until ``text`` is in what the nodes logged (stderr) since the test began."""
    err: list[str] = []
    wait_until(lambda: err.append(capfd.readouterr().err) or text in "".join(err), timeout, f"{text!r} logged")


def _stream(rig: Rig, frames: range, keys: tuple[str, ...] = tuple(KEYS), state: bool = True) -> None:
    for k in frames:
        if state:
            rig.publish_state(k)
        rig.publish_frames(k, keys)
        time.sleep(PERIOD_S)


def test_each_synchronized_set_is_one_observation_with_keys_transforms_state_and_its_content_id(ros_context):
    with graph(ros_context) as (node, rig):
        _stream(rig, range(12))
        wait_until(lambda: len(rig.observations) >= 8, 5.0, "8 observations")  # best-effort frames may drop
        time.sleep(0.2)
    observations = list(rig.observations)
    assert len(observations) <= 12
    seen = set()
    for obs in observations:
        assert list(obs.image_keys) == KEYS and len(obs.images) == 3
        frames = [_frame_of(rig, key, image) for key, image in zip(KEYS, obs.images)]
        assert len(set(frames)) == 1, f"one set pairs one frame of each camera, got {frames}"
        (k,) = set(frames)
        assert k not in seen  # one observation per set
        seen.add(k)
        stamps = [image.header.stamp.sec * NS + image.header.stamp.nanosec for image in obs.images]
        assert obs.header.stamp.sec * NS + obs.header.stamp.nanosec == min(stamps)  # its age: its oldest frame's
        assert obs.header.frame_id == "top" and [image.header.frame_id for image in obs.images] == ["top", "wrist", "side"]

        top, wrist, side = (image_to_rgb(image) for image in obs.images)
        assert all(image.encoding == "rgb8" for image in obs.images)
        assert np.array_equal(top, top_frame(k))
        assert wrist.shape == (24, 32, 3) and np.array_equal(wrist, np.full((24, 32, 3), (k % 200, 100, 200)))
        assert side.shape == (48, 32, 3)  # 48x32 turned a quarter: 32 wide, 48 high
        # clockwise: the frame's top half is now on the right
        assert np.abs(side[24, 28].astype(int) - SIDE_COLOURS[0]).max() <= 8
        assert np.abs(side[24, 3].astype(int) - SIDE_COLOURS[1]).max() <= 8

        assert obs.observation_id == content_id("", [top, wrist, side], list(obs.state), list(obs.image_keys))
    # the state: the joints' newest positions (and a velocity) in state_joint_names order; a set completed before the
    # first JointState
    # arrived (a reliable topic beside best-effort cameras: either may come first) goes without, never after one
    stated = [i for i, obs in enumerate(observations) if len(obs.state)]
    assert stated and stated == list(range(stated[0], len(observations))) and len(stated) >= len(observations) - 2
    for obs in observations[stated[0]:]:
        k = _frame_of(rig, TOP, obs.images[0])
        shoulder = obs.state[1]
        assert list(obs.state) == [-shoulder, shoulder, shoulder + 9.0] and 1.0 + k - 1 <= shoulder <= 1.0 + k


def test_a_camera_clock_running_ahead_dates_the_set_when_it_arrived(ros_context):
    """Cameras stamping 0.9 s ahead (another machine's clock): the set's stamp is when its frames arrived, not in
    the future (a frozen camera would look fresh to the arm for as long as its clock leads)."""
    with graph(ros_context) as (node, rig):
        rig.base_ns = time.time_ns() + 9 * NS // 10
        _stream(rig, range(6))
        wait_until(lambda: len(rig.observations) >= 2, 5.0, "2 observations")
        observations = list(rig.observations)
        received_by = time.time_ns()
    for obs in observations:  # (its frames' own stamps: from 0.9 s after the first frame was sent)
        stamp = obs.header.stamp.sec * NS + obs.header.stamp.nanosec
        assert rig.base_ns - 9 * NS // 10 <= stamp <= received_by


def test_a_camera_that_stops_holds_the_observations_back_and_the_queues_stay_bounded(ros_context, capfd):
    with graph(ros_context) as (node, rig):
        _stream(rig, range(5))
        wait_until(lambda: rig.observations, 5.0, "an observation")
        _stream(rig, range(5, 20), (TOP, WRIST))
        # by the frames each holds (a late one of frames 0-4 may still arrive): none without the side camera
        assert all(_frame_of(rig, TOP, obs.images[0]) < 5 for obs in rig.observations), "no observation without side"
        assert all(queued <= TIMEOUT_S / PERIOD_S + 2 for queued in node._sync.queued())  # stale frames dropped
        _wait_logged(capfd, f"camera {SIDE}: last frame on {TOPICS[SIDE]}")
        _stream(rig, range(20, 25))  # back: observations again
        wait_until(lambda: any(_frame_of(rig, TOP, obs.images[0]) >= 20 for obs in rig.observations), 5.0,
                   "observations after the camera is back")  # fmt: skip
        assert not [obs for obs in rig.observations if 5 <= _frame_of(rig, TOP, obs.images[0]) < 20]  # none late


def test_a_stale_joint_state_leaves_the_observations_without_state(ros_context, capfd):
    with graph(ros_context) as (node, rig):
        _stream(rig, range(3))
        wait_until(lambda: rig.observations, 5.0, "an observation")
        assert len(rig.observations[-1].state) == 3
        _stream(rig, range(3, 15), state=False)  # the arm stops publishing
        wait_until(lambda: any(not obs.state for obs in rig.observations), 5.0, "an observation without state")
        _wait_logged(capfd, "joint elbow: its position is")
    stateless = [obs for obs in rig.observations if not obs.state]
    assert len(stateless) >= 3
    for obs in stateless:
        assert len(obs.images) == 3
        assert obs.observation_id == content_id("", [image_to_rgb(image) for image in obs.images], [], obs.image_keys)


def test_a_velocity_the_joint_states_lack_leaves_the_observations_without_state(ros_context, capfd):
    with graph(ros_context) as (node, rig):
        for k in range(6):  # a driver that publishes positions only
            rig.joints.publish(JointState(name=["shoulder", "elbow"], position=[1.0, -1.0]))
            rig.publish_frames(k)
            time.sleep(PERIOD_S)
        wait_until(lambda: rig.observations, 5.0, "an observation")
        _wait_logged(capfd, "the joint states carry no velocity (state entry shoulder.vel)")
    assert all(not obs.state for obs in rig.observations)  # named, never a zero velocity


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ([], "parameter camera_topics is empty"),
        (["camera_topics:=[top]"], "parameter camera_topics: 'top' is not key=value"),
        (["camera_topics:=[a=x,b=y,c=z,d=w]"], "parameter camera_topics has 4 entries, more than the bound of 3"),
        (["camera_topics:=[a=x,a=y]"], "parameter camera_topics names 'a' twice"),
        (["camera_topics:=[a=x]", "resize:=[a=8x8]"], "parameter resize: a=8x8 is not WxH"),
        (["camera_topics:=[a=x]", "rotate:=[a=45]"], "parameter rotate: a=45 is not one of"),
        (["camera_topics:=[a=x]", "rotate:=[b=90]"], "parameter rotate names b, not a key of camera_topics"),
        (["camera_topics:=[a=bad topic]"], "parameter camera_topics: a=bad topic"),
        (["camera_topics:=[a=x]", "state_joint_names:=[j,j]"], "parameter state_joint_names must be distinct"),
        (["camera_topics:=[a=x]", "sync_slop_s:=0.0"], "parameter sync_slop_s must be a positive number"),
        (["camera_topics:=[a=x]", "max_rate_hz:=5000.0"], "max_rate_hz"),
        (["camera_topics:=x"], "parameter camera_topics must be a list of strings"),
    ],
)
def test_bad_parameters_stop_the_node_naming_the_parameter(ros_domain_id, capfd, arguments, words):
    args = [EXIT_ON_REFUSAL, "--ros-args", *(part for argument in arguments for part in ("-p", argument))]
    assert main(args) == 1
    assert words in capfd.readouterr().err
