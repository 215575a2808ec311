"""Model names the config may use, and how each is built."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels.cpu_matvec import Q4_1, Q4_1_GROUP, matvec_kernel, weight_format_name
from oxygen_ros.layers.packed_linear import can_pack, can_pack_bf16
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.llama import LlamaModel
from oxygen_ros.models.loaded import LoadedModel
from oxygen_ros.models.tokenizer import Tokenizer

LANGUAGE_MODELS = ("smollm2-135m",)
# Random-weight VLAs (no pi0.5 weights can be had offline), for tests and benchmarks (models/pi05).  pi05-random-*:
# pi0.5 as it runs (the whole prefix bidirectional, state as text).  pi05-causal-*: the approximation whose prompt is
# causal after bidirectional images, so image blocks are shared across prompts.
RANDOM_VLA_MODELS = ("pi05-random-tiny", "pi05-random-full")
CAUSAL_VLA_MODELS = ("pi05-causal-tiny", "pi05-causal-full")
VLA_MODELS = (*RANDOM_VLA_MODELS, *CAUSAL_VLA_MODELS)  # every random-weight VLA name
RENAMED = {"pi05-tiny": "pi05-causal-tiny", "pi05-full": "pi05-causal-full"}  # refused, naming the new name


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
    vla: bool = False  # has an action expert: images in, action chunks out (a LeRobotPolicy: pi0 or pi0.5)
    vision: bool = False  # a vision-language model: images in the prompt, text out (an Idefics3Model)
    num_heads: int = 0  # query heads (0: not known, a hand-made bundle; the startup probe then asks two per kv-head)


def known_models() -> list[str]:
    return [*LANGUAGE_MODELS, *VLA_MODELS]


def load_model(name: str, device: torch.device, dtype: torch.dtype, seed: int = 0,
               weight_dtype: torch.dtype | None = None) -> ModelBundle:  # fmt: skip
    """Build ``name`` (a registered name or a Hugging Face folder) on ``device``; EngineError if it cannot.
    ``weight_dtype``: the layers' projections' stored format when it is not ``dtype`` (bf16, int8 or Q4_1 under fp32
    compute, CPU only)."""
    if weight_dtype not in (None, dtype):
        _check_weight_dtype(name, device, dtype, weight_dtype)
    if name in RENAMED:
        raise EngineError(ErrorCode.NOT_FOUND, f"model {name!r} is now {RENAMED[name]!r} (pi0.5's shapes with the "
                          "prompt causal after the images: an approximation); pi0.5 itself at random weights is "
                          f"{name.replace('pi05-', 'pi05-random-')!r}")  # fmt: skip
    if name in VLA_MODELS:
        return _load_vla(name, device, dtype, seed)
    path = Path(name).expanduser()
    if (path / "config.json").is_file() and _is_idefics3(path):
        return _load_idefics3(path, device, dtype, weight_dtype)
    if (path / "config.json").is_file() and (_is_pi0(path) or _is_pi05(path)):
        return _load_policy(path, device, dtype)
    loaded = _read(name, dtype)
    _check_block_widths(loaded.args, loaded.name, weight_dtype)
    with torch.device("meta"):  # no weights allocated here: the ones read (already in dtype) are assigned
        model = LlamaModel(loaded.args)
    model.load_state_dict(loaded.state_dict, strict=True, assign=True)
    return _ready(model, loaded.tokenizer, loaded.name, loaded.args, device, dtype, weight_dtype)


def _check_weight_dtype(name: str, device: torch.device, dtype: torch.dtype, weight_dtype: torch.dtype) -> None:
    """A stored weight format apart from the compute dtype exists for language models (or a VLM's decoder) under fp32
    compute on a CPU: bf16 projections through oneDNN's packed products, int8 ones (a scale per 32 weights) and Q4_1
    blocks through the C products."""
    path = Path(name).expanduser()
    if name in VLA_MODELS or ((path / "config.json").is_file() and (_is_pi0(path) or _is_pi05(path))):
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"weight_dtype applies to language models and VLM decoders, "
                          f"not to the action model {name!r}: leave it auto")  # fmt: skip
    if weight_dtype not in (torch.bfloat16, torch.int8, Q4_1) or dtype != torch.float32:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"weight_dtype {weight_format_name(weight_dtype)} with dtype "
                          f"{dtype}: the mixed formats are bfloat16, int8 or q4_1 weights under float32 compute")  # fmt: skip
    if weight_dtype == torch.bfloat16 and not can_pack_bf16(device):
        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"weight_dtype bfloat16 under float32 compute runs on a CPU "
                          f"whose oneDNN computes bf16 products (AVX-512); not on {device} here")  # fmt: skip
    if weight_dtype in (torch.int8, Q4_1) and (not can_pack(device, torch.float32) or matvec_kernel() is None):
        raise EngineError(ErrorCode.FAILED_PRECONDITION, f"weight_dtype {weight_format_name(weight_dtype)} runs on a CPU "
                          f"with the C kernels built "
                          f"(AVX-512, AVX2 or NEON and a C compiler, cpu_kernels on) and oneDNN; not on {device} here")  # fmt: skip


def _check_block_widths(args: LlamaArgs, model_id: str, weight_dtype: torch.dtype | None) -> None:
    """Q4_1 rows hold whole blocks of 32 weights: every projection's input width must be a multiple of 32."""
    if weight_dtype == Q4_1 and (uneven := {w for w in args.projection_inputs() if w % Q4_1_GROUP}):
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"weight_dtype q4_1 needs projection inputs in multiples of "
                          f"{Q4_1_GROUP} weights (GGUF blocks); {model_id} has widths {sorted(uneven)}")  # fmt: skip


