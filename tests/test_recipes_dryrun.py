"""Every recipe, run end to end with DRY_RUN=1: the same command lines as a real run,
on a tiny corpus in the dataset's native format, a tiny BART and two updates.

A tiny BART stands in for bart.large.cnn and bart.large: it is written in fairseq's
checkpoint format with a byte-level BPE vocabulary trained on the corpus, laid out as
the recipes expect ``$BART_DIR`` (``bart.large.cnn/{model.pt,dict.txt}``,
``encoder.json``, ``vocab.bpe``).
"""

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from builders.cli import BIN_DIR, REPO_ROOT
from builders.corpora import write_cohan, write_govreport, write_multinews
from builders.recipes import SPLITS, finished, recipe_env, run_recipe, split_papers, write_bart_dir
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.slow  # every recipe end to end

N_TRAIN, N_VALID, N_TEST = 4, 2, 2
SPLIT_NAMES = {  # each dataset's own file names for train / valid / test
    "arxiv": ("train.txt", "val.txt", "test.txt"),
    "govreport": ("train.jsonl", "valid.jsonl", "test.jsonl"),
    "multinews": ("train", "val", "test"),
}


@pytest.fixture(scope="module")
def papers():
    return split_papers(N_TRAIN, N_VALID, N_TEST)


@pytest.fixture(scope="module")
def raw_dirs(papers, tmp_path_factory):
    """The tiny corpus in arXiv/PubMed, GovReport and Multi-News layouts."""
    root = tmp_path_factory.mktemp("raw")
    for split, name in zip(SPLITS, SPLIT_NAMES["arxiv"]):
        write_cohan(root / "arxiv" / name, papers[split])
    for split, name in zip(SPLITS, SPLIT_NAMES["govreport"]):
        write_govreport(root / "govreport" / name, papers[split])
    for split, name in zip(SPLITS, SPLIT_NAMES["multinews"]):
        write_multinews(root / "multinews", papers[split], split=name)
    return {name: str(root / name) for name in ("arxiv", "govreport", "multinews")}


@pytest.fixture(scope="module")
def bart_dir(papers, tmp_path_factory):
    """``$BART_DIR`` with a tiny BART as both bart.large.cnn and bart.large."""
    root = tmp_path_factory.mktemp("bart")
    write_bart_dir(root, papers, inits=("bart.large.cnn", "bart.large"))
    return str(root)


@pytest.fixture(scope="module")
def dry_runs(raw_dirs, bart_dir, tmp_path_factory):
    """Every recipe, dry-run two at a time: {run name: (out_dir, failure or None)}."""
    arxiv, multinews, govreport = raw_dirs["arxiv"], raw_dirs["multinews"], raw_dirs["govreport"]
    runs = {
        "arxiv": ("arxiv", dict(ARXIV_DIR=arxiv)),
        "arxiv_discourse": ("arxiv_discourse", dict(ARXIV_DIR=arxiv)),
        # PubMed shares arXiv's layout (Cohan et al., 2018), and multinews_spatial Multi-News's
        # files: their later stages run arxiv's and multinews's command lines with another YAML
        # (tests/test_recipes_config.py checks the plan of each)
        "pubmed": ("pubmed", dict(PUBMED_DIR=arxiv, STAGES="preprocess")),
        "multinews": ("multinews", dict(MULTINEWS_DIR=multinews, SETTINGS="placeholder_pages")),
        "multinews_spatial": ("multinews_spatial", dict(MULTINEWS_DIR=multinews, STAGES="preprocess")),
        "govreport": ("govreport", dict(GOVREPORT_DIR=govreport, SETTINGS="adafactor")),
        "govreport_7": ("govreport", dict(GOVREPORT_DIR=govreport, GOVREPORT_PAGES="7", STAGES="preprocess")),
        # the other page sizes and page-wise decoding run the same command lines (see
        # tests/test_recipes_config.py for the plan of all of them)
        "page_size": ("page_size", dict(ARXIV_DIR=arxiv, PAGE_SIZES="128x32")),
        "global_decoding": ("global_decoding", dict(ARXIV_DIR=arxiv, MULTINEWS_DIR=multinews, DECODINGS="global")),
        "arxiv_bart_large": ("arxiv", dict(ARXIV_DIR=arxiv, INIT="bart.large", STAGES="preprocess train",
                                           SETTINGS="fairseq")),
    }
    out_dirs = {name: tmp_path_factory.mktemp(name) for name in runs}

    def dry_run(name):
        recipe, variables = runs[name]
        env = recipe_env(DRY_RUN="1", OUT_DIR=str(out_dirs[name]), BART_DIR=bart_dir, ARCH="pagesum_tiny", **variables)
        return run_recipe(f"{recipe}.sh", env)

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = dict(zip(runs, pool.map(dry_run, runs)))
    return {name: (out_dirs[name], failures[name]) for name in runs}


