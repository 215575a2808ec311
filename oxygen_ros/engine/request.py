"""One request's state inside the engine: its tokens, its block table and its timings."""

import time
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch

from oxygen_ros.models.interface import MultiModalSpan
from llguidance import LLMatcher

from oxygen_ros.engine.detokenizer import IncrementalDetokenizer
from oxygen_ros.engine.io import TokenLogprob
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import ErrorCode

SERVE_ACTIONS, SERVE_VQA, SERVE_LANGUAGE = 0, 1, 2  # service classes, served in this order


class RequestStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)  # a request is itself: the scheduler's `req in running` must not compare every field
class Request:
    request_id: str
    task_id: str
    task_type: str
    prompt_token_ids: list[int]
    sampling: SamplingParams
    want_text: bool = True
    want_actions: bool = False
    priority: int = 0  # higher is served first, within a service class
    deadline: float = 0.0  # perf_counter time by which it must be finished; 0 = none
    pixels: torch.Tensor | None = None  # preprocessed images (tiles) of a VLA or VLM prompt [N, 3, S, S]
    image_tokens: torch.Tensor | None = None  # their encoder output, kept only while the prefix is being computed
    mm_spans: list[MultiModalSpan] = field(default_factory=list)
    bidirectional_len: int = 0  # leading tokens that see each other (a VLA's image tokens); computed in one step
    state: np.ndarray | None = None  # pi0: the robot state its last prompt token stands for (the action expert's)
    action_offset: np.ndarray | None = None  # added to each row of its chunk (a checkpoint's relative actions)
    cache_salt: str = ""
    kv_format: int = 0  # storage format of its blocks (the pool layout's format id) ...
    observation_format: int = 0  # ... except its first observation_blocks blocks: the observation prefix's
    observation_blocks: int = 0
    output_token_ids: list[int] = field(default_factory=list)
    all_token_ids: list[int] = field(init=False)  # prompt then output, kept as one list (appended, never rebuilt)
    token_block_hashes: list[bytes] = field(default_factory=list)  # of its full blocks so far, extended as they fill
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # hashes of full blocks registered so far
    num_computed_tokens: int = 0  # tokens whose K/V is in the pool
    num_cached_tokens: int = 0  # of the prompt, reused from the prefix cache at admission
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: str = ""  # one of io.FINISH_REASONS
    error_code: ErrorCode | None = None
    actions: torch.Tensor | None = None
    generator: torch.Generator | None = None
    arrival_s: float = field(default_factory=time.perf_counter)
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    detokenizer: IncrementalDetokenizer | None = None  # the answer's text as it grows (text requests)
    matcher: LLMatcher | None = None  # the answer's constraint, advanced token by token (engine/grammar.py)
    logprobs: int = -1  # -1 = none; k >= 0: each answer token's log-probability and k alternatives
    output_logprobs: list[TokenLogprob] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.all_token_ids = [*self.prompt_token_ids, *self.output_token_ids]

    def append_output(self, token: int) -> None:
        self.output_token_ids.append(token)
        self.all_token_ids.append(token)

    def block_format(self, index: int) -> int:
        """Storage format of block ``index`` of this request (mixed-format pools store observations apart)."""
        return self.observation_format if index < self.observation_blocks else self.kv_format

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_cached_image_tokens(self) -> int:
        """Of the tokens reused from the prefix cache, those inside an image's span: image KV nobody recomputed."""
        cached = self.num_cached_tokens
        return sum(max(0, min(s.start + s.length, cached) - s.start) for s in self.mm_spans if s.image)

    @property
    def prefill_done(self) -> bool:
        return self.num_computed_tokens >= self.num_prompt_tokens

    @property
    def service_class(self) -> int:
        """Scheduling class; classes are served in this order whatever ``priority`` says.

        0: an action chunk is still owed (a fixed-rate control loop waits on it every frame);
        1: VQA (someone waits for the answer, so it goes ahead of older language requests);
        2: other language (may trail over several frames).
        A request that got its chunk and still decodes text is language work from then on.
        """
        if self.want_actions and self.actions is None:
            return SERVE_ACTIONS
        return SERVE_VQA if self.task_type == "vqa" else SERVE_LANGUAGE
