"""HF folders: our save/load round trip, transformers reading what we write, Qwen2 biases, and clear rejections."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, PreTrainedModel

from oxygen_ros.models.hf_loader import load_hf_folder, save_hf_folder
from oxygen_ros.models.loaded import LoadedModel
from oxygen_ros.models.tokenizer import Tokenizer

PROMPT = "The robot picked up the red block and"

QWEN2_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "torch_dtype": "bfloat16",
    "vocab_size": 49152,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "sliding_window": 256,
    "max_window_layers": 2,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _write_qwen2_folder(folder: Path, tokenizer: Tokenizer) -> None:
    """A tiny Qwen2 checkpoint as the Hub ships them: bf16, sharded with an index, q/k/v biases, untied lm_head."""
    gen = torch.Generator().manual_seed(0)
    c = QWEN2_CONFIG
    hidden, head_dim = c["hidden_size"], c["hidden_size"] // c["num_attention_heads"]
    q_out, kv_out = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    shapes = {
        "model.embed_tokens.weight": (c["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (c["vocab_size"], hidden),
    }
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}"
        shapes |= {
            f"{p}.input_layernorm.weight": (hidden,),
            f"{p}.post_attention_layernorm.weight": (hidden,),
            f"{p}.self_attn.q_proj.weight": (q_out, hidden),
            f"{p}.self_attn.q_proj.bias": (q_out,),
            f"{p}.self_attn.k_proj.weight": (kv_out, hidden),
            f"{p}.self_attn.k_proj.bias": (kv_out,),
            f"{p}.self_attn.v_proj.weight": (kv_out, hidden),
            f"{p}.self_attn.v_proj.bias": (kv_out,),
            f"{p}.self_attn.o_proj.weight": (hidden, q_out),
            f"{p}.mlp.gate_proj.weight": (c["intermediate_size"], hidden),
            f"{p}.mlp.up_proj.weight": (c["intermediate_size"], hidden),
            f"{p}.mlp.down_proj.weight": (hidden, c["intermediate_size"]),
        }
    tensors = {name: (torch.randn(shape, generator=gen) * 0.1).bfloat16() for name, shape in shapes.items()}
    names = sorted(tensors)
    shards = {
        "model-00001-of-00002.safetensors": names[: len(names) // 2],
        "model-00002-of-00002.safetensors": names[len(names) // 2 :],
    }
    for file, shard in shards.items():
        save_file({name: tensors[name] for name in shard}, folder / file, metadata={"format": "pt"})
    index = {
        "metadata": {"total_size": sum(t.numel() * 2 for t in tensors.values())},
        "weight_map": {name: file for file, shard in shards.items() for name in shard},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    (folder / "config.json").write_text(json.dumps(QWEN2_CONFIG))
    tokenizer.save_hf(folder)


def _logits(model: PreTrainedModel, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def reloaded(saved_folder: Path) -> LoadedModel:
    return load_hf_folder(saved_folder)


def test_round_trip_is_identical(gguf_model: LoadedModel, reloaded: LoadedModel) -> None:
    assert reloaded.args == gguf_model.args
    assert reloaded.state_dict.keys() == gguf_model.state_dict.keys()
    for name, tensor in gguf_model.state_dict.items():
        assert torch.equal(reloaded.state_dict[name], tensor), name
    for text in ["Hello, world!", "x = 12345 * 3.5\n\tüñí 🤖", "<|im_start|>user\nhi<|im_end|>\n"]:
        assert reloaded.tokenizer.encode(text) == gguf_model.tokenizer.encode(text)
    messages = [{"role": "user", "content": "Where is the charger?"}]
    assert reloaded.tokenizer.apply_chat_template(messages) == gguf_model.tokenizer.apply_chat_template(messages)
    assert reloaded.tokenizer.eos_token_ids == gguf_model.tokenizer.eos_token_ids


def test_saved_folder_has_hf_layout(saved_folder: Path) -> None:
    config = json.loads((saved_folder / "config.json").read_text())
    assert (config["model_type"], config["architectures"], config["torch_dtype"]) == (
        "llama",
        ["LlamaForCausalLM"],
        "float32",
    )
    assert {p.name for p in saved_folder.iterdir()} == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    }


def test_saved_folder_gives_transformers_the_same_logits(
    gguf_model: LoadedModel, hf_model: PreTrainedModel, saved_folder: Path
) -> None:
    ids = gguf_model.tokenizer.encode(PROMPT)
    saved = AutoModelForCausalLM.from_pretrained(saved_folder, dtype=torch.float32).eval()
    assert saved.config.tie_word_embeddings and saved.lm_head.weight is saved.model.embed_tokens.weight
    torch.testing.assert_close(_logits(saved, ids), _logits(hf_model, ids), rtol=0, atol=1e-4)


def test_qwen2_folder_loads_with_biases(gguf_model: LoadedModel, tmp_path: Path) -> None:
    source, copy = tmp_path / "qwen2", tmp_path / "copy"
    source.mkdir()
    _write_qwen2_folder(source, gguf_model.tokenizer)
    loaded = load_hf_folder(source)
    assert loaded.args.attention_bias and not loaded.args.tie_word_embeddings
    assert (loaded.args.head_dim, loaded.args.rope_theta, loaded.args.rms_norm_eps) == (16, 1e6, 1e-6)
    assert loaded.state_dict["layers.1.self_attn.k_proj.bias"].shape == (32,)

    reference = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    theirs = {name.removeprefix("model."): p.detach() for name, p in reference.named_parameters()}
    assert theirs.keys() == loaded.state_dict.keys()
    for name, tensor in loaded.state_dict.items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, theirs[name]), name

    save_hf_folder(loaded, copy)
    assert json.loads((copy / "config.json").read_text())["model_type"] == "qwen2"
    assert torch.equal(
        load_hf_folder(copy).state_dict["layers.0.self_attn.q_proj.bias"],
        loaded.state_dict["layers.0.self_attn.q_proj.bias"],
    )
    ids = gguf_model.tokenizer.encode(PROMPT)
    resaved = AutoModelForCausalLM.from_pretrained(copy, dtype=torch.float32).eval()
    torch.testing.assert_close(_logits(resaved, ids), _logits(reference, ids), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"model_type": "gpt2"}, "unsupported model_type 'gpt2'"),
        ({"model_type": None}, "unsupported model_type None"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling of type 'llama3' lacks"),
        ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "unsupported RoPE scaling 'dynamic'"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"model_type": "smollm3", "no_rope_layers": [1, 0, 1]}, "no_rope_layers must be one 0 or 1 per layer"),
        ({"model_type": "smollm3", "no_rope_layer_interval": 0}, "no_rope_layer_interval must be a positive"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 0.0}}, "finite positive factors"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
                           "original_max_position_embeddings": 8192}}, "finite positive factors"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}, "unsupported RoPE scaling 'yarn'"),
        ({"use_sliding_window": True, "max_window_layers": 1}, "sliding-window"),
        ({"model_type": "mistral", "use_sliding_window": None, "max_window_layers": None}, "sliding-window"),
        ({"hidden_act": "gelu"}, "SiLU"),
        ({"model_type": "llama", "attention_bias": True}, "o_proj"),
        ({"hidden_size": None}, "lacks"),
        # counts bounded before they size a loop or a table, or divide: named, not a hang or a ZeroDivisionError
        ({"model_type": "smollm3", "num_hidden_layers": 10**9}, r"num_hidden_layers must be an integer in \[1, 1024\]"),
        ({"num_attention_heads": 0}, r"num_attention_heads must be an integer in \[1, 1024\], got 0"),
        ({"hidden_size": 896.0}, r"hidden_size must be an integer in \[1, 1048576\], got 896.0"),
        ({"num_key_value_heads": True}, "num_key_value_heads must be an integer"),
    ],
)
def test_unsupported_config_is_rejected(tmp_path: Path, change: dict, error: str) -> None:
    # None removes a key (except model_type, where null itself is the malformed value under test).
    config = {key: value for key, value in (QWEN2_CONFIG | change).items() if value is not None or key == "model_type"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=error):
        load_hf_folder(tmp_path)


def test_missing_files_are_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_CONFIG))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf_folder(tmp_path)


def test_missing_or_misshapen_tensors_are_reported(gguf_model: LoadedModel, tmp_path: Path) -> None:
    _write_qwen2_folder(tmp_path, gguf_model.tokenizer)
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_CONFIG | {"num_hidden_layers": 3}))
    with pytest.raises(ValueError, match=r"missing \['layers\.2\."):
        load_hf_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_CONFIG | {"intermediate_size": 128}))
    with pytest.raises(ValueError, match="shapes do not match"):
        load_hf_folder(tmp_path)
