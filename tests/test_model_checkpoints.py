"""Loading fairseq-format BART checkpoints into pagesum_* models, safely."""

import argparse
import pickle

import pytest
import torch

from builders.models import bart_twin, build_tiny, save_bart_checkpoint
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.errors import CheckpointError
from pagesum_plugin.systems.pagesum.model import CONFIDENCE_KEYS


@pytest.fixture(scope="module")
def bart_checkpoint(copy_task_dir, tmp_path_factory):
    args, task, model = build_tiny(copy_task_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)  # weights that differ from a fresh init
    bart = bart_twin(args, task, model)
    path = str(tmp_path_factory.mktemp("bart") / "model.pt")
    save_bart_checkpoint(path, bart)
    return path, bart


def test_every_bart_weight_loads_and_only_the_confidence_layer_is_fresh(copy_task_dir, bart_checkpoint):
    path, bart = bart_checkpoint
    _, _, model = build_tiny(copy_task_dir)
    state = load_checkpoint_file(path)
    model.load_state_dict(state["model"], strict=True)
    loaded = model.state_dict()
    for key, value in bart.state_dict().items():
        assert torch.equal(loaded[key], value), key
    assert all(key in loaded for key in CONFIDENCE_KEYS)


def test_missing_bart_key_is_an_error_naming_the_key(copy_task_dir, bart_checkpoint):
    path, _ = bart_checkpoint
    _, _, model = build_tiny(copy_task_dir)
    state = load_checkpoint_file(path)["model"]
    del state["decoder.layers.1.fc2.weight"]
    with pytest.raises(RuntimeError, match=r"decoder\.layers\.1\.fc2\.weight"):
        model.load_state_dict(state, strict=True)


def test_unexpected_key_is_an_error_naming_the_key(copy_task_dir, bart_checkpoint):
    path, _ = bart_checkpoint
    _, _, model = build_tiny(copy_task_dir)
    state = load_checkpoint_file(path)["model"]
    state["decoder.extra_head.weight"] = torch.zeros(2, 2)
    with pytest.raises(RuntimeError, match=r"decoder\.extra_head\.weight"):
        model.load_state_dict(state, strict=True)


def test_mismatched_dimensions_are_an_error_naming_the_key(copy_task_dir, bart_checkpoint):
    path, _ = bart_checkpoint
    _, _, model = build_tiny(copy_task_dir, "--encoder-ffn-embed-dim", "96", "--decoder-ffn-embed-dim", "96")
    with pytest.raises(RuntimeError, match=r"size mismatch for .*fc1\.weight"):
        model.load_state_dict(load_checkpoint_file(path)["model"], strict=True)


def test_corrupted_checkpoint_fails_with_a_clear_message(bart_checkpoint, tmp_path):
    path, _ = bart_checkpoint
    data = open(path, "rb").read()
    broken = tmp_path / "broken.pt"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"broken\.pt: not a readable PyTorch checkpoint"):
        load_checkpoint_file(str(broken))
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint_file(str(tmp_path / "absent.pt"))


class NotAFairseqClass:
    pass


class CallsAFunction:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_classes_outside_the_allowlist_are_refused_by_name(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"model": {}, "payload": NotAFairseqClass()}, str(path))
    with pytest.raises(CheckpointError, match=r"refused to unpickle test_model_checkpoints\.NotAFairseqClass"):
        load_checkpoint_file(str(path))


def test_pickled_function_calls_are_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "payload": CallsAFunction()}, str(path))
    with pytest.raises(CheckpointError, match=r"refused to unpickle print"):
        load_checkpoint_file(str(path))


def test_weights_only_safety_stays_on_globally(tmp_path):
    """Importing the plugin allows fairseq's classes only: torch.load with its defaults
    still refuses anything else."""
    path = tmp_path / "plain.pt"
    torch.save({"payload": CallsAFunction()}, str(path))
    with pytest.raises(pickle.UnpicklingError):
        torch.load(str(path))


def test_namespace_is_allowed_because_fairseq_checkpoints_hold_their_args(tmp_path):
    path = tmp_path / "args.pt"
    torch.save({"model": {}, "args": argparse.Namespace(arch="bart_large")}, str(path))
    assert load_checkpoint_file(str(path))["args"].arch == "bart_large"
