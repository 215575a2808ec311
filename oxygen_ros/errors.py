"""Error codes shared by the engine, the nodes and the CLI.

Every failure a caller can cause (bad input, a full pool, a cancelled goal) ends in an ``EngineError`` with one of
these codes and a sentence saying what to change; ROS responses carry ``code.value`` in ``error_code``.
"""

from enum import Enum

# In the FAILED_PRECONDITION message of an action request to a model without an action head: the instruction node
# tells it apart from other preconditions (an inactive inference node) by it.
NO_ACTION_HEAD = "has no action head"


class ErrorCode(str, Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"  # the request itself is wrong (empty prompt, NaN image, bad task type)
    OUT_OF_RANGE = "OUT_OF_RANGE"  # valid but larger than this engine can ever hold (context, pool) or a bound allows
    NOT_FOUND = "NOT_FOUND"  # unknown model, observation id or request id
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"  # the queue is full right now; retry later
    CANCELLED = "CANCELLED"  # aborted by the caller
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # could not be served before its deadline
    FAILED_PRECONDITION = "FAILED_PRECONDITION"  # e.g. the node is not active, the model cannot do actions
    UNAVAILABLE = "UNAVAILABLE"  # the inference node cannot be reached
    OBSTACLE = "OBSTACLE"  # a navigation goal stayed blocked by an obstacle too long
    TF_ERROR = "TF_ERROR"  # no transform between the frames a goal needs (navigation: target frame -> odom)
    ABORTED = "ABORTED"  # the server a goal was handed to (nav2) gave up; the message has its code and reason
    INTERNAL = "INTERNAL"  # a bug: the message says where


class EngineError(Exception):
    """An error with a machine-readable code and a human-readable message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message
