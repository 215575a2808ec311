"""The task nodes on a vision-language model (a tiny random Idefics3 written by transformers) through real rclpy
nodes: they send the frame's pixels, so three tasks asking about one frame compute its image tokens once (the pool's
blocks read by all three task types, the image tokens a later question reuses, both against transformers'
processor's prompt); a new frame gets new blocks, one a pixel apart shares none; the VQA action streams its answer;
bad frames get clear error codes, nothing leaks and the node keeps serving. The inference node is not subscribed
to the frames, so what it answers about them it got from the task nodes."""

import array
import math

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from geometry_msgs.msg import PoseStamped
from idefics3_folders import processor_inputs, random_image, reference_processor, write_folder
from inference_client import MODEL_TIMEOUT, infer, pool_stats, serving
from rclpy.context import Context
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import call_service, send_goal, wait_until
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image, LaserScan
from std_msgs.msg import Header

from oxygen_ros.action import AskQuestion as AskQuestionAction
from oxygen_ros.action import FollowInstruction, Navigate
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.instruction_node import InstructionNode
from oxygen_ros.nodes.navigation_node import NavigationNode
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros.observations import content_id
from oxygen_ros.srv import AskQuestion

CONTEXT = 224  # the tiny model's context: 2 images at their largest tiling and a question fit, 3 (ROS allows 3) do not
MAX_NEW = 12
QUESTION = "What is on the table?"
BLOCK_SIZE = 16
SCAN = "/vlm_test/scan"


class Graph:
    def __init__(self, client: Node, tasks: dict[str, Node], folder) -> None:
        self.client, self.tasks = client, tasks
        self.processor = reference_processor(folder, split=True)
        self.frames = client.create_publisher(ObservationMsg, "/oxygen/observation", 10)
        scans = client.create_publisher(LaserScan, SCAN, qos_profile_sensor_data)
        clear = LaserScan(header=Header(frame_id="base_link"), angle_increment=0.1, range_max=10.0, ranges=[math.inf])
        client.create_timer(0.1, lambda: scans.publish(clear))

    def show(self, rgb: np.ndarray) -> None:
        """Publish ``rgb`` as the newest frame until every task node has it."""
        frame_id = content_id("", [rgb], [])
        msg = ObservationMsg(observation_id=frame_id, images=[rgb_to_image(rgb, Header())], text="A table.")

        def seen() -> bool:
            self.frames.publish(msg)
            return all(node.frame.observation_id() == frame_id for node in self.tasks.values())

        wait_until(seen, 10, "the frame at every task node")

    def image_span(self, rgb: np.ndarray) -> tuple[int, int]:
        """(first, last + 1) image token position of a question's prompt about ``rgb``, by transformers' processor."""
        ids = processor_inputs(self.processor, QUESTION, [rgb])["input_ids"][0].tolist()
        image_id = self.processor.tokenizer.convert_tokens_to_ids("<image>")
        positions = [i for i, t in enumerate(ids) if t == image_id]
        return positions[0], positions[-1] + 1

    def ask(self, question: str = QUESTION) -> AskQuestion.Response:
        request = AskQuestion.Request(question=question, max_new_tokens=MAX_NEW)
        return call_service(self.client, AskQuestion, "/vqa/ask", request, MODEL_TIMEOUT)

    def idle(self):
        """Pool stats once no block is held by a request (free or cached only)."""
        wait_until(lambda: _held(pool_stats(self.client)) == 0, MODEL_TIMEOUT, "an idle pool")
        return pool_stats(self.client)


def _held(stats) -> int:
    return stats.total_blocks - stats.free_blocks - stats.cached_blocks + stats.active_requests + len(stats.tasks)


@pytest.fixture(scope="module")
def graph(ros_domain_id, tmp_path_factory):
    folder = write_folder(tmp_path_factory.mktemp("idefics3"), split=True, context=CONTEXT)
    # the inference node hears no frame: every image it sees came inline from a task node
    inference = {"model": str(folder), "kv_cache_bytes": 4 << 20, "max_model_len": CONTEXT, "max_num_seqs": 4,
                 "block_size": BLOCK_SIZE, "debug_checks": True, "observation_topic": "/vlm_test/unheard"}  # fmt: skip
    waits = {"service_wait_s": 2.0}
    tasks = {
        "vqa": (VqaNode, waits),
        "instruction": (InstructionNode, waits | {"narration_period_s": 60.0, "max_new_tokens": MAX_NEW}),
        # its own driver, by a clear scan the client sends (no odometry: it stands still and reasons)
        "navigation": (NavigationNode, waits | {"reasoning_period_s": 60.0, "blocked_timeout_s": 600.0,
                                                "max_new_tokens": MAX_NEW, "nav2": "never",
                                                "allow_builtin_driver": True, "scan_topic": SCAN}),
    }  # fmt: skip
    nodes: dict[str, Node] = {}

    def build(context: Context) -> list[Node]:
        for name, (make, values) in tasks.items():
            nodes[name] = make(context=context, parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])
        return list(nodes.values())

    with serving(ros_domain_id, inference, "vlm_test_client", task_nodes=build, num_threads=6) as (_, client):
        yield Graph(client, nodes, folder)


