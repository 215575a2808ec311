"""The one-call decoder (``kernels/cpu/llama_decode_row.c``) against the layer-by-layer torch path it replaces, on a
random Llama-shaped model over a pool whose blocks are scattered: each token's output, the K/V it stores and the
attention mass per block must agree, for GQA and MHA, with and without q/k/v biases (Qwen2), a context ending inside a
block and exactly at its end, and for a step of several sequences sharing a prefix block (the layer path attends the
shared block once for them all, the one-call decoder row by row); with bf16 projection weights it must equal the fp32
decoder on the same weights rounded to bf16 (the weights are widened exactly; only fp32 sums differ). (The real SmolLM2 against transformers, token for token,
runs through this path too: test/engine/test_smollm2_vs_hf.py.)"""

import pytest
import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.kv.attention_backend import choose_backend
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout
from oxygen_ros.kv.step_context import StepContext
from oxygen_ros.kernels.cpu_decode_row import MAX_ROWS
from oxygen_ros.kernels.cpu_library import library
from oxygen_ros.kernels.cpu_matvec import Q4_1, dequantize_q4_1, quantize_q4_1
from oxygen_ros.models.args import LlamaArgs
from oxygen_ros.models.llama import LlamaModel

pytestmark = pytest.mark.skipif(library() is None, reason="the CPU decode kernels do not run here (no AVX-512 / AVX2 / NEON, or no cc)")
BLOCK = 16
TABLE = [5, 2, 9, 0, 7]  # scattered and out of order: read through the table, never as a run


def _model(heads: int, kv_heads: int, head_dim: int, bias: bool, weight_dtype: torch.dtype | None = None,
           rounded: bool = False, q4_1_grid: bool = False, intermediate: int = 200) -> LlamaModel:  # fmt: skip
    """A random model; ``rounded``: its projections' values bf16's, ``q4_1_grid``: Q4_1 blocks' (whose rows hold
    whole blocks of 32: an ``intermediate`` width that 32 divides)."""
    torch.manual_seed(heads * 100 + kv_heads * 10 + head_dim + bias)
    args = LlamaArgs(vocab_size=97, hidden_size=heads * head_dim, intermediate_size=intermediate,
                     num_layers=3, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                     attention_bias=bias)  # fmt: skip
    model = LlamaModel(args).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)  # norms and biases too: nothing left at 1 / 0 by construction
        for name, p in model.named_parameters():
            if rounded and name.endswith("_proj.weight"):
                p.copy_(p.bfloat16())  # the projections' values as bf16 holds them (embeddings stay fp32)
            if q4_1_grid and name.endswith("_proj.weight"):
                p.copy_(dequantize_q4_1(quantize_q4_1(p)))
    model.pack_weights(weight_dtype)
    return model


def _context(kv: KVCache, tokens: list[int], start: int, with_mass: bool) -> tuple[StepContext, torch.Tensor]:
    ctx, positions = kv.steps.batch([TABLE], [start], [len(tokens)], [0])
    if with_mass:
        ctx.block_mass = torch.zeros(1, len(TABLE))
    return ctx, positions


def _decode(model: LlamaModel, prompt: list[int], token: int, row_path: bool,
            prefill: LlamaModel | None = None) -> tuple[torch.Tensor, KVCache, torch.Tensor]:  # fmt: skip
    """(the decode token's output, the pool after it, the block mass of its step) from a fresh pool, the prompt
    prefilled by ``prefill`` (default: the model itself)."""
    kv = _pool(model)
    with torch.inference_mode():
        ctx, positions = _context(kv, prompt, 0, with_mass=False)
        (prefill or model)(torch.tensor(prompt), positions, ctx, kv)  # prefill: layer by layer either way
        ctx, positions = _context(kv, [token], len(prompt), with_mass=True)
        assert ctx.row_decode
        ctx.row_decode = row_path
        out = model(torch.tensor([token]), positions, ctx, kv)
    return out, kv, ctx.block_mass


def _pool(model: LlamaModel, blocks: int = 10) -> KVCache:
    a = model.args
    return KVCache(KVLayout(a.num_layers, a.num_kv_heads, a.head_dim, BLOCK, torch.float32), blocks,
                   torch.device("cpu"))  # fmt: skip


