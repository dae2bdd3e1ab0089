"""fairseq-train end to end through the command line, on the synthetic copy task."""

import os
import re

import pytest
import torch
from fairseq import checkpoint_utils

from builders.models import bart_twin, build_tiny, save_bart_checkpoint
from builders.cli import TRAIN_FLAGS, run_cli
from builders.paged_data import make_dictionary, write_corpus
from pagesum_plugin.checkpoints.safety import load_checkpoint_file

pytestmark = pytest.mark.slow  # end-to-end runs of fairseq-train and fairseq-generate


def valid_losses(log: str):
    return [float(x) for x in re.findall(r"valid on 'valid' subset \| loss ([\d.]+)", log)]


def test_validation_loss_falls_clearly(trained_run):
    _, log = trained_run
    losses = valid_losses(log)
    assert len(losses) >= 5
    assert min(losses) < 0.85 * losses[0], losses
    assert "page_entropy" in log and "top_page_weight" in log


def test_checkpoint_reloads_with_weights_only_loading(trained_run, copy_task_dir):
    save_dir, _ = trained_run
    path = os.path.join(save_dir, "checkpoint_best.pt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": copy_task_dir})
    state = load_checkpoint_file(path)
    for key, value in models[0].state_dict().items():
        assert torch.equal(value, state["model"][key]), key
    assert type(task).__name__ == "PagedSummarizationTask"


def test_resumed_run_continues_where_it_stopped(trained_run, copy_task_dir, tmp_path):
    save_dir, _ = trained_run
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    last = load_checkpoint_file(os.path.join(save_dir, "checkpoint_last.pt"))
    stopped_at = last["optimizer_history"][-1]["num_updates"]
    (resumed_dir / "checkpoint_last.pt").write_bytes(open(os.path.join(save_dir, "checkpoint_last.pt"), "rb").read())

    log = run_cli(
        ["fairseq-train", copy_task_dir, *TRAIN_FLAGS, "--max-update", str(stopped_at + 10), "--save-dir", str(resumed_dir)]
    )
    assert f"@ {stopped_at} updates" in log, "the run must load its own checkpoint_last.pt"
    resumed = load_checkpoint_file(str(resumed_dir / "checkpoint_last.pt"))
    assert resumed["optimizer_history"][-1]["num_updates"] == stopped_at + 10
    assert resumed["extra_state"]["train_iterator"]["epoch"] >= last["extra_state"]["train_iterator"]["epoch"]
    # the optimizer state was restored rather than started afresh
    assert resumed["last_optimizer_state"]["state"][0]["step"] > stopped_at


def test_finetuning_starts_from_a_fairseq_bart_checkpoint(copy_task_dir, tmp_path):
    args, task, model = build_tiny(copy_task_dir)
    bart = bart_twin(args, task, model)
    bart_path = str(tmp_path / "bart" / "model.pt")
    save_bart_checkpoint(bart_path, bart)
    save_dir = str(tmp_path / "run")
    log = run_cli(
        ["fairseq-train", copy_task_dir, *TRAIN_FLAGS, "--lr", "1e-9", "--max-update", "2",
         "--finetune-from-model", bart_path, "--save-dir", save_dir]
    )
    assert "initializing the page confidence layer fresh" in log
    trained = load_checkpoint_file(os.path.join(save_dir, "checkpoint_last.pt"))["model"]
    for key, value in bart.state_dict().items():  # a near-zero learning rate keeps BART's weights
        torch.testing.assert_close(trained[key].float(), value.float(), atol=1e-4, rtol=0)


def test_a_checkpoint_with_a_foreign_class_is_refused_by_fairseq_generate(trained_run, copy_task_dir, tmp_path):
    save_dir, _ = trained_run
    state = load_checkpoint_file(os.path.join(save_dir, "checkpoint_best.pt"))
    state["extra_state"]["note"] = ForeignObject()
    path = str(tmp_path / "tampered.pt")
    torch.save(state, path)
    with pytest.raises(AssertionError, match=r"ForeignObject"):
        run_cli(["fairseq-generate", copy_task_dir, "--user-dir", TRAIN_FLAGS[1], "--task", "paged_summarization",
                 "--path", path, "--gen-subset", "test", "--cpu", "--max-len-b", "5"])


class ForeignObject:
    pass


def test_examples_longer_than_one_page_are_not_filtered_out(tmp_path):
    """fairseq drops examples whose size exceeds the model's positions; a paged example's
    size is its longest page, not its total length."""
    data = tmp_path / "data"
    long_doc = {"pages": [[10 + i % 30] * 60 for i in range(5)], "summary": [11, 12, 13]}  # 5 x 62 tokens
    write_corpus(str(data), {"train": [long_doc] * 4, "valid": [long_doc] * 4}, make_dictionary())
    log = run_cli(["fairseq-train", str(data), *TRAIN_FLAGS, "--max-source-positions", "64",
                   "--max-target-positions", "64", "--max-update", "2", "--save-dir", str(tmp_path / "run")])
    assert "skipped" not in log.lower() or "0 examples" in log.lower()
    assert "num_updates 2" in log
