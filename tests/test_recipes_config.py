"""What the recipes run (PLAN=1 prints their commands): each experiment's settings come from
its YAML alone, the command lines add only paths, devices and the batch split, and the
effective batch survives any GPU count."""

import argparse
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from fairseq.criterions import build_criterion
from fairseq.models import ARCH_MODEL_REGISTRY
from omegaconf import OmegaConf

from builders.cli import BIN_DIR, REPO_ROOT
from builders.models import build_tiny
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropyConfig

pytestmark = pytest.mark.slow  # runs every recipe script (PLAN=1)

RECIPES = Path(REPO_ROOT) / "recipes"
CONFIGS = RECIPES / "config"
ALL_DATA = dict(ARXIV_DIR="/data/arxiv", PUBMED_DIR="/data/pubmed", GOVREPORT_DIR="/data/govreport",
                MULTINEWS_DIR="/data/multinews")
PAGESUM_RECIPES = {"arxiv": {}, "arxiv_discourse": {}, "pubmed": {}, "govreport": {},
                   "govreport_7": dict(GOVREPORT_PAGES="7"), "multinews": {}, "multinews_spatial": {},
                   "page_size": {}, "global_decoding": {}}
TRAIN_ONLY = "preprocess train"  # what a test of the training command line plans (decoding flags cost an import)
# The only overrides a recipe may add to its YAML: where things are, and the devices.
MACHINE_KEYS = {"common.user_dir", "task.data", "checkpoint.save_dir", "checkpoint.finetune_from_model",
                "hydra.run.dir", "hydra.job.chdir", "dataset.batch_size", "optimization.update_freq",
                "common.cpu", "common.fp16", "distributed_training.distributed_world_size"}


