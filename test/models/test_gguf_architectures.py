"""Any GGUF file of the llama, qwen2 or qwen3 architecture is a model (``model: /path/file.gguf``): tiny random ones
written with the ``gguf`` package's writer (SmolLM2's vocabulary, with the pre-tokenizers Llama 3 and Qwen files
name: ``llama-bpe``, ``qwen2``), loaded by us and by transformers' own GGUF loader: the tokenizer's ids are equal on
mixed text (code, accents, emoji, numbers) and the engine's greedy answers token for token; Qwen2's biases and
Qwen3's q/k norms come from the file. What we do not run is refused at load naming it."""

from collections.abc import Callable, Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from gguf_files import Shape, smollm2_vocabulary, write_gguf
from hf_reference import hf_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kernels.cpu_matvec import Q4_1, dequantize_q4_1, matvec_kernel
from oxygen_ros.models.registry import load_model

HIDDEN, FF, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
HEAD_DIMS = {"llama": 16, "qwen2": 16, "qwen3": 128}  # transformers' qwen3 GGUF mapping assumes Qwen3's head_dim 128
NEW_TOKENS = 10
FILES = {"llama": "llama-bpe", "qwen2": "qwen2", "qwen3": "qwen2"}  # architecture -> tokenizer.ggml.pre
TEXTS = ["def f(x):\n    return x ** 2  # 12345678", "Crème brûlée à la carte, naïve façade", "robot 🤖 says hi 👋🏽!",
         "3.14159 + 2,718 = 5.86  \t\n\n  spaced", "I'll say they're here; we've 100s of 'em"]  # fmt: skip
PROMPTS = ["The robot picked up the red block and", "x = 12345 * 3.5\n", "Où est le chargeur ? Il était"]


def _tensors(arch: str, vocabulary: int) -> Iterator[tuple[str, np.ndarray]]:
    """Random weights of a tiny model of ``arch`` under llama.cpp's tensor names."""
    head_dim = HEAD_DIMS[arch]
    rng = np.random.default_rng(3)

    def tensor(name: str, shape: tuple[int, ...], std: float = 0.2, mean: float = 0.0) -> tuple[str, np.ndarray]:
        return name, (mean + std * rng.standard_normal(shape)).astype(np.float32)

    yield tensor("token_embd.weight", (vocabulary, HIDDEN), 1.0)
    yield tensor("output.weight", (vocabulary, HIDDEN))
    yield tensor("output_norm.weight", (HIDDEN,), 0.1, 1.0)
    for i in range(LAYERS):
        b = f"blk.{i}"
        for name, shape in (("attn_q", (HEADS * head_dim, HIDDEN)), ("attn_k", (KV_HEADS * head_dim, HIDDEN)),
                            ("attn_v", (KV_HEADS * head_dim, HIDDEN)), ("attn_output", (HIDDEN, HEADS * head_dim)),
                            ("ffn_gate", (FF, HIDDEN)), ("ffn_up", (FF, HIDDEN)), ("ffn_down", (HIDDEN, FF))):  # fmt: skip
            yield tensor(f"{b}.{name}.weight", shape)
        yield tensor(f"{b}.attn_norm.weight", (HIDDEN,), 0.1, 1.0)
        yield tensor(f"{b}.ffn_norm.weight", (HIDDEN,), 0.1, 1.0)
        if arch == "qwen2":
            for name, rows in (("attn_q", HEADS * head_dim), ("attn_k", KV_HEADS * head_dim),
                               ("attn_v", KV_HEADS * head_dim)):  # fmt: skip
                yield tensor(f"{b}.{name}.bias", (rows,), 0.1)
        if arch == "qwen3":
            yield tensor(f"{b}.attn_q_norm.weight", (head_dim,), 0.1, 1.0)
            yield tensor(f"{b}.attn_k_norm.weight", (head_dim,), 0.1, 1.0)


