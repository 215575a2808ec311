"""What the graph must answer to a fuzzed input, written from the documented bounds (docs/reliability.md) rather than
from the nodes' code: the codes an out-of-bounds value must be refused with (any of them when several fields are
out: the order of the checks is not part of the contract), that a value must be refused at all (checks of the
engine, which another refusal may come before), or that it must succeed. Anything else may succeed or fail, but
every failure carries a known error code and a message, and never INTERNAL (a bug).

Values are judged as they arrive: a string ends at its first NUL (DDS strings are C strings) and a float32 field
holds the float32 nearest to what was set.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from oxygen_ros.errors import ErrorCode
from oxygen_ros import bounds
from oxygen_ros.nodes.generate_server import MAX_FEEDBACK_EVERY
from fuzz.strategies import CHANNELS, TASK_TYPES

INVALID, OUT_OF_RANGE = ErrorCode.INVALID_ARGUMENT.value, ErrorCode.OUT_OF_RANGE.value
CODES = {code.value for code in ErrorCode} - {ErrorCode.INTERNAL.value}


@dataclass(frozen=True)
class Expect:
    codes: frozenset[str] = frozenset()  # out of bounds: refused with one of these
    refused: bool = False  # refused, with whatever code
    succeeds: bool = False
    names: frozenset[str] = frozenset()  # a refusal's message names one of these fields

    def check(self, what: str, success: bool, code: str, message: str) -> None:
        assert (code == "") if success else (code in CODES and message), f"{what}: {success}, {code!r}, {message!r}"
        if self.codes:
            assert not success and code in self.codes, f"{what}: expected one of {set(self.codes)}, got {code!r}"
        if self.refused:
            assert not success, f"{what} must be refused, it succeeded"
        if self.succeeds:
            assert success, f"{what} must succeed: {code}: {message}"
        if self.names and not success:
            assert any(name in message for name in self.names), f"{what}: {message!r} names none of {set(self.names)}"


def arrived(text: str) -> str:
    return text.split("\0", 1)[0]


def too_long(text: str, bound: int) -> bool:
    return len(arrived(text)) > bound


def outside(value: float, low: float, high: float) -> bool:
    value = float(np.float32(value))
    return not (math.isfinite(value) and low <= value <= high)


def _codes(**faults: bool) -> frozenset[str]:
    """The codes of the faults that are present (keyword: the code's name, suffixed to be unique)."""
    return frozenset(INVALID if name.startswith("invalid") else OUT_OF_RANGE for name, on in faults.items() if on)


def _fields(faults: dict[str, str | None], refused: bool = False, more_codes: frozenset[str] = frozenset()) -> Expect:
    """What fields out of their bounds ({field: its code, or None when it is within}) must be refused with; a lone
    one is checked before anything else, so the refusal names it. ``more_codes``: faults of nested messages."""
    present = {name: code for name, code in faults.items() if code}
    names = frozenset(present) if len(present) == 1 and not more_codes else frozenset()
    return Expect(frozenset(present.values()) | more_codes, refused, names=names)


def _request(req, max_prompt_chars: int, max_model_len: int, wrong_output: bool, **more: str | None) -> Expect:
    """The fields Infer and Generate share, plus ``more`` ({field: code or None}); ``wrong_output``: the engine
    must refuse what the request asks for."""
    faults = {f: OUT_OF_RANGE if too_long(getattr(req, f), bounds.ID_CHARS) else None
              for f in ("task_id", "task_type", "observation_id")}  # fmt: skip
    faults["prompt"] = OUT_OF_RANGE if too_long(req.prompt, max_prompt_chars) else None
    faults["deadline_s"] = INVALID if outside(req.deadline_s, 0.0, bounds.DEADLINE_S) else None
    nested = frozenset()
    if req.observation:  # an inline observation is checked like a published one, before the engine
        inline = req.observation[0]
        nested = observation(inline, max_prompt_chars).codes | _codes(range_id=too_long(inline.observation_id,
                                                                                         bounds.ID_CHARS))  # fmt: skip
    refused = (
        not arrived(req.prompt).strip()
        or arrived(req.task_type) not in (*TASK_TYPES, "")  # '' = generic
        or wrong_output
        or not 0 < req.max_new_tokens < max_model_len
        or bad_sampling(req.sampling)
    )
    return _fields(faults | more, refused, nested)


def infer(req, max_prompt_chars: int, max_model_len: int) -> Expect:
    # SmolLM2 has no action head; a request must ask for some output
    return _request(req, max_prompt_chars, max_model_len, req.want_actions or not req.want_text)


def generate(goal, max_prompt_chars: int, max_model_len: int) -> Expect:
    """As Infer (a goal asks for text only), and how often it wants feedback."""
    too_often = goal.feedback_every > MAX_FEEDBACK_EVERY
    return _request(goal, max_prompt_chars, max_model_len, False, feedback_every=OUT_OF_RANGE if too_often else None)


def bad_sampling(msg) -> bool:
    """Out of SamplingParams' ranges (the engine refuses it, after the checks that come before it)."""
    ok = (
        (f32(msg.temperature) == 0.0 or f32(0.01) <= f32(msg.temperature) <= 100.0)
        and 0.0 < f32(msg.top_p) <= 1.0
        and msg.top_k >= 0
        and 0.0 <= f32(msg.min_p) < 1.0
        and f32(0.01) <= f32(msg.repetition_penalty) <= 100.0
        and msg.seed >= -1
        and all(0 < len(arrived(s)) <= 256 for s in msg.stop)
    )  # fmt: skip
    return not ok


def f32(value: float) -> float:
    return float(np.float32(value))


def question(req, max_model_len: int) -> Expect:
    """An AskQuestion request or goal (the same fields, the same checks)."""
    blank = INVALID if not arrived(req.question).strip() else None
    faults = {"question": OUT_OF_RANGE if too_long(req.question, bounds.TEXT_CHARS) else blank,
              "observation_id": OUT_OF_RANGE if too_long(req.observation_id, bounds.ID_CHARS) else None}  # fmt: skip
    return _fields(faults, refused=req.max_new_tokens >= max_model_len)


def cancel(req) -> Expect:
    codes = _codes(invalid_empty=arrived(req.task_id) == "", range_id=too_long(req.task_id, bounds.ID_CHARS))
    return Expect(codes, succeeds=not codes)


def instruction(goal, max_rate_hz: float) -> Expect:
    return Expect(
        _codes(
            range_instruction=too_long(goal.instruction, bounds.TEXT_CHARS),
            invalid_blank=not arrived(goal.instruction).strip(),
            invalid_rate=outside(goal.rate_hz, bounds.MIN_RATE_HZ, max_rate_hz),
            invalid_duration=outside(goal.duration_s, 0.0, bounds.GOAL_DURATION_S),
        )
    )


ROOM_M = 6.0  # the simulated robot is somewhere within this of the map's origin


def navigation(goal, max_distance_m: float) -> Expect:
    target = goal.target
    p, q = target.pose.position, target.pose.orientation
    values = [float(np.float32(v)) for v in (p.x, p.y, p.z, q.x, q.y, q.z, q.w)]
    frame = arrived(target.header.frame_id)
    far = all(map(math.isfinite, values)) and math.hypot(values[0], values[1]) > max_distance_m + ROOM_M
    return Expect(
        _codes(
            range_instruction=too_long(goal.instruction, bounds.TEXT_CHARS),
            invalid_pose=not all(map(math.isfinite, values)),
            range_frame=len(frame) > bounds.ID_CHARS,
            invalid_frame=len(frame) <= bounds.ID_CHARS and frame not in ("", "map", "odom"),
            range_far=far,
        )
    )


def image_codes(image) -> frozenset[str]:
    """What a subscriber must refuse ``image`` with (empty: a decodable image)."""
    encoding = arrived(image.encoding)
    if encoding not in CHANNELS:
        return _codes(range_name=len(encoding) > bounds.ID_CHARS, invalid_name=len(encoding) <= bounds.ID_CHARS)
    w, h, step = image.width, image.height, image.step
    if w == 0 or h == 0:
        return frozenset({INVALID})
    if w > bounds.IMAGE_SIDE or h > bounds.IMAGE_SIDE:
        return frozenset({OUT_OF_RANGE})
    if step < w * CHANNELS[encoding]:
        return frozenset({INVALID})
    if step * h > bounds.IMAGE_BYTES or w * h * 3 > bounds.IMAGE_BYTES:
        return frozenset({OUT_OF_RANGE})
    return frozenset({INVALID}) if len(image.data) != step * h else frozenset()


def observation(msg, max_prompt_chars: int) -> Expect:
    """A request naming the observation ``msg`` (its id within bounds) once it has arrived."""
    codes = _codes(
        range_images=len(msg.images) > bounds.IMAGES,
        range_state=len(msg.state) > bounds.STATE,
        invalid_state=not all(math.isfinite(float(np.float32(v))) for v in msg.state),
        range_text=too_long(msg.text, max_prompt_chars),
    ).union(*(image_codes(image) for image in msg.images))
    return Expect(codes)


@dataclass
class Tally:
    """What a run sent and got back, for the report."""

    calls: int = 0
    answered: int = 0
    codes: dict[str, int] = field(default_factory=dict)
    slowest_s: float = 0.0

    def add(self, code: str, seconds: float) -> None:
        self.answered += 1
        self.codes[code or "OK"] = self.codes.get(code or "OK", 0) + 1
        self.slowest_s = max(self.slowest_s, seconds)
