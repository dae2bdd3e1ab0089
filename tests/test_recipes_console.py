"""pagesum-run-stage (recipes/console.py), the demo's quiet stage runner: the tool's whole output goes to the
log, the console gets a bar, and a failure still shows its error in full."""

import os
import subprocess
import sys

from builders.cli import BIN_DIR

RUN_STAGE = os.path.join(BIN_DIR, "pagesum-run-stage")
NOISY_TOOL = """
import sys
for i in range(1, 4):
    print(f"{i}/3 [00:00<00:00]", end="\\r", file=sys.stderr, flush=True)
print("epoch 001 | valid on 'valid' subset | loss 7.25 | nll_loss 7.0 | num_updates 12")
print("a hint nobody needs on the console")
"""
FAILING_TOOL = """
print("preparing")
def load(): raise ValueError("data/train.jsonl:3: field 'summary' is missing")
load()
"""


def run_stage(tmp_path, tool: str):
    log = tmp_path / "logs" / "stage.log"
    result = subprocess.run([RUN_STAGE, "stage", str(log), "--", sys.executable, "-c", tool],
                            capture_output=True, text=True)
    return result, log


def test_the_whole_output_goes_to_the_log_and_not_to_the_console(tmp_path):
    result, log = run_stage(tmp_path, NOISY_TOOL)
    assert result.returncode == 0
    text = log.read_text()
    assert "a hint nobody needs on the console" in text and "3/3 [" in text
    assert "a hint nobody needs" not in result.stdout + result.stderr


def test_the_bar_shows_the_tools_progress_and_its_last_validation_loss(tmp_path):
    result, _ = run_stage(tmp_path, NOISY_TOOL)
    assert "3/3" in result.stdout
    assert "valid loss=7.25" in result.stdout and "updates=12" in result.stdout


def test_a_failure_prints_the_traceback_and_where_the_full_log_is_and_keeps_the_exit_code(tmp_path):
    result, log = run_stage(tmp_path, FAILING_TOOL)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "field 'summary' is missing" in result.stderr
    assert "preparing" not in result.stderr, "the error is shown from its traceback on"
    assert f"stage failed (exit code 1); full log: {log}" in result.stderr


def test_with_updates_the_bar_counts_the_updates_done_not_the_time(tmp_path):
    log = tmp_path / "train.log"
    result = subprocess.run([RUN_STAGE, "train", str(log), "--updates", "20", "--", sys.executable, "-c", NOISY_TOOL],
                            capture_output=True, text=True)
    assert result.returncode == 0
    assert "12/20" in result.stdout.replace(" updates", "")


CHATTY_TOOL = """
import sys
for i in range(1, 301):
    print(f"{i}/300 [00:00<00:00]", end="\\r", file=sys.stderr, flush=True)
"""


def test_in_a_file_the_bar_is_drawn_a_few_times_not_once_per_line_of_the_tool(tmp_path):
    result, _ = run_stage(tmp_path, CHATTY_TOOL)
    assert result.returncode == 0 and "300/300" in result.stdout
    draws = result.stdout.replace("\r", "\n").count("stage:")
    assert draws <= 3, f"{draws} draws of the bar for 300 lines of the tool"
