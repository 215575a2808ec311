"""Tiny pi0.5 checkpoints in LeRobot's layout, built offline from stock transformers modules (PaliGemma, a Gemma
expert) and pi0.5's four linear heads, every weight random: what test_pi05_faithful checks piece by piece against
those modules and the engine tests serve.  ``TINY`` is their shape: LeRobot's config.json names only the full-size
variants (gemma_2b / gemma_300m), so a test that loads such a folder through the registry reads its shape from
here (see ``tiny_shapes``)."""

import contextlib
import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from pi0_folders import IMAGE_SIZE, PATCH, VOCAB, pixel_values, write_tokenizer
from safetensors.torch import save_file
from transformers import GemmaConfig as HFGemmaConfig
from transformers import GemmaForCausalLM, PaliGemmaConfig, PaliGemmaForConditionalGeneration

import oxygen_ros.models.pi05 as pi05
from oxygen_ros.control.arm.joint_limits import urdf_limits
from oxygen_ros.models.common.vla_config import GemmaConfig, SiglipConfig, VlaConfig
from oxygen_ros.share import PACKAGE, PREFIX
from oxygen_ros.simulation import SO100_JOINTS

EXPERT_WIDTH, CHUNK, STATE_DIM, ACTION_DIM = 48, 5, 6, 7
TINY = VlaConfig(
    vision=SiglipConfig(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=2, patch_size=PATCH,
                        image_size=IMAGE_SIZE),
    backbone=GemmaConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32),
    expert=GemmaConfig(hidden_size=EXPERT_WIDTH, intermediate_size=96, num_layers=2, num_heads=2, num_kv_heads=1,
                       head_dim=32),
    vocab_size=VOCAB, action_horizon=CHUNK, state_dim=STATE_DIM, action_dim=ACTION_DIM, num_denoise_steps=4,
    max_prompt_tokens=200,
)  # fmt: skip
CAMERA_NAMES = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")  # openpi's pi0.5 camera slots
BIN_TEXTS = [f"Task: x, State: {i} -{i};\nAction: " for i in range(256)]  # every state bin in the tokenizer
PALIGEMMA = "model.paligemma_with_expert.paligemma."
EXPERT = "model.paligemma_with_expert.gemma_expert."
SO100_URDF = (PREFIX / "share" / PACKAGE / "config" / "sim_arm.urdf").read_text()
_SO100_LIMITS = urdf_limits(SO100_URDF)
SO100_LOWER, SO100_UPPER, SO100_SPEED = (np.array([getattr(_SO100_LIMITS[j], field) for j in SO100_JOINTS])
                                         for field in ("lower", "upper", "velocity"))  # fmt: skip
SO100_MIDDLE = (SO100_LOWER + SO100_UPPER) / 2
SO100_JAW = np.array(SO100_JOINTS) == "gripper"
SO100_CENTRE = SO100_MIDDLE + np.where(SO100_JAW, 0.4, 0.0)  # where the actions are, rad: the jaw 0.4 off the middle
SO100_SPREAD = 0.02  # about it, rad


def hf_modules(seed: int, action_dim: int = ACTION_DIM) -> tuple[PaliGemmaForConditionalGeneration, GemmaForCausalLM,
                                                                  dict[str, torch.nn.Linear]]:  # fmt: skip
    """Stock PaliGemma, a stock Gemma expert and pi0.5's four linear heads (``action_dim`` wide), every weight random
    (std 0.2, norms and biases std 0.1) so each one moves the outputs."""
    text = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 32, "vocab_size": VOCAB, "hidden_activation": "gelu_pytorch_tanh"}
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64, "patch_size": PATCH,
              "image_size": IMAGE_SIZE, "num_hidden_layers": 2, "num_attention_heads": 2, "vision_use_head": False}
    expert = dict(text, hidden_size=EXPERT_WIDTH, intermediate_size=96)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        paligemma = PaliGemmaForConditionalGeneration(PaliGemmaConfig(
            text_config={"model_type": "gemma", **text}, vision_config=vision, image_token_id=VOCAB, projection_dim=64,
            attn_implementation="eager"))  # fmt: skip
        gemma = GemmaForCausalLM(HFGemmaConfig(**expert, attn_implementation="eager"))
        heads = {"action_in_proj": torch.nn.Linear(action_dim, EXPERT_WIDTH),
                 "action_out_proj": torch.nn.Linear(EXPERT_WIDTH, action_dim),
                 "time_mlp_in": torch.nn.Linear(EXPERT_WIDTH, EXPERT_WIDTH),
                 "time_mlp_out": torch.nn.Linear(EXPERT_WIDTH, EXPERT_WIDTH)}  # fmt: skip
        with torch.no_grad():
            for module in (paligemma, gemma, *heads.values()):
                for name, p in module.named_parameters():
                    p.normal_(std=0.1 if name.endswith("bias") or "norm" in name else 0.2)
    return paligemma.eval(), gemma.eval(), heads


