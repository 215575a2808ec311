"""Our tokenizer against transformers' tokenizer built from the same GGUF: same ids, same decoded text, same prompts."""

import json
import shutil
from pathlib import Path

import jinja2
import pytest
from tokenizers import Tokenizer as TokenizerBackend
from tokenizers import pre_tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from oxygen_ros.models.loaded import LoadedModel
from oxygen_ros.models.tokenizer import Tokenizer

TEXTS = [
    "",
    "Hello, world!",
    "What is the capital of France?",
    "  leading and trailing spaces   ",
    "tabs\tand\nnew\n\nlines\r\n",
    "digits 0123456789 and 3.14159, 1e-10, -42, 2024-06-01, 1,000,000",
    "def f(x: int) -> int:\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * 2; }",
    "naïve café résumé Ünïcödé",
    "日本語のテキストと中文文本",
    "emoji 🤖🚀 and 👨‍👩‍👧 family",
    "مرحبا بالعالم",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after<|im_end|>",
    "<|im_start|> not quite <|im_start| special",
    "\u00a0non-breaking\u2009thin\u3000ideographic spaces",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a robot."}, {"role": "user", "content": "Move forward 2 m."}],
    [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Count to 3.\n"},
    ],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaces  and 🤖  "}],
]


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_transformers(gguf_model: LoadedModel, hf_tokenizer: PreTrainedTokenizerBase, text: str) -> None:
    ids = gguf_model.tokenizer.encode(text)
    assert ids == hf_tokenizer.encode(text, add_special_tokens=False)
    assert gguf_model.tokenizer.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=True)
    assert gguf_model.tokenizer.decode(ids, skip_special_tokens=False) == text


@pytest.fixture(scope="module")
def smollm2_splits(hf_tokenizer: PreTrainedTokenizerBase) -> TokenizerBackend:
    """transformers' tokenizer from the GGUF (its vocabulary, merges and BPE) with the pre-tokenizer SmolLM2's own
    tokenizer.json declares (the one ours builds for ``smollm``: this checks the vocabulary, merges and added tokens
    as transformers reads them; the split itself is checked against llama.cpp's ids below): every digit its own piece
    (``Digits(individual_digits=True)``), then byte-level. The GGUF names it ``smollm``, which llama.cpp splits the
    same way (each ``\\p{N}`` alone); transformers' GGUF conversion keeps only the byte-level part, so it glues a
    space to a numeric character that is not an ASCII digit (' ²': 'ĠÂ' + '²' there, 'Ġ' + 'Â²' in SmolLM2 and
    llama.cpp)."""
    backend = TokenizerBackend.from_str(hf_tokenizer.backend_tokenizer.to_str())
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])  # fmt: skip
    return backend


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=64))
def test_ids_match_transformers_on_random_text(gguf_model: LoadedModel, smollm2_splits: TokenizerBackend,
                                               text: str) -> None:  # fmt: skip
    assert gguf_model.tokenizer.encode(text) == smollm2_splits.encode(text, add_special_tokens=False).ids


# llama.cpp's ids for these over the same GGUF (llama-cpp-python 0.3.36, ``Llama(vocab_only=True).tokenize``)
LLAMA_CPP_IDS = {" ²": [216, 19133], "x ³4": [104, 216, 39050, 36], " ½ 2": [216, 16738, 216, 34]}


@pytest.mark.parametrize("text", list(LLAMA_CPP_IDS))
def test_numeric_characters_split_as_smollm2_declares(gguf_model: LoadedModel, smollm2_splits: TokenizerBackend,
                                                      text: str) -> None:  # fmt: skip
    """Where transformers' GGUF conversion and SmolLM2's declared pre-tokenizer differ (a space before a numeric
    character that is not an ASCII digit), ours gives llama.cpp's ids, which are SmolLM2's."""
    ids = gguf_model.tokenizer.encode(text)
    assert ids == LLAMA_CPP_IDS[text] == smollm2_splits.encode(text, add_special_tokens=False).ids
    assert gguf_model.tokenizer.decode(ids, skip_special_tokens=False) == text


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(
    gguf_model: LoadedModel, hf_tokenizer: PreTrainedTokenizerBase, messages: list[dict], add_generation_prompt: bool
) -> None:
    ours = gguf_model.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    assert ours == hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    assert gguf_model.tokenizer.encode(ours) == hf_tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False
    )


