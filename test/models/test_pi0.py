"""pi0 from a real checkpoint folder over the paged pool, against transformers' PI0ForConditionalGeneration on the
same tiny random weights: prefix K/V per layer and the action chunk of ``sample_actions``, in both key layouts a
pi0 checkpoint comes in; bad folders refused naming what is wrong."""

import json
from dataclasses import replace
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from pi0_folders import ACTION_DIM, CHUNK, STATE_DIM, camera, hf_inputs, rewrite_tensors
from safetensors.torch import load_file, save_file
from transformers import PI0ForConditionalGeneration

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.layers.packed_linear import PackedLinear, can_pack
from oxygen_ros.models.pi0 import Pi0Model, load_pi0_folder, read_pi0_config
from oxygen_ros.models.pi05.config import PI05_FULL

BLOCK_SIZE = 16
ATOL = RTOL = 1e-5  # fp32; measured max |ours - transformers|: actions 1.3e-6 (|a| <= 4.3), prefix K/V 1.0e-5 (<= 6.9)
CAMERAS = [[camera(1), None, camera(2)], [camera(3), camera(4), None]]  # a missing camera in each row
PROMPTS = [[2, 17, 90, 45, 7, 199, 108], [2, 5, 250, 31, 31, 64, 12, 88, 140, 3, 9, 108]]
STATES = [[0.3, -1.2, 0.8, 0.05], [1.5, -0.4, 0.0, 0.7, -2.0, 0.25]]  # shorter than max_state_dim: zero-padded


@pytest.fixture(scope="module")
def ours(pi0_folder: Path) -> Pi0Model:
    return load_pi0_folder(pi0_folder)[0]


@pytest.fixture(scope="module")
def noise() -> torch.Tensor:
    return torch.randn(len(PROMPTS), CHUNK, ACTION_DIM, generator=torch.Generator().manual_seed(7))


def scattered_tables(lens: list[int]) -> list[list[int]]:
    """Distinct, out-of-order blocks per row, room for the prefix and the state token."""
    order = np.random.default_rng(0).permutation(64).tolist()
    tables, used = [], 0
    for n in lens:
        count = n // BLOCK_SIZE + 1
        tables.append(order[used : used + count])
        used += count
    return tables


@torch.no_grad()
def pool_prefix(model: Pi0Model, cameras: list, prompts: list[list[int]]) -> tuple[KVCache, torch.Tensor, list[int]]:
    """Every row's prefix in ONE ragged prefill step, each wholly bidirectional -> (pool, block tables, lengths)."""
    prepared = [model.prepare_prefix(cams, p) for cams, p in zip(cameras, prompts)]
    lens = [len(p.token_ids) for p in prepared]
    tables = scattered_tables(lens)
    embeds = torch.cat([model.embed_span(p.token_ids, 0, n, model.encode_images(p.pixels)) for p, n in zip(prepared, lens)])
    kv = KVCache(model.kv_layout(BLOCK_SIZE, torch.float32), 64, torch.device("cpu"))
    ctx, positions = kv.steps.batch(tables, [0] * len(lens), lens, lens)
    ids = torch.tensor([t for p in prepared for t in p.token_ids])
    model(ids, positions, ctx, kv, input_embeds=embeds)
    return kv, ctx.block_tables, lens


def pool_actions(model: Pi0Model, noise: torch.Tensor, prompts: list[list[int]] = PROMPTS) -> torch.Tensor:
    kv, tables, lens = pool_prefix(model, CAMERAS, prompts)
    model.write_prefix_tail(STATES, tables, lens, kv)
    return model.sample_actions(tables, [n + 1 for n in lens], kv, noise=noise)


def hf_actions(hf: PI0ForConditionalGeneration, noise: torch.Tensor, prompts: list[list[int]] = PROMPTS) -> torch.Tensor:
    return hf.sample_actions(**hf_inputs(CAMERAS, prompts, STATES), noise=noise.clone())


