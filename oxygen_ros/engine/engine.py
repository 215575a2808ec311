"""The engine: one model, one unified KV pool, many requests from many tasks.

submit() validates and queues a request, step() runs one forward pass for the scheduled batch and returns the
requests that finished, abort() cancels one and frees its blocks at once, transfer() hands a request and its KV to
another task without copying, close() persists the memory tiers for the next start.  Nothing here imports ROS.

Deadlines: a request still unfinished when its deadline passes is dropped at the start of the next step (before any
compute is spent on it, its blocks freed) and answered DEADLINE_EXCEEDED with what it had so far; one whose last
step ends after its deadline keeps its result but is answered DEADLINE_EXCEEDED too, so a caller never mistakes a
stale action chunk for a timely one.
"""

import itertools
import math
import os
import time
from dataclasses import replace

import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.device import resolve_dtype, torch_device
from oxygen_ros.engine.block_hash import MultiModalSpan
from oxygen_ros.engine.block_pool import BlockPool
from oxygen_ros.engine.eviction import make_policy
from oxygen_ros.engine.frame_reuse import SimilarFrames
from oxygen_ros.engine.io import GenerateRequest, PoolStats, RequestOutput, TaskUsage, TierUsage
from oxygen_ros.kv.kv_cache import KVCache
from oxygen_ros.kv.layout import KVLayout, PoolLayout
from oxygen_ros.engine.kv_cache_manager import KVCacheManager
from oxygen_ros.engine.model_runner import ATTENTION_MASS_EVERY, ModelRunner
from oxygen_ros.engine.scheduler_output import ScheduledBatch
from oxygen_ros.engine.request import SERVE_ACTIONS, Request, RequestStatus
from oxygen_ros.tasks import TASK_TYPES
from oxygen_ros.engine.scheduler import Scheduler
from oxygen_ros.engine.tiers import build_tiers
from oxygen_ros.engine.vla_spans import vla_spans
from oxygen_ros.errors import NO_ACTION_HEAD, EngineError, ErrorCode
from oxygen_ros.kernels import KVQuantSpec, format_support_error
from oxygen_ros.models.idefics3.inputs import VisionPrompt, max_images, prepare_prompt
from oxygen_ros.models.pi0.model import Pi0Model
from oxygen_ros.models.pi05.model import PreparedPrefix
from oxygen_ros.models.registry import ModelBundle, load_model

SYSTEM_PROMPT = "You are the assistant of a robot. Answer briefly and only from the observation."


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string it contains (the stop string excluded), and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def _stop_window(stop: list[str]) -> int:
    """Newest tokens that hold any stop string the newest token can have completed: a character takes at most 4
    byte-level tokens (one per UTF-8 byte), plus one for a token cut in half at the window's start. Checking only
    them keeps the check per token constant instead of decoding the whole answer again."""
    return 4 * max(len(text) for text in stop) + 1


def _system_turn(observation_text: str) -> dict[str, str]:
    """The chat turn that carries an observation: first in every prompt about it, so its KV is shared."""
    return {"role": "system", "content": f"{SYSTEM_PROMPT}\nObservation: {observation_text}"}


