"""pi0 tensor names in the layouts checkpoints use -> our module names (``image_encoder.*``, ``backbone.*``,
``expert.*``), and the two tensors pi0 stores but does not compute with.

Layouts read:

* LeRobot / openpi (``lerobot/pi0_base``, and what transformers 5's ``save_pretrained`` writes for PI0):
  ``paligemma_with_expert.paligemma.model.{vision_tower[.vision_model], multi_modal_projector,
  language_model[.model]}``, ``paligemma_with_expert.paligemma.lm_head``, ``paligemma_with_expert.gemma_expert.*``,
  ``state_proj``, ``action_in_proj``, ``action_out_proj``, ``action_time_mlp_{in,out}``; with or without a leading
  ``model.`` (LeRobot's policy wrapper).
* transformers' module names (a state dict of ``PI0ForConditionalGeneration``): ``model.vlm.*``, ``model.dit.*``,
  ``embed_action_time.*``, ``action_out_proj``.

Names arrive without their leading ``model.`` (``hf_loader.read_tensors`` strips it, which also removes LeRobot's
policy wrapper).  Names we do not know are kept, so the loader reports them as unexpected under the file's name.
"""

import hashlib
from collections.abc import Callable
from pathlib import Path

import torch

from oxygen_ros.models.common.normalization import read_normalizer
from oxygen_ros.models.common.policy import LeRobotPolicy
from oxygen_ros.models.hf_loader import read_tensors
from oxygen_ros.models.loaded import check_tensors

TIED_HEAD = "backbone.lm_head.weight"  # PaliGemma's LM head: the token embedding itself (tied); hub files keep only it
EXPERT_VOCAB = "expert.embed_tokens.weight"  # the expert's vocabulary table: pi0 never embeds tokens with it

_EXPERT_HEADS = ("state_proj.", "action_in_proj.", "action_out_proj.", "action_time_mlp_in.", "action_time_mlp_out.")
_PALIGEMMA = "paligemma_with_expert.paligemma."
_RENAMES = (  # first match wins: the longer LeRobot prefixes come before the ones they extend
    (_PALIGEMMA + "model.vision_tower.vision_model.", "image_encoder.vision_model."),
    (_PALIGEMMA + "model.vision_tower.", "image_encoder.vision_model."),
    (_PALIGEMMA + "model.multi_modal_projector.linear.", "image_encoder.projector."),
    (_PALIGEMMA + "model.language_model.model.", "backbone."),
    (_PALIGEMMA + "model.language_model.", "backbone."),
    (_PALIGEMMA + "lm_head.", "backbone.lm_head."),
    ("paligemma_with_expert.gemma_expert.model.", "expert."),
    ("paligemma_with_expert.gemma_expert.lm_head.", "expert.embed_tokens."),
    ("vlm.vision_tower.", "image_encoder.vision_model."),
    ("vlm.multi_modal_projector.linear.", "image_encoder.projector."),
    ("vlm.language_model.", "backbone."),
    ("dit.", "expert."),
    ("embed_action_time.", "expert."),
    *((head, "expert." + head) for head in _EXPERT_HEADS),
)


def our_name(name: str) -> str:
    """One checkpoint tensor name (leading ``model.`` removed) -> our module name (unknown names unchanged)."""
    for old, new in _RENAMES:
        if name.startswith(old):
            return new + name[len(old) :]
    return name


def rename_tensors(
    tensors: dict[str, torch.Tensor], source: str, rename: Callable[[str], str] = our_name
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(tensors under our names by ``rename``, our name -> the file's name); ValueError when two file tensors are
    one of ours (e.g. a file mixing layouts)."""
    renamed: dict[str, torch.Tensor] = {}
    origin: dict[str, str] = {}
    for name, tensor in tensors.items():
        ours = rename(name)
        if ours in origin:
            raise ValueError(f"{source}: tensors {origin[ours]!r} and {name!r} are both {ours}")
        renamed[ours], origin[ours] = tensor, name
    return renamed, origin


def untie(tensors: dict[str, torch.Tensor], origin: dict[str, str], vocab_shape: tuple[int, ...], source: str) -> None:
    """In place: the tied LM head becomes the token embedding when the file has only the head (LeRobot's hub
    files); the expert's vocabulary table is dropped.  ValueError when a head differs from the embedding it should
    equal, or the dropped table does not have its config shape [vocab, expert width]."""
    head = tensors.pop(TIED_HEAD, None)
    if head is not None:
        embed = tensors.setdefault("backbone.embed_tokens.weight", head)
        if embed is not head and (embed.shape != head.shape or not torch.equal(embed, head)):
            raise ValueError(f"{source}: {origin[TIED_HEAD]!r} differs from {origin['backbone.embed_tokens.weight']!r}"
                             ": pi0 ties its LM head to the token embedding")  # fmt: skip
    table = tensors.pop(EXPERT_VOCAB, None)
    if table is not None and tuple(table.shape) != vocab_shape:
        raise ValueError(f"{source}: tensor shapes do not match config.json: {origin[EXPERT_VOCAB]} "
                         f"{tuple(table.shape)} != {vocab_shape}")  # fmt: skip


def load_weights(folder: Path, model: LeRobotPolicy, rename: Callable[[str], str] = our_name) -> str:
    """The folder's model.safetensors into ``model`` (names mapped by ``rename``, the tied head untied), checked
    against the model's shapes first, and LeRobot's normalization stats when the folder has them
    (``common/normalization.py``); returns the model id.  The id folds in a digest of config.json, so KV of
    another checkpoint with the same folder name is never reused."""
    cfg = model.config
    model.set_normalizer(read_normalizer(folder))  # before the weights: a bad stats file is refused at once
    source = str(folder / "model.safetensors")
    tensors, origin = rename_tensors(read_tensors(folder), source, rename)
    untie(tensors, origin, (cfg.vocab_size, cfg.expert.hidden_size), source)
    expected = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    check_tensors(tensors, expected, source, "config.json", origin)
    model.load_state_dict(tensors, strict=True)
    model.eval()
    digest = hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:12]
    return f"{folder.resolve().name}@{digest}"
