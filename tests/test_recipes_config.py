"""What the recipes would run (PLAN=1 prints their commands): the paper's settings, the
effective batch on any GPU count, and agreement with the fairseq-hydra-train configs."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import BIN_DIR, REPO_ROOT

RECIPES = Path(REPO_ROOT) / "recipes"
CONFIGS = RECIPES / "config"
ALL_DATA = dict(ARXIV_DIR="/data/arxiv", PUBMED_DIR="/data/pubmed", GOVREPORT_DIR="/data/govreport",
                MULTINEWS_DIR="/data/multinews")
# Settings that depend on the machine or on where files are, not on the experiment.
PATH_KEYS = {"data", "user_dir", "save_dir", "finetune_from_model"}
DEVICE_KEYS = {"cpu", "distributed_world_size", "fp16"}


def plan(recipe: str, **env_vars) -> dict[str, dict[str, list[str]]]:
    """{experiment: {command name: argv}} that ``recipes/<recipe>.sh`` would run."""
    env = {"PATH": os.environ["PATH"], "PLAN": "1", "OUT_DIR": "/out", "BART_DIR": "/bart", "NUM_GPUS": "1",
           **ALL_DATA, **env_vars}
    result = subprocess.run(["bash", str(RECIPES / f"{recipe}.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    experiments: dict[str, dict[str, list[str]]] = {}
    for line in result.stdout.splitlines():
        if line.startswith("# experiment: "):
            current = experiments.setdefault(line.split(": ", 1)[1], {})
        else:
            argv = shlex.split(line)
            current[argv[0]] = argv
    return experiments


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def every_experiment():
    runs = {**plan("arxiv"), **plan("arxiv_discourse"), **plan("pubmed"), **plan("govreport"),
            **plan("govreport", GOVREPORT_PAGES="7"), **plan("multinews"), **plan("multinews_spatial"),
            **plan("page_size"), **plan("global_decoding")}
    return runs


@pytest.fixture(scope="module")
def experiments():
    return every_experiment()


def fairseq_cfg(train_argv: list[str]):
    """The full fairseq config that a fairseq-train command line means."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, train_argv[1:])
    return convert_namespace_to_omegaconf(args)


def yaml_leaves(node: dict, prefix=()):
    for key, value in node.items():
        if isinstance(value, dict):
            yield from yaml_leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def load_yaml(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONFIGS / f"{name}.yaml"))


def test_every_recipe_experiment_has_a_hydra_config(experiments):
    assert sorted(experiments) == sorted(p.stem for p in CONFIGS.glob("*.yaml"))
    assert len(experiments) == 15


def test_hydra_config_holds_exactly_the_training_settings_of_the_shell_recipe(experiments):
    for name, commands in experiments.items():
        cfg = fairseq_cfg(commands["fairseq-train"])
        yaml = load_yaml(name)
        for (group, key), value in yaml_leaves(yaml):
            if value == "???":  # mandatory, given on the command line
                assert key in PATH_KEYS, f"{name}.yaml: {group}.{key} is left to the command line"
                continue
            section = cfg[group]  # a Namespace for the model (BART is a legacy fairseq model)
            expected = section.arch if (group, key) == ("model", "_name") else getattr(section, key)
            if isinstance(expected, (list, tuple)) or OmegaConf.is_list(expected):
                expected = list(expected)
            assert value == expected, f"{name}.yaml: {group}.{key} is {value!r}, the recipe says {expected!r}"
        # ... and every flag of the shell recipe is in the YAML (paths and devices aside)
        yaml_keys = {key for (_, key), _ in yaml_leaves(yaml)}
        yaml_keys |= {"arch" if group == "model" else group for (group, key), _ in yaml_leaves(yaml) if key == "_name"}
        recipe_keys = {arg[2:].replace("-", "_") for arg in commands["fairseq-train"] if arg.startswith("--")}
        assert recipe_keys - yaml_keys - PATH_KEYS - DEVICE_KEYS == set(), name


