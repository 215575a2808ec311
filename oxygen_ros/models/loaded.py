"""What a loader hands the engine: the model's shape, its weights under our names (in the dtype asked), and its
tokenizer."""

from dataclasses import dataclass

import torch

from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.tokenizer import Tokenizer


@dataclass
class LoadedModel:
    """A model read from disk (GGUF or HF folder), independent of the file format it came from."""

    args: LlamaArgs
    state_dict: dict[str, torch.Tensor]  # the dtype asked, HF orientation [out, in], HF Llama names without "model."
    tokenizer: Tokenizer
    name: str


def parameter_shapes(args: LlamaArgs) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter the model built from `args` has, so loaders reject mismatched files early."""
    hidden, q_out, kv_out = args.hidden_size, args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
    shapes = {"embed_tokens.weight": (args.vocab_size, hidden), "norm.weight": (hidden,)}
    if not args.tie_word_embeddings:
        shapes["lm_head.weight"] = (args.vocab_size, hidden)
    for i in range(args.num_layers):
        layer = f"layers.{i}"
        shapes |= {
            f"{layer}.input_layernorm.weight": (hidden,),
            f"{layer}.post_attention_layernorm.weight": (hidden,),
            f"{layer}.self_attn.q_proj.weight": (q_out, hidden),
            f"{layer}.self_attn.k_proj.weight": (kv_out, hidden),
            f"{layer}.self_attn.v_proj.weight": (kv_out, hidden),
            f"{layer}.self_attn.o_proj.weight": (hidden, q_out),
            f"{layer}.mlp.gate_proj.weight": (args.intermediate_size, hidden),
            f"{layer}.mlp.up_proj.weight": (args.intermediate_size, hidden),
            f"{layer}.mlp.down_proj.weight": (hidden, args.intermediate_size),
        }
        if args.qk_norm:
            shapes |= {f"{layer}.self_attn.q_norm.weight": (args.head_dim,),
                       f"{layer}.self_attn.k_norm.weight": (args.head_dim,)}  # fmt: skip
        if args.attention_bias:
            shapes |= {
                f"{layer}.self_attn.q_proj.bias": (q_out,),
                f"{layer}.self_attn.k_proj.bias": (kv_out,),
                f"{layer}.self_attn.v_proj.bias": (kv_out,),
            }
    return shapes


def check_tensors(tensors: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], source: str,
                  against: str = "the config", named: dict[str, str] | None = None) -> None:  # fmt: skip
    """Raise a ValueError naming what is missing, unexpected or misshapen, instead of failing later in the model.
    ``named`` maps a tensor's name here to its name in the file, for the unexpected and misshapen ones."""
    named = named or {}
    missing, unexpected = sorted(expected.keys() - tensors.keys()), sorted(tensors.keys() - expected.keys())
    if missing or unexpected:
        unexpected = [named.get(n, n) for n in unexpected]
        raise ValueError(f"{source}: tensors do not fit {against}: missing {missing[:8]} unexpected {unexpected[:8]}")
    wrong = [f"{named.get(n, n)} {tuple(t.shape)} != {expected[n]}" for n, t in tensors.items()
             if tuple(t.shape) != expected[n]]  # fmt: skip
    if wrong:
        raise ValueError(f"{source}: tensor shapes do not match {against}: {wrong[:8]}")


def check_state_dict(state_dict: dict[str, torch.Tensor], args: LlamaArgs, source: str) -> None:
    """``check_tensors`` against the parameters of the Llama built from ``args``."""
    check_tensors(state_dict, parameter_shapes(args), source)
