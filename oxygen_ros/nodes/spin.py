"""How every node executable runs: spin until Ctrl-C, SIGTERM or shutdown, then stop the executor, destroy the node
while rclpy still works, and shut rclpy down.

rclpy's own signal handlers shut every context down as the signal arrives, before any Python code runs, so a node
could send nothing on its way out: a base without a cmd_vel timeout would keep the last velocity a goal gave it. So
the executables start rclpy without them (``SignalHandlerOptions.NO``) and spin the executor on a thread while the
main thread waits where Python delivers signals (a thread blocked in the middleware's wait never sees one); Ctrl-C and
SIGTERM (the supervisor's, the kernel's when the supervisor dies; a second one is ignored) then end the node's
running goal while the executor still runs (``EndsGoals``: the robot stood, a nav2 goal cancelled, as any ending
does), stop the executor, destroy the node (what it keeps persisted), and only then shut rclpy down. A stop that
hangs logs every thread's stack before it is killed.
"""

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import rclpy
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

from oxygen_ros.nodes.refusal import Refusal

SIGNAL_POLL_S = 0.2  # how often the main thread looks up from waiting: a signal is handled within this
STOP_WAIT_S = 5.0  # how long a goal's ending (longer where it says: ``settle_s``), then the spin thread's, may take
EXIT_ON_REFUSAL = "--exit-on-refusal"  # before --ros-args: exit 1 on refused parameters instead of staying up refusing
MAX_ENDING_S = 9.0  # a goal's ending at most: `ros2 launch` kills a node 10 s after its SIGINT (SIGTERM, SIGKILL)
STACKS_AFTER_S = 9.5  # a stop longer than a goal's ending may take logs every thread's stack, and as often after


@runtime_checkable
class EndsGoals(Protocol):
    """A node whose goals must end while the executor still runs (the running one, and any still ending: a nav2 goal
    cancelled and the cancel confirmed, an arm's trajectory on its way cancelled once accepted)."""

    def end_for_shutdown(self, wait_s: float) -> None: ...


def init(args: list[str] | None) -> None:
    """rclpy for a node executable: without its signal handlers (``spin_until_shutdown`` handles the signals)."""
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)


def spin_until_shutdown(node: Node, executor: Executor) -> int:
    executor.add_node(node)
    stopping, spun = threading.Event(), threading.Event()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where it was inherited ignored (a script's `&`)
    signal.signal(signal.SIGTERM, _interrupt)
    threading.Thread(target=_spin, args=(executor, stopping, spun), name="spin", daemon=True).start()
    try:
        while not spun.is_set():  # a sleep, not a join: a signal interrupting Thread.join can leave it unreliable
            time.sleep(SIGNAL_POLL_S)
    except KeyboardInterrupt:
        pass
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second one must not cut the stop short (SIGKILL still can)
            signal.signal(signum, signal.SIG_IGN)
        _dump_stacks_after(STACKS_AFTER_S)
        if not spun.is_set() and isinstance(node, EndsGoals):
            node.end_for_shutdown(STOP_WAIT_S)
        stopping.set()
        spun.wait(STOP_WAIT_S)  # within one poll once its wait returns: nothing spins while the executor stops
        try:
            executor.shutdown()  # returns once the callbacks running now have (a model load runs to its end)
            node.destroy_node()
            rclpy.try_shutdown()
        finally:
            faulthandler.cancel_dump_traceback_later()
    return 0


def _dump_stacks_after(seconds: float) -> None:
    """A stop that hangs shows where before it is killed (ros2 launch's SIGKILL 10 s after its SIGINT, the
    supervisor's 30 s): every thread's stack on stderr, the node's log, each ``seconds`` until the stop ends (the
    process exits). Nothing where stderr is gone: the stop goes on."""
    try:
        faulthandler.dump_traceback_later(seconds, repeat=True)
    except (RuntimeError, ValueError, OSError, AttributeError):  # no stderr, or one without a file descriptor
        pass


def run(make_node: Callable[[], Node], make_executor: Callable[[], Executor], name: str, args: list[str] | None) -> int:
    """A node executable's main: init rclpy with ``args`` (None: the command line), build the node and an executor
    (both need the initialised context) and spin. A node that refuses its parameters (ValueError /
    FileNotFoundError saying which) is logged and the process stays up refusing (``Refusal``: the reason on
    /diagnostics) until stopped, then exits 1; with ``EXIT_ON_REFUSAL`` among the non-ROS arguments it exits 1 at
    once (`oxygen-ros up`, whose restart policy gives up on a node that keeps failing, passes it)."""
    init(args)
    try:
        node = make_node()
    except (ValueError, FileNotFoundError) as exc:
        reason = str(exc)
    else:
        return spin_until_shutdown(node, make_executor())
    rclpy.logging.get_logger(name).error(f"cannot start: {reason}")
    if EXIT_ON_REFUSAL in remove_ros_args(sys.argv if args is None else args):
        rclpy.try_shutdown()
        return 1
    rclpy.logging.get_logger(name).error("serving nothing, the reason on /diagnostics, until stopped: fix the "
                                         "parameter and restart the node")  # fmt: skip
    spin_until_shutdown(Refusal(name, reason), SingleThreadedExecutor())
    return 1


def _spin(executor: Executor, stopping: threading.Event, spun: threading.Event) -> None:
    """Spin until told to stop, looking up every SIGNAL_POLL_S (rclpy's Executor.shutdown from another thread can
    leave a thread blocked in its wait for good: it destroys the guard condition that would wake it), then say so:
    the executor is shut down, and the interpreter ends, only once no thread waits inside rclpy."""
    try:
        while not stopping.is_set() and executor.context.ok():
            executor.spin_once(timeout_sec=SIGNAL_POLL_S)
    except ExternalShutdownException:  # the context was shut down by someone else: the main thread ends it all
        pass
    finally:
        spun.set()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the node as Ctrl-C does