class Engine:
    def __init__(self, config: EngineConfig, bundle: ModelBundle | None = None) -> None:
        config.validate()
        self.config = config
        self.device = torch_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        auto = config.weight_dtype == "auto"
        weight_dtype = self.dtype if auto else resolve_dtype(config.weight_dtype, self.device, "weight_dtype")
        self.bundle = bundle or load_model(config.model, self.device, self.dtype, config.seed, weight_dtype)
        self.tokenizer = self.bundle.tokenizer
        b = self.bundle
        self.pool_layout, self.task_formats, self.observation_format = self._kv_formats()
        self.layout = self.pool_layout.layout
        self.kv_dtype_name = self.pool_layout.name
        self.max_model_len = min(config.max_model_len, b.max_position_embeddings)
        num_blocks = self._num_blocks()
        self.kv = KVCache(self.pool_layout, num_blocks, self.device)
        window = -(-config.eviction_history_window // ATTENTION_MASS_EVERY)  # measured steps in the window
        policy = make_policy(config.eviction_policy, num_blocks, config.eviction_alpha, window)
        units = [self.pool_layout.units_per_block(f) for f in range(len(self.pool_layout.formats))]
        self.pool = BlockPool(num_blocks, config.enable_prefix_caching, policy, units)
        self.kv.attach(self.pool)
        self.tiers = build_tiers(config, self.kv, self.pool, f"{b.model_id}|{self.kv_dtype_name}")
        if self.tiers is not None:
            self.pool.on_evict = self.tiers.demote
        self.kv_manager = KVCacheManager(
            self.pool, self.kv, b.model_id, self.kv_dtype_name, self.tiers, config.preemption_mode
        )
        if config.preemption_mode == "swap" and not self.kv_manager.costs.can_swap:
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT,
                f"preemption_mode swap needs a lossless L1 tier: cpu_tier_format {config.cpu_tier_format!r} would "
                f"requantize this {self.kv_dtype_name} pool (use pool)",
            )
        self.scheduler = Scheduler(config, self.kv_manager)
        mass_hook = policy.observe if policy.wants_attention else None
        self.runner = ModelRunner(b.model, self.kv, self.device, takes_images=b.vla or b.vision,
                                  on_block_mass=mass_hook)  # fmt: skip
        threshold = config.reuse_similarity_threshold
        self.similar_frames = SimilarFrames(threshold) if threshold > 0 else None  # approximate reuse (opt-in)
        # Flow steps per chunk: EngineConfig.num_denoise_steps when set (> 0), else the model's own (a checkpoint's
        # num_inference_steps from its config.json; 10 for the random-weight VLAs).
        self.denoise_steps = config.num_denoise_steps or (b.model.config.num_denoise_steps if b.vla else 0)
        self.requests: dict[str, Request] = {}
        self.last_batch = ScheduledBatch([], [])  # what the latest step computed, for benchmarks and timelines
        self._ids = itertools.count()

    def _kv_formats(self) -> tuple[PoolLayout, dict[str, int], int | None]:
        """The pool's storage formats from ``kv_dtype``, ``kv_full_precision_layers``, ``kv_task_dtypes`` and
        ``kv_observation_dtype``: (pool layout, format id per task type, format id of observation prefixes or None
        = the task's).  Bad values are rejected."""
        cfg, b = self.config, self.bundle
        bad = [i for i in cfg.kv_full_precision_layers if not 0 <= i < b.num_layers]
        if bad:
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT,
                f"kv_full_precision_layers {bad} out of range: {b.model_id} has layers 0..{b.num_layers - 1}",
            )

        def storage(name: str) -> torch.dtype:
            return self.dtype if name == "auto" else KVQuantSpec.parse(name).storage_dtype  # validated

        task_dtypes = cfg.task_kv_dtypes()
        per_task = {t: storage(task_dtypes.get(t, cfg.kv_dtype)) for t in TASK_TYPES}
        observation = storage(cfg.kv_observation_dtype) if cfg.kv_observation_dtype else None
        dtypes = list(dict.fromkeys([*per_task.values(), *([observation] if observation else [])]))  # used ones
        full_precision = tuple(sorted(set(cfg.kv_full_precision_layers)))
        layouts = tuple(
            KVLayout(b.num_layers, b.num_kv_heads, b.head_dim, cfg.block_size, d, full_precision, self.dtype)
            for d in dtypes
        )
        try:
            pool_layout = PoolLayout(layouts)
        except ValueError as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc
        for lay in layouts:
            for spec in dict.fromkeys(lay.layer_spec(i) for i in range(b.num_layers)):  # e.g. fp8 and fp32 layers
                why = format_support_error(spec, self.device)
                if why:
                    raise EngineError(ErrorCode.FAILED_PRECONDITION, f"KV format {spec.name} cannot run here: {why}")
        task_formats = {t: dtypes.index(d) for t, d in per_task.items()}
        return pool_layout, task_formats, None if observation is None else dtypes.index(observation)

    def _num_blocks(self) -> int:
        """Blocks in the pool's byte budget; never more than every sequence at full length could use."""
        budget = self.config.kv_cache_bytes
        if budget == 0:
            if self.device.type == "cuda":
                free, _ = torch.cuda.mem_get_info(self.device)
            else:
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            budget = int(free * self.config.kv_cache_memory_fraction)
        widest = max(self.pool_layout.units_per_block(f) for f in range(len(self.pool_layout.formats)))
        ceiling = self.config.max_num_seqs * -(-self.max_model_len // self.config.block_size) * widest
        num_blocks = min(self.pool_layout.units_for_budget(budget), ceiling)
        if num_blocks < widest:
            raise EngineError(
                ErrorCode.INVALID_ARGUMENT,
                f"KV budget of {budget} bytes holds no block of {self.pool_layout.bytes_per_block()} bytes",
            )
        return num_blocks

    # --- requests -----------------------------------------------------------------------------------------------
    def encode(self, greq: GenerateRequest) -> list[int]:
        """Prompt token ids; with ``chat`` the observation text is the system turn, so every task asking about the
        same observation shares the same leading tokens (and so the same KV blocks).  A vision-language model's
        prompt carries the frames instead (see ``_vision_prompt``)."""
        if self.bundle.vision:
            return self._vision_prompt(greq).token_ids
        if not greq.chat:
            return self.tokenizer.encode(greq.prompt)
        messages = [{"role": "user", "content": greq.prompt}]  # no observation: the model's own default system turn
        obs = greq.observation
        if obs is not None and obs.text:
            messages.insert(0, _system_turn(obs.text))
        return self.tokenizer.encode(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def submit(self, greq: GenerateRequest) -> str:
        """Validate and queue; raises EngineError (nothing is allocated) when the request cannot be served."""
        self._validate(greq)
        if self.similar_frames is not None and greq.observation is not None:
            greq = replace(greq, observation=self.similar_frames.resolve(greq.observation))
        prefix = self._vla_prefix(greq) if self.bundle.vla else None
        vision = self._vision_prompt(greq) if self.bundle.vision else None
        prompt_ids = prefix.token_ids if prefix else vision.token_ids if vision else self.encode(greq)
        bidirectional_len = prefix.bidirectional_len if prefix else 0
        image_end = sum(vision.image_spans[-1]) if vision and vision.image_spans else bidirectional_len
        formats = self.block_formats(greq, prompt_ids, image_end)
        self._check_fits(prompt_ids, greq.sampling.max_new_tokens, bidirectional_len, formats)
        if len(self.scheduler.waiting) >= self.config.max_queue:
            raise EngineError(
                ErrorCode.RESOURCE_EXHAUSTED, f"queue full ({self.config.max_queue} waiting requests); retry later"
            )
        number = next(self._ids)
        arrival = time.perf_counter()
        request_id = greq.request_id or f"req-{number}"
        if request_id in self.requests:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"request id {request_id!r} is already in use")
        sampling = greq.sampling
        generator = None
        if not sampling.greedy or greq.want_actions:  # action noise is seeded per request too
            seed = sampling.seed if sampling.seed is not None else self.config.seed + number
            generator = torch.Generator(device=self.device).manual_seed(seed)
        req = Request(
            request_id=request_id,
            task_id=greq.task_id,
            task_type=greq.task_type,
            prompt_token_ids=prompt_ids,
            sampling=sampling,
            want_text=greq.want_text,
            want_actions=greq.want_actions,
            priority=greq.priority,
            deadline=arrival + greq.deadline_s if greq.deadline_s else 0.0,
            cache_salt=greq.cache_salt,
            kv_format=formats[0],
            observation_format=formats[1],
            observation_blocks=formats[2],
            generator=generator,
            arrival_s=arrival,
        )
        if prefix is not None:
            req.mm_spans = vla_spans(prefix, self.bundle.model.config.tokens_per_image)
            req.bidirectional_len, req.pixels, req.state = prefix.bidirectional_len, prefix.pixels, prefix.state
        if vision is not None and vision.image_spans:  # causal: each image's tokens are keyed by that image alone
            req.mm_spans = [MultiModalSpan(start, length, bytes.fromhex(image_hash))
                            for (start, length), image_hash in zip(vision.image_spans, vision.image_hashes)]  # fmt: skip
            req.pixels = vision.pixels
        self.requests[request_id] = req
        self.scheduler.add(req)
        return request_id

    def block_formats(
        self, greq: GenerateRequest, prompt_ids: list[int], image_end: int = 0
    ) -> tuple[int, int, int]:
        """Where a request's blocks are stored: (its format, its observation prefix's format, how many leading full
        blocks are that prefix).  The prefix is the prompt up to the last image token of a VLM, a VLA's
        bidirectional region (its images; pi0's images and prompt) or the chat turn that carries the scene text."""
        kv_format = self.task_formats[greq.task_type]
        if self.observation_format is None or self.observation_format == kv_format:
            return kv_format, kv_format, 0
        images = self.bundle.vla or self.bundle.vision
        observation_len = image_end if images else self._observation_len(greq, prompt_ids)
        observation_blocks = observation_len // self.config.block_size
        return kv_format, self.observation_format if observation_blocks else kv_format, observation_blocks

    def units_of(self, formats: tuple[int, int, int], num_tokens: int) -> int:
        """Pool units ``num_tokens`` tokens of a request with these ``block_formats`` take."""
        kv_format, observation_format, observation_blocks = formats
        width = self.pool_layout.units_per_block
        blocks = -(-num_tokens // self.config.block_size)
        return (blocks - observation_blocks) * width(kv_format) + observation_blocks * width(observation_format)

    def _observation_len(self, greq: GenerateRequest, prompt_ids: list[int]) -> int:
        """Leading prompt tokens that only the observation decides (the chat's system turn), 0 if none."""
        obs = greq.observation
        if not greq.chat or obs is None or not obs.text:
            return 0
        head = self.tokenizer.encode(self.tokenizer.apply_chat_template([_system_turn(obs.text)],
                                                                        add_generation_prompt=False))
        return len(head) if prompt_ids[: len(head)] == head else 0

    def _vla_prefix(self, greq: GenerateRequest) -> PreparedPrefix:
        """[image tokens | prompt | state] of a VLA request, laid out by the model (``observation_prefix``: pi0.5
        writes the normalised state into its prompt, pi0 appends a state token); bad images or state, a state pi0 /
        pi0.5 need and did not get, too many images or an over-long prompt -> INVALID_ARGUMENT.  pi0 decodes no text
        (its state token, written by the action expert, would sit in the text's context) -> FAILED_PRECONDITION."""
        obs, model = greq.observation, self.bundle.model
        state = obs.state if obs is not None and len(obs.state) else None
        if isinstance(model, Pi0Model) and greq.want_text:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"model {self.bundle.model_id!r} (pi0) serves action "
                              "chunks only: ask with want_text=False")  # fmt: skip
        try:
            return model.observation_prefix(self.tokenizer, greq.prompt, obs.images if obs else [], state)
        except ValueError as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc

    def _vision_prompt(self, greq: GenerateRequest) -> VisionPrompt:
        """A vision-language prompt: with ``chat``, one user turn holding the frames first, then the observation
        text (if any), then the question, so every task asking about a frame shares the tokens, and the KV, up to
        its question; without ``chat``, the prompt itself places one ``<image>`` per frame.  Too many frames ->
        OUT_OF_RANGE, bad frames or placeholders -> INVALID_ARGUMENT."""
        obs = greq.observation
        images = list(obs.images) if obs else []
        cfg = self.bundle.model.config
        if len(images) > max_images(cfg):
            raise EngineError(
                ErrorCode.OUT_OF_RANGE, f"{len(images)} images, more than the {max_images(cfg)} this model's context "
                f"of {cfg.text.max_position_embeddings} tokens holds at their largest tiling",
            )  # fmt: skip
        text = greq.prompt
        if greq.chat:
            content = [{"type": "image"} for _ in images]
            if obs is not None and obs.text:
                content.append({"type": "text", "text": f"Observation: {obs.text}\n"})
            content.append({"type": "text", "text": greq.prompt})
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}])
        try:
            return prepare_prompt(cfg, self.tokenizer, text, images)
        except ValueError as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc

    def image_limit(self) -> int:
        """Images one request may carry: a VLM's as its context allows, a VLA's camera slots, 0 for a text model."""
        if self.bundle.vision:
            return max_images(self.bundle.model.config)
        return self.bundle.model.config.max_images if self.bundle.vla else 0

    def _validate(self, greq: GenerateRequest) -> None:
        def bad(msg: str) -> EngineError:
            return EngineError(ErrorCode.INVALID_ARGUMENT, msg)

        if not greq.prompt.strip():
            raise bad("the prompt is empty")
        if greq.task_type not in TASK_TYPES:
            raise bad(f"unknown task type {greq.task_type!r}; expected one of {list(TASK_TYPES)}")
        if greq.want_actions and not self.bundle.vla:
            raise EngineError(
                ErrorCode.FAILED_PRECONDITION, f"model {self.bundle.model_id!r} {NO_ACTION_HEAD} (use a VLA model)"
            )
        if not (greq.want_text or greq.want_actions):
            raise bad("the request asks for neither text nor actions")
        greq.sampling.check()
        if not 0.0 <= greq.deadline_s < math.inf:  # also rejects NaN
            raise bad(f"deadline_s must be a finite number of seconds >= 0 (0 = none), got {greq.deadline_s}")

    def _check_fits(
        self, prompt_ids: list[int], max_new_tokens: int, prefix_bidirectional: int, formats: tuple[int, int, int],
    ) -> None:
        """Raise OUT_OF_RANGE when the request could never run: too long for the model or the whole pool."""
        total = len(prompt_ids) + max_new_tokens
        if total > self.max_model_len:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the context of "
                f"{self.max_model_len} tokens",
            )
        if prefix_bidirectional > self.config.max_num_batched_tokens:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"{prefix_bidirectional} prefix tokens that see each other must be computed in one step, more than "
                f"max_num_batched_tokens={self.config.max_num_batched_tokens}",
            )
        units = self.units_of(formats, total)
        if units > self.pool.num_blocks:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"the request needs {units} KV blocks' worth of pool, the whole pool has {self.pool.num_blocks}",
            )

    def abort(self, request_id: str) -> RequestOutput:
        """Cancel a queued or running request; its blocks are freed before this returns."""
        req = self.requests.get(request_id)
        if req is None:
            raise EngineError(ErrorCode.NOT_FOUND, f"no active request {request_id!r}")
        self._finish(req, "abort")
        out = self._output(req)
        out.error_code, out.message = ErrorCode.CANCELLED, "cancelled by the caller"
        return out

    def close(self) -> None:
        """Write what the pool and L1 hold to the disk tier (a restart with the same model and config finds it
        there) and stop the tiers' worker thread.  Call once, when no step runs any more."""
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

    def pending_language_tokens(self) -> int:
        """Tokens the next language step would compute at most: every unfinished language request's uncomputed
        tokens (prefix-cache hits not subtracted), capped by the step's token budget. For frame pacing."""
        pending = sum(r.num_tokens - r.num_computed_tokens for r in self.requests.values() if r.service_class != SERVE_ACTIONS)
        return min(pending, self.config.max_num_batched_tokens)

    def step(self) -> list[RequestOutput]:
        """One forward pass over the next scheduled batch; returns the requests that finished in it, and those whose
        deadline passed before it (dropped unserved)."""
        now = time.perf_counter()
        finished = self._expire(now)
        batch = self.last_batch = self.scheduler.schedule()
        if not batch.requests:
            return finished
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
                self._finish(req, "actions")
                finished.append(self._output(req))
                continue
            token = sampled.get(req.request_id)
            if token is None:
                continue
            req.output_token_ids.append(token)
            if req.first_token_s is None:
                req.first_token_s = time.perf_counter()
            reason = self._stop_reason(req, token)
            if reason:
                self._finish(req, reason)
                finished.append(self._output(req))
        if self.config.debug_checks:
            self.check_invariants()
        return finished

    def _expire(self, now: float) -> list[RequestOutput]:
        """Drop every request whose deadline has passed: it can no longer be finished in time, so no more compute is
        spent on it and its blocks go back to the pool now."""
        late = [r for r in self.requests.values() if r.deadline and now >= r.deadline]
        for req in late:
            self._finish(req, "deadline")
        return [self._output(req) for req in late]

    def synchronized_clock(self) -> float:
        """perf_counter after the device finished queued work, so a phase's time is its own (CUDA runs async)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _stop_reason(self, req: Request, token: int) -> str:
        s = req.sampling
        if token in s.stop_token_ids or (not s.ignore_eos and token in self.tokenizer.eos_token_ids):
            return "stop"
        if s.stop and cut_at_stop(self.tokenizer.decode(req.output_token_ids[-_stop_window(s.stop) :]), s.stop)[1]:
            return "stop"
        if len(req.output_token_ids) >= s.max_new_tokens or req.num_tokens >= self.max_model_len:
            return "length"
        return ""

    def _finish(self, req: Request, reason: str) -> None:
        self.scheduler.remove(req)
        req.status, req.finish_reason = RequestStatus.FINISHED, reason
        req.finished_s = time.perf_counter()
        del self.requests[req.request_id]

    def _output(self, req: Request) -> RequestOutput:
        start = req.first_scheduled_s or req.finished_s
        out = RequestOutput(
            request_id=req.request_id,
            task_id=req.task_id,
            task_type=req.task_type,
            text=cut_at_stop(self.tokenizer.decode(req.output_token_ids), req.sampling.stop)[0],
            token_ids=list(req.output_token_ids),
            finish_reason=req.finish_reason,
            prompt_tokens=req.num_prompt_tokens,
            reused_prefix_tokens=req.num_cached_tokens,
            reused_image_tokens=req.num_cached_image_tokens,
            generated_tokens=len(req.output_token_ids),
            queue_ms=(start - req.arrival_s) * 1e3,
            latency_ms=(req.finished_s - req.arrival_s) * 1e3,
            actions=None if req.actions is None else req.actions.cpu().numpy(),
        )
        if req.deadline and req.finished_s > req.deadline:
            out.error_code = ErrorCode.DEADLINE_EXCEEDED
            late_ms = (req.finished_s - req.deadline) * 1e3
            out.message = (
                f"dropped {late_ms:.1f} ms after its deadline passed, {out.generated_tokens} tokens generated"
                if req.finish_reason == "deadline"
                else f"finished {late_ms:.1f} ms after its deadline (its result is kept, but late)"
            )
        return out

    def generate(self, requests: list[GenerateRequest]) -> list[RequestOutput]:
        """Submit all, run to completion, return outputs in submission order."""
        ids = [self.submit(r) for r in requests]
        done: dict[str, RequestOutput] = {}
        while len(done) < len(ids):
            for out in self.step():
                done[out.request_id] = out
        return [done[i] for i in ids]

    # --- introspection ------------------------------------------------------------------------------------------
    def active_requests(self) -> list[Request]:
        return list(self.requests.values())

    def check_invariants(self) -> None:
        self.pool.check_invariants(r.block_table for r in self.requests.values())

    def stats(self) -> PoolStats:
        pool, bs = self.pool, self.config.block_size
        filled: dict[int, int] = {}
        by_task: dict[str, tuple[str, set[int]]] = {}
        for req in self.requests.values():
            for i, block_id in enumerate(req.block_table):
                tokens = min(max(req.num_computed_tokens - i * bs, 0), bs)
                filled[block_id] = max(filled.get(block_id, 0), tokens)
            by_task.setdefault(req.task_id, (req.task_type, set()))[1].update(req.block_table)
        allocated = len(filled) * bs
        names = [lay.name for lay in self.pool_layout.formats]
        tasks = [
            TaskUsage(
                task_id=task_id,
                task_type=task_type,
                kv_dtype="+".join(dict.fromkeys(names[pool.blocks[b].fmt] for b in sorted(blocks)))
                or names[self.task_formats[task_type]],
                blocks=len(blocks),
                shared_blocks=sum(1 for b in blocks if pool.blocks[b].ref_count > 1),
                bytes=sum(pool.blocks[b].num_units for b in blocks) * self.pool_layout.unit_bytes,
            )
            for task_id, (task_type, blocks) in sorted(by_task.items())
        ]
        return PoolStats(
            model=self.bundle.model_id,
            block_size=bs,
            total_blocks=pool.num_blocks,
            free_blocks=pool.num_free,
            cached_blocks=pool.num_cached,
            used_blocks=pool.num_used,
            shared_blocks=pool.num_shared,
            prefix_hit_rate=pool.prefix_hit_rate,
            fragmentation=1.0 - sum(filled.values()) / allocated if allocated else 0.0,
            evictions=pool.evictions,
            active_requests=len(self.scheduler.running),
            queued_requests=len(self.scheduler.waiting),
            bytes_per_block=self.pool_layout.unit_bytes,
            max_images=self.image_limit(),
            tasks=tasks,
            blocks_by_reader_types=self.kv_manager.reader_histogram(),
            tiers=self._tier_usage(),
        )

    def _tier_usage(self) -> list[TierUsage]:
        """The device pool (named ``gpu``: L0, on whatever device) first, then the host and disk tiers."""
        pool, bpb = self.pool, self.pool_layout.unit_bytes
        held = pool.num_used + pool.num_cached
        misses = pool.prefix_queries - pool.prefix_hits
        l0 = TierUsage("gpu", pool.num_blocks * bpb, held * bpb, held, pool.prefix_hits, misses)
        return [l0, *(self.tiers.usage(misses) if self.tiers is not None else [])]
