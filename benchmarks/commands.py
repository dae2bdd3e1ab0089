"""Console commands timed as a user runs them: a fresh process each, wall and CPU seconds (the
process and its workers), and the same command from an earlier commit of this repository
(``exported(rev, ...)``), so that a benchmark compares old and new in one run.

Run as a script, it times ``--help`` of every console command that setup.py installs, now and at
``--before``, alternating, best of ``--repeat``:

    python -m benchmarks.commands --before 6e29b1f --repeat 3
"""

import argparse
import ast
import os
import resource
import subprocess
import sys
import tempfile
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


def setup_keyword(setup_py: Path, keyword: str):
    """The literal value of ``keyword`` in ``setup_py``'s setup() call, read without running setup.py."""
    call = next(node for node in ast.walk(ast.parse(setup_py.read_text(encoding="utf-8")))
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
    return next(ast.literal_eval(k.value) for k in call.keywords if k.arg == keyword)


def console_scripts(setup_py: Path) -> dict[str, str]:
    """``name -> module:function`` of every console script that ``setup_py``'s setup() call declares."""
    lines = setup_keyword(setup_py, "entry_points")["console_scripts"]
    return dict(tuple(part.strip() for part in line.split("=")) for line in lines)


def timed(command: list[str], check: bool = True) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command`` (which must succeed, when ``check``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=check, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def help_rows(before: str, repeat: int) -> list[list[str]]:
    """Best wall and CPU seconds of ``COMMAND --help`` for every console command, at ``before`` and now."""
    now = console_scripts(REPO / "setup.py")
    with tempfile.TemporaryDirectory() as tmp:
        packages = export(before, Path(tmp))
        then = console_scripts(packages.parent / "tree" / "setup.py")
        commands = {name: {"then": exported(packages, then[name]) if name in then else None,
                           "now": installed(entry)} for name, entry in now.items()}
        best = {(name, when): (float("inf"), float("inf")) for name in commands for when in ("then", "now")}
        for _ in range(repeat):
            for name, pair in commands.items():
                for when, command in pair.items():
                    if command is not None:  # check=False: a command whose --help exited 1 is timed all the same
                        wall, cpu = timed(command + ["--help"], check=False)
                        best[name, when] = (min(best[name, when][0], wall), min(best[name, when][1], cpu))
    rows = []
    for name in sorted(commands):
        cells = [f"{wall:.2f} s, {cpu:.2f} s" if wall < float("inf") else "absent"
                 for wall, cpu in (best[name, "then"], best[name, "now"])]
        rows.append([f"`{name} --help`", *cells, "yes" if best[name, "now"][0] < 1 else "no"])
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="--help of every console command, now and at an earlier commit")
    parser.add_argument("--before", default="6e29b1f", help="the commit to compare with (default: 6e29b1f)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command, the best kept (default: 3)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    rows = help_rows(args.before, args.repeat)
    print(f"load average (1, 5, 15 min) before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    header = ["command", f"at {args.before}: wall, CPU", "now: wall, CPU", "now under 1 s (wall)"]
    for row in [header, ["---", "---:", "---:", "---:"], *rows]:  # a markdown table, without importing torch
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
