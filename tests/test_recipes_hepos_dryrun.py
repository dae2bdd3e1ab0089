"""The HEPOS recipes, run end to end with DRY_RUN=1: the same command lines as a real run
(pagesum-preprocess, fairseq-hydra-train with the recipe's config, fairseq-generate,
pagesum-score) on a tiny corpus in the dataset's native format, a tiny BART with 1,024
source positions, and two updates."""

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from builders.bpe import build_gpt2_bpe
from builders.cli import BIN_DIR, REPO_ROOT
from builders.corpora import acl_papers, write_cohan, write_govreport
from builders.models import bart_twin, build_tiny, save_bart_checkpoint
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.slow

N_TRAIN, N_VALID, N_TEST = 4, 2, 2
RECIPES = {  # recipe: (dataset variable, writer, split file names, encoder attention, source positions)
    "govreport_hepos": ("GOVREPORT_DIR", write_govreport, ("train.jsonl", "valid.jsonl", "test.jsonl"), "sinkhorn", 10240),
    "pubmed_hepos": ("PUBMED_DIR", write_cohan, ("train.txt", "val.txt", "test.txt"), "lsh", 7168),
}


@pytest.fixture(scope="module")
def papers():
    papers = acl_papers(N_TRAIN + N_VALID + N_TEST)
    return {"train": papers[:N_TRAIN], "valid": papers[N_TRAIN:N_TRAIN + N_VALID], "test": papers[N_TRAIN + N_VALID:]}


@pytest.fixture(scope="module")
def bart_dir(papers, tmp_path_factory):
    """``$BART_DIR`` with a tiny BART (1,024 source positions) as bart.large."""
    root = tmp_path_factory.mktemp("bart")
    texts = [p["summary"] for split in papers.values() for p in split]
    texts += [s["text"] for split in papers.values() for p in split for s in p["sections"]]
    bpe = build_gpt2_bpe(root, texts, vocab_size=600)
    dict_only = root / "dict_only"
    dict_only.mkdir()
    shutil.copyfile(bpe.dict_txt, dict_only / "dict.txt")
    CorpusMeta(tokenizer="none").save(dict_only)  # the task needs a data directory; only the dictionary matters
    args, task, model = build_tiny(str(dict_only))
    (root / "bart.large").mkdir()
    shutil.copyfile(bpe.dict_txt, root / "bart.large" / "dict.txt")
    save_bart_checkpoint(str(root / "bart.large" / "model.pt"), bart_twin(args, task, model))
    return str(root)


def run_recipe(recipe, raw_dir, out_dir, bart_dir):
    variable = RECIPES[recipe][0]
    env = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""),
        DRY_RUN="1", OUT_DIR=str(out_dir), BART_DIR=bart_dir, NUM_GPUS="0", ARCH="hepos_tiny", WORKERS="1",
        GEN_BATCH_SIZE="2", OMP_NUM_THREADS="1", **{variable: str(raw_dir)},
    )
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", f"{recipe}.sh")], env=env,
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        return f"recipes/{recipe}.sh failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return None


@pytest.fixture(scope="module")
def dry_runs(papers, bart_dir, tmp_path_factory):
    """Both recipes, side by side: {recipe: (out_dir, failure or None)}."""
    out_dirs = {}
    raw_dirs = {}
    for recipe, (_, writer, names, _, _) in RECIPES.items():
        raw_dirs[recipe] = tmp_path_factory.mktemp(f"{recipe}_raw")
        for split, name in zip(("train", "valid", "test"), names):
            writer(raw_dirs[recipe] / name, papers[split])
        out_dirs[recipe] = tmp_path_factory.mktemp(recipe)
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RECIPES, pool.map(lambda r: run_recipe(r, raw_dirs[r], out_dirs[r], bart_dir), RECIPES)))
    return {recipe: (out_dirs[recipe], failures[recipe]) for recipe in RECIPES}


def finished(dry_runs, recipe):
    out_dir, failure = dry_runs[recipe]
    if failure:
        raise AssertionError(failure)
    return out_dir


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_hepos_recipe_runs_every_stage_on_one_flat_sequence_per_document(dry_runs, recipe):
    out_dir = finished(dry_runs, recipe)
    data, run_dir = out_dir / recipe / "data", out_dir / recipe / "bart.large"
    meta = json.loads((data / "meta.json").read_text())
    assert (meta["view"], meta["max_source_tokens"]) == ("flat", RECIPES[recipe][4])  # the config's view
    assert meta["stats"]["test"]["examples"] == N_TEST
    assert (run_dir / "checkpoints" / "checkpoint_best.pt").exists()
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST and set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    commands = (out_dir / "commands.sh").read_text()
    for command in ("pagesum-preprocess", "fairseq-hydra-train", "fairseq-generate", "pagesum-score"):
        assert command in commands


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_hepos_recipe_trains_the_papers_model_from_its_config(dry_runs, recipe):
    out_dir = finished(dry_runs, recipe)
    run_dir = out_dir / recipe / "bart.large"
    cfg = load_checkpoint_file(str(run_dir / "checkpoints" / "checkpoint_best.pt"))["cfg"]
    _, _, _, encoder, positions = RECIPES[recipe]
    model = cfg["model"]
    assert (model["encoder_attention"], model["cross_attention"], model["hepos_stride"]) == (encoder, "hepos", 4)
    assert model["max_source_positions"] == positions
    assert (cfg["optimizer"]["_name"], cfg["lr_scheduler"]["_name"], cfg["optimization"]["clip_norm"]) == \
        ("adafactor", "fixed", 0.1)
    assert cfg["optimization"]["lr"] == [1e-4] and cfg["dataset"]["batch_size"] == 2
    log = (run_dir / "train.log").read_text()
    assert f"extending source positions from 1024 to {positions} (random)" in log
    assert "bart.large/model.pt" in log