def _load_vla(name: str, device: torch.device, dtype: torch.dtype, seed: int) -> ModelBundle:
    """A random-weight VLA (``VLA_MODELS``), seeded; text goes through the SmolLM2 tokenizer (same vocabulary size)."""
    from gguf import GGUFReader

    from oxygen_ros.models.gguf_loader import smollm2_gguf_path
    from oxygen_ros.models.pi05 import build_random_pi05

    try:
        tokenizer = Tokenizer.from_gguf_metadata(GGUFReader(smollm2_gguf_path()))
    except FileNotFoundError as exc:
        raise EngineError(ErrorCode.NOT_FOUND, str(exc)) from exc
    return vla_bundle(build_random_pi05(name, device, dtype, seed), tokenizer, f"{name}@seed{seed}", device, dtype)


def vla_bundle(model: torch.nn.Module, tokenizer: Tokenizer, model_id: str, device: torch.device,
               dtype: torch.dtype) -> ModelBundle:  # fmt: skip
    """A LeRobotPolicy (pi0 or pi0.5) on ``device`` in ``dtype`` as the engine serves it, its Gemma layers prepacked
    where this CPU reads that faster (the same packed projections as a language model's)."""
    cfg = model.config
    if can_pack(device, dtype):
        model.pack_weights()
    return ModelBundle(
        model=model.eval(), tokenizer=tokenizer, model_id=model_id, num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, max_position_embeddings=8192, vla=True,  # Gemma's context
        num_heads=cfg.num_heads,
    )  # fmt: skip


def _is_idefics3(folder: Path) -> bool:
    from oxygen_ros.models.idefics3.config import is_idefics3_config

    return _config_is(folder, is_idefics3_config)


def _is_pi0(folder: Path) -> bool:
    from oxygen_ros.models.pi0 import is_pi0_config

    return _config_is(folder, is_pi0_config)


def _is_pi05(folder: Path) -> bool:
    from oxygen_ros.models.pi05 import is_pi05_config

    return _config_is(folder, is_pi05_config)


def _config_is(folder: Path, test: Callable[[dict], bool]) -> bool:
    try:
        return test(json.loads((folder / "config.json").read_text()))
    except (json.JSONDecodeError, AttributeError):
        return False  # the text loader reports the broken file


