"""Llama 3.x (scaled RoPE: ``llama3`` and ``linear``), Qwen3 (an RMSNorm over each head of q and k) and SmolLM3
(layers without RoPE) through the engine, token for token equal to transformers' greedy output on tiny random models
saved with ``save_pretrained``: several prompts one at a time and as one ragged batch, a shared prefix served from
the cache, and preemption under a pool too small for all of them at once. The Llama 3.1 and SmolLM3 checkpoints
written as GGUF files the way llama.cpp's converter writes them (its tensor names from the ``gguf`` package, q/k rows
interleaved, Llama 3.1's scaling as a ``rope_freqs`` tensor, SmolLM3's every-fourth-layer NoPE) answer the same, in
fp32 and loaded as bf16. A RoPE type we do not run is refused at load, naming it."""

import json
import math
from collections.abc import Iterator

import gguf
import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from gguf_files import Shape, write_gguf
from hf_reference import hf_greedy, random_causal_lm
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, SmolLM3Config

from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.layers.rotary import RotaryEmbedding
from oxygen_ros.models.registry import load_model

NEW_TOKENS = 12
SHAPES = {"vocab_size": 49152, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 512,
          "tie_word_embeddings": False, "rms_norm_eps": 1e-6}  # fmt: skip
ARCHITECTURES = {
    # original_max_position_embeddings 32: positions past it are where llama3 scaling changes the angles
    "llama3": (LlamaConfig, {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                 "original_max_position_embeddings": 32}}),
    "linear": (LlamaConfig, {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}}),
    "qwen3": (Qwen3Config, {"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}),
    "smollm3": (SmolLM3Config, {"no_rope_layers": [1, 1, 0, 1], "rope_parameters": {"rope_type": "default",
                                                                                   "rope_theta": 2000000.0}}),
}  # fmt: skip
PREFIX = "The robot stands in a kitchen with a red cup, a blue plate and a green apple on the counter. " * 3
PROMPTS = [
    "Hello, robot.",
    "Where is the charger? It was in the hall yesterday, next to the door.",
    PREFIX + "What is red?",
    PREFIX + "Which object is green?",
    "x = 12345 * 3.5\n",
]


def _save(folder, kind: str, tokenizer, **overrides) -> None:
    config_class, extra = ARCHITECTURES[kind]
    tokens = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_ids[0],
              "pad_token_id": tokenizer.pad_token_id}  # fmt: skip
    config = config_class(**SHAPES, **tokens, **(extra | overrides))
    model = random_causal_lm(config, seed=7, std=0.2)
    model.save_pretrained(folder)
    tokenizer.save_hf(folder)


@pytest.fixture(scope="module", params=list(ARCHITECTURES))
def checkpoint(request, smollm2_bundle, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    _save(folder, request.param, smollm2_bundle.tokenizer)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = smollm2_bundle.tokenizer
    ids = [tokenizer.encode(p) for p in PROMPTS]
    expected = [hf_greedy(reference, _Pad(tokenizer.pad_token_id), i, NEW_TOKENS) for i in ids]
    bundle = load_model(str(folder), torch.device("cpu"), torch.float32)
    return request.param, bundle, ids, expected


class _Pad:
    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id


def _requests(prompts: list[str]) -> list[GenerateRequest]:
    """Raw prompts (no chat template): the ids the reference was given."""
    return [GenerateRequest(p, chat=False, sampling=SamplingParams(max_new_tokens=NEW_TOKENS)) for p in prompts]


def test_loaded_as_its_family(checkpoint):
    kind, bundle, _, _ = checkpoint
    args = bundle.model.args
    assert (args.rope_scaling is not None) == (kind in ("llama3", "linear"))
    assert args.qk_norm == (kind == "qwen3") and args.no_rope_layers == ((1, 1, 0, 1) if kind == "smollm3" else ())


def test_one_at_a_time_and_as_a_ragged_batch_equal_transformers(checkpoint):
    _, bundle, ids, expected = checkpoint
    engine = make_engine(bundle)
    alone = [engine.generate(_requests([p]))[0] for p in PROMPTS]
    assert [o.prompt_tokens for o in alone] == [len(i) for i in ids]
    assert [o.token_ids for o in alone] == expected
    batched = make_engine(bundle).generate(_requests(PROMPTS))
    assert [o.token_ids for o in batched] == expected
    assert max(o.reused_prefix_tokens for o in batched) > 0  # the shared kitchen prefix came from the cache


def test_preempted_requests_equal_transformers(checkpoint):
    _, bundle, _, expected = checkpoint
    engine = make_engine(bundle, kv_cache_bytes=14 * 16 * 2 * 2 * 16 * 4 * 4, max_model_len=160)  # 14 blocks
    outs = engine.generate(_requests(PROMPTS * 2))
    assert engine.kv_manager.costs.swapped + engine.kv_manager.costs.recomputed > 0, "the pool forced preemption"
    assert [o.token_ids for o in outs] == expected * 2
    engine.check_invariants()


def test_dynamic_and_yarn_rope_are_refused_naming_them(smollm2_bundle, tmp_path):
    _save(tmp_path, "llama3", smollm2_bundle.tokenizer)
    config = json.loads((tmp_path / "config.json").read_text())
    for rope in ({"rope_type": "dynamic", "factor": 2.0}, {"rope_type": "yarn", "factor": 4.0}):
        rope_type = rope["rope_type"]
        config.pop("rope_scaling", None)
        (tmp_path / "config.json").write_text(json.dumps(config | {"rope_parameters": rope | {"rope_theta": 1e4}}))
        with pytest.raises(EngineError, match=f"unsupported RoPE scaling '{rope_type}'") as err:
            load_model(str(tmp_path), torch.device("cpu"), torch.float32)
        assert err.value.code == ErrorCode.INVALID_ARGUMENT


def test_generation_config_stop_ids_end_answers_as_in_transformers(smollm2_bundle, tmp_path):
    """Llama 3 instruct folders list <|eot_id|> and <|eom_id|> beside EOS in generation_config.json; generation stops
    on any of them, as transformers' generate does."""
    tokenizer = smollm2_bundle.tokenizer
    _save(tmp_path, "llama3", tokenizer)
    pad = _Pad(tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    # a prompt whose answer decodes a new token after its first: that token becomes a stop id
    prompt, free, stop = next((p, free, t) for p in PROMPTS
                              for free in [hf_greedy(model, pad, tokenizer.encode(p), NEW_TOKENS)]
                              for i, t in enumerate(free) if i >= 1 and t not in free[:i])  # fmt: skip
    ids = tokenizer.encode(prompt)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [tokenizer.eos_token_id, stop]}))
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    expected = hf_greedy(reference, pad, ids, NEW_TOKENS)
    assert expected == free[: free.index(stop) + 1]
    bundle = load_model(str(tmp_path), torch.device("cpu"), torch.float32)
    assert stop in bundle.tokenizer.eos_token_ids
    (out,) = make_engine(bundle).generate(_requests([prompt]))
    assert out.token_ids == expected and out.finish_reason == "stop"


