"""The disk tier's read worker: calls run in order, a cancelled one never runs, an exception comes back through its
future, and a call hung on a stalled disk neither holds up shutdown nor the process's exit (a daemon thread)."""

import threading
import time

import pytest

from oxygen_ros.engine.daemon_worker import DaemonWorker


def test_calls_run_in_order_and_a_cancelled_one_never_runs():
    worker, ran, gate = DaemonWorker("test-worker"), [], threading.Event()
    first = worker.submit(gate.wait, 10.0)
    futures = [worker.submit(ran.append, i) for i in range(3)]
    assert futures[1].cancel()  # still queued behind the first
    gate.set()
    assert first.result(10.0) is True and futures[2].result(10.0) is None
    assert ran == [0, 2]
    failing = worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(10.0)
    worker.shutdown(10.0)


def test_a_hung_call_holds_up_neither_shutdown_nor_the_exit():
    worker, hung = DaemonWorker("test-hung-worker"), threading.Event()
    worker.submit(hung.wait, 60.0)
    start = time.monotonic()
    worker.shutdown(0.2)
    assert time.monotonic() - start < 5.0
    thread = next(t for t in threading.enumerate() if t.name == "test-hung-worker")
    assert thread.daemon and thread.is_alive()  # left behind: the interpreter does not join it at exit
    hung.set()
    thread.join(10.0)
    assert not thread.is_alive()  # its queue ends after the hung call
