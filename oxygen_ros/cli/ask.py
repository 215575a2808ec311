"""`oxygen-ros ask "..."`: one question to the running graph's VQA node (/vqa/ask), answered about the latest camera
observation or a named one."""

import argparse


def register(subparsers) -> None:
    from oxygen_ros.cli.options import add_timeout_argument

    parser = subparsers.add_parser("ask", help="ask the running graph's VQA node a question about what it sees")
    parser.add_argument("question", help="the question, e.g. 'Which object is closest to the robot?'")
    parser.add_argument("--observation", default="", metavar="ID", help="observation id to ask about ('' = latest)")
    parser.add_argument("--max-new-tokens", type=int, default=0, help="answer token budget (0 = the node's default)")
    add_timeout_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.cli.client import run_client

    return run_client("oxygen_ask", lambda c: _ask(c, args))


def _ask(client, args: argparse.Namespace) -> int:
    from oxygen_ros.cli.client import failed
    from oxygen_ros.srv import AskQuestion

    request = AskQuestion.Request(
        question=args.question, observation_id=args.observation, max_new_tokens=max(args.max_new_tokens, 0)
    )
    response = client.call(AskQuestion, "/vqa/ask", request, args.timeout)
    if not response.success:
        return failed(response.error_code, response.message)
    print(response.answer.strip())
    print(f"({response.reused_prefix_tokens} prompt tokens reused from the shared pool, {response.latency_ms:.0f} ms)")
    return 0
