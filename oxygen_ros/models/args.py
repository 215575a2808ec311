"""Shape of a Llama-family decoder: everything a loader must tell the model to build it."""

from dataclasses import dataclass


@dataclass(frozen=True)
class LlamaArgs:
    """Hyper-parameters of a Llama / Qwen2 style decoder (RMSNorm, RoPE, GQA, SwiGLU MLP)."""

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
