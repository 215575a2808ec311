"""Message conversions: every supported image encoding (with row padding), clear errors for the rest, observation
ids, Infer responses with action chunks, pool statistics and the pool markers."""

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros.msg import ChatMessage as ChatMessageMsg
from oxygen_ros.msg import Outcome, Sampling
from oxygen_ros.srv import Infer
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from visualization_msgs.msg import Marker

from oxygen_ros.bounds import PROMPT_CHARS
from oxygen_ros.engine.stats import ServingStats
from oxygen_ros.engine.io import FINISH_REASONS, Observation, PoolStats, RequestOutput, TaskUsage, TierUsage
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.nodes import convert
from oxygen_ros.nodes.pool_markers import pool_markers
from oxygen_ros.viz.pool_map import BlockState, PoolMap

TEXT_CHARS = 100  # the receiver's bound on Observation.text
RGB = np.random.default_rng(0).integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
GREY = RGB[..., 0]
ENCODED = {  # encoding -> (pixels as sent, what the engine must get)
    "rgb8": (RGB, RGB),
    "bgr8": (RGB[..., ::-1], RGB),
    "rgba8": (np.dstack([RGB, np.full(GREY.shape, 255, np.uint8)]), RGB),
    "bgra8": (np.dstack([RGB[..., ::-1], np.zeros(GREY.shape, np.uint8)]), RGB),
    "mono8": (GREY[..., None], np.repeat(GREY[..., None], 3, axis=2)),
}


def _image(pixels: np.ndarray, encoding: str, padding: int = 0) -> Image:
    height, width, channels = pixels.shape
    rows = np.zeros((height, width * channels + padding), dtype=np.uint8)
    rows[:, : width * channels] = pixels.reshape(height, -1)
    step = width * channels + padding
    return Image(height=height, width=width, encoding=encoding, step=step, data=rows.tobytes())


@pytest.mark.parametrize("padding", [0, 5])
@pytest.mark.parametrize("encoding", ENCODED)
def test_supported_encodings_decode_to_rgb(encoding, padding):
    sent, expected = ENCODED[encoding]
    decoded = convert.image_to_rgb(_image(sent, encoding, padding))
    assert decoded.dtype == np.uint8 and decoded.flags.c_contiguous
    np.testing.assert_array_equal(decoded, expected)


@pytest.mark.parametrize(
    ("image", "phrase"),
    [
        (Image(height=2, width=2, encoding="16UC1", step=4, data=bytes(8)), "unsupported image encoding '16UC1'"),
        (Image(height=0, width=4, encoding="rgb8", step=12), "zero-size image (4x0)"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(11)), "image data has 11 bytes"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(13)), "image data has 13 bytes"),
        (Image(height=2, width=2, encoding="rgb8", step=5, data=bytes(12)), "step 5 is shorter"),
        (Image(height=2, width=2, encoding="rgb8", step=0, data=bytes(12)), "step 0 is shorter"),
    ],
    ids=["encoding", "zero-size", "truncated", "too-long", "short-step", "no-step"],
)
def test_bad_images_are_refused_with_the_reason(image, phrase):
    with pytest.raises(EngineError) as err:
        convert.image_to_rgb(image)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and phrase in err.value.message


def test_rgb_round_trip_through_a_message():
    msg = convert.rgb_to_image(RGB, Header(frame_id="f"))
    assert (msg.encoding, msg.step, msg.header.frame_id) == ("rgb8", 21, "f")
    np.testing.assert_array_equal(convert.image_to_rgb(msg), RGB)


def test_observation_ids():
    msg = ObservationMsg(text="a cup", images=[_image(RGB, "rgb8")], state=[0.5])
    auto = convert.observation_from_msg(msg, TEXT_CHARS)
    same_as_bgr = convert.observation_from_msg(ObservationMsg(text="a cup", images=[_image(RGB[..., ::-1], "bgr8")],
                                                              state=[0.5]), TEXT_CHARS)  # fmt: skip
    assert auto.observation_id.startswith("obs-") and auto.observation_id == same_as_bgr.observation_id
    named = convert.observation_from_msg(ObservationMsg(observation_id="kitchen", text="a cup"), TEXT_CHARS)
    assert named.observation_id == "kitchen"
    bad = ObservationMsg(images=[_image(RGB, "rgb8"), Image(encoding="rgb8")])
    with pytest.raises(EngineError, match="image 1: zero-size"):
        convert.observation_from_msg(bad, TEXT_CHARS)
    assert convert.camera_observation(_image(RGB, "rgb8")).observation_id == convert.observation_from_msg(
        ObservationMsg(images=[_image(RGB, "rgb8")]), TEXT_CHARS
    ).observation_id



