"""`oxygen-ros instruct "..." [--rate HZ] [--duration S]`: follow an instruction through the running graph's
/follow_instruction action, printing the narration and chunk count as feedback streams in; Ctrl-C cancels the goal."""

import argparse


def register(subparsers) -> None:
    from oxygen_ros.cli.options import add_namespace_argument, add_timeout_argument

    parser = subparsers.add_parser("instruct", help="stream action chunks for an instruction (Ctrl-C cancels)")
    parser.add_argument("instruction", help="what to do, e.g. 'pick up the red triangle'")
    parser.add_argument("--rate", type=float, default=10.0, metavar="HZ", help="action chunks per second")
    parser.add_argument("--duration", type=float, default=5.0, metavar="S", help="seconds to follow (0 = until Ctrl-C)")
    add_timeout_argument(parser)
    add_namespace_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.action import FollowInstruction
    from oxygen_ros.cli.client import FeedbackPrinter, run_client, run_goal

    goal = FollowInstruction.Goal(instruction=args.instruction, rate_hz=args.rate, duration_s=args.duration)
    feedback = FeedbackPrinter(lambda f: f.narration, lambda f, _, count: f"chunk {count:4d}  {f.narration.strip()}")

    def summary(result) -> str:
        return f"{result.chunks_sent} chunks, {result.achieved_rate_hz:.2f} Hz achieved of {args.rate:g} Hz requested"

    return run_client(
        "oxygen_instruct",
        lambda c: run_goal(c, FollowInstruction, "follow_instruction", goal, args.timeout, feedback, summary,
                           "the instruction, --rate and --duration"),
        args.namespace,
    )  # fmt: skip
