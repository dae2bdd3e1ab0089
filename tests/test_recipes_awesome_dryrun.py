"""The AWESOME recipes (GovReport, arXiv) end to end with DRY_RUN=1: the same command lines as a
real run, on a tiny corpus in the dataset's format, a tiny BART and two updates per training;
and their plans."""

import json
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from omegaconf import OmegaConf

from builders.cli import REPO_ROOT
from builders.corpora import write_cohan, write_govreport
from builders.recipes import SPLITS, finished, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.slow  # the recipe end to end

N_TRAIN, N_VALID, N_TEST = 3, 2, 2
SECTIONS = 3  # each paper's first sections: several segments per document, not twenty
CONFIGS = os.path.join(REPO_ROOT, "recipes", "config")
RECIPES = {  # recipe: (dataset variable, writer, split file names, the paper's settings)
    "govreport_awesome": ("GOVREPORT_DIR", write_govreport, ("train.jsonl", "valid.jsonl", "test.jsonl"),
                          dict(warmup=300, epochs=3)),
    "arxiv_awesome": ("ARXIV_DIR", write_cohan, ("train.txt", "val.txt", "test.txt"), dict(warmup=1000, epochs=2)),
}
# The dry runs: GovReport as Table 3's "Attn + Txt" (the extractor's salient sentences), segmented
# by the sentence embeddings; arXiv as Table 7's "Attn Only" (no salient sentences: the oracle
# labels and the extractor are skipped), segmented by the length rule alone, as the recipe advises
# where the embedding model cannot be loaded.
DRY_RUN_ARGS = {"govreport_awesome": "", "arxiv_awesome": "task.salient_sentences=none task.segmentation=length"}
SEGMENTATION = {"govreport_awesome": "all-minilm-l6-v2", "arxiv_awesome": "length"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Per recipe, the tiny corpus in its dataset's layout and ``$BART_DIR`` with a tiny BART as
    bart.large: the recipe's variables for them."""
    papers = split_papers(N_TRAIN, N_VALID, N_TEST, offset=40, sections=SECTIONS)
    root = tmp_path_factory.mktemp("awesome_recipe")
    write_bart_dir(root / "bart", papers)
    variables = {}
    for recipe, (variable, writer, names, _) in RECIPES.items():
        (root / recipe).mkdir()
        for split, name in zip(SPLITS, names):
            writer(root / recipe / name, papers[split])
        variables[recipe] = {variable: str(root / recipe), "BART_DIR": str(root / "bart"), "ARCH": "awesome_tiny",
                             "EXTRACTOR_ARCH": "awesome_extractor_tiny"}
    return variables


@pytest.fixture(scope="module")
def dry_runs(inputs, tmp_path_factory):
    """Both recipes, side by side: {recipe: out_dir}."""
    out_dirs = {recipe: tmp_path_factory.mktemp(f"{recipe}_out") for recipe in RECIPES}

    def dry_run(recipe):
        env = recipe_env(**inputs[recipe], DRY_RUN="1", OUT_DIR=str(out_dirs[recipe]), TRAIN_ARGS=DRY_RUN_ARGS[recipe])
        return run_recipe(f"{recipe}.sh", env, timeout=1800)

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(RECIPES, pool.map(dry_run, RECIPES)))
    return {recipe: (out_dirs[recipe], failures[recipe]) for recipe in RECIPES}


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_every_stage_ran_and_read_what_the_one_before_wrote(dry_runs, recipe):
    dry_run = finished(dry_runs, recipe)
    data = dry_run / recipe / "data"
    run_dir = dry_run / recipe / "bart.large"
    meta = CorpusMeta.load(data)
    assert (meta.view, meta.dataset, meta.stats["train"]["examples"]) == ("segments", recipe.split("_")[0], N_TRAIN)
    salient = "task.salient_sentences=none" not in DRY_RUN_ARGS[recipe]
    segmentation = SEGMENTATION[recipe]
    for split in ("train", "valid", "test"):
        assert (data / f"{split}.segments.{segmentation}.npy").exists() and \
            (data / f"{split}.targets.{segmentation}.npz").exists()
        assert (data / f"{split}.embeddings.all-minilm-l6-v2.npy").exists() == (segmentation != "length")
        for name in (f"{split}.salient.oracle.npy", f"{split}.salient.extractor.npy"):
            assert (data / name).exists() == salient, name
    commands = (dry_run / "commands.sh").read_text()
    if salient:
        assert np.load(data / "train.salient.oracle.npy").sum() > 0
        extractor_log = (run_dir / "extractor" / "train.log").read_text()
        assert "initializing the extractor's sentence scorer fresh" in extractor_log
        assert "done training" in extractor_log
    else:
        assert "pagesum-awesome-label" not in commands and "pagesum-awesome-extract" not in commands
        assert "--salient-sentences none" in commands
    log = (run_dir / "train.log").read_text()
    assert "memory parameters fresh" in log and "bart.large/model.pt" in log and "done training" in log
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST and set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    stages = ["pagesum-preprocess", "pagesum-awesome-segment", "fairseq-hydra-train", "fairseq-generate",
              "pagesum-score"] + (["pagesum-awesome-label", "pagesum-awesome-extract"] if salient else [])
    for command in stages:
        assert command in commands


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_the_plan_takes_every_setting_from_the_yamls(inputs, recipe):
    env = recipe_env(**inputs[recipe], PLAN="1", OUT_DIR="/out", NUM_GPUS="1")
    del env["ARCH"], env["EXTRACTOR_ARCH"]
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", f"{recipe}.sh")], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if not line.startswith("#")]
    trains = [c for c in commands if c[0] == "fairseq-hydra-train"]
    assert [c[c.index("--config-name") + 1] for c in trains] == [f"{recipe}_extractor", recipe]
    for train in trains:  # the extractor first; both from bart.large, 8 documents per update on one GPU
        overrides = dict(a.split("=", 1) for a in train if "=" in a)
        assert overrides["optimization.update_freq"] == "[8]" and overrides["dataset.batch_size"] == "1"
        assert overrides["checkpoint.finetune_from_model"].endswith("bart.large/model.pt")
    paper = RECIPES[recipe][3]
    for name in (recipe, f"{recipe}_extractor"):  # Appendix D: the extractor trains as the summarizer does
        config = OmegaConf.load(os.path.join(CONFIGS, f"{name}.yaml"))
        assert (config.optimization.lr[0], config.lr_scheduler.warmup_updates, config.optimization.max_epoch) == (
            5e-5, paper["warmup"], paper["epochs"])
    config = OmegaConf.load(os.path.join(CONFIGS, f"{recipe}.yaml"))
    assert config.dataset.batch_size * config.optimization.update_freq[0] == 8
    assert (config.task.max_document_tokens, config.task.salient_sentences, config.model.memory) == (
        51200, "extractor", "attentive")
    generate = next(c for c in commands if c[0] == "fairseq-generate")
    assert generate[generate.index("--task") + 1] == "segmented_summarization"
    assert generate[generate.index("--min-len") + 1] == "0"  # a segment may have no summary
