"""One incremental detokenizer per request: its text as tokens arrive, where a stop string begins, and the pieces a
stream hands out, each new token decoded once in a small window (linear in the answer, as vLLM's and transformers'
incremental detokenization).

Decoding a token alone is wrong for byte-level BPE (a character can span tokens) and for SentencePiece (a word's
leading space depends on what precedes it), so each step decodes the window ``ids[prefix:]`` and the text it adds
over ``ids[prefix:read]``: the window starts at the previous step's last clean token, so both decodes see the same
context. A text that ends in a replacement character (half a multi-byte character) waits for the next token. A
stop string is searched only in the new text and the ``longest stop - 1`` characters before it; a stream holds back
those characters until it is certain no stop string that began there completes.
"""

from collections.abc import Callable

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, decode: Callable[[list[int]], str], stop: list[str]) -> None:
        self._decode = decode
        self._stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1  # characters a stream holds back
        self.text = ""  # the certain text of the tokens decoded so far
        self._prefix = self._read = 0  # token offsets: the window's start, and the end of what ``text`` holds
        self.stopped_at: int | None = None  # where the first stop string begins in the text, once one appeared
        self._sent = 0  # characters handed out by ``delta``

    def feed(self, ids: list[int]) -> bool:
        """Take the tokens of ``ids`` (the answer so far) decoded after the last call; whether a stop string has now
        appeared in the answer."""
        if self.stopped_at is not None or len(ids) <= self._read:
            return self.stopped_at is not None
        window = self._decode(ids[self._prefix :])
        done = len(self._decode(ids[self._prefix : self._read])) if self._read > self._prefix else 0
        added = window[done:]
        stable = added.rstrip(REPLACEMENT)
        if self._stop:
            self._find_stop(stable)
        if stable == added and added:  # whole characters only: the window moves on
            self.text += added
            self._prefix, self._read = self._read, len(ids)
        return self.stopped_at is not None

    def _find_stop(self, new: str) -> None:
        """The first stop string that ends in ``new`` (appended to the text), searched from ``hold`` characters
        back, so one that straddles the two is found and one seen before is not searched again."""
        start = max(0, len(self.text) - self._hold)
        tail = self.text[start:] + new
        found = [i for i in (tail.find(s) for s in self._stop) if i >= 0]
        if found:
            self.stopped_at = start + min(found)

    def final_text(self, ids: list[int]) -> str:
        """The whole answer of ``ids`` (what decoding it at once gives, a trailing half character included), cut
        before the first stop string."""
        if self.stopped_at is None:
            self.feed(ids)
        tail = ""
        if len(ids) > self._read:  # tokens that never made whole characters
            window = self._decode(ids[self._prefix :])
            tail = window[len(self._decode(ids[self._prefix : self._read])) if self._read > self._prefix else 0 :]
        text = self.text + tail
        return text[: self.stopped_at] if self.stopped_at is not None else text

    def delta(self, ids: list[int]) -> str:
        """The text added since the last delta, of the answer so far, without the characters a stop string could
        still claim; ``final_delta`` hands out the rest."""
        self.feed(ids)
        end = len(self.text) - self._hold if self._stop else len(self.text)
        if self.stopped_at is not None:
            end = min(end, self.stopped_at)
        return self._take(end, self.text)

    def final_delta(self, final_text: str) -> str:
        """The rest of the finished answer (``final_text``)."""
        return self._take(len(final_text), final_text)

    def _take(self, end: int, text: str) -> str:
        if end <= self._sent:
            return ""
        piece, self._sent = text[self._sent : end], end
        return piece
