"""Writing small GGUF files for tests the way llama.cpp's converter does: its header keys for a Llama-shaped model,
SmolLM2's tokenizer metadata (the vocabulary our tiny checkpoints are made with) and the tensors given."""

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from oxygen_ros.models.gguf_loader import smollm2_gguf_path

TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id")  # fmt: skip


@dataclass(frozen=True)
class Shape:
    """The header keys a Llama-shaped GGUF file carries (llama.cpp's names in comments)."""

    layers: int  # block_count
    context: int  # context_length
    hidden: int  # embedding_length
    ff: int  # feed_forward_length
    heads: int  # attention.head_count
    kv_heads: int  # attention.head_count_kv
    head_dim: int  # attention.key_length and value_length
    rope_base: float  # rope.freq_base
    rms_eps: float  # attention.layer_norm_rms_epsilon


@functools.cache
def smollm2_reader() -> gguf.GGUFReader:
    """The bundled SmolLM2 GGUF file, read once for the whole run: its reader parses each of the 49152 tokens and
    48900 merges in Python (2-3 s a time), and it is only read (a memory map)."""
    return gguf.GGUFReader(smollm2_gguf_path())


def smollm2_vocabulary() -> list[str]:
    return smollm2_reader().fields["tokenizer.ggml.tokens"].contents()


def write_gguf(path: Path, arch: str, shape: Shape, tensors: Iterable[tuple[str, np.ndarray]],
               pre: str | None = None, q4_0: Callable[[str], bool] = lambda name: False) -> None:  # fmt: skip
    """``tensors`` (GGUF names, float32 arrays) as a GGUF file of architecture ``arch`` with SmolLM2's tokenizer;
    ``pre`` replaces its pre-tokenizer name (``tokenizer.ggml.pre``); the tensors ``q4_0`` names are written as
    llama.cpp's Q4_0 blocks (gguf-py's quantizer)."""
    source = smollm2_reader()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(shape.layers)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_feed_forward_length(shape.ff)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_freq_base(shape.rope_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre if pre is not None else source.fields["tokenizer.ggml.pre"].contents())
    for key in TOKENIZER_KEYS:
        field = source.fields[key]
        value = field.contents()
        if isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, field.types[0])
    for name, data in tensors:
        data = np.ascontiguousarray(data, dtype=np.float32)
        if q4_0(name):
            q4 = gguf.GGMLQuantizationType.Q4_0
            writer.add_tensor(name, gguf.quants.quantize(data, q4), raw_dtype=q4)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
