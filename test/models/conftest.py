"""Session-wide models: loading SmolLM2 takes seconds (ours) to ~20 s (transformers), so every test shares them."""

from pathlib import Path

import pytest
from hf_reference import hf_smollm2
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from oxygen_ros.models.gguf_loader import load_gguf, smollm2_gguf_path
from oxygen_ros.models.hf_loader import save_hf_folder
from oxygen_ros.models.loaded import LoadedModel


@pytest.fixture(scope="session")
def gguf_model() -> LoadedModel:
    return load_gguf(smollm2_gguf_path())


@pytest.fixture(scope="session")
def hf_model() -> PreTrainedModel:
    return hf_smollm2()[0]


@pytest.fixture(scope="session")
def hf_tokenizer() -> PreTrainedTokenizerBase:
    return hf_smollm2()[1]


@pytest.fixture(scope="session")
def saved_folder(gguf_model: LoadedModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 written by `save_hf_folder`, shared by the round-trip and transformers-compatibility tests."""
    folder = tmp_path_factory.mktemp("smollm2_hf")
    save_hf_folder(gguf_model, folder)
    return folder
