"""Shared fixtures: tiny paged corpora and models built on the fly."""

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)

from builders.paged_data import write_copy_task  # noqa: E402


@pytest.fixture(scope="session")
def copy_task_dir(tmp_path_factory):
    """A synthetic paged corpus (summary = first 3 tokens of every page)."""
    data_dir = str(tmp_path_factory.mktemp("copy_task"))
    write_copy_task(data_dir)
    return data_dir


BIN_DIR = os.path.dirname(sys.executable)  # console scripts of the environment running the tests


def run_cli(argv, cwd=None, timeout=600):
    """Run a console command, failing the test with its output if it fails."""
    env = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""),
    )
    result = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


TRAIN_FLAGS = [
    "--user-dir", os.path.join(REPO_ROOT, "pagesum_plugin"),
    "--task", "paged_summarization",
    "--arch", "pagesum_tiny",
    "--criterion", "paged_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "30",
    "--dropout", "0.0", "--max-tokens", "1500", "--cpu", "--seed", "1",
    "--log-format", "simple", "--log-interval", "20", "--no-epoch-checkpoints", "--num-workers", "0",
]


@pytest.fixture(scope="session")
def trained_run(copy_task_dir, tmp_path_factory):
    """fairseq-train on the copy task: (save_dir, training log). Shared by train, generation and hub tests."""
    save_dir = str(tmp_path_factory.mktemp("run"))
    log = run_cli(["fairseq-train", copy_task_dir, *TRAIN_FLAGS, "--max-update", "200", "--save-dir", save_dir])
    return save_dir, log
