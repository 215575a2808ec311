"""Model fixtures the engine and bench tests share: the real SmolLM2 (loaded once per session), a tiny random Llama for
fast property tests, and pi05-causal-tiny. A plugin of test/conftest.py, so a test beside any package can use them."""

import pytest
import torch
from engine_helpers import TINY
from gguf_files import smollm2_reader

from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.registry import ModelBundle, load_model
from oxygen_ros.models.tokenizer import Tokenizer


@pytest.fixture(scope="session")
def smollm2_bundle() -> ModelBundle:
    return load_model("smollm2-135m", torch.device("cpu"), torch.float32)


@pytest.fixture(scope="session")
def tiny_bundle() -> ModelBundle:
    """A 2-layer random Llama with the real SmolLM2 tokenizer: engine mechanics at a fraction of the cost."""
    torch.manual_seed(0)
    model = LlamaModel(TINY).eval()
    tokenizer = Tokenizer.from_gguf_metadata(smollm2_reader())
    return ModelBundle(model, tokenizer, "tiny-random", TINY.num_layers, TINY.num_kv_heads, TINY.head_dim, 4096)


@pytest.fixture(scope="session")
def pi05_tiny() -> ModelBundle:
    """pi05-causal-tiny (seeded random weights) on one thread: its small matmuls are fastest, and steady, on one core."""
    torch.set_num_threads(1)
    return load_model("pi05-causal-tiny", torch.device("cpu"), torch.float32)
