"""load_gguf against transformers' own GGUF loader: same shape, and every weight equal (checks the q/k un-permute);
RoPE scaling it cannot run refused by name; a bf16 load's peak memory."""

import re
import subprocess
import sys
from pathlib import Path

import gguf
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


@pytest.mark.parametrize(("layers", "heads", "named"), [
    (2**31, 2, r"smollm3.block_count must be an integer in \[1, 1024\], got 2147483648"),
    (1, 0, r"smollm3.attention.head_count must be an integer in \[1, 1024\], got 0"),
])  # fmt: skip
def test_counts_are_bounded_before_they_size_anything(tmp_path: Path, layers: int, heads: int, named: str) -> None:
    """A file's layer count sizes SmolLM3's per-layer table and the expected tensors, its head count divides: named,
    not a hang, an exhausted memory or a ZeroDivisionError."""
    with pytest.raises(ValueError, match=named):
        load_gguf(_minimal(tmp_path / "counts.gguf", "smollm3", None, False, layers=layers, heads=heads))


def _minimal(path: Path, arch: str, scaling: str | None, rope_freqs: bool, layers: int = 1, heads: int = 2) -> Path:
    writer = GGUFWriter(path, arch)
    for add, value in ((writer.add_block_count, layers), (writer.add_embedding_length, 8),
                       (writer.add_feed_forward_length, 16), (writer.add_head_count, heads),
                       (writer.add_vocab_size, 4)):  # fmt: skip
        add(value)
    if scaling is not None:
        writer.add_rope_scaling_type(gguf.RopeScalingType(scaling))
        writer.add_rope_scaling_factor(4.0)
    if rope_freqs:
        writer.add_tensor("rope_freqs.weight", np.ones(2, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("arch", "scaling", "rope_freqs", "named"), [
    ("llama", "yarn", False, "llama.rope.scaling.type 'yarn'"),
    ("qwen2", None, True, "a rope_freqs tensor in a qwen2 file"),
    ("llama", "yarn", True, "a rope_freqs tensor with llama.rope.scaling.type 'yarn'"),
    ("llama", "linear", True, "a rope_freqs tensor with llama.rope.scaling.type 'linear'"),
])  # fmt: skip
def test_rope_scaling_we_do_not_run_is_refused_naming_it(tmp_path: Path, arch, scaling, rope_freqs, named) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        load_gguf(_minimal(tmp_path / "scaled.gguf", arch, scaling, rope_freqs))


# VmHWM, the peak of this process's own memory (ru_maxrss would carry the forking test process's peak over exec)
PEAK = """
import re, sys, torch
from oxygen_ros.models.registry import load_model
def peak():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read())[1])
before = peak()
load_model("smollm2-135m", torch.device("cpu"), getattr(torch, sys.argv[1]))
print(peak() - before)
"""


def test_a_bf16_load_never_holds_fp32_weights() -> None:
    """Peak memory of loading SmolLM2 (Q4_1) as bf16 against loading it as fp32, each in a fresh process: tensors are
    dequantized a slice at a time straight into the dtype asked and assigned to a model built without weights, so
    bf16's peak is well under fp32's (measured 706 vs 1636 MB; 1134 MB when bf16 was loaded through fp32)."""
    peaks = {dtype: int(subprocess.run([sys.executable, "-c", PEAK, dtype], check=True, capture_output=True,
                                       text=True).stdout.split()[-1]) for dtype in ("bfloat16", "float32")}  # fmt: skip
    assert peaks["bfloat16"] < 0.55 * peaks["float32"], peaks
