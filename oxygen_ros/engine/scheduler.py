"""Continuous batching over the shared pool: which requests compute which tokens in the next forward pass.

Each step every running request decodes one token, then waiting requests are admitted (highest priority first,
then oldest) while the token budget, ``max_num_seqs`` and the pool allow, each prefilling the part of its prompt not
found in the prefix cache.  A request whose uncached prompt blocks are being computed in this very step by another
request waits one step and then reuses them: an observation shared by several tasks is prefilled once.  When the pool
cannot grow a running request, the lowest-priority, newest request is preempted: its blocks are released (they stay
cached, so resuming it is mostly a prefix hit) and it goes back to the queue.
"""

from collections.abc import Callable

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.kv_cache_manager import KVCacheManager
from oxygen_ros.engine.model_runner import ScheduledBatch
from oxygen_ros.engine.request import Request, RequestStatus


class Scheduler:
    def __init__(self, config: EngineConfig, kv_manager: KVCacheManager) -> None:
        self.config = config
        self.kv = kv_manager
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.on_preempt: Callable[[Request], None] = lambda req: None

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def remove(self, req: Request) -> None:
        """Drop a request from the queues and release its blocks (finish or abort)."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        self.kv.free(req)

    def schedule(self) -> ScheduledBatch:
        budget = self.config.max_num_batched_tokens
        batch = ScheduledBatch([], [])
        for req in sorted(self.running, key=_order):
            if req not in self.running:  # preempted earlier in this loop
                continue
            n = self._chunk(req, budget)
            if n <= 0:
                continue
            while not self.kv.reserve(req, n):
                victim = max(self.running, key=_order)
                self._preempt(victim)
                if victim is req:
                    break
            if req in self.running:
                batch.requests.append(req)
                batch.num_new_tokens.append(n)
                budget -= n
        self._admit(batch, budget)
        return batch

    def _admit(self, batch: ScheduledBatch, budget: int) -> None:
        in_flight: set[bytes] = set()
        for req in sorted(self.waiting, key=_order):
            if len(self.running) >= self.config.max_num_seqs:
                break
            if self._chunk(req, budget) <= 0:
                continue
            hashes = self.kv.reusable_hashes(req)
            cached = 0
            while cached < len(hashes) and self.kv.pool.lookup(hashes[cached]) is not None:
                cached += 1
            if cached < len(hashes) and hashes[cached] in in_flight:
                continue  # its next blocks are being computed right now: reuse them next step
            if not self.kv.admit(req, hashes):
                break  # the pool is full; keep queue order (no small request overtakes a large one forever)
            in_flight.update(hashes[cached:])
            self.waiting.remove(req)
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            n = self._chunk(req, budget)
            batch.requests.append(req)
            batch.num_new_tokens.append(n)
            budget -= n

    @staticmethod
    def _chunk(req: Request, budget: int) -> int:
        """Tokens of ``req`` to compute now: the rest of it, capped by the budget, but never a split of its
        bidirectional (image) region, which must be computed in one step; 0 = not this step."""
        n = min(req.num_tokens - req.num_computed_tokens, budget)
        if req.num_computed_tokens < req.bidirectional_len and req.num_computed_tokens + n < req.bidirectional_len:
            return 0
        return n

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req)
        req.status = RequestStatus.WAITING
        self.waiting.append(req)
        self.on_preempt(req)


def _order(req: Request) -> tuple[int, float]:
    """Serve higher priority first, then first come."""
    return (-req.priority, req.arrival_s)
