"""What compare.yaml makes of each system (``comparison/systems.py``): how a fitted length reaches
each view, what every system shares, and which systems a corpus can feed."""

import os
import shlex
import subprocess

import pytest
from omegaconf import OmegaConf

from builders.cli import BIN_DIR, REPO_ROOT
from pagesum_recipes.comparison.systems import Comparison, ComparisonError

COMPARE_YAML = os.path.join(REPO_ROOT, "recipes", "config", "compare.yaml")
SECTIONS = {"dataset": "arxiv", "view": "spatial"}
CLUSTERS = {"dataset": "multinews", "view": "document"}


@pytest.fixture(scope="module")
def comparison():
    return Comparison(COMPARE_YAML)


def overrides(comparison, key, tokens):
    return dict(o.split("=", 1) for o in comparison.training_overrides(key, tokens))


@pytest.mark.parametrize("key, expected", [
    ("pagesum_spatial", {"task.num_pages": "3", "task.max_page_tokens": "1024"}),
    ("pagesum_discourse", {"task.max_pages": "3", "task.max_page_tokens": "1024"}),
    ("hepos_sinkhorn", {"task.max_source_tokens": "3072", "model.max_source_positions": "3072"}),
    ("hed", {"task.max_source_tokens": "3072", "model.max_source_positions": "3072"}),
    ("awesome", {"task.max_document_tokens": "3072"}),
])
def test_each_view_reads_the_fitted_length_through_its_own_settings(comparison, key, expected):
    assert expected.items() <= overrides(comparison, key, 3 * 1024).items()


def test_learned_positions_are_never_fewer_than_the_checkpoints():
    toy = Comparison(COMPARE_YAML, dry_run=True)  # inputs of 48 tokens: the positions stay BART's 1,024
    assert overrides(toy, "bart_full", 2 * toy.unit)["model.max_source_positions"] == "1024"


def test_a_length_off_the_units_is_refused(comparison):
    with pytest.raises(ComparisonError, match="multiple of 1024"):
        comparison.length_overrides("bart_full", 1000)


def test_every_system_trains_the_same_updates_on_the_same_summaries(comparison):
    for key in comparison.systems:
        settings = overrides(comparison, key, 2048)
        assert (settings["optimization.max_update"], settings["optimization.max_epoch"]) == ("20000", "0")
        assert settings["task.max_summary_tokens"] == "1024"
        yaml = OmegaConf.load(comparison.config_dir / f"{comparison.system(key).config}.yaml")
        if "total_num_update" in yaml.lr_scheduler:  # a decaying schedule ends with the run
            assert settings["lr_scheduler.total_num_update"] == "20000"


def test_bart_truncated_is_never_tried_past_its_own_positions(comparison):
    assert comparison.max_units_of("bart") == 1 and comparison.max_units_of("bart_full") == comparison.max_units


def test_a_corpus_of_sections_leaves_out_the_systems_that_need_clusters(comparison):
    assert "hed" not in comparison.select(SECTIONS, []) and "pagesum_discourse" in comparison.select(SECTIONS, [])
    assert "hed" in comparison.select(CLUSTERS, []) and "pagesum_discourse" not in comparison.select(CLUSTERS, [])
    assert comparison.left_out(SECTIONS) == ["pagesum_document reads clusters, this corpus holds sections",
                                             "hed reads clusters, this corpus holds sections"]


def test_a_requested_system_the_corpus_cannot_feed_is_an_error(comparison):
    with pytest.raises(ComparisonError, match="hed reads clusters, but this corpus holds sections"):
        comparison.select(SECTIONS, ["pagesum_spatial", "hed"])


