"""Remote inference: the camera's frames cross the network once, compressed, and requests name them by id. Measured
here: the bytes of one frame each way and of one request each way (CDR, as DDS sends them); and through real rclpy
nodes and the real SmolLM2, an inference node and a VQA node on `camera/image_raw/compressed` agree on a frame's id
(the hash of its compressed bytes), the VQA node sends no pixels, and its question, naming that frame or none (the
VQA node then names its newest by id), is answered about that frame."""

import cv2
import pytest
from inference_client import MODEL_TIMEOUT, infer
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.srv import AskQuestion, Infer
from rclpy.qos import qos_profile_sensor_data
from rclpy.serialization import serialize_message
from ros_harness import call_service, wait_until
from sensor_msgs.msg import CompressedImage
from std_msgs.msg import Header
from task_graph import INFERENCE, task_graph

from oxygen_ros.nodes.compressed import compressed_id, compressed_to_rgb
from oxygen_ros.nodes.convert import rgb_to_image
from oxygen_ros.nodes.vqa_node import VqaNode
from oxygen_ros.perception.camera import CameraModel
from oxygen_ros.perception.render import render
from oxygen_ros.perception.scene import make_scene

TOPIC = "camera/image_raw/compressed"


def _frame():
    rgb = render(make_scene(0), 0.0, CameraModel(640, 480))
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return rgb, CompressedImage(header=Header(frame_id="camera_optical_frame"), format="jpeg", data=jpeg.tobytes())


def test_bytes_per_frame_and_per_request_each_way():
    rgb, compressed = _frame()
    raw = rgb_to_image(rgb, compressed.header)
    inline = Infer.Request(prompt="What is on the table?", want_text=True, observation=[ObservationMsg(images=[raw])])
    by_id = Infer.Request(prompt="What is on the table?", want_text=True, observation_id=compressed_id(compressed))
    sizes = {name: len(serialize_message(msg)) for name, msg in
             (("raw frame", raw), ("compressed frame", compressed), ("request, inline frame", inline),
              ("request, by id", by_id))}  # fmt: skip
    print("bytes on the wire (640x480 camera_sim frame, JPEG 90):", sizes)
    assert sizes["request, by id"] < 1024 < 900_000 < sizes["request, inline frame"]
    assert sizes["compressed frame"] * 5 < sizes["raw frame"]
    assert compressed_to_rgb(compressed).shape == rgb.shape


@pytest.fixture(scope="module")
def remote(ros_domain_id):
    inference = INFERENCE | {"camera_topic": TOPIC}
    with task_graph(ros_domain_id, VqaNode, inference, service_wait_s=0.5, camera_topic=TOPIC,
                    send_images=False) as (graph, vqa):  # fmt: skip
        graph.start_inference()
        yield graph, vqa


def test_a_compressed_frame_is_named_alike_and_asked_about_by_id(remote):
    graph, vqa = remote
    _, compressed = _frame()
    frame_id = compressed_id(compressed)
    publisher = graph.client.create_publisher(CompressedImage, f"/{TOPIC}", qos_profile_sensor_data)
    wait_until(lambda: publisher.publish(compressed) or (vqa.frame.observation_id() == frame_id and infer(
        graph.client, "probe", observation_id=frame_id, max_new_tokens=0).error_code != "NOT_FOUND"), 10.0,
        "the frame at both nodes")  # fmt: skip
    assert vqa.frame.inline(3) == []  # send_images false: no pixels in any request
    answer = call_service(graph.client, AskQuestion, "/vqa/ask", AskQuestion.Request(
        question="What is on the table?", observation_id=frame_id, max_new_tokens=8), MODEL_TIMEOUT)  # fmt: skip
    assert answer.success and answer.answer, answer.message
    newest = call_service(graph.client, AskQuestion, "/vqa/ask", AskQuestion.Request(
        question="What is on the table?", max_new_tokens=8), MODEL_TIMEOUT)  # the VQA node's newest frame, by id
    assert newest.success and newest.observation_id == frame_id, (newest.message, newest.observation_id)
    seen = infer(graph.client, "What is on the table?", observation_id=frame_id, max_new_tokens=2)
    assert seen.success and seen.observation_id == frame_id
