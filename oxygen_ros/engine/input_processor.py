"""A ``GenerateRequest`` -> a ``Request`` ready to schedule: checked, its prompt laid out by the model's prompt style,
its KV formats chosen and the request known to fit, before anything is allocated.

Prompts put the observation first so that every task asking about it shares the same leading tokens, and so the
same KV blocks: a chat model gets the observation's text as the system turn, a vision-language model the frames
(then the text) at the head of the user turn, a VLA the observation prefix it lays out itself.
"""

import math
import threading
from dataclasses import replace
from functools import lru_cache

import jinja2
import torch

from oxygen_ros.config import EngineConfig
from oxygen_ros.engine.camera_slots import slot_images
from oxygen_ros.engine.detokenizer import IncrementalDetokenizer
from oxygen_ros.engine.frame_reuse import SimilarFrames
from oxygen_ros.engine.grammar import GrammarCompiler
from oxygen_ros.engine.chat_prompt import chat_turns, check_chat, system_text, turn_images, vision_turns
from oxygen_ros.engine.io import GenerateRequest, Observation
from oxygen_ros.engine.memory import KVFormats
from oxygen_ros.engine.request import Request
from oxygen_ros.errors import NO_ACTION_HEAD, EngineError, ErrorCode
from oxygen_ros.models.interface import PreparedInputs, TooManyImages
from oxygen_ros.models.registry import ModelBundle
from oxygen_ros.tasks import TASK_TYPES

MAX_TOP_LOGPROBS = 20  # alternatives per answer token a request may ask for (OpenAI's bound)
OBSERVATION_HEADS = 256  # observations whose chat head's length is remembered (a camera's recent frames)
# a rendered conversation longer than this many characters a token of the context cannot fit it in any tokenizer (a
# template that indents nested tools, say, multiplies their characters): refused before it is tokenized
RENDERED_CHARS_PER_TOKEN = 32


