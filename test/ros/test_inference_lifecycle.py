"""`oxygen_inference` through its lifecycle, driven over the standard lifecycle services like `ros2 lifecycle set`:
a failed configure (missing model, bad parameter) leaves it unconfigured and answering; configure / activate /
deactivate / cleanup serve and stop serving; camera frames become observations whose prefix is prefilled eagerly.
Also the installed `inference_node` executable, as `ros2 run` starts it."""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from inference_client import (
    NODE,
    Capture,
    infer,
    lifecycle_state,
    pool_stats,
    transition,
)
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from oxygen_ros.srv import Infer
from rcl_interfaces.msg import Log
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import qos_profile_sensor_data
from ros_harness import node_process, set_parameter, spin_nodes, wait_for, wait_until
from sensor_msgs.msg import Image

from oxygen_ros.nodes import params
from oxygen_ros.nodes.inference_node import InferenceNode
from oxygen_ros.observations import content_id

CAMERA = "/test_camera/image_raw"
FRAME = np.random.default_rng(1).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)
IMAGE_TOKENS = 256  # pi0.5 (and pi05-causal-tiny): 256 SigLIP tokens per 224x224 image


def _not_active(client: Node, state: str) -> None:
    response = infer(client, "anything")
    assert (response.success, response.error_code) == (False, "FAILED_PRECONDITION")
    assert response.message == f"node is not active ({state})"


def _camera_frame() -> Image:
    height, width, _ = FRAME.shape
    bgr = FRAME[..., ::-1].tobytes()  # cameras often send bgr8: the node must hand the engine RGB
    return Image(height=height, width=width, encoding="bgr8", step=width * 3, data=bgr)


