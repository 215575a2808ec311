"""Hypothesis strategies over every field of the graph's interfaces, by class of bad value (docs/reliability.md,
"The fuzz suite"): empty and blank, unicode and control characters (NUL included: DDS strings end at it), lengths
either side of a bound and far past it, NaN / inf / negative / zero / float32 extremes / either side of an interval,
integer extremes, images whose header lies about their data, wrong encodings, too many images or state values.

Large values are built from a drawn size (``"x" * n``, ``bytes(n)``), never drawn element by element: hypothesis
bounds how much it draws per example, and the point is the size, not the bytes.
"""

import math

import numpy as np
from geometry_msgs.msg import PoseStamped
from hypothesis import strategies as st
from oxygen_ros.action import FollowInstruction, Generate, Navigate
from oxygen_ros.msg import Observation
from oxygen_ros.msg import Sampling
from oxygen_ros.srv import AskQuestion, CancelTask, Infer
from sensor_msgs.msg import Image

from oxygen_ros import bounds

TASK_TYPES = ("vqa", "instruction", "navigation", "generic")
ENCODINGS = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")
CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
UINT32_MAX = 2**32 - 1
FLOAT32_MAX = 3.4028234663852886e38
PROMPTS = ("What is on the table?", "Say hello.", "Which object is closest to the robot?")
MAX_STOP_CHARS = 256  # SamplingParams' bound on one stop string


def texts(bound: int, usual: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    """Strings for a field of at most ``bound`` characters."""
    return st.one_of(
        st.sampled_from(usual) if usual else st.nothing(),
        st.sampled_from(["", " ", "\t\n ", "\u3000\u2028"]),  # empty and blank
        st.text(max_size=24),  # any code point but surrogates (not UTF-8): accents, emoji, RTL, combining marks
        st.text(st.characters(categories=["Cc", "Cf", "Zl", "Zp"]), max_size=12),  # controls, NUL, ESC, bidi marks
        st.builds(lambda n, c: c * n, st.integers(bound - 1, bound + 1), st.sampled_from("xé😀")),  # at the bound
        st.builds(lambda n: "y" * n, st.integers(bound + 2, 4 * bound)),  # far past it
    )


def float32s(low: float, high: float) -> st.SearchStrategy[float]:
    """float32 values for a field valid in [low, high]: the ends and just past them, the specials, anything."""
    edges = [low, high, math.nextafter(low, -math.inf), high * 1.001 + 1e-3, low - 1.0, high + 1.0]
    specials = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e-45, FLOAT32_MAX, -FLOAT32_MAX]
    inside = st.floats(low, high).map(lambda v: float(np.float32(v)))  # the field's rounding, as on the wire
    return st.one_of(st.sampled_from(edges + specials), inside, st.floats(width=32))


def counts(usual_high: int) -> st.SearchStrategy[int]:
    """uint32 values: small ones (mostly valid), the extremes, anything."""
    return st.one_of(st.integers(0, usual_high), st.sampled_from([0, 1, UINT32_MAX, 2**31]), st.integers(0, UINT32_MAX))


def cancel_delays() -> st.SearchStrategy[float | None]:
    """When the client cancels what it sent (seconds after sending; None: never)."""
    return st.one_of(st.none(), st.floats(0.0, 2.0))


# --- services ---------------------------------------------------------------------------------------------------
def infer_requests() -> st.SearchStrategy[Infer.Request]:
    """Half within every bound (so that floods queue, run, are preempted, cancelled and refused RESOURCE_EXHAUSTED),
    half with every field fuzzed."""
    valid = st.builds(
        Infer.Request,
        task_id=st.sampled_from(["fuzz/a", "fuzz/b", "fuzz/c"]),
        task_type=st.sampled_from(TASK_TYPES),
        prompt=st.sampled_from(PROMPTS),
        want_text=st.just(True),
        max_new_tokens=st.integers(1, 48),
        priority=st.integers(0, 255),
        deadline_s=st.one_of(st.just(0.0), st.floats(0.05, 30.0)),
    )
    return st.one_of(valid, _fuzzed_infer_requests())


