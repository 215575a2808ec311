"""What the scheduler hands the runner for one step (as vLLM v1's ``SchedulerOutput``): the requests and how many new
tokens of each to compute. Below both, so the scheduler owns its output type and the runner only reads it."""

from dataclasses import dataclass

from oxygen_ros.engine.request import Request


@dataclass
class ScheduledBatch:
    requests: list[Request]
    num_new_tokens: list[int]
    denoise_s: float = 0.0  # time the step spent sampling action chunks, for per-phase benchmarks

    @property
    def total_tokens(self) -> int:
        return sum(self.num_new_tokens)

    @property
    def is_decode(self) -> bool:
        return all(n == 1 for n in self.num_new_tokens)
