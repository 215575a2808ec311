"""Backend choice: argument, then $OXYGEN_KERNELS, then auto (Triton on CUDA only)."""

import pytest
import torch

from oxygen_ros.kernels import ENV_VAR, use_triton


def test_auto_runs_triton_on_cuda_only(monkeypatch, device):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert use_triton(device) == (device.type == "cuda")
    assert not use_triton(torch.device("cpu"))


def test_environment_then_argument(monkeypatch, device):
    monkeypatch.setenv(ENV_VAR, "triton")
    assert use_triton(device)  # on CPU: the interpreter is on for this test session (conftest)
    assert not use_triton(device, "torch")
    monkeypatch.setenv(ENV_VAR, "torch")
    assert not use_triton(device)
    assert use_triton(device, "triton")


def test_rejects_unknown_backend(monkeypatch, device):
    monkeypatch.setenv(ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="not one of"):
        use_triton(device)
