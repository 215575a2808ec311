"""An Idefics3 / SmolVLM folder (config.json, model.safetensors, tokenizer.json, chat template, processor config)
-> an ``Idefics3Model`` with its tokenizer, or a ValueError / FileNotFoundError naming the file and field."""

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch

from oxygen_ros.models.hf_loader import read_tensors
from oxygen_ros.models.idefics3.config import Idefics3Config, read_idefics3_config
from oxygen_ros.models.idefics3.model import Idefics3Model
from oxygen_ros.models.idefics3.prompt import FAKE, IMAGE
from oxygen_ros.models.loaded import check_tensors
from oxygen_ros.models.tokenizer import Tokenizer

_POSITION_KEY = "vision_model.embeddings.position_embedding.weight"


def full_tile_position_ids(side: int) -> torch.Tensor:
    """The position ids transformers' Idefics3VisionEmbeddings gives a tile with no padding: fractional patch
    coordinates bucketized against float32 boundaries.  Float rounding can make them differ from 0..side^2-1, so
    the loader gathers the position table by them once and our SigLIP can add its rows in order."""
    boundaries = torch.arange(1 / side, 1.0, 1 / side)
    coords = torch.arange(side, dtype=torch.float32) * (1.0 / torch.tensor(side))
    buckets = torch.bucketize(torch.clamp(coords, max=1.0 - 1e-6), boundaries, right=True)
    return (buckets[:, None] * side + buckets[None, :]).flatten()


def _chat_template(folder: Path, tokenizer: Tokenizer) -> Tokenizer:
    """Hub SmolVLM folders keep the template in chat_template.json (the processor's), not with the tokenizer."""
    path = folder / "chat_template.json"
    if tokenizer.chat_template is not None or not path.is_file():
        return tokenizer
    template = json.loads(path.read_text()).get("chat_template")
    specials = tokenizer.special_tokens
    return Tokenizer(tokenizer.backend, template, specials["bos_token"], specials["eos_token"], specials["pad_token"],
                     specials["unk_token"])  # fmt: skip


def _tokenizer(folder: Path, cfg: Idefics3Config) -> Tokenizer:
    tokenizer = _chat_template(folder, Tokenizer.from_hf_folder(folder))
    if tokenizer.chat_template is None:
        raise FileNotFoundError(f"{folder} has no chat template (chat_template.jinja, chat_template.json or in "
                                "tokenizer_config.json)")  # fmt: skip
    ids = {token: tokenizer.backend.token_to_id(token) for token in (IMAGE, FAKE)}
    missing = [token for token, token_id in ids.items() if token_id is None]
    if missing:
        raise ValueError(f"{folder / 'tokenizer.json'}: the image tokens {missing} are not in the vocabulary")
    if ids[IMAGE] != cfg.image_token_id:
        raise ValueError(f"{folder / 'config.json'}: field 'image_token_id' {cfg.image_token_id} is not the id "
                         f"{ids[IMAGE]} of {IMAGE} in tokenizer.json")  # fmt: skip
    if tokenizer.vocab_size > cfg.text.vocab_size:
        raise ValueError(f"{folder / 'tokenizer.json'}: {tokenizer.vocab_size} tokens, more than config.json "
                         f"text_config.vocab_size {cfg.text.vocab_size}")  # fmt: skip
    return tokenizer


def _state_dict(folder: Path, cfg: Idefics3Config) -> dict[str, torch.Tensor]:
    """The checkpoint under our module names; the position table put in the order our SigLIP adds it."""
    tensors = {("text_model." + name if name == "lm_head.weight" else name): t for name, t in read_tensors(folder).items()}
    if _POSITION_KEY in tensors:
        positions = full_tile_position_ids(cfg.vision.image_size // cfg.vision.patch_size)
        if positions.max() < tensors[_POSITION_KEY].shape[0]:
            tensors[_POSITION_KEY] = tensors[_POSITION_KEY][positions]
    return tensors


def load_idefics3_folder(folder: Path) -> tuple[Idefics3Model, Tokenizer, str]:
    """(fp32 model on the CPU, tokenizer, model id).  The id folds in a digest of the config and processor files,
    so KV computed under other image settings is never reused."""
    cfg = read_idefics3_config(folder)
    tensors = _state_dict(folder, cfg)
    tied = "text_model.lm_head.weight" not in tensors  # a tied head stores only the embedding
    cfg = replace(cfg, text=replace(cfg.text, tie_word_embeddings=tied))
    tokenizer = _tokenizer(folder, cfg)
    model = Idefics3Model(cfg)
    expected = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    check_tensors(tensors, expected, str(folder / "model.safetensors"), "config.json")
    model.load_state_dict(tensors, strict=True)
    digest = hashlib.sha256()
    for name in ("config.json", "preprocessor_config.json", "processor_config.json"):
        if (folder / name).is_file():
            digest.update((folder / name).read_bytes())
    return model.eval(), tokenizer, f"{folder.resolve().name}@{digest.hexdigest()[:12]}"
