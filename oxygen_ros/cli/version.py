"""`oxygen-ros version`: what is installed and which device the engine would use, for bug reports and setup checks."""

import importlib.util
import platform


def register(subparsers) -> None:
    parser = subparsers.add_parser("version", help="print versions of oxygen_ros, torch, triton, rclpy and the device")
    parser.set_defaults(func=run)


def _rclpy() -> str:
    if importlib.util.find_spec("rclpy") is None:
        return "not installed (engine-only install)"
    from rclpy.utilities import get_rmw_implementation_identifier

    interfaces = "with" if importlib.util.find_spec("oxygen_ros.msg") else "WITHOUT"
    return f"available, {get_rmw_implementation_identifier()}, {interfaces} oxygen_ros interfaces"


def _triton() -> str:
    if importlib.util.find_spec("triton") is None:
        return "not installed"
    import triton

    return triton.__version__


def _device(torch) -> str:
    from oxygen_ros.engine.device import torch_device

    device = torch_device("auto")
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)}) for device: auto"
    return f"{device} for device: auto (no CUDA device)"


def run(args) -> int:
    import torch

    import oxygen_ros

    rows = {
        "oxygen_ros": f"{oxygen_ros.__version__} ({oxygen_ros.__path__[0]})",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _triton(),
        "rclpy": _rclpy(),
        "device": _device(torch),
    }
    for name, value in rows.items():
        print(f"{name:<11} {value}")
    return 0
