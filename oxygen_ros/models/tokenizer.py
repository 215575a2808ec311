"""Text <-> token ids and chat prompts, built from a GGUF's metadata or an HF folder, with no transformers import.

The engine must tokenize exactly as the model was trained, so both constructors reproduce what transformers builds
from the same files, and `save_hf` writes a folder that transformers' AutoTokenizer loads back unchanged.
"""

import json
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from gguf import GGUFReader
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as Backend

# llama.cpp token types; CONTROL and USER_DEFINED tokens must stay whole instead of being cut into BPE pieces.
_NORMAL, _CONTROL, _USER_DEFINED = 1, 3, 4

# `tokenizer.ggml.pre` -> how the text is split before BPE. SmolLM's vocabulary was trained on single digits.
# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp), which GGUF files name in `tokenizer.ggml.pre`.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")  # fmt: skip
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")  # fmt: skip


def _split_then_bytes(pattern: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])  # fmt: skip


_GGUF_PRE_TOKENIZERS = {
    "default": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False),
    "gpt2": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False),
    "smollm": lambda: pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    ),
    "llama-bpe": lambda: _split_then_bytes(_LLAMA3_SPLIT),  # Llama 3.x
    "llama3": lambda: _split_then_bytes(_LLAMA3_SPLIT),
    "qwen2": lambda: _split_then_bytes(_QWEN2_SPLIT),  # Qwen2, Qwen2.5, Qwen3
}


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None, sort_keys=False) -> str:
    """HF's `tojson`: jinja's own escapes HTML characters, which would change what the model sees."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_environment() -> ImmutableSandboxedEnvironment:
    """The environment transformers renders chat templates in, so prompts are byte-identical to HF's."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def _compile_template(source: str) -> jinja2.Template:
    return _template_environment().from_string(source)


def _template_variables(source: str) -> frozenset[str]:
    """The variables a chat template reads from its caller (``tools``, ``enable_thinking``, ...), from its syntax."""
    env = _template_environment()
    return frozenset(jinja2.meta.find_undeclared_variables(env.parse(source)) - set(env.globals))


def _token_content(value: str | dict | None) -> str | None:
    """tokenizer_config.json spells a special token either as its text or as a serialized AddedToken."""
    return value["content"] if isinstance(value, dict) else value


