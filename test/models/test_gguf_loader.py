"""load_gguf against transformers' own GGUF loader: same shape, and every weight equal (checks the q/k un-permute)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGUFWriter
from transformers import PreTrainedModel

from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.gguf_loader import load_gguf
from oxygen_ros.models.loaded import LoadedModel, parameter_shapes


def test_smollm2_args(gguf_model: LoadedModel) -> None:
    assert gguf_model.args == LlamaArgs(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_layers=30,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=1e5,
        rms_norm_eps=gguf_model.args.rms_norm_eps,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        attention_bias=False,
    )
    assert gguf_model.args.rms_norm_eps == pytest.approx(1e-5)
    assert gguf_model.name == "SmolLM2-135M-Instruct.Q4_1"


def test_config_matches_transformers(gguf_model: LoadedModel, hf_model: PreTrainedModel) -> None:
    config, args = hf_model.config, gguf_model.args
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (
        args.num_layers,
        args.num_heads,
        args.num_kv_heads,
        args.head_dim,
    )
    assert config.rope_parameters["rope_theta"] == args.rope_theta
    assert config.rms_norm_eps == args.rms_norm_eps
    assert config.tie_word_embeddings == args.tie_word_embeddings


def test_every_weight_equals_transformers(gguf_model: LoadedModel, hf_model: PreTrainedModel) -> None:
    theirs = {name.removeprefix("model."): p for name, p in hf_model.named_parameters()}
    assert theirs.keys() == gguf_model.state_dict.keys() == parameter_shapes(gguf_model.args).keys()
    for name, ours in gguf_model.state_dict.items():
        assert ours.dtype == torch.float32 and ours.is_contiguous(), name
        # Bit-exact with the pinned versions; the tolerance only allows another dequantization arithmetic order.
        assert (ours - theirs[name].detach()).abs().max() <= 1e-6, name


def test_a_file_without_its_architectures_shape_is_refused_naming_the_keys(tmp_path: Path) -> None:
    """A qwen2 file (supported: test_gguf_architectures) that lacks the keys its shape is read from."""
    writer = GGUFWriter(tmp_path / "qwen2.gguf", "qwen2")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match=r"GGUF metadata lacks \['qwen2.embedding_length'"):
        load_gguf(tmp_path / "qwen2.gguf")