def test_three_tasks_about_one_frame_compute_its_image_tokens_once(graph):
    rgb = random_image(np.random.default_rng(1), 96, 128)
    graph.show(rgb)
    first, end = graph.image_span(rgb)
    image_blocks = end // BLOCK_SIZE  # full blocks holding only the prompt's head and the frame's image tokens
    asked = send_goal(graph.client, AskQuestionAction, "/vqa/ask", AskQuestionAction.Goal(question=QUESTION,
                                                                                       max_new_tokens=MAX_NEW))  # fmt: skip
    done = asked.result(MODEL_TIMEOUT)
    assert done.status == GoalStatus.STATUS_SUCCEEDED and done.result.success, done.result.message
    assert asked.streamed_text(done.result.answer, strip=True) == done.result.answer != ""
    assert done.result.reused_image_tokens == 0  # the first look at the frame computes it
    target = PoseStamped()
    target.header.frame_id, target.pose.position.x, target.pose.position.y = "odom", 1.0, 1.0  # no TF needed
    goals = [
        send_goal(graph.client, FollowInstruction, "/follow_instruction",
                  FollowInstruction.Goal(instruction="pick up the red cup", rate_hz=2.0)),
        send_goal(graph.client, Navigate, "/navigate", Navigate.Goal(target=target)),
    ]  # fmt: skip

    def read_by_all_three() -> bool:
        histogram = pool_stats(graph.client).blocks_by_reader_types
        return len(histogram) >= 3 and histogram[2] >= image_blocks

    wait_until(read_by_all_three, MODEL_TIMEOUT, f"{image_blocks} blocks of the frame read by vqa, instruction and "
               "navigation")  # fmt: skip
    for goal in goals:
        goal.cancel()
        assert goal.result(MODEL_TIMEOUT).status == GoalStatus.STATUS_CANCELED
    again = graph.ask("Which object is closest to the robot?")
    assert again.success, again.message
    assert again.reused_prefix_tokens >= image_blocks * BLOCK_SIZE
    assert again.reused_image_tokens == min(end, again.reused_prefix_tokens) - first > 0


def test_a_new_frame_gets_new_blocks_and_one_pixel_apart_shares_none(graph):
    rgb = random_image(np.random.default_rng(2), 96, 128)
    nearly = rgb.copy()
    nearly[40, 50, 2] ^= 1
    _, end = graph.image_span(rgb)
    for frame in (rgb, nearly):
        before = graph.idle()
        graph.show(frame)
        answer = graph.ask()
        assert answer.success, answer.message
        assert (answer.reused_prefix_tokens, answer.reused_image_tokens) == (0, 0)
        assert graph.idle().cached_blocks - before.cached_blocks >= end // BLOCK_SIZE


def _image(width: int, height: int, encoding: str = "rgb8") -> Image:
    channels = 3 if encoding == "rgb8" else 2
    data = array.array("B", bytes(width * height * channels))
    return Image(width=width, height=height, encoding=encoding, step=width * channels, data=data)


@pytest.mark.parametrize(
    ("images", "code", "words", "vqa_code"),
    [
        ([_image(0, 0)], "INVALID_ARGUMENT", "image 0: zero-size image", "INVALID_ARGUMENT"),
        ([_image(8, 8, "yuv422")], "INVALID_ARGUMENT", "unsupported image encoding 'yuv422'", "INVALID_ARGUMENT"),
        # the task node sends a frame's first 2 images, what the model allows: answered
        ([_image(8, 8)] * 3, "OUT_OF_RANGE", f"3 images, more than the 2 this model's context of {CONTEXT} tokens", ""),
        # a frame over ROS's bound is ignored by the task nodes (docs/reliability.md)
        ([_image(8, 8)] * 4, "OUT_OF_RANGE", "images is 4 images, more than the bound of 3", None),
    ],
    ids=["zero-size", "encoding", "more-than-the-model", "more-than-ros"],
)
def test_bad_frames_are_refused_nothing_leaks_and_the_node_keeps_serving(graph, images, code, words, vqa_code):
    inline = infer(graph.client, QUESTION, observation=[ObservationMsg(images=images)], max_new_tokens=MAX_NEW)
    assert (inline.success, inline.error_code) == (False, code) and words in inline.message, inline.message
    if vqa_code is not None:
        graph.frames.publish(ObservationMsg(observation_id="bad-frame", images=images))
        wait_until(lambda: graph.tasks["vqa"].frame.observation_id() == "bad-frame", 10, "the frame at vqa_node")
        asked = graph.ask()
        assert asked.error_code == vqa_code and (not vqa_code or words in asked.message), asked.message
    graph.idle()
    graph.show(random_image(np.random.default_rng(3), 64, 64))
    good = graph.ask()
    assert good.success and good.answer, good.message
