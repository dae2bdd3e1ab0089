"""recipes/govreport_awesome.sh without salient sentences: the "AWESOME, attentive memory
only" row of docs/recipes.md (Table 3 of the AWESOME paper: 58.44 / 27.71 / 55.98) trains with ``TRAIN_ARGS=task.salient_sentences=none``, which needs
no oracle labels and no extractor. Cheap checks: the plan (PLAN=1), and the train stage
alone with a stand-in fairseq-hydra-train; nothing is trained."""

import os
import shlex
import stat
import subprocess

import pytest

from builders.cli import REPO_ROOT
from builders.recipes import recipe_env

RECIPE = os.path.join(REPO_ROOT, "recipes", "govreport_awesome.sh")
EXTRACTOR_COMMANDS = ("pagesum-awesome-extract", "govreport_awesome_extractor")


def plan(**variables) -> list:
    env = recipe_env(**{"GOVREPORT_DIR": "/govreport", "BART_DIR": "/bart", "OUT_DIR": "/out", "NUM_GPUS": "1",
                        "PLAN": "1", **variables})
    result = subprocess.run(["bash", RECIPE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return [shlex.split(line) for line in result.stdout.splitlines() if not line.startswith("#")]


def flag(command: list, name: str) -> str:
    return command[len(command) - 1 - command[::-1].index(name) + 1]  # the last one: argparse's value


def test_without_salient_sentences_the_plan_has_no_oracle_labels_and_no_extractor():
    commands = plan(TRAIN_ARGS="task.salient_sentences=none")
    lines = [" ".join(c) for c in commands]
    assert not any(name in line for line in lines for name in EXTRACTOR_COMMANDS + ("pagesum-awesome-label",))
    assert any("pagesum-awesome-segment" in line for line in lines)
    train = next(c for c in commands if c[0] == "fairseq-hydra-train")
    assert "task.salient_sentences=none" in train
    generate = next(c for c in commands if c[0] == "fairseq-generate")  # decoding reads what training read
    assert flag(generate, "--salient-sentences") == "none"


def test_by_default_the_extractor_is_trained_first_and_decoding_reads_its_sentences():
    commands = plan()
    lines = [" ".join(c) for c in commands]
    order = [next(i for i, line in enumerate(lines) if name in line)
             for name in ("pagesum-awesome-label", "govreport_awesome_extractor", "pagesum-awesome-extract",
                          "--config-name govreport_awesome ")]
    assert order == sorted(order)
    generate = next(c for c in commands if c[0] == "fairseq-generate")
    assert flag(generate, "--salient-sentences") == "extractor"


def test_with_oracle_salient_sentences_the_extractor_is_skipped_but_the_labels_are_made():
    lines = [" ".join(c) for c in plan(TRAIN_ARGS="task.salient_sentences=oracle")]
    assert any("pagesum-awesome-label" in line for line in lines)
    assert not any(name in line for line in lines for name in EXTRACTOR_COMMANDS)


def test_the_machine_settings_reach_every_awesome_stage_they_name():
    """NUM_GPUS=0: every stage on the CPU; FP16=1 on GPUs: mixed precision in both trainings and in
    decoding; GEN_BATCH_SIZE, WORKERS and GEN_ARGS: the commands they name."""
    def commands(**variables):
        planned = plan(**variables)
        return {c[0]: c for c in planned}, [c for c in planned if c[0] == "fairseq-hydra-train"]

    cpu, _ = commands(NUM_GPUS="0", GEN_BATCH_SIZE="7", WORKERS="3", GEN_ARGS="--quiet")
    assert flag(cpu["pagesum-awesome-segment"], "--device") == "cpu"
    assert "--cpu" in cpu["pagesum-awesome-extract"] and "--cpu" in cpu["fairseq-generate"]
    assert flag(cpu["fairseq-generate"], "--batch-size") == "7" and cpu["fairseq-generate"][-1] == "--quiet"
    assert flag(cpu["pagesum-awesome-label"], "--workers") == "3"
    gpu, trainings = commands(NUM_GPUS="1", FP16="1")
    assert "--fp16" in gpu["fairseq-generate"] and len(trainings) == 2
    assert all("common.fp16=true" in train for train in trainings)  # the extractor and the summarizer
    assert "--cpu" not in gpu["fairseq-generate"] and "--device" not in gpu["pagesum-awesome-segment"]


def test_extractor_arch_and_arch_name_the_extractors_and_the_summarizers_architectures():
    trainings = [c for c in plan(EXTRACTOR_ARCH="awesome_extractor_tiny", ARCH="awesome_tiny")
                 if c[0] == "fairseq-hydra-train"]
    names = {flag(train, "--config-name"): [arg for arg in train if arg.startswith("model._name=")] for train in trainings}
    assert names == {"govreport_awesome_extractor": ["model._name=awesome_extractor_tiny"],
                     "govreport_awesome": ["model._name=awesome_tiny"]}


@pytest.fixture()
def train_only(tmp_path):
    """The train stage alone, as a user runs it after the segment stage, with a stand-in
    fairseq-hydra-train that records its arguments: (environment, recorded arguments file)."""
    out = tmp_path / "out"
    data = out / "govreport_awesome" / "data"
    data.mkdir(parents=True)
    (data / "meta.json").write_text("{}")
    (data / "train.segments.all-minilm-l6-v2.npy").write_bytes(b"")
    bart = tmp_path / "bart"
    (bart / "bart.large").mkdir(parents=True)
    for name in ("bart.large/model.pt", "bart.large/dict.txt", "encoder.json", "vocab.bpe"):
        (bart / name).write_text("")
    stand_in = tmp_path / "bin" / "fairseq-hydra-train"
    stand_in.parent.mkdir()
    recorded = tmp_path / "train_args.txt"
    stand_in.write_text(f'#!/usr/bin/env bash\necho "$@" > {shlex.quote(str(recorded))}\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IEXEC)
    env = recipe_env(GOVREPORT_DIR=str(tmp_path / "govreport"), BART_DIR=str(bart), OUT_DIR=str(out), STAGES="train")
    env["PATH"] = str(stand_in.parent) + os.pathsep + env["PATH"]
    return env, recorded


def test_the_train_stage_without_salient_sentences_does_not_require_the_extractors_output(train_only):
    env, recorded = train_only
    result = subprocess.run(["bash", RECIPE], env={**env, "TRAIN_ARGS": "task.salient_sentences=none"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "task.salient_sentences=none" in recorded.read_text()


def test_the_train_stage_with_the_extractor_requires_its_salient_sentences(train_only):
    env, recorded = train_only
    result = subprocess.run(["bash", RECIPE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "train.salient.extractor.npy" in result.stderr
    assert "run the extractor stage" in result.stderr and not recorded.exists()
