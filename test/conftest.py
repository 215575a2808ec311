"""Session-wide test setup: the Triton mode, a private ROS domain for this run and rclpy contexts inside it (see
ros_harness), and a clean copy of the package for build tests."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from ros_harness import acquire_domain_id, make_context

pytest_plugins = ["pi0_fixtures", "model_fixtures"]  # fixtures the model, engine and bench tests share

# Triton fixes interpreter-or-compiler when first imported, and any test module that imports transformers' modeling
# code imports it while being collected. This file is imported before every test module, so the choice is made
# here: without CUDA, Triton kernels run in the interpreter (kernels/dispatch.py still runs torch unless asked).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def ros_domain_id():
    """This session's ROS_DOMAIN_ID, exported so node subprocesses inherit it; discovery stays on this host."""
    lease = acquire_domain_id()
    saved = {name: os.environ.get(name) for name in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")}
    os.environ["ROS_DOMAIN_ID"] = str(lease.domain_id)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    yield lease.domain_id
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    lease.release()


@pytest.fixture
def ros_context(ros_domain_id):
    """A fresh rclpy context on this session's domain, shut down after the test."""
    context = make_context(ros_domain_id)
    yield context
    context.try_shutdown()


@pytest.fixture
def one_torch_thread():
    """Two cores are shared with other test runs: one intra-op thread keeps timings honest."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(scope="session")
def package_source(tmp_path_factory):
    """A copy of the package as a clone would have it (tracked and unignored files), for builds that write into
    their source tree or must not see local build outputs."""
    repo = Path(__file__).parents[1]
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=repo, capture_output=True, check=True, text=True,
    ).stdout  # fmt: skip
    dest = tmp_path_factory.mktemp("source") / "oxygen_ros"
    for name in filter(None, listing.split("\0")):
        source = repo / name
        if source.is_symlink() or source.is_file():  # listed but deleted files are skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name, follow_symlinks=False)
    return dest