@pytest.mark.parametrize("heads,kv_heads,head_dim,bias", [(4, 2, 32, False), (3, 3, 64, True), (6, 2, 16, True)])
@pytest.mark.parametrize("prompt_len", [40, 47])  # the decode token ends inside the third block / fills it
def test_row_decoder_equals_layer_by_layer(heads, kv_heads, head_dim, bias, prompt_len):
    model = _model(heads, kv_heads, head_dim, bias)
    assert model._build_row_decoder(_pool(model, 2)) is not None
    gen = torch.Generator().manual_seed(prompt_len)
    prompt = torch.randint(0, 97, (prompt_len,), generator=gen).tolist()
    fast, fast_kv, fast_mass = _decode(model, prompt, 11, row_path=True)
    slow, slow_kv, slow_mass = _decode(model, prompt, 11, row_path=False)
    torch.testing.assert_close(fast, slow, atol=2e-5, rtol=1e-5)
    slot = TABLE[prompt_len // BLOCK] * BLOCK + prompt_len % BLOCK
    for fast_layer, slow_layer in zip(fast_kv.layers, slow_kv.layers, strict=True):
        for a, b in ((fast_layer.blocks.k, slow_layer.blocks.k), (fast_layer.blocks.v, slow_layer.blocks.v)):
            flat_a, flat_b = a.flatten(0, 1), b.flatten(0, 1)
            torch.testing.assert_close(flat_a[slot], flat_b[slot], atol=1e-5, rtol=1e-5)  # the new token's K/V
            assert flat_a[slot].abs().sum() > 0
    assert fast_mass[0].sum().item() == pytest.approx(model.args.num_layers * heads, rel=1e-5)  # each head sums to 1
    torch.testing.assert_close(fast_mass, slow_mass, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("heads,kv_heads,head_dim,bias", [(4, 2, 32, False), (3, 3, 64, True)])
def test_row_decoder_with_bf16_weights_equals_fp32_on_the_rounded_weights(heads, kv_heads, head_dim, bias):
    bf16 = _model(heads, kv_heads, head_dim, bias, weight_dtype=torch.bfloat16)
    fp32 = _model(heads, kv_heads, head_dim, bias, rounded=True)
    assert bf16.layers[0].self_attn.qkv_proj.rows.dtype == torch.bfloat16
    assert bf16._build_row_decoder(_pool(bf16, 2)) is not None  # the one-call decoder reads bf16 rows
    prompt = torch.randint(0, 97, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    for row_path in (True, False):  # the one-call decoder and the layer-by-layer one-row products alike
        # the prompt prefilled by the fp32 model for both: a multi-row bf16 product rounds its inputs (the option's
        # loss, test_cpu_matvec), a one-row one does not
        out, kv, mass = _decode(bf16, prompt, 11, row_path=row_path, prefill=fp32)
        ref, ref_kv, ref_mass = _decode(fp32, prompt, 11, row_path=row_path)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)
        torch.testing.assert_close(mass, ref_mass, atol=1e-5, rtol=1e-5)
    unrounded = _model(heads, kv_heads, head_dim, bias)
    assert (out - _decode(unrounded, prompt, 11, row_path=True, prefill=fp32)[0]).abs().max() > 1e-4  # not fp32


@pytest.mark.parametrize("heads,kv_heads,head_dim,bias", [(4, 2, 32, False), (3, 3, 64, True)])
def test_row_decoder_with_int8_weights_equals_the_layer_by_layer_int8_products(heads, kv_heads, head_dim, bias):
    """int8 rows and their scales through the one-call decoder: the same token output, K/V and block mass as the
    layer-by-layer path's one-row int8 products over the same model (the LM head is int8 too), and not fp32's."""
    model = _model(heads, kv_heads, head_dim, bias, weight_dtype=torch.int8)
    assert model.layers[0].mlp.down_proj.rows.dtype == model.packed_head.rows.dtype == torch.int8
    assert model._build_row_decoder(_pool(model, 2)) is not None
    prompt = torch.randint(0, 97, (47,), generator=torch.Generator().manual_seed(4)).tolist()
    fast, fast_kv, fast_mass = _decode(model, prompt, 11, row_path=True)
    slow, slow_kv, slow_mass = _decode(model, prompt, 11, row_path=False)
    torch.testing.assert_close(fast, slow, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fast_mass, slow_mass, atol=1e-5, rtol=1e-5)
    slot = TABLE[47 // BLOCK] * BLOCK + 47 % BLOCK
    for fast_layer, slow_layer in zip(fast_kv.layers, slow_kv.layers, strict=True):
        torch.testing.assert_close(fast_layer.blocks.k.flatten(0, 1)[slot], slow_layer.blocks.k.flatten(0, 1)[slot],
                                   atol=1e-5, rtol=1e-5)  # fmt: skip
    fp32 = _model(heads, kv_heads, head_dim, bias)
    assert (fast - _decode(fp32, prompt, 11, row_path=True)[0]).abs().max() > 1e-4  # int8 is not fp32


@pytest.mark.parametrize("heads,kv_heads,head_dim,bias", [(4, 2, 32, False), (3, 3, 64, True)])
def test_row_decoder_with_q4_1_blocks_equals_fp32_on_the_values_they_stand_for(heads, kv_heads, head_dim, bias):
    """Q4_1 blocks through the one-call decoder, over weights on the Q4_1 grid (as a Q4_1 GGUF's are): the fp32
    decoder's output, K/V and block mass bit for bit (the same products over the same values), and not the output
    of weights off the grid."""
    model = _model(heads, kv_heads, head_dim, bias, weight_dtype=Q4_1, q4_1_grid=True, intermediate=224)
    assert model.layers[0].mlp.down_proj.rows.dtype == Q4_1 and model.packed_head.rows.dtype == torch.int8
    fp32 = _model(heads, kv_heads, head_dim, bias, q4_1_grid=True, intermediate=224)
    prompt = torch.randint(0, 97, (47,), generator=torch.Generator().manual_seed(4)).tolist()
    fast, fast_kv, fast_mass = _decode(model, prompt, 11, row_path=True)
    ref, ref_kv, ref_mass = _decode(fp32, prompt, 11, row_path=True)
    assert torch.equal(fast, ref) and torch.equal(fast_mass, ref_mass)
    for fast_layer, ref_layer in zip(fast_kv.layers, ref_kv.layers, strict=True):
        assert torch.equal(fast_layer.blocks.k, ref_layer.blocks.k) and torch.equal(fast_layer.blocks.v, ref_layer.blocks.v)
    off_grid = _model(heads, kv_heads, head_dim, bias, intermediate=224)
    assert (fast - _decode(off_grid, prompt, 11, row_path=True)[0]).abs().max() > 1e-3


def test_row_decoder_declines_what_it_cannot_read():
    model = _model(4, 2, 32, False)
    cpu, fp32 = torch.device("cpu"), KVLayout(3, 2, 32, BLOCK, torch.float32)
    int8 = KVCache(KVLayout(3, 2, 32, BLOCK, torch.int8), 2, cpu)
    assert model._build_row_decoder(int8) is None  # quantized pools decode layer by layer
    off = KVCache(fp32, 2, cpu, backend=choose_backend(EngineConfig(cpu_decode_row=False), cpu))
    assert model._build_row_decoder(off) is None
    ctx, _ = off.steps.batch([TABLE], [40], [1], [0])
    assert ctx.is_decode and not ctx.row_decode  # the step builder does not ask for it either
    on = KVCache(fp32, 2, cpu)
    assert on.steps.batch([TABLE], [40], [1], [0])[0].row_decode
    assert on.steps.batch([TABLE] * MAX_ROWS, [40] * MAX_ROWS, [1] * MAX_ROWS, [0] * MAX_ROWS)[0].row_decode
    rows = MAX_ROWS + 1  # more rows than one pass over the weights serves: layer by layer (oneDNN's products)
    assert not on.steps.batch([TABLE] * rows, [40] * rows, [1] * rows, [0] * rows)[0].row_decode
    assert not on.steps.batch([TABLE, TABLE], [40, 40], [1, 2], [0, 0])[0].row_decode  # a prefill among them


def test_the_kernel_refuses_contexts_and_slots_outside_the_pool():
    """What the step builder never passes, the kernel's wrapper still refuses before C reads it: a context longer than
    its table, a slot or a block outside the pool, more rows than one pass serves."""
    model = _model(4, 2, 32, False)
    stack = model._build_row_decoder(_pool(model, 4))._stack  # 4 blocks of 16: slots 0 .. 63
    h, angles, tables = torch.randn(2, 128), torch.randn(2, 32), torch.tensor([[0, 1], [2, 3]])
    stack(h, angles, angles, tables, torch.tensor([5, 3]), torch.tensor([4, 34]), None)  # in bounds: runs
    bad = [(tables, [5, 40], [4, 39]), (tables, [5, 3], [4, 64]), (tables, [5, 3], [-1, 34]),
           (torch.tensor([[0, 1], [2, 4]]), [5, 20], [4, 35])]  # fmt: skip
    for table, lengths, slots in bad:
        with pytest.raises(ValueError, match="outside a pool of 64 slots"):
            stack(h, angles, angles, table, torch.tensor(lengths), torch.tensor(slots), None)
    rows = MAX_ROWS + 1
    with pytest.raises(ValueError, match=f"1 to {MAX_ROWS} rows"):
        stack(torch.randn(rows, 128), torch.randn(rows, 32), torch.randn(rows, 32), torch.zeros(rows, 2, dtype=torch.long),
              torch.ones(rows, dtype=torch.long), torch.zeros(rows, dtype=torch.long), None)  # fmt: skip


SHARED_TABLES = [[5, 2, 9], [5, 7, 3], [5, 1], [5, 0, 4, 6], [5, 8]]  # one prefix block, then each its own


@pytest.mark.parametrize("rows", [2, 5])
@pytest.mark.parametrize("heads,kv_heads,head_dim,bias,weight_dtype", [(4, 2, 32, False, None),
                                                                       (3, 3, 64, True, torch.int8)])
def test_a_step_of_several_sequences_equals_layer_by_layer(rows, heads, kv_heads, head_dim, bias, weight_dtype):
    """Decode tokens of ``rows`` sequences of different lengths (inside a block, at its end, at a new block's first
    slot) that share their first block, in one C call: each row's output, the K/V at its slot and its blocks' mass
    equal the layer-by-layer step's (whose attention reads the shared block once for all rows)."""
    model = _model(heads, kv_heads, head_dim, bias, weight_dtype=weight_dtype)
    gen = torch.Generator().manual_seed(rows)
    prefix = torch.randint(0, 97, (BLOCK,), generator=gen).tolist()
    lengths = [40, 47, 31, 48, 17][:rows]  # tokens before the decode token
    prompts = [prefix + torch.randint(0, 97, (n - BLOCK,), generator=gen).tolist() for n in lengths]
    tables = SHARED_TABLES[:rows]
    results = []
    for row_path in (True, False):
        kv = _pool(model)
        with torch.inference_mode():
            for i, (table, prompt) in enumerate(zip(tables, prompts, strict=True)):
                start = 0 if i == 0 else BLOCK  # the shared block is the first sequence's
                ctx, positions = kv.steps.batch([table], [start], [len(prompt) - start], [0])
                model(torch.tensor(prompt[start:]), positions, ctx, kv)
            ctx, positions = kv.steps.batch(tables, lengths, [1] * rows, [0] * rows)
            ctx.block_mass = torch.zeros(rows, ctx.block_tables.shape[1])
            assert ctx.row_decode
            ctx.row_decode = row_path
            out = model(torch.tensor([11 + i for i in range(rows)]), positions, ctx, kv)
        results.append((out, kv, ctx))
    (fast, fast_kv, fast_ctx), (slow, slow_kv, slow_ctx) = results
    assert fast.shape == (rows, model.args.hidden_size)
    torch.testing.assert_close(fast, slow, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(fast_ctx.block_mass, slow_ctx.block_mass, atol=1e-5, rtol=1e-5)
    assert fast_ctx.block_mass.sum(1).tolist() == pytest.approx([model.args.num_layers * heads] * rows, rel=1e-5)
    for fast_layer, slow_layer in zip(fast_kv.layers, slow_kv.layers, strict=True):
        for a, b in ((fast_layer.blocks.k, slow_layer.blocks.k), (fast_layer.blocks.v, slow_layer.blocks.v)):
            slots = fast_ctx.slot_mapping
            torch.testing.assert_close(a.flatten(0, 1)[slots], b.flatten(0, 1)[slots], atol=1e-5, rtol=1e-5)
    one = _decode(model, prompts[1], 12, row_path=True)[0]  # row 1 alone, from its own pool
    # alone, an int8 product codes its one input row to int16 (1/65534 of each group of 32's largest): ~1e-4 here
    torch.testing.assert_close(fast[1:2], one, atol=2e-5 if weight_dtype is None else 5e-4, rtol=1e-5)
