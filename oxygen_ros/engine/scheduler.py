"""Continuous batching over the shared pool: which requests compute which tokens in the next forward pass.

Requests are served by service class (``Request.service_class``: owed action chunks, then VQA, then other language),
then priority, then age.  Class by class, every running request decodes one token, then waiting requests of that
class are admitted while the token budget, ``max_num_seqs`` and the pool allow, each prefilling the part of its
prompt not found in the prefix cache.  A waiting request that finds no seat or no blocks preempts running requests
of a later class (an action chunk never waits behind language decoding, a VQA answer never behind older chatter);
it never preempts its own class or an earlier one, so language never preempts actions.

A step that computes action requests carries nothing else: the chunk's latency is its own prefill and denoising, not
that of decode rows padded into the same forward pass, and language resumes in the next step (the paper's frame:
prefill and actions, then decode).

While an arm runs, the serving thread caps the prompt tokens a language step may compute (``prefill_cap``, from
``FramePacer.prefill_cap``): a chunk asked for during a language step waits out that step, so four questions'
prefills are spread over four short steps instead of one long one. The step's first prefill may exceed the cap by
its indivisible bidirectional region (and always gets one token), so a cap slows language work, never starves it;
a cap of 0 makes a decode-only step (the pacer's choice when a prompt would not finish before a chunk is due). A
waiting prompt the cap refuses ends the step's prompts: no smaller one behind it (or in a later class) overtakes it.

A request whose uncached prompt blocks are being computed in this very step by another request waits one step and
then reuses them: an observation shared by several tasks is prefilled once.  When the pool cannot grow a running
request, the last request in serving order is preempted.  A preempted request's blocks are released (full ones
stay cached, so resuming it is partly a prefix hit), its KV first swapped to the host tier when that is cheaper than
recomputing it (``KVCacheManager.preempt``), and it goes back to the queue.
"""

from collections.abc import Callable

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.kv_cache_manager import KVCacheManager
from oxygen_ros.engine.scheduler_output import ScheduledBatch
from oxygen_ros.engine.request import SERVE_ACTIONS, Request, RequestStatus


class Scheduler:
    def __init__(self, config: EngineConfig, kv_manager: KVCacheManager) -> None:
        self.config = config
        self.kv = kv_manager
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.on_preempt: Callable[[Request], None] = lambda req: None
        self._prefill_left: int | None = None  # this step's language prompt tokens still allowed; None = no cap
        self._prefilled = False  # this step already computes a language prompt

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

    def schedule(self, prefill_cap: int | None = None) -> ScheduledBatch:
        """The next step's batch; ``prefill_cap`` bounds its language prompt tokens (module docstring)."""
        budget = self.config.max_num_batched_tokens
        self._prefill_left, self._prefilled = prefill_cap, False
        batch = ScheduledBatch([], [])
        in_flight: set[bytes] = set()
        for service_class in sorted({r.service_class for r in [*self.running, *self.waiting]}):
            budget = self._continue_running(service_class, batch, budget)
            budget, blocked = self._admit(service_class, batch, budget, in_flight)
            if blocked:  # no later class may overtake it (and none is running any more)
                break
            if service_class == SERVE_ACTIONS and batch.requests:  # an action step runs alone
                break
        return batch

    def _continue_running(self, service_class: int, batch: ScheduledBatch, budget: int) -> int:
        """Schedule the running requests of one class; returns the token budget left."""
        for req in sorted((r for r in self.running if r.service_class == service_class), key=_order):
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
                budget -= self._take(batch, req, n)
        return budget

    def _admit(
        self, service_class: int, batch: ScheduledBatch, budget: int, in_flight: set[bytes]
    ) -> tuple[int, bool]:
        """Admit waiting requests of one class; returns the budget left and whether one was blocked for want of a
        seat or blocks even after every later-class request was preempted."""
        for req in sorted((r for r in self.waiting if r.service_class == service_class), key=_order):
            cached_tokens = self.kv.cached_prefix_tokens(req)
            if self._chunk(req, budget, cached_tokens) <= 0:  # judged by what it computes after its cache hits
                if self._capped(req):  # the cap refused it: no later prompt overtakes it this step
                    self._prefill_left = 0
                continue
            hashes = self.kv.reusable_hashes(req)
            cached = cached_tokens // self.kv.block_size
            if self.kv.pool.enable_prefix_caching and cached < len(hashes) and hashes[cached] in in_flight:
                continue  # its next blocks are being computed right now: reuse them next step
            while len(self.running) >= self.config.max_num_seqs or not self.kv.admit(req, hashes):
                if not self._preempt_later_class(service_class):
                    return budget, True  # keep queue order (no small request overtakes a large one forever)
            in_flight.update(hashes[cached:])
            self.waiting.remove(req)
            self.running.append(req)
            req.status = RequestStatus.RUNNING
            budget -= self._take(batch, req, self._chunk(req, budget))
        return budget, False

    def _preempt_later_class(self, service_class: int) -> bool:
        """Preempt the last-served running request of a class after ``service_class``; False if there is none.
        Such requests are not in this step's batch yet: classes are scheduled in order."""
        victims = [r for r in self.running if r.service_class > service_class]
        if not victims:
            return False
        self._preempt(max(victims, key=_order))
        return True

    def _chunk(self, req: Request, budget: int, cached: int = 0) -> int:
        """Tokens of ``req`` to compute now: the rest of it from its computed (or, waiting, ``cached``) tokens on,
        capped by the budget (and a language prompt by the prefill cap), but never a split of its bidirectional
        (image) region, which must be computed in one step; 0 = not this step."""
        done = max(req.num_computed_tokens, cached)
        n = min(req.num_tokens - done, budget)
        left = self._prefill_left
        if left is not None and self._capped(req):
            first = max(1, req.bidirectional_len - done)  # the step's first prompt gets this
            n = min(n, left if self._prefilled or left == 0 else max(left, first))
        if done < req.bidirectional_len and done + n < req.bidirectional_len:
            return 0
        return n

    def _capped(self, req: Request) -> bool:
        return self._prefill_left is not None and req.service_class != SERVE_ACTIONS and not req.prefill_done

    def _take(self, batch: ScheduledBatch, req: Request, n: int) -> int:
        """Put ``n`` tokens of ``req`` in the batch and charge a language prompt's to the prefill cap; returns n."""
        if self._prefill_left is not None and self._capped(req):
            self._prefill_left = max(0, self._prefill_left - n)
            self._prefilled = True
        batch.requests.append(req)
        batch.num_new_tokens.append(n)
        return n

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.preempt(req)
        req.status = RequestStatus.WAITING
        self.waiting.append(req)
        self.on_preempt(req)


def _order(req: Request) -> tuple[int, int, float]:
    """Serve the earlier service class first, then higher priority, then first come."""
    return (req.service_class, -req.priority, req.arrival_s)
