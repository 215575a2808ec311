"""A task node's language head answers JSON constrained by a schema (``json_schema`` on `/oxygen/infer`): reading it
back as fields, and saying what went wrong when the answer is not that JSON (the head's error line, an answer cut
at max_new_tokens)."""

import json
from typing import Any


def read_fields(answer: str, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The answer's ``keys`` when it is a JSON object holding them all, else None."""
    try:
        value = json.loads(answer)
    except (ValueError, RecursionError):  # (nested past Python's limit: only a server ignoring the schema sends it)
        return None
    return {key: value[key] for key in keys} if isinstance(value, dict) and all(k in value for k in keys) else None


def unreadable(answer: str) -> str:
    """What to show for an answer that is not the schema's JSON: the head's own error line as it is, or a cut answer
    named as one."""
    if answer.startswith("{"):
        return f"(language head: answer cut short, raise max_new_tokens: {answer})"
    return answer
