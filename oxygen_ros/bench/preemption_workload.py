"""A workload that forces preemption: four requests decode in a pool that holds half of what they grow to.

The requests grow to 3, 2, 3 and 2 blocks of 16 tokens; the pool has five, so while they decode together
the scheduler keeps preempting the last of them (swapped to L1 or left to be recomputed, ``preemption_mode``).
Shared by ``test/engine/test_preemption.py`` (outputs must equal a roomy pool's) and ``bench --suite tiers`` (what
each mode costs, and which one ``auto`` picks from the rates it measured).
"""

import time
from dataclasses import dataclass

from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest
from oxygen_ros.engine.sampling_params import SamplingParams

QUESTIONS = [
    "What is a robot, and what can it do in a kitchen?",
    "Name a red fruit.",
    "Why is the sky blue during the day but red at sunset?",
    "What do cats eat?",
]  # 14, 5, 13 and 5 tokens: preempted requests stop mid-block, so a swap has a partial last block to save
NEW_TOKENS = 24
POOL_BLOCKS = 5


@dataclass
class PreemptionRun:
    token_ids: list[list[int]]  # per request, in submission order
    computed_tokens: int  # tokens the model computed in all, recomputation included
    seconds: float


def preemption_requests() -> list[GenerateRequest]:
    sampling = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    return [GenerateRequest(q, task_id=f"task-{i}", sampling=sampling, chat=False) for i, q in enumerate(QUESTIONS)]


def run_preemption(engine: Engine) -> PreemptionRun:
    """All four requests together, to completion."""
    start = time.perf_counter()
    ids = [engine.submit(g) for g in preemption_requests()]
    done, computed = {}, 0
    while len(done) < len(ids):
        for out in engine.step():
            done[out.request_id] = out
        computed += sum(engine.last_batch.num_new_tokens)
    assert all(done[i].ok for i in ids), [done[i].message for i in ids]
    return PreemptionRun([done[i].token_ids for i in ids], computed, time.perf_counter() - start)
