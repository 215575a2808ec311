"""One description per setting: a dataclass field made with ``setting`` carries its default, its description and
the numbers or names it may take, and that one place drives the docs, the ROS parameter descriptors (ranges), the
checks of presets and the node's configure-time validation. No torch, no ROS: a robot's `ros2 launch` reads it.
"""

from dataclasses import Field, dataclass, field, fields
from functools import partial
from typing import Any

from oxygen_ros.errors import EngineError, ErrorCode

ABOUT = "about"  # the field metadata key


@dataclass(frozen=True)
class About:
    text: str  # the description `ros2 param describe` shows
    span: tuple[float, float] | None = None  # (lowest, highest), both allowed, of a number
    choices: tuple[str, ...] = ()  # the names a string may take; () = any


def setting(default: Any, text: str, span: tuple[float, float] | None = None, choices: tuple[str, ...] = ()) -> Any:
    """A dataclass field with its description and bounds (a list default is copied for every instance)."""
    about = {ABOUT: About(text, span, choices)}
    if isinstance(default, list):
        return field(default_factory=partial(list, default), metadata=about)
    return field(default=default, metadata=about)


def described(cls: type) -> dict[str, About]:
    """Every field of ``cls`` with its description and bounds."""
    return {f.name: _about(f) for f in fields(cls)}


def _about(f: Field) -> About:
    if ABOUT not in f.metadata:
        raise TypeError(f"field {f.name} was not made with setting(): it has no description")
    return f.metadata[ABOUT]


def check_bounds(obj: Any) -> None:
    """INVALID_ARGUMENT naming the first field of ``obj`` outside its span (NaN included) or not one of its choices."""
    for name, about in described(type(obj)).items():
        value = getattr(obj, name)
        if about.span is not None and not about.span[0] <= value <= about.span[1]:
            low, high = about.span
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be in [{low}, {high}], got {value}")
        if about.choices and value not in about.choices:
            *first, last = about.choices
            named = f"{', '.join(first)} or {last}" if first else last
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be {named}, got {value!r}")
