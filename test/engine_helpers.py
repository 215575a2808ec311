"""Shared by the engine tests: a tiny random Llama shape and an engine factory with invariant checks on."""

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.engine import Engine
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.registry import ModelBundle

TINY = LlamaArgs(
    vocab_size=49152, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
    rope_theta=10000.0, max_position_embeddings=4096,
)


def make_engine(bundle: ModelBundle, **overrides) -> Engine:
    """An engine over ``bundle`` with a small pool and the pool's invariants checked after every step."""
    values = {"kv_cache_bytes": 64 << 20, "debug_checks": True, "max_model_len": 2048} | overrides
    return Engine(EngineConfig(**values), bundle=bundle)
