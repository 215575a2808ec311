"""The incremental detokenizer against decoding the whole answer at once (the reference: the tokenizer's own
decode, cut before the first stop string, as transformers' stop strings cut): the final text equals it, the streamed
pieces add up to it (multi-byte characters split across tokens included) and never hold half a stop string, for
byte-level BPE (SmolLM2's GGUF) and SentencePiece-style Metaspace BPE (a pi0 folder's); AsyncEngine hands every
piece out before the result."""

import threading

import pytest
from engine_helpers import make_engine
from hypothesis import given, settings
from hypothesis import strategies as st
from pi0_folders import write_tokenizer

from oxygen_ros.engine.async_engine import AsyncEngine
from oxygen_ros.engine.detokenizer import IncrementalDetokenizer
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.tokenizer import Tokenizer

TEXT = "Robots: héllo wörld, ünïcode 🤖🦾 and 中文 text, done."


def cut(text: str, stop: list[str]) -> str:
    found = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(found)] if found else text


def streamed(tokenizer, ids: list[int], stop: list[str], every: int = 1) -> tuple[list[str], str]:
    """What the engine does: feed each token (stopping at a stop string), stream every ``every`` tokens, finish."""
    detok = IncrementalDetokenizer(tokenizer.decode, stop)
    pieces, n = [], 0
    for n in range(1, len(ids) + 1):
        if stop and detok.feed(ids[:n]):
            break
        if n % every == 0:
            pieces.append(detok.delta(ids[:n]))
    final = detok.final_text(ids[:n])
    pieces.append(detok.final_delta(final))
    return pieces, final


@pytest.fixture(scope="module")
def metaspace(tmp_path_factory) -> Tokenizer:
    folder = tmp_path_factory.mktemp("metaspace")
    write_tokenizer(folder)
    return Tokenizer.from_hf_folder(folder)


@pytest.mark.parametrize("every", [1, 3])
def test_pieces_add_up_to_the_decoded_answer(tiny_bundle, every):
    tokenizer = tiny_bundle.tokenizer
    ids = tokenizer.encode(TEXT)
    assert len(ids) > len(TEXT.split())  # several characters span tokens
    pieces, final = streamed(tokenizer, ids, [], every)
    assert "".join(pieces) == final == tokenizer.decode(ids) == TEXT
    assert all("\ufffd" not in p for p in pieces)


def test_a_stop_string_is_never_half_streamed(tiny_bundle):
    """The engine cuts the answer before a stop string; what was streamed before the stop string completed must
    not include its first characters."""
    tokenizer = tiny_bundle.tokenizer
    ids = tokenizer.encode("The cup is red. STOP here")
    pieces, final = streamed(tokenizer, ids, ["STOP", "END!"])
    assert final == "The cup is red. " and "".join(pieces) == final
    assert all("S" not in piece for piece in pieces[:-1])


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 49151), min_size=1, max_size=40), stop=st.lists(
    st.sampled_from(["e", "the", ".", "é", "\n", "🤖", "ab"]), max_size=3), every=st.integers(1, 4))  # fmt: skip
def test_random_answers_equal_decoding_them_at_once(tiny_bundle, ids, stop, every):
    tokenizer = tiny_bundle.tokenizer
    pieces, final = streamed(tokenizer, ids, stop, every)
    assert final == cut(tokenizer.decode(ids), stop)
    assert "".join(pieces) == final


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_sentencepiece_answers_equal_decoding_them_at_once(metaspace, data):
    ids = data.draw(st.lists(st.integers(0, metaspace.vocab_size - 1), min_size=1, max_size=30))
    stop = data.draw(st.lists(st.sampled_from(["a", "the", " ", "up"]), max_size=2))
    pieces, final = streamed(metaspace, ids, stop)
    assert final == cut(metaspace.decode(ids), stop)
    assert "".join(pieces) == final


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
