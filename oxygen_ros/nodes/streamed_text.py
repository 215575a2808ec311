"""A streamed answer's pieces, made whole when its result lands.

An action's feedback (a topic) and its result (a service reply) travel apart: the result can reach a client before
the last feedback messages do. A node that forwards feedback as it comes would then end its own stream short (the
last words missing from what `oxygen-ros ask` prints) or forward pieces after its goal has ended. ``StreamedText``
forwards pieces until the result, then forwards what the stream had not carried yet and drops the late pieces, so
the pieces it passes on add up to the result's text exactly.
"""

import threading
from collections.abc import Callable

TextCallback = Callable[[str, int], None]  # (the answer's text added since the last call, tokens decoded so far)


class StreamedText:
    """Pieces of one answer on their way to ``forward``; feedback callbacks and the waiting coroutine may run on
    different executor threads, hence the lock."""

    def __init__(self, forward: TextCallback) -> None:
        self._forward = forward
        self._lock = threading.Lock()
        self._sent: list[str] = []
        self._finished = False

    def piece(self, text: str, tokens: int) -> None:
        """A feedback message's text: forwarded unless the result already came."""
        with self._lock:
            if self._finished or not text:
                return
            self._sent.append(text)
            self._forward(text, tokens)

    def finish(self, text: str, tokens: int) -> None:
        """The result's whole text: forward the part the stream had not carried; later pieces are dropped. A stream
        that is not a prefix of the result (it cannot be, as feedback from one writer arrives in order) gets
        nothing more rather than a wrong tail."""
        with self._lock:
            self._finished = True
            sent = "".join(self._sent)
            if len(text) > len(sent) and text.startswith(sent):
                self._sent.append(text[len(sent) :])
                self._forward(self._sent[-1], tokens)
