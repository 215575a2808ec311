"""A real `oxygen_inference` serving the real SmolLM2 over ROS: answers about published observations, reuses their
prefix, refuses bad requests with a clear error_code while it keeps serving, never leaks a block, and shows the pool
on its stats, diagnostics, marker and image topics."""

import os
import re
import shutil
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from inference_client import (
    MODEL_TIMEOUT,
    Capture,
    infer,
    pool_stats,
    serving,
    wait_for_observation,
)
from oxygen_ros.msg import KvPoolStats
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.srv import CancelTask, Infer
from rclpy.node import Node
from rclpy.qos import QoSProfile
from ros_harness import call_service, wait_for, wait_until
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from visualization_msgs.msg import Marker, MarkerArray

from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.nodes.polling import poll_until
from oxygen_ros.nodes.qos import SERVICE_QUEUE_DEPTH
from oxygen_ros.nodes.stamps import nanoseconds, time_ns

SMOLLM2_BLOCK_BYTES = 30 * 2 * 3 * 64 * 16 * 4  # layers x (K, V) x KV heads x head_dim x tokens x float32
TOTAL_BLOCKS = 68
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"  # what the loader names the model (it keys the prefix cache)
PARAMETERS = {
    "model": "smollm2-135m",
    "kv_cache_bytes": TOTAL_BLOCKS * SMOLLM2_BLOCK_BYTES,  # small enough to see every block in the picture
    "max_model_len": 512,
    "max_num_seqs": 4,
    "max_queue": 8,
    "stats_rate_hz": 5.0,
    "marker_frame_id": "oxygen_pool",
    "debug_checks": True,  # the pool's invariants are checked after every step
    "observation_keep_s": 3.0,  # short, so the test of keeping observations by time stays short
}
KITCHEN = "There is a red apple on the kitchen table."
# Set to a path (e.g. docs/pool_image.png) to keep the pool image the node draws in test_pool_topics.
SAVE_POOL_IMAGE = os.environ.get("OXYGEN_SAVE_POOL_IMAGE", "")


class Served:
    def __init__(self, node: InferenceNode, client: Node) -> None:
        self.node, self.client = node, client
        self.observations = client.create_publisher(ObservationMsg, "/oxygen/observation", 10)

    def publish(self, msg: ObservationMsg) -> None:
        """Publish once the node's subscription is matched, then wait until the node knows the observation."""
        wait_for_subscriber(self.observations)
        self.observations.publish(msg)
        wait_for_observation(self.client, msg.observation_id)


def wait_for_subscriber(publisher, timeout: float = 10.0) -> None:
    poll_until(publisher.get_subscription_count, timeout, f"a subscriber to {publisher.topic_name}")


@pytest.fixture(scope="module")
def served(ros_domain_id):
    with serving(ros_domain_id, PARAMETERS, "inference_test_client") as (node, client):
        served = Served(node, client)
        served.publish(ObservationMsg(observation_id="kitchen", text=KITCHEN))
        yield served


def assert_no_blocks_held(stats: KvPoolStats, total_blocks: int) -> None:
    """Back to the starting values: every block free or cached (reusable), no request, no task."""
    held = stats.total_blocks - stats.free_blocks - stats.cached_blocks
    assert (stats.total_blocks, held, stats.shared_blocks) == (total_blocks, 0, 0)
    assert (stats.active_requests, stats.queued_requests, list(stats.tasks)) == (0, 0, [])


def test_answers_about_an_observation_and_reuses_its_prefix(served):
    first = infer(served.client, "Where is the apple?", task_id="vqa-1", task_type="vqa", observation_id="kitchen")
    assert first.success, first.message
    assert "table" in first.text.lower()
    assert first.prompt_tokens > 0 and 0 < first.generated_tokens <= 16 and first.latency_ms > 0
    second = infer(served.client, "What colour is the apple?", task_id="vqa-1", task_type="vqa",
                   observation_id="kitchen")  # fmt: skip
    assert second.success and "red" in second.text.lower()
    assert second.reused_prefix_tokens > 0, "the observation's prefix must come from the pool"
    latest = infer(served.client, "What colour is the apple?", task_id="nav-1", task_type="navigation")
    assert latest.success and latest.text == second.text, "'' is the latest observation: the same greedy answer"


