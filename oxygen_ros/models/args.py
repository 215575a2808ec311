"""Shape of a Llama-family decoder: everything a loader must tell the model to build it."""

import operator
from dataclasses import dataclass

from oxygen_ros.layers.rotary import RopeScaling

MAX_LAYERS = 1024  # decoder layers a model file may declare (open models have at most ~128)
MAX_HEADS = 1024  # attention heads (of q, and of k / v)
MAX_WIDTH = 1 << 20  # hidden and MLP widths, vocabulary rows
_CONFIG_BOUNDS = {"num_hidden_layers": MAX_LAYERS, "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS}


def config_count_bound(key: str) -> int:
    """The largest value a transformers config's count ``key`` may hold: layers and heads have their own bounds, every
    other count (widths, vocabulary, head size, image and patch sizes) ``MAX_WIDTH``."""
    return _CONFIG_BOUNDS.get(key, MAX_WIDTH)


@dataclass(frozen=True)
class LlamaArgs:
    """Hyper-parameters of a Llama / Qwen2 / Qwen3 / SmolLM3 style decoder (RMSNorm, RoPE, GQA, SwiGLU MLP)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 8192
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # Qwen2 has q/k/v biases, Llama does not
    family: str = "llama"  # the transformers model_type it was read as: llama, qwen2, qwen3, smollm3
    rope_scaling: RopeScaling | None = None  # Llama 3.x's llama3 (or a GGUF's rope_freqs), or linear; None = unscaled
    qk_norm: bool = False  # Qwen3: an RMSNorm over each head of q and k before RoPE
    no_rope_layers: tuple[int, ...] = ()  # SmolLM3: per layer 1 = RoPE, 0 = none; () = RoPE everywhere

    def projection_inputs(self) -> tuple[int, ...]:
        """The input widths of a layer's projections (q/k/v and gate/up read the hidden state, o the heads, down the
        MLP's width) and of the LM head: what a row-blocked weight format must divide."""
        return self.hidden_size, self.num_heads * self.head_dim, self.intermediate_size

    def layer_weights(self) -> int:
        """Weights of one decoder layer's projections (q, k, v, o, gate, up, down): each is read, and multiplied, once
        a token."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        return h * (q + 2 * kv) + q * h + 3 * h * self.intermediate_size

    def uses_rope(self, layer: int) -> bool:
        return not self.no_rope_layers or bool(self.no_rope_layers[layer])


def checked_count(source: object, key: str, value: object, upper: int) -> int:
    """A count read from a model file (layers, heads, widths): an integer in [1, ``upper``], checked before it sizes
    a loop, a table or a division; ValueError naming the file and the key otherwise."""
    try:
        count = operator.index(value)  # an int, or a numpy integer from a GGUF's fields; not a float or a bool
    except TypeError:
        count = None
    if count is None or isinstance(value, bool) or not 1 <= count <= upper:
        raise ValueError(f"{source}: {key} must be an integer in [1, {upper}], got {value!r}")
    return count
