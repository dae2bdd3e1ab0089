"""The GPU kit, rehearsed on the CPU: the very command a GPU machine runs, with a folder
standing in for the one the machine hands back, the wheelhouse checked instead of carried,
and the scale benchmark's smoke sizes. Also its wheelhouse, its time boxes and its plan."""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import transformers

from benchmarks.common import BART_LARGE
from benchmarks.device import kit, wheelhouse
from benchmarks.scale.cli import parse_args as scale_args
from benchmarks.scale.hardware import peaks_by_name
from builders.cli import REPO_ROOT

MAX_FILES = 8  # what the machine hands back: at most 8 files, in one folder
BENCHMARK_TABLES = {  # the kit's other benchmarks: what their tables must name
    "causal": ["masked ms", "causal ms", "where a loss reads"],
    "one-page": ["PageSum, captured steps", "fairseq SequenceGenerator", "transformers generate"],
    "segments": ["eager: operators / step", "captured: operators outside the graphs", "passes captured",
                 "gradient error", "captured peak reserved GB"],
}
H100 = peaks_by_name("NVIDIA H100 80GB HBM3")


def test_every_test_module_that_needs_cuda_is_run_by_the_kit():
    needs_cuda = {f"tests/{path.name}" for path in (Path(REPO_ROOT) / "tests").glob("test_*.py")
                  if re.search(r"skipif\(not torch\.cuda\.is_available\(\)", path.read_text())}
    assert needs_cuda and needs_cuda <= set(kit.GPU_TESTS)


def test_the_plan_runs_every_gpu_group_once_after_the_tests():
    planned = [step for step in kit.PLAN if step != "tests" and step not in kit.BENCHMARKS]
    assert sorted(planned) == sorted(group.id for group in scale_args(["--device", "cuda"]).groups)
    assert kit.PLAN[0] == "tests" and set(kit.BENCHMARKS) <= set(kit.PLAN)


def test_the_most_valuable_steps_fit_one_call_by_the_estimates():
    """The tests, training throughput (eager and compiled) and decoding at 256 tokens (the
    captured search) fit the call's budget with the install, whatever follows them."""
    first = ["3", "4:256"]
    assert list(kit.PLAN[1:3]) == first
    seconds = sum(group.cost(group.settings, BART_LARGE, 2).seconds(H100)
                  for group in scale_args(["--device", "cuda", "--rows", *first]).groups)
    seconds += sum(kit.STEP_SECONDS[name] for name in ("install", "import check", "tests", "scale: list groups"))
    assert seconds <= kit.BUDGET_SECONDS - kit.RESERVE_SECONDS


def test_the_tests_run_unless_none_are_named():
    assert kit.parse_args(["--out", "x"]).tests == list(kit.GPU_TESTS)
    assert kit.parse_args(["--out", "x", "--tests"]).tests == []


def test_on_cuda_the_tests_run_in_several_processes_and_on_the_cpu_in_one_unless_told():
    assert kit.parse_args(["--out", "x"]).test_workers == kit.CUDA_TEST_WORKERS > 1
    assert kit.parse_args(["--out", "x", "--device", "cpu"]).test_workers == 0
    assert kit.parse_args(["--out", "x", "--device", "cpu", "--test-workers", "2"]).test_workers == 2


def test_a_step_whose_estimate_exceeds_the_time_left_is_skipped_and_a_cheaper_one_after_it_runs(tmp_path):
    box = quick_kit(tmp_path, budget=kit.RESERVE_SECONDS + 40)
    dear = box.step("dear", [sys.executable, "-c", "pass"], "kit.log", box.time_left(), estimate=300)
    cheap = box.step("cheap", [sys.executable, "-c", "pass"], "kit.log", box.time_left(), estimate=5)
    assert (dear["status"], dear["estimate_s"], cheap["status"]) == ("skipped", 300, "passed")
    table = kit.estimates_table(box.record["steps"])
    assert "| dear | skipped | 300 | 0 | - |" in table and "| cheap | passed | 5 |" in table


def test_the_wheelhouse_lock_holds_exactly_what_the_machine_lacks_at_the_versions_installed_here():
    needs = wheelhouse.runtime_needs()
    assert wheelhouse.lock_problems(needs, wheelhouse.read_lock()) == []
    assert {"ve-fairseq", "hydra-core", "omegaconf", "antlr4-python3-runtime", "rouge-score"} <= set(needs)
    assert not {"numpy", "sentencepiece", "tokenizers", "pyyaml"} & set(needs), "the machine has these"


def test_the_wheelhouse_carries_what_the_machine_has_at_a_version_the_project_excludes():
    machine = wheelhouse.machine_packages()
    assert (machine["transformers"], machine["torch"], machine["tokenizers"]) == ("5.17.0", "2.11.0", None)
    assert "transformers" in wheelhouse.runtime_needs(), "the hf extra needs transformers>=5.24"
    newer = {**machine, "transformers": transformers.__version__}
    assert "transformers" not in wheelhouse.runtime_needs(present=newer)


