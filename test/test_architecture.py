"""The layering is enforced, not only drawn: the import-linter contracts of pyproject.toml (the layers in order, no
model package importing another, the engine importing no model class, ROS only at the edge, the launch path free of
torch, ctypes only in kernels/) hold on the source tree. CI runs `make test`, so the contracts run here too."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_every_import_contract_is_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout, done.stdout[-2000:]
