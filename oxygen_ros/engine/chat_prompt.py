"""A request's conversation as the turns its model's chat template renders, the observation first.

Where the observation goes decides what tasks share. A chat model gets one system turn that starts with the node's
system prompt and the observation's text, so every prompt about that observation starts with the same tokens (and
so the same KV blocks); a request's own system prompt follows inside that turn, after the observation, where it may
differ from task to task without costing the shared prefix (putting it first would make each system prompt a prefix
of its own). A vision-language model gets the frames, then the observation text and the request's system prompt, at
the head of its first user turn, for the same reason. A conversation's earlier turns come next, in order, so turn
n + 1 begins with turn n's prompt and answer and finds their blocks in the prefix cache.
"""

import math

from oxygen_ros.engine.io import CHAT_ROLES, ChatMessage, GenerateRequest, Observation
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.tokenizer import Tokenizer

MAX_MESSAGES = 64  # turns in one request's conversation
MAX_TOOLS = 64  # tool specs handed to the template
MAX_TEMPLATE_OPTIONS = 16  # template variables one request sets
# Template variables the engine itself sets: a request's template options may not override them.
RESERVED_VARIABLES = frozenset({"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token",
                                "pad_token", "unk_token"})  # fmt: skip


def _bad(message: str) -> EngineError:
    return EngineError(ErrorCode.INVALID_ARGUMENT, message)


def check_chat(greq: GenerateRequest, tokenizer: Tokenizer, style: str, model_id: str) -> None:
    """INVALID_ARGUMENT (OUT_OF_RANGE past a count bound) naming the field whose chat setting this model cannot
    take: roles, images for a text-only model, tools or options its template does not read, any of it in raw mode or
    for a VLA (which reads one instruction)."""
    chat_fields = {"messages": greq.messages, "system_prompt": greq.system_prompt, "tools": greq.tools,
                   "template_options": greq.template_options}  # fmt: skip
    given = [name for name, value in chat_fields.items() if value]
    if given and (not greq.chat or style == "observation"):
        why = "a raw request is its prompt alone" if not greq.chat else f"model {model_id!r} reads one instruction"
        raise _bad(f"{given[0]}: {why}, not a conversation")
    if not given:
        return
    if len(greq.messages) > MAX_MESSAGES:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"messages has {len(greq.messages)} turns, more than the bound of "
                          f"{MAX_MESSAGES}")  # fmt: skip
    for i, message in enumerate(greq.messages):
        if message.role not in CHAT_ROLES:
            raise _bad(f"messages[{i}].role must be one of {', '.join(CHAT_ROLES)}, got {message.role!r}")
        if message.images and style != "vision_chat":
            raise _bad(f"messages[{i}].images: model {model_id!r} reads no images")
        if message.tool_calls and message.role != "assistant":
            raise _bad(f"messages[{i}].tool_calls: only an assistant turn calls tools")
        if not all(isinstance(call, dict) for call in message.tool_calls):
            raise _bad(f"messages[{i}].tool_calls must be objects (OpenAI's tool call shape)")
        if message.images and message.role != "user":
            raise _bad(f"messages[{i}].images: only a user turn carries images")
    turns = [*greq.messages, *([ChatMessage("user", greq.prompt)] if greq.prompt else [])]
    if not turns:
        raise _bad("the prompt and messages are both empty")
    if turns[-1].role not in ("user", "tool"):
        raise _bad(f"messages: the last turn must be the user's or a tool's (the model answers it), got "
                   f"{turns[-1].role!r}")  # fmt: skip
    if greq.system_prompt and greq.messages and greq.messages[0].role == "system":
        raise _bad("system_prompt: given twice, as the field and as messages[0]; give it once")
    _check_tools(greq.tools, tokenizer, model_id)
    _check_options(greq.template_options, tokenizer, model_id)