def assert_experiment_ran(out_dir, name, init="bart.large.cnn", data_name=None):
    """Every stage left its output, and each stage read what the one before wrote."""
    data = out_dir / (data_name or name) / "data"
    run_dir = out_dir / name / init
    meta = CorpusMeta.load(data)
    assert meta.stats["train"]["examples"] == N_TRAIN
    assert meta.stats["test"]["examples"] == N_TEST
    assert (run_dir / "checkpoints" / "checkpoint_best.pt").exists()
    assert "done training" in (run_dir / "train.log").read_text()
    hypotheses = (run_dir / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    references = (data / "test.reference.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(references) == N_TEST
    weights = (run_dir / "test.page_weights.jsonl").read_text().splitlines()
    assert len(weights) == N_TEST
    scores = json.loads((run_dir / "scores.json").read_text())
    assert scores["examples"] == N_TEST
    assert set(scores["scores"]) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    commands = (out_dir / "commands.sh").read_text()
    for command in ("pagesum-preprocess", "fairseq-hydra-train", "fairseq-generate", "pagesum-score"):
        assert command in commands
    return meta


@pytest.mark.parametrize("recipe, input_format, locality, pages", [
    ("arxiv", "arxiv", "spatial", 7),
    ("arxiv_discourse", "arxiv", "discourse", 8),
    ("multinews", "multinews", "document", 7),
])
def test_recipe_runs_every_stage_on_its_native_format(recipe, input_format, locality, pages, dry_runs):
    meta = assert_experiment_ran(finished(dry_runs, recipe), recipe)
    assert (meta.view, meta.dataset) == (locality, input_format)
    assert meta.stats["train"]["pages_per_example_max"] <= pages


@pytest.mark.parametrize("recipe, input_format, locality", [
    ("pubmed", "pubmed", "spatial"),
    ("multinews_spatial", "multinews", "spatial"),
])
def test_recipe_reads_its_native_format_into_its_view(recipe, input_format, locality, dry_runs):
    meta = CorpusMeta.load(finished(dry_runs, recipe) / recipe / "data")
    assert (meta.view, meta.dataset, meta.stats["test"]["examples"]) == (locality, input_format, N_TEST)


def test_settings_placeholder_pages_gives_every_cluster_its_seven_pages_in_training_and_decoding(dry_runs):
    out_dir = finished(dry_runs, "multinews")
    assert checkpoint_cfg(out_dir / "multinews" / "bart.large.cnn")["task"]["placeholder_pages"] is True
    records = (out_dir / "multinews" / "bart.large.cnn" / "test.page_weights.jsonl").read_text().splitlines()
    for record in map(json.loads, records):  # clusters of fewer documents are filled up with "." pages
        assert {len(row) for row in record["page_weights"]} == {7}


def test_govreport_recipe_runs_with_20_pages_and_prepares_7(dry_runs):
    meta = assert_experiment_ran(finished(dry_runs, "govreport"), "govreport_20x1024")
    assert (meta.view, meta.num_pages) == ("spatial", 20)
    seven = finished(dry_runs, "govreport_7") / "govreport_7x1024" / "data"
    assert CorpusMeta.load(seven).num_pages == 7


def test_page_size_recipe_reads_arxiv_in_token_pages_of_the_given_size(dry_runs):
    meta = assert_experiment_ran(finished(dry_runs, "page_size"), "page_size_128x32", data_name="page_size")
    assert (meta.dataset, meta.view, meta.num_pages, meta.max_page_tokens) == ("arxiv", "token", 32, 128)


def test_global_decoding_recipe_trains_a_global_decoder_for_both_datasets(dry_runs):
    out_dir = finished(dry_runs, "global_decoding")
    for dataset, locality in (("arxiv", "token"), ("multinews", "document")):
        name = f"global_decoding_{dataset}_global"
        meta = assert_experiment_ran(out_dir, name, data_name=f"global_decoding_{dataset}")
        assert meta.view == locality
        model_cfg = checkpoint_cfg(out_dir / name / "bart.large.cnn")["model"]  # as fairseq-hydra-train saved it
        assert model_cfg["page_decoding"] == "global"


def test_bart_large_init_fine_tunes_from_bart_large(dry_runs):
    log = (finished(dry_runs, "arxiv_bart_large") / "arxiv" / "bart.large" / "train.log").read_text()
    assert "bart.large/model.pt" in log
    assert "initializing the page confidence layer fresh" in log
    assert "done training" in log


def test_pagesum_fine_tunes_with_the_authors_settings_where_the_paper_is_silent(dry_runs):
    cfg = checkpoint_cfg(finished(dry_runs, "arxiv") / "arxiv" / "bart.large.cnn")
    assert (cfg["optimization"]["clip_norm"], cfg["optimizer"]["weight_decay"]) == (0.0, 0.0)
    assert (cfg["model"]["attention_dropout"], cfg["criterion"]["ignore_prefix_size"]) == (0.0, 1)
    assert (cfg["checkpoint"]["save_interval_updates"], cfg["dataset"]["validate_interval_updates"]) == (1000, 1000)


def test_settings_fairseq_restores_fairseqs_bart_fine_tuning_values(dry_runs):
    cfg = checkpoint_cfg(finished(dry_runs, "arxiv_bart_large") / "arxiv" / "bart.large")
    assert (cfg["optimization"]["clip_norm"], cfg["optimizer"]["weight_decay"]) == (0.1, 0.01)
    assert (cfg["model"]["attention_dropout"], cfg["criterion"]["ignore_prefix_size"]) == (0.1, 0)


def test_govreport_trains_with_activation_checkpointing_and_settings_adafactor_swaps_the_optimizer(dry_runs):
    cfg = checkpoint_cfg(finished(dry_runs, "govreport") / "govreport_20x1024" / "bart.large.cnn")
    assert cfg["model"]["checkpoint_activations"] is True
    assert cfg["common"]["fp16"] is False, "half precision is for GPUs; the recipe turns it off on CPU"
    assert cfg["optimizer"]["_name"] == "adafactor_batched" and "adam_betas" not in cfg["optimizer"]


def test_an_unknown_settings_name_stops_the_recipe_before_it_runs(tmp_path):
    env = {"PATH": BIN_DIR + os.pathsep + os.environ["PATH"], "ARXIV_DIR": str(tmp_path), "OUT_DIR": str(tmp_path),
           "BART_DIR": str(tmp_path), "NUM_GPUS": "0", "PLAN": "1", "SETTINGS": "fairseq,sgd"}
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "arxiv.sh")], capture_output=True, text=True,
                            env=env)
    assert result.returncode != 0 and "SETTINGS: no settings named 'sgd'" in result.stderr


