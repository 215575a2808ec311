"""A replayed robot workload for memory pressure: 12 tasks, scenes revisited over time, recurring prompts.

Round ``r`` is what the robot asks at one moment: two tasks ask their own recurring question about one of a few hot
scenes (the room it keeps coming back to; each answered in several decoded tokens), then one navigation task asks a
one-token yes/no question about a frame seen only once.  Rounds run one after the other, so the pool's contents age
as on a robot.  The working set is every block the workload ever caches; the pressure runs give the pool a quarter
of it.  Shared by ``test/engine/test_pressure.py`` and ``bench --suite tiers``.
"""

from dataclasses import dataclass

import numpy as np

from oxygen_ros.bench.scene_text import observation_text
from oxygen_ros.engine.engine import Engine
from oxygen_ros.engine.io import GenerateRequest, Observation, RequestOutput
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.models.tokenizer import Tokenizer

QUESTIONS = [
    "What is on the table?",
    "Which object is closest?",
    "How many cups are there?",
    "Is there anything red?",
    "What is the tallest object?",
    "Where is the blue box?",
    "Which object is on the left?",
    "What should I pick up first?",
    "Is the plate empty?",
]
NAV_QUESTION = "Is the path ahead clear? Answer yes or no."


@dataclass(frozen=True)
class Workload:
    rounds: list[list[GenerateRequest]]

    @property
    def num_requests(self) -> int:
        return sum(len(r) for r in self.rounds)

    @property
    def num_tasks(self) -> int:
        return len({g.task_id for r in self.rounds for g in r})


def robot_workload(
    tokenizer: Tokenizer, rounds: int = 12, hot_scenes: int = 3, scene_tokens: int = 96, answer_tokens: int = 6
) -> Workload:
    hot = [Observation(f"scene-{i}", observation_text(tokenizer, scene_tokens, seed=i)) for i in range(hot_scenes)]
    answer = SamplingParams(max_new_tokens=answer_tokens, ignore_eos=True)
    yes_no = SamplingParams(max_new_tokens=1)
    out = []
    for r in range(rounds):
        asking = [(2 * r + j) % len(QUESTIONS) for j in range(2)]
        reqs = [
            GenerateRequest(QUESTIONS[t], task_id=f"task-{t}", task_type="vqa", observation=hot[r % hot_scenes],
                            sampling=answer)  # fmt: skip
            for t in asking
        ]
        frame = Observation(f"frame-{r}", observation_text(tokenizer, scene_tokens, seed=1000 + r))
        nav = GenerateRequest(NAV_QUESTION, task_id=f"task-{9 + r % 3}", task_type="navigation", observation=frame,
                              sampling=yes_no)  # fmt: skip
        out += [reqs, [nav]]
    return Workload(out)


def replay(engine: Engine, workload: Workload) -> list[RequestOutput]:
    """Every round to completion, in order; outputs in submission order."""
    return [out for rnd in workload.rounds for out in engine.generate(rnd)]


def working_set_blocks(engine: Engine) -> int:
    """Blocks an engine that evicted nothing holds after a replay: everything the workload cached."""
    assert engine.pool.evictions == 0, "measure the working set on a pool that never evicted"
    return engine.pool.num_cached + engine.pool.num_used


def pressure_pool_blocks(engine: Engine, outputs: list[RequestOutput], fraction: float = 0.25) -> int:
    """``fraction`` of the working set measured by ``engine`` (after replaying into it), but never less than the
    longest request needs, which would be refused outright (tiny workloads in tests)."""
    bs = engine.config.block_size
    longest = max(-(-(o.prompt_tokens + o.generated_tokens) // bs) for o in outputs)
    return max(int(np.ceil(fraction * working_set_blocks(engine))), longest)