def compare_recipe(tmp_path, **variables) -> subprocess.CompletedProcess:
    """recipes/compare.sh on a corpus of sections that holds one example a split (enough to plan)."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "meta.json").write_text('{"dataset": "arxiv", "view": "spatial"}')
    for split in ("train", "valid", "test"):
        (data / f"{split}.ids.txt").write_text("a\n")
    (tmp_path / "bart" / "bart.large").mkdir(parents=True, exist_ok=True)
    (tmp_path / "bart" / "bart.large" / "model.pt").write_bytes(b"")
    env = {**os.environ, "PATH": BIN_DIR + os.pathsep + os.environ["PATH"], "DATA_DIR": str(data), "BUDGET_MB": "100",
           "OUT_DIR": str(tmp_path / "out"), "BART_DIR": str(tmp_path / "bart"), "NUM_GPUS": "0", **variables}
    return subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", "compare.sh")], env=env, capture_output=True,
                          text=True)


def test_the_recipe_refuses_an_unknown_system_in_one_line_before_anything_runs(tmp_path):
    result = compare_recipe(tmp_path, SYSTEMS="pagesum_spatial bert")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "compare: unknown system 'bert'; choose from " + " ".join(Comparison(COMPARE_YAML).systems)]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("given", [None, "hepos_lsh"])
def test_every_other_system_is_tested_against_the_reference_system(tmp_path, given):
    """REFERENCE, else compare.yaml's."""
    reference = given or OmegaConf.load(COMPARE_YAML).reference
    result = compare_recipe(tmp_path, PLAN="1", SYSTEMS="pagesum_spatial hepos_lsh bart",
                            **({"REFERENCE": given} if given else {}))
    assert result.returncode == 0, result.stderr
    scores = [line.split() for line in result.stdout.splitlines() if line.startswith("pagesum-score ")]
    against = {argv[argv.index("--hyp") + 1].split(os.sep)[-2]:
               argv[argv.index("--compare") + 1].split(os.sep)[-2] if "--compare" in argv else None for argv in scores}
    assert against == {system: None if system == reference else reference
                       for system in ("pagesum_spatial", "hepos_lsh", "bart")}
    (report,) = [line.split() for line in result.stdout.splitlines() if line.startswith("pagesum-compare-report ")]
    assert report[report.index("--reference") + 1] == reference


def planned(result: subprocess.CompletedProcess) -> dict[str, list[list[str]]]:
    """{command name: every argv of it} that a PLAN=1 run of the recipe printed."""
    assert result.returncode == 0, result.stderr
    commands = {}
    for line in result.stdout.splitlines():
        if line and not line.startswith(("#", "export ")):
            argv = shlex.split(line)
            commands.setdefault(argv[0], []).append(argv)
    return commands


def systems_of(fit: list[str]) -> list[str]:
    start = fit.index("--systems") + 1
    return fit[start:next(i for i in range(start, len(fit)) if fit[i].startswith("--"))]


def test_the_machine_settings_a_user_gives_reach_every_stage_they_name(tmp_path):
    """INIT, STAGES, JOBS, NUM_GPUS, FP16, TRAIN_ARGS and GEN_ARGS, as in the experiments' recipes."""
    (tmp_path / "bart" / "bart.large.cnn").mkdir(parents=True)
    (tmp_path / "bart" / "bart.large.cnn" / "model.pt").write_bytes(b"")
    systems = "pagesum_spatial hepos_lsh bart"
    default = planned(compare_recipe(tmp_path, PLAN="1", SYSTEMS=systems))
    given = planned(compare_recipe(tmp_path, PLAN="1", SYSTEMS=systems, INIT="bart.large.cnn", STAGES="fit train generate",
                                   JOBS="2", NUM_GPUS="2", FP16="1", TRAIN_ARGS="optimization.clip_norm=0.5",
                                   GEN_ARGS="--quiet"))
    init = str(tmp_path / "bart" / "bart.large.cnn" / "model.pt")

    assert [systems_of(fit) for fit in default["pagesum-compare-fit"]] == [systems.split()]
    assert [systems_of(fit) for fit in given["pagesum-compare-fit"]] == [["pagesum_spatial", "bart"], ["hepos_lsh"]]
    for fit in given["pagesum-compare-fit"]:
        assert fit[fit.index("--init-checkpoint") + 1] == init and fit[-3:] == ["--device", "cuda", "--fp16"]
    assert "--fp16" not in default["pagesum-compare-fit"][0]
    for train in given["fairseq-hydra-train"]:
        assert train[-1] == "optimization.clip_norm=0.5"
        assert {"common.fp16=true", "distributed_training.distributed_world_size=2",
                f"checkpoint.finetune_from_model={init}"} <= set(train)
    for generate in given["fairseq-generate"]:
        assert "--fp16" in generate and "--cpu" not in generate and generate[-1] == "--quiet"
    assert all("--cpu" in generate for generate in default["fairseq-generate"])
    assert "pagesum-score" in default and not {"pagesum-score", "pagesum-compare-report"} & set(given)