def _load_policy(folder: Path, device: torch.device, dtype: torch.dtype) -> ModelBundle:
    """A pi0 folder (transformers' or LeRobot's layout) or a LeRobot pi0.5 one, with PaliGemma's tokenizer beside it
    (checked first, so a folder without one is refused before gigabytes of weights are read) and the processors'
    normalization stats when present."""
    from oxygen_ros.models.common.paligemma_tokenizer import load_paligemma_tokenizer
    from oxygen_ros.models.pi0 import load_pi0_folder, read_pi0_config
    from oxygen_ros.models.pi05 import load_pi05_folder, read_pi05_config

    read, load = (read_pi05_config, load_pi05_folder) if _is_pi05(folder) else (read_pi0_config, load_pi0_folder)
    try:
        config = read(folder)
        tokenizer = load_paligemma_tokenizer(folder, config.vocab_size)
        model, model_id = load(folder, config)
    except (ValueError, FileNotFoundError) as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {folder}: {exc}") from exc
    return vla_bundle(model.to(device=device, dtype=dtype), tokenizer, model_id, device, dtype)


def _load_idefics3(folder: Path, device: torch.device, dtype: torch.dtype,
                   weight_dtype: torch.dtype | None) -> ModelBundle:  # fmt: skip
    """A SmolVLM / Idefics3 folder: vision encoder, connector and Llama decoder, fp32 weights cast to ``dtype``."""
    from oxygen_ros.models.idefics3.loader import load_idefics3_folder

    try:
        model, tokenizer, model_id = load_idefics3_folder(folder)
    except (ValueError, FileNotFoundError) as exc:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {folder}: {exc}") from exc
    _check_block_widths(model.args, model_id, weight_dtype)  # its decoder's widths are known once it is read
    return _ready(model, tokenizer, model_id, model.args, device, dtype, weight_dtype, vision=True)


def _ready(model: torch.nn.Module, tokenizer: Tokenizer, model_id: str, args: LlamaArgs, device: torch.device,
           dtype: torch.dtype, weight_dtype: torch.dtype | None, vision: bool = False) -> ModelBundle:  # fmt: skip
    """A loaded Llama-decoder model on ``device`` in ``dtype``, its weights prepacked (as ``weight_dtype`` when given)
    where this CPU reads that faster, with what the engine needs to know about it (its widths already checked for
    ``weight_dtype``: ``_check_block_widths``)."""
    model.to(device=device, dtype=dtype).eval()
    if can_pack(device, dtype):
        model.pack_weights(None if weight_dtype == dtype else weight_dtype)
    return ModelBundle(
        model=model, tokenizer=tokenizer, model_id=model_id, num_layers=args.num_layers,
        num_kv_heads=args.num_kv_heads, head_dim=args.head_dim, max_position_embeddings=args.max_position_embeddings,
        vision=vision, num_heads=args.num_heads,
    )  # fmt: skip


def _read(name: str, dtype: torch.dtype) -> LoadedModel:
    if name == "smollm2-135m":
        from oxygen_ros.models.gguf_loader import load_gguf, smollm2_gguf_path

        try:
            return load_gguf(smollm2_gguf_path(), dtype)
        except FileNotFoundError as exc:
            raise EngineError(ErrorCode.NOT_FOUND, str(exc)) from exc
    path = Path(name).expanduser()
    if path.suffix == ".gguf":
        from oxygen_ros.models.gguf_loader import load_gguf

        if not path.is_file():
            raise EngineError(ErrorCode.NOT_FOUND, f"model file {path} does not exist")
        try:
            return load_gguf(path, dtype)
        except (ValueError, KeyError, IndexError) as exc:  # IndexError: a special token id past the vocabulary
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load GGUF file {path}: {exc}") from exc
    if path.is_dir():
        from oxygen_ros.models.hf_loader import load_hf_folder

        try:
            return load_hf_folder(path, dtype)
        except (ValueError, FileNotFoundError) as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot load model folder {path}: {exc}") from exc
    raise EngineError(
        ErrorCode.NOT_FOUND, f"unknown model {name!r}: use one of {known_models()}, a Hugging Face model folder or a .gguf file"
    )
