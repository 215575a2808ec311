"""share.PREFIX, where the installed package's files are: four levels above share.py as installed
(``<prefix>/lib/pythonX.Y/site-packages/oxygen_ros``), and for a source tree too shallow for that an import that
still works (the files are then reported missing by name, not an IndexError at every import of the nodes)."""

import runpy
import shutil
import tempfile
from pathlib import Path

import oxygen_ros.share as share


def test_the_prefix_is_four_levels_above_the_installed_package():
    assert Path(share.__file__).absolute().parents[4] == share.PREFIX
    assert (share.PREFIX / "lib").is_dir() and share.default_config().is_file()


def test_a_source_tree_near_the_root_imports_and_names_the_missing_file():
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # /tmp/X/oxygen_ros/share.py: four parents, not five
        copy = Path(folder) / "oxygen_ros" / "share.py"
        copy.parent.mkdir()
        shutil.copy(share.__file__, copy)
        loaded = runpy.run_path(str(copy))
    assert loaded["PREFIX"] == Path("/")
    assert loaded["default_config"]() == Path("/share/oxygen_ros/config/oxygen.yaml")