def test_actions_equal_transformers(ours: Pi0Model, pi0_hf: PI0ForConditionalGeneration, noise: torch.Tensor) -> None:
    """Two rows of different lengths (right-padded for transformers, ragged in our pool), a missing camera in each,
    states shorter than max_state_dim, the config's 4 Euler steps.  Measured here: max |diff| 1.3e-6 on actions up
    to 4.3 (with the time embedding in fp64 instead of the reference's fp32 it would be 3.9e-5)."""
    got, expected = pool_actions(ours, noise), hf_actions(pi0_hf, noise)
    assert got.shape == (2, CHUNK, ACTION_DIM)
    assert expected.abs().max() > 0.5 and (expected[0] - expected[1]).abs().max() > 0.5  # not degenerate
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=RTOL)


@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="oneDNN packing is unavailable")
def test_packed_gemma_layers_keep_transformers_actions(pi0_folder: Path, pi0_hf: PI0ForConditionalGeneration,
                                                       noise: torch.Tensor) -> None:  # fmt: skip
    """The backbone's and the expert's Gemma layers fused and prepacked, as the engine serves a policy on a CPU (every
    projection a PackedLinear, gate|up one GeGLU product): the same actions as transformers, to the same tolerance."""
    packed = load_pi0_folder(pi0_folder)[0]
    packed.pack_weights()
    for layers in (packed.backbone.layers, packed.expert.layers):
        mlp, attn = layers[0].mlp, layers[0].self_attn
        assert isinstance(mlp.gate_up_proj, PackedLinear) and isinstance(attn.qkv_proj, PackedLinear)
    torch.testing.assert_close(pool_actions(packed, noise), hf_actions(pi0_hf, noise), atol=ATOL, rtol=RTOL)


@torch.no_grad()
def test_prefix_kv_equal_transformers(ours: Pi0Model, pi0_hf: PI0ForConditionalGeneration) -> None:
    """PaliGemma's prefix with its whole-prefix bidirectional mask, K (after RoPE) and V per layer, read back from
    the pool through the block tables."""
    inputs = hf_inputs(CAMERAS, PROMPTS, STATES)
    embeds = pi0_hf.model.embed_prefix(inputs["input_ids"], inputs["pixel_values"], inputs["pixel_attention_mask"])
    mask = inputs["attention_mask"]
    cache = pi0_hf.model.vlm(inputs_embeds=embeds, attention_mask=mask, position_ids=mask.cumsum(-1) - 1,
                         token_type_ids=torch.zeros_like(mask), use_cache=True).cache  # fmt: skip
    kv, tables, lens = pool_prefix(ours, CAMERAS, PROMPTS)
    for i, layer in enumerate(cache.layers):
        k, v = kv.layers[i].gather(tables, max(lens), torch.float32)
        for b, n in enumerate(lens):
            torch.testing.assert_close(k[b, :n], layer.keys[b, :, :n].transpose(0, 1), atol=ATOL, rtol=RTOL)
            torch.testing.assert_close(v[b, :n], layer.values[b, :, :n].transpose(0, 1), atol=ATOL, rtol=RTOL)


def test_image_kv_depends_on_the_prompt(ours: Pi0Model) -> None:
    """pi0's prefix is bidirectional as a whole: the same frame under another prompt has other image K/V, so such
    blocks must never be shared across prompts."""
    kv_a, tables_a, _ = pool_prefix(ours, CAMERAS[:1], PROMPTS[:1])
    kv_b, tables_b, _ = pool_prefix(ours, CAMERAS[:1], [PROMPTS[0][:-1] + [7]])
    image_tokens = 2 * ours.config.tokens_per_image
    k_a = kv_a.layers[1].gather(tables_a, image_tokens, torch.float32)[0]
    k_b = kv_b.layers[1].gather(tables_b, image_tokens, torch.float32)[0]
    assert (k_a - k_b).abs().max() > 1e-2


