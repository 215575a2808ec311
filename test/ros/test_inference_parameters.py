"""The inference node's parameters through rclpy's parameter services, as `ros2 param describe/set` use them: typed,
described and ranged; a wrong type, an out-of-range value, or any set while configured is refused with a reason; a
bad override fails the start naming it. And a preset's sampling defaults through the real node: a request that
leaves its Sampling fields unset is decoded with them, on /oxygen/infer and /oxygen/generate alike, and a field the
request sets wins."""

import pytest
from action_msgs.msg import GoalStatus
from inference_client import NODE, configure_and_activate, infer, lifecycle_state, serving
from oxygen_ros.action import Generate
from oxygen_ros.msg import Sampling
from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters, SetParameters
from rclpy.node import Node
from rclpy.parameter import Parameter
from ros_harness import call_service, make_context, send_goal

from oxygen_ros.nodes import presets
from oxygen_ros.nodes.inference_node import InferenceNode

pytestmark = pytest.mark.slow

PRESET = "model: smollm2-135m\ntemperature: 1.5\ntop_k: 50\nseed: 5\n"  # samples unless a request says otherwise
NODE_PARAMETERS = {"kv_cache_bytes": 32 << 20, "max_model_len": 256, "max_num_seqs": 2,
                   "enable_prefix_caching": False}  # fmt: skip  # no cached prefix: every answer computed alike
PROMPT = "Write one sentence about the sea."


@pytest.fixture(scope="module")
def client(ros_domain_id, tmp_path_factory):
    folder = tmp_path_factory.mktemp("presets")
    (folder / "sampled.yaml").write_text(PRESET)
    values = presets.load("sampled", folder) | NODE_PARAMETERS
    with serving(ros_domain_id, values, "parameters_test_client", activate=False) as (_, client):
        yield client


def _set(client: Node, name: str, value: ParameterMsg) -> tuple[bool, str]:
    request = SetParameters.Request(parameters=[ParameterMsg(name=name, value=value)])
    (result,) = call_service(client, SetParameters, f"{NODE}/set_parameters", request).results
    return result.successful, result.reason


def _double(value: float) -> ParameterMsg:
    return Parameter("x", value=value).to_parameter_msg().value


def test_parameters_are_typed_ranged_and_refused_with_a_reason(client):
    names = ["temperature", "max_num_seqs", "kv_task_dtypes", "kv_full_precision_layers", "model"]
    request = DescribeParameters.Request(names=names)
    described = call_service(client, DescribeParameters, f"{NODE}/describe_parameters", request).descriptors
    by_name = {d.name: d for d in described}
    assert by_name["temperature"].type == ParameterType.PARAMETER_DOUBLE
    assert (by_name["temperature"].floating_point_range[0].from_value,
            by_name["temperature"].floating_point_range[0].to_value) == (0.0, 100.0)  # fmt: skip
    assert (by_name["max_num_seqs"].type, by_name["max_num_seqs"].integer_range[0].to_value) == (2, 4096)
    assert by_name["kv_task_dtypes"].type == ParameterType.PARAMETER_STRING_ARRAY  # an empty default keeps its type
    assert by_name["kv_full_precision_layers"].type == ParameterType.PARAMETER_INTEGER_ARRAY
    assert all("read at configure" in d.description and not d.read_only for d in described)

    ok, reason = _set(client, "top_p", _double(1.5))
    assert not ok and "top_p" in reason and "out of range" in reason
    ok, reason = _set(client, "stats_rate_hz", Parameter("x", value="fast").to_parameter_msg().value)
    assert not ok and "type" in reason
    assert _set(client, "top_p", _double(1.0)) == (True, "")  # unconfigured: the next configure reads it

    configure_and_activate(client)
    ok, reason = _set(client, "temperature", _double(0.5))
    assert not ok and "temperature: read at configure, and the node is active" in reason


def _text(response) -> str:
    assert response.success, response.message
    return response.text


def test_unset_sampling_fields_take_the_preset_defaults_and_set_ones_win(client):
    if lifecycle_state(client) == "unconfigured":  # run alone (the test above configures it otherwise)
        configure_and_activate(client)
    by_defaults = _text(infer(client, PROMPT, sampling=Sampling(seed=11)))
    spelled_out = _text(infer(client, PROMPT, sampling=Sampling(temperature=1.5, top_k=50, seed=11)))
    assert by_defaults == spelled_out
    greedy = [_text(infer(client, PROMPT, sampling=Sampling(top_k=1, seed=seed))) for seed in (11, 12)]
    assert greedy[0] == greedy[1] != by_defaults  # the request's top_k 1 wins over the node's sampling

    goal = Generate.Goal(prompt=PROMPT, max_new_tokens=16, sampling=Sampling(seed=11))  # infer()'s budget
    sent = send_goal(client, Generate, "/oxygen/generate", goal, timeout=30)
    done = sent.result(timeout=120)
    assert done.status == GoalStatus.STATUS_SUCCEEDED and done.result.text == by_defaults


def test_an_override_out_of_range_or_of_the_wrong_type_fails_the_start_naming_it(ros_domain_id):
    context = make_context(ros_domain_id)
    try:
        for name, value, phrase in (("max_num_seqs", 1 << 20, "out of range"), ("stats_rate_hz", 2, "DOUBLE")):
            with pytest.raises(ValueError) as raised:
                InferenceNode(context=context, parameter_overrides=[Parameter(name, value=value)])
            assert name in str(raised.value) and phrase in str(raised.value)
    finally:
        context.try_shutdown()
