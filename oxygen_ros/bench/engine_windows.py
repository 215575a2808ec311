"""A benchmark window against engine processes (``bringup.EngineProcesses``, as on the robot): their output in a log
file of the run's folder, and any failure inside the window (a node that would not come up, a wait that timed out)
raised as one RuntimeError naming the window and that log, where the engines said why."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from oxygen_ros.bringup import EngineProcesses
from oxygen_ros.supervisor import NodeSpec


@contextmanager
def engine_window(log_path: Path, label: str, config: Path | None, model: str, overrides: dict,
                  namespaces: tuple[str, ...], others: dict[NodeSpec, dict] | None = None,
                  ) -> Iterator[EngineProcesses]:  # fmt: skip
    try:
        with log_path.open("w") as log, EngineProcesses(config, model, overrides, namespaces, log, others) as graph:
            yield graph
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"{label}: {exc} ({log_path})") from exc
