"""The engine: one model, one unified KV pool, many requests from many tasks (as nano-vllm's ``LLMEngine``).

``submit`` checks and queues a request (``InputProcessor``), ``step`` schedules a batch (``Scheduler``), runs one
forward pass over the pool (``ModelRunner``) and hands each sampled token to its request (``OutputProcessor``),
returning the requests that finished; ``abort`` cancels one and frees its blocks at once; ``close`` persists the
memory tiers for the next start. Nothing here imports ROS or a model class (models/interface.py is the door).

Deadlines: a request still unfinished when its deadline passes is dropped at the start of the next step (before any
compute is spent on it, its blocks freed) and answered DEADLINE_EXCEEDED with what it had so far; one whose last
step ends after its deadline keeps its result but is answered DEADLINE_EXCEEDED too, so a caller never mistakes a
stale action chunk for a timely one.
"""

import itertools
import time

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.device import resolve_dtype, resolve_weight_dtype, torch_device
from oxygen_ros.engine.eviction import make_policy
from oxygen_ros.engine.input_processor import InputProcessor
from oxygen_ros.engine.io import GenerateRequest, PoolStats, RequestOutput
from oxygen_ros.engine.kv_cache_manager import KVCacheManager
from oxygen_ros.engine.memory import kv_formats, num_blocks
from oxygen_ros.engine.model_runner import ATTENTION_MASS_EVERY, ModelRunner
from oxygen_ros.engine.output_processor import OutputProcessor
from oxygen_ros.engine.request import SERVE_ACTIONS, Request, RequestStatus
from oxygen_ros.engine.scheduler import Scheduler
from oxygen_ros.engine.scheduler_output import ScheduledBatch
from oxygen_ros.engine.stats import pool_stats
from oxygen_ros.engine.tiers import build_tiers
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.kv.attention_backend import choose_backend
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.models.registry import ModelBundle, load_model


class StepFailed(Exception):
    """A step raised (its cause chained); ``finished`` holds the requests that had finished in it before:
    out of the engine, their tokens or chunks complete, so they are answered, not failed with the rest."""

    def __init__(self, cause: Exception, finished: list[RequestOutput]) -> None:
        super().__init__(f"engine step failed: {type(cause).__name__}: {cause}")
        self.finished = finished