def plan(recipe: str, **env_vars) -> dict[str, dict[str, list[str]]]:
    """{experiment: {command name: argv}} that ``recipes/<recipe>.sh`` would run (``STAGES=...``: those stages')."""
    env = {"PATH": BIN_DIR + os.pathsep + os.environ["PATH"], "PLAN": "1", "OUT_DIR": "/out", "BART_DIR": "/bart",
           "NUM_GPUS": "1", **ALL_DATA, **env_vars}
    result = subprocess.run(["bash", str(RECIPES / f"{recipe}.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    experiments: dict[str, dict[str, list[str]]] = {}
    current = experiments.setdefault("", {})  # what the recipe runs before its experiments
    for line in result.stdout.splitlines():
        if line.startswith("# experiment: "):
            current = experiments.setdefault(line.split(": ", 1)[1], {})
        else:
            argv = shlex.split(line)
            current[argv[0]] = argv
    if not experiments[""]:
        del experiments[""]
    return experiments


def overrides(train: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in train if "=" in arg and not arg.startswith("-"))


def flag(argv: list[str], name: str) -> str:
    return argv[len(argv) - 1 - argv[::-1].index(name) + 1]  # the last occurrence wins, as in argparse


@pytest.fixture(scope="module")
def experiments():
    runs = {}
    for recipe, env in PAGESUM_RECIPES.items():
        runs.update(plan(recipe.split("_7")[0] if recipe == "govreport_7" else recipe, **env))
    return runs


def test_every_experiment_trains_with_fairseq_hydra_train_on_its_own_yaml(experiments):
    for name, commands in experiments.items():
        train = commands["fairseq-hydra-train"]
        assert flag(train, "--config-name") == name and (CONFIGS / f"{name}.yaml").exists()


def test_the_command_line_adds_only_paths_devices_and_the_batch_split(experiments):
    for commands in experiments.values():
        assert set(overrides(commands["fairseq-hydra-train"])) <= MACHINE_KEYS


def test_no_recipe_script_holds_a_training_or_decoding_number():
    for script in RECIPES.glob("*.sh"):
        if script.name in ("common.sh", "demo.sh"):
            continue
        text = script.read_text()
        for setting in ("--lr", "--beam", "--lenpen", "--max-len-b", "--min-len", "--num-pages", "--max-pages",
                        "--warmup-updates", "--label-smoothing", "--dropout"):
            assert setting not in text, f"{script.name} sets {setting}"


def test_preprocessing_records_the_experiments_view_as_the_corpus_default(experiments):
    preprocess = experiments["arxiv_discourse"]["pagesum-preprocess"]
    assert (flag(preprocess, "--view"), flag(preprocess, "--max-pages")) == ("discourse", "8")


def test_decoding_reads_the_view_from_the_yaml_and_the_settings_from_the_defaults_table(experiments):
    generate = experiments["page_size_128x32"]["fairseq-generate"]
    assert (flag(generate, "--view"), flag(generate, "--num-pages"), flag(generate, "--max-page-tokens")) == (
        "token", "32", "128")
    assert (flag(generate, "--beam"), flag(generate, "--lenpen"), flag(generate, "--min-len"),
            flag(generate, "--max-len-b")) == ("4", "2.0", "100", "350")


def test_the_paper_fine_tunes_with_the_eq_13_schedule_and_label_smoothing():
    for name in ("arxiv", "pubmed", "govreport_20x1024", "multinews", "page_size_512x8"):
        config = OmegaConf.load(CONFIGS / f"{name}.yaml")
        assert (config.optimization.lr[0], config.lr_scheduler._name, config.lr_scheduler.warmup_updates) == (
            2e-5, "inverse_sqrt", 10000)
        assert config.criterion.label_smoothing == 0.1


def test_settings_placeholder_pages_trains_and_decodes_multi_news_with_the_authors_pages():
    commands = plan("multinews", SETTINGS="placeholder_pages")["multinews"]
    assert overrides(commands["fairseq-hydra-train"])["++task.placeholder_pages"] == "true"
    assert "--placeholder-pages" in commands["fairseq-generate"]
    assert "--placeholder-pages" not in plan("multinews")["multinews"]["fairseq-generate"], "masking is the default"


def test_the_page_size_study_reads_the_same_4096_tokens_at_every_size():
    for pages, tokens in ((32, 128), (16, 256), (8, 512), (4, 1024)):
        task = OmegaConf.load(CONFIGS / f"page_size_{tokens}x{pages}.yaml").task
        assert (task.view, task.num_pages * task.max_page_tokens) == ("token", 4096)


def test_global_and_page_decoding_yamls_differ_only_in_the_decoder():
    for dataset in ("arxiv", "multinews"):
        page = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"global_decoding_{dataset}_page.yaml"))
        glob = OmegaConf.to_container(OmegaConf.load(CONFIGS / f"global_decoding_{dataset}_global.yaml"))
        assert page["model"].pop("page_decoding") == "page" and glob["model"].pop("page_decoding") == "global"
        assert page == glob


@pytest.mark.parametrize("gpus, batch_size, update_freq", [
    (0, 1, 16), (1, 1, 16), (1, 2, 8), (2, 1, 8), (4, 1, 4), (8, 1, 2), (8, 2, 1), (16, 1, 1),
])
def test_any_gpu_count_keeps_16_documents_per_update(gpus, batch_size, update_freq):
    train = overrides(plan("arxiv", NUM_GPUS=str(gpus), BATCH_SIZE=str(batch_size), STAGES=TRAIN_ONLY)["arxiv"][
        "fairseq-hydra-train"])
    assert (train["optimization.update_freq"], train["dataset.batch_size"]) == (f"[{update_freq}]", str(batch_size))
    if gpus == 0:
        assert train["common.cpu"] == "true" and "distributed_training.distributed_world_size" not in train
    else:  # fairseq's own distributed training: one process per GPU
        assert train["distributed_training.distributed_world_size"] == str(gpus) and "common.cpu" not in train


def rendezvous(recipe="arxiv", **env_vars):
    """(the training overrides, the exported socket interfaces) of a PLAN=1 run."""
    experiments = plan(recipe, **env_vars)
    before = experiments.get("", {})
    return overrides(experiments[recipe]["fairseq-hydra-train"]), overrides(before.get("export", []))


def test_one_node_meets_through_a_file_and_binds_gloo_and_nccl_to_loopback():
    train, sockets = rendezvous(NUM_GPUS="8")
    assert re.fullmatch(r"file:///out/arxiv/bart\.large\.cnn/rendezvous\.\d+",
                        train["distributed_training.distributed_init_method"])
    assert train["distributed_training.distributed_rank"] == "0"
    assert sockets == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def test_each_node_of_a_slurm_job_binds_to_the_private_interface_and_starts_at_its_own_rank():
    for node in (0, 1):
        train, sockets = rendezvous(NUM_GPUS="16", PAGESUM_IFACE="ib0", SLURM_JOB_ID="77", SLURM_JOB_NUM_NODES="2",
                                    SLURM_NODEID=str(node))
        assert train["distributed_training.distributed_init_method"] == "file:///out/arxiv/bart.large.cnn/rendezvous.77"
        assert train["distributed_training.distributed_rank"] == str(8 * node)
        assert train["optimization.update_freq"] == "[1]"
        assert sockets == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"}


def test_a_single_gpu_run_opens_no_rendezvous():
    train, sockets = rendezvous(NUM_GPUS="1")
    assert "distributed_training.distributed_init_method" not in train and sockets == {}


@pytest.mark.parametrize("env, message", [
    (dict(NUM_GPUS="16", NUM_NODES="2", NODE_RANK="1", PAGESUM_JOB_ID="j"),
     "set PAGESUM_IFACE to the job's private network interface"),
    (dict(NUM_GPUS="16", NUM_NODES="2", NODE_RANK="1", PAGESUM_IFACE="ib0"), "set PAGESUM_JOB_ID"),
    (dict(NUM_GPUS="16", NUM_NODES="2", NODE_RANK="2", PAGESUM_IFACE="ib0", PAGESUM_JOB_ID="j"),
     "NODE_RANK (2) must be a whole number below NUM_NODES (2)"),
    (dict(NUM_GPUS="16", PAGESUM_LAUNCHER="torchrun --nnodes 2"), "torchrun's rendezvous store listens on every"),
])
def test_a_multi_node_run_that_would_not_bind_is_refused(env, message):
    result = subprocess.run(["bash", str(RECIPES / "arxiv.sh")], capture_output=True, text=True,
                            env={"PATH": BIN_DIR + os.pathsep + os.environ["PATH"], "PLAN": "1", "OUT_DIR": "/out",
                                 "BART_DIR": "/bart", **ALL_DATA, **env})
    assert result.returncode == 2 and message in result.stderr, result.stderr


@pytest.mark.parametrize("env, message", [
    (dict(NUM_GPUS="3"), "NUM_GPUS (3) x BATCH_SIZE (1) must divide the effective batch of 16 documents"),
    (dict(NUM_GPUS="two"), "NUM_GPUS must be a whole number, got 'two'"),
    (dict(INIT="bart.base"), "INIT must be bart.large.cnn (PageSum) or bart.large (PageSum*), got 'bart.base'"),
    (dict(GOVREPORT_PAGES="10"), "GOVREPORT_PAGES must be 20 or 7"),
])
def test_settings_that_break_the_paper_setup_are_refused(env, message):
    recipe = "govreport" if "GOVREPORT_PAGES" in env else "arxiv"
    full_env = dict(PATH=BIN_DIR + os.pathsep + os.environ["PATH"], PLAN="1", OUT_DIR="/out", BART_DIR="/bart",
                    NUM_GPUS="1", **ALL_DATA)
    result = subprocess.run(["bash", str(RECIPES / f"{recipe}.sh")], env={**full_env, **env}, capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert message in result.stderr


def test_a_node_started_by_hand_meets_the_others_through_its_job_id_on_the_interface_named():
    for node in (0, 1):
        train, sockets = rendezvous(NUM_GPUS="16", NUM_NODES="2", NODE_RANK=str(node), PAGESUM_IFACE="ib0",
                                    PAGESUM_JOB_ID="run1")
        assert train["distributed_training.distributed_init_method"] == "file:///out/arxiv/bart.large.cnn/rendezvous.run1"
        assert train["distributed_training.distributed_rank"] == str(8 * node)
        assert sockets == {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0"}
    _, sockets = rendezvous(NUM_GPUS="8", PAGESUM_IFACE="eth1")  # one node, on the interface named
    assert sockets == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"}


SPLIT_FILES = [  # recipe, its dataset's variable prefix, the split files of the dataset's own layout
    ("arxiv", "ARXIV", ("train.txt", "val.txt", "test.txt")),
    ("pubmed", "PUBMED", ("train.txt", "val.txt", "test.txt")),
    ("govreport", "GOVREPORT", ("train.jsonl", "valid.jsonl", "test.jsonl")),
    ("multinews", "MULTINEWS", ("train.src", "val.src", "test.src")),
    ("wcep_hed", "WCEP", ("train.jsonl", "valid.jsonl", "test.jsonl")),
    ("multixscience_hed", "MULTIXSCIENCE", ("train.jsonl", "valid.jsonl", "test.jsonl")),
]
PREFIX_FLAGS = ("--trainpref", "--validpref", "--testpref")


@pytest.mark.parametrize("recipe, prefix, names", SPLIT_FILES, ids=[row[0] for row in SPLIT_FILES])
def test_each_split_file_is_the_datasets_own_unless_its_variable_names_another(recipe, prefix, names):
    folder = f"/data/{prefix.lower()}"

    def preprocess(**env_vars):
        (commands,) = plan(recipe, STAGES="preprocess", **{f"{prefix}_DIR": folder}, **env_vars).values()
        return [flag(commands["pagesum-preprocess"], name) for name in PREFIX_FLAGS]
    assert preprocess() == [f"{folder}/{name}" for name in names]
    named = {f"{prefix}_{split}": f"/elsewhere/{split.lower()}" for split in ("TRAIN", "VALID", "TEST")}
    assert preprocess(**named) == list(named.values())


def test_generation_batches_preprocessing_workers_and_a_cpu_run_reach_the_commands_they_name():
    default, given = plan("arxiv")["arxiv"], plan("arxiv", GEN_BATCH_SIZE="7", WORKERS="3", NUM_GPUS="0")["arxiv"]
    assert (flag(default["fairseq-generate"], "--batch-size"), flag(given["fairseq-generate"], "--batch-size")) == (
        "4", "7")
    assert flag(given["pagesum-preprocess"], "--workers") == "3"
    assert "--cpu" in given["fairseq-generate"] and "--cpu" not in default["fairseq-generate"]
    assert overrides(given["fairseq-hydra-train"])["common.cpu"] == "true"


def test_page_sizes_decodings_and_datasets_choose_the_experiments_that_run():
    assert set(plan("page_size", PAGE_SIZES="256x16 1024x4", STAGES=TRAIN_ONLY)) == {"page_size_256x16",
                                                                                      "page_size_1024x4"}
    assert set(plan("global_decoding", DECODINGS="page", STAGES=TRAIN_ONLY)) == {"global_decoding_arxiv_page",
                                                                                 "global_decoding_multinews_page"}
    only_multinews = plan("global_decoding", DATASETS="multinews", ARXIV_DIR="", STAGES=TRAIN_ONLY)  # no arXiv folder
    assert set(only_multinews) == {"global_decoding_multinews_global", "global_decoding_multinews_page"}


def test_bart_large_init_selects_the_checkpoint_without_cnn_pretraining():
    train = overrides(plan("arxiv", INIT="bart.large", STAGES=TRAIN_ONLY)["arxiv"]["fairseq-hydra-train"])
    assert train["checkpoint.finetune_from_model"] == "/bart/bart.large/model.pt"
    assert train["checkpoint.save_dir"] == "/out/arxiv/bart.large/checkpoints"


def test_the_machine_settings_a_user_gives_reach_the_commands_they_name():
    """FP16=1 (mixed precision on GPUs), GEN_ARGS (appended to fairseq-generate), GPT2_BPE_DIR (where
    encoder.json and vocab.bpe are, else $BART_DIR)."""
    default = plan("arxiv")["arxiv"]
    given = plan("arxiv", FP16="1", GEN_ARGS="--print-alignment --quiet", GPT2_BPE_DIR="/bpe")["arxiv"]
    assert overrides(given["fairseq-hydra-train"])["common.fp16"] == "true"
    assert "common.fp16" not in overrides(default["fairseq-hydra-train"])
    assert "--fp16" in given["fairseq-generate"] and "--fp16" not in default["fairseq-generate"]
    assert given["fairseq-generate"][-2:] == ["--print-alignment", "--quiet"]
    assert [arg for arg in given["fairseq-generate"][:-2] if arg != "--fp16"] == default["fairseq-generate"]
    assert (flag(given["pagesum-preprocess"], "--gpt2-encoder-json"), flag(given["pagesum-preprocess"], "--gpt2-vocab-bpe")
            ) == ("/bpe/encoder.json", "/bpe/vocab.bpe")
    assert flag(default["pagesum-preprocess"], "--gpt2-encoder-json") == "/bart/encoder.json"


@pytest.mark.parametrize("recipe, encoder, patterns, source_tokens", [
    ("govreport_hepos", "sinkhorn", {"sinkhorn_block_size": 128}, 10240),
    ("pubmed_hepos", "lsh", {"lsh_rounds": 4, "lsh_bucket_size": 64}, 7168),
])
def test_hepos_recipes_train_and_decode_with_the_papers_section_6_settings(recipe, encoder, patterns, source_tokens):
    """Huang et al. (2021), Section 6: Sinkhorn on 10,240 tokens (GovReport) or LSH with 4
    rounds of 64-token buckets on 7,168 (PubMed), HEPOS stride 4; Adafactor at lr 1e-4 after
    10,000 warm-up updates, clipping 0.1, 2 documents x 32 accumulated; beam 4, length penalty 2."""
    config = OmegaConf.load(CONFIGS / f"{recipe}.yaml")
    model = config.model
    assert (model.encoder_attention, model.cross_attention, model.hepos_stride) == (encoder, "hepos", 4)
    assert {key: model[key] for key in patterns} == patterns
    assert model.max_source_positions == config.task.max_source_tokens == source_tokens
    assert (config.optimizer._name, config.optimization.lr[0], config.lr_scheduler.warmup_updates) == (
        "adafactor_batched", 1e-4, 10000)
    assert config.optimization.clip_norm == 0.1
    for gpus, update_freq in ((1, 32), (2, 16), (4, 8)):
        train = overrides(plan(recipe, NUM_GPUS=str(gpus), STAGES=TRAIN_ONLY)[recipe]["fairseq-hydra-train"])
        assert (train["dataset.batch_size"], train["optimization.update_freq"]) == ("2", f"[{update_freq}]")
    generate = plan(recipe)[recipe]["fairseq-generate"]
    assert (flag(generate, "--view"), flag(generate, "--max-source-tokens")) == ("flat", str(source_tokens))
    assert (flag(generate, "--beam"), flag(generate, "--lenpen")) == ("4", "2.0")


def test_hepos_decodes_govreport_with_its_authors_lengths_and_pagesum_with_its_own():
    """Item of the generation defaults keyed by system: LongDocSum decodes GovReport with 100 to
    800 tokens, PageSum's release with 500 to 900; on PubMed and arXiv HEPOS has no row of its
    own and decodes with the dataset's."""
    for recipe, lengths in (("govreport_hepos", ("100", "800")), ("govreport", ("500", "900")),
                            ("pubmed_hepos", ("150", "400")), ("arxiv_hepos", ("100", "350"))):
        for commands in plan(recipe).values():
            generate = commands["fairseq-generate"]
            assert (flag(generate, "--min-len"), flag(generate, "--max-len-b")) == lengths, recipe


def test_pagesum_cuts_arxiv_pubmed_and_multinews_summaries_at_its_authors_400_tokens(experiments):
    for name in ("arxiv", "arxiv_discourse", "pubmed", "multinews", "multinews_spatial", "page_size_128x32",
                 "global_decoding_arxiv_page", "global_decoding_multinews_global"):
        assert OmegaConf.load(CONFIGS / f"{name}.yaml").task.max_summary_tokens == 400, name
        assert flag(experiments[name]["pagesum-preprocess"], "--max-summary-tokens") == "400", name


@pytest.mark.parametrize("path", sorted(path for pattern in ("govreport*.yaml", "arxiv*.yaml")
                                        for path in CONFIGS.glob(pattern)), ids=lambda path: path.stem)
def test_govreport_and_arxiv_recipes_train_with_torchs_fused_adamw_or_the_papers_adafactor(path):
    """Issue 22: the Adam recipes use ``adamw_torch`` (fairseq's adam update, fused without apex);
    HEPOS keeps the paper's Adafactor (fairseq's update, batched by shape)."""
    expected = "adafactor_batched" if "hepos" in path.stem else "adamw_torch"
    assert OmegaConf.load(path).optimizer._name == expected


@pytest.mark.parametrize("path", sorted(path for path in CONFIGS.glob("*.yaml") if "model" in OmegaConf.load(path)),
                         ids=lambda path: path.stem)
def test_every_model_setting_of_a_yaml_is_an_option_of_its_architecture(path):
    """fairseq reads a model's settings without a schema: a key its model does not define would be
    dropped without a word."""
    model = OmegaConf.to_container(OmegaConf.load(path).model)
    architecture = model["_name"]
    parser = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[architecture].add_args(parser)
    options = {action.dest for action in parser._actions}
    assert not set(model) - options - {"_name"}, f"{path.name}: not options of {architecture}"


SUMMARIZER_CONFIGS = sorted(path.stem for path in CONFIGS.glob("*.yaml")
                            if OmegaConf.load(path).get("criterion", {}).get("_name")
                            == "paged_label_smoothed_cross_entropy")


@pytest.mark.parametrize("name", SUMMARIZER_CONFIGS)
def test_every_summarizer_trains_with_its_papers_label_smoothing_as_fairseq_builds_its_criterion(name,
                                                                                                copy_task_dir):
    """0.1 (PageSum, HEPOS and AWESOME, after BART), 0 for HED (its paper: plain cross entropy),
    read by the criterion fairseq builds from the yaml."""
    expected = 0.0 if name.endswith("_hed") else 0.1
    _, task, _ = build_tiny(copy_task_dir)
    settings = OmegaConf.merge(OmegaConf.structured(PagedLabelSmoothedCrossEntropyConfig),
                               OmegaConf.load(CONFIGS / f"{name}.yaml").criterion, {"sentence_avg": False})
    criterion = build_criterion(settings, task)
    assert criterion.eps == expected