def _write(path: Path, arch: str, pre: str, q4_0: Callable[[str], bool] = lambda name: False) -> None:
    shape = Shape(layers=LAYERS, context=512, hidden=HIDDEN, ff=FF, heads=HEADS, kv_heads=KV_HEADS,
                  head_dim=HEAD_DIMS[arch], rope_base=1e6 if arch != "llama" else 5e5, rms_eps=1e-6)  # fmt: skip
    write_gguf(path, arch, shape, _tensors(arch, len(smollm2_vocabulary())), pre, q4_0)


@pytest.fixture(scope="module", params=list(FILES))
def written(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / f"tiny-{request.param}.gguf"
    _write(path, request.param, FILES[request.param])
    theirs = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return request.param, path, theirs, model


def test_the_tokenizer_equals_transformers_gguf_tokenizer(written):
    _, path, theirs, _ = written
    ours = load_model(str(path), torch.device("cpu"), torch.float32).tokenizer
    for text in TEXTS:
        assert ours.encode(text) == theirs.encode(text, add_special_tokens=False), text


def test_greedy_answers_equal_transformers_gguf_loader(written):
    arch, path, theirs, model = written
    bundle = load_model(str(path), torch.device("cpu"), torch.float32)
    args = bundle.model.args
    assert (args.family, args.attention_bias, args.qk_norm) == (arch, arch == "qwen2", arch == "qwen3")
    expected = [hf_greedy(model, theirs, bundle.tokenizer.encode(p), NEW_TOKENS) for p in PROMPTS]
    assert len({tuple(e) for e in expected}) == len(PROMPTS) and all(len(set(e)) > 2 for e in expected)
    sampling = SamplingParams(max_new_tokens=NEW_TOKENS)
    outs = make_engine(bundle).generate([GenerateRequest(p, chat=False, sampling=sampling) for p in PROMPTS])
    assert [o.token_ids for o in outs] == expected


def test_what_we_do_not_run_is_refused_naming_it(tmp_path):
    path = tmp_path / "gemma.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma2")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(EngineError, match="unsupported GGUF architecture 'gemma2'") as err:
        load_model(str(path), torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(EngineError, match="does not exist") as err:
        load_model(str(tmp_path / "absent.gguf"), torch.device("cpu"), torch.float32)
    assert err.value.code == ErrorCode.NOT_FOUND


@pytest.mark.skipif(matvec_kernel() is None, reason="the C kernels do not run here")
def test_a_q4_0_file_served_as_q4_1_rows_keeps_its_values_and_answers_as_fp32(tmp_path):
    """A llama file whose projections are Q4_0 blocks (as llama.cpp's quantizer writes them; many blocks' codes do
    not reach both 0 and 15): its Q4_1 rows (``weight_dtype: q4_1``) stand for the very values the fp32 load reads
    from the file, and the engine's greedy answers, batched and alone, are the fp32 load's token for token."""
    path = tmp_path / "tiny-q4_0.gguf"
    _write(path, "llama", FILES["llama"], q4_0=lambda name: name.startswith("blk.") and "norm" not in name)
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.Q4_0
    fp32 = load_model(str(path), torch.device("cpu"), torch.float32)
    q4_1 = load_model(str(path), torch.device("cpu"), torch.float32, weight_dtype=Q4_1)
    for ours, reference in zip(q4_1.model.layers, fp32.model.layers, strict=True):
        for name in ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
            rows, weight = ours.get_submodule(name).rows, reference.get_submodule(name).rows  # fp32 rows of the file
            assert rows.dtype == Q4_1 and weight.dtype == torch.float32
            assert torch.equal(dequantize_q4_1(rows), weight), name
    sampling = SamplingParams(max_new_tokens=NEW_TOKENS)
    answers = []
    for bundle in (q4_1, fp32):
        engine = make_engine(bundle)
        batched = engine.generate([GenerateRequest(p, chat=False, sampling=sampling) for p in PROMPTS])
        alone = engine.generate([GenerateRequest(PROMPTS[0], chat=False, sampling=sampling)])
        answers.append([out.token_ids for out in batched + alone])
    assert answers[0] == answers[1]