def adarms_reduced(gemma: GemmaForCausalLM) -> dict[str, torch.Tensor]:
    """The stock expert's tensors under LeRobot's names, each RMSNorm weight w as adaRMS with dense weight 0 and a
    bias giving scale w / shift 0 / gate 1: exactly Gemma's norm (1 + w) and ungated residuals."""
    out = {}
    for name, tensor in gemma.state_dict().items():
        if name == "model.embed_tokens.weight":
            continue  # LeRobot sets the expert's embedding to None; its lm_head stays in the file
        if "norm.weight" in name:
            width = tensor.shape[0]
            base = EXPERT + name.removesuffix("weight")
            out[base + "dense.weight"] = torch.zeros(3 * width, width)
            out[base + "dense.bias"] = torch.cat([tensor, torch.zeros(width), torch.ones(width)])
        else:
            out[EXPERT + name] = tensor
    return out


def write_lerobot_folder(folder: Path, paligemma: PaliGemmaForConditionalGeneration, gemma: GemmaForCausalLM,
                         heads: dict[str, torch.nn.Linear], texts: list[str], **config: object) -> None:  # fmt: skip
    """model.safetensors under lerobot/pi05_base's names (``model.`` wrapper, lm_head kept and the embedding it is
    tied to dropped), a LeRobot config.json (``TINY``'s flow settings, three cameras, ``config`` on top) and a
    tokenizer trained on the pi0.5 prompts ``texts`` and every state bin."""
    tensors = {PALIGEMMA + n: t for n, t in paligemma.state_dict().items() if "embed_tokens" not in n}
    tensors |= adarms_reduced(gemma)
    tensors |= {f"model.{h}.{n}": t for h, lin in heads.items() for n, t in lin.state_dict().items()}
    save_file({n: t.detach().clone().contiguous() for n, t in tensors.items()}, folder / "model.safetensors")
    cameras = {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, 224, 224]} for c in CAMERA_NAMES}
    lerobot = {"type": "pi05", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
               "chunk_size": CHUNK, "max_state_dim": STATE_DIM, "max_action_dim": ACTION_DIM,
               "num_inference_steps": TINY.num_denoise_steps, "tokenizer_max_length": 200, "input_features": cameras}
    (folder / "config.json").write_text(json.dumps(lerobot | config))  # fmt: skip
    write_tokenizer(folder, texts + BIN_TEXTS)


def write_processor_files(folder: Path, mode: str, state: dict[str, list[float]], action: dict[str, list[float]],
                          relative: dict | None = None) -> None:  # fmt: skip
    """LeRobot's normalization files as ``PolicyProcessorPipeline.save_pretrained`` writes them for pi0.5
    (``lerobot/processor/pipeline.py``: ``<name>.json`` with each step's ``registry_name``, ``config`` and
    ``state_file`` = ``<name>_step_<i>_<registry_name>.safetensors`` of flat ``"<key>.<stat>"`` tensors), STATE and
    ACTION both in ``mode``; the step indices follow ``make_pi05_pre_post_processors`` (rename, batch, relative
    actions, normalizer; unnormalizer, absolute actions). ``relative``: the relative step's config
    (``exclude_joints``, ``action_names``), enabled with the absolute step; None: both left out."""
    features = {"observation.state": {"type": "STATE", "shape": [len(next(iter(state.values())))]},
                "action": {"type": "ACTION", "shape": [len(next(iter(action.values())))]}}
    norm_map = {"VISUAL": "IDENTITY", "STATE": mode, "ACTION": mode}
    filler = {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}}
    for name, registry, index, key, stats in (("policy_preprocessor", "normalizer_processor", 3, "observation.state",
                                               state), ("policy_postprocessor", "unnormalizer_processor", 0, "action",
                                                        action)):  # fmt: skip
        state_file = f"{name}_step_{index}_{registry}.safetensors"
        save_file({f"{key}.{stat}": torch.tensor(v, dtype=torch.float32) for stat, v in stats.items()}, folder / state_file)
        steps = [filler] * index + [
            {"registry_name": registry, "config": {"eps": 1e-8, "features": features, "norm_map": norm_map},
             "state_file": state_file}]  # fmt: skip
        if relative is not None and name == "policy_preprocessor":
            steps[2] = {"registry_name": "relative_actions_processor", "config": {"enabled": True, **relative}}
        elif relative is not None:
            steps.append({"registry_name": "absolute_actions_processor", "config": {"enabled": True}})
        (folder / f"{name}.json").write_text(json.dumps({"name": name, "steps": steps}, indent=2))