def lerobot_hub_name(name: str) -> str | None:
    """What ``save_pretrained`` wrote -> the names of ``lerobot/pi0_base``: LeRobot's ``model.`` wrapper,
    transformers 4's ``vision_tower.vision_model`` and ``language_model`` (no inner ``model.``), the LM head kept
    and the embedding it is tied to dropped."""
    if name.endswith("language_model.model.embed_tokens.weight"):
        return None
    name = name.replace("vision_tower.", "vision_tower.vision_model.").replace("language_model.model.", "language_model.")
    return "model." + name


def test_lerobot_key_names_load_to_the_same_actions(
    pi0_folder: Path, tmp_path: Path, ours: Pi0Model, noise: torch.Tensor
) -> None:
    copy = tmp_path / "lerobot"
    shutil.copytree(pi0_folder, copy)
    head = {"model.paligemma_with_expert.paligemma.lm_head.weight": ours.backbone.embed_tokens.weight.detach()}
    renamed = {lerobot_hub_name(n): t for n, t in load_file(copy / "model.safetensors").items()}
    save_file({n: t for n, t in renamed.items() if n is not None} | head, copy / "model.safetensors")
    model = load_pi0_folder(copy)[0]
    assert torch.equal(pool_actions(model, noise), pool_actions(ours, noise))


def test_transformers_module_names_load_to_the_same_actions(
    tmp_path: Path, pi0_hf: PI0ForConditionalGeneration, ours: Pi0Model, pi0_folder: Path, noise: torch.Tensor
) -> None:
    """A folder whose safetensors holds PI0ForConditionalGeneration's own state-dict names (model.vlm.*, ...)."""
    copy = tmp_path / "modules"
    copy.mkdir()
    shutil.copy(pi0_folder / "config.json", copy / "config.json")
    save_file({n: t.contiguous() for n, t in pi0_hf.state_dict().items()}, copy / "model.safetensors")
    assert torch.equal(pool_actions(load_pi0_folder(copy)[0], noise), pool_actions(ours, noise))


