"""A step's layers build no tensor from host data and read nothing back to the host: what they need about the batch
is in the step context, built once before the first layer (on a GPU each such call would stall the step once per
layer, thirty times a token).  Checked by spying on the calls that do either while the decoder layers run, and on
the aten ops that make the host wait (a boolean mask's nonzero, a scalar read)."""

import pytest
import torch
import torch.utils._pytree as pytree
from engine_helpers import make_engine
from torch.utils._python_dispatch import TorchDispatchMode

from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.model_runner import ATTENTION_MASS_EVERY
from oxygen_ros.engine.sampling_params import SamplingParams

BUILDERS = ("tensor", "as_tensor", "arange", "full", "from_numpy", "linspace")
HOST_READS = ("tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu")
# aten ops whose result size or value the host must wait for (a boolean mask's nonzero, a scalar read)
SYNCING_OPS = ("aten.nonzero", "aten._local_scalar_dense", "aten.masked_select", "aten.unique")


class _SyncingOps(TorchDispatchMode):
    """Records the syncing aten ops, and indexing by a boolean mask (which runs nonzero inside), dispatched while
    it is active."""

    def __init__(self, calls: list[str]) -> None:
        super().__init__()
        self.calls = calls

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        masks = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor) and a.dtype == torch.bool]
        if name in SYNCING_OPS or (name.startswith("aten.index") and masks):
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def _spy_on_layers(model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list]:
    """(names of the spied calls made between the first decoder layer's start and the last one's end, the hooks
    that mark that span: remove them after)."""
    calls: list[str] = []
    inside = [False]

    def spy(name: str, fn):
        def wrapper(*args, **kwargs):
            if inside[0]:
                calls.append(name)
            return fn(*args, **kwargs)

        return wrapper

    for name in BUILDERS:
        monkeypatch.setattr(torch, name, spy(f"torch.{name}", getattr(torch, name)))
    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, spy(f"Tensor.{name}", getattr(torch.Tensor, name)))
    mode = _SyncingOps(calls)

    def enter(*_) -> None:
        inside[0] = True
        mode.__enter__()

    def leave(*_) -> None:
        mode.__exit__(None, None, None)
        inside[0] = False

    hooks = [model.layers[0].register_forward_pre_hook(enter), model.layers[-1].register_forward_hook(leave)]
    return calls, hooks


@pytest.mark.parametrize("kv_dtype", ["auto", "int8"])
def test_layers_neither_build_tensors_nor_read_back(smollm2_bundle, monkeypatch, kv_dtype):
    """Three questions on one observation (a shared prefix, the attention-aware eviction's block mass on), then a
    fourth that joins from the prefix cache: a decode step and a prefill over a cached prefix both run clean."""
    engine = make_engine(smollm2_bundle, debug_checks=False, kv_dtype=kv_dtype)
    obs = Observation(text="A red cup, a blue box and a green ball lie on a grey table in front of the robot. " * 4)
    sampling = SamplingParams(max_new_tokens=8, ignore_eos=True)
    for question in ("What is on the table?", "Where is the cup?", "Count the objects."):
        engine.submit(GenerateRequest(question, observation=obs, sampling=sampling))
    engine.step()
    engine.step()
    calls, hooks = _spy_on_layers(smollm2_bundle.model, monkeypatch)
    try:
        measured = 0
        for _ in range(ATTENTION_MASS_EVERY):  # one of them also measures the attention mass
            before = engine.pool.policy._step
            engine.step()
            measured += engine.pool.policy._step - before
            assert engine.last_batch.is_decode and len(engine.last_batch.requests) == 3
        assert measured == 1
        assert calls == [], f"a decode step's layers called {sorted(set(calls))}"
        engine.submit(GenerateRequest("Which object is green?", observation=obs, sampling=sampling))
        engine.step()
        assert not engine.last_batch.is_decode
        assert calls == [], f"a prefill step's layers called {sorted(set(calls))}"
    finally:
        for hook in hooks:
            hook.remove()
    while engine.has_unfinished:
        engine.step()
