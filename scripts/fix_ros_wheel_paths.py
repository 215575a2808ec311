"""Point the ROS 2 wheels' CMake metadata at this venv instead of the manylinux container they were built in.

The Kilted wheels were built with the interpreter at /opt/python/cp311-cp311. Their
`share/*/cmake/export_*__rosidl_generator_pyExport.cmake` files name its include and site-packages directories, and
the ament index `parent_prefix_path` entries name its prefix. CMake rejects imported targets whose include
directories do not exist, so building our interfaces fails until those paths name this interpreter and venv.

Run it with the venv's own Python (`make venv` does): the venv is `sys.prefix`. Idempotent: a second run rewrites
nothing. It fails loudly if any other form of the build path remains, so a changed wheel layout is noticed here
rather than as an obscure CMake error later.
"""

import sys
import sysconfig
from pathlib import Path

BUILD_PREFIX = "/opt/python/cp311-cp311"


def _rewrite(path: Path, fix) -> bool:
    old = path.read_text()
    new = fix(old)
    if new != old:
        path.write_text(new)
    return new != old


def main() -> int:
    prefix = Path(sys.prefix)
    paths = sysconfig.get_paths()
    substitutions = [
        (f"{BUILD_PREFIX}/include/python3.11", paths["include"]),
        (f"{BUILD_PREFIX}/lib/python3.11/site-packages", paths["purelib"]),
    ]

    def fix_cmake(text: str) -> str:
        for old, new in substitutions:
            text = text.replace(old, new)
        return text

    def fix_prefix_list(text: str) -> str:
        entries = text.strip().split(":")
        if BUILD_PREFIX not in entries:
            return text
        return ":".join(str(prefix) if entry == BUILD_PREFIX else entry for entry in entries)

    cmake_files = sorted(prefix.glob("share/*/cmake/*.cmake"))
    index_files = sorted(prefix.glob("share/ament_index/resource_index/parent_prefix_path/*"))
    changed = sum(_rewrite(f, fix_cmake) for f in cmake_files) + sum(_rewrite(f, fix_prefix_list) for f in index_files)

    leftovers = [str(f) for f in cmake_files + index_files if BUILD_PREFIX in f.read_text()]
    if leftovers:
        print(
            f"fix_ros_wheel_paths: unhandled {BUILD_PREFIX} paths remain in:", *leftovers, sep="\n  ", file=sys.stderr
        )
        return 1
    print(f"fix_ros_wheel_paths: rewrote {changed} file(s) under {prefix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
