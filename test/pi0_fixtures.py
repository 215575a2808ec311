"""Session fixtures shared by the pi0 model and engine tests (a pytest plugin, see conftest.py): one tiny random pi0
folder and transformers' own load of it, built once per run.  Imports are lazy, so runs without pi0 tests do not pay
for transformers' PI0."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pi0_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``save_pretrained`` of ``pi0_folders.build_pi0()`` plus its tokenizer."""
    from pi0_folders import write_folder

    path = tmp_path_factory.mktemp("pi0")
    write_folder(path)
    return path


@pytest.fixture(scope="session")
def pi0_hf(pi0_folder: Path):
    """transformers' own load of the folder (its conversion mapping reads the LeRobot names save_pretrained wrote)."""
    from transformers import PI0ForConditionalGeneration

    return PI0ForConditionalGeneration.from_pretrained(pi0_folder, attn_implementation="eager").eval()