def test_an_observation_is_dated_no_later_than_it_reached_the_node(served):
    """A camera clock running ahead (here by a minute) would make a frozen frame look fresh to the arm for as long as
    it leads: the stamp an answer reports is the frame's, but never after it reached the node."""
    clock = served.client.get_clock()
    for offset_ns, observation_id in ((60_000_000_000, "clock-ahead"), (-2_000_000_000, "clock-behind")):
        sent = clock.now().nanoseconds
        served.publish(ObservationMsg(header=Header(stamp=time_ns(sent + offset_ns)), observation_id=observation_id,
                                      text=KITCHEN))  # fmt: skip
        known = clock.now().nanoseconds  # (publish waits until the node knows it)
        answer = infer(served.client, "Where is the apple?", max_new_tokens=1, observation_id=observation_id)
        assert answer.success, answer.message
        stamp = nanoseconds(answer.observation_stamp)
        assert sent <= stamp <= known if offset_ns > 0 else stamp == sent + offset_ns


def test_get_pool_stats(served):
    stats = pool_stats(served.client)
    assert (stats.model, stats.block_size, stats.total_blocks) == (MODEL_ID, 16, TOTAL_BLOCKS)
    assert stats.header.stamp.sec > 0
    (tier,) = stats.tiers
    assert tier.name == "gpu"  # L0, the device pool, whatever the device
    assert tier.capacity_bytes == TOTAL_BLOCKS * SMOLLM2_BLOCK_BYTES
    assert_no_blocks_held(stats, TOTAL_BLOCKS)


def _bad_image_observation(observation_id: str, image: Image) -> ObservationMsg:
    return ObservationMsg(observation_id=observation_id, text="a scene", images=[image])


BAD_REQUESTS = {
    "empty-prompt": ({"prompt": "  "}, "INVALID_ARGUMENT", "prompt is empty"),
    "unknown-task-type": ({"task_type": "dance"}, "INVALID_ARGUMENT", "unknown task type 'dance'"),
    "unknown-observation": ({"observation_id": "nowhere"}, "NOT_FOUND", "no observation 'nowhere'"),
    "wrong-image-encoding": ({"observation_id": "depth"}, "INVALID_ARGUMENT", "unsupported image encoding '16UC1'"),
    "zero-size-image": ({"observation_id": "empty-image"}, "INVALID_ARGUMENT", "zero-size image (0x0)"),
    "too-wide-image": ({"observation_id": "wide-image"}, "OUT_OF_RANGE", "image width is 9000 pixels"),
    "over-long-prompt": ({"prompt": "x" * 70000}, "OUT_OF_RANGE", "prompt has 70000 characters"),
    "zero-max-new-tokens": ({"max_new_tokens": 0}, "INVALID_ARGUMENT", "max_new_tokens must be at least 1"),
    "actions-from-a-language-model": ({"want_actions": True}, "FAILED_PRECONDITION", "no action head"),
}


@pytest.fixture(scope="module")
def bad_observations(served):
    depth = Image(height=2, width=2, encoding="16UC1", step=4, data=bytes(8))
    served.publish(_bad_image_observation("depth", depth))
    served.publish(_bad_image_observation("empty-image", Image(encoding="rgb8")))
    wide = Image(width=9000, height=1, encoding="rgb8", step=27000, data=bytes(27000))
    served.publish(_bad_image_observation("wide-image", wide))


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_bad_request_gets_a_clear_error_and_the_node_keeps_serving(served, bad_observations, case):
    fields, code, phrase = BAD_REQUESTS[case]
    total = pool_stats(served.client).total_blocks
    request = {"prompt": "What is on the table?", "task_type": "vqa", "observation_id": "kitchen"} | fields
    response = infer(served.client, **request)
    assert (response.success, response.error_code) == (False, code)
    assert phrase in response.message
    good = infer(served.client, "Where is the apple?", task_type="vqa", observation_id="kitchen", max_new_tokens=4)
    assert good.success, good.message
    assert_no_blocks_held(pool_stats(served.client), total)


def test_fifty_concurrent_requests_over_capacity(served):
    """max_queue 8 and 4 running: the burst's excess is refused at once, the rest is answered, nothing leaks."""
    # the responses arrive in a burst too: the client's queue must hold them all, like the node's holds the requests
    client = served.client.create_client(Infer, "/oxygen/infer", qos_profile=QoSProfile(depth=SERVICE_QUEUE_DEPTH))
    try:
        assert client.wait_for_service(timeout_sec=10)
        futures = [
            client.call_async(Infer.Request(task_id=f"burst-{i % 5}", task_type="vqa", prompt=f"Count to {i}.",
                                            observation_id="kitchen", want_text=True, max_new_tokens=6))
            for i in range(50)
        ]  # fmt: skip
        responses = [wait_for(f, MODEL_TIMEOUT) for f in futures]
    finally:
        served.client.destroy_client(client)
    codes = [r.error_code for r in responses]
    assert set(codes) <= {"", "RESOURCE_EXHAUSTED"}, set(codes)
    assert codes.count("") >= 8 and codes.count("RESOURCE_EXHAUSTED") >= 25, codes
    # refused by the engine's queue, or before that by the node (requests in flight: their images not decoded)
    assert all("queue full" in r.message or "requests in flight" in r.message for r in responses if r.error_code)
    assert all(r.generated_tokens > 0 for r in responses if r.success)
    assert_no_blocks_held(pool_stats(served.client), TOTAL_BLOCKS)


