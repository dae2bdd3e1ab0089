"""The scale benchmark's results file: every call appends its groups' records, and ``--report``
renders the tables from it, each group from its latest finished run, without running anything."""

import json

import pytest
import torch

from benchmarks.common import CPU_TINY
from benchmarks.scale import results
from benchmarks.scale.cli import main
from benchmarks.scale.decoding import measure_throughput
from benchmarks.scale.group import Context
from benchmarks.scale.hardware import Peaks
from benchmarks.scale.report import report

H100 = {"flops": 989e12, "bandwidth": 3.35e12, "source": "GPU_PEAKS[NVIDIA H100 80GB HBM3]"}
THROUGHPUT = {"pages": 7, "page_len": 1024, "tgt_len": 1024, "max_batch": 64, "repeats": 2, "seed": 0}
GB = 10**9


def run(group, run_id, status="done", settings=THROUGHPUT, **extra):
    return {"type": "run", "run": run_id, "group": group, "row": group.split(":")[0], "title": group,
            "settings": settings, "time": "2026-11-25T10:00:00Z",
            "command": f"python -m benchmarks.scale --rows {group}",
            "device": "cuda", "machine": "NVIDIA H100 80GB HBM3, torch 2.11.0+cu130", "gpu": "NVIDIA H100 80GB HBM3",
            "cuda": "13.0", "torch": "2.11.0+cu130", "fairseq": "0.12.3", "python": "3.12.3", "dtype": "bfloat16",
            "model": "12+12 layers, d=1024, ffn=4096, 16 heads, random weights", "peaks": H100, "status": status,
            "estimate_s": 74.0, "seconds": 60.0, **extra}


def batch(run_id, size, update_s, status="ok"):
    record = {"type": "measurement", "run": run_id, "row": "3", "group": "3", "system": "PageSum", "point": [size],
              "batch": size, "source_tokens": size * 7168, "status": status, "formula": "FLOPs = 6 x [...]"}
    if status == "ok":
        flops = 2e13 * size
        record.update(update_s=update_s, flops=flops, mfu=flops / update_s / H100["flops"], before=8 * GB,
                      allocated=20 * GB * size, reserved=22 * GB * size, device=23 * GB * size)
    return record


def test_appended_records_read_back_in_the_order_of_the_calls(tmp_path):
    path = str(tmp_path / "runs" / "scale.jsonl")
    results.append(path, [batch("a", 1, 0.2), run("3", "a")])
    results.append(path, [run("4:900", "b", status="skipped")])
    assert [(r["type"], r["run"]) for r in results.read(path)] == [("measurement", "a"), ("run", "a"), ("run", "b")]


def test_a_line_that_is_not_a_record_stops_the_report_with_its_line(tmp_path):
    path = tmp_path / "scale.jsonl"
    path.write_text(json.dumps(run("3", "a")) + "\n{truncated\n")
    with pytest.raises(SystemExit, match=r"scale.jsonl:2: not a JSON record"):
        results.read(str(path))


def test_mfu_is_reported_at_every_batch_tried_and_the_oom_that_ended_the_doubling():
    records = [batch("a", 1, 0.2), batch("a", 2, 0.35), batch("a", 4, 0.6), batch("a", 8, None, status="oom"),
               run("3", "a")]
    table = report(records)
    for size, update_s in ((1, 0.2), (2, 0.35), (4, 0.6)):
        assert f"| {size} | {size * 7168} | {update_s:.3g} |" in table
        assert f"{2e13 * size / update_s / 989e12:.1%}" in table
    assert "| 8 | 57344 | OOM |" in table


def test_each_group_is_reported_from_its_latest_finished_run():
    records = [batch("old", 1, 0.5), run("3", "old"), batch("new", 1, 0.25), run("3", "new"),
               run("3", "broken", status="failed", error="RuntimeError: CUDA error: an illegal memory access")]
    table = report(records)
    assert "| 1 | 7168 | 0.25 |" in table and "| 1 | 7168 | 0.5 |" not in table


def test_peaks_are_reported_allocated_reserved_and_on_the_whole_gpu():
    table = report([batch("a", 1, 0.2), run("3", "a")])
    assert "peak allocated GB | peak reserved GB | peak on the GPU GB" in table
    assert "| 20 | 22 | 23 |" in table


def test_groups_that_never_finished_are_listed_with_why():
    skipped = run("4:900", "b", status="skipped", error="estimated 300 s, 200 s left")
    records = [batch("a", 1, 0.2), run("3", "a"), skipped]
    assert "Not measured yet: group 4:900: skipped (estimated 300 s, 200 s left)." in report(records)


def test_the_report_names_each_runs_command_machine_and_versions():
    setup = report([batch("a", 1, 0.2), run("3", "a")]).splitlines()[0]
    for part in ("`python -m benchmarks.scale --rows 3`", "NVIDIA H100 80GB HBM3", "CUDA 13.0", "fairseq 0.12.3",
                 "Python 3.12.3", "bf16 peak 989 TFLOP/s"):
        assert part in setup


def test_report_prints_the_tables_of_a_results_file_without_running_anything(tmp_path, capsys):
    path = str(tmp_path / "scale.jsonl")
    results.append(path, [batch("a", 1, 0.2), run("3", "a")])
    assert main(["--report", "--results", path]) == 0
    assert "Row 3, training throughput" in capsys.readouterr().out


def test_a_decoding_group_logs_each_searchs_numbers_as_soon_as_it_has_them(capsys):
    """A group's records reach the results file only when it ends; one cut off by its time box
    still leaves, in the log, the numbers of every search it finished."""
    settings = dict(batches=[1, 2], beam=2, pages=2, page_len=16, repeats=1, seed=0, out_len=4)
    records = measure_throughput(settings, Context(torch.device("cpu"), torch.float32, CPU_TINY,
                                                   Peaks(None, None, "test")))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("row 4: ")]
    assert len(lines) == len(records) == 6  # 2 batches x (shared and captured, shared, per beam)
    assert [r["layout"] for r in records[:3]] == ["shared, captured", "shared", "per beam"]  # the goals' first
    for line, record in zip(lines, records):
        assert line.startswith(f"row 4: 4 tokens, batch {record['batch']}, {record['system']}: ")
        assert f"search {record['search_s']:.3f} s" in line
        assert f"{record['step_s'] * 1e3:.2f} ms/step" in line
        assert f"busy {record['busy_step_s'] * 1e3:.2f} ms/step" in line
        assert line.endswith(" s into the group")