def _fuzzed_infer_requests() -> st.SearchStrategy[Infer.Request]:
    return st.builds(Infer.Request, want_text=st.booleans(), want_actions=st.booleans(), **_fuzzed_request_fields())


def _fuzzed_request_fields() -> dict[str, st.SearchStrategy]:
    """Every field an Infer request and a Generate goal share, fuzzed."""
    return {
        "task_id": texts(bounds.ID_CHARS, ("fuzz",)),
        "task_type": st.one_of(st.sampled_from(TASK_TYPES), texts(bounds.ID_CHARS)),
        "prompt": texts(bounds.PROMPT_CHARS, PROMPTS),
        "observation_id": st.one_of(st.just(""), texts(bounds.ID_CHARS)),
        "max_new_tokens": counts(8),
        "priority": st.integers(0, 255),
        "deadline_s": st.one_of(st.just(0.0), float32s(0.0, bounds.DEADLINE_S)),
        "sampling": st.one_of(st.builds(Sampling), samplings()),
        "observation": st.one_of(st.just([]), st.lists(observations(0, 4096), max_size=1)),
    }


def generate_goals() -> st.SearchStrategy[Generate.Goal]:
    """Half goals that stream (sampled or greedy, feedback every few tokens; cancelled at drawn moments), half with
    every field fuzzed, feedback_every included."""
    valid = st.builds(
        Generate.Goal,
        task_id=st.sampled_from(["fuzz/g", "fuzz/h"]),
        task_type=st.sampled_from(TASK_TYPES),
        prompt=st.sampled_from(PROMPTS),
        max_new_tokens=st.integers(1, 24),
        feedback_every=st.integers(0, 8),
        sampling=st.one_of(st.builds(Sampling), st.builds(Sampling, temperature=st.floats(0.1, 1.5),
                                                          top_k=st.integers(0, 50), seed=st.integers(0, 100))),
    )  # fmt: skip
    return st.one_of(valid, st.builds(Generate.Goal, feedback_every=counts(8), **_fuzzed_request_fields()))


def samplings() -> st.SearchStrategy[Sampling]:
    """Every sampling control across its range and past it (the message bounds stop to 16 strings)."""
    return st.builds(
        Sampling,
        temperature=float32s(0.0, 4.0),
        top_p=float32s(0.0, 1.0),
        top_k=st.one_of(st.integers(0, 100), st.integers(-(2**31), 2**31 - 1)),
        min_p=float32s(0.0, 1.0),
        repetition_penalty=float32s(0.0, 4.0),
        seed=st.one_of(st.just(-1), st.integers(0, 100), st.integers(-(2**63), 2**63 - 1)),
        stop=st.lists(texts(MAX_STOP_CHARS, (".", "Paris")), max_size=16),
    )


def questions(kind: type = AskQuestion.Request) -> st.SearchStrategy:
    """Half ordinary questions about the latest frame, half with every field fuzzed; ``kind``: the service's request
    or the action's goal (the same fields)."""
    valid = st.builds(kind, question=st.sampled_from(PROMPTS), max_new_tokens=st.integers(0, 24))
    fuzzed = st.builds(
        kind,
        question=texts(bounds.TEXT_CHARS, PROMPTS),
        observation_id=st.one_of(st.just(""), texts(bounds.ID_CHARS)),
        max_new_tokens=counts(8),
    )
    return st.one_of(valid, fuzzed)


def cancels() -> st.SearchStrategy[CancelTask.Request]:
    return st.builds(CancelTask.Request, task_id=texts(bounds.ID_CHARS, ("fuzz", "vqa_node/0")))


# --- actions ----------------------------------------------------------------------------------------------------
def instructions(max_rate_hz: float) -> st.SearchStrategy[FollowInstruction.Goal]:
    """Half goals that stream (and are preempted and cancelled while they do), half with every field fuzzed."""
    streaming = st.builds(
        FollowInstruction.Goal,
        instruction=st.sampled_from(["pick up the red triangle", "wave"]),
        rate_hz=st.floats(1.0, max_rate_hz),
        duration_s=st.floats(0.0, 5.0),
    )
    fuzzed = st.builds(
        FollowInstruction.Goal,
        instruction=texts(bounds.TEXT_CHARS, ("pick up the red triangle", "wave")),
        rate_hz=float32s(bounds.MIN_RATE_HZ, max_rate_hz),
        duration_s=float32s(0.0, bounds.GOAL_DURATION_S),
    )
    return st.one_of(streaming, fuzzed)