def test_cancel_task_ends_its_requests_and_frees_their_blocks(served):
    """A task node whose goal ended cancels its task: the calls in flight answer CANCELLED, others are untouched."""
    client = served.client.create_client(Infer, "/oxygen/infer")
    try:
        assert client.wait_for_service(timeout_sec=10)
        request = {"task_type": "instruction", "observation_id": "kitchen", "want_text": True, "max_new_tokens": 400}
        doomed = [client.call_async(Infer.Request(task_id="goal-7", prompt=f"Narrate step {i}.", **request))
                  for i in range(2)]  # fmt: skip
        other = client.call_async(Infer.Request(task_id="vqa-2", prompt="Where is the apple?", **request | {
            "task_type": "vqa", "max_new_tokens": 8}))  # fmt: skip
        wait_until(lambda: pool_stats(served.client).active_requests >= 2, MODEL_TIMEOUT, "the narration started")
        cancelled = call_service(served.client, CancelTask, "/oxygen/cancel_task", CancelTask.Request(task_id="goal-7"))
        assert cancelled.success and cancelled.cancelled == 2
        responses = [wait_for(f, MODEL_TIMEOUT) for f in doomed]
        assert {(r.success, r.error_code) for r in responses} == {(False, "CANCELLED")}
        assert all(r.generated_tokens < 400 for r in responses)
        assert wait_for(other, MODEL_TIMEOUT).success
    finally:
        served.client.destroy_client(client)
    empty = call_service(served.client, CancelTask, "/oxygen/cancel_task", CancelTask.Request(task_id=""))
    assert (empty.success, empty.error_code) == (False, "INVALID_ARGUMENT")
    assert_no_blocks_held(pool_stats(served.client), TOTAL_BLOCKS)


def _legend(markers: MarkerArray) -> dict[str, tuple[int, tuple[float, float, float]]]:
    """label -> (block count, colour) from the legend's text markers."""
    out = {}
    for m in markers.markers:
        if m.ns == "kv_legend":
            label, count = re.fullmatch(r"(.+) \((\d+)\)", m.text).groups()
            out[label] = (int(count), (m.color.r, m.color.g, m.color.b))
    return out


def _shows_tasks_sharing_blocks(markers: MarkerArray) -> bool:
    legend = _legend(markers)
    tasks = {"vqa-2", "nav-2", "instruct-2"}
    return tasks <= set(legend) and all(legend[t][0] > 0 for t in tasks) and legend["shared"][0] > 0