def _edit_config(folder: Path, path: list[str], value: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (folder / "config.json").write_text(json.dumps(config))


EXPERT_Q = "paligemma_with_expert.gemma_expert.model.layers.1.self_attn.q_proj.weight"
BAD_FOLDERS = [
    ("missing tensor", lambda f: rewrite_tensors(f, lambda n: None if n == "state_proj.bias" else n),
     "missing ['expert.state_proj.bias']"),
    ("extra tensor", lambda f: rewrite_tensors(f, lambda n: "time_mlp_in.weight" if n == "state_proj.bias" else n),
     "unexpected ['time_mlp_in.weight']"),
    ("misshaped tensor", lambda f: save_file(
        {n: (t[:, :40] if n == EXPERT_Q else t).contiguous() for n, t in _tensors(f).items()}, f / "model.safetensors"),
     f"{EXPERT_Q} (64, 40) != (64, 48)"),
    ("mixed layouts", lambda f: save_file(_tensors(f) | {"model.state_proj.bias": torch.zeros(48)} | {
        "embed_action_time.state_proj.bias": torch.zeros(48)}, f / "model.safetensors"), "are both expert.state_proj.bias"),
    ("expert depth", lambda f: _edit_config(f, ["dit_config", "num_hidden_layers"], 3), "must equal the backbone's"),
    ("activation", lambda f: _edit_config(f, ["vlm_config", "text_config", "hidden_act"], "relu"),
     "vlm_config.text_config: field 'hidden_act'"),
    ("vision head", lambda f: _edit_config(f, ["vlm_config", "vision_config", "vision_use_head"], True),
     "'vision_use_head'"),
    ("chunk size", lambda f: _edit_config(f, ["chunk_size"], 0), "field 'chunk_size'"),
    # counts bounded before they size a loop or divide (a million layers built, or a division by 0 heads)
    ("expert layers", lambda f: _edit_config(f, ["dit_config", "num_hidden_layers"], 10**6),
     "dit_config: field 'num_hidden_layers' must be an integer in [1, 1024], got 1000000"),
    ("vision heads", lambda f: _edit_config(f, ["vlm_config", "vision_config", "num_attention_heads"], 0),
     "vision_config: field 'num_attention_heads' must be an integer in [1, 1024], got 0"),
    ("expert kv heads", lambda f: _edit_config(f, ["dit_config", "num_key_value_heads"], 10**5),
     "dit_config: field 'num_key_value_heads' must be an integer in [1, 1024], got 100000"),
    ("not pi0", lambda f: _edit_config(f, ["model_type"], "paligemma"), "must be 'pi0'"),
    ("no weights", lambda f: (f / "model.safetensors").unlink(), "model.safetensors"),
]  # fmt: skip


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


@pytest.mark.parametrize(("name", "damage", "named"), BAD_FOLDERS, ids=[b[0] for b in BAD_FOLDERS])
def test_bad_checkpoint_is_refused_naming_it(pi0_folder: Path, tmp_path: Path, name: str, damage, named: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(pi0_folder, copy)
    damage(copy)
    with pytest.raises((ValueError, FileNotFoundError)) as caught:
        load_pi0_folder(copy)
    assert named in str(caught.value), str(caught.value)


def test_bad_inputs_are_refused(ours: Pi0Model) -> None:
    with pytest.raises(ValueError, match="camera slots"):
        ours.prepare_prefix([camera(1)] * 4, PROMPTS[0])
    with pytest.raises(ValueError, match="1..6 values"):
        ours.state_tensor([[0.0] * (STATE_DIM + 1)])
    with pytest.raises(ValueError, match="NaN"):
        ours.state_tensor([[0.0, float("nan")]])
    with pytest.raises(ValueError, match="more than 48"):
        ours.prepare_prefix([camera(1)], [5] * 49)


def test_lerobot_config_gives_pi0_base_shapes(tmp_path: Path) -> None:
    """lerobot/pi0_base's config.json names variants, not sizes: Gemma 2B + Gemma 300M, So400m/14 at 224 px."""
    config = {"type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
              "chunk_size": 50, "max_state_dim": 32, "max_action_dim": 32, "num_inference_steps": 10,
              "image_resolution": [224, 224], "tokenizer_max_length": 48,
              "input_features": {f"observation.images.{c}": {"type": "VISUAL", "shape": [3, 224, 224]}
                                 for c in ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")}
                                | {"observation.state": {"type": "STATE", "shape": [32]}}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = read_pi0_config(tmp_path)
    assert (cfg.backbone, cfg.expert, cfg.vision) == (PI05_FULL.backbone, PI05_FULL.expert, PI05_FULL.vision)
    assert (cfg.vocab_size, cfg.action_horizon, cfg.max_images, cfg.tokens_per_image) == (257152, 50, 3, 256)
    with torch.device("meta"):
        total = sum(p.numel() for p in Pi0Model(cfg).parameters())
    assert 3.2e9 < total < 3.4e9  # openpi's pi0: ~3.3B parameters


def test_chunk_is_cut_to_the_robots_action_dims(tmp_path: Path, pi0_folder: Path, ours: Pi0Model, noise: torch.Tensor) -> None:
    """LeRobot's output_features.action.shape names the robot's action dims: the flow runs at max_action_dim (the
    noise's width), the chunk comes out cut to them, as LeRobot's policy cuts it; more than max_action_dim is
    refused."""
    config = {"type": "pi0", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
              "output_features": {"action": {"type": "ACTION", "shape": [4]}}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert read_pi0_config(tmp_path).output_action_dim == 4
    config["output_features"]["action"]["shape"] = [33]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"'output_features.action.shape' \[33\] must be \[1..32\]"):
        read_pi0_config(tmp_path)
    robot = load_pi0_folder(pi0_folder)[0]
    robot.config = replace(robot.config, robot_action_dim=4)
    assert torch.equal(pool_actions(robot, noise), pool_actions(ours, noise)[..., :4])