def _llama_cpp_permute(w: torch.Tensor, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: q/k rows interleaved for ggml's RoPE."""
    return w.numpy().reshape(n_head, 2, w.shape[0] // n_head // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def _llama_cpp_rope_freqs(rope: dict, head_dim: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors for rope_type llama3: one divisor per frequency."""
    base, factor, old_len = rope["rope_theta"], rope["factor"], rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / rope["low_freq_factor"], old_len / rope["high_freq_factor"]
    factors = []
    for freq in 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_len / wavelen - rope["low_freq_factor"]) / (
                rope["high_freq_factor"] - rope["low_freq_factor"]
            )
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)


def _write_gguf(folder, path, arch: gguf.MODEL_ARCH) -> None:
    """The checkpoint in ``folder`` as a GGUF file of ``arch``, as llama.cpp's converter writes it (gguf's tensor-name
    map, its q/k permutation, its rope_freqs), with SmolLM2's tokenizer (the vocabulary the checkpoint was made with)."""
    config = json.loads((folder / "config.json").read_text())
    rope, head_dim = config["rope_parameters"], config["head_dim"]
    heads, kv_heads, layers = config["num_attention_heads"], config["num_key_value_heads"], config["num_hidden_layers"]
    shape = Shape(layers=layers, context=config["max_position_embeddings"], hidden=config["hidden_size"],
                  ff=config["intermediate_size"], heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  rope_base=rope["rope_theta"], rms_eps=config["rms_norm_eps"])  # fmt: skip
    names = gguf.get_tensor_name_map(arch, layers)

    def tensors() -> Iterator[tuple[str, np.ndarray]]:
        for name, tensor in load_file(folder / "model.safetensors").items():
            ours = names.get_name(name, try_suffixes=(".weight", ".bias"))
            assert ours is not None, name
            if ours.endswith(("attn_q.weight", "attn_k.weight")):
                yield ours, _llama_cpp_permute(tensor, heads if ours.endswith("attn_q.weight") else kv_heads)
            else:
                yield ours, tensor.numpy()
        if rope.get("rope_type") == "llama3":
            yield "rope_freqs.weight", _llama_cpp_rope_freqs(rope, head_dim)

    write_gguf(path, gguf.MODEL_ARCH_NAMES[arch], shape, tensors())


@pytest.mark.parametrize(("kind", "arch", "overrides"), [
    ("llama3", gguf.MODEL_ARCH.LLAMA, {}),
    ("smollm3", gguf.MODEL_ARCH.SMOLLM3, {"no_rope_layers": [1, 1, 1, 0]}),  # llama.cpp's fixed every-fourth NoPE
], ids=["llama3.1", "smollm3"])  # fmt: skip
def test_a_gguf_file_written_as_llama_cpp_writes_it_answers_as_transformers(smollm2_bundle, tmp_path, kind, arch,
                                                                            overrides):  # fmt: skip
    tokenizer = smollm2_bundle.tokenizer
    _save(tmp_path, kind, tokenizer, **overrides)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = [tokenizer.encode(p) for p in PROMPTS]
    expected = [hf_greedy(reference, _Pad(tokenizer.pad_token_id), i, NEW_TOKENS) for i in ids]
    path = tmp_path / f"tiny-{kind}.gguf"
    _write_gguf(tmp_path, path, arch)
    bundle = load_model(str(path), torch.device("cpu"), torch.float32)
    args = bundle.model.args
    assert (args.rope_scaling.rope_type if args.rope_scaling else None) == (
        "freq_factors" if kind == "llama3" else None
    )
    assert args.no_rope_layers == ((1, 1, 1, 0) if kind == "smollm3" else ())
    assert [o.token_ids for o in make_engine(bundle).generate(_requests(PROMPTS))] == expected
    if kind == "llama3":  # the factors decide answers: running without them, as transformers' GGUF loader does, differs
        unscaled = load_model(str(path), torch.device("cpu"), torch.float32)
        unscaled.model.rotary = RotaryEmbedding(args.head_dim, args.rope_theta)
        assert [o.token_ids for o in make_engine(unscaled).generate(_requests(PROMPTS))] != expected
    bf16 = load_model(str(path), torch.device("cpu"), torch.bfloat16)
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
