"""pi0.5 as LeRobot runs it, built under LeRobot's key names from stock transformers modules (tiny random weights)
and checked piece by piece, since transformers has no pi0.5 class: the prefix K/V and the language head against
PaliGemmaForConditionalGeneration with the whole prefix bidirectional; the expert against a stock Gemma run on a
copy of that prefix's cache, with adaRMS reduced to plain RMSNorm; the time MLP, adaRMS and Euler loop against
LeRobot's formulas; the state-as-text prompt against values derived by hand from LeRobot's format."""

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pi0_folders import camera, rewrite_tensors, write_tokenizer
from pi05_folders import (
    ACTION_DIM, BIN_TEXTS, CHUNK, EXPERT_WIDTH, TINY, hf_modules, hf_prefix, hf_velocity, lerobot_euler,
    write_lerobot_folder,
)

from oxygen_ros.kv import step_builder
from oxygen_ros.kv.kv_cache import KVCache, LayerKV
from oxygen_ros.layers.packed_linear import PackedLinear, can_pack
from oxygen_ros.models.common.lerobot_checkpoint import load_weights
from oxygen_ros.models.common.flow import integrate_flow
from oxygen_ros.models.pi05.config import PI05_FULL
from oxygen_ros.models.common.gemma import GemmaRMSNorm
from oxygen_ros.models.pi05 import Pi05Model, load_pi05_folder, read_pi05_config
from oxygen_ros.models.pi05.prompt import encode_prompt, format_prompt
from oxygen_ros.models.pi05.checkpoint import pi05_name
from oxygen_ros.models.tokenizer import Tokenizer

BLOCK_SIZE = 16
ATOL = RTOL = 1e-5  # fp32; measured max |ours - reference|: prefix K/V 5.0e-6 (|k| <= 5.5), logits 3.7e-6 (<= 7.2),
# expert velocity 2.1e-6 (<= 4.1); a causal prompt instead would move layer-1 K by ~5
TASKS = ["pick up the red block", "put_the cup on the plate\n"]
STATES = [[0.3, -0.9, 0.8, 0.05], [0.5, -0.4, 0.0, 0.7, -1.0, 0.25]]  # normalised, as LeRobot's processor gets them
CAMERAS = [[camera(1), None, camera(2)], [camera(3), camera(4), None]]  # a missing camera in each row
PROMPT_TEXTS = [format_prompt(t, s) for t, s in zip(TASKS, STATES)]


