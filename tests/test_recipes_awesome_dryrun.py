"""recipes/govreport_awesome.sh end to end with DRY_RUN=1: the same command lines as a real run,
on a tiny GovReport-format corpus, a tiny BART and two updates per training; and its plan."""

import json
import os
import shlex
import subprocess

import numpy as np
import pytest
from omegaconf import OmegaConf

from builders.cli import REPO_ROOT
from builders.corpora import write_govreport
from builders.recipes import SPLITS, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.slow  # the recipe end to end

N_TRAIN, N_VALID, N_TEST = 3, 2, 2
RECIPE = os.path.join(REPO_ROOT, "recipes", "govreport_awesome.sh")
CONFIGS = os.path.join(REPO_ROOT, "recipes", "config")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The tiny corpus in GovReport's layout, and ``$BART_DIR`` with a tiny BART as bart.large:
    the recipe's variables for them."""
    papers = split_papers(N_TRAIN, N_VALID, N_TEST, offset=40)
    root = tmp_path_factory.mktemp("awesome_recipe")
    for split in SPLITS:
        write_govreport(root / "govreport" / f"{split}.jsonl", papers[split])
    write_bart_dir(root / "bart", papers)
    return dict(GOVREPORT_DIR=str(root / "govreport"), BART_DIR=str(root / "bart"), ARCH="awesome_tiny",
                EXTRACTOR_ARCH="awesome_extractor_tiny")


@pytest.fixture(scope="module")
def dry_run(inputs, tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("awesome_out")
    failure = run_recipe("govreport_awesome.sh", recipe_env(**inputs, DRY_RUN="1", OUT_DIR=str(out_dir)), timeout=1800)
    assert failure is None, failure
    return out_dir


def test_every_stage_ran_and_read_what_the_one_before_wrote(dry_run):
    data = dry_run / "govreport_awesome" / "data"
    run_dir = dry_run / "govreport_awesome" / "bart.large"
    meta = CorpusMeta.load(data)
    assert (meta.view, meta.stats["train"]["examples"]) == ("segments", N_TRAIN)
    for split in ("train", "valid", "test"):
        for name in (f"{split}.segments.all-minilm-l6-v2.npy", f"{split}.targets.all-minilm-l6-v2.npz",
                     f"{split}.salient.oracle.npy", f"{split}.salient.extractor.npy"):
            assert (data / name).exists(), name
    assert np.load(data / "train.salient.oracle.npy").sum() > 0
    extractor_log = (run_dir / "extractor" / "train.log").read_text()
    assert "initializing the extractor's sentence scorer fresh" in extractor_log and "done training" in extractor_log
    log = (run_dir / "train.log").read_text()
    assert "memory parameters fresh" in log and "bart.large/model.pt" in log and "done training" in log
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST and set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    commands = (dry_run / "commands.sh").read_text()
    for command in ("pagesum-preprocess", "pagesum-awesome-segment", "pagesum-awesome-label",
                    "pagesum-awesome-extract", "fairseq-hydra-train", "fairseq-generate", "pagesum-score"):
        assert command in commands


def test_the_plan_takes_every_setting_from_the_yamls(inputs):
    env = recipe_env(**inputs, PLAN="1", OUT_DIR="/out", NUM_GPUS="1")
    del env["ARCH"], env["EXTRACTOR_ARCH"]
    result = subprocess.run(["bash", RECIPE], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if not line.startswith("#")]
    trains = [c for c in commands if c[0] == "fairseq-hydra-train"]
    assert [c[c.index("--config-name") + 1] for c in trains] == ["govreport_awesome_extractor", "govreport_awesome"]
    for train in trains:  # the extractor first; both from bart.large, 8 documents per update on one GPU
        overrides = dict(a.split("=", 1) for a in train if "=" in a)
        assert overrides["optimization.update_freq"] == "[8]" and overrides["dataset.batch_size"] == "1"
        assert overrides["checkpoint.finetune_from_model"].endswith("bart.large/model.pt")
    config = OmegaConf.load(os.path.join(CONFIGS, "govreport_awesome.yaml"))
    assert (config.optimization.lr[0], config.lr_scheduler.warmup_updates, config.optimization.max_epoch) == (5e-5, 300, 3)
    assert config.dataset.batch_size * config.optimization.update_freq[0] == 8
    assert (config.task.max_document_tokens, config.task.salient_sentences, config.model.memory) == (
        51200, "extractor", "attentive")
    generate = next(c for c in commands if c[0] == "fairseq-generate")
    assert generate[generate.index("--task") + 1] == "segmented_summarization"
    assert generate[generate.index("--min-len") + 1] == "0"  # a segment may have no summary
