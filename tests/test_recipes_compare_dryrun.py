"""recipes/compare.sh end to end with DRY_RUN=1: every system of the comparison fitted to a
memory budget, trained, decoded and scored, on a tiny corpus of document clusters in the
Multi-News layout (each real ACL paper's sections as a cluster's documents) and a tiny BART;
then its report, whose numbers must be those the stages wrote."""

import json
import os
import re
import subprocess

import pytest

from builders.cli import REPO_ROOT
from builders.corpora import write_multinews
from builders.recipes import recipe_env, split_papers, write_bart_dir
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_recipes.comparison.systems import Comparison
from pagesum_preprocess.cli import main as preprocess

pytestmark = pytest.mark.slow  # the comparison end to end

N_TRAIN, N_VALID, N_TEST = 4, 1, 2
BUDGET_MB = 8  # between the toy systems' needs: HEPOS with LSH fits one unit of 48 tokens, the others two
SYSTEMS = ("pagesum_spatial", "pagesum_document", "hepos_sinkhorn", "hepos_lsh", "hed", "awesome", "bart",
           "bart_full")  # every system that reads document clusters
RECIPE = os.path.join(REPO_ROOT, "recipes", "compare.sh")
TOY = Comparison(os.path.join(REPO_ROOT, "recipes", "config", "compare.yaml"), dry_run=True)  # DRY_RUN's settings


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The recipe's variables for the preprocessed cluster corpus and a tiny BART as bart.large."""
    root = tmp_path_factory.mktemp("compare")
    papers = split_papers(N_TRAIN, N_VALID, N_TEST, offset=80)
    for split, name in (("train", "train"), ("valid", "val"), ("test", "test")):
        write_multinews(root / "multinews", papers[split], split=name)
    bpe = write_bart_dir(root / "bart", papers)
    raw = root / "multinews"
    assert preprocess(["--input-format", "multinews", "--trainpref", str(raw / "train.src"),
                       "--validpref", str(raw / "val.src"), "--testpref", str(raw / "test.src"),
                       "--destdir", str(root / "data"), "--locality", "document", "--tokenizer", "gpt2",
                       "--gpt2-encoder-json", str(bpe.encoder_json), "--gpt2-vocab-bpe", str(bpe.vocab_bpe),
                       "--gpt2-dict", str(bpe.dict_txt), "--workers", "1", "--no-progress"]) == 0
    return dict(DATA_DIR=str(root / "data"), BART_DIR=str(root / "bart"), BUDGET_MB=str(BUDGET_MB),
                MODEL_SIZE="tiny", JOBS="2")


@pytest.fixture(scope="module")
def dry_run(inputs, tmp_path_factory):
    """(OUT_DIR, console output) of the whole comparison."""
    out_dir = tmp_path_factory.mktemp("compare_out")
    env = recipe_env(**inputs, OUT_DIR=str(out_dir), DRY_RUN="1")
    result = subprocess.run(["bash", RECIPE], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return out_dir, result.stdout


def report_rows(out_dir):
    return {row["system"]: row for row in json.loads((out_dir / "report.json").read_text())["rows"]}


def test_every_system_trains_decodes_and_appears_in_the_table(dry_run):
    out_dir, _ = dry_run
    rows = report_rows(out_dir)
    assert list(rows) == list(SYSTEMS)
    table = (out_dir / "report.md").read_text()
    for key, row in rows.items():
        assert row["fits"], f"{key} fits the budget at one unit"
        assert "done training" in (out_dir / key / "train.log").read_text()
        hypotheses = (out_dir / key / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
        assert len(hypotheses) == N_TEST and row["examples"] == N_TEST
        assert f"| {row['name']} | {row['tokens']:,} |" in table
    for figure in ("rouge_vs_memory.png", "tokens_vs_memory.png"):
        assert (out_dir / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_takes_every_number_from_the_files_the_stages_wrote(dry_run):
    out_dir, _ = dry_run
    for key, row in report_rows(out_dir).items():
        fit = json.loads((out_dir / key / "fit.json").read_text())
        assert (row["tokens"], row["peak_mb"], row["train_tokens_per_second"]) == (
            fit["tokens"], fit["peak_mb"], fit["train_tokens_per_second"])
        speed = re.findall(r"Translated \d+ sentences .*?\(([\d.]+) sentences/s", (out_dir / key / "generate.log").read_text())
        assert row["decoding"]["per_second"] == float(speed[-1])
        scores = json.loads((out_dir / key / "scores.json").read_text())
        for metric in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
            assert row["rouge"][metric]["f"] == scores["scores"][metric]["f"]
            assert row["rouge"][metric]["ci_low"] == scores["scores"][metric]["ci_low"]
            p_value = scores["compare"]["p_values"][metric] if key != "pagesum_spatial" else None
            assert row["rouge"][metric]["p_value"] == p_value


def test_each_system_reads_the_longest_input_within_the_budget(dry_run):
    out_dir, _ = dry_run
    for key in SYSTEMS:
        fit = json.loads((out_dir / key / "fit.json").read_text())
        assert fit["budget_mb"] == BUDGET_MB and fit["peak_mb"] <= BUDGET_MB
        longer = [p for p in fit["probes"] if p["tokens"] > fit["tokens"]]
        assert all(not p["fits"] and p["peak_mb"] > BUDGET_MB for p in longer), key
    tokens = {key: json.loads((out_dir / key / "fit.json").read_text())["tokens"] for key in SYSTEMS}
    assert tokens["hepos_lsh"] == TOY.unit and tokens["pagesum_spatial"] == 2 * TOY.unit, "the budget tells them apart"


def test_every_system_trains_on_its_fitted_input_with_the_same_updates_batch_and_initialization(dry_run):
    out_dir, _ = dry_run
    length_keys = {"num_pages": TOY.unit, "max_pages": TOY.unit, "max_source_tokens": 1, "max_document_tokens": 1}
    starts = set()
    for key in SYSTEMS:
        cfg = load_checkpoint_file(str(out_dir / key / "checkpoints" / "checkpoint_best.pt"))["cfg"]
        fitted = json.loads((out_dir / key / "fit.json").read_text())["tokens"]
        read = [cfg["task"][name] * unit for name, unit in length_keys.items() if cfg["task"].get(name)]
        assert fitted in read, f"{key} trained on {cfg['task']}, fitted {fitted} tokens"
        assert cfg["optimization"]["max_update"] == TOY.training.updates
        assert cfg["dataset"]["batch_size"] * cfg["optimization"]["update_freq"][0] == TOY.training.effective_batch
        assert cfg["task"]["max_summary_tokens"] == TOY.training.max_summary_tokens
        starts.add(cfg["checkpoint"]["finetune_from_model"])
    assert len(starts) == 1 and starts.pop().endswith("bart.large/model.pt")


def test_the_console_ends_with_the_summary_and_where_the_logs_are(dry_run):
    out_dir, stdout = dry_run
    summary = (out_dir / "summary.txt").read_text()
    assert stdout.rstrip().endswith(summary.rstrip())
    assert summary.startswith("DRY RUN") and f"Outputs in {out_dir}" in summary
    commands = (out_dir / "commands.sh").read_text()
    for command in ("pagesum-compare-fit", "fairseq-hydra-train", "fairseq-generate", "pagesum-score",
                    "pagesum-compare-report"):
        assert command in commands