@pytest.fixture(scope="module", params=["zero", "weights"])
def reference(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """("zero": every stock norm weight 0, so the adaRMS bias is scale 0 / shift 0 / gate 1, as the acceptance reads;
    "weights": random norm weights carried by the bias's scale): the stock modules, our load of their folder, its
    tokenizer."""
    paligemma, gemma, heads = hf_modules(seed=0)
    if request.param == "zero":
        with torch.no_grad():
            for name, p in gemma.named_parameters():
                if "norm" in name:
                    p.zero_()
    folder = tmp_path_factory.mktemp(f"pi05-{request.param}")
    write_lerobot_folder(folder, paligemma, gemma, heads, PROMPT_TEXTS)
    ours = Pi05Model(TINY)
    load_weights(folder, ours, pi05_name)
    return paligemma, gemma, heads, ours, Tokenizer.from_hf_folder(folder), folder


@torch.no_grad()
def pool_prefix(model: Pi05Model, prompts: list[list[int]]) -> tuple[KVCache, torch.Tensor, list[int], torch.Tensor]:
    """Both rows' prefixes in ONE ragged prefill, each wholly bidirectional, in out-of-order blocks -> (pool, block
    tables, lengths, final hidden states [T, width])."""
    prepared = [model.prepare_prefix(cams, p) for cams, p in zip(CAMERAS, prompts)]
    lens = [len(p.token_ids) for p in prepared]
    order = np.random.default_rng(0).permutation(64).tolist()
    tables, used = [], 0
    for n in lens:
        tables.append(order[used : used + n // BLOCK_SIZE + 1])
        used += n // BLOCK_SIZE + 1
    embeds = torch.cat([model.embed_span(p.token_ids, 0, n, model.encode_images(p.pixels)) for p, n in zip(prepared, lens)])
    kv = KVCache(model.kv_layout(BLOCK_SIZE, torch.float32), 64, torch.device("cpu"))
    ctx, positions = kv.steps.batch(tables, [0, 0], lens, lens)
    ids = torch.tensor([t for p in prepared for t in p.token_ids])
    hidden = model(ids, positions, ctx, kv, input_embeds=embeds)
    return kv, ctx.block_tables, lens, hidden


def prompts_of(tokenizer: Tokenizer) -> list[list[int]]:
    return [encode_prompt(tokenizer, t, s) for t, s in zip(TASKS, STATES)]


def test_prefix_kv_and_language_head_equal_paligemma(reference: tuple) -> None:
    """K (after RoPE) and V per layer read back from the pool, and the language head's logits at the prefix's last
    token (the tied embedding, decoding from the same bidirectional prefix)."""
    paligemma, _, _, ours, tokenizer, _ = reference
    prompts = prompts_of(tokenizer)
    kv, tables, lens, hidden = pool_prefix(ours, prompts)
    ends = np.cumsum(lens) - 1
    for b, (cams, prompt) in enumerate(zip(CAMERAS, prompts)):
        out = hf_prefix(paligemma, cams, prompt)
        for i, layer in enumerate(out.cache.layers):
            k, v = kv.layers[i].gather(tables, max(lens), torch.float32)
            torch.testing.assert_close(k[b, : lens[b]], layer.keys[0].transpose(0, 1), atol=ATOL, rtol=RTOL)
            torch.testing.assert_close(v[b, : lens[b]], layer.values[0].transpose(0, 1), atol=ATOL, rtol=RTOL)
        logits = ours.compute_logits(hidden[ends[b]])
        torch.testing.assert_close(logits, out.logits[0, -1], atol=ATOL, rtol=RTOL)


def test_image_kv_depends_on_the_prompt(reference: tuple) -> None:
    """The same frames under another state have other image K/V: such blocks are never shared across prompts."""
    _, _, _, ours, tokenizer, _ = reference
    other = [encode_prompt(tokenizer, TASKS[0], [s + 0.5 for s in STATES[0]]), prompts_of(tokenizer)[1]]
    kv_a, tables_a, _, _ = pool_prefix(ours, prompts_of(tokenizer))
    kv_b, tables_b, _, _ = pool_prefix(ours, other)
    image_tokens = 2 * TINY.tokens_per_image
    k_a = kv_a.layers[1].gather(tables_a, image_tokens, torch.float32)[0]
    k_b = kv_b.layers[1].gather(tables_b, image_tokens, torch.float32)[0]
    assert (k_a - k_b).abs().max() > 1e-2


@torch.no_grad()
@pytest.mark.parametrize("packed", [False, True], ids=["as_loaded", "packed"])
def test_expert_equals_stock_gemma_on_the_prefix(reference: tuple, packed: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The velocity of our expert (adaRMS reduced, so time does not enter) vs a stock Gemma run on a copy of the
    reference prefix cache: action tokens see the whole prefix and each other, at positions after the prefix,
    then ``action_out_proj``, as LeRobot's ``denoise_step`` computes it; also with the backbone's and the expert's
    layers fused and prepacked (their adaptive norms' maps too), as the engine serves a policy on a CPU. The
    velocity reads the prefix K/V the action context gathered once, not the pool (a denoising step gathers
    nothing), and equals the one that gathers each layer's as it goes (a context over ``ACTION_PREFIX_MAX_BYTES``)."""
    paligemma, gemma, heads, ours, tokenizer, _ = reference
    if packed:
        if not can_pack(torch.device("cpu"), torch.float32):
            pytest.skip("oneDNN packing is unavailable")
        ours = copy.deepcopy(ours)
        ours.pack_weights()
        assert isinstance(ours.expert.layers[0].mlp.gate_up_proj, PackedLinear)
    prompts = prompts_of(tokenizer)
    kv, tables, lens, _ = pool_prefix(ours, prompts)
    x_t = torch.randn(2, CHUNK, ACTION_DIM, generator=torch.Generator().manual_seed(3))
    ctx = kv.steps.actions(tables, lens, CHUNK, torch.float32)
    rope = ours.expert.rotary.angles(torch.cat([torch.arange(n, n + CHUNK) for n in lens]))
    times = torch.tensor([0.7, 0.3])
    monkeypatch.setattr(step_builder, "ACTION_PREFIX_MAX_BYTES", 0)  # over the cap: each layer gathers its own
    per_step = kv.steps.actions(tables, lens, CHUNK, torch.float32)
    assert per_step.past_kv is None and ctx.past_kv is not None
    gathered_per_step = ours.expert.velocity(x_t, times, rope, per_step, kv)
    monkeypatch.setattr(LayerKV, "gather", _gathers_nothing)
    got = ours.expert.velocity(x_t, times, rope, ctx, kv)
    assert torch.equal(got, gathered_per_step)
    for b, (cams, prompt) in enumerate(zip(CAMERAS, prompts)):
        expected = hf_velocity(gemma, heads, hf_prefix(paligemma, cams, prompt).cache, x_t[b : b + 1])
        assert expected.abs().max() > 0.5
        torch.testing.assert_close(got[b], expected, atol=ATOL, rtol=RTOL)


def _gathers_nothing(*_: object, **__: object) -> None:
    raise AssertionError("a denoising step gathered the prefix K/V again")


def lerobot_time_embedding(t: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """LeRobot's ``create_sinusoidal_pos_embedding`` as its source computes it (fp64 on the CPU)."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64)
    period = min_period * (max_period / min_period) ** fraction
    sin_input = t[..., None] * (1.0 / period * 2 * math.pi)
    return torch.cat([torch.sin(sin_input), torch.cos(sin_input)], dim=-1)


@torch.no_grad()
def test_time_mlp_equals_lerobots(reference: tuple) -> None:
    """silu(time_mlp_out(silu(time_mlp_in(emb(t))))) with the embedding cast to the time's fp32, from the loaded
    heads."""
    _, _, heads, ours, _, _ = reference
    t = torch.tensor([1.0, 0.75, 0.5, 0.25, 0.013])
    emb = lerobot_time_embedding(t, EXPERT_WIDTH, 4e-3, 4.0).type(torch.float32)
    expected = F.silu(heads["time_mlp_out"](F.silu(heads["time_mlp_in"](emb))))
    torch.testing.assert_close(ours.expert.condition(t), expected, atol=1e-6, rtol=1e-6)


@torch.no_grad()
def test_adarms_equals_lerobots_formula() -> None:
    """LeRobot's PiGemmaRMSNorm with a live dense map: x * rsqrt(mean(x^2) + eps) * (1 + scale) + shift, and the
    gate that scales the residual branch."""
    torch.manual_seed(0)
    norm = GemmaRMSNorm(EXPERT_WIDTH, 1e-6, cond_dim=EXPERT_WIDTH)
    x, cond = torch.randn(9, EXPERT_WIDTH), torch.randn(9, EXPERT_WIDTH)
    scale, shift, gate = norm.dense(cond).chunk(3, dim=-1)
    normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    got, got_gate = norm(x, cond)
    torch.testing.assert_close(got, normed * (1 + scale) + shift, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got_gate, gate, atol=0, rtol=0)


def test_euler_loop_equals_lerobots() -> None:
    """integrate_flow vs LeRobot's ``euler_integrate``: dt = -1/n, time = 1 + step * dt as an fp32 tensor per row,
    x <- x + dt * v; the same times reach the velocity and the same chunk comes out."""
    seen: list[torch.Tensor] = []

    def velocity(x: torch.Tensor, t: torch.Tensor, *_: object) -> torch.Tensor:
        seen.append(t.clone())
        return torch.sin(3 * x) * t[:, None, None] + t[:, None, None] ** 2

    noise = torch.randn(2, CHUNK, ACTION_DIM, generator=torch.Generator().manual_seed(1))
    model = Pi05Model(TINY)
    kv = KVCache(model.kv_layout(BLOCK_SIZE, torch.float32), 4, torch.device("cpu"))
    got = integrate_flow(velocity, model.expert.rotary, torch.tensor([[0], [1]]), [3, 5], kv, 10, noise,
                         torch.float32)
    ours_times, seen = seen, []
    x = lerobot_euler(velocity, noise, 10)
    assert all(torch.equal(a, b) for a, b in zip(ours_times, seen, strict=True))
    torch.testing.assert_close(got, x, atol=1e-6, rtol=0)


def test_prompt_is_lerobots_format(tmp_path: Path) -> None:
    """Bins derived by hand from LeRobot's rule (edges -1 + k/128, k = 0..255; digitize - 1; no clipping):
    -1 -> 0, -0.99 -> floor(0.01 * 128) = 1, 0 -> 128, 1/128 -> 129, 0.5 -> 192, 0.999 -> 255, 1 -> 255 (past the
    last edge), 1.5 -> 255, -1.5 -> -1 (before the first edge).  The task is stripped, "_" and newlines are spaces."""
    state = [-1.0, -0.99, 0.0, 1 / 128, 0.5, 0.999, 1.0, 1.5, -1.5]
    text = format_prompt("  pick_up the\ncube ", state)
    assert text == "Task: pick up the cube, State: 0 1 128 129 192 255 255 255 -1;\nAction: "
    write_tokenizer(tmp_path, PROMPT_TEXTS + BIN_TEXTS + [text])
    tokenizer = Tokenizer.from_hf_folder(tmp_path)
    ids = encode_prompt(tokenizer, "  pick_up the\ncube ", state)
    assert ids[0] == tokenizer.bos_token_id == 2 and ids[1:] == tokenizer.encode(text)
    assert tokenizer.decode(ids[1:]) == text
    with pytest.raises(ValueError, match="NaN"):
        format_prompt("x", [0.0, float("nan")])


def test_bad_inputs_and_checkpoints_are_refused(reference: tuple, tmp_path: Path) -> None:
    _, _, _, ours, tokenizer, folder = reference
    with pytest.raises(ValueError, match="state as text"):
        ours.prepare_prefix(CAMERAS[0], prompts_of(tokenizer)[0], STATES[0])
    with pytest.raises(ValueError, match="camera slots"):
        ours.prepare_prefix([camera(1)] * 4, prompts_of(tokenizer)[0])
    with pytest.raises(ValueError, match="more than 200"):
        ours.prepare_prefix([camera(1)], [5] * 201)
    copy_ = tmp_path / "pi0-like"
    shutil.copytree(folder, copy_)
    rewrite_tensors(copy_, lambda n: "model.state_proj.weight" if n == "model.time_mlp_in.weight" else n)
    with pytest.raises(ValueError, match=r"missing \['expert.time_mlp_in.weight'\]") as caught:
        load_weights(copy_, Pi05Model(TINY), pi05_name)
    assert "state_proj.weight" in str(caught.value), str(caught.value)  # a pi0 tensor: refused, named


def test_openpi_time_mlp_names_load_alike(reference: tuple, tmp_path: Path) -> None:
    """openpi's ``action_time_mlp_*`` names are LeRobot's ``time_mlp_*`` (LeRobot renames them on load)."""
    _, _, _, ours, _, folder = reference
    copy_ = tmp_path / "openpi"
    shutil.copytree(folder, copy_)
    rewrite_tensors(copy_, lambda n: n.replace("model.time_mlp_", "model.action_time_mlp_"))
    model = Pi05Model(TINY)
    load_weights(copy_, model, pi05_name)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ours.state_dict().values()))


def test_lerobot_config_gives_pi05_base_shapes(tmp_path: Path) -> None:
    """lerobot/pi05_base's config.json: Gemma 2B + Gemma 300M, So400m/14 at 224 px, chunk 50, 200 prompt tokens;
    LeRobot's MEM variant refused."""
    config = {"type": "pi05", "paligemma_variant": "gemma_2b", "action_expert_variant": "gemma_300m",
              "chunk_size": 50, "max_state_dim": 32, "max_action_dim": 32, "num_inference_steps": 10,
              "image_resolution": [224, 224], "tokenizer_max_length": 200}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    cfg = read_pi05_config(tmp_path)
    assert (cfg.backbone, cfg.expert, cfg.vision) == (PI05_FULL.backbone, PI05_FULL.expert, PI05_FULL.vision)
    assert (cfg.vocab_size, cfg.action_horizon, cfg.max_prompt_tokens, cfg.max_images) == (257152, 50, 200, 3)
    with torch.device("meta"):
        total = sum(p.numel() for p in Pi05Model(cfg).parameters())
    assert 3.3e9 < total < 3.7e9, total  # openpi's pi0.5: ~3.6B with the adaRMS dense maps (~14.5 GB fp32)
    (tmp_path / "config.json").write_text(json.dumps(config | {"use_proprioceptive_memory": True}))
    with pytest.raises(ValueError, match="'use_proprioceptive_memory'"):
        load_pi05_folder(tmp_path)
