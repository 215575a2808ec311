"""format_support_error: every format passes the startup probe wherever its kernels run (here: the torch references
and the Triton kernels, interpreted on CPU or compiled on CUDA)."""

import pytest

from oxygen_ros.kernels import KVQuantSpec, format_support_error


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16", "int8", "fp8"])
def test_every_format_round_trips(device, backend, name):
    assert format_support_error(KVQuantSpec.parse(name), device, backend) is None


def test_a_backend_that_cannot_run_is_reported():
    """The dispatcher's refusal (an unknown backend here; Triton on CPU without the interpreter in the engine test)
    comes back as the reason, not as an exception."""
    why = format_support_error(KVQuantSpec.parse("fp8"), "cpu", backend="cuda-graphs")
    assert why is not None and why.startswith("fp8 KV kernels fail on cpu:") and "cuda-graphs" in why
