"""The `oxygen-ros` command: one module per subcommand, each exposing `register(subparsers)`.

A subcommand module adds its parser to `subparsers` and sets `func` (called with the parsed args; returns the exit
code). It imports heavy dependencies (torch, rclpy, the engine) inside `func`, so `oxygen-ros --help` stays fast and
works where some of them are missing. Add a new subcommand by listing its module in `main.SUBCOMMANDS`.
"""
