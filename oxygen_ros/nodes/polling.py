"""Waiting on a thread outside the executor for state that the graph's executor threads set (a frame arrived, a
goal ended, a report came): one poll loop for the benchmarks, the demo and the tests, so each wait is bounded and
names what it waited for."""

import time
from collections.abc import Callable
from typing import Any


def poll_until(condition: Callable[[], Any], timeout_s: float, what: str | Callable[[], str], *,
               period_s: float = 0.05, given_up: Callable[[], str] = str) -> Any:  # fmt: skip
    """``condition()``'s first true value, asked every ``period_s``; TimeoutError naming ``what`` (a callable: asked
    then, to say how far it got) after ``timeout_s``, RuntimeError as soon as ``given_up()`` says why waiting on is
    pointless (a node's process exits at every start)."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if gone := given_up():
            raise RuntimeError(f"waiting for {_named(what)}: {gone}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{_named(what)} not within {timeout_s:g} s")
        time.sleep(period_s)
    return value


def _named(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()