def checkpoint_cfg(run_dir):
    return load_checkpoint_file(str(run_dir / "checkpoints" / "checkpoint_best.pt"))["cfg"]


@pytest.mark.parametrize("unset, message", [
    ("ARXIV_DIR", "set ARXIV_DIR"),
    ("OUT_DIR", "set OUT_DIR"),
    ("BART_DIR", "set BART_DIR"),
    ("NUM_GPUS", "set NUM_GPUS"),
])
def test_recipe_names_each_missing_setting(unset, message, tmp_path):
    env = {"ARXIV_DIR": str(tmp_path), "OUT_DIR": str(tmp_path / "out"), "BART_DIR": str(tmp_path), "NUM_GPUS": "1"}
    del env[unset]
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "arxiv.sh")], capture_output=True,
                            text=True, env={"PATH": BIN_DIR + os.pathsep + os.environ["PATH"], **env})
    assert result.returncode == 2
    assert message in result.stderr


def test_recipe_names_a_missing_checkpoint_or_split_file(raw_dirs, bart_dir, tmp_path):
    env = dict(os.environ, OUT_DIR=str(tmp_path), NUM_GPUS="0", ARXIV_DIR=raw_dirs["arxiv"])
    missing_bart = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "arxiv.sh")], capture_output=True,
                                  text=True, env=dict(env, BART_DIR=str(tmp_path)))
    assert missing_bart.returncode == 2
    assert f"bart.large.cnn checkpoint not found: {tmp_path}/bart.large.cnn/model.pt" in missing_bart.stderr
    missing_split = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "arxiv.sh")], capture_output=True,
                                   text=True, env=dict(env, BART_DIR=bart_dir, ARXIV_TEST=str(tmp_path / "nope.txt")))
    assert missing_split.returncode == 2
    assert f"arxiv test split not found: {tmp_path}/nope.txt" in missing_split.stderr