def test_pool_topics_show_tasks_holding_blocks(served, tmp_path):
    served.publish(ObservationMsg(observation_id="garage", text="A bicycle leans against the garage wall."))
    markers = Capture(served.client, MarkerArray, "/oxygen/pool_markers", 1)
    images = Capture(served.client, Image, "/oxygen/pool_image", 1)
    stats_topic = Capture(served.client, KvPoolStats, "/oxygen/pool_stats")
    client = served.client.create_client(Infer, "/oxygen/infer")
    story = "Write a long story about this kitchen, sentence after sentence."
    futures = [
        client.call_async(Infer.Request(task_id=task_id, task_type=task_type, prompt=prompt, observation_id=obs_id,
                                        want_text=True, max_new_tokens=32))
        for task_id, task_type, prompt, obs_id in [
            ("vqa-2", "vqa", story, "kitchen"),
            ("nav-2", "navigation", "Plan a long route through this kitchen, step after step.", "kitchen"),
            ("instruct-2", "instruction", "List forty things to tidy here, one per line.", "garage"),
        ]
    ]  # fmt: skip
    try:
        markers.wait_for(_shows_tasks_sharing_blocks, what="a marker array with three tasks and shared blocks")

        def busy_of(image: Image):  # a loaded CI may drop one snapshot's image (depth 1): any busy snapshot will do
            return next((m for m in markers.messages if _shows_tasks_sharing_blocks(m)
                         and m.markers[0].header.stamp == image.header.stamp), None)  # fmt: skip

        image_msg = images.wait_for(lambda m: busy_of(m) is not None, what="the pool image of a busy snapshot")
        busy = busy_of(image_msg)
    finally:
        for future in futures:
            wait_for(future, MODEL_TIMEOUT)
        served.client.destroy_client(client)

    blocks = [m for m in busy.markers if m.ns == "kv_blocks"]
    assert [m.type for m in blocks] == [Marker.CUBE] * TOTAL_BLOCKS
    assert sorted(m.id for m in blocks) == list(range(TOTAL_BLOCKS)), "one cube per block, id = block id"
    added = [m for m in busy.markers if m.action == Marker.ADD]
    assert len({(m.ns, m.id) for m in added}) == len(added), "marker ids must be unique per namespace"
    assert {m.header.frame_id for m in busy.markers} == {"oxygen_pool"}
    legend = _legend(busy)
    colours = [(m.color.r, m.color.g, m.color.b) for m in blocks]
    assert len({colour for _, colour in legend.values()}) == len(legend), "each state and task has its own colour"
    for label, (count, colour) in legend.items():
        assert colours.count(colour) == count, label  # every block is drawn in its state's or task's colour
    assert sum(count for count, _ in legend.values()) == TOTAL_BLOCKS

    assert (image_msg.encoding, image_msg.header.frame_id) == ("rgb8", "oxygen_pool")
    rgb = np.frombuffer(image_msg.data, np.uint8).reshape(image_msg.height, image_msg.width, 3)
    for label, (_, colour) in legend.items():
        assert (rgb == np.round(np.array(colour) * 255).astype(np.uint8)).all(axis=2).any(), label
    png = tmp_path / "pool_image.png"
    assert cv2.imwrite(str(png), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    np.testing.assert_array_equal(cv2.cvtColor(cv2.imread(str(png)), cv2.COLOR_BGR2RGB), rgb)
    if SAVE_POOL_IMAGE:
        Path(SAVE_POOL_IMAGE).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, SAVE_POOL_IMAGE)

    published = stats_topic.wait_for(lambda m: len(m.tasks) >= 3, what="pool stats with the three tasks")
    assert published.total_blocks == TOTAL_BLOCKS and published.shared_blocks > 0
    stats_topic.wait_for(lambda m: not m.tasks, what="pool stats after the tasks finished")
    assert_no_blocks_held(pool_stats(served.client), TOTAL_BLOCKS)


def test_diagnostics_report_the_pool(served):
    diagnostics = Capture(served.client, DiagnosticArray, "/diagnostics")
    report = diagnostics.wait_for(lambda m: m.status and m.status[0].name == "oxygen_inference: KV pool")
    (status,) = report.status
    values = {kv.key: kv.value for kv in status.values}
    assert status.level == DiagnosticStatus.OK and status.hardware_id == MODEL_ID
    assert (values["state"], values["total_blocks"], values["max_queue"]) == ("active", str(TOTAL_BLOCKS), "8")
    assert int(values["completed_requests"]) > 0


def _known(client: Node, observation_id: str) -> bool:
    """Whether the node has the observation: a request about it with no token budget is refused for the budget."""
    return infer(client, "probe", observation_id=observation_id, max_new_tokens=0).error_code != "NOT_FOUND"


def _publish_at_30_hz(served: Served, seconds: float, name: str) -> int:
    """Frames on a 30 Hz clock for ``seconds`` (each at its tick, so a slow publish on a busy machine does not
    stretch the period); how many were published."""
    start = time.monotonic()
    frames = 0
    while (tick := start + frames / 30) < start + seconds:
        time.sleep(max(0.0, tick - time.monotonic()))
        frames += 1
        served.observations.publish(ObservationMsg(observation_id=f"{name}-{frames}", text="a later frame"))
    return frames


def test_an_observation_read_stays_answerable_for_observation_keep_s_at_30_hz(served):
    """Last in this module: its stream of frames pushes the older observations out (kitchen is published again)."""
    keep_s = PARAMETERS["observation_keep_s"]
    served.publish(ObservationMsg(observation_id="read-by-a-client", text="the frame a client read"))
    read = time.monotonic()
    assert _publish_at_30_hz(served, 0.7 * keep_s, "during") > 8 * 3  # three times the ring's count (0.9 s to ask)
    assert _known(served.client, "read-by-a-client")
    time.sleep(max(0.0, read + keep_s - time.monotonic()))
    _publish_at_30_hz(served, 0.5, "after")  # beyond the count and older than keep_s: it goes
    wait_until(lambda: not _known(served.client, "read-by-a-client"), 5.0, "the old observation to go")
    served.publish(ObservationMsg(observation_id="kitchen", text=KITCHEN))
