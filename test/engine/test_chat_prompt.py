"""Chat as robots use it, on the real SmolLM2 weights: a per-request system prompt keeps the observation's KV shared
across tasks, a conversation's earlier turns come from the prefix cache on the next turn, tools and template
options render as transformers renders them, and what a model cannot take is refused naming the field."""

import numpy as np
import pytest
import torch
from engine_helpers import make_engine
from hf_reference import hf_smollm2
from transformers import PreTrainedTokenizerFast

from oxygen_ros.engine.input_processor import RENDERED_CHARS_PER_TOKEN
from oxygen_ros.engine.io import ChatMessage, GenerateRequest, Observation
from oxygen_ros.engine.sampling_params import SamplingParams
from oxygen_ros.errors import EngineError, ErrorCode
from oxygen_ros.models.tokenizer import Tokenizer

SCENE = " ".join(f"Shelf {i} holds a {c} box of {n} screws." for i, (c, n) in enumerate(
    [("red", 12), ("blue", 40), ("green", 7), ("yellow", 25), ("white", 3), ("black", 18), ("orange", 9)]))  # fmt: skip
OBS = Observation(observation_id="shelves", text=SCENE)
BLOCK = 16


@pytest.fixture
def engine(smollm2_bundle):
    return make_engine(smollm2_bundle, block_size=BLOCK)


def _ask(prompt: str, **fields) -> GenerateRequest:
    return GenerateRequest(prompt, observation=OBS, sampling=SamplingParams(max_new_tokens=12), **fields)


def test_a_request_system_prompt_keeps_the_observation_shared(engine):
    """Each task brings its own system prompt; all of them still reuse the observation's blocks, because the
    observation comes first (after the node's system prompt) and the request's system prompt after it."""
    first = engine.generate([_ask("Which shelf has the most screws?", task_type="vqa",
                                  system_prompt="Answer with a shelf number only.")])[0]  # fmt: skip
    head = len(engine.tokenizer.encode(engine.tokenizer.apply_chat_template(
        [{"role": "system", "content": f"{engine.config.system_prompt}\nObservation: {SCENE}"}],
        add_generation_prompt=False)))  # fmt: skip
    others = engine.generate([
        _ask("Plan a path to the red box.", task_type="navigation", system_prompt="You drive a wheeled base."),
        _ask("Pick up the blue box.", task_type="instruction", system_prompt="You control a 5-joint arm. Be terse."),
    ])  # fmt: skip
    shared = (head - 2) // BLOCK * BLOCK  # the observation's full blocks (the turn's closing tokens may differ)
    print(f"observation head {head} tokens; reused by tasks with other system prompts: "
          f"{[o.reused_prefix_tokens for o in others]} of {[o.prompt_tokens for o in others]}")
    assert first.ok and shared >= 4 * BLOCK
    for out in others:
        assert out.ok and out.reused_prefix_tokens >= shared


def test_conversation_turns_reuse_the_earlier_turns(engine):
    """Turns 2 and 3 of a conversation find turn 1's and turn 2's prompt and answer in the prefix cache."""
    history: list[ChatMessage] = []
    reused, previous = [], 0
    for question in ("Which shelf holds the red box?", "How many screws are in it?", "And in the blue box?"):
        out = engine.generate([_ask(question, messages=list(history))])[0]
        assert out.ok
        reused.append((out.reused_prefix_tokens, previous))
        previous = out.prompt_tokens + out.generated_tokens
        history += [ChatMessage("user", question), ChatMessage("assistant", out.text)]
    print(f"reused on turns 1-3 (of the previous turn's prompt + answer): {reused}")
    for tokens, before in reused[1:]:
        assert tokens >= (before - 2) // BLOCK * BLOCK - BLOCK and tokens >= 4 * BLOCK


TOOL_TEMPLATE = (  # a Qwen3-like template: tools in the system turn, tool calls, thinking switched by a variable
    "{% if tools %}<|im_start|>system\n# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for call in m.tool_calls or [] %}<tool_call>{{ call.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


def test_tools_tool_calls_and_options_render_as_transformers_does(smollm2_bundle):
    backend = smollm2_bundle.tokenizer.backend
    ours = Tokenizer(backend, chat_template=TOOL_TEMPLATE, bos_token=None, eos_token="<|im_end|>")
    theirs = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", chat_template=TOOL_TEMPLATE)
    tools = [{"type": "function", "function": {"name": "grasp", "parameters": {
        "type": "object", "properties": {"shelf": {"type": "integer"}}}}}]  # fmt: skip
    call = {"type": "function", "function": {"name": "grasp", "arguments": {"shelf": 1}}}
    messages = [{"role": "user", "content": "Grasp the blue box."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "grasped"}]  # fmt: skip
    for options in ({}, {"enable_thinking": False}):
        expected = theirs.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True,
                                              **options)  # fmt: skip
        assert ours.apply_chat_template(messages, tools=tools, **options) == expected
    assert {"tools", "enable_thinking"} <= ours.template_variables


