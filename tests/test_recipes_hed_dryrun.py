"""The HED recipe, run end to end with DRY_RUN=1: the same command lines as a real run
(pagesum-preprocess, fairseq-hydra-train with the recipe's config, fairseq-generate,
pagesum-score) on a tiny Multi-News corpus, a tiny BART as both initialisations, two updates."""

import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builders.corpora import write_multinews
from builders.recipes import SPLITS, finished, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_recipes.decoding import decoding_flags

pytestmark = pytest.mark.slow

N_TRAIN, N_VALID, N_TEST = 4, 2, 2
INITS = ("bart.large.cnn", "bart.large")
RUNS = {  # run: (INIT, STAGES)
    "bart.large.cnn": ("bart.large.cnn", "preprocess train generate score"),
    "bart.large": ("bart.large", "preprocess train"),
}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Both initialisations, side by side, on the tiny corpus in Multi-News's layout (each
    paper's sections as a cluster's documents): {run: (out_dir, failure or None)}."""
    papers = split_papers(N_TRAIN, N_VALID, N_TEST)
    raw_dir = tmp_path_factory.mktemp("multinews")
    for split, name in zip(SPLITS, ("train", "val", "test")):
        write_multinews(raw_dir, papers[split], split=name)
    bart_dir = tmp_path_factory.mktemp("bart")
    write_bart_dir(bart_dir, papers, inits=INITS)
    envs = {run: recipe_env(DRY_RUN="1", OUT_DIR=str(tmp_path_factory.mktemp(run.replace(".", "_"))),
                            BART_DIR=str(bart_dir), ARCH="hed_tiny", MULTINEWS_DIR=str(raw_dir), INIT=init,
                            STAGES=stages)
            for run, (init, stages) in RUNS.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RUNS, pool.map(lambda run: run_recipe("multinews_hed.sh", envs[run]), RUNS)))
    return {run: (Path(envs[run]["OUT_DIR"]), failures[run]) for run in RUNS}


def test_hed_recipe_runs_every_stage_on_the_documents_of_each_cluster(dry_runs):
    out_dir = finished(dry_runs, "bart.large.cnn")
    data, run_dir = out_dir / "multinews_hed" / "data", out_dir / "multinews_hed" / "bart.large.cnn"
    meta = json.loads((data / "meta.json").read_text())
    assert (meta["view"], meta["max_source_tokens"], meta["dataset"]) == ("documents", 4096, "multinews")
    assert meta["stats"]["test"]["examples"] == N_TEST
    assert (run_dir / "checkpoints" / "checkpoint_best.pt").exists()
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    records = [json.loads(line) for line in (run_dir / "test.page_weights.jsonl").read_text().splitlines()]
    assert len(records) == N_TEST
    for record in records:  # the documents' weights (Eq. 4) of every generated token
        assert all(abs(sum(row) - 1) < 1e-4 for row in record["page_weights"])
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST and set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    commands = (out_dir / "commands.sh").read_text()
    for command in ("pagesum-preprocess", "fairseq-hydra-train", "fairseq-generate", "pagesum-score"):
        assert command in commands
    generate = next(line for line in commands.splitlines() if line.startswith("fairseq-generate"))
    toy_search = " ".join(decoding_flags("multinews", dry_run=True))
    assert toy_search in generate, "the Multi-News row of the defaults, at DRY_RUN's toy size"
    assert re.findall(r"--beam (\d+)", generate) == ["2"], "one search: DRY_RUN's toy beam 2"


@pytest.mark.parametrize("init", INITS)
def test_hed_recipe_fine_tunes_with_section_5_3_settings_from_each_init(dry_runs, init):
    out_dir = finished(dry_runs, init)
    run_dir = out_dir / "multinews_hed" / init
    cfg = load_checkpoint_file(str(run_dir / "checkpoints" / "checkpoint_best.pt"))["cfg"]
    assert (cfg["model"]["_name"], cfg["model"]["max_source_positions"]) == ("hed_tiny", 4096)
    assert (cfg["task"]["view"], cfg["task"]["max_source_tokens"]) == ("documents", 600)  # the DRY_RUN size of recipes/experiment_config.py
    assert (cfg["optimizer"]["_name"], cfg["optimizer"]["weight_decay"]) == ("adam", 0.0)
    assert (cfg["lr_scheduler"]["_name"], cfg["lr_scheduler"]["warmup_updates"]) == ("fixed", 0)
    assert cfg["optimization"]["lr"] == [5e-05] and cfg["dataset"]["batch_size"] == 1
    log = (run_dir / "train.log").read_text()
    assert f"{init}/model.pt" in log
    assert "tiling 1026 encoder position rows to 4098" in log, "BART's positions are tiled on loading"
    assert "done training" in log