def _check_tools(tools: list[dict], tokenizer: Tokenizer, model_id: str) -> None:
    if not tools:
        return
    if "tools" not in tokenizer.template_variables:
        raise _bad(f"tools: the chat template of model {model_id!r} takes no tools")
    if len(tools) > MAX_TOOLS:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"tools has {len(tools)} specs, more than the bound of {MAX_TOOLS}")
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools[{i}] must be an object (a function spec), got {type(tool).__name__}")


def _check_options(options: dict, tokenizer: Tokenizer, model_id: str) -> None:
    if len(options) > MAX_TEMPLATE_OPTIONS:
        raise EngineError(ErrorCode.OUT_OF_RANGE, f"template_options has {len(options)} entries, more than the bound "
                          f"of {MAX_TEMPLATE_OPTIONS}")  # fmt: skip
    readable = sorted(tokenizer.template_variables - RESERVED_VARIABLES)
    for name, value in options.items():
        if name in RESERVED_VARIABLES or name not in tokenizer.template_variables:
            raise _bad(f"template_options.{name}: the chat template of model {model_id!r} does not read it "
                       f"(it reads: {', '.join(readable) or 'nothing else'})")  # fmt: skip
        if not isinstance(value, bool | int | str) and not (isinstance(value, float) and math.isfinite(value)):
            raise _bad(f"template_options.{name} must be a boolean, number or string, got {value!r}")


def system_text(base: str, observation: Observation | None, system_prompt: str) -> str:
    """The system turn's text: the node's system prompt and the observation (shared by every task asking about it),
    then the request's own; '' when there is neither observation nor request system prompt (the template's own
    default system turn then applies, as the model was tuned)."""
    parts = [base, f"Observation: {observation.text}"] if observation is not None and observation.text else []
    return "\n".join([*parts, *([system_prompt] if system_prompt else [])])


def chat_turns(greq: GenerateRequest, base_system_prompt: str) -> list[dict]:
    """A chat model's turns (see the module docstring): the system turn carrying the observation, the conversation,
    then ``prompt`` as the last user turn."""
    messages, system_prompt = _leading_system(greq)
    system = system_text(base_system_prompt, greq.observation, system_prompt)
    turns = [{"role": "system", "content": system}] if system else []
    turns += [_turn(m, m.content) for m in messages]
    return turns + ([{"role": "user", "content": greq.prompt}] if greq.prompt else [])


def vision_turns(greq: GenerateRequest, frames: int) -> list[dict]:
    """A vision-language model's turns: ``frames`` observation images, the observation text and the request's
    system prompt at the head of the first user turn; each turn's own images before its text."""
    messages, system_prompt = _leading_system(greq)
    head: list[dict] = [{"type": "image"} for _ in range(frames)]
    if greq.observation is not None and greq.observation.text:
        head.append({"type": "text", "text": f"Observation: {greq.observation.text}\n"})
    if system_prompt:
        head.append({"type": "text", "text": f"{system_prompt}\n"})
    turns = []
    for message in [*messages, *([ChatMessage("user", greq.prompt)] if greq.prompt else [])]:
        content = [{"type": "image"} for _ in message.images] + [{"type": "text", "text": message.content}]
        if head and message.role == "user":
            content, head = head + content, []
        turns.append(_turn(message, content))
    return turns


def _leading_system(greq: GenerateRequest) -> tuple[list[ChatMessage], str]:
    """The conversation without a leading system turn, and the request's system prompt (that turn's, if any)."""
    if greq.messages and greq.messages[0].role == "system":
        return greq.messages[1:], greq.messages[0].content
    return greq.messages, greq.system_prompt


def _turn(message: ChatMessage, content: str | list[dict]) -> dict:
    turn = {"role": message.role, "content": content}
    return turn | ({"tool_calls": message.tool_calls} if message.tool_calls else {})


def turn_images(greq: GenerateRequest) -> list:
    """The conversation's own images, in the order its turns place them (after the observation's)."""
    return [image for message in greq.messages for image in message.images]