@torch.no_grad()
def hf_prefix(paligemma: PaliGemmaForConditionalGeneration, cams: list, prompt: list[int]):
    """One row through stock PaliGemma: [image tokens of the present cameras | prompt], a 4-D all-visible mask (the
    whole prefix bidirectional, as LeRobot's prefix mask is), positions from 0 as LeRobot counts them."""
    present = [c for c in cams if c is not None]
    ids = torch.tensor([[VOCAB] * (IMAGE_SIZE // PATCH) ** 2 * len(present) + prompt])
    n = ids.shape[1]
    return paligemma(input_ids=ids, pixel_values=torch.stack([pixel_values(c) for c in present]),
                     attention_mask=torch.zeros(1, 1, n, n), position_ids=torch.arange(n)[None], use_cache=True)  # fmt: skip


@torch.no_grad()
def hf_velocity(gemma: GemmaForCausalLM, heads: dict[str, torch.nn.Linear], cache, x_t: torch.Tensor) -> torch.Tensor:
    """The stock expert (adaRMS reduced: time does not enter) on a copy of a prefix cache of one row: the action
    tokens x_t [1, H, A] see the whole prefix and each other at positions after it, then ``action_out_proj``, as
    LeRobot's ``denoise_step`` computes it."""
    cache, n, horizon = copy.deepcopy(cache), cache.get_seq_length(), x_t.shape[1]
    out = gemma.model(inputs_embeds=heads["action_in_proj"](x_t), cache=cache,
                      attention_mask=torch.zeros(1, 1, horizon, n + horizon),
                      position_ids=torch.arange(n, n + horizon)[None], use_cache=True)  # fmt: skip
    return heads["action_out_proj"](out.last_hidden_state[0])


def lerobot_euler(velocity: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], noise: torch.Tensor,
                  steps: int) -> torch.Tensor:  # fmt: skip
    """LeRobot's ``euler_integrate``: dt = -1/n, time = 1 + step * dt as an fp32 tensor per row, x <- x + dt * v."""
    dt, x = -1.0 / steps, noise
    for step in range(steps):
        x = x + dt * velocity(x, torch.tensor(1.0 + step * dt, dtype=torch.float32).expand(x.shape[0]))
    return x


@contextlib.contextmanager
def tiny_shapes() -> Iterator[None]:
    """While open, a LeRobot pi0.5 folder loaded through the registry has ``TINY``'s towers and vocabulary, and every
    other setting (chunk, dims, steps, cameras, prompt budget) from its config.json: the one seam is
    ``read_pi05_config``, whose variant table (tested on its own) holds only pi05_base's 3.6B-parameter towers."""
    read = pi05.read_pi05_config

    def tiny(folder: Path) -> VlaConfig:
        return replace(read(folder), vision=TINY.vision, backbone=TINY.backbone, expert=TINY.expert,
                       vocab_size=TINY.vocab_size)  # fmt: skip

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pi05, "read_pi05_config", tiny)
        yield


def write_so100_checkpoint(folder: Path, instruction: str, arms: int = 1) -> None:
    """A faithful pi0.5 checkpoint for the simulated SO-100 (config/sim_arm.urdf; ``arms`` 2: the bimanual
    bi-SO-100 of config/sim_bimanual.urdf, the left arm's joints first): a 6-dim state and action per arm, QUANTILES
    stats, the state normalised over the URDF's ranges and the actions unnormalised into 0.04 rad about the middle of
    each joint's range, the jaw's 0.4 above it (so a jaw starting in the middle is sent there, and a jaw goal
    stands; random weights act noisily; the arm must stay inside its limits and speeds all the same)."""
    dims = len(SO100_JOINTS) * arms
    paligemma, gemma, heads = hf_modules(seed=3, action_dim=max(ACTION_DIM, dims))
    texts = [f"Task: {instruction}, State: {' '.join(map(str, range(dims)))};\nAction: "]
    write_lerobot_folder(folder, paligemma, gemma, heads, texts, max_action_dim=max(ACTION_DIM, dims),
                         max_state_dim=max(STATE_DIM, dims),
                         output_features={"action": {"type": "ACTION", "shape": [dims]}})  # fmt: skip
    low, high = np.tile(SO100_CENTRE - SO100_SPREAD, arms), np.tile(SO100_CENTRE + SO100_SPREAD, arms)
    write_processor_files(folder, "QUANTILES", {"q01": np.tile(SO100_LOWER, arms).tolist(),
                                                "q99": np.tile(SO100_UPPER, arms).tolist()},
                          {"q01": low.tolist(), "q99": high.tolist()})  # fmt: skip