class Tokenizer:
    """A `tokenizers.Tokenizer` plus the chat template and the special tokens the engine stops on."""

    def __init__(
        self,
        backend: Backend,
        chat_template: str | None,
        bos_token: str | None,
        eos_token: str,
        pad_token: str | None = None,
        unk_token: str | None = None,
        stop_token_ids: tuple[int, ...] = (),
    ) -> None:
        self.backend = backend
        self.stop_token_ids = stop_token_ids  # generation_config.json's eos_token_id (Llama 3: <|eot_id|>, <|eom_id|>)
        self.chat_template = chat_template
        self.special_tokens = {
            "bos_token": bos_token,
            "eos_token": eos_token,
            "pad_token": pad_token,
            "unk_token": unk_token,
        }
        self._template = _compile_template(chat_template) if chat_template else None
        self.template_variables = _template_variables(chat_template) if chat_template else frozenset()
        if self.eos_token_id is None:
            raise ValueError(f"EOS token {eos_token!r} is not in the vocabulary")

    @classmethod
    def from_gguf_metadata(cls, reader: GGUFReader) -> "Tokenizer":
        """Rebuild the byte-level BPE tokenizer llama.cpp's converter stored as `tokenizer.ggml.*` metadata."""

        def field(key: str, default: Any = None) -> Any:
            return reader.fields[key].contents() if key in reader.fields else default

        model, pre = field("tokenizer.ggml.model"), field("tokenizer.ggml.pre", "default")
        if model != "gpt2" or pre not in _GGUF_PRE_TOKENIZERS:
            raise ValueError(
                f"unsupported GGUF tokenizer model={model!r} pre={pre!r}; supported: model 'gpt2' with pre "
                f"{sorted(_GGUF_PRE_TOKENIZERS)}"
            )
        tokens: list[str] = field("tokenizer.ggml.tokens")
        merges = [tuple(merge.split(" ")) for merge in field("tokenizer.ggml.merges")]
        backend = Backend(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        backend.pre_tokenizer = _GGUF_PRE_TOKENIZERS[pre]()
        backend.decoder = decoders.ByteLevel()
        token_types = field("tokenizer.ggml.token_type") or [_NORMAL] * len(tokens)
        typed = list(zip(tokens, token_types, strict=True))
        backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in typed if k == _CONTROL])
        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t, k in typed if k == _USER_DEFINED])

        def special(key: str) -> str | None:
            token_id = field(f"tokenizer.ggml.{key}")
            return None if token_id is None else tokens[token_id]

        return cls(
            backend,
            chat_template=field("tokenizer.chat_template"),
            bos_token=special("bos_token_id"),
            eos_token=special("eos_token_id"),
            pad_token=special("padding_token_id"),
            unk_token=special("unknown_token_id"),
        )

    @classmethod
    def from_hf_folder(cls, path: str | Path) -> "Tokenizer":
        """Load tokenizer.json plus the template and special tokens from the JSON / jinja files beside it."""
        folder = Path(path)
        if not (folder / "tokenizer.json").is_file():
            raise FileNotFoundError(f"{folder} has no tokenizer.json (only fast-tokenizer folders are supported)")
        # Older folders keep the special tokens in special_tokens_map.json; tokenizer_config.json wins when both do.
        config = {}
        for name in ("special_tokens_map.json", "tokenizer_config.json"):
            if (folder / name).is_file():
                config |= json.loads((folder / name).read_text())
        template = config.get("chat_template")
        if isinstance(template, list):  # older multi-template format: [{"name": ..., "template": ...}]
            template = {entry["name"]: entry["template"] for entry in template}.get("default")
        jinja_file = folder / "chat_template.jinja"  # transformers >= 4.50 saves the template here instead
        if jinja_file.is_file():
            template = jinja_file.read_text()
        backend = Backend.from_file(str(folder / "tokenizer.json"))
        return cls(
            backend,
            chat_template=template,
            bos_token=_token_content(config.get("bos_token")),
            eos_token=_token_content(config.get("eos_token")),
            pad_token=_token_content(config.get("pad_token")),
            unk_token=_token_content(config.get("unk_token")),
            stop_token_ids=_generation_stops(folder, backend.get_vocab_size(with_added_tokens=True)),
        )

    def save_hf(self, folder: str | Path) -> None:
        """Write tokenizer.json + tokenizer_config.json, readable by `from_hf_folder` and by AutoTokenizer."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / "tokenizer.json"))
        config = {
            # The generic fast tokenizer uses tokenizer.json as-is; a model-specific class may rebuild the pipeline.
            "tokenizer_class": "PreTrainedTokenizerFast",
            "add_bos_token": False,
            "add_eos_token": False,
            "chat_template": self.chat_template,
            **self.special_tokens,
        }
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special tokens written in the text (e.g. by the chat template) map to their ids."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            tools: list[dict] | None = None, **options: Any) -> str:  # fmt: skip
        """Render the prompt string exactly as transformers' `apply_chat_template(..., tokenize=False, tools=tools,
        **options)` does (``options``: template variables such as Qwen3's ``enable_thinking``)."""
        if self._template is None:
            raise ValueError("this tokenizer has no chat template")
        # Like HF: keys set to None are dropped, since templates test for presence (`content=None` from OpenAI APIs).
        messages = [{key: value for key, value in message.items() if value is not None} for message in messages]
        specials = {key: token for key, token in self.special_tokens.items() if token is not None}
        return self._template.render(
            **options, messages=messages, tools=tools or None, documents=None,
            add_generation_prompt=add_generation_prompt, **specials,
        )  # fmt: skip

    def _id(self, key: str) -> int | None:
        token = self.special_tokens[key]
        return None if token is None else self.backend.token_to_id(token)

    @property
    def bos_token_id(self) -> int | None:
        return self._id("bos_token")

    @property
    def eos_token_id(self) -> int:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id("pad_token")

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    @cached_property
    def eos_token_ids(self) -> list[int]:
        """EOS, generation_config.json's stop ids, and the token the template closes an assistant turn with (e.g.
        `<|im_end|>`, `<|eot_id|>`).

        Chat models end a reply with the template's end-of-turn token, which is often not the tokenizer's EOS;
        generation must stop on either. The end-of-turn token is found by rendering a one-turn conversation and
        reading the first special token after the assistant's text.
        """
        ids = [self.eos_token_id, *(i for i in self.stop_token_ids if i != self.eos_token_id)]
        if self._template is None:
            return ids
        marker = "\x00assistant-reply\x00"
        try:
            rendered = self.apply_chat_template(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}],
                add_generation_prompt=False,
            )
        except jinja2.TemplateError:  # a template may reject this shape (e.g. it demands a system message)
            return ids
        tail = rendered.partition(marker)[2].lstrip()
        specials = self.backend.get_added_tokens_decoder().values()
        turn_end = next((t.content for t in specials if t.special and tail.startswith(t.content)), None)
        if turn_end is not None and self.backend.token_to_id(turn_end) not in ids:
            ids.append(self.backend.token_to_id(turn_end))
        return ids


def _generation_stops(folder: Path, vocab_size: int) -> tuple[int, ...]:
    """``eos_token_id`` of the folder's generation_config.json (an id or a list; what transformers' ``generate``
    stops on), each within the vocabulary; () without the file. ValueError naming the file for a malformed one."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return ()
    value = json.loads(path.read_text()).get("eos_token_id")
    ids = [] if value is None else value if isinstance(value, list) else [value]
    if len(ids) > 64 or not all(isinstance(i, int) and 0 <= i < vocab_size for i in ids):
        raise ValueError(f"{path}: eos_token_id must be ids within the vocabulary of {vocab_size}, got {value!r}")
    return tuple(dict.fromkeys(ids))