def test_training_follows_the_paper(experiments):
    for name, commands in experiments.items():
        train = commands["fairseq-train"]
        assert flag(train, "--optimizer") == "adam"
        assert flag(train, "--lr-scheduler") == "inverse_sqrt"  # Eq. 13: 2e-3 * min(step^-0.5, step * 10000^-1.5)
        assert (flag(train, "--lr"), flag(train, "--warmup-updates")) == ("2e-05", "10000")
        assert flag(train, "--label-smoothing") == "0.1"
        assert flag(train, "--max-epoch") == "10"
        assert flag(train, "--best-checkpoint-metric") == "loss"
        assert flag(train, "--finetune-from-model") == "/bart/bart.large.cnn/model.pt"


@pytest.mark.parametrize("name, locality, pages, page_tokens, min_len, max_len", [
    ("arxiv", "spatial", 7, 1024, 100, 350),
    ("arxiv_discourse", "discourse", 8, 1024, 100, 350),
    ("pubmed", "spatial", 7, 1024, 150, 400),
    ("govreport_20x1024", "spatial", 20, 1024, 500, 900),
    ("govreport_7x1024", "spatial", 7, 1024, 500, 900),
    ("multinews", "document", 7, 1024, 150, 400),
    ("multinews_spatial", "spatial", 7, 1024, 150, 400),
    ("page_size_128x32", "spatial", 32, 128, 100, 350),
    ("page_size_256x16", "spatial", 16, 256, 100, 350),
    ("page_size_512x8", "spatial", 8, 512, 100, 350),
    ("page_size_1024x4", "spatial", 4, 1024, 100, 350),
    ("global_decoding_arxiv_global", "spatial", 4, 1024, 100, 350),
    ("global_decoding_multinews_global", "document", 7, 1024, 150, 400),
])
def test_experiment_pages_and_decodes_as_in_the_paper(experiments, name, locality, pages, page_tokens, min_len,
                                                      max_len):
    commands = experiments[name]
    prep, train, gen = commands["pagesum-preprocess"], commands["fairseq-train"], commands["fairseq-generate"]
    assert flag(prep, "--locality") == locality
    assert flag(prep, "--num-pages" if locality == "spatial" else "--max-pages") == str(pages)
    assert flag(prep, "--tokenizer") == "gpt2"  # BART's own BPE and dictionary
    assert flag(prep, "--gpt2-dict") == "/bart/bart.large.cnn/dict.txt"
    for argv in (prep, train, gen):
        assert flag(argv, "--max-page-tokens") == str(page_tokens)
    assert flag(train, "--max-pages") == flag(gen, "--max-pages") == str(pages)
    assert (flag(gen, "--beam"), flag(gen, "--lenpen"), flag(gen, "--no-repeat-ngram-size")) == ("4", "2.0", "3")
    assert (flag(gen, "--min-len"), flag(gen, "--max-len-a"), flag(gen, "--max-len-b")) == (str(min_len), "0",
                                                                                             str(max_len))
    assert flag(gen, "--path").startswith(flag(train, "--save-dir"))
    assert flag(commands["pagesum-score"], "--hyp") == flag(gen, "--hypotheses-output")


def test_global_decoding_ablation_differs_from_page_decoding_only_in_the_decoder(experiments):
    for dataset in ("arxiv", "multinews"):
        page = experiments[f"global_decoding_{dataset}_page"]["fairseq-train"]
        glob = experiments[f"global_decoding_{dataset}_global"]["fairseq-train"]
        assert (flag(page, "--page-decoding"), flag(glob, "--page-decoding")) == ("page", "global")
        assert flag(page, "--save-dir") != flag(glob, "--save-dir")
        assert page[1] == glob[1]  # the same preprocessed data
        differ = {a for a, b in zip(page, glob) if a != b}
        assert differ <= {"page", "global", flag(page, "--save-dir")}


