"""Messages <-> engine data: images, observations, Infer requests and responses, Generate goals and results, pool
statistics.

Pure functions with no node state, so the node only wires callbacks to them and each conversion is tested on its
own. Bad input raises EngineError (INVALID_ARGUMENT, or OUT_OF_RANGE past a bound of ``bounds``) with a sentence that
names the field, which the node passes on as the reason; every size is checked before anything is copied.
"""

import array
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from oxygen_ros.engine.stats import ServingStats
from oxygen_ros.engine.grammar import CONSTRAINT_KINDS, MAX_SOURCE_CHARS
from oxygen_ros.engine.io import ChatMessage, Constraint, GenerateRequest, Observation, RequestOutput, TokenLogprob
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.action import Generate
from oxygen_ros.msg import ActionChunk, KvPoolStats, Sampling, TaskKvUsage, TierStats
from oxygen_ros.msg import ChatMessage as ChatMessageMsg
from oxygen_ros.msg import TokenLogprob as TokenLogprobMsg
from oxygen_ros.msg import Observation as ObservationMsg
from oxygen_ros import bounds
from oxygen_ros.nodes.image_rows import image_rows
from oxygen_ros.nodes.stamps import nanoseconds, time_ns
from oxygen_ros.observations import content_id
from oxygen_ros.srv import Infer

R = TypeVar("R")

# encoding -> (channels in the message, channel indices giving R, G, B)
ENCODINGS: dict[str, tuple[int, tuple[int, int, int]]] = {
    "rgb8": (3, (0, 1, 2)),
    "bgr8": (3, (2, 1, 0)),
    "rgba8": (4, (0, 1, 2)),
    "bgra8": (4, (2, 1, 0)),
    "mono8": (1, (0, 0, 0)),
}


def checked_pixels(msg: Image) -> np.ndarray:
    """An 8-bit image's pixels [H, W, channels] as sent (a view: no copy), its encoding, sizes and the RGB copy
    ``image_to_rgb`` makes of it checked against their bounds."""
    if msg.encoding not in ENCODINGS:
        bounds.text("image encoding", msg.encoding, bounds.ID_CHARS)  # too long to quote in the refusal
        raise _invalid(f"unsupported image encoding {msg.encoding!r}; supported: {', '.join(ENCODINGS)}")
    channels = ENCODINGS[msg.encoding][0]
    return image_rows(msg, channels, ("RGB copy", 3)).reshape(msg.height, msg.width, channels)


def image_to_rgb(msg: Image) -> np.ndarray:
    """HxWx3 uint8 RGB copy of an 8-bit image (row padding in ``step`` is dropped)."""
    return np.ascontiguousarray(checked_pixels(msg)[..., list(ENCODINGS[msg.encoding][1])])


def images_to_rgb(msgs: Sequence[Image], name: str) -> list[np.ndarray]:
    """Each image as ``image_to_rgb`` gives it; a refusal names the image (``name`` formatted with its index)."""
    images = []
    for i, image in enumerate(msgs):
        try:
            images.append(image_to_rgb(image))
        except EngineError as exc:
            raise EngineError(exc.code, f"{name.format(i)}: {exc.message}") from exc
    return images


def rgb_to_image(rgb: np.ndarray, header: Header) -> Image:
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 uint8 RGB array, got {rgb.dtype} {rgb.shape}")
    height, width, _ = rgb.shape
    data = array.array("B", np.ascontiguousarray(rgb).tobytes())
    return Image(header=header, height=height, width=width, encoding="rgb8", step=width * 3, data=data)


def camera_observation(msg: Image) -> Observation:
    """One camera frame as an observation with a content-hash id and its capture stamp."""
    rgb = image_to_rgb(msg)
    return Observation(observation_id=content_id("", [rgb], []), images=[rgb], stamp_ns=nanoseconds(msg.header.stamp))


