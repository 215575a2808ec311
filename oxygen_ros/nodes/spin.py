"""How every node executable runs: spin until Ctrl-C, SIGTERM or shutdown, then stop the executor, destroy the node
while rclpy still works, and shut rclpy down.

rclpy's own signal handlers shut every context down as the signal arrives, before any Python code runs, so a node
could send nothing on its way out: a base without a cmd_vel timeout would keep the last velocity a goal gave it. So
the executables start rclpy without them (``SignalHandlerOptions.NO``) and spin the executor on a thread while the
main thread waits where Python delivers signals (a thread blocked in the middleware's wait never sees one); Ctrl-C and
SIGTERM (the supervisor's, the kernel's when the supervisor dies) then stop the executor, the node ends its goal and
stands the robot (``TaskActionNode.destroy_node``: a zero Twist, an arm's hold) and persists what it keeps, and only
then is rclpy shut down.
"""

import signal
import threading
from collections.abc import Callable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

SIGNAL_POLL_S = 0.2  # how often the main thread looks up from waiting: a signal is handled within this
STOP_WAIT_S = 5.0  # the longest the executor's callbacks may take to return once it is told to stop


def init(args: list[str] | None) -> None:
    """rclpy for a node executable: without its signal handlers (``spin_until_shutdown`` handles the signals)."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)


def spin_until_shutdown(node: Node, executor: Executor) -> int:
    executor.add_node(node)
    spinning = threading.Thread(target=_spin, args=(executor,), name="spin", daemon=True)
    signal.signal(signal.SIGTERM, _interrupt)
    spinning.start()
    try:
        while spinning.is_alive():
            spinning.join(SIGNAL_POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        executor.shutdown(timeout_sec=STOP_WAIT_S)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def run(make_node: Callable[[], Node], make_executor: Callable[[], Executor], name: str, args: list[str] | None) -> int:
    """A node executable's main: init rclpy with ``args``, build the node and an executor (both need the
    initialised context) and spin; a node that refuses its parameters (ValueError / FileNotFoundError saying
    which) is logged and the exit status is 1."""
    init(args)
    try:
        node = make_node()
    except (ValueError, FileNotFoundError) as exc:
        rclpy.logging.get_logger(name).error(f"cannot start: {exc}")
        rclpy.try_shutdown()
        return 1
    return spin_until_shutdown(node, make_executor())


def _spin(executor: Executor) -> None:
    try:
        executor.spin()
    except ExternalShutdownException:  # the context was shut down by someone else: the main thread ends it all
        pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the node as Ctrl-C does
