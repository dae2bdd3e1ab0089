"""The text-only commands (pagesum_commands) import neither torch nor fairseq on real work, each in a
fresh interpreter, and print none of fairseq's import chatter (--help of every command:
test_console_help.py); the plugin still registers everything when it is imported any other way."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builders.corpora import acl_papers, write_jsonl
from pagesum_commands import COMMANDS
from pagesum_recipes import demo_report

# Runs one command as its console script does, then reports which heavy modules it loaded.
PROBE = textwrap.dedent("""
    import json, sys
    import pagesum_commands
    command, argv = sys.argv[1], sys.argv[2:]
    sys.argv = [command] + argv
    try:
        status = pagesum_commands.run(command)
    except SystemExit as exit:
        status = exit.code
    loaded = [name for name in ("torch", "fairseq") if name in sys.modules]
    print(json.dumps({"status": status or 0, "loaded": loaded}), file=sys.stderr)
""")


def _probe(command: str, *argv) -> tuple[dict, str, str]:
    done = subprocess.run([sys.executable, "-c", PROBE, command, *map(str, argv)], capture_output=True, text=True,
                          timeout=300)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report, done.stdout, done.stderr


# command -> its arguments for a real run on the inputs below
REAL_RUNS = [
    ("pagesum-score", lambda d: ["--hyp", d / "hyp.txt", "--ref", d / "ref.txt", "--json"]),
    ("pagesum-baseline", lambda d: ["--input", d / "docs.jsonl", "--method", "lead", "--k", 3, "--out", d / "lead.txt"]),
    ("pagesum-plot", lambda d: ["page-importance", "--weights", d / "weights.jsonl", "--id", 0, "--out", d / "w.png"]),
    ("pagesum-decoding-flags", lambda d: ["arxiv"]),
    ("pagesum-plan", lambda d: ["--budget", "24GB", "--arch", "pagesum_bart_large", "--summary-tokens", 1024]),
    ("pagesum-demo-data", lambda d: [d / "papers", d / "copy", "--summary", "title"]),
    ("pagesum-demo-report", lambda d: [d / "demo" / "data", d / "demo" / "run", d / "demo" / "logs", "--seconds", 300,
                                       "--updates", 300, "--what", "the paper's title",
                                       "--abstracts", d / "demo" / "abstracts.txt"]),
]


def test_every_text_only_command_has_a_real_run_here():
    assert {command for command, _ in REAL_RUNS} == {name for name, command in COMMANDS.items() if command.text_only}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, copy_task_dir):
    tmp = tmp_path_factory.mktemp("text")
    papers = acl_papers(3)
    (tmp / "ref.txt").write_text("".join(" ".join(p["summary"].split()) + "\n" for p in papers))
    (tmp / "hyp.txt").write_text("".join(" ".join(p["summary"].split()[:40]) + "\n" for p in papers))
    (tmp / "weights.jsonl").write_text(json.dumps({"id": 0, "hypothesis": "a b", "tokens": ["a", "b"],
                                                   "page_weights": [[0.5, 0.5], [0.9, 0.1]]}) + "\n")
    write_jsonl(tmp / "docs.jsonl", papers)
    demo_run(tmp / "demo", Path(copy_task_dir))
    return tmp


def demo_run(folder: Path, data: Path) -> None:
    """What the demo hands its report: a corpus's test split, a run's summaries, page weights and
    scores, and the two trainings' logs."""
    (folder / "data").mkdir(parents=True)
    for name in ("test.ids.txt", "test.reference.txt"):
        shutil.copy(data / name, folder / "data" / name)
    papers = len((data / "test.ids.txt").read_text().splitlines())
    meta = json.loads((data / "meta.json").read_text())  # with the statistics pagesum-preprocess keeps of each split
    meta["stats"] = {split: {"examples": papers, "pages": 3 * papers, "pages_per_example_mean": 3.0,
                             "share_source_tokens_lost": 0.1, "skipped_total": 0} for split in meta["splits"]}
    (folder / "data" / "meta.json").write_text(json.dumps(meta))
    run, logs = folder / "run", folder / "logs"
    run.mkdir()
    logs.mkdir()
    (run / "test.hyp.txt").write_text("".join(f"summary {i}\n" for i in range(papers)))
    (run / "test.page_weights.jsonl").write_text("".join(json.dumps({"id": i, "page_weights": [[0.7, 0.3]] * 3}) + "\n"
                                                         for i in range(papers)))
    cell = {"f": 20.0, "ci_low": 18.0, "ci_high": 22.0}
    for name in ("model", "lead3", "target"):
        (run / f"scores.{name}.json").write_text(json.dumps({"scores": dict.fromkeys(("rouge1", "rouge2", "rougeLsum"),
                                                                                      cell)}))
    valid = "epoch 001 | valid on 'valid' subset | loss 8.1 | nll_loss 8.0 | num_updates 25\n"
    (logs / "train.log").write_text(valid)
    (logs / "train-copy.log").write_text(valid)
    (folder / "abstracts.txt").write_text("".join(f"abstract {i}\n" for i in range(papers)))


@pytest.mark.parametrize("command, argv", REAL_RUNS)
def test_a_real_run_imports_neither_torch_nor_fairseq(inputs, command, argv):
    report, out, err = _probe(command, *argv(inputs))
    assert report == {"status": 0, "loaded": []}, err
    assert "tensorboardX" not in out + err


def test_the_demo_report_says_the_time_updates_and_summary_it_is_given(inputs, capsys):
    demo = inputs / "demo"
    assert demo_report.main([str(demo / "data"), str(demo / "run"), str(demo / "logs"), "--seconds", "125",
                             "--updates", "40", "--what", "the paper's title", "--abstracts",
                             str(demo / "abstracts.txt")]) == 0
    report = capsys.readouterr().out
    assert "2 min 5 s end to end" in report and "summary = the paper's title" in report
    assert "(fairseq-train, 25 of 40 updates;" in report  # the log ran 25 of the 40 asked for


def test_fairseqs_user_dir_still_registers_everything():
    # as fairseq-train --user-dir does it: fairseq first, then the plugin's folder imported by fairseq
    check = ("import argparse, importlib.util, sys; from fairseq import utils; "
             "folder = importlib.util.find_spec('pagesum_plugin').submodule_search_locations[0]; "
             "utils.import_user_module(argparse.Namespace(user_dir=folder)); import pagesum_plugin; "
             "from fairseq.tasks import TASK_REGISTRY; from fairseq.models import "
             "ARCH_MODEL_REGISTRY; from fairseq.criterions import CRITERION_REGISTRY; "
             "from fairseq.optim import OPTIMIZER_REGISTRY; "
             "print('paged_summarization' in TASK_REGISTRY, 'pagesum_tiny' in ARCH_MODEL_REGISTRY, "
             "'paged_label_smoothed_cross_entropy' in CRITERION_REGISTRY, 'adamw_torch' in OPTIMIZER_REGISTRY, "
             "callable(pagesum_plugin.from_pretrained))")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["True"] * 5, done.stderr