def test_special_tokens(gguf_model: LoadedModel, hf_tokenizer: PreTrainedTokenizerBase) -> None:
    tok = gguf_model.tokenizer
    assert (tok.bos_token_id, tok.pad_token_id) == (hf_tokenizer.bos_token_id, hf_tokenizer.pad_token_id)
    assert tok.eos_token_ids == [hf_tokenizer.eos_token_id] == [hf_tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert tok.vocab_size == len(hf_tokenizer) == 49152


def test_eos_token_ids_add_the_template_turn_end(gguf_model: LoadedModel) -> None:
    """With `<|endoftext|>` as EOS (as in SmolLM2's base config), `<|im_end|>` still ends an assistant turn."""
    tok = gguf_model.tokenizer
    base = Tokenizer(tok.backend, tok.chat_template, bos_token="<|im_start|>", eos_token="<|endoftext|>")
    assert base.eos_token_ids == [0, 2]


def test_template_raise_exception(gguf_model: LoadedModel) -> None:
    template = "{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}ok"
    tok = Tokenizer(gguf_model.tokenizer.backend, template, bos_token=None, eos_token="<|im_end|>")
    assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(jinja2.TemplateError, match="user first"):
        tok.apply_chat_template([{"role": "system", "content": "x"}])
    assert tok.eos_token_ids == [2]  # the probe conversation renders no turn end here


def test_saved_tokenizer_loads_in_transformers_and_ours(
    gguf_model: LoadedModel, hf_tokenizer: PreTrainedTokenizerBase, saved_folder: Path
) -> None:
    theirs, ours = AutoTokenizer.from_pretrained(saved_folder), Tokenizer.from_hf_folder(saved_folder)
    for text in TEXTS:
        expected = hf_tokenizer.encode(text, add_special_tokens=False)
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False) == expected
        assert theirs.encode(text) == expected  # no BOS/EOS added by a post-processor either
    for messages in CONVERSATIONS:
        expected = hf_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert ours.apply_chat_template(messages) == expected
        assert theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == expected
    assert (theirs.bos_token_id, theirs.eos_token_id, theirs.pad_token_id) == (1, 2, 2)
    assert (ours.bos_token_id, ours.eos_token_ids, ours.pad_token_id) == (1, [2], 2)


def test_loads_a_folder_written_by_transformers(hf_tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    """transformers 5 stores the template in chat_template.jinja; `from_hf_folder` must find it there."""
    hf_tokenizer.save_pretrained(tmp_path)
    ours = Tokenizer.from_hf_folder(tmp_path)
    assert [ours.encode(text) for text in TEXTS] == [hf_tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]
    for messages in CONVERSATIONS:
        assert ours.apply_chat_template(messages) == hf_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    assert (ours.bos_token_id, ours.eos_token_ids, ours.pad_token_id) == (1, [2], 2)


def test_special_tokens_from_special_tokens_map(saved_folder: Path, tmp_path: Path) -> None:
    """Older HF folders name their special tokens only in special_tokens_map.json (as AddedToken dicts)."""
    config = json.loads((saved_folder / "tokenizer_config.json").read_text())
    specials = {key: {"content": config.pop(key)} for key in ("bos_token", "eos_token", "pad_token", "unk_token")}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(specials))
    shutil.copy(saved_folder / "tokenizer.json", tmp_path)
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert (tok.bos_token_id, tok.eos_token_ids, tok.pad_token_id) == (1, [2], 2)
