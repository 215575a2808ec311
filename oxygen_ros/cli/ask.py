"""`oxygen-ros ask "..."`: one question to the running graph's VQA node (the /vqa/ask action), answered about the
latest camera observation or a named one; the answer is printed as it streams, and Ctrl-C cancels it (its KV
blocks are freed at once)."""

import argparse
import sys


def register(subparsers) -> None:
    from oxygen_ros.cli.options import add_namespace_argument, add_timeout_argument

    parser = subparsers.add_parser("ask", help="ask the running graph's VQA node a question about what it sees")
    parser.add_argument("question", help="the question, e.g. 'Which object is closest to the robot?'")
    parser.add_argument("--observation", default="", metavar="ID", help="observation id to ask about ('' = latest)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="answer token budget (0 = the node's default)")
    add_timeout_argument(parser)
    add_namespace_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.cli.client import run_client

    return run_client("oxygen_ask", lambda c: _ask(c, args), args.namespace)


def _ask(client, args: argparse.Namespace) -> int:
    from oxygen_ros.action import AskQuestion
    from oxygen_ros.cli.client import EXIT_BAD_REQUEST, EXIT_CANCELLED, failed

    goal = AskQuestion.Goal(
        question=args.question, observation_id=args.observation, max_new_tokens=max(args.max_new_tokens, 0)
    )
    pieces: list[str] = []  # what was printed
    held = [""]  # whitespace at the end of the text so far: printed only if more text follows

    def show(feedback) -> None:
        """Print the new text as it comes, without the answer's surrounding whitespace (the result strips it)."""
        text = held[0] + feedback.text
        text = text if pieces else text.lstrip()
        body = text.rstrip()
        held[0] = text[len(body) :]
        if body:
            pieces.append(body)
            print(body, end="", flush=True)

    handle = client.send_goal(AskQuestion, "vqa/ask", goal, args.timeout, show)
    name = client.node.resolve_topic_name("vqa/ask")  # under --namespace
    if handle is None:
        print(f"{name} rejected the question", file=sys.stderr)
        return EXIT_BAD_REQUEST
    result, cancelled = client.follow(handle, name)
    printed = "".join(pieces)
    if result.success and result.answer.startswith(printed):  # the result may overtake the stream's last pieces
        print(result.answer[len(printed) :], end="")
    if pieces or result.success:
        print()
    if cancelled:
        return EXIT_CANCELLED
    if not result.success:
        return failed(result.error_code, result.message)
    about = f"about observation {result.observation_id}, " if result.observation_id else ""
    print(f"({about}{result.reused_prefix_tokens} prompt tokens reused from the shared pool, {result.latency_ms:.0f} ms)")
    return 0
