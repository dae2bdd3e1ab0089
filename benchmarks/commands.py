"""Console commands timed as a user runs them: a fresh process each, wall and CPU seconds (the
process and its workers), and the same command from an earlier commit of this repository
(``exported(rev, ...)``), so that a benchmark compares old and new in one run."""

import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs ENTRY (module:function) from an exported tree instead of the installed package.
_FROM_TREE = """
import importlib, importlib.util, sys
sys.meta_path[:] = [finder for finder in sys.meta_path if "editable" not in type(finder).__module__]
packages, entry = sys.argv.pop(1), sys.argv.pop(1)
sys.path.insert(0, packages)
module, function = entry.split(":")
assert importlib.util.find_spec("pagesum_plugin").origin.startswith(packages), "not the exported tree"
sys.exit(getattr(importlib.import_module(module), function)())
"""


def installed(entry: str) -> list[str]:
    """The command line that runs ``entry`` (``module:function``) of the installed package."""
    module, function = entry.split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]


def export(rev: str, directory: Path) -> Path:
    """``rev`` of this repository in ``directory``, its packages importable under their installed names."""
    tree, packages = directory / "tree", directory / "packages"
    tree.mkdir(parents=True)
    packages.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    for package, folder in (("pagesum_plugin", "pagesum_plugin"), ("pagesum_preprocess", "preprocess"),
                            ("pagesum_recipes", "recipes"), ("pagesum_commands", "commands")):
        if (tree / folder).exists():
            (packages / package).symlink_to(tree / folder)
    if not (packages / "pagesum_plugin").exists():
        raise RuntimeError(f"{rev}: no pagesum_plugin in the exported tree")
    return packages


def exported(packages: Path, entry: str) -> list[str]:
    """The command line that runs ``entry`` of an exported tree (``export``)."""
    return [sys.executable, "-c", _FROM_TREE, str(packages), entry]


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
