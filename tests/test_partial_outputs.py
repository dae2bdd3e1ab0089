"""A run that fails leaves every output it was writing as it was before (the old file, or
none), never half of a new one."""

import shutil
import subprocess

import pytest

from builders.cli import REPO_ROOT, USER_DIR, run_cli, subprocess_env
from builders.corpora import acl_papers, write_jsonl
from builders.models import build_tiny
from builders.paged_data import write_split
from pagesum_plugin.checkpoints.builder import save_checkpoint
from pagesum_plugin.atomic import atomic_path, staged_files
from pagesum_plugin.corpus.storage import load_dictionary
from pagesum_plugin.evaluation.baselines import main as baseline
from pagesum_plugin.generation.outputs import InputOrderFile


def test_input_order_file_takes_its_name_when_the_last_example_is_in(tmp_path):
    out = tmp_path / "test.hyp"
    out.write_text("old\n")
    lines = InputOrderFile(str(out), total=3)
    for index in (2, 0, 1):
        assert out.read_text() == "old\n"  # until every example is decoded
        lines.add(index, f"summary {index}")
    assert out.read_text() == "summary 0\nsummary 1\nsummary 2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["test.hyp"]


def test_an_input_order_file_left_incomplete_at_exit_is_removed(tmp_path):
    out = tmp_path / "test.hyp"
    out.write_text("old\n")
    lines = InputOrderFile(str(out), total=3)
    lines.add(0, "summary 0")
    lines.discard_if_incomplete()  # what exit runs
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["test.hyp"]


def test_a_failed_write_leaves_the_old_file(tmp_path):
    out = tmp_path / "figure.png"
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(out) as partial:
        partial.write_text("half")
        raise RuntimeError("the writer failed")
    assert out.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]


def test_staged_files_appear_together_or_not_at_all(tmp_path):
    out = tmp_path / "converted"
    with pytest.raises(RuntimeError), staged_files(out) as staging:
        (staging / "dict.txt").write_text("4 1\n")
        raise RuntimeError("the conversion failed")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with staged_files(out) as staging:
        (staging / "dict.txt").write_text("4 1\n")
        (staging / "model.pt").write_text("weights")
    assert sorted(p.name for p in out.iterdir()) == ["dict.txt", "model.pt"]
    assert [p.name for p in tmp_path.iterdir()] == ["converted"]


def test_a_baseline_run_that_fails_leaves_the_old_summaries_and_references(tmp_path):
    papers = acl_papers(3)
    path = write_jsonl(tmp_path / "test.jsonl", papers)
    with open(path, "a", encoding="utf-8") as lines:
        lines.write("{not json\n")  # the fourth example: the run stops there
    (tmp_path / "lead3.txt").write_text("old\n")
    (tmp_path / "refs.txt").write_text("old refs\n")
    assert baseline(["--input", str(path), "--method", "lead", "--out", str(tmp_path / "lead3.txt"),
                     "--ref-out", str(tmp_path / "refs.txt")]) == 2
    assert (tmp_path / "lead3.txt").read_text() == "old\n"
    assert (tmp_path / "refs.txt").read_text() == "old refs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lead3.txt", "refs.txt", "test.jsonl"]


def test_a_failed_recipe_command_leaves_the_old_output(tmp_path):
    script = f'. "{REPO_ROOT}/recipes/outputs.sh"; to_file scores.json false; echo "exit $?"; ' \
             f'to_file new.json false || echo "exit $?"; to_file ok.json echo fine'
    (tmp_path / "scores.json").write_text("old\n")
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)
    assert result.stdout.splitlines() == ["exit 1", "exit 1"]
    assert (tmp_path / "scores.json").read_text() == "old\n"
    assert (tmp_path / "ok.json").read_text() == "fine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.json", "scores.json"]


@pytest.mark.slow
def test_fairseq_generate_that_fails_leaves_the_old_hypotheses_and_page_weights(paged, tmp_path):
    """The last example decoded holds an id beyond the dictionary: the run fails after the
    examples before it were decoded."""
    data = tmp_path / "data"
    shutil.copytree(paged, data)
    dictionary = load_dictionary(data)
    low, high = dictionary.nspecial, len(dictionary)
    examples = [{"pages": [[low + i, low + i + 1, low + i + 2]], "summary": [low]} for i in range(4)]
    bad = {"pages": [[low + j for j in range(30)] + [high + 50]], "summary": [low]}  # the longest: decoded last
    write_split(str(data), "test", examples[:2] + [bad] + examples[2:], dictionary)
    args, _, model = build_tiny(str(data))
    save_checkpoint(tmp_path / "model.pt", args, model)
    outputs = {"--hypotheses-output": tmp_path / "test.hyp", "--page-weights-output": tmp_path / "weights.jsonl"}
    for path in outputs.values():
        path.write_text("old\n")
    command = ["fairseq-generate", str(data), "--user-dir", USER_DIR, "--task", "paged_summarization",
               "--path", str(tmp_path / "model.pt"), "--gen-subset", "test", "--cpu", "--beam", "1",
               "--max-len-b", "4", "--batch-size", "1", *[str(x) for pair in outputs.items() for x in pair]]
    failed = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0 and "index out of range" in failed.stderr
    assert f"{outputs['--hypotheses-output']}: not written: the run ended with 4 of 5 examples decoded" in failed.stderr
    for path in outputs.values():
        assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "model.pt", "test.hyp", "weights.jsonl"]

    write_split(str(data), "test", examples, dictionary)
    run_cli(command)
    assert len((tmp_path / "test.hyp").read_text().splitlines()) == 4
    assert len((tmp_path / "weights.jsonl").read_text().splitlines()) == 4
