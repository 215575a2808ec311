"""pi05-causal-tiny over the paged pool: SigLIP vs transformers, Gemma vs transformers, the expert and language decode vs a
dense recomputation without the pool, and the action chunk's contract (shape, seed, dependence on the image)."""

import copy
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch
from models.pi05_conftest import (
    BLOCK_SIZE,
    block_tables,
    dense_actions,
    image_len,
    dense_backbone,
    prefill,
)
from transformers import GemmaConfig, GemmaForCausalLM, SiglipVisionConfig, SiglipVisionModel

from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kernels.cpu_library import library
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.layers.packed_linear import PackedLinear, can_pack
from oxygen_ros.models.common.gemma import GemmaModel
from oxygen_ros.models.common.images import image_content_hash
from oxygen_ros.models.common.prefix import PrefixInputs
from oxygen_ros.models.common.siglip import SiglipVisionTransformer
from oxygen_ros.models.pi05 import Pi05Model, build_random_pi05

PROMPT_A = [17, 905, 3000, 42, 7, 19, 23000, 11, 5]
PROMPT_B = list(range(100, 120))
STATE_A = [0.1, -0.5, 0.9]


def camera(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (96, 128, 3), dtype=np.uint8)


def fresh_pool(model: Pi05Model, num_blocks: int = 128) -> KVCache:
    return KVCache(model.kv_layout(BLOCK_SIZE, torch.float32), num_blocks, torch.device("cpu"))


def scattered_blocks(n: int, seed: int) -> list[int]:
    """Distinct, out-of-order block ids: the pool path must follow block tables, not contiguity."""
    return np.random.default_rng(seed).permutation(128)[:n].tolist()


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Most matmuls here are small (tens of tokens); on a busy 2-core machine two OpenMP threads spin-wait for each
    other and this module took 50 s instead of 15 s (measured).  One thread, restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> Pi05Model:
    return build_random_pi05("pi05-causal-tiny", seed=0)


@pytest.fixture(scope="module")
def prefix_a(model: Pi05Model) -> PrefixInputs:
    return model.embed_prefix([camera(1)], PROMPT_A, state=STATE_A)  # 256 + 9 + 3 = 268 tokens


@pytest.fixture(scope="module")
def prefix_b(model: Pi05Model) -> PrefixInputs:
    return model.embed_prefix([camera(2), camera(3)], PROMPT_B)  # 512 + 20 = 532 tokens