def test_an_observation_keeps_its_camera_keys_and_stamp_and_keys_name_it_too():
    header = Header()
    header.stamp.sec, header.stamp.nanosec = 7, 5
    keyed = ObservationMsg(header=header, images=[_image(RGB, "rgb8")], image_keys=["wrist"])
    obs = convert.observation_from_msg(keyed, TEXT_CHARS)
    assert (obs.image_keys, obs.stamp_ns) == (["wrist"], 7 * 10**9 + 5)
    unkeyed = convert.observation_from_msg(ObservationMsg(images=[_image(RGB, "rgb8")]), TEXT_CHARS)
    other_camera = convert.observation_from_msg(ObservationMsg(images=[_image(RGB, "rgb8")], image_keys=["top"]),
                                                TEXT_CHARS)  # fmt: skip
    assert len({obs.observation_id, unkeyed.observation_id, other_camera.observation_id}) == 3
    frame = _image(RGB, "rgb8")
    frame.header = header
    assert convert.camera_observation(frame).stamp_ns == 7 * 10**9 + 5

def test_infer_request_and_response():
    req = Infer.Request(task_id="nav-1", task_type="navigation", prompt="go", want_actions=True, max_new_tokens=7,
                        priority=3, deadline_s=0.25)  # fmt: skip
    greq = convert.generate_request(req, None, SamplingParams(), PROMPT_CHARS)
    assert (greq.task_id, greq.task_type, greq.sampling.max_new_tokens, greq.priority) == ("nav-1", "navigation", 7, 3)
    assert (greq.want_text, greq.want_actions, greq.deadline_s) == (False, True, 0.25)
    actions = np.arange(6, dtype=np.float32).reshape(3, 2)
    out = RequestOutput("r", "nav-1", "navigation", text="left", finish_reason="stop", prompt_tokens=9,
                        reused_prefix_tokens=4, generated_tokens=2, queue_ms=1.5, latency_ms=9.0, actions=actions)
    seen = Observation(observation_id="obs-1", stamp_ns=12 * 10**9 + 345)
    response = convert.fill_response(Infer.Response(), out, seen, 0.02, Time(sec=3))
    assert (response.success, response.error_code, response.text) == (True, "", "left")
    assert (response.observation_id, response.observation_stamp.sec, response.observation_stamp.nanosec) == \
        ("obs-1", 12, 345)  # fmt: skip
    assert (response.prompt_tokens, response.reused_prefix_tokens, response.generated_tokens) == (9, 4, 2)
    chunk = response.actions
    assert (chunk.task_id, chunk.horizon, chunk.action_dim, chunk.header.stamp.sec) == ("nav-1", 3, 2, 3)
    assert chunk.period_s == pytest.approx(0.02) and list(chunk.actions) == [0, 1, 2, 3, 4, 5]
    failed = RequestOutput("r", "t", "vqa", error_code=ErrorCode.RESOURCE_EXHAUSTED, message="queue full")
    response = convert.fill_response(Infer.Response(), failed, None, 0.02, Time())
    assert (response.success, response.error_code, response.message) == (False, "RESOURCE_EXHAUSTED", "queue full")
    assert response.observation_id == ""


NODE_DEFAULTS = SamplingParams(temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1, seed=None)


