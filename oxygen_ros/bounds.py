"""The bound on every field of a request, goal or subscribed message that could size work (an allocation, a loop, a
wait), and the checks the nodes and ``convert`` apply before anything is sized (table: docs/reliability.md).

Two kinds of refusal, each naming the field, the value and the bound: INVALID_ARGUMENT for a malformed value (NaN,
inf, negative, zero where a positive number is needed, inconsistent sizes) or a rate or duration outside its
interval; OUT_OF_RANGE for a well-formed value larger than a bound on size (characters, elements, pixels, bytes,
metres). The bounds a deployment may need to change are node parameters whose defaults are the constants here.
"""

import math
from collections.abc import Sized

from oxygen_ros.errors import EngineError, ErrorCode

ID_CHARS = 256  # Infer.task_id, task_type, observation_id; CancelTask.task_id; Observation.observation_id
TEXT_CHARS = 8192  # a task's own text: AskQuestion.question, FollowInstruction.instruction, Navigate.instruction
PROMPT_CHARS = 65536  # default of the inference node's max_prompt_chars: Infer.prompt and Observation.text
CHAT_IMAGES = 8  # images in one request's conversation (Infer/Generate.messages), besides its observation's
TEMPLATE_OPTIONS_CHARS = 4096  # Infer/Generate.template_options, a JSON object
IMAGES = 3  # images per Observation (a VLA's camera slots); caps KvPoolStats.max_images in the task nodes
IMAGE_SIDE = 8192  # Image.width and Image.height, pixels
IMAGE_BYTES = 64 << 20  # an image's data (step x height) and its RGB copy (width x height x 3), bytes
STATE = 1024  # Observation.state elements
DEADLINE_S = 3600.0  # Infer.deadline_s
MIN_RATE_HZ = 0.01  # FollowInstruction.rate_hz: its period sizes the chunk clock's waits and each request's deadline
CHUNK_HORIZON = 1000  # ActionChunk.horizon an arm executes (pi0 / SmolVLA plan 50 actions ahead, ACT 100)
GOAL_DURATION_S = 86400.0  # FollowInstruction.duration_s (0 = until cancelled)
TARGET_DISTANCE_M = 100.0  # default of navigation_node's max_target_distance_m
OBSERVATION_RING_BYTES = 256 << 20  # default of the inference node's observation_ring_bytes
INFLIGHT_IMAGE_BYTES = 512 << 20  # default of the inference node's inflight_image_bytes
JSON_DEPTH = 64  # nesting of a JSON field (a schema, tools, tool calls): parsing and templates recurse once a level
PREVIEW_CHARS = 24  # of an over-long text, quoted in the refusal


def text(field: str, value: str, bound: int) -> None:
    """OUT_OF_RANGE when ``value`` has more than ``bound`` characters."""
    if len(value) > bound:
        preview = repr(value[:PREVIEW_CHARS]) + ("..." if len(value) > PREVIEW_CHARS else "")
        raise EngineError(
            ErrorCode.OUT_OF_RANGE, f"{field} has {len(value)} characters ({preview}), more than the bound of {bound}"
        )


def items(field: str, value: Sized, bound: int, unit: str = "elements") -> None:
    """OUT_OF_RANGE when ``value`` holds more than ``bound`` items."""
    at_most(field, len(value), bound, unit)


def at_most(field: str, amount: float, bound: float, unit: str) -> None:
    """OUT_OF_RANGE when ``amount`` is larger than ``bound`` (INVALID_ARGUMENT when it is not a number)."""
    finite(field, amount)
    if amount > bound:
        message = f"{field} is {_number(amount)} {unit}, more than the bound of {_number(bound)} {unit}"
        raise EngineError(ErrorCode.OUT_OF_RANGE, message)


def finite(field: str, value: float) -> None:
    """INVALID_ARGUMENT when ``value`` is NaN or infinite."""
    if not math.isfinite(value):
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{field} must be a finite number, got {value}")


def within(field: str, value: float, low: float, high: float, note: str = "") -> None:
    """INVALID_ARGUMENT unless ``value`` is finite and in [low, high] (``note``: the unit, what an end means)."""
    if not (math.isfinite(value) and low <= value <= high):
        raise EngineError(
            ErrorCode.INVALID_ARGUMENT, f"{field} must be in [{_number(low)}, {_number(high)}]{note}, got {value}"
        )


def _number(value: float) -> str:
    """Counts as integers, measures as short floats (1e+30, 0.5)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def json_nesting(field: str, text: str, bound: int = JSON_DEPTH) -> None:
    """OUT_OF_RANGE when the JSON text ``text`` nests deeper than ``bound``: what parses it, and a chat template
    rendering it, recurse once a level (Python's own limit is ~1000, far past any real schema or tool list)."""
    depth = json_depth(text)
    if depth > bound:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"{field} nests {depth} levels deep, more than the bound of {bound}")


def json_depth(source: str) -> int:
    """The deepest bracket nesting of a JSON text outside its strings (as json.loads would recurse into it)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in source:
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(depth - 1, 0)
    return deepest