class InputProcessor:
    def __init__(self, config: EngineConfig, bundle: ModelBundle, formats: KVFormats, max_model_len: int,
                 pool_units: int, device: torch.device) -> None:  # fmt: skip
        self.config, self.bundle, self.model, self.tokenizer = config, bundle, bundle.model, bundle.tokenizer
        self.formats, self.max_model_len, self.pool_units, self.device = formats, max_model_len, pool_units, device
        threshold = config.reuse_similarity_threshold
        self.similar_frames = SimilarFrames(threshold) if threshold > 0 else None  # approximate reuse (opt-in)
        self._head = lru_cache(maxsize=OBSERVATION_HEADS)(self._observation_head)
        self._grammars: GrammarCompiler | None = None
        self._grammars_lock = threading.Lock()

    @property
    def grammars(self) -> GrammarCompiler:
        """Built on the first constrained request (it indexes the vocabulary once: ~0.2 s for SmolLM2's), once
        whichever threads ask at the same time."""
        with self._grammars_lock:
            if self._grammars is None:
                self._grammars = GrammarCompiler(self.tokenizer)
            return self._grammars

    def prepare_constraint(self, greq: GenerateRequest) -> None:
        """Compile the request's constraint ahead (the caller's thread); EngineError naming the field if it cannot."""
        if greq.constraint is not None and greq.want_text and self.model.serves_text:
            self.grammars.prepare(greq.constraint)

    def check(self, greq: GenerateRequest) -> tuple[GenerateRequest, PreparedInputs, tuple[int, int, int]]:
        """The request (its observation resolved to a similar recent frame when that is on), its prompt and block
        formats, once it is known to be valid and to fit (EngineError naming what is wrong; nothing is allocated)."""
        self.validate(greq)
        if self.similar_frames is not None and greq.observation is not None:
            greq = replace(greq, observation=self.similar_frames.resolve(greq.observation))
        prompt = self.prepare(greq)
        formats = self.block_formats(greq, prompt)
        self.check_fits(prompt, greq.sampling.max_new_tokens, formats)
        return greq, prompt, formats

    def request(self, greq: GenerateRequest, prompt: PreparedInputs, formats: tuple[int, int, int], request_id: str,
                number: int, arrival: float) -> Request:  # fmt: skip
        """The checked request (``check``) as the engine's ``Request``; ``number`` seeds it unless it has a seed."""
        sampling = greq.sampling
        generator = None
        if not sampling.greedy or greq.want_actions:  # action noise is seeded per request too
            seed = sampling.seed if sampling.seed is not None else self.config.seed + number
            generator = torch.Generator(device=self.device).manual_seed(seed)
        detokenizer = IncrementalDetokenizer(self.tokenizer.decode, sampling.stop) if greq.want_text else None
        matcher = self.grammars.matcher(greq.constraint) if greq.constraint is not None else None
        return Request(
            request_id=request_id, task_id=greq.task_id, task_type=greq.task_type, prompt_token_ids=prompt.token_ids,
            sampling=sampling, want_text=greq.want_text, want_actions=greq.want_actions, priority=greq.priority,
            deadline=arrival + greq.deadline_s if greq.deadline_s else 0.0, cache_salt=greq.cache_salt,
            kv_format=formats[0], observation_format=formats[1], observation_blocks=formats[2], generator=generator,
            arrival_s=arrival, mm_spans=prompt.mm_spans, pixels=prompt.pixels,
            bidirectional_len=prompt.bidirectional_len, state=prompt.state, action_offset=prompt.action_offset,
            detokenizer=detokenizer, matcher=matcher, logprobs=greq.logprobs,
        )  # fmt: skip

    def validate(self, greq: GenerateRequest) -> None:
        """What the request asks must make sense for this model: INVALID_ARGUMENT or FAILED_PRECONDITION naming it."""

        def bad(msg: str) -> EngineError:
            return EngineError(ErrorCode.INVALID_ARGUMENT, msg)

        if not greq.prompt.strip() and not greq.messages:
            raise bad("the prompt is empty")
        check_chat(greq, self.tokenizer, self.model.prompt_style, self.bundle.model_id)
        if greq.constraint is not None and not greq.want_text:
            raise bad(f"{greq.constraint.kind}: it constrains a text answer, and the request asks for none")
        if greq.task_type not in TASK_TYPES:
            raise bad(f"unknown task type {greq.task_type!r}; expected one of {list(TASK_TYPES)}")
        if greq.want_actions and self.model.action_shape is None:
            raise EngineError(
                ErrorCode.FAILED_PRECONDITION, f"model {self.bundle.model_id!r} {NO_ACTION_HEAD} (use a VLA model)"
            )
        if greq.want_text and not self.model.serves_text:
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"model {self.bundle.model_id!r} serves action chunks "
                              "only: ask with want_text=False")  # fmt: skip
        if not (greq.want_text or greq.want_actions):
            raise bad("the request asks for neither text nor actions")
        greq.sampling.check()
        if not 0.0 <= greq.deadline_s < math.inf:  # also rejects NaN
            raise bad(f"deadline_s must be a finite number of seconds >= 0 (0 = none), got {greq.deadline_s}")
        if not -1 <= greq.logprobs <= MAX_TOP_LOGPROBS:
            raise bad(f"logprobs must be -1 (none) or the alternatives per token in [0, {MAX_TOP_LOGPROBS}], got "
                      f"{greq.logprobs}")  # fmt: skip
        self.prepare_constraint(greq)

    def encode(self, greq: GenerateRequest) -> list[int]:
        """The prompt's token ids (for benchmarks and tests that build the same prompt)."""
        return self.prepare(greq).token_ids

    def prepare(self, greq: GenerateRequest) -> PreparedInputs:
        """The prompt in the model's style (see the module docstring and ``chat_prompt``); without ``chat`` (raw),
        a chat model's prompt is the text itself and a vision-language model's places one ``<image>`` per frame.
        Too many images -> OUT_OF_RANGE, anything else the model or its template refuses -> INVALID_ARGUMENT."""
        obs, style = greq.observation, self.model.prompt_style
        images = self._images(greq) if obs is not None and style != "chat" else []
        state = obs.state if obs is not None and len(obs.state) else None
        text = greq.prompt
        if greq.chat and style in ("chat", "vision_chat"):
            if style == "chat":
                turns = chat_turns(greq, self.config.system_prompt)
            else:
                turns, images = vision_turns(greq, len(images)), images + turn_images(greq)
            text = self._render(turns, greq)
        try:
            prompt = self.model.prepare_inputs(self.tokenizer, text, images, state if style == "observation" else None)
        except TooManyImages as exc:
            raise EngineError(ErrorCode.OUT_OF_RANGE, str(exc)) from exc
        except ValueError as exc:
            raise EngineError(ErrorCode.INVALID_ARGUMENT, str(exc)) from exc
        if style == "chat" and greq.chat and obs is not None and obs.text:
            head = self._head(obs.text)
            prompt.observation_len = next((i for i, (a, b) in enumerate(zip(head, prompt.token_ids)) if a != b),
                                          min(len(head), len(prompt.token_ids)))  # fmt: skip
        return prompt

    def _render(self, turns: list[dict], greq: GenerateRequest) -> str:
        """The turns through the model's chat template; INVALID_ARGUMENT when the template refuses them (e.g. roles
        that do not alternate), with its own words."""
        try:
            text = self.tokenizer.apply_chat_template(turns, tools=greq.tools, **greq.template_options)
        except (jinja2.TemplateError, TypeError, ValueError, RecursionError) as exc:  # its own raise, its filters
            raise EngineError(ErrorCode.INVALID_ARGUMENT, f"messages: the chat template of model "
                              f"{self.bundle.model_id!r} refuses this conversation: {exc}") from exc  # fmt: skip
        bound = RENDERED_CHARS_PER_TOKEN * self.max_model_len  # before tokenizing it on the engine's thread
        if len(text) > bound:
            raise EngineError(ErrorCode.OUT_OF_RANGE, f"messages: the chat template renders this conversation in "
                              f"{len(text)} characters, more than {RENDERED_CHARS_PER_TOKEN} per token of "
                              f"max_model_len {self.max_model_len}: it cannot fit the context")  # fmt: skip
        return text

    def _images(self, greq: GenerateRequest) -> list:
        """The observation's images in the model's camera slots (``camera_slots``); FAILED_PRECONDITION for an action
        request to a checkpoint that names its cameras when no camera image came (LeRobot refuses it too)."""
        obs, cameras = greq.observation, self.model.camera_keys
        images = slot_images(obs.images, obs.image_keys, cameras)
        if greq.want_actions and cameras and all(image is None for image in images):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, "no camera image in the observation: this checkpoint "
                              f"reads {', '.join(cameras)}")  # fmt: skip
        return images

    def _observation_head(self, observation_text: str) -> tuple[int, ...]:
        """The tokens of the chat's system turn that carries this observation (the leading tokens it alone decides),
        tokenized once per observation."""
        turn = self.tokenizer.apply_chat_template(
            [{"role": "system", "content": system_text(self.config.system_prompt, Observation(text=observation_text), "")}],
            add_generation_prompt=False,
        )
        return tuple(self.tokenizer.encode(turn))

    def block_formats(self, greq: GenerateRequest, prompt: PreparedInputs) -> tuple[int, int, int]:
        """Where a request's blocks are stored: (its format, its observation prefix's format, how many leading full
        blocks are that prefix): the images of a vision-language model, a VLA's bidirectional region, the chat turn
        that carries the scene text."""
        formats = self.formats
        kv_format = formats.task_formats[greq.task_type]
        if formats.observation_format is None or formats.observation_format == kv_format:
            return kv_format, kv_format, 0
        observation_blocks = prompt.observation_len // self.config.block_size
        return kv_format, formats.observation_format if observation_blocks else kv_format, observation_blocks

    def check_fits(self, prompt: PreparedInputs, max_new_tokens: int, formats: tuple[int, int, int]) -> None:
        """OUT_OF_RANGE when the request could never run: too long for the model, a bidirectional region over one
        step's budget, or more KV than the whole pool."""
        total = len(prompt.token_ids) + max_new_tokens
        if total > self.max_model_len:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"prompt ({len(prompt.token_ids)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the context of "
                f"{self.max_model_len} tokens",
            )
        if prompt.bidirectional_len > self.config.max_num_batched_tokens:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"{prompt.bidirectional_len} prefix tokens that see each other must be computed in one step, more "
                f"than max_num_batched_tokens={self.config.max_num_batched_tokens}",
            )
        units = self.formats.units_of(formats, total)
        if units > self.pool_units:
            raise EngineError(
                ErrorCode.OUT_OF_RANGE,
                f"the request needs {units} KV blocks' worth of pool, the whole pool has {self.pool_units}",
            )
