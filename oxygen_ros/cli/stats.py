"""`oxygen-ros stats`: the running inference node's KV pool as a table (/oxygen/get_pool_stats): blocks free,
cached, used and shared, the prefix hit rate, per-task usage and per-tier occupancy."""

import argparse


def register(subparsers) -> None:
    from oxygen_ros.cli.options import add_namespace_argument, add_timeout_argument

    parser = subparsers.add_parser("stats", help="print the running inference node's KV pool statistics")
    add_timeout_argument(parser)
    add_namespace_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from oxygen_ros.cli.client import EXIT_NODE_ERROR, run_client
    from oxygen_ros.srv import GetPoolStats

    def show(client) -> int:
        stats = client.call(GetPoolStats, "oxygen/get_pool_stats", GetPoolStats.Request(), args.timeout,
                            args.timeout).stats  # fmt: skip
        if stats.total_blocks == 0:
            print("the inference node has no KV pool: configure and activate it (`ros2 lifecycle set ...`)")
            return EXIT_NODE_ERROR
        print(format_stats(stats))
        return 0

    return run_client("oxygen_stats", show, args.namespace)


def format_stats(stats) -> str:
    """A KvPoolStats message as aligned text (also what a test compares against the message's numbers)."""
    used = stats.total_blocks - stats.free_blocks - stats.cached_blocks
    mib = 1 << 20
    lines = [
        f"model {stats.model}: {stats.total_blocks} blocks of {stats.block_size} tokens",
        f"  {'free':<10}{stats.free_blocks:>8}",
        f"  {'cached':<10}{stats.cached_blocks:>8}   (unreferenced, kept for prefix reuse)",
        f"  {'used':<10}{used:>8}",
        f"  {'shared':<10}{stats.shared_blocks:>8}   (referenced by more than one request)",
        f"prefix hit rate {stats.prefix_hit_rate:.2f}, fragmentation {stats.fragmentation:.3f}, "
        f"evictions {stats.evictions}, requests {stats.active_requests} active / {stats.queued_requests} queued",
    ]
    if stats.tasks:
        lines.append(f"  {'task':<24}{'type':<13}{'kv dtype':<15}{'blocks':>7}{'shared':>8}{'MiB':>9}")
        lines += [
            f"  {t.task_id:<24}{t.task_type:<13}{t.kv_dtype:<15}{t.blocks:>7}{t.shared_blocks:>8}{t.bytes / mib:>9.1f}"
            for t in stats.tasks
        ]
    else:
        lines.append("  no task holds blocks right now")
    lines.append(f"  {'tier':<8}{'blocks':>8}{'used MiB':>11}{'of MiB':>9}{'hits':>9}{'misses':>9}")
    lines += [
        f"  {t.name:<8}{t.blocks:>8}{t.used_bytes / mib:>11.1f}{t.capacity_bytes / mib:>9.1f}{t.hits:>9}{t.misses:>9}"
        for t in stats.tiers
    ]
    return "\n".join(lines)