def check_observation(msg: ObservationMsg) -> None:
    """The fields of an Observation whose bounds do not depend on the receiver: its id, image count and state."""
    bounds.text("observation_id", msg.observation_id, bounds.ID_CHARS)
    bounds.items("images", msg.images, bounds.IMAGES, "images")
    if msg.image_keys and len(msg.image_keys) != len(msg.images):
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"image_keys has {len(msg.image_keys)} keys for "
                          f"{len(msg.images)} images (one per image, or none)")  # fmt: skip
    for i, key in enumerate(msg.image_keys):
        bounds.text(f"image_keys[{i}]", key, bounds.ID_CHARS)
    bounds.items("state", msg.state, bounds.STATE)
    for i, value in enumerate(msg.state):
        bounds.finite(f"state[{i}]", value)


def observation_from_msg(msg: ObservationMsg, max_text_chars: int) -> Observation:
    """The message's own observation_id if it has one, else a content hash."""
    check_observation(msg)
    bounds.text("text", msg.text, max_text_chars)
    images = images_to_rgb(msg.images, "image {}")
    state, keys = [float(v) for v in msg.state], list(msg.image_keys)
    observation_id = msg.observation_id or content_id(msg.text, images, state, keys)
    return Observation(observation_id=observation_id, text=msg.text, images=images, state=state, image_keys=keys,
                       stamp_ns=nanoseconds(msg.header.stamp))  # fmt: skip


def check_infer_request(req: Infer.Request, max_prompt_chars: int) -> None:
    """The Infer fields the engine does not bound itself before it sizes work (it bounds max_new_tokens by the
    context and the pool; priority is a uint8)."""
    for field in ("task_id", "task_type", "observation_id"):
        bounds.text(field, getattr(req, field), bounds.ID_CHARS)
    bounds.text("prompt", req.prompt, max_prompt_chars)
    bounds.text("system_prompt", req.system_prompt, max_prompt_chars)
    for kind in CONSTRAINT_KINDS:
        bounds.text(kind, getattr(req, kind), MAX_SOURCE_CHARS)
    bounds.within("deadline_s", req.deadline_s, 0.0, bounds.DEADLINE_S, note=" s (0 = none)")


def check_state(state: Sequence[float]) -> None:
    """An Infer request's robot state: at most ``bounds.STATE`` finite values."""
    bounds.items("state", state, bounds.STATE)
    for i, value in enumerate(state):
        bounds.finite(f"state[{i}]", value)


def with_state(observation: Observation, state: Sequence[float]) -> Observation:
    """``observation`` with the robot state a request brings (its images and text, never re-hashed: the id is the
    observation's, extended by the state's hash, so equal frames with equal states still share one id)."""
    values = [float(v) for v in state]
    suffix = hashlib.sha256(np.asarray(values, dtype=np.float32).tobytes()).hexdigest()[:8]
    return replace(observation, observation_id=f"{observation.observation_id}+s{suffix}", state=values)


def check_generate_goal(goal: Generate.Goal, max_prompt_chars: int, max_feedback_every: int) -> None:
    """A Generate goal's fields that size work, as for Infer, and how often it wants feedback."""
    check_infer_request(goal, max_prompt_chars)
    bounds.at_most("feedback_every", goal.feedback_every, max_feedback_every, "tokens")


def generate_request(req: Infer.Request | Generate.Goal, observation: Observation | None, defaults: SamplingParams,
                     max_prompt_chars: int) -> GenerateRequest:  # fmt: skip
    """The engine validates (empty prompt, task type, token budget, sampling ranges, what the model's chat template
    takes, the constraint); this parses the JSON fields and the conversation, each bounded, and moves the rest across
    ('' task type = generic; unset sampling fields = ``defaults``). A Generate goal asks for text only."""
    return GenerateRequest(
        prompt=req.prompt,
        task_id=req.task_id or "default",
        task_type=req.task_type or "generic",
        observation=observation,
        sampling=sampling_params(req.sampling, req.max_new_tokens, defaults),
        want_text=getattr(req, "want_text", True),
        want_actions=getattr(req, "want_actions", False),
        priority=req.priority,
        deadline_s=req.deadline_s,
        chat=not req.raw,
        messages=chat_messages(req.messages, max_prompt_chars - len(req.prompt) - len(req.system_prompt)
                               - len(req.tools)),  # one budget for the text a prompt is rendered from  # fmt: skip
        system_prompt=req.system_prompt,
        tools=_json_field("tools", req.tools, max_prompt_chars, list),
        template_options=_json_field("template_options", req.template_options, bounds.TEMPLATE_OPTIONS_CHARS, dict),
        constraint=constraint(req),
        logprobs=req.logprobs,
    )