def test_the_wheelhouse_never_carries_torch_even_to_a_machine_without_it():
    needs = wheelhouse.runtime_needs(present={})
    assert not [name for name in needs if wheelhouse.NEVER.match(name)]
    assert "numpy" in needs  # without the machine's packages, everything else is carried


def test_a_wheelhouse_over_the_limit_stops_with_one_line():
    with pytest.raises(SystemExit) as stop:
        wheelhouse.check_size(65 * wheelhouse.MIB, 64, "the wheelhouse would be")
    assert str(stop.value).count("\n") == 0 and "65.0 MiB, over the 64 MiB" in str(stop.value)


def test_the_projects_wheel_builds_offline_with_every_package_setup_py_installs(tmp_path):
    wheel = wheelhouse.project_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        packages = {name.split("/")[0] for name in archive.namelist() if name.endswith("/__init__.py")}
    assert {"pagesum_plugin", "pagesum_preprocess", "pagesum_recipes", "pagesum_commands"} <= packages


def test_the_locked_wheels_fit_the_limit():
    total = sum(entry.wheel_bytes for entry in wheelhouse.read_lock().values())
    assert total < (wheelhouse.LIMIT_MIB - 2) * wheelhouse.MIB  # room for the project's wheel


def quick_kit(tmp_path, budget=60.0):
    args = kit.parse_args(["--out", str(tmp_path / "out"), "--budget", str(budget), "--rows", "1"])
    box = kit.Kit(args)
    box.out.mkdir()
    return box


def test_a_step_past_its_time_box_is_killed_and_recorded_as_timed_out(tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "MIN_STEP_SECONDS", 0)
    box = quick_kit(tmp_path)
    entry = box.step("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], "kit.log", 1.0)
    assert entry["status"] == "timed out" and entry["seconds"] < 10
    assert json.loads((box.out / "kit.json").read_text())["steps"][-1]["status"] == "timed out"


def test_a_step_far_past_its_estimate_is_stopped_and_the_next_one_still_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "MIN_STEP_SECONDS", 0)
    box = quick_kit(tmp_path, budget=kit.RESERVE_SECONDS + 60)
    assert box.time_box(0.4) == pytest.approx(kit.OVERRUN * 0.4)
    slow = box.step("slow", [sys.executable, "-c", "import time; time.sleep(60)"], "kit.log", box.time_box(0.4),
                    estimate=0.4)
    after = box.step("after", [sys.executable, "-c", "pass"], "kit.log", box.time_box(30), estimate=30)
    assert slow["status"] == "timed out" and slow["seconds"] < 10 and after["status"] == "passed"
    assert box.time_box(1000) == pytest.approx(box.time_left(), abs=1)  # never more than the call has left


def test_a_started_step_runs_beside_the_steps_after_it_and_is_recorded_when_waited_for(tmp_path):
    """As the scale groups are listed beside the tests: the started step waits for a file that only the next step
    writes, so it passes only if both run at once."""
    box = quick_kit(tmp_path)
    signal = tmp_path / "written by the next step"
    waits = ("import pathlib, time\n"
             f"while not pathlib.Path({str(signal)!r}).exists(): time.sleep(0.05)\n"
             "print('listed')")
    beside = box.start("beside", [sys.executable, "-c", waits], "scale.log", 30, stdout=tmp_path / "printed")
    after = box.step("after", [sys.executable, "-c", f"open({str(signal)!r}, 'w').close()"], "tests.log", 30)
    listed = box.wait(beside)
    assert (after["status"], listed["status"]) == ("passed", "passed")
    assert (tmp_path / "printed").read_text() == "listed\n"
    assert [step["name"] for step in box.record["steps"]] == ["after", "beside"]


def test_a_step_without_time_left_is_skipped_not_started(tmp_path):
    box = quick_kit(tmp_path, budget=kit.RESERVE_SECONDS + 5)
    entry = box.step("late", [sys.executable, "-c", "raise SystemExit(3)"], "kit.log", box.time_left())
    assert entry["status"] == "skipped" and entry["rc"] is None