def test_lifecycle_transitions(ros_context, tmp_path, one_torch_thread, capfd):
    missing = tmp_path / "no-model-here"
    missing.mkdir()  # a folder without model files, like a wrong path on a robot
    overrides = [
        Parameter("model", value=str(missing)),
        Parameter("kv_cache_bytes", value=16 << 20),
        Parameter("max_model_len", value=1024),
        Parameter("eager_prefill", value=True),
        Parameter("block_size", value=12),  # typed and in range, but not a power of two: the first configure says so
        # a mixed-format pool: the image prefix at fp32 (shared with the eager prefill), the arm's own blocks int8
        Parameter("kv_task_dtypes", value=["instruction=int8"]),
        Parameter("kv_observation_dtype", value="fp32"),
        Parameter("allow_random_weights", value=True),  # pi05-causal-tiny's actions are asked for below
    ]
    node = InferenceNode(context=ros_context, parameter_overrides=overrides)
    client = Node("lifecycle_test_client", context=ros_context)
    diagnostics = Capture(client, DiagnosticArray, "/diagnostics")
    log = Capture(client, Log, "/rosout", 100)
    camera = client.create_publisher(Image, CAMERA, qos_profile_sensor_data)
    with spin_nodes(ros_context, node, client):
        assert lifecycle_state(client) == "unconfigured"
        _not_active(client, "unconfigured")
        assert pool_stats(client).total_blocks == 0
        level = diagnostics.wait_for(lambda m: m.status[0].values[0].value == "unconfigured").status[0].level
        assert level == DiagnosticStatus.ERROR

        failures = [
            ("block_size", 16, "bad parameter: block_size must be a power of two, got 12"),
            ("camera_topic", CAMERA, "bad parameter camera_topic: Invalid topic name"),
            ("model", "pi05-causal-tiny", f"cannot load model '{missing}'"),
        ]
        set_parameter(client, NODE, "camera_topic", "two words")
        for name, fix, reason in failures:  # each failed configure says why, then the parameter is fixed
            assert not transition(client, Transition.TRANSITION_CONFIGURE)
            log.wait_for(lambda m, reason=reason: m.name == "oxygen_inference" and reason in m.msg, what=reason)
            assert lifecycle_state(client) == "unconfigured"
            set_parameter(client, NODE, name, fix)
        _not_active(client, "unconfigured")

        assert transition(client, Transition.TRANSITION_CONFIGURE)
        assert lifecycle_state(client) == "inactive"
        _not_active(client, "inactive")
        stats = pool_stats(client)
        assert stats.total_blocks > 0
        # counted in units of the int8 format (pi05-causal-tiny: 6 layers x 1 kv-head x 256): per block and layer the
        # K and V codes, bf16 key scales per channel, fp32 value scales per token
        assert stats.tiers[0].capacity_bytes == stats.total_blocks * 6 * (2 * 16 * 256 + 2 * 256 + 4 * 16)

        assert transition(client, Transition.TRANSITION_ACTIVATE)
        assert lifecycle_state(client) == "active"
        deadline = time.monotonic() + 60
        while pool_stats(client).cached_blocks < IMAGE_TOKENS // 16:  # the frame's image tokens, prefilled at once
            assert time.monotonic() < deadline, "the camera frame was never prefilled"
            camera.publish(_camera_frame())
            time.sleep(0.2)
        frame_id = content_id("", [FRAME], [])
        for observation_id in (frame_id, ""):  # by its content hash, and as the latest observation
            response = infer(client, "pick up the cup", task_id="arm", task_type="instruction",
                             observation_id=observation_id, want_text=False, want_actions=True)  # fmt: skip
            assert response.success, response.message
            chunk = response.actions
            assert (chunk.task_id, chunk.horizon, chunk.action_dim, len(chunk.actions)) == ("arm", 10, 32, 320)
            assert chunk.period_s == pytest.approx(0.02) and np.isfinite(chunk.actions).all()
            assert response.reused_prefix_tokens >= IMAGE_TOKENS

        assert transition(client, Transition.TRANSITION_DEACTIVATE)
        assert lifecycle_state(client) == "inactive"
        _not_active(client, "inactive")
        report = diagnostics.wait_for(lambda m: m.status[0].values[0].value == "inactive").status[0]
        assert report.level == DiagnosticStatus.ERROR and report.message == "not serving: the node is inactive"
        taken = {value.key: value.value for value in report.values}  # what configure took of the machine
        assert taken["kv_budget"] == "16 MiB (kv_cache_bytes)" and taken["max_num_seqs"] == "64"
        assert taken["kv_pool"].startswith(f"{stats.tiers[0].capacity_bytes >> 20} MiB, {stats.total_blocks} blocks")
        cpus = params.available_cpus()
        assert taken["compute_threads"] == f"{max(1, cpus // 2)} of {cpus} CPUs"
        # the configure log line (read from stderr: /rosout drops it in a process whose earlier context logged it)
        stderr: list[str] = []
        wait_until(lambda: stderr.append(capfd.readouterr().err) or any(
            "kv_budget 16 MiB (kv_cache_bytes)" in line and "compute_threads" in line
            for line in "".join(stderr).splitlines()), 10.0, "the resources in the configure log")  # fmt: skip

        assert transition(client, Transition.TRANSITION_CLEANUP)
        assert lifecycle_state(client) == "unconfigured"
        assert pool_stats(client).total_blocks == 0  # the pool is gone
        _not_active(client, "unconfigured")

        assert transition(client, Transition.TRANSITION_UNCONFIGURED_SHUTDOWN)
        assert lifecycle_state(client) == "finalized"


def test_installed_executable_starts_and_reports_a_missing_model(ros_context, tmp_path):
    launcher = Path(sys.prefix) / "lib" / "oxygen_ros" / "inference_node"
    args = [str(launcher), "--ros-args", "-p", f"model:={tmp_path / 'missing.gguf'}"]
    with node_process(args, ros_context, Infer, "/oxygen/infer") as process:
        client = Node("executable_test_client", context=ros_context)
        # Across processes a response is lost while the server has not yet matched a new client's response reader,
        # so the clients are made first and the idempotent get_state is retried until answered: by then the
        # other process knows all of them.
        get_state = client.create_client(GetState, f"{NODE}/get_state")
        change_state = client.create_client(ChangeState, f"{NODE}/change_state")
        infer_client = client.create_client(Infer, "/oxygen/infer")
        with spin_nodes(ros_context, client):
            for _ in range(20):
                try:
                    state = wait_for(get_state.call_async(GetState.Request()), 1.0).current_state.label
                    break
                except TimeoutError:
                    continue
            assert state == "unconfigured"
            configure = ChangeState.Request(transition=Transition(id=Transition.TRANSITION_CONFIGURE))
            assert not wait_for(change_state.call_async(configure), 30).success
            response = wait_for(infer_client.call_async(Infer.Request(prompt="anything", want_text=True)), 10)
            assert response.error_code == "FAILED_PRECONDITION"
            assert response.message == "node is not active (unconfigured)"
            log = process.log()
    assert process.process.returncode == 0, log
    assert "configure failed, cannot load model" in log and "missing.gguf" in log