def test_unset_sampling_fields_take_the_node_defaults_and_set_ones_win():
    unset = convert.sampling_params(Sampling(), 9, NODE_DEFAULTS)
    assert (unset.temperature, unset.top_p, unset.top_k, unset.min_p, unset.repetition_penalty) == (0.7, 0.9, 40,
                                                                                                     0.05, 1.1)
    assert (unset.seed, unset.max_new_tokens, unset.stop) == (None, 9, [])
    mine = Sampling(temperature=0.5, top_p=0.5, top_k=1, min_p=0.25, repetition_penalty=1.5, seed=3, stop=["."])
    own = convert.sampling_params(mine, 9, NODE_DEFAULTS)
    assert (own.temperature, own.top_p, own.top_k, own.min_p, own.repetition_penalty) == (0.5, 0.5, 1, 0.25, 1.5)
    assert (own.seed, own.stop) == (3, ["."])
    assert convert.sampling_params(Sampling(), 9, SamplingParams()).greedy  # the node's own defaults: greedy


def test_a_nan_sampling_field_is_not_taken_for_unset():
    with pytest.raises(EngineError, match=r"temperature must be 0 \(greedy\) or in \[0.01, 100\], got nan"):
        convert.sampling_params(Sampling(temperature=float("nan")), 9, NODE_DEFAULTS).check()


def test_the_sampling_bounds_hold_as_float32_arrives():
    """Sampling's fields are float32: 0.01 arrives as 0.0099999998 and is still in range; one below is not."""
    convert.sampling_params(Sampling(temperature=0.01, repetition_penalty=0.01), 9, NODE_DEFAULTS).check()
    with pytest.raises(EngineError, match="repetition_penalty"):
        convert.sampling_params(Sampling(temperature=0.01, repetition_penalty=0.0099), 9, NODE_DEFAULTS).check()


def test_pool_stats_message():
    pool = PoolStats(
        model="m", block_size=16, total_blocks=10, free_blocks=5, cached_blocks=2, used_blocks=3, peak_used_blocks=6,
        shared_blocks=1,
        prefix_hit_rate=0.5, fragmentation=0.25, evictions=4, active_requests=2, queued_requests=1,
        bytes_per_block=100, tasks=[TaskUsage("vqa-1", "vqa", "float32", 3, 1, 300)],
        tiers=[TierUsage("gpu", 1000, 500, 5, 6, 4), TierUsage("cpu", 4000, 300, 3, 2, 2)],
    )  # fmt: skip
    msg = convert.pool_stats_msg(ServingStats(pool, "cpu", 8, prefix_hits=6, prefix_queries=10, completed=1),
                                 Time(sec=7))  # fmt: skip
    assert (msg.total_blocks, msg.free_blocks, msg.cached_blocks, msg.peak_used_blocks, msg.evictions,
            msg.header.stamp.sec) == (10, 5, 2, 6, 4, 7)  # fmt: skip
    assert [(t.task_id, t.blocks, t.shared_blocks, t.bytes) for t in msg.tasks] == [("vqa-1", 3, 1, 300)]
    assert [(t.name, t.capacity_bytes, t.used_bytes, t.blocks, t.hits, t.misses) for t in msg.tiers] == [
        ("gpu", 1000, 500, 5, 6, 4), ("cpu", 4000, 300, 3, 2, 2)]  # fmt: skip


def _pool_map(num_blocks: int) -> PoolMap:
    states = np.array([BlockState.FREE, BlockState.CACHED, BlockState.USED, BlockState.SHARED] * num_blocks)
    owners = np.where(states == BlockState.USED, 0, -1)
    return PoolMap("m", states[:num_blocks], owners[:num_blocks], ("vqa-1",))


@pytest.mark.parametrize("max_cubes", [100, 10])
def test_pool_markers_one_per_block(max_cubes):
    pmap = _pool_map(12)
    markers = pool_markers(pmap, "pool", Time(sec=1), max_cubes=max_cubes).markers
    assert markers[0].action == Marker.DELETEALL
    added = markers[1:]
    assert len({(m.ns, m.id) for m in added}) == len(added)
    assert {m.header.frame_id for m in markers} == {"pool"}
    colours = pmap.colours() / 255.0
    if max_cubes >= pmap.num_blocks:
        cubes = sorted((m for m in added if m.ns == "kv_blocks"), key=lambda m: m.id)
        assert [m.id for m in cubes] == list(range(12)) and {m.type for m in cubes} == {Marker.CUBE}
        got = [(m.color.r, m.color.g, m.color.b) for m in cubes]
    else:
        (cubes,) = [m for m in added if m.ns == "kv_blocks"]
        assert cubes.type == Marker.CUBE_LIST and len(cubes.points) == 12
        got = [(c.r, c.g, c.b) for c in cubes.colors]
    np.testing.assert_allclose(np.array(got), colours, atol=1e-6)  # ColorRGBA holds float32
    legend = [m.text for m in added if m.ns == "kv_legend"]
    assert legend == ["free (3)", "cached (3)", "shared (3)", "vqa-1 (3)"]


