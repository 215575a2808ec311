"""Whether a KV format works on a device with the kernel backend dispatch picks there, found out by trying it.

The engine calls ``format_support_error`` at startup so an unusable ``kv_dtype`` fails there, with the reason,
instead of on the first request.  A probe rather than a table of devices, because what decides fp8 support is the
code path, not the format alone:

* CPU runs the torch references: fp8 needs torch's float8_e4m3fn storage and conversion (torch >= 2.1);
* CUDA runs the Triton kernels, which handle fp8 as bytes with integer encode/decode, so no native fp8 (sm_89+) is
  needed; without triton installed, CUDA runs the torch references on torch's own fp8 conversion;
* a forced backend that cannot run (``OXYGEN_KERNELS=triton`` on CPU without ``TRITON_INTERPRET=1``) fails the probe
  for every format, with the dispatcher's message.

The probe writes one block, reads it back (``gather_kv``) and attends over it (``paged_decode_attention``): the three
ops the engine uses, at the model's shape (kv-heads, head size, query heads per kv-head, block size, compute dtype),
so that a GPU tile the launchers refuse for it (a head wider than 256, a block wider than the tile: kernels/
gpu_targets.py) fails here too.  Its tolerance only has to catch broken paths (zeros, NaN, garbage): every format's
rounding stays far below it.
"""

import torch

from .blocks import gather_kv
from .dispatch import Backend
from .paged_decode import paged_decode_attention
from .quant_spec import KVBlocks, KVQuantSpec
from .write_kv import write_kv

PROBE_TOLERANCE = 0.1  # relative L2 error; fp8 e4m3 rounds to ~3% at most, int8 / fp16 / bf16 far less


def format_support_error(
    spec: KVQuantSpec, device: torch.device | str, backend: Backend | None = None, num_kv_heads: int = 2,
    head_dim: int = 16, group: int = 2, block_size: int = 16, q_dtype: torch.dtype = torch.float32,
) -> str | None:
    """None when ``spec`` round-trips one block of ``block_size`` tokens on ``device`` with ``backend`` for
    ``num_kv_heads`` x ``head_dim`` keys and ``group`` queries per kv-head in ``q_dtype``; else a sentence saying
    why not."""
    gen = torch.Generator().manual_seed(0)
    k, v = (torch.randn(block_size, num_kv_heads, head_dim, generator=gen).to(device) for _ in range(2))
    q = torch.randn(1, group * num_kv_heads, head_dim, generator=gen).to(device, q_dtype)
    table = torch.zeros(1, 1, dtype=torch.long, device=device)  # the engine's tables: the probe builds its kernels
    lens = torch.full((1,), block_size, dtype=torch.int32, device=device)
    try:
        blocks = KVBlocks.allocate(spec, 1, block_size, num_kv_heads, head_dim, device)
        if spec.kind == "fp8":  # per-head scales fitted to the data, as the calibrator would
            blocks.k_scale.copy_(k.abs().amax(dim=(0, 2)) / 224.0)
            blocks.v_scale.copy_(v.abs().amax(dim=(0, 2)) / 224.0)
        write_kv(blocks, torch.arange(block_size, device=device), k, v, backend=backend)
        k_back, v_back = gather_kv(blocks, table, block_size, torch.float32, backend=backend)
        out = paged_decode_attention(q, blocks, table, lens, head_dim**-0.5, backend=backend)
    except Exception as exc:  # whatever breaks (dispatch, compile, a missing dtype op) means unsupported
        return f"{spec.name} KV kernels fail on {device}: {exc}"
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float().view(1, num_kv_heads, group, head_dim), k.float().transpose(0, 1)[None],
        v.float().transpose(0, 1)[None],
    ).reshape(1, -1, head_dim)  # CUDA's SDPA may return it transposed in memory
    for what, got, want in (("K", k_back[0], k), ("V", v_back[0], v), ("attention", out.float(), expected)):
        error = float((got.float() - want.float()).norm() / want.float().norm())
        if not error <= PROBE_TOLERANCE:  # also catches NaN
            return f"{spec.name} KV on {device} reads back wrong {what} values (relative error {error:.3g})"
    return None
