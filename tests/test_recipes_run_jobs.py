"""pagesum-run-jobs (recipes/run_jobs.py), which runs a recipe's commands from a job file: groups in order, a
command's ``> FILE`` in place only when it succeeds, and the first failure stops the run."""

import os
import subprocess

from builders.cli import BIN_DIR

RUN_JOBS = os.path.join(BIN_DIR, "pagesum-run-jobs")


def run_jobs(tmp_path, lines, parallel=2):
    jobs = tmp_path / "jobs.tsv"
    jobs.write_text("".join(f"{line}\n" for line in lines))
    return subprocess.run([RUN_JOBS, str(jobs), "--parallel", str(parallel)], capture_output=True,
                          text=True)


def test_groups_run_in_order_and_each_command_writes_its_own_log(tmp_path):
    order = tmp_path / "order.txt"
    result = run_jobs(tmp_path, [
        f"{tmp_path}/a.log\tsh -c 'echo first >> {order}; echo to-a'",
        f"{tmp_path}/b.log\tsh -c 'echo first >> {order}; echo to-b >&2'",
        "",
        f"{tmp_path}/c.log\tsh -c 'echo second >> {order}'",
    ])
    assert result.returncode == 0, result.stderr
    assert order.read_text().split() == ["first", "first", "second"]
    assert (tmp_path / "a.log").read_text() == "to-a\n" and (tmp_path / "b.log").read_text() == "to-b\n"


def test_standard_output_reaches_its_file_only_when_the_command_succeeds(tmp_path):
    result = run_jobs(tmp_path, [
        f"{tmp_path}/ok.log\tsh -c 'echo {{}}' > {tmp_path}/ok.json",
        f"{tmp_path}/bad.log\tsh -c 'echo half; exit 3' > {tmp_path}/bad.json",
    ])
    assert result.returncode == 1
    assert (tmp_path / "ok.json").read_text() == "{}\n"
    assert not list(tmp_path.glob("bad.json*")), "a failed command leaves no half-written output"


def test_the_first_failure_stops_the_run_and_shows_the_end_of_its_log(tmp_path):
    result = run_jobs(tmp_path, [
        f"{tmp_path}/fails.log\tsh -c 'echo the reason >&2; exit 5'",
        "",
        f"{tmp_path}/never.log\tsh -c 'echo ran'",
    ])
    assert result.returncode == 1
    assert "failed (exit 5): sh -c 'echo the reason >&2; exit 5'" in result.stderr and "    the reason" in result.stderr
    assert not (tmp_path / "never.log").exists()


def test_the_commands_of_a_group_run_parallel_at_once(tmp_path):
    """Two commands that each wait for the other's file: they finish only if both run at once."""
    meet = "touch {mine}; for i in $(seq 50); do [ -e {other} ] && exit 0; sleep 0.1; done; exit 1"
    lines = [f"{tmp_path}/a.log\tsh -c '{meet.format(mine=tmp_path / 'a', other=tmp_path / 'b')}'",
             f"{tmp_path}/b.log\tsh -c '{meet.format(mine=tmp_path / 'b', other=tmp_path / 'a')}'"]
    assert run_jobs(tmp_path, lines, parallel=2).returncode == 0
    for name in "ab":
        (tmp_path / name).unlink()
    assert run_jobs(tmp_path, lines, parallel=1).returncode == 1  # one at a time, the first waits in vain
