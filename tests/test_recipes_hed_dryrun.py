"""The HED recipes, run end to end with DRY_RUN=1: the same command lines as a real run
(pagesum-preprocess, fairseq-hydra-train with the recipe's config, fairseq-generate,
pagesum-score) on a tiny corpus in each dataset's format (Multi-News; WCEP and Multi-XScience
as jsonl clusters), a tiny BART as both initialisations, two updates."""

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from builders.cli import REPO_ROOT
from builders.corpora import write_jsonl, write_multinews
from builders.recipes import SPLITS, finished, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_recipes.decoding import decoding_flags

pytestmark = pytest.mark.slow

CONFIGS = Path(REPO_ROOT) / "recipes" / "config"
N_TRAIN, N_VALID, N_TEST = 4, 2, 2
INITS = ("bart.large.cnn", "bart.large")
RUNS = {  # run: (recipe, INIT, STAGES)
    "bart.large.cnn": ("multinews_hed", "bart.large.cnn", "preprocess train generate score"),
    "bart.large": ("multinews_hed", "bart.large", "preprocess train"),
    "wcep": ("wcep_hed", "bart.large.cnn", "preprocess train generate score"),
    "multixscience": ("multixscience_hed", "bart.large.cnn", "preprocess train generate score"),
}
JSONL_DATASETS = {"wcep": ("WCEP_DIR", 15500, ("6", "10", "60")),  # Table 4's steps; (beam, min, max) of its row
                  "multixscience": ("MULTIXSCIENCE_DIR", 90000, ("4", "50", "256"))}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Both initialisations on the tiny corpus in Multi-News's layout, and WCEP and Multi-XScience
    as jsonl clusters (each paper's sections as a cluster's documents), two at a time:
    {run: (out_dir, failure or None)}."""
    papers = split_papers(N_TRAIN, N_VALID, N_TEST)
    data_dirs = {"MULTINEWS_DIR": tmp_path_factory.mktemp("multinews")}
    for split, name in zip(SPLITS, ("train", "val", "test")):
        write_multinews(data_dirs["MULTINEWS_DIR"], papers[split], split=name)
    for variable, _, _ in JSONL_DATASETS.values():
        data_dirs[variable] = tmp_path_factory.mktemp(variable.lower())
        for split in SPLITS:
            write_jsonl(data_dirs[variable] / f"{split}.jsonl", papers[split], layout="documents")
    bart_dir = tmp_path_factory.mktemp("bart")
    write_bart_dir(bart_dir, papers, inits=INITS)
    envs = {run: recipe_env(DRY_RUN="1", OUT_DIR=str(tmp_path_factory.mktemp(run.replace(".", "_"))),
                            BART_DIR=str(bart_dir), ARCH="hed_tiny", INIT=init, STAGES=stages,
                            **{variable: str(path) for variable, path in data_dirs.items()})
            for run, (_, init, stages) in RUNS.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RUNS, pool.map(lambda run: run_recipe(f"{RUNS[run][0]}.sh", envs[run]), RUNS)))
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
    assert (cfg["optimizer"]["_name"], cfg["optimizer"]["weight_decay"]) == ("adamw_torch", 0.0)  # Adam, its fused kernel
    schedule = cfg["lr_scheduler"]  # the authors' Trainer: no warm-up, linear decay to 0, clipping at 1.0
    assert (schedule["_name"], schedule["warmup_updates"], schedule["end_learning_rate"], schedule["power"]) == (
        "polynomial_decay", 0, 0.0, 1.0)
    assert schedule["total_num_update"] == cfg["optimization"]["max_update"] and cfg["optimization"]["clip_norm"] == 1.0
    assert cfg["optimization"]["lr"] == [5e-05] and cfg["dataset"]["batch_size"] == 1
    log = (run_dir / "train.log").read_text()
    assert f"{init}/model.pt" in log
    assert "tiling 1026 encoder position rows to 4098" in log, "BART's positions are tiled on loading"
    assert "done training" in log


@pytest.mark.parametrize("run", list(JSONL_DATASETS))
def test_hed_reads_table_1s_jsonl_datasets_with_their_own_steps_and_decoding(dry_runs, run):
    out_dir = finished(dry_runs, run)
    recipe = RUNS[run][0]
    data, run_dir = out_dir / recipe / "data", out_dir / recipe / "bart.large.cnn"
    meta = json.loads((data / "meta.json").read_text())
    assert (meta["view"], meta["max_source_tokens"], meta["dataset"]) == ("documents", 4096, run)
    assert len((run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()) == N_TEST
    records = [json.loads(line) for line in (run_dir / "test.page_weights.jsonl").read_text().splitlines()]
    assert all(len(record["page_weights"][0]) > 1 for record in records), "every document of a cluster is read"
    commands = (out_dir / "commands.sh").read_text()
    train = next(line for line in commands.splitlines() if line.startswith("fairseq-hydra-train"))
    assert f"--config-name {recipe}" in train
    assert OmegaConf.load(CONFIGS / f"{recipe}.yaml").optimization.max_update == JSONL_DATASETS[run][1]
    generate = next(line for line in commands.splitlines() if line.startswith("fairseq-generate"))
    assert " ".join(decoding_flags(run, "hed", dry_run=True)) in generate, "the dataset's row at DRY_RUN's toy size"

    variable = JSONL_DATASETS[run][0]  # a real run's plan decodes with the row itself
    planned = subprocess.run(["bash", str(Path(REPO_ROOT) / "recipes" / f"{recipe}.sh")], capture_output=True,
                             text=True, env=recipe_env(PLAN="1", OUT_DIR="/out", BART_DIR="/bart", **{variable: "/data"}))
    generate = next(line for line in planned.stdout.splitlines() if line.startswith("fairseq-generate"))
    assert (re.findall(r"--beam (\d+)", generate), re.findall(r"--min-len (\d+)", generate),
            re.findall(r"--max-len-b (\d+)", generate)) == tuple([value] for value in JSONL_DATASETS[run][2])
