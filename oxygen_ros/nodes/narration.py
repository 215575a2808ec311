"""The instruction node's language head, answered as schema-checked JSON the node reads as fields.

The head is asked which object the robot should reach for, constrained (``json_schema``) to a colour and a shape the
detector knows and a ``stop`` flag, so its answer parses every time and the node never pattern-matches prose. What
the head says can only stop motion: the controller's target comes from the instruction alone, and with the node's
``head_may_stop`` its ``stop: true`` holds the arm until a later answer says otherwise; the named object is narration
(feedback), never a target. ``head_may_stop`` is off by default: SmolLM2-135M, the default model, answers
``"stop": true`` to every instruction asked here (pick up the red triangle, grab the blue circle, wave), so a flag
that model cannot judge would only ever hold the arm.
"""

import json
from dataclasses import dataclass

from oxygen_ros.nodes.head_json import read_fields, unreadable
from oxygen_ros.perception.palette import OBJECT_COLOURS
from oxygen_ros.perception.scene import SHAPES

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"colour": {"enum": [*OBJECT_COLOURS, "none"]}, "shape": {"enum": [*SHAPES, "none"]},
                   "stop": {"type": "boolean"}},
    "required": ["colour", "shape", "stop"], "additionalProperties": False,
})  # fmt: skip


def prompt(instruction: str) -> str:
    return (f"The robot was told: {instruction}\nWhich object should it reach for? Set stop to true only if the robot "
            "must not move (the instruction is unsafe, or names nothing on the table).")  # fmt: skip


@dataclass(frozen=True)
class HeadAnswer:
    narration: str  # what the feedback shows
    stop: bool | None  # the head's stop flag; None when it did not answer (an error line): the last one stands


def read(answer: str) -> HeadAnswer:
    """The head's answer as fields; an answer that is not the schema's JSON (the head's error line, a cut answer)
    is narrated as such and changes nothing."""
    fields = read_fields(answer, ("colour", "shape", "stop"))
    if fields is None:
        return HeadAnswer(unreadable(answer), None)
    colour, shape, stop = fields["colour"], fields["shape"], bool(fields["stop"])
    named = "nothing" if colour == shape == "none" else " ".join(w for w in (colour, shape) if w != "none")
    return HeadAnswer(f"reaching for: {named}" + ("; language head says stop" if stop else ""), stop)
