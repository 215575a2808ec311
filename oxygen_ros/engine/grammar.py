"""Constrained answers: a JSON schema, a regex or a GBNF grammar, compiled by llguidance against the model's own
tokenizer, turned into a mask over the next token's logits inside the batched step.

llguidance (the library llama.cpp, vLLM and SGLang use) builds the token trie from our tokenizers JSON, so the mask
is exact for this vocabulary, and its lexer/parser split computes a mask in tens of microseconds. Compiling is the
expensive part: it runs where the request is submitted (the caller's thread under AsyncEngine, never the engine
thread between steps), is cached by content (a robot asks with the same schema every time), and is bounded twice: the
source's size (``MAX_SOURCE_CHARS``) and llguidance's parser limits, the fuel one compile and one token's mask may
burn, so a hostile grammar (deeply nested, huge enums, recursive references) is refused or bounded, never a hang.
JSON answers are compact (no free whitespace between tokens): a small model cannot pad its answer with blank lines
until the budget ends.
"""

import json
import threading
from collections import OrderedDict

import llguidance
import numpy as np
import torch

from oxygen_ros import bounds
from oxygen_ros.engine.io import Constraint
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.tokenizer import Tokenizer

CONSTRAINT_KINDS = ("json_schema", "regex", "grammar")  # a request's field names (the ROS interfaces' too)
MAX_SOURCE_CHARS = 65536  # of one schema, regex or grammar
CACHED_GRAMMARS = 64
# llguidance's defaults, except a tenth of the per-token fuel: a mask must cost a fraction of a decode step.
LIMITS = llguidance.LLParserLimits(step_lexer_fuel=20_000, step_max_items=5_000, verbose_errors=False)


class GrammarCompiler:
    """Compiled constraints for one tokenizer: ``matcher`` gives each request its own, ``prepare`` compiles ahead."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = llguidance.LLTokenizer(tokenizer.backend.to_str(), n_vocab=tokenizer.vocab_size,
                                                 eos_token=list(tokenizer.eos_token_ids))  # fmt: skip
        self._compiled: OrderedDict[tuple[str, str], llguidance.LLMatcher] = OrderedDict()
        self._lock = threading.Lock()

    def prepare(self, constraint: Constraint) -> None:
        """Compile ``constraint`` now (off the engine thread) and keep the result on it, so ``matcher`` never
        compiles again whatever the cache evicted meanwhile; EngineError as ``matcher``."""
        if constraint.compiled is None:
            constraint.compiled = self._template(constraint)

    def matcher(self, constraint: Constraint) -> llguidance.LLMatcher:
        """A fresh matcher for one request; INVALID_ARGUMENT (OUT_OF_RANGE past the size bound) naming the field."""
        self.prepare(constraint)
        return constraint.compiled.deep_copy()

    def _template(self, constraint: Constraint) -> llguidance.LLMatcher:
        key = (constraint.kind, constraint.source)
        with self._lock:
            if key in self._compiled:
                self._compiled.move_to_end(key)
                return self._compiled[key]
        matcher = llguidance.LLMatcher(self._tokenizer, _grammar(constraint), log_level=0, limits=LIMITS)
        if matcher.is_error():
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{constraint.kind} does not compile: "
                              f"{matcher.get_error().strip()[:500]}")  # fmt: skip
        with self._lock:
            self._compiled[key] = matcher
            while len(self._compiled) > CACHED_GRAMMARS:
                self._compiled.popitem(last=False)
        return matcher


def _grammar(constraint: Constraint) -> str:
    """The constraint in llguidance's grammar form (its own checks come when the matcher is built)."""
    kind, source = constraint.kind, constraint.source
    if kind not in CONSTRAINT_KINDS:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"constraint kind must be one of {CONSTRAINT_KINDS}, got {kind!r}")
    if not source.strip():
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{kind} is empty")
    if len(source) > MAX_SOURCE_CHARS:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"{kind} has {len(source)} characters, more than the bound of "
                          f"{MAX_SOURCE_CHARS}")  # fmt: skip
    if kind == "json_schema":
        bounds.json_nesting("json_schema", source)
        try:
            schema = json.loads(source)
        except RecursionError as exc:  # (the depth above is json.loads' own: a net, not the bound)
            raise EngineError(ErrorCode.OUT_OF_RANGE, f"json_schema nests too deep to parse ({exc})") from exc
        except ValueError as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"json_schema is not valid JSON: {exc}") from exc
        if not isinstance(schema, dict):
            raise EngineError(ErrorCode.INVALID_ARGUMENT, "json_schema must be a JSON object (a schema)")
    try:
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(source)
        if kind == "grammar":
            return llguidance.grammar_from("grammar", source)  # GBNF (llama.cpp's) or llguidance's Lark
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
    except Exception as exc:  # the converters raise plain exceptions on input they cannot read
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"{kind} does not parse: {exc}") from exc


def allowed_tokens(matcher: llguidance.LLMatcher, width: int) -> torch.Tensor:
    """The tokens the matcher allows next, as a bool mask over ``width`` logits (a padded LM head's extra rows are
    never allowed)."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    mask = np.zeros(width, dtype=bool)
    n = min(width, bits.size)
    mask[:n] = bits[:n]
    return torch.from_numpy(mask)
