"""Model names the config may use, and how each is built."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.layers.packed_linear import can_pack
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.loaded import LoadedModel
from oxygen_ros.models.tokenizer import Tokenizer

LANGUAGE_MODELS = ("smollm2-135m",)
VLA_MODELS = ("pi05-tiny", "pi05-full")  # random-init pi0.5 shapes; no pi0.5 weights can be had offline


@dataclass
class ModelBundle:
    """A model ready to run over the pool, with what the engine needs to know about it."""

    model: torch.nn.Module
    tokenizer: Tokenizer
    model_id: str  # goes into every prefix-cache key
    num_layers: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    vla: bool = False  # has an action expert: images in, action chunks out (a Pi05Model or Pi0Model)
    vision: bool = False  # a vision-language model: images in the prompt, text out (an Idefics3Model)


def known_models() -> list[str]:
    return [*LANGUAGE_MODELS, *VLA_MODELS]


def load_model(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0) -> ModelBundle:
    """Build ``name`` (a registered name or a Hugging Face folder) on ``device``; EngineError if it cannot."""
    if name in VLA_MODELS:
        return _load_vla(name, device, dtype, seed)
    path = Path(name).expanduser()
    if (path / "config.json").is_file() and _is_idefics3(path):
        return _load_idefics3(path, device, dtype)
    if (path / "config.json").is_file() and _is_pi0(path):
        return _load_pi0(path, device, dtype)
    loaded = _read(name)
    model = LlamaModel(loaded.args)
    model.load_state_dict(loaded.state_dict, strict=True)
    return _ready(model, loaded.tokenizer, loaded.name, loaded.args, device, dtype)


def _load_vla(name: str, device: torch.device, dtype: torch.dtype, seed: int) -> ModelBundle:
    """pi0.5-shaped VLA with seeded random weights; text goes through the SmolLM2 tokenizer (same vocabulary size)."""
    from gguf import GGUFReader

    from oxygen_ros.models.gguf_loader import smollm2_gguf_path
    from oxygen_ros.models.pi05 import build_pi05

    try:
        tokenizer = Tokenizer.from_gguf_metadata(GGUFReader(smollm2_gguf_path()))
    except FileNotFoundError as exc:
        raise EngineError(ErrorCode.NOT_FOUND, str(exc)) from exc
    model = build_pi05(name, device, dtype, seed)
    cfg = model.config
    return ModelBundle(
        model=model,
        tokenizer=tokenizer,
        model_id=f"{name}@seed{seed}",
        num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=8192,  # Gemma's context
        vla=True,
    )


def _is_idefics3(folder: Path) -> bool:
    from oxygen_ros.models.idefics3.config import is_idefics3_config

    return _config_is(folder, is_idefics3_config)


def _is_pi0(folder: Path) -> bool:
    from oxygen_ros.models.pi0 import is_pi0_config

    return _config_is(folder, is_pi0_config)


def _config_is(folder: Path, test: Callable[[dict], bool]) -> bool:
    try:
        return test(json.loads((folder / "config.json").read_text()))
    except (json.JSONDecodeError, AttributeError):
        return False  # the text loader reports the broken file


def _load_pi0(folder: Path, device: torch.device, dtype: torch.dtype) -> ModelBundle:
    """A pi0 folder (transformers' or LeRobot's layout) with PaliGemma's tokenizer beside it, checked first so a
    folder without one is refused before gigabytes of weights are read."""
    from oxygen_ros.models.pi0 import load_pi0_folder, load_pi0_tokenizer, read_pi0_config

    try:
        tokenizer = load_pi0_tokenizer(folder, read_pi0_config(folder).vocab_size)
        model, model_id = load_pi0_folder(folder)
    except (ValueError, FileNotFoundError) as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {folder}: {exc}") from exc
    cfg = model.config
    return ModelBundle(
        model=model.to(device=device, dtype=dtype).eval(), tokenizer=tokenizer, model_id=model_id,
        num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
        max_position_embeddings=8192, vla=True,  # Gemma's context
    )  # fmt: skip


def _load_idefics3(folder: Path, device: torch.device, dtype: torch.dtype) -> ModelBundle:
    """A SmolVLM / Idefics3 folder: vision encoder, connector and Llama decoder, fp32 weights cast to ``dtype``."""
    from oxygen_ros.models.idefics3.loader import load_idefics3_folder

    try:
        model, tokenizer, model_id = load_idefics3_folder(folder)
    except (ValueError, FileNotFoundError) as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {folder}: {exc}") from exc
    return _ready(model, tokenizer, model_id, model.args, device, dtype, vision=True)


def _ready(model: torch.nn.Module, tokenizer: Tokenizer, model_id: str, args: LlamaArgs, device: torch.device,
           dtype: torch.dtype, vision: bool = False) -> ModelBundle:  # fmt: skip
    """A loaded Llama-decoder model on ``device`` in ``dtype``, its weights prepacked where this CPU reads that faster,
    with what the engine needs to know about it."""
    model.to(device=device, dtype=dtype).eval()
    if can_pack(device, dtype):
        model.pack_weights()
    return ModelBundle(
        model=model, tokenizer=tokenizer, model_id=model_id, num_layers=args.num_layers,
        num_kv_heads=args.num_kv_heads, head_dim=args.head_dim, max_position_embeddings=args.max_position_embeddings,
        vision=vision,
    )  # fmt: skip


def _read(name: str) -> LoadedModel:
    if name == "smollm2-135m":
        from oxygen_ros.models.gguf_loader import load_gguf, smollm2_gguf_path

        try:
            return load_gguf(smollm2_gguf_path())
        except FileNotFoundError as exc:
            raise EngineError(ErrorCode.NOT_FOUND, str(exc)) from exc
    path = Path(name).expanduser()
    if path.is_dir():
        from oxygen_ros.models.hf_loader import load_hf_folder

        try:
            return load_hf_folder(path)
        except (ValueError, FileNotFoundError) as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {path}: {exc}") from exc
    raise EngineError(
        ErrorCode.NOT_FOUND, f"unknown model {name!r}: use one of {known_models()} or a Hugging Face model folder"
    )
