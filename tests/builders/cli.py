"""Running the project's console commands from tests, as a user would."""

import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN_DIR = os.path.dirname(sys.executable)  # console scripts of the environment running the tests
USER_DIR = os.path.join(REPO_ROOT, "pagesum_plugin")


def subprocess_env(**variables: str) -> dict:
    """This environment, with the project importable and its console commands first on the path."""
    return dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""),
        **variables,
    )


def run_cli(argv, cwd=None, timeout=600, **variables: str):
    """Run a console command (with environment ``variables``), failing the test with its
    output if it fails."""
    result = subprocess.run(argv, cwd=cwd, env=subprocess_env(**variables), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return result.stdout + result.stderr


TRAIN_FLAGS = [
    "--user-dir", USER_DIR,
    "--task", "paged_summarization",
    "--arch", "pagesum_tiny",
    "--criterion", "paged_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--optimizer", "adam", "--lr", "3e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "30",
    "--dropout", "0.0", "--max-tokens", "1500", "--cpu", "--seed", "1",
    "--log-format", "simple", "--log-interval", "20", "--no-epoch-checkpoints", "--num-workers", "0",
]
