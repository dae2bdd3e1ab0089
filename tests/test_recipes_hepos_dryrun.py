"""The HEPOS recipes, run end to end with DRY_RUN=1: the same command lines as a real run
(pagesum-preprocess, fairseq-hydra-train with the recipe's config, fairseq-generate,
pagesum-score) on a tiny corpus in the dataset's native format, a tiny BART with 1,024
source positions, and two updates."""

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builders.corpora import write_cohan, write_govreport
from builders.recipes import SPLITS, finished, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_recipes.decoding import decoding_flags

pytestmark = pytest.mark.slow

N_TRAIN, N_VALID, N_TEST = 4, 2, 2
RECIPES = {  # recipe: (dataset variable, writer, split file names, encoder attention, source positions)
    "govreport_hepos": ("GOVREPORT_DIR", write_govreport, ("train.jsonl", "valid.jsonl", "test.jsonl"), "sinkhorn", 10240),
    "pubmed_hepos": ("PUBMED_DIR", write_cohan, ("train.txt", "val.txt", "test.txt"), "lsh", 7168),
    "arxiv_hepos": ("ARXIV_DIR", write_cohan, ("train.txt", "val.txt", "test.txt"), "lsh", 7168),
}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """Every recipe, two at a time, on one tiny BART (1,024 source positions) as bart.large:
    {recipe: (out_dir, failure or None)}."""
    papers = split_papers(N_TRAIN, N_VALID, N_TEST)
    bart_dir = tmp_path_factory.mktemp("bart")
    write_bart_dir(bart_dir, papers)
    envs = {}
    for recipe, (variable, writer, names, _, _) in RECIPES.items():
        raw_dir = tmp_path_factory.mktemp(f"{recipe}_raw")
        for split, name in zip(SPLITS, names):
            writer(raw_dir / name, papers[split])
        envs[recipe] = recipe_env(DRY_RUN="1", OUT_DIR=str(tmp_path_factory.mktemp(recipe)), BART_DIR=str(bart_dir),
                                  ARCH="hepos_tiny", **{variable: str(raw_dir)})
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RECIPES, pool.map(lambda r: run_recipe(f"{r}.sh", envs[r]), RECIPES)))
    return {recipe: (Path(envs[recipe]["OUT_DIR"]), failures[recipe]) for recipe in RECIPES}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_hepos_recipe_runs_every_stage_on_one_flat_sequence_per_document(dry_runs, recipe):
    out_dir = finished(dry_runs, recipe)
    data, run_dir = out_dir / recipe / "data", out_dir / recipe / "bart.large"
    meta = json.loads((data / "meta.json").read_text())
    assert (meta["view"], meta["max_source_tokens"]) == ("flat", RECIPES[recipe][4])  # the config's view
    assert meta["dataset"] == recipe.split("_")[0]
    assert meta["stats"]["test"]["examples"] == N_TEST
    assert (run_dir / "checkpoints" / "checkpoint_best.pt").exists()
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST and set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    commands = (out_dir / "commands.sh").read_text()
    for command in ("pagesum-preprocess", "fairseq-hydra-train", "fairseq-generate", "pagesum-score"):
        assert command in commands
    generate = shlex.split(next(line for line in commands.splitlines() if line.startswith("fairseq-generate")))
    toy_search = decoding_flags(recipe.split("_")[0], "hepos", dry_run=True)
    assert " ".join(toy_search) in " ".join(generate), "the system's and dataset's row at DRY_RUN's toy size"
    assert generate.count("--min-len") == 1, "one search"


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_hepos_recipe_trains_the_papers_model_from_its_config(dry_runs, recipe):
    out_dir = finished(dry_runs, recipe)
    run_dir = out_dir / recipe / "bart.large"
    cfg = load_checkpoint_file(str(run_dir / "checkpoints" / "checkpoint_best.pt"))["cfg"]
    _, _, _, encoder, positions = RECIPES[recipe]
    model = cfg["model"]
    assert (model["encoder_attention"], model["cross_attention"], model["hepos_stride"]) == (encoder, "hepos", 4)
    assert (model["encoder_layout"], model["window_size"]) == ("hybrid", 256)  # the authors' alternating layers
    assert model["max_source_positions"] == positions
    assert (cfg["optimizer"]["_name"], cfg["lr_scheduler"]["_name"], cfg["optimization"]["clip_norm"]) == \
        ("adafactor_batched", "fixed", 0.1)
    assert cfg["optimization"]["lr"] == [1e-4] and cfg["dataset"]["batch_size"] == 2
    log = (run_dir / "train.log").read_text()
    assert f"extending source positions from 1024 to {positions} (random)" in log
    assert "bart.large/model.pt" in log
