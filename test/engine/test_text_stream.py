"""Streamed answers: the pieces add up to the final text exactly (multi-byte characters split across tokens
included), stop strings are never half streamed, and AsyncEngine hands every piece out before the result."""

import threading

import pytest
from engine_helpers import make_engine

from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.engine.text_stream import TextStream

TEXT = "Robots: héllo wörld, ünïcode 🤖🦾 and 中文 text, done."


@pytest.mark.parametrize("every", [1, 3])
def test_pieces_add_up_to_the_decoded_answer(tiny_bundle, every):
    tokenizer = tiny_bundle.tokenizer
    ids = tokenizer.encode(TEXT)
    assert len(ids) > len(TEXT.split())  # several characters span tokens
    stream = TextStream(tokenizer.decode, stop=[])
    pieces = [stream.update(ids[:n]) for n in range(every, len(ids) + 1, every)]
    pieces.append(stream.finish(tokenizer.decode(ids)))
    assert "".join(pieces) == tokenizer.decode(ids) == TEXT
    assert all("\ufffd" not in p for p in pieces)


def test_a_stop_string_is_never_half_streamed(tiny_bundle):
    """The engine cuts the answer before a stop string; what was streamed before the stop string completed must
    not include its first characters."""
    tokenizer = tiny_bundle.tokenizer
    ids = tokenizer.encode("The cup is red. STOP here")
    stream = TextStream(tokenizer.decode, stop=["STOP", "END!"])
    for n in range(1, len(ids) + 1):
        if "STOP" in tokenizer.decode(ids[:n]):
            break  # the engine finishes the request at this token: the rest comes from finish()
        stream.update(ids[:n])
    assert "S" not in stream.sent
    assert "".join([stream.sent, stream.finish("The cup is red. ")]) == "The cup is red. "


def test_async_engine_streams_every_piece_before_the_result(tiny_bundle):
    serving = AsyncEngine(make_engine(tiny_bundle))
    try:
        pieces: list[tuple[str, int, bool]] = []
        done = threading.Event()
        future = None

        def on_text(piece: str, tokens: int) -> None:
            pieces.append((piece, tokens, future is not None and future.done()))

        greq = GenerateRequest("Tell me about robots.", sampling=SamplingParams(max_new_tokens=12, ignore_eos=True))
        future = serving.submit(greq, on_text=on_text, text_every=3)
        future.add_done_callback(lambda _: done.set())
        out = future.result(timeout=60)
        assert done.wait(5) and out.ok and out.generated_tokens == 12
        assert "".join(p for p, _, _ in pieces) == out.text
        assert not any(finished for _, _, finished in pieces)  # every piece came before the result
        counts = [tokens for _, tokens, _ in pieces]
        assert counts == sorted(counts) and counts[-1] == 12 and len(pieces) <= 12 // 3 + 1
    finally:
        serving.shutdown(timeout=30)
