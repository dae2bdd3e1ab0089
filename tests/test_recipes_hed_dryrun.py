"""The HED recipe, run end to end with DRY_RUN=1: the same command lines as a real run
(pagesum-preprocess, fairseq-hydra-train with the recipe's config, fairseq-generate,
pagesum-score) on a tiny Multi-News corpus, a tiny BART as both initialisations, two updates."""

import json
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from builders.bpe import build_gpt2_bpe
from builders.cli import BIN_DIR, REPO_ROOT
from builders.corpora import acl_papers, write_multinews
from builders.models import bart_twin, build_tiny, save_bart_checkpoint
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.slow

N_TRAIN, N_VALID, N_TEST = 4, 2, 2
INITS = ("bart.large.cnn", "bart.large")
RUNS = {  # run: (INIT, STAGES)
    "bart.large.cnn": ("bart.large.cnn", "preprocess train generate score"),
    "bart.large": ("bart.large", "preprocess train"),
}


@pytest.fixture(scope="module")
def papers():
    papers = acl_papers(N_TRAIN + N_VALID + N_TEST)
    return {"train": papers[:N_TRAIN], "valid": papers[N_TRAIN:N_TRAIN + N_VALID], "test": papers[N_TRAIN + N_VALID:]}


@pytest.fixture(scope="module")
def raw_dir(papers, tmp_path_factory):
    """The tiny corpus in Multi-News's layout (each paper's sections as a cluster's documents)."""
    root = tmp_path_factory.mktemp("multinews")
    for split, name in zip(("train", "valid", "test"), ("train", "val", "test")):
        write_multinews(root, papers[split], split=name)
    return str(root)


@pytest.fixture(scope="module")
def bart_dir(papers, tmp_path_factory):
    """``$BART_DIR`` with a tiny BART (1,024 source positions) as bart.large.cnn and bart.large."""
    root = tmp_path_factory.mktemp("bart")
    texts = [p["summary"] for split in papers.values() for p in split]
    texts += [s["text"] for split in papers.values() for p in split for s in p["sections"]]
    bpe = build_gpt2_bpe(root, texts, vocab_size=600)
    dict_only = root / "dict_only"
    dict_only.mkdir()
    shutil.copyfile(bpe.dict_txt, dict_only / "dict.txt")
    CorpusMeta(tokenizer="none").save(dict_only)  # the task needs a data directory; only the dictionary matters
    args, task, model = build_tiny(str(dict_only))
    bart = bart_twin(args, task, model)
    for init in INITS:
        (root / init).mkdir()
        shutil.copyfile(bpe.dict_txt, root / init / "dict.txt")
        save_bart_checkpoint(str(root / init / "model.pt"), bart)
    return str(root)


def run_recipe(raw_dir, out_dir, bart_dir, init, stages):
    env = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PATH=BIN_DIR + os.pathsep + os.environ.get("PATH", ""),
        DRY_RUN="1", OUT_DIR=str(out_dir), BART_DIR=bart_dir, NUM_GPUS="0", ARCH="hed_tiny", WORKERS="1",
        GEN_BATCH_SIZE="2", OMP_NUM_THREADS="1", MULTINEWS_DIR=raw_dir, INIT=init, STAGES=stages,
    )
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "multinews_hed.sh")], env=env,
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        return f"recipes/multinews_hed.sh failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return None


@pytest.fixture(scope="module")
def dry_runs(raw_dir, bart_dir, tmp_path_factory):
    """Both initialisations, side by side: {run: (out_dir, failure or None)}."""
    out_dirs = {run: tmp_path_factory.mktemp(run.replace(".", "_")) for run in RUNS}
    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RUNS, pool.map(lambda run: run_recipe(raw_dir, out_dirs[run], bart_dir, *RUNS[run]), RUNS)))
    return {run: (out_dirs[run], failures[run]) for run in RUNS}


def finished(dry_runs, run):
    out_dir, failure = dry_runs[run]
    if failure:
        raise AssertionError(failure)
    return out_dir


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
    beams = re.findall(r"--beam (\d+)", generate)
    assert beams == ["4", "2"], "the Multi-News row of the defaults (beam 4), then DRY_RUN's toy beam 2, which wins"


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
