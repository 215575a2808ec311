"""What every client subcommand (ask, instruct, navigate, stats) shares: a short-lived rclpy node in its own context,
waiting for a server with a clear message when the graph is not running, spinning until a future completes, and
the exit statuses that a node's ``error_code`` turns into.

Each command is its own process talking to a graph started elsewhere (`oxygen-ros up`, `ros2 launch`), so nothing
here keeps state between calls.  rclpy's own SIGINT handler would shut the context down before a goal could be
cancelled; it is switched off so Ctrl-C arrives as KeyboardInterrupt and the command can cancel first.
"""

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import rclpy
from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.task import Future

from oxygen_ros.errors import ErrorCode
from oxygen_ros.nodes import teardown

EXIT_NODE_ERROR = 1  # the node answered with an error_code
EXIT_BAD_REQUEST = 2  # the node says the request itself is wrong (like an argparse usage error)
EXIT_UNAVAILABLE = 69  # sysexits EX_UNAVAILABLE: the graph is not running or did not answer in time
EXIT_CANCELLED = 130  # Ctrl-C: the goal was cancelled
_BAD_REQUEST = {ErrorCode.INVALID_ARGUMENT.value, ErrorCode.OUT_OF_RANGE.value}


class Unavailable(Exception):
    """The graph is not running, or a server did not answer within the timeout; the message says which."""


def failed(error_code: str, message: str) -> int:
    """Print a node's error on stderr; its exit status: 2 for a bad request, else 1 (a failure without a code is
    reported as INTERNAL)."""
    code = error_code or ErrorCode.INTERNAL.value
    print(f"{code}: {message}", file=sys.stderr)
    return EXIT_BAD_REQUEST if code in _BAD_REQUEST else EXIT_NODE_ERROR


def not_running(name: str, kind: str) -> str:
    return f"no {name} {kind}: is `oxygen-ros up` (or `ros2 launch oxygen_ros oxygen.launch.py`) running?"


class FeedbackPrinter:
    """Prints a feedback line when the feedback's text (narration, reasoning) changes, and once a second between
    changes, so a 10 Hz stream stays readable.  ``line(feedback, elapsed_s, count)`` formats it."""

    def __init__(self, text: Callable[[Any], str], line: Callable[[Any, float, int], str]) -> None:
        self.text, self.line = text, line
        self.start = time.monotonic()
        self.count = 0
        self.last_text: str | None = None
        self.printed_at = 0.0

    def __call__(self, feedback: Any) -> None:
        self.count += 1
        now = time.monotonic() - self.start
        if self.text(feedback) != self.last_text or now - self.printed_at >= 1.0:
            self.last_text, self.printed_at = self.text(feedback), now
            print(f"[{now:5.1f} s] {self.line(feedback, now, self.count)}", flush=True)


class Client:
    """One node and its executor, spun only by this thread while a call is outstanding."""

    def __init__(self, node: Node, executor: SingleThreadedExecutor) -> None:
        self.node = node
        self.executor = executor

    def wait(self, future: Future, timeout: float | None, what: str) -> Any:
        """Spin until ``future`` is done; Unavailable after ``timeout`` seconds (None = no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not future.done():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise Unavailable(f"no answer from {what} within {timeout:g} s")
            self.executor.spin_once(timeout_sec=0.1 if left is None else min(0.1, left))
        return future.result()

    def call(self, srv_type: Any, name: str, request: Any, timeout: float, answer_timeout: float | None = None) -> Any:
        """Call service ``name``: Unavailable if it does not appear within ``timeout`` s or answer within
        ``answer_timeout`` s (None = wait as long as the node works on it)."""
        client = self.node.create_client(srv_type, name)
        name = self.node.resolve_service_name(name)
        if not client.wait_for_service(timeout_sec=timeout):
            raise Unavailable(not_running(name, "service"))
        return self.wait(client.call_async(request), answer_timeout, name)

    def send_goal(
        self, action_type: Any, name: str, goal: Any, timeout: float, feedback: Callable[[Any], None]
    ) -> ClientGoalHandle | None:
        """Send ``goal`` to action server ``name``; the goal handle, or None if the server rejected the goal."""
        client = ActionClient(self.node, action_type, name)
        name = self.node.resolve_topic_name(name)
        if not client.wait_for_server(timeout_sec=timeout):
            raise Unavailable(not_running(name, "action server"))
        handle = self.wait(client.send_goal_async(goal, feedback_callback=lambda msg: feedback(msg.feedback)),
                           timeout, name)  # fmt: skip
        return handle if handle.accepted else None

    def follow(self, handle: ClientGoalHandle, name: str) -> tuple[Any, bool]:
        """The goal's result, spinning (feedback callbacks run meanwhile) until it ends; on Ctrl-C cancel it first
        and then wait for the result the server sends for the cancelled goal.  Returns (result, cancelled)."""
        result_future = handle.get_result_async()
        try:
            return self.wait(result_future, None, name).result, False
        except KeyboardInterrupt:
            print(f"\ncancelling the {name} goal ...", flush=True)
            self.wait(handle.cancel_goal_async(), 10.0, f"{name} (cancel)")
            return self.wait(result_future, 10.0, f"{name} (result after cancel)").result, True


def run_client(name: str, body: Callable[[Client], int], namespace: str = "") -> int:
    """Run ``body`` with a fresh client in ``namespace`` (the servers' relative names resolve under it); a missing or
    silent server becomes one line on stderr and status 69, and Ctrl-C outside a goal (which ``follow`` cancels)
    status 130 without a traceback."""
    try:
        with client(name, namespace) as c:
            return body(c)
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_CANCELLED


def run_goal(
    c: Client,
    action_type: Any,
    name: str,
    goal: Any,
    timeout: float,
    feedback: FeedbackPrinter,
    summary: Callable[[Any], str],
    hint: str,
) -> int:
    """Send ``goal``, stream its feedback, print ``summary(result)``; the exit status: 2 if the server rejects the
    goal (``hint`` says what to check), 130 if cancelled by Ctrl-C, the error's status if it fails, else 0."""
    handle = c.send_goal(action_type, name, goal, timeout, feedback)
    name = c.node.resolve_topic_name(name)
    if handle is None:
        print(f"{name} rejected the goal (check {hint})", file=sys.stderr)
        return EXIT_BAD_REQUEST
    result, cancelled = c.follow(handle, name)
    if cancelled:
        print(f"cancelled: {summary(result)}")
        return EXIT_CANCELLED
    print(("done: " if result.success else "failed: ") + summary(result))
    return 0 if result.success else failed(result.error_code, result.message)


@contextmanager
def client(name: str, namespace: str = "") -> Iterator[Client]:
    """A node ``name_<pid>`` (two commands may run at once) in ``namespace`` and a fresh context (ROS_DOMAIN_ID from
    the environment), torn down on exit."""
    context = Context()
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = Node(f"{name}_{os.getpid()}", namespace=namespace, context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        yield Client(node, executor)
    finally:
        executor.shutdown()
        teardown.destroy_node(node)  # with the action clients made on it
        rclpy.try_shutdown(context=context)
