"""One daemon thread running submitted calls in order, for the disk tier's reads and its writes: a
ThreadPoolExecutor's threads are joined when the interpreter exits, so one read or write hung on a stalled disk (a
network mount) would keep the inference process from exiting; a daemon thread is left behind instead."""

import threading
from collections.abc import Callable
from concurrent.futures import Future
from queue import SimpleQueue
from typing import Any


class DaemonWorker:
    def __init__(self, name: str) -> None:
        self._calls: SimpleQueue[tuple[Future, Callable[..., Any], tuple] | None] = SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """``fn(*args)`` after every call submitted before it; its Future may be cancelled until it starts."""
        future: Future = Future()
        self._calls.put((future, fn, args))
        return future

    def shutdown(self, wait_s: float) -> None:
        """No call after those queued (cancel their futures to drop them); waits up to ``wait_s`` for the thread."""
        self._calls.put(None)
        self._thread.join(wait_s)

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            future, fn, args = call
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)
