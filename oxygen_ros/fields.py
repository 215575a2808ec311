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
    span: tuple[float, float] | None = None  # (lowest, highest) of a number: the ROS descriptor's range
    choices: tuple[str, ...] = ()  # the names a string may take; () = any
    low_open: bool = False  # the lowest itself is refused (a rate, a period, a fraction that must be > 0)
    high_open: bool = False  # the highest itself is refused

    def refuses(self, value: Any) -> bool:
        """Whether a number is outside the span (NaN always is)."""
        if self.span is None:
            return False
        low, high = self.span
        above = value > low if self.low_open else value >= low
        below = value < high if self.high_open else value <= high
        return not (above and below)

    def span_text(self) -> str:
        """The span as an interval: [0, 1], (0, 1], [0, 1)."""
        assert self.span is not None
        low, high = self.span
        return f"{'(' if self.low_open else '['}{_number(low)}, {_number(high)}{')' if self.high_open else ']'}"


def _number(x: float) -> str:
    """3600.0 as 3600, 1 << 40 in full, 0.01 as 0.01."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def setting(default: Any, text: str, span: tuple[float, float] | None = None, choices: tuple[str, ...] = (),
            low_open: bool = False, high_open: bool = False) -> Any:  # fmt: skip
    """A dataclass field with its description and bounds (a list default is copied for every instance)."""
    about = {ABOUT: About(text, span, choices, low_open, high_open)}
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
        if about.refuses(value):
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be in {about.span_text()}, got {value}")
        if about.choices and value not in about.choices:
            *first, last = about.choices
            named = f"{', '.join(first)} or {last}" if first else last
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{name} must be {named}, got {value!r}")
