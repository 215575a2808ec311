"""Model presets and autostart through the real bringups: `oxygen-ros up --preset P --model M --no-autostart` starts
the inference node with the config's values < the preset's < --model's, and leaves it unconfigured; the demo's
in-process graph (bringup.Graph) layers a preset the same way."""

import time

import pytest
import yaml
from lifecycle_msgs.srv import GetState
from process_graph import CONFIG, process_graph
from rcl_interfaces.srv import GetParameters
from rclpy.node import Node
from rclpy.parameter import parameter_value_to_python
from ros_harness import call_service, make_context, spin_nodes

from oxygen_ros.bringup import Graph
from oxygen_ros.nodes import presets

pytestmark = pytest.mark.slow

PRESET = "pi05-causal-tiny"
# The config sets what the preset sets too (the preset must win) and one value it does not (the config's must stay).
CHANGES = {"oxygen_inference": {"max_model_len": 512, "seed": 7, "stats_rate_hz": 4.0}, "camera_sim": {"rate_hz": 2.0}}
NAMES = ["model", "max_model_len", "seed", "num_denoise_steps", "stats_rate_hz"]
STAYS_S = 3.0  # how long the unconfigured node is watched for a transition nobody asked for


def _expected() -> list:
    preset = presets.load(PRESET)
    return ["smollm2-135m", preset["max_model_len"], preset["seed"], preset["num_denoise_steps"], 4.0]


def test_up_layers_config_preset_and_model_and_no_autostart_leaves_the_node_unconfigured(ros_domain_id, tmp_path):
    context = make_context(ros_domain_id)
    try:
        arguments = ("--preset", PRESET, "--model", "smollm2-135m", "--no-autostart")
        with process_graph(tmp_path, CHANGES, arguments) as graph:
            assert "oxygen_inference is unconfigured (--no-autostart)" in graph.log()
            client = Node("preset_test_client", context=context)
            with spin_nodes(context, client):
                time.sleep(STAYS_S)
                state = call_service(client, GetState, "/oxygen_inference/get_state", GetState.Request(), 30.0, resend_s=5.0)
                assert state.current_state.label == "unconfigured", graph.log()[-4000:]
                request = GetParameters.Request(names=NAMES)
                reply = call_service(client, GetParameters, "/oxygen_inference/get_parameters", request, 30.0, resend_s=5.0)
            assert [parameter_value_to_python(value) for value in reply.values] == _expected()
            assert graph.stop() == 0
    finally:
        context.try_shutdown()


def test_the_demo_graph_layers_a_preset_between_the_config_and_explicit_values(ros_domain_id, tmp_path):
    config = yaml.safe_load(CONFIG.read_text())
    config["oxygen_inference"]["ros__parameters"] |= CHANGES["oxygen_inference"]
    (tmp_path / "oxygen.yaml").write_text(yaml.safe_dump(config))
    graph = Graph(tmp_path / "oxygen.yaml", "smollm2-135m", presets.load(PRESET), domain_id=ros_domain_id)
    try:  # not started: the parameters are read, no model is loaded
        assert [graph.inference.get_parameter(name).value for name in NAMES] == _expected()
    finally:
        graph.close()
