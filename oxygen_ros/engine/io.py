"""What callers hand the engine and what they get back (plain data, no torch, no ROS)."""

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import ErrorCode


@dataclass
class Observation:
    """What the robot perceives at one instant: text from a scene describer and/or camera images."""

    observation_id: str = ""
    text: str = ""
    images: list[np.ndarray] = field(default_factory=list)  # HxWx3 uint8 RGB
    state: list[float] = field(default_factory=list)
    image_keys: list[str] = field(default_factory=list)  # each image's camera key (a checkpoint's); [] = slot order
    stamp_ns: int = 0  # when it was captured (the sender's stamp, no later than it reached the node); 0 = not said


FINISH_REASONS = ("stop", "length", "actions", "abort", "deadline")  # RequestOutput.finish_reason: the one list
CHAT_ROLES = ("system", "user", "assistant", "tool")


@dataclass
class ChatMessage:
    """One turn of a conversation, as chat templates read it (OpenAI's shape)."""

    role: str  # system | user | assistant | tool
    content: str
    images: list[np.ndarray] = field(default_factory=list)  # HxWx3 uint8 RGB, before the text (vision-language)
    tool_calls: list[dict] = field(default_factory=list)  # an assistant turn's calls: {"type": "function", ...}


@dataclass
class Constraint:
    """What the answer must match (llguidance compiles it against the model's tokenizer: engine/grammar.py)."""

    kind: str  # json_schema | regex | grammar (GBNF)
    source: str
    compiled: Any = field(default=None, compare=False, repr=False)  # set by GrammarCompiler.prepare (caller's thread)


@dataclass
class GenerateRequest:
    prompt: str
    task_id: str = "default"
    task_type: str = "generic"  # vqa | instruction | navigation | generic
    observation: Observation | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    want_text: bool = True
    want_actions: bool = False
    priority: int = 0  # within a service class (actions, then VQA, then other language; see Request.service_class)
    deadline_s: float = 0.0  # seconds from submission; finished later -> DEADLINE_EXCEEDED; 0 = none
    cache_salt: str = ""
    request_id: str = ""  # empty: the engine assigns one
    chat: bool = True  # wrap in the model's chat template, the observation as the shared system turn; False = raw
    messages: list[ChatMessage] = field(default_factory=list)  # earlier turns; ``prompt`` ('' = none) is the last
    system_prompt: str = ""  # this request's system prompt: after the observation (input_processor.py says why)
    tools: list[dict] = field(default_factory=list)  # function specs handed to a chat template that takes tools
    template_options: dict[str, bool | int | float | str] = field(default_factory=dict)  # e.g. enable_thinking
    constraint: Constraint | None = None  # the answer matches this JSON schema, regex or GBNF grammar
    logprobs: int = -1  # -1 = none; k >= 0: each answer token's log-probability and the k likeliest alternatives


@dataclass
class TokenLogprob:
    """An answer token's log-probability under the model (its raw distribution: before penalties, temperature and
    constraints) and the likeliest alternatives at that position."""

    token_id: int
    logprob: float
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)
    token: str = ""  # the texts of token_id and top_ids (special tokens spelt out), filled when the answer is done
    top_tokens: list[str] = field(default_factory=list)


@dataclass
class RequestOutput:
    request_id: str
    task_id: str
    task_type: str
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""  # one of FINISH_REASONS
    error_code: ErrorCode | None = None
    message: str = ""
    prompt_tokens: int = 0
    reused_prefix_tokens: int = 0
    reused_image_tokens: int = 0  # of those, tokens of the observation's images (their spans in the prompt)
    generated_tokens: int = 0
    queue_ms: float = 0.0
    latency_ms: float = 0.0
    actions: np.ndarray | None = None  # [horizon, action_dim]
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per answer token, when the request asked

    @property
    def ok(self) -> bool:
        return self.error_code is None


@dataclass
class TaskUsage:
    task_id: str
    task_type: str
    kv_dtype: str
    blocks: int
    shared_blocks: int
    bytes: int


@dataclass
class TierUsage:
    """Occupancy and counters of one KV tier (the ROS message is ``TierStats``)."""

    name: str  # gpu (L0: the device pool, whatever the device) | cpu (L1: host memory) | disk (L2)
    capacity_bytes: int
    used_bytes: int
    blocks: int
    hits: int  # prefix lookups served from this tier
    misses: int  # prefix lookups that fell through this tier


@dataclass
class PoolStats:
    model: str
    block_size: int
    total_blocks: int  # counts in pool units: blocks of the narrowest KV format (= blocks in a one-format pool)
    free_blocks: int
    cached_blocks: int
    used_blocks: int
    peak_used_blocks: int  # most used at once since the engine started (its high-water mark)
    shared_blocks: int
    prefix_hit_rate: float
    fragmentation: float  # allocated-but-empty token slots / allocated slots, over blocks in use
    evictions: int
    active_requests: int
    queued_requests: int
    bytes_per_block: int  # of one unit
    max_images: int = 0  # images one request's observation may carry; 0 = a text-only model (scene text only)
    tasks: list[TaskUsage] = field(default_factory=list)
    # [k]: blocks holding KV that requests of k + 1 distinct task types read since it was written (computed once)
    blocks_by_reader_types: list[int] = field(default_factory=list)
    tiers: list[TierUsage] = field(default_factory=list)  # gpu first, then cpu and disk when configured
