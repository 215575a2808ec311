"""Read and write Hugging Face model folders (config.json + safetensors + tokenizer.json) of the Llama family: Llama
(Llama 3.x's scaled RoPE included), Mistral without its window, Qwen2, Qwen3 and SmolLM3."""

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from oxygen_ros.layers.rotary import RopeScaling
from oxygen_ros.models.args import LlamaArgs, checked_count, config_count_bound
from oxygen_ros.models.loaded import LoadedModel, check_state_dict
from oxygen_ros.models.tokenizer import Tokenizer

# Same decoder as ours: RMSNorm, RoPE, GQA, SwiGLU. Qwen2 differs only by q/k/v biases; Mistral only by its window;
# Qwen3 by an RMSNorm over each head of q and k; SmolLM3 by layers without RoPE.
_SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2", "qwen3", "smollm3"}
_SCALED_ROPE = {"llama3", "linear"}
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                  "smollm3": "SmolLM3ForCausalLM"}  # fmt: skip
_REQUIRED_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_COUNTS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim")  # fmt: skip


def _rope(config: dict, source: Path) -> tuple[float, RopeScaling | None]:
    """(theta, scaling) from `rope_parameters` (transformers >= 5) or `rope_theta` and `rope_scaling` (older);
    ValueError naming the RoPE type or field we do not run."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", config.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError(f"{source}: partial_rotary_factor below 1 is not implemented")
    if rope_type == "default":
        return theta, None
    if rope_type not in _SCALED_ROPE:
        raise ValueError(f"{source}: unsupported RoPE scaling {rope_type!r}; implemented: unscaled, "
                         f"{', '.join(sorted(_SCALED_ROPE))}")  # fmt: skip
    try:
        factor = float(params["factor"])
        if rope_type == "linear":
            scaling = RopeScaling("linear", factor)
        else:
            original = params.get("original_max_position_embeddings", config.get("max_position_embeddings"))
            scaling = RopeScaling("llama3", factor, float(params["low_freq_factor"]),
                                  float(params["high_freq_factor"]), int(original))  # fmt: skip
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{source}: rope_scaling of type {rope_type!r} lacks or misstates {exc}") from exc
    numbers = (scaling.factor, scaling.low_freq_factor, scaling.high_freq_factor, scaling.original_max_position_embeddings)
    if not all(math.isfinite(x) and x > 0 for x in numbers) or scaling.high_freq_factor <= scaling.low_freq_factor:
        raise ValueError(f"{source}: rope_scaling {rope_type} needs finite positive factors (high_freq_factor > "
                         f"low_freq_factor), got {scaling}")  # fmt: skip
    return theta, scaling


def _no_rope_layers(config: dict, source: Path) -> tuple[int, ...]:
    """SmolLM3's per-layer RoPE switches (1 = RoPE, 0 = none); () for every other family."""
    if config.get("model_type") != "smollm3":
        return ()
    layers = config.get("no_rope_layers")
    if layers is None:  # transformers derives them from the interval: every interval-th layer has no RoPE
        interval = config.get("no_rope_layer_interval", 4)
        if not isinstance(interval, int) or interval < 1:
            raise ValueError(f"{source}: no_rope_layer_interval must be a positive integer, got {interval!r}")
        layers = [int((i + 1) % interval != 0) for i in range(config["num_hidden_layers"])]
    if len(layers) != config["num_hidden_layers"] or not set(layers) <= {0, 1}:
        raise ValueError(f"{source}: no_rope_layers must be one 0 or 1 per layer, got {layers}")
    return tuple(int(x) for x in layers)


def _sliding_window_active(config: dict) -> bool:
    """Qwen2 configs carry a `sliding_window` that is off unless `use_sliding_window` (and then only above
    `max_window_layers`); Mistral's applies whenever it is set."""
    if "sliding_attention" in (config.get("layer_types") or []):
        return True
    if config.get("sliding_window") is None or not config.get("use_sliding_window", True):
        return False
    return config.get("max_window_layers", 0) < config["num_hidden_layers"]