def chat_messages(msgs: Sequence[ChatMessageMsg], max_chars: int) -> list[ChatMessage]:
    """The conversation, its texts together within ``max_chars`` (the prompt's bound less what the prompt, the
    system prompt and the tools take) and its images within ``bounds.CHAT_IMAGES``, both before anything is decoded."""
    text = sum(len(m.content) + len(m.tool_calls) for m in msgs)
    bounds.at_most("messages' text (with the prompt, system_prompt and tools)", text, max(max_chars, 0), "characters")
    bounds.at_most("messages' images", sum(len(m.images) for m in msgs), bounds.CHAT_IMAGES, "images")
    out = []
    for i, msg in enumerate(msgs):
        bounds.text(f"messages[{i}].role", msg.role, bounds.ID_CHARS)
        images = images_to_rgb(msg.images, f"messages[{i}].images[{{}}]")
        calls = _json_field(f"messages[{i}].tool_calls", msg.tool_calls, bounds.TEXT_CHARS, list)
        out.append(ChatMessage(role=msg.role, content=msg.content, images=images, tool_calls=calls))
    return out


def constraint(req: Infer.Request | Generate.Goal) -> Constraint | None:
    """The one of json_schema, regex and grammar that is set (the engine bounds and compiles it)."""
    given = [kind for kind in CONSTRAINT_KINDS if getattr(req, kind)]
    if len(given) > 1:
        raise _invalid(f"{' and '.join(given)} are both set: constrain an answer one way")
    return Constraint(given[0], getattr(req, given[0])) if given else None


def _json_field(name: str, text: str, max_chars: int, kind: type[list] | type[dict]) -> Any:
    """A JSON field ('' = empty) parsed, after its length is bounded: INVALID_ARGUMENT naming it when it is not
    JSON or not a ``kind``."""
    if not text:
        return kind()
    bounds.text(name, text, max_chars)
    bounds.json_nesting(name, text)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _invalid(f"{name} is not valid JSON: {exc}") from exc
    if not isinstance(value, kind):
        raise _invalid(f"{name} must be a JSON {'list' if kind is list else 'object'}, got {type(value).__name__}")
    return value


UNSET = Sampling()  # a field at its message default is unset: the node's default applies
CONTROLS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def sampling_params(msg: Sampling, max_new_tokens: int, defaults: SamplingParams) -> SamplingParams:
    """A Sampling message's controls, each unset one (its message default, seed -1) taken from ``defaults`` (the
    node's parameters); the engine checks their ranges. NaN is never equal to a default, so it reaches the check."""
    chosen = {name: getattr(defaults if getattr(msg, name) == getattr(UNSET, name) else msg, name) for name in CONTROLS}
    seed = defaults.seed if msg.seed == UNSET.seed else msg.seed
    return SamplingParams(max_new_tokens=max_new_tokens, seed=seed, stop=list(msg.stop), **chosen)


def fill_generate_result(result: Generate.Result, out: RequestOutput,
                         observation: Observation | None) -> Generate.Result:  # fmt: skip
    return _fill_answer(result, out, observation)


def logprob_msg(logprob: TokenLogprob) -> TokenLogprobMsg:
    return TokenLogprobMsg(token_id=logprob.token_id, token=logprob.token, logprob=logprob.logprob,
                           top_ids=logprob.top_ids, top_tokens=logprob.top_tokens,
                           top_logprobs=logprob.top_logprobs)  # fmt: skip