def test_a_requests_state_joins_the_observations_frames_under_its_own_id():
    frame = np.full((4, 4, 3), 7, dtype=np.uint8)
    seen = Observation(observation_id="obs-1", text="a cup", images=[frame])
    a, b, c = (convert.with_state(seen, s) for s in ([0.5, 1.0], [0.5, 1.0], [0.5, 1.5]))
    assert a.images[0] is frame and a.text == "a cup" and a.state == [0.5, 1.0]
    assert a.observation_id == b.observation_id != c.observation_id and a.observation_id.startswith("obs-1+s")
    assert seen.state == []  # the ring's observation is not changed


def test_image_keys_are_one_per_image_and_bounded():
    image = convert.rgb_to_image(np.zeros((2, 2, 3), dtype=np.uint8), Header())
    convert.check_observation(ObservationMsg(images=[image], image_keys=["observation.images.wrist"]))
    with pytest.raises(EngineError, match="image_keys has 2 keys for 1 images"):
        convert.check_observation(ObservationMsg(images=[image], image_keys=["a", "b"]))
    with pytest.raises(EngineError, match="image_keys\\[0\\]"):
        convert.check_observation(ObservationMsg(images=[image], image_keys=["k" * 300]))


def test_outcome_constants_are_the_engines_lists():
    """The interface's named error codes and finish reasons are exactly the engine's (one list each)."""
    constants = {k: v for k, v in vars(Outcome).items() if k.isupper() and isinstance(v, str)}
    errors = {v for k, v in constants.items() if not k.startswith(("FINISH_", "ERROR_NONE"))}
    finishes = {v for k, v in constants.items() if k.startswith("FINISH_")}
    assert errors == {code.value for code in ErrorCode} and finishes == set(FINISH_REASONS)


def test_chat_and_constraint_fields_parse_within_bounds():
    req = Infer.Request(prompt="and now?", messages=[ChatMessageMsg(role="user", content="hi"), ChatMessageMsg(
        role="assistant", content="", tool_calls='[{"type": "function", "function": {"name": "grasp"}}]')],
        tools='[{"type": "function"}]', template_options='{"enable_thinking": false}', regex="(a|b)", logprobs=3)
    greq = convert.generate_request(req, None, SamplingParams(), PROMPT_CHARS)
    assert [m.role for m in greq.messages] == ["user", "assistant"] and greq.messages[1].tool_calls[0]["type"]
    assert greq.tools == [{"type": "function"}] and greq.template_options == {"enable_thinking": False}
    assert (greq.constraint.kind, greq.constraint.source, greq.logprobs, greq.chat) == ("regex", "(a|b)", 3, True)
    for bad, field in (({"tools": '{"a": 1}'}, "tools"), ({"template_options": "[]"}, "template_options"),
                       ({"tools": "[" * 5000 + "]" * 5000}, "tools"),
                       ({"messages": [ChatMessageMsg(role="user", content="x" * PROMPT_CHARS)]}, "messages")):
        with pytest.raises(EngineError) as err:
            convert.generate_request(Infer.Request(prompt="q", **bad), None, SamplingParams(), PROMPT_CHARS)
        assert field in err.value.message
    # 300 levels parse (json.loads recurses ~1000), but a chat template rendering them recursively would not
    deep = '[{"type": "function", "function": {"parameters": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}}]"
    for bad, field in (({"tools": deep}, "tools"),
                       ({"messages": [ChatMessageMsg(role="assistant", tool_calls=deep)]}, "tool_calls")):
        with pytest.raises(EngineError) as err:
            convert.generate_request(Infer.Request(prompt="q", **bad), None, SamplingParams(), PROMPT_CHARS)
        assert err.value.code == ErrorCode.OUT_OF_RANGE and f"{field} nests 303 levels deep" in err.value.message
