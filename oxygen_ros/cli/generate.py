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


def _read_image(path: str):
    """An image file as the HxWx3 uint8 RGB array the engine takes; EngineError if it cannot be decoded."""
    import cv2

    from oxygen_ros.errors import EngineError, ErrorCode

    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise EngineError(ErrorCode.INVALID_ARGUMENT, f"cannot read image {path!r}: missing or not an image format "
                          "OpenCV decodes")  # fmt: skip
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