def test_vit_matches_transformers_siglip(model: Pi05Model) -> None:
    v = model.config.vision
    hf_config = SiglipVisionConfig(
        hidden_size=v.hidden_size,
        intermediate_size=v.intermediate_size,
        num_hidden_layers=v.num_layers,
        num_attention_heads=v.num_heads,
        patch_size=v.patch_size,
        image_size=v.image_size,
        vision_use_head=False,
    )
    hf_config._attn_implementation = "eager"  # an attention path independent of ours (SDPA)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        hf = SiglipVisionModel(hf_config).eval()
    ours = SiglipVisionTransformer(v).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    pixels = torch.rand(2, 3, v.image_size, v.image_size, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(ours(pixels), hf(pixel_values=pixels).last_hidden_state, atol=1e-5, rtol=1e-5)


def test_backbone_matches_transformers_gemma(model: Pi05Model) -> None:
    """Causal prefill + decode over the pool equals GemmaForCausalLM with the same random weights: RMSNorm (1 + w),
    GeGLU, sqrt(width) embedding scale, RoPE, MQA with head_dim 256 and the tied LM head are Gemma's."""
    b = model.config.backbone
    hf_config = GemmaConfig(
        vocab_size=model.config.vocab_size,
        hidden_size=b.hidden_size,
        intermediate_size=b.intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=b.num_heads,
        num_key_value_heads=b.num_kv_heads,
        head_dim=b.head_dim,
    )
    with torch.random.fork_rng():
        torch.manual_seed(2)
        hf = GemmaForCausalLM(hf_config).eval()
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                torch.nn.init.normal_(p, std=0.1)  # HF inits them to 0: make (1 + w) matter
    ours = GemmaModel(replace(b, num_layers=2), model.config.vocab_size).eval()
    ours.load_state_dict({k.removeprefix("model."): t for k, t in hf.state_dict().items() if k != "lm_head.weight"})
    ids = torch.randint(0, hf_config.vocab_size, (40,), generator=torch.Generator().manual_seed(0))
    kv = KVCache(KVLayout(2, b.num_kv_heads, b.head_dim, BLOCK_SIZE, torch.float32), 8, torch.device("cpu"))
    blocks = [5, 2, 7]
    with torch.no_grad():
        expected = hf(input_ids=ids[None]).logits[0]
        ctx, positions = kv.steps.batch([blocks], [0], [37], [0])
        got = [ours.compute_logits(ours(ids[:37], positions, ctx, kv))]
        for p in range(37, 40):
            ctx, positions = kv.steps.batch([blocks], [p], [1], [0])
            got.append(ours.compute_logits(ours(ids[p : p + 1], positions, ctx, kv)))
    torch.testing.assert_close(torch.cat(got), expected, atol=1e-4, rtol=1e-4)


def test_prefix_layout_and_validation(model: Pi05Model, prefix_a: PrefixInputs) -> None:
    cfg = model.config
    images = [camera(i) for i in range(3)]
    full = model.embed_prefix(images, list(range(cfg.max_prompt_tokens)))
    assert full.embeds.shape == (cfg.max_prefix_len, cfg.backbone.hidden_size) == (868, 256)
    assert full.token_ids[:768] == [cfg.image_token_id] * 768 and full.token_ids[768:] == list(range(100))
    assert full.image_hashes == [image_content_hash(im) for im in images]
    # state: one token per dim in the reserved top 256 ids; 0.1 -> bin 140, -0.5 -> 64, 0.9 -> 243
    assert prefix_a.token_ids[256:] == PROMPT_A + [cfg.vocab_size - 256 + b for b in (140, 64, 243)]
    other = model.embed_prefix([camera(9)], PROMPT_A, state=STATE_A)
    assert other.token_ids == prefix_a.token_ids and other.image_hashes != prefix_a.image_hashes
    for images, prompt, state, message in [
        ([], list(range(101)), None, "more than 100"),
        ([], list(range(98)), [0.0] * 3, "more than 100"),
        ([camera(0)] * 4, [1], None, "at most 3 images"),
        ([], [cfg.vocab_size], None, "token ids must lie in"),
        ([], [], None, "empty prefix"),
        ([np.zeros((4, 4), np.uint8)], [1], None, "HxWx3"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.embed_prefix(images, prompt, state)


def test_actions_read_the_prefix_from_the_pool_like_dense_attention(
    model: Pi05Model, prefix_a: PrefixInputs, prefix_b: PrefixInputs
) -> None:
    """Rows 0 and 1 share prefix A's blocks (different noise), row 2 has prefix B: each equals the dense reference,
    and sampling leaves the pool untouched (the expert's K/V is never stored)."""
    kv = fresh_pool(model)
    blocks_a, blocks_b = scattered_blocks(17, 0)[:17], scattered_blocks(128, 0)[17:51]
    prefill(model, kv, prefix_a, blocks_a)
    prefill(model, kv, prefix_b, blocks_b)
    before = [t.clone() for layer in kv.layers for t in (layer.blocks.k, layer.blocks.v)]
    noise = torch.randn(3, 10, 32, generator=torch.Generator().manual_seed(3))
    lens = [len(prefix_a.token_ids)] * 2 + [len(prefix_b.token_ids)]
    actions = model.sample_actions(block_tables([blocks_a, blocks_a, blocks_b]), lens, kv, num_steps=4, noise=noise)
    after = [t for layer in kv.layers for t in (layer.blocks.k, layer.blocks.v)]
    assert all(torch.equal(b, a) for b, a in zip(before, after, strict=True))
    kv_a, kv_b = dense_backbone(model, prefix_a, [])[1], dense_backbone(model, prefix_b, [])[1]
    for row, prefix_kv in enumerate([kv_a, kv_a, kv_b]):
        expected = dense_actions(model, prefix_kv, noise[row], steps=4)
        torch.testing.assert_close(actions[row], expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(actions[0], actions[1])


@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32), reason="oneDNN packing is unavailable")
def test_packed_layers_sample_the_chunk_the_loaded_ones_do(model: Pi05Model, prefix_a: PrefixInputs) -> None:
    """The backbone and the action expert fused and prepacked (as the engine serves a policy on a CPU; packing again
    changes nothing): the same prefix K/V and, over four flow steps whose time enters every adaptive norm, the same
    chunk as the layers as loaded, to fp32 summation order."""
    packed = copy.deepcopy(model)
    packed.pack_weights()
    packed.pack_weights()
    assert all(isinstance(layer.mlp.gate_up_proj, PackedLinear) and isinstance(layer.input_layernorm.dense, PackedLinear)
               for layer in packed.expert.layers)  # fmt: skip
    blocks, noise = list(range(17)), torch.randn(2, 10, 32, generator=torch.Generator().manual_seed(5))
    chunks, pools = [], []
    for policy in (model, packed):
        kv = fresh_pool(policy)
        prefill(policy, kv, prefix_a, blocks)
        lens = [len(prefix_a.token_ids)] * 2
        chunks.append(policy.sample_actions(block_tables([blocks, blocks]), lens, kv, num_steps=4, noise=noise))
        pools.append(kv.layers[3].blocks.k)
    torch.testing.assert_close(pools[1], pools[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(chunks[1], chunks[0], atol=1e-5, rtol=1e-5)
    assert chunks[0].abs().max() > 0.1


@pytest.mark.skipif(not can_pack(torch.device("cpu"), torch.float32) or library() is None,
                    reason="oneDNN packing or the C kernels do not run here")  # fmt: skip
@pytest.mark.parametrize("rows", [1, 2])
def test_language_decode_steps_run_the_backbone_in_one_c_call(model: Pi05Model, prefix_a: PrefixInputs,
                                                               prefix_b: PrefixInputs, rows: int) -> None:  # fmt: skip
    """Packed, the backbone decodes a lone language token, or one for each of two sequences of different frames and
    lengths, through the one-call C decoder (Gemma's GeGLU and 1 + w norms, MQA at head_dim 256): its logits and
    the K/V it stores are the layer-by-layer model's, and it is the C decoder that ran (taking it away changes
    nothing but who computes)."""
    packed = copy.deepcopy(model)
    packed.pack_weights()
    prefixes, tables, tokens = [prefix_a, prefix_b][:rows], [list(range(17)), list(range(17, 51))][:rows], [42, 7][:rows]
    lengths = [len(prefix.token_ids) for prefix in prefixes]
    outputs, keys = [], []
    for policy in (model, packed):
        kv = fresh_pool(policy)
        for prefix, blocks in zip(prefixes, tables, strict=True):
            prefill(policy, kv, prefix, blocks)
        ctx, positions = kv.steps.batch(tables, lengths, [1] * rows, [0] * rows)
        assert ctx.row_decode  # the step builder asks for the one-call decoder
        with torch.inference_mode():
            outputs.append(policy.compute_logits(policy(torch.tensor(tokens), positions, ctx, kv)))
        keys.append(torch.stack([layer.blocks.k.flatten(0, 1)[ctx.slot_mapping] for layer in kv.layers]))
        if policy is packed:
            assert packed.backbone._build_row_decoder(kv) is not None and packed.backbone.packed_head is not None
        else:
            assert model.backbone._build_row_decoder(kv) is None  # as loaded: no row-major rows to read
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(keys[1], keys[0], atol=1e-5, rtol=1e-5)
    assert outputs[0].shape[0] == rows and outputs[0].abs().max() > 0.1


def test_action_chunk_is_seeded_and_depends_on_the_image(model: Pi05Model, prefix_a: PrefixInputs) -> None:
    kv = fresh_pool(model)
    blocks, other_blocks = list(range(17)), list(range(17, 34))
    prefill(model, kv, prefix_a, blocks)
    prefill(model, kv, model.embed_prefix([camera(4)], PROMPT_A, state=STATE_A), other_blocks)
    tables, lens = block_tables([blocks]), [len(prefix_a.token_ids)]

    def sample(seed: int, tables: torch.Tensor = tables) -> torch.Tensor:
        return model.sample_actions(tables, lens, kv, generator=torch.Generator().manual_seed(seed))

    first = sample(7)
    assert first.shape == (1, 10, 32) and first.dtype == torch.float32 and torch.isfinite(first).all()
    assert torch.equal(first, sample(7))
    assert not torch.allclose(first, sample(8))
    assert (first - sample(7, block_tables([other_blocks]))).abs().max() > 1e-3


def test_language_decode_from_the_pool_matches_dense(
    model: Pi05Model, prefix_a: PrefixInputs, prefix_b: PrefixInputs
) -> None:
    """Both prefixes prefilled in one ragged step (image tokens bidirectional), then 6 greedy tokens each as one decode batch (A's
    decode crosses a block boundary); every step's logits equal a from-scratch dense pass over [prefix | tokens]."""
    kv = fresh_pool(model)
    prefixes = [prefix_a, prefix_b]
    tables = [scattered_blocks(18, 1), scattered_blocks(128, 1)[18:53]]
    lens = [len(p.token_ids) for p in prefixes]
    ctx, positions = kv.steps.batch(tables, [0, 0], lens, [image_len(p) for p in prefixes])
    ids = torch.tensor([i for p in prefixes for i in p.token_ids])  # image placeholders: never looked up
    with torch.no_grad():
        hidden = model(ids, positions, ctx, kv, input_embeds=torch.cat([p.embeds for p in prefixes]))
        logits = [model.compute_logits(hidden[[lens[0] - 1, sum(lens) - 1]])]
        generated: list[list[int]] = [[], []]
        for step in range(6):
            tokens = logits[-1].argmax(-1).tolist()
            for seq, tok in enumerate(tokens):
                generated[seq].append(tok)
            pos = [n + step for n in lens]
            ctx, positions = kv.steps.batch(tables, pos, [1, 1], [0, 0])
            logits.append(model.compute_logits(model(torch.tensor(tokens), positions, ctx, kv)))
    pool_logits = torch.stack(logits, dim=1)  # [2 seqs, 7 steps, vocab]
    for seq, prefix in enumerate(prefixes):
        hidden = dense_backbone(model, prefix, generated[seq])[0]
        dense = hidden[lens[seq] - 1 :] @ model.backbone.embed_tokens.weight.T
        torch.testing.assert_close(pool_logits[seq], dense, atol=1e-4, rtol=1e-5)