def _invalid(message: str) -> EngineError:
    return EngineError(ErrorCode.INVALID_ARGUMENT, message)


def error_response(response: R, code: ErrorCode, message: str) -> R:
    """Any of our responses (they all carry success, error_code and message) as a failure."""
    response.success, response.error_code, response.message = False, code.value, message
    return response


def action_chunk(actions: np.ndarray, task_id: str, period_s: float, stamp: Time) -> ActionChunk:
    """[horizon, action_dim] actions as a chunk, row-major."""
    horizon, action_dim = actions.shape
    chunk = ActionChunk(task_id=task_id, horizon=horizon, action_dim=action_dim, period_s=period_s)
    chunk.header.stamp = stamp
    chunk.actions = actions.astype(np.float32).ravel().tolist()
    return chunk


def fill_response(response: Infer.Response, out: RequestOutput, observation: Observation | None, period_s: float,
                  stamp: Time) -> Infer.Response:  # fmt: skip
    if out.actions is not None:
        response.actions = action_chunk(out.actions, out.task_id, period_s, stamp)
    return _fill_answer(response, out, observation)


def _fill_answer(target: R, out: RequestOutput, observation: Observation | None) -> R:
    """The fields an Infer response and a Generate result share: outcome, text, token/time counts and the
    observation it is about, with its capture stamp (a published one under the id the ring keeps, so a caller can
    ask about it again; an inline one under its content hash, which names it only in the answer)."""
    if not out.ok:
        error_response(target, out.error_code, out.message)
    else:
        target.success, target.message = True, out.finish_reason
    target.text = out.text
    target.prompt_tokens = out.prompt_tokens
    target.reused_prefix_tokens = out.reused_prefix_tokens
    target.reused_image_tokens = out.reused_image_tokens
    target.generated_tokens = out.generated_tokens
    target.queue_ms = out.queue_ms
    target.latency_ms = out.latency_ms
    target.request_id = out.request_id
    target.finish_reason = out.finish_reason
    target.logprobs = [logprob_msg(lp) for lp in out.logprobs]
    if observation is not None:
        target.observation_id, target.observation_stamp = observation.observation_id, time_ns(observation.stamp_ns)
    return target


def pool_stats_msg(stats: ServingStats, stamp: Time) -> KvPoolStats:
    """The snapshot as a message; tiers as the engine reports them: ``gpu`` (the device pool, L0, on whatever
    device), then ``cpu`` (L1 host memory) and ``disk`` (L2) when configured."""
    pool = stats.pool
    msg = KvPoolStats(
        model=pool.model,
        max_images=pool.max_images,
        block_size=pool.block_size,
        total_blocks=pool.total_blocks,
        free_blocks=pool.free_blocks,
        cached_blocks=pool.cached_blocks,
        peak_used_blocks=pool.peak_used_blocks,
        shared_blocks=pool.shared_blocks,
        prefix_hit_rate=pool.prefix_hit_rate,
        fragmentation=pool.fragmentation,
        evictions=pool.evictions,
        active_requests=pool.active_requests,
        queued_requests=pool.queued_requests,
        blocks_by_reader_types=pool.blocks_by_reader_types,
    )
    msg.header.stamp = stamp
    msg.tasks = [
        TaskKvUsage(
            task_id=t.task_id, task_type=t.task_type, kv_dtype=t.kv_dtype, blocks=t.blocks,
            shared_blocks=t.shared_blocks, bytes=t.bytes,
        )  # fmt: skip
        for t in pool.tasks
    ]
    msg.tiers = [
        TierStats(name=t.name, capacity_bytes=t.capacity_bytes, used_bytes=t.used_bytes, blocks=t.blocks, hits=t.hits,
                  misses=t.misses)  # fmt: skip
        for t in pool.tiers
    ]
    return msg
