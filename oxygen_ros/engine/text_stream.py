"""An answer's text as it grows, in pieces whose concatenation is exactly the final answer.

Decoding each new token alone is wrong for byte-level BPE (a character can span tokens), so each update decodes the
whole answer and hands out what was added since the last piece.  Two things are held back until they are certain:
a trailing replacement character (half of a multi-byte character) and, when the request has stop strings, the last
``longest stop - 1`` characters, since a stop string completed later cuts the answer before its first character.
"""

from collections.abc import Callable

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stop: list[str]) -> None:
        self._decode = decode
        self._hold = max((len(s) for s in stop), default=1) - 1
        self.sent = ""

    def update(self, token_ids: list[int]) -> str:
        """The text added since the last piece, of the answer so far (``token_ids``), held back as above."""
        text = self._decode(token_ids).rstrip(REPLACEMENT)
        stable = text[: len(text) - self._hold] if self._hold else text
        return self._take(stable)

    def finish(self, final_text: str) -> str:
        """The rest of the finished answer (the engine's final text: stop strings already cut off)."""
        return self._take(final_text)

    def _take(self, text: str) -> str:
        if len(text) <= len(self.sent) or not text.startswith(self.sent):
            return ""
        piece, self.sent = text[len(self.sent) :], text
        return piece
