"""The navigation node's language head, answered as schema-checked JSON the node reads as fields: whether the path
ahead looks clear, and what is in the way. It never gates motion (a text model is too slow to steer at the replan
rate, and obstacle sources stop the base: navigation_node); its fields become the feedback's reasoning."""

import json

from oxygen_ros.nodes.head_json import read_fields, unreadable

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"path_clear": {"type": "boolean"}, "obstacle": {"type": "string", "maxLength": 24}},
    "required": ["path_clear", "obstacle"], "additionalProperties": False,
})  # fmt: skip


def prompt(x: float, y: float, instruction: str) -> str:
    hint = f" Hint: {instruction}." if instruction else ""
    return (f"The robot drives to x {x:.1f} m, y {y:.1f} m.{hint} Is the path ahead clear? Name the obstacle in the "
            "way, or none.")  # fmt: skip


def read(answer: str) -> str:
    """The feedback's reasoning from the head's fields (or what went wrong)."""
    fields = read_fields(answer, ("path_clear", "obstacle"))
    if fields is None:
        return unreadable(answer)
    obstacle = str(fields["obstacle"]).strip() or "none"
    return "path ahead clear" if fields["path_clear"] else f"path ahead blocked by: {obstacle}"
