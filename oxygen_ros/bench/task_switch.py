"""Zero-copy task switching vs copying the KV, on the same running request in the same run.

A request holding an observation's whole prefix (pi05-causal-tiny: 868 tokens) is handed from one task to another and back,
``repeats`` times each way:

- ``task_switch_us``: ``transfer``, what the unified pool does: only the request's labels change, its block
  table and reference counts stay.
- ``kv_copy_switch_us``: what a server with one KV cache per task must do to move the same request: allocate as many
  blocks in the receiving cache, copy every layer's K/V (and scales) into them, free the old ones (here both caches
  are the one pool, which is the cheapest case of a copy: same device, no second allocator).

Medians; the request then decodes on, to show both switches left it intact (the answer equals an unswitched one).
"""

import statistics
from typing import Any

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.request import Request
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.tasks import TASK_TYPES

TASKS = ("vqa-task", "instruction-task")


def transfer(engine: Engine, request_id: str, task_id: str, task_type: str | None = None) -> None:
    """Hand a queued or running request, with the KV it holds, to another task (or the same task's next frame):
    only its labels change, its block table and the blocks' reference counts stay, so the switch costs the same
    whatever the context length (no KV is copied).  A new task type may change its service class (to vqa)."""
    req = engine.requests.get(request_id)
    if req is None:
        raise EngineError(ErrorCode.NOT_FOUND, f"no active request {request_id!r}")
    task_type = req.task_type if task_type is None else task_type
    if not task_id or task_type not in TASK_TYPES:
        raise EngineError(
            ErrorCode.INVALID_ARGUMENT, f"a transfer needs a task id and one of {list(TASK_TYPES)}, got "
            f"{task_id!r}, {task_type!r}",
        )  # fmt: skip
    req.task_id, req.task_type = task_id, task_type


def copy_switch(engine: Engine, req: Request, task_id: str) -> None:
    """Move ``req`` to ``task_id`` the way separate per-task caches would: its KV copied into fresh blocks."""
    old = req.block_table
    new = engine.pool.allocate(len(old))
    engine.kv.copy_blocks(old, new)
    engine.pool.release(old)
    req.block_table = new
    req.block_hashes = []  # the copies are not published: another cache's blocks
    transfer(engine, req.request_id, task_id)


def _median_us(engine: Engine, req: Request, switch, repeats: int) -> float:
    times = []
    for i in range(repeats):
        start = engine.synchronized_clock()
        switch(engine, req, TASKS[(i + 1) % 2])
        times.append((engine.synchronized_clock() - start) * 1e6)
    return statistics.median(times)


def measure(engine: Engine, request: GenerateRequest, repeats: int = 50) -> dict[str, Any]:
    """Both switch costs on ``request`` (its prefix prefilled first); ``engine`` needs room for two copies of it."""
    greq = GenerateRequest(request.prompt, TASKS[0], "instruction", request.observation,
                           SamplingParams(max_new_tokens=4, ignore_eos=True))  # fmt: skip
    (expected,) = engine.generate([greq])
    engine.pool.reset_prefix_cache()
    request_id = engine.submit(greq)
    while not engine.requests[request_id].prefill_done:
        engine.step()
    req = engine.requests[request_id]
    blocks, context_tokens = len(req.block_table), req.num_computed_tokens
    zero_copy = _median_us(engine, req, lambda e, r, task: transfer(e, r.request_id, task), repeats)
    copied = _median_us(engine, req, copy_switch, max(repeats // 10, 1))
    done = {}
    while request_id not in done:
        done.update({o.request_id: o for o in engine.step()})
    assert done[request_id].token_ids == expected.token_ids, "a task switch changed the request's answer"
    return {
        "task_switch_us": zero_copy,
        "kv_copy_switch_us": copied,
        "blocks": blocks,
        "context_tokens": context_tokens,
        "bytes_copied": blocks * engine.layout.bytes_per_block,
    }