def test_a_carried_transformers_that_does_not_import_on_the_machine_is_removed_and_the_machines_own_is_used(
        tmp_path):
    """transformers 5.24 is carried for the hf extra, but needs a newer huggingface-hub than 5.17 did: where the
    machine's is older, the carried copy goes and the visit runs on the machine's transformers."""
    site = tmp_path / "site"
    (site / "transformers").mkdir(parents=True)
    (site / "transformers" / "__init__.py").write_text(
        "raise ImportError('huggingface-hub>=1.31.0,<3.0 is required for a normal functioning of this module, '\n"
        "                  'but found huggingface-hub==1.20.0.')\n")
    (site / "transformers-5.24.0.dist-info").mkdir()
    (tmp_path / "wheels").mkdir()
    box = kit.Kit(kit.parse_args(["--out", str(tmp_path / "out"), "--site", str(site), "--wheelhouse",
                                  str(tmp_path / "wheels"), "--device", "cpu"]))
    box.out.mkdir()
    kit.install(box)

    assert not list(site.iterdir()), "the carried transformers and its metadata are gone"
    checks = [step["status"] for step in box.record["steps"] if step["name"] == "import check"]
    assert checks == ["passed", "passed"]
    assert box.record["environment"]["transformers"] == transformers.__version__
    assert "the carried transformers does not import here (huggingface-hub>=1.31.0,<3.0 is required" \
        in (box.out / "kit.log").read_text()


def test_a_failing_step_is_recorded_with_its_exit_status(tmp_path):
    box = quick_kit(tmp_path)
    entry = box.step("fails", [sys.executable, "-c", "raise SystemExit(3)"], "kit.log", 30)
    assert (entry["status"], entry["rc"]) == ("failed", 3)


@pytest.mark.slow  # every row group of the scale benchmark at smoke size, one process each (~3 minutes)
def test_the_device_command_rehearsed_on_the_cpu_leaves_its_logs_and_results_where_the_machine_returns_them(
        tmp_path):
    out, results = tmp_path / "out", tmp_path / "runs" / "scale.jsonl"
    failing = tmp_path / "test_broken.py"
    failing.write_text("def test_works():\n    pass\n\n\ndef test_broken():\n    assert False, 'a step that fails'\n")
    # the GPU tests that only skip here: the others' CPU halves run in this suite already
    cuda_only = [name for name in kit.GPU_TESTS if "test_cuda" in name]
    command = ["bash", "benchmarks/device/run.sh", "--wheelhouse-dry-run", "--site", str(tmp_path / "site"),
               "--results", str(results), "--device", "cpu", "--quick", "--threads", "1",
               "--tests", *cuda_only, str(failing)]
    done = subprocess.run(command, cwd=REPO_ROOT, env={**os.environ, "OUT": str(out), "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr[-3000:]  # the failing test file

    files = sorted(path.relative_to(out) for path in out.rglob("*") if path.is_file())
    assert [str(path) for path in files] == sorted(kit.OUTPUTS) and len(files) <= MAX_FILES
    assert all(len(path.parts) == 1 for path in files), "one flat folder"

    record = json.loads((out / "kit.json").read_text())
    steps = {step["name"]: step for step in record["steps"]}
    assert steps["wheelhouse (dry run)"]["status"] == "passed" and steps["install"]["status"] == "passed"
    assert steps["import check"]["status"] == "passed" and record["environment"]["torch"]
    assert (tmp_path / "site" / "pagesum_plugin" / "__init__.py").exists(), "the project's wheel was installed"
    assert steps["tests"]["status"] == "failed" and re.match(r"1 failed, 1 passed, \d+ skipped", steps["tests"]["note"])
    groups = [group.id for group in scale_args(["--device", "cpu", "--quick"]).groups]
    assert sorted(record["groups"]) == sorted(groups)
    assert [steps[f"scale {group}"]["status"] for group in groups] == ["passed"] * len(groups), \
        "the groups after the failed tests still ran"
    assert record["group_status"] == {group: "done" for group in groups}
    tables = (out / kit.BENCHMARKS_FILE).read_text()
    assert set(BENCHMARK_TABLES) == set(kit.BENCHMARKS)
    for name, columns in BENCHMARK_TABLES.items():
        assert steps[name]["status"] == "passed" and f"## {name}: passed" in tables, name
        table = tables.split(f"## {name}: ")[1].split("\n## ")[0]
        assert "CPU" in table and "|---:" in table, f"{name}: its setup line and a table under its heading"
        for column in columns:
            assert column in table, f"{column!r} missing from {name}'s table"
    assert steps["report"]["status"] == "passed"
    names = [step["name"] for step in record["steps"]]
    assert names.index("tests") < names.index("scale 3") < names.index("causal") < names.index("one-page") \
        < names.index("scale 1") < names.index("scale 2") < names.index("segments"), "the plan's order"
    assert "Every step's estimate against its real time" in (out / "kit.log").read_text()

    assert (out / "scale.jsonl").read_text() == results.read_text()
    report = (out / "report.md").read_text()
    for name in ("peak reserved GB", "PageSum growth", "MFU", "step / bound", "pages decoded", "pruned differs",
                 "blocking"):
        assert name in report, name
    assert "SKIPPED" in (out / "tests.log").read_text() and "needs a CUDA device" in (out / "tests.log").read_text()
    assert "would carry" in (out / "kit.log").read_text()