@pytest.mark.parametrize("fields, field", [
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"template_options": {"enable_thinking": False}}, "template_options.enable_thinking"),
    ({"template_options": {"messages": []}}, "template_options.messages"),
    ({"template_options": {"raise_exception": True}}, "template_options.raise_exception"),  # a template function
    ({"messages": [ChatMessage("assistant", "", tool_calls=["grasp"]), ChatMessage("user", "hi")]},
     "messages[0].tool_calls"),
    ({"messages": [ChatMessage("system", "be brief", images=[np.zeros((8, 8, 3), np.uint8)])]}, "messages[0].images"),
    ({"messages": [ChatMessage("robot", "hi")]}, "messages[0].role"),
    ({"messages": [ChatMessage("user", "hi", images=[np.zeros((8, 8, 3), np.uint8)])]}, "messages[0].images"),
    ({"messages": [ChatMessage("user", "hi", tool_calls=[{}])]}, "messages[0].tool_calls"),
    ({"messages": [ChatMessage("system", "be brief")], "system_prompt": "be long"}, "system_prompt"),
    ({"chat": False, "system_prompt": "be brief"}, "system_prompt"),
])  # fmt: skip
def test_what_the_model_cannot_take_is_refused_naming_the_field(engine, fields, field):
    with pytest.raises(EngineError) as err:
        engine.submit(_ask("hi", **fields))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and err.value.message.startswith(field), err.value.message


def test_a_rendering_longer_than_any_context_is_refused_before_it_is_tokenized(engine):
    """A template may multiply what it is given (tools indented at every level of their nesting, as Llama 3.x's
    tojson(indent=4) does): a rendering over 32 characters a token of max_model_len cannot fit the context in any
    tokenizer, and tokenizing it would hold the engine's thread for every request."""
    backend = engine.tokenizer.backend
    engine.inputs.tokenizer = Tokenizer(backend, chat_template="{% for m in messages %}{{ m.content * 1000 }}"
                                        "{% endfor %}", bos_token=None, eos_token="<|im_end|>")  # fmt: skip
    limit = RENDERED_CHARS_PER_TOKEN * engine.inputs.max_model_len
    with pytest.raises(EngineError) as err:
        engine.submit(_ask("x" * (limit // 1000 + 1), messages=[]))
    assert err.value.code == ErrorCode.OUT_OF_RANGE and "cannot fit the context" in err.value.message
    engine.check_invariants()
    assert engine.pool.num_used == 0


def test_a_conversation_must_end_with_a_question(engine):
    with pytest.raises(EngineError) as err:
        engine.submit(_ask("", messages=[ChatMessage("user", "hi"), ChatMessage("assistant", "hello")]))
    assert err.value.code == ErrorCode.INVALID_ARGUMENT and "last turn" in err.value.message
    out = engine.generate([_ask("", messages=[ChatMessage("user", "Which shelf holds the red box?")])])[0]
    assert out.ok and out.generated_tokens > 0


def test_a_conversation_answers_as_transformers_does(engine):
    """The rendered conversation (observation turn, earlier turns, question) answered token for token as
    transformers answers the same chat through its own template rendering."""
    history = [ChatMessage("user", "Which shelf holds the red box?"), ChatMessage("assistant", "Shelf 0.")]
    greq = _ask("How many screws are in it?", messages=history, system_prompt="Answer in a few words.")
    (out,) = engine.generate([greq])
    model, tokenizer = hf_smollm2()
    chat = [{"role": "system", "content": f"{engine.config.system_prompt}\nObservation: {SCENE}\n"
             "Answer in a few words."}, *({"role": m.role, "content": m.content} for m in history),
            {"role": "user", "content": "How many screws are in it?"}]  # fmt: skip
    ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert engine.encode(greq) == list(ids)
    reference = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert out.token_ids == reference[0, len(ids):].tolist()[: len(out.token_ids)]