def targets(max_distance_m: float) -> st.SearchStrategy[Navigate.Goal]:
    """Half goals in the room (the robot drives, and is cancelled on the way), half with every field fuzzed."""
    return st.one_of(st.builds(_room_target, st.floats(0.2, 3.0), st.floats(0.2, 3.0)), _fuzzed_targets(max_distance_m))


def _room_target(x: float, y: float) -> Navigate.Goal:
    target = PoseStamped()
    target.header.frame_id = "map"
    target.pose.position.x, target.pose.position.y, target.pose.orientation.w = x, y, 1.0
    return Navigate.Goal(target=target)


@st.composite
def _fuzzed_targets(draw, max_distance_m: float) -> Navigate.Goal:
    target = PoseStamped()
    target.header.frame_id = draw(st.one_of(st.sampled_from(["map", "", "odom"]), texts(bounds.ID_CHARS)))
    position, orientation = target.pose.position, target.pose.orientation
    coordinate = st.one_of(st.floats(-1.0, 5.0), float32s(-max_distance_m, max_distance_m))
    position.x, position.y, position.z = draw(coordinate), draw(coordinate), draw(float32s(0.0, 0.0))
    orientation.x, orientation.y, orientation.z = (draw(float32s(-1.0, 1.0)) for _ in range(3))
    orientation.w = draw(float32s(-1.0, 1.0))
    instruction = draw(texts(bounds.TEXT_CHARS, ("pass left of the table",)))
    return Navigate.Goal(target=target, instruction=instruction)


# --- messages ---------------------------------------------------------------------------------------------------
@st.composite
def images(draw, max_data: int) -> Image:
    """An Image whose header may lie about its data: sizes, step and data length drawn separately, mostly
    consistent; data up to ``max_data`` bytes."""
    encoding = draw(st.one_of(st.sampled_from(ENCODINGS), texts(bounds.ID_CHARS, ("mono16", "RGB8", "rgb8 "))))
    channels = CHANNELS.get(encoding, 3)
    side = st.one_of(st.integers(1, 64), st.sampled_from([0, bounds.IMAGE_SIDE, bounds.IMAGE_SIDE + 1, UINT32_MAX]))
    width, height = draw(side), draw(side)
    step = draw(st.one_of(st.just(width * channels), st.integers(0, 256), st.sampled_from([UINT32_MAX])))
    step = min(step, UINT32_MAX)
    honest = step * height if step * height <= max_data else 0
    length = draw(st.one_of(st.just(honest), st.integers(0, 64), st.integers(0, max_data)))
    fill = draw(st.integers(0, 255))
    return Image(
        height=height, width=width, encoding=encoding, is_bigendian=draw(st.integers(0, 255)), step=step,
        data=bytes([fill]) * length,
    )  # fmt: skip


@st.composite
def observations(draw, number: int, max_data: int) -> Observation:
    """An Observation named uniquely by ``number`` (so a request can ask about exactly it), its id's own part
    drawn like any text but NUL (which would cut the number off on the wire)."""
    name = draw(texts(bounds.ID_CHARS - 8, ("frame",))).replace("\0", "")
    state = draw(
        st.one_of(
            st.lists(float32s(-10.0, 10.0), max_size=8),
            st.builds(lambda n, v: [v] * n, st.integers(bounds.STATE - 1, bounds.STATE + 1), st.just(0.5)),
        )
    )
    msg = Observation(
        observation_id=f"{name}#{number}",
        images=draw(st.lists(images(max_data), max_size=bounds.IMAGES + 2)),
        text=draw(texts(bounds.PROMPT_CHARS, ("A red cup is on the table.",))),
        state=state,
    )
    msg.header.frame_id = draw(texts(bounds.ID_CHARS, ("camera",)))
    return msg
