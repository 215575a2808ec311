"""`oxygen-ros generate`: run the engine once on a prompt, offline, without ROS (a quick check that a model works)."""

import argparse
import json
import sys
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="answer a prompt with the engine directly (no ROS graph needed)")
    parser.add_argument("prompt", help="the user message")
    parser.add_argument("--model", default="smollm2-135m", help="registered model name or Hugging Face folder")
    parser.add_argument("--observation", default="", help="scene text given to the model as the system turn")
    parser.add_argument("--image", action="append", default=[], metavar="FILE",
                        help="an image file (PNG, JPEG, ...) the question is about; repeat for several; needs a "
                             "vision-language model folder (SmolVLM / Idefics3)")  # fmt: skip
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus mass kept; 1 = off")
    parser.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 = off")
    parser.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min_p x the top one's; 0 = off")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help="> 1 discourages repeats; 1 = off")
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT", help="end the answer before TEXT")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--raw", action="store_true", help="do not apply the chat template")
    parser.add_argument("--system", default="", help="this request's system prompt (after the observation)")
    parser.add_argument("--template-option", action="append", default=[], metavar="NAME=JSON",
                        help="a chat template variable, e.g. enable_thinking=false; repeat for several")  # fmt: skip
    constrain = parser.add_mutually_exclusive_group()
    constrain.add_argument("--json-schema", metavar="SCHEMA", help="the answer is JSON valid against SCHEMA (JSON text, "
                           "or @FILE)")  # fmt: skip
    constrain.add_argument("--regex", help="the answer matches this regular expression")
    constrain.add_argument("--grammar", metavar="GBNF", help="the answer matches this GBNF grammar (text, or @FILE)")
    parser.add_argument("--logprobs", type=int, default=-1, metavar="K",
                        help="print each token's log-probability and K alternatives (with --json)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the answer and its stats as one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.config import EngineConfig
    from oxygen_ros.engine.engine import Engine
    from oxygen_ros.engine.io import GenerateRequest, Observation
    from oxygen_ros.engine.sampling_params import SamplingParams
    from oxygen_ros.errors import EngineError, ErrorCode

    try:
        images = [_read_image(path) for path in args.image]
        engine = Engine(EngineConfig(model=args.model, device=args.device, kv_cache_bytes=256 << 20))
        if images and not (engine.bundle.vision or engine.bundle.vla):
            raise EngineError(ErrorCode.FAILED_PRECONDITION, f"model {engine.bundle.model_id!r} has no vision encoder: "
                              "--image needs a SmolVLM / Idefics3 folder")  # fmt: skip
        request = GenerateRequest(
            args.prompt,
            observation=Observation(text=args.observation, images=images) if args.observation or images else None,
            chat=not args.raw,
            system_prompt=args.system,
            template_options=dict(_option(text) for text in args.template_option),
            constraint=_constraint(args),
            logprobs=args.logprobs,
            sampling=SamplingParams(
                max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                min_p=args.min_p, repetition_penalty=args.repetition_penalty, stop=args.stop, seed=args.seed,
            ),
        )
        start = time.perf_counter()
        (out,) = engine.generate([request])
        seconds = time.perf_counter() - start
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.json:
        print(out.text)
        return 0
    print(
        json.dumps(
            {
                "text": out.text,
                "token_ids": out.token_ids,
                "finish_reason": out.finish_reason,
                "logprobs": [{"token": lp.token, "logprob": round(lp.logprob, 4),
                              "top": dict(zip(lp.top_tokens, (round(v, 4) for v in lp.top_logprobs)))}
                             for lp in out.logprobs],  # fmt: skip
                "prompt_tokens": out.prompt_tokens,
                "reused_prefix_tokens": out.reused_prefix_tokens,
                "generated_tokens": out.generated_tokens,
                "latency_ms": round(out.latency_ms, 1),
                "tokens_per_s": round(out.generated_tokens / seconds, 2),
                "model": engine.bundle.model_id,
                "device": str(engine.device),
            }
        )
    )
    return 0


def _option(text: str) -> tuple[str, object]:
    """NAME=JSON (a bare word that is not JSON is a string)."""
    from oxygen_ros.errors import EngineError, ErrorCode

    name, sep, value = text.partition("=")
    if not sep or not name:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"--template-option {text!r}: expected NAME=VALUE")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def _constraint(args: argparse.Namespace):
    """The constraint the flags ask for (``@FILE`` reads the file), or None."""
    from oxygen_ros.engine.io import Constraint

    for kind in ("json_schema", "regex", "grammar"):
        source = getattr(args, kind)
        if source is not None:
            if source.startswith("@") and kind != "regex":
                with open(source[1:], encoding="utf-8") as f:
                    source = f.read()
            return Constraint(kind, source)
    return None


def _read_image(path: str):
    """An image file as the HxWx3 uint8 RGB array the engine takes; EngineError if it cannot be decoded."""
    import cv2

    from oxygen_ros.errors import EngineError, ErrorCode

    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot read image {path!r}: missing or not an image format "
                          "OpenCV decodes")  # fmt: skip
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
