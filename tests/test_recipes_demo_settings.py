"""``recipes/demo.sh``'s settings (its environment) reach the commands they name. Every stage runs
through a command found on the path, so stand-ins that record how they were called take the
place of the real ones, and the script runs from a copy of its folder whose ``.venv`` activates
nothing: it takes a second."""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from builders.cli import REPO_ROOT

STAND_INS = ("pagesum-run-stage", "python", "pagesum-score", "pagesum-demo-report", "bash")
FIELD = "\x1f"  # between the recorded arguments, which may hold spaces
STAND_IN = f"""#!/bin/sh
{{ printf 'OMP_NUM_THREADS=%s{FIELD}%s' "$OMP_NUM_THREADS" "$(basename "$0")"
  for arg in "$@"; do printf '{FIELD}%s' "$arg"; done; printf '\\n'; }} >> "$RECORD"
case "$(basename "$0")" in pagesum-score|pagesum-demo-report) echo '{{}}' ;; esac
"""


def demo(tmp_path: Path, **settings) -> list[list[str]]:
    """Every command the demo ran with ``settings``, as [OMP_NUM_THREADS=..., name, arguments...]."""
    stand_ins, repo = tmp_path / "bin", tmp_path / "repo"
    for folder in (stand_ins, repo / "recipes", repo / ".venv" / "bin"):
        folder.mkdir(parents=True, exist_ok=True)
    for name in STAND_INS:
        path = stand_ins / name
        path.write_text(STAND_IN)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    for name in ("demo.sh", "outputs.sh"):
        shutil.copyfile(os.path.join(REPO_ROOT, "recipes", name), repo / "recipes" / name)
    (repo / ".venv" / "bin" / "activate").write_text("")
    record = tmp_path / "commands"
    record.unlink(missing_ok=True)
    env = {"PATH": f"{stand_ins}{os.pathsep}/usr/bin:/bin", "RECORD": str(record), **settings}
    result = subprocess.run(["/bin/bash", str(repo / "recipes" / "demo.sh")], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [line.split(FIELD) for line in record.read_text().splitlines()]


def stage(commands, name: str) -> list[str]:
    """The command line of the demo's stage ``name`` (run through pagesum-run-stage)."""
    return next(c for c in commands if c[1] == "pagesum-run-stage" and c[2] == name)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.fixture(scope="module")
def defaults(tmp_path_factory):
    return demo(tmp_path_factory.mktemp("defaults"), SKIP_SETUP="1")


def test_the_settings_reach_the_stages_they_name(defaults, tmp_path):
    given = demo(tmp_path, SKIP_SETUP="1", SUMMARY="2", COPY_UPDATES="7", TRAIN_UPDATES="5", VOCAB_SIZE="123",
                 OMP_NUM_THREADS="2")
    for commands, summary, copy, train, vocab, tokens, threads in (
            (defaults, "extract", "1000", "300", "4000", "48", "1"), (given, "2", "7", "5", "123", "96", "2")):
        assert value(stage(commands, "split"), "--summary") == summary
        assert value(stage(commands, "preprocess"), "--vocab-size") == vocab
        assert value(stage(commands, "preprocess"), "--max-summary-tokens") == tokens
        assert value(stage(commands, "generate"), "--max-len-b") == tokens
        assert value(stage(commands, "train-copy"), "--updates") == value(stage(commands, "train-copy"),
                                                                          "--max-update") == copy
        assert value(stage(commands, "train"), "--updates") == value(stage(commands, "train"), "--max-update") == train
        assert {c[0] for c in commands} == {f"OMP_NUM_THREADS={threads}"}  # the user's, else one thread
    (report,) = [c for c in given if c[1] == "pagesum-demo-report"]
    assert value(report, "--updates") == "5" and value(report, "--what") == "the abstract's first 2 sentences"


def test_every_output_goes_under_demo_dir_by_default_outputs_demo(defaults, tmp_path):
    for commands, out in ((defaults, "outputs/demo"), (demo(tmp_path, SKIP_SETUP="1", DEMO_DIR=str(tmp_path / "elsewhere")),
                                                       str(tmp_path / "elsewhere"))):
        assert value(stage(commands, "preprocess"), "--destdir") == f"{out}/data"
        assert value(stage(commands, "generate"), "--hypotheses-output") == f"{out}/run/test.hyp.txt"
    assert (tmp_path / "elsewhere" / "run" / "report.txt").exists() and not (tmp_path / "repo" / "outputs").exists()


def test_setup_runs_unless_skip_setup_says_not_to(tmp_path):
    assert demo(tmp_path)[0][1:] == ["bash", "setup.sh"]
    assert not any(c[1] == "bash" for c in demo(tmp_path, SKIP_SETUP="1"))