def read_llama_args(config: dict, source: Path) -> LlamaArgs:
    """A Llama-family config.json (or an Idefics3 text_config) -> LlamaArgs; ValueError for what we do not run."""
    model_type = config.get("model_type")
    if model_type not in _SUPPORTED_MODEL_TYPES:
        supported = sorted(_SUPPORTED_MODEL_TYPES)
        raise ValueError(f"{source}: unsupported model_type {model_type!r}, expected one of {supported}")
    missing = [key for key in _REQUIRED_KEYS if key not in config]
    if missing:
        raise ValueError(f"{source}: config.json lacks {missing}")
    for key in _COUNTS:
        if config.get(key) is not None:  # (num_key_value_heads and head_dim may be null: derived)
            checked_count(source, key, config[key], config_count_bound(key))
    rope_theta, rope_scaling = _rope(config, source)
    if _sliding_window_active(config):
        raise ValueError(f"{source}: sliding-window attention is not implemented")
    if config.get("hidden_act", "silu") != "silu" or config.get("mlp_bias", False):
        raise ValueError(f"{source}: only a bias-free SiLU-gated MLP is implemented")
    if model_type != "qwen2" and config.get("attention_bias", False):
        raise ValueError(f"{source}: {model_type} attention_bias also biases o_proj, which is not implemented")
    heads = config["num_attention_heads"]
    return LlamaArgs(
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        head_dim=config.get("head_dim") or config["hidden_size"] // heads,
        rope_theta=rope_theta,
        rms_norm_eps=config.get("rms_norm_eps", 1e-6),
        max_position_embeddings=config.get("max_position_embeddings", 8192),
        tie_word_embeddings=config.get("tie_word_embeddings", False),
        attention_bias=model_type == "qwen2",
        family="llama" if model_type == "mistral" else model_type,
        rope_scaling=rope_scaling,
        qk_norm=model_type == "qwen3",
        no_rope_layers=_no_rope_layers(config, source),
    )


def read_tensors(folder: Path, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """All tensors of a single-file or sharded checkpoint, in ``dtype`` under our names (no `model.` prefix): each is
    cast as it is read, so a bf16 model never holds an fp32 copy of its weights."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise FileNotFoundError(f"{folder} has neither model.safetensors nor model.safetensors.index.json")
    tensors = {}
    for file in files:
        for name, tensor in load_file(folder / file).items():
            if name.endswith("rotary_emb.inv_freq"):  # a buffer older Llama checkpoints saved; RoPE recomputes it
                continue
            tensors[name.removeprefix("model.")] = tensor.to(dtype)
    return tensors


def load_hf_folder(path: str | Path, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load a Llama / Qwen2 / Mistral HF folder, weights in ``dtype``, rejecting configs whose attention or RoPE we do
    not implement."""
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: not a Hugging Face model folder")
    args = read_llama_args(json.loads((folder / "config.json").read_text()), folder)
    state_dict = read_tensors(folder, dtype)
    if args.tie_word_embeddings:
        state_dict.pop("lm_head.weight", None)  # some exporters save the tied copy too
    check_state_dict(state_dict, args, str(folder))
    tokenizer = Tokenizer.from_hf_folder(folder)
    return LoadedModel(args=args, state_dict=state_dict, tokenizer=tokenizer, name=folder.resolve().name)


def _config(loaded: LoadedModel) -> dict:
    """A config transformers builds the same network from, of the family it was read as."""
    args, tokenizer = loaded.args, loaded.tokenizer
    model_type = "qwen2" if args.attention_bias else args.family
    eos = tokenizer.eos_token_ids
    if args.rope_scaling is not None and args.rope_scaling.rope_type == "freq_factors":
        raise ValueError("a GGUF's rope_freqs factors have no transformers rope_scaling to be written as")
    scaling = None if args.rope_scaling is None else {
        "rope_type": args.rope_scaling.rope_type, "factor": args.rope_scaling.factor,
        "low_freq_factor": args.rope_scaling.low_freq_factor, "high_freq_factor": args.rope_scaling.high_freq_factor,
        "original_max_position_embeddings": args.rope_scaling.original_max_position_embeddings,
    }  # fmt: skip
    return {
        "architectures": [_ARCHITECTURES[model_type]],
        "model_type": model_type,
        "torch_dtype": "float32",
        "vocab_size": args.vocab_size,
        "hidden_size": args.hidden_size,
        "intermediate_size": args.intermediate_size,
        "num_hidden_layers": args.num_layers,
        "num_attention_heads": args.num_heads,
        "num_key_value_heads": args.num_kv_heads,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "rope_theta": args.rope_theta,
        "rope_scaling": scaling,
        **({"no_rope_layers": list(args.no_rope_layers)} if args.no_rope_layers else {}),
        "rms_norm_eps": args.rms_norm_eps,
        "max_position_embeddings": args.max_position_embeddings,
        "tie_word_embeddings": args.tie_word_embeddings,
        "attention_bias": args.attention_bias,
        "mlp_bias": False,
        "use_sliding_window": False,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "pad_token_id": tokenizer.pad_token_id,
    }


def save_hf_folder(loaded: LoadedModel, path: str | Path) -> None:
    """Write config.json, model.safetensors (HF names) and tokenizer files that both we and transformers load."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(_config(loaded), indent=2) + "\n")
    tensors = {
        name if name == "lm_head.weight" else f"model.{name}": tensor.contiguous()
        for name, tensor in loaded.state_dict.items()
    }
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    loaded.tokenizer.save_hf(folder)