class Engine:
    def __init__(self, config: EngineConfig, bundle: ModelBundle | None = None) -> None:
        config.validate()
        self.config = config
        self.device = torch_device(config.device)
        self.backend = choose_backend(config, self.device)  # every path chosen once, before the model loads
        self.dtype = resolve_dtype(config.dtype, self.device)
        weight_dtype = resolve_weight_dtype(config.weight_dtype, self.device, self.dtype)
        self.bundle = b = bundle or load_model(config.model, self.device, self.dtype, config.seed, weight_dtype)
        self.tokenizer = b.tokenizer
        self.formats = kv_formats(config, b, self.dtype, self.device, self.backend.kernels)
        self.pool_layout, self.task_formats = self.formats.pool_layout, self.formats.task_formats
        self.layout, self.kv_dtype_name = self.pool_layout.layout, self.pool_layout.name
        self.max_model_len = min(config.max_model_len, b.max_position_embeddings)
        units = num_blocks(config, self.pool_layout, self.max_model_len, self.device)
        self.kv = KVCache(self.pool_layout, units, self.device, self.backend)
        window = -(-config.eviction_history_window // ATTENTION_MASS_EVERY)  # measured steps in the window
        policy = make_policy(config.eviction_policy, units, config.eviction_alpha, window)
        widths = [self.pool_layout.units_per_block(f) for f in range(len(self.pool_layout.formats))]
        self.pool = BlockPool(units, config.enable_prefix_caching, policy, widths)
        self.kv.attach(self.pool)
        self.tiers = build_tiers(config, self.kv, self.pool, f"{b.model_id}|{self.kv_dtype_name}")
        if self.tiers is not None:
            self.pool.on_evict = self.tiers.demote
        self.kv_manager = KVCacheManager(self.pool, self.kv, b.model_id, self.kv_dtype_name, self.tiers,
                                         config.preemption_mode)  # fmt: skip
        if config.preemption_mode == "swap" and not self.kv_manager.costs.can_swap:
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT,
                f"preemption_mode swap needs a lossless L1 tier: cpu_tier_format {config.cpu_tier_format!r} would "
                f"requantize this {self.kv_dtype_name} pool (use pool)",
            )
        self.scheduler = Scheduler(config, self.kv_manager)
        mass_hook = policy.observe if policy.wants_attention else None
        self.runner = ModelRunner(b.model, self.kv, self.device, on_block_mass=mass_hook)
        self.inputs = InputProcessor(config, b, self.formats, self.max_model_len, units, self.device)
        self.outputs = OutputProcessor(self.tokenizer, self.max_model_len)
        self.similar_frames = self.inputs.similar_frames
        # Flow steps per chunk: EngineConfig.num_denoise_steps when set (> 0), else the model's own (a checkpoint's
        # num_inference_steps from its config.json; 10 for the random-weight VLAs).
        self.denoise_steps = config.num_denoise_steps or b.model.default_denoise_steps
        self.requests: dict[str, Request] = {}
        self.last_batch = ScheduledBatch([], [])  # what the latest step computed, for benchmarks and timelines
        self._ids = itertools.count()

    # --- requests -----------------------------------------------------------------------------------------------
    def submit(self, greq: GenerateRequest) -> str:
        """Check and queue; raises EngineError (nothing is allocated) when the request cannot be served."""
        greq, prompt, formats = self.inputs.check(greq)
        if len(self.scheduler.waiting) >= self.config.max_queue:
            raise EngineError(
                ErrorCode.RESOURCE_EXHAUSTED, f"queue full ({self.config.max_queue} waiting requests); retry later"
            )
        number = next(self._ids)
        request_id = greq.request_id or f"req-{number}"
        if request_id in self.requests:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"request id {request_id!r} is already in use")
        req = self.inputs.request(greq, prompt, formats, request_id, number, time.perf_counter())
        self.requests[request_id] = req
        self.scheduler.add(req)
        return request_id

    def encode(self, greq: GenerateRequest) -> list[int]:
        """The prompt's token ids ``submit`` would give this request."""
        return self.inputs.encode(greq)

    def abort(self, request_id: str) -> RequestOutput:
        """Cancel a queued or running request; its blocks are freed before this returns."""
        req = self.requests.get(request_id)
        if req is None:
            raise EngineError(ErrorCode.NOT_FOUND, f"no active request {request_id!r}")
        self._finish(req, "abort")
        out = self.outputs.output(req)
        out.error_code, out.message = ErrorCode.CANCELLED, "cancelled by the caller"
        return out

    def generate(self, requests: list[GenerateRequest]) -> list[RequestOutput]:
        """Submit all, run to completion, return outputs in submission order."""
        ids = [self.submit(r) for r in requests]
        done: dict[str, RequestOutput] = {}
        while len(done) < len(ids):
            for out in self.step():
                done[out.request_id] = out
        return [done[i] for i in ids]

    def close(self) -> None:
        """Write what the pool and L1 hold to the disk tier (a restart with the same model and config finds it
        there) and stop the disk tier's reader and writer threads.  Call once, when no step runs any more."""
        if self.tiers is not None:
            self.tiers.close()

    # --- running ------------------------------------------------------------------------------------------------
    @property
    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0

    @property
    def owes_actions(self) -> bool:
        """A request still waits for its action chunk: the next step serves it (see Scheduler.schedule)."""
        return any(r.service_class == SERVE_ACTIONS for r in self.requests.values())

    def language_step_tokens(self, prefill_cap: int | None) -> int:
        """About how many tokens the next language step computes under ``prefill_cap`` (Scheduler.schedule): its
        decode rows and the prompt tokens the cap lets through, which is at least the largest bidirectional region
        a prompt still has to compute (a step's first prompt takes its whole region). For frame pacing."""
        prompting = [r for r in self.requests.values() if r.service_class != SERVE_ACTIONS and not r.prefill_done]
        done = {r.request_id: self._computed_or_cached(r) for r in prompting}
        pending = sum(r.num_tokens - done[r.request_id] for r in prompting)
        if prefill_cap is not None:
            region = max((r.bidirectional_len - done[r.request_id] for r in prompting), default=0)
            pending = 0 if prefill_cap == 0 else min(pending, max(prefill_cap, region))
        return min(self.language_decode_rows() + pending, self.config.max_num_batched_tokens)

    def _computed_or_cached(self, req: Request) -> int:
        """Tokens of a prompt the next step need not compute: those computed, or for a waiting request those its
        admission will find in the pool (an observation's prefix another task already computed)."""
        if req.status != RequestStatus.WAITING:
            return req.num_computed_tokens
        return max(req.num_computed_tokens, self.kv_manager.cached_prefix_tokens(req))

    def language_decode_rows(self) -> int:
        """Running language requests past their prompt: the rows of a decode-only step. For frame pacing."""
        return sum(1 for r in self.scheduler.running if r.service_class != SERVE_ACTIONS and r.prefill_done)

    def step(self, prefill_cap: int | None = None) -> list[RequestOutput]:
        """One forward pass over the next scheduled batch (``prefill_cap``: Scheduler.schedule); returns the requests
        that finished in it, and those whose deadline passed before it (dropped unserved). If the step raises, the
        StepFailed it raises carries those already finished: they are out of the engine and answered as they are."""
        finished: list[RequestOutput] = []
        try:
            self._step(prefill_cap, finished)
        except Exception as exc:
            raise StepFailed(exc, finished) from exc
        return finished

    def _step(self, prefill_cap: int | None, finished: list[RequestOutput]) -> None:
        now = time.perf_counter()
        self._expire(now, finished)
        batch = self.last_batch = self.scheduler.schedule(prefill_cap)
        if not batch.requests:
            return
        for req in batch.requests:
            if req.first_scheduled_s is None:
                req.first_scheduled_s = now
        start = time.perf_counter()
        sampled = self.runner.execute(batch)
        if max(batch.num_new_tokens) > 1:  # a prefill: what recomputing a preempted request would cost
            self.kv_manager.costs.observe_compute(sum(batch.num_new_tokens), self.synchronized_clock() - start)
        acting = [r for r in batch.requests if r.want_actions and r.actions is None and r.prefill_done]
        if acting:
            start = self.synchronized_clock()
            self.runner.sample_actions(acting, self.denoise_steps)
            batch.denoise_s = self.synchronized_clock() - start
        for req in batch.requests:
            self.kv_manager.commit(req)
            if not req.want_text and req.actions is not None:
                finished.append(self._done(req, "actions"))
                continue
            token = sampled.get(req.request_id)
            if token is None:
                continue
            if req.first_token_s is None:
                req.first_token_s = time.perf_counter()
            reason = self.outputs.on_token(req, token)
            if reason:
                finished.append(self._done(req, reason))
        if self.config.debug_checks:
            self.check_invariants()

    def _expire(self, now: float, finished: list[RequestOutput]) -> None:
        """Drop every request whose deadline has passed into ``finished``, each as it leaves: it can no longer be
        finished in time, so no more compute is spent on it and its blocks go back to the pool now."""
        for req in [r for r in self.requests.values() if r.deadline and now >= r.deadline]:
            finished.append(self._done(req, "deadline"))

    def synchronized_clock(self) -> float:
        """perf_counter after the device finished queued work, so a phase's time is its own (CUDA runs async)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _done(self, req: Request, reason: str) -> RequestOutput:
        self._finish(req, reason)
        return self.outputs.output(req)

    def _finish(self, req: Request, reason: str) -> None:
        try:
            self.scheduler.remove(req)
        finally:  # out of the engine whatever freeing its blocks met: never a request every later step trips on
            req.status, req.finish_reason = RequestStatus.FINISHED, reason
            req.finished_s = time.perf_counter()
            self.requests.pop(req.request_id, None)

    # --- introspection ------------------------------------------------------------------------------------------
    def image_limit(self) -> int:
        """Images one request may carry: a VLM's as its context allows, a VLA's camera slots, 0 for a text model."""
        return self.bundle.model.max_images

    def active_requests(self) -> list[Request]:
        return list(self.requests.values())

    def check_invariants(self) -> None:
        self.pool.check_invariants(r.block_table for r in self.requests.values())

    def stats(self) -> PoolStats:
        return pool_stats(self.bundle.model_id, self.pool, self.formats, self.requests.values(),
                          len(self.scheduler.running), len(self.scheduler.waiting), self.kv_manager, self.tiers,
                          self.image_limit())  # fmt: skip