def test_page_size_study_keeps_4096_tokens_of_input(experiments):
    sizes = [name for name in experiments if name.startswith("page_size_")]
    assert len(sizes) == 4
    for name in sizes:
        prep = experiments[name]["pagesum-preprocess"]
        assert int(flag(prep, "--num-pages")) * int(flag(prep, "--max-page-tokens")) == 4096


@pytest.mark.parametrize("gpus, batch_size, update_freq", [
    (0, 1, 16), (1, 1, 16), (1, 2, 8), (2, 1, 8), (4, 1, 4), (8, 1, 2), (8, 2, 1), (16, 1, 1),
])
def test_any_gpu_count_keeps_16_documents_per_update(gpus, batch_size, update_freq):
    train = plan("arxiv", NUM_GPUS=str(gpus), BATCH_SIZE=str(batch_size))["arxiv"]["fairseq-train"]
    assert flag(train, "--update-freq") == str(update_freq)
    assert flag(train, "--batch-size") == str(batch_size)
    if gpus == 0:
        assert "--cpu" in train and "--distributed-world-size" not in train
    else:
        # fairseq's own distributed training: one process per GPU
        assert flag(train, "--distributed-world-size") == str(gpus) and "--cpu" not in train


def test_multi_node_launcher_wraps_only_the_training_command():
    launcher = "torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint head:29500"
    commands = plan("arxiv", NUM_GPUS="16", PAGESUM_LAUNCHER=launcher)["arxiv"]
    assert "torchrun" in commands and "fairseq-train" not in commands
    train = commands["torchrun"]
    assert train[:train.index("fairseq-train")] == shlex.split(launcher)
    assert flag(train, "--distributed-world-size") == "16" and flag(train, "--update-freq") == "1"


@pytest.mark.parametrize("env, message", [
    (dict(NUM_GPUS="3"), "NUM_GPUS (3) x BATCH_SIZE (1) must divide the effective batch of 16 documents"),
    (dict(NUM_GPUS="two"), "NUM_GPUS must be a whole number, got 'two'"),
    (dict(INIT="bart.base"), "INIT must be bart.large.cnn (PageSum) or bart.large (PageSum*), got 'bart.base'"),
    (dict(GOVREPORT_PAGES="10"), "GOVREPORT_PAGES must be 20 or 7"),
])
def test_settings_that_break_the_paper_setup_are_refused(env, message):
    recipe = "govreport" if "GOVREPORT_PAGES" in env else "arxiv"
    full_env = dict(PATH=os.environ["PATH"], PLAN="1", OUT_DIR="/out", BART_DIR="/bart", NUM_GPUS="1", **ALL_DATA)
    result = subprocess.run(["bash", str(RECIPES / f"{recipe}.sh")], env={**full_env, **env}, capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert message in result.stderr


def test_bart_large_init_selects_the_checkpoint_without_cnn_pretraining():
    train = plan("arxiv", INIT="bart.large")["arxiv"]["fairseq-train"]
    assert flag(train, "--finetune-from-model") == "/bart/bart.large/model.pt"
    assert flag(train, "--save-dir") == "/out/arxiv/bart.large/checkpoints"


def test_hydra_config_trains_with_fairseq_hydra_train(copy_task_dir, tmp_path):
    """The YAML is a working fairseq-hydra-train config; only sizes are shrunk for CPU."""
    argv = [
        os.path.join(BIN_DIR, "fairseq-hydra-train"), "--config-dir", str(CONFIGS), "--config-name", "arxiv",
        f"common.user_dir={REPO_ROOT}/pagesum_plugin", f"task.data={copy_task_dir}",
        f"checkpoint.save_dir={tmp_path}/checkpoints", "checkpoint.finetune_from_model=null",
        "model._name=pagesum_tiny", "common.cpu=true", "optimization.max_update=2", "optimization.update_freq=[1]",
        "dataset.batch_size=4", f"hydra.run.dir={tmp_path}/hydra",
    ]
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert "paged_label_smoothed_cross_entropy" in log or "PagedLabelSmoothed" in log
    assert "done training" in log
    assert (tmp_path / "checkpoints" / "checkpoint_best.pt").exists()
