"""A training pass captured as CUDA graphs (``--capture-training``, ``training_capture.py``), as far
as the CPU can show it: given its encoder's host facts, a pass of every capturable system reads
nothing back from the device, which a capture requires, and gives the criterion's loss, logging
output and gradients; the step keeps the graphs of its last shapes and accumulates micro-batches
although each replay writes over the same gradient buffers (a stand-in for the graphs that does to
memory what their replays do: ``benchmarks/graph_standin.py``); what cannot be captured trains eager and
says why in one line. tests/test_cuda.py runs the real graphs against eager on CUDA."""

import collections
import logging

import pytest
import torch

from benchmarks.common import criterion_and_sample
from benchmarks.graph_standin import static_buffers
from builders.awesome import build_awesome, segment_sample
from builders.models import assert_gradients_close, build_tiny, decoder_input
from builders.systems import SUMMARIES, pages, trained_system
from pagesum_plugin import training_capture
from pagesum_plugin.training_capture import CapturedTraining, LossOfShape, batch_tensors, refusal
from pagesum_recipes.profiling import HostSyncs

pytestmark = pytest.mark.usefixtures("one_thread")

CAPTURABLE = ["pagesum", "bart", "hepos", "hepos-sinkhorn-full"]
CHUNK_TOKENS = 3  # the loss a few summary tokens at a time, as the recipes take it: several chunks


class Backward:
    """What the training step needs of fairseq's optimizer wrapper."""

    @staticmethod
    def backward(loss):
        loss.backward()


def training_batch(name, copy_task_dir, summaries=SUMMARIES):
    """(model in training mode, criterion, sample) of ``builders.systems.TRAINED_SYSTEMS[name]``."""
    task, model, src = trained_system(name, copy_task_dir)
    target, prev = decoder_input(summaries, task.dictionary)
    criterion, sample = criterion_and_sample(task, src, target, prev, CHUNK_TOKENS)
    return model.train(), criterion, sample


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def eager_step(model, criterion, sample):
    """(loss, logging output, gradients) of the criterion's own pass, the step's seed fixed."""
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    loss, _, logging_output = criterion(model, sample)
    loss.backward()
    return loss.detach(), logging_output, gradients(model)


@pytest.mark.parametrize("name", CAPTURABLE)
def test_given_its_host_facts_a_training_pass_reads_nothing_back_from_the_device(name, copy_task_dir):
    model, criterion, sample = training_batch(name, copy_task_dir)
    with HostSyncs() as eager:
        eager_step(model, criterion, sample)
    assert eager.seen, "the eager pass reads its host facts back: the test would show nothing"
    module = LossOfShape(model, criterion, sample, model.encoder.host_facts(sample["net_input"]["src_tokens"]))
    with HostSyncs() as captured:
        loss, _ = module(*batch_tensors(sample))
        loss.backward()
    assert captured.seen == []


@pytest.mark.parametrize("name", CAPTURABLE)
def test_the_pass_of_a_shape_gives_the_criterions_loss_logging_tensors_and_every_gradient(name, copy_task_dir):
    model, criterion, sample = training_batch(name, copy_task_dir)
    expected_loss, expected_log, expected_grads = eager_step(model, criterion, sample)
    module = LossOfShape(model, criterion, sample, model.encoder.host_facts(sample["net_input"]["src_tokens"]))
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    loss, measured = module(*batch_tensors(sample))
    loss.backward()
    assert torch.equal(loss, expected_loss)
    tensors = {key: value for key, value in expected_log.items() if torch.is_tensor(value)}
    assert measured.keys() == tensors.keys()
    for key, value in tensors.items():
        assert torch.equal(measured[key], value), key
    assert_gradients_close(gradients(model), expected_grads, rtol=0)


def test_the_step_gives_fairseqs_logging_output_with_the_hosts_counts(copy_task_dir):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    _, expected_log, expected_grads = eager_step(model, criterion, sample)
    step = CapturedTraining(criterion, capture=static_buffers, device="cpu")
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    _, sample_size, logging_output = step.train_step(model, sample, Backward)
    assert sample_size == sample["ntokens"]
    assert logging_output.keys() == expected_log.keys()
    assert not any(torch.is_tensor(value) and value.requires_grad for value in logging_output.values())
    for key, value in expected_log.items():
        assert logging_output[key] == value if not torch.is_tensor(value) else torch.equal(logging_output[key], value)
    assert_gradients_close(gradients(model), expected_grads, rtol=0)


def test_micro_batches_accumulate_each_ones_gradients_though_every_replay_writes_the_same_buffers(copy_task_dir):
    """With --update-freq 2 the second batch of the shape replays the graphs whose gradient buffers
    autograd kept as the first one's gradients: without setting them aside, the update would get
    twice the second's."""
    model, criterion, first = training_batch("pagesum", copy_task_dir)
    _, _, second = training_batch("pagesum", copy_task_dir, [[t + 20 for t in summary] for summary in SUMMARIES])
    _, _, grads_first = eager_step(model, criterion, first)
    _, _, grads_second = eager_step(model, criterion, second)
    step = CapturedTraining(criterion, capture=static_buffers, device="cpu")
    model.zero_grad(set_to_none=True)
    for sample in (first, second):
        torch.manual_seed(0)
        step.train_step(model, sample, Backward)
    expected = {name: grads_first[name] + grads_second[name] for name in grads_first}
    assert_gradients_close(gradients(model), expected, rtol=1e-5)


def test_a_shape_is_captured_once_and_the_last_kept_shapes_are_kept(copy_task_dir, monkeypatch, caplog):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    captures = collections.Counter()

    def counted(module, tensors):
        captures[tuple(tensors[-1].shape), module.host_facts] += 1
        return static_buffers(module, tensors)

    step = CapturedTraining(criterion, kept=2, capture=counted, device="cpu")
    other_pages = dict(sample, net_input=dict(sample["net_input"], src_tokens=pages(criterion.task, (2, 2, 4, 1))))
    prev = sample["net_input"]["prev_output_tokens"]
    shorter = dict(sample, target=sample["target"][:, :3],
                   net_input=dict(sample["net_input"], prev_output_tokens=prev[:, :3]))
    with caplog.at_level(logging.INFO, logger=training_capture.__name__):
        for batch in (sample, sample, other_pages, sample, other_pages):
            model.zero_grad(set_to_none=True)
            step.train_step(model, batch, Backward)
        assert sum(captures.values()) == 2  # the same pages in other counts are another shape: their host facts
        assert "more than 2 shapes" not in caplog.text
        step.train_step(model, shorter, Backward)  # a third shape: the oldest, `sample`'s, goes
        step.train_step(model, sample, Backward)
    assert sum(captures.values()) == 4
    assert len(step.shapes) == 2
    assert caplog.text.count("batches of more than 2 shapes") == 1
    assert caplog.text.count("--capture-training: captured the pass of a batch of shape") == 4


@pytest.mark.parametrize("name, reason", [
    ("hed", "HEDEncoder reads the device during its pass"),
    ("awesome", "AwesomeEncoder reads the device during its pass"),
    ("pagesum-global", "global decoding joins each example's pages by their lengths, read from the device"),
])
def test_a_system_whose_pass_reads_the_device_trains_eager_and_says_why_once(name, reason, copy_task_dir, caplog):
    task, model, src = trained_system(name, copy_task_dir)
    criterion, sample = criterion_and_sample(task, src, *decoder_input(SUMMARIES, task.dictionary), CHUNK_TOKENS)
    if name == "awesome":
        sample["net_input"]["src_tokens"] = src
    expected_loss, _, expected_grads = eager_step(model.train(), criterion, sample)
    step = CapturedTraining(criterion, capture=pytest.fail, device="cpu")
    with caplog.at_level(logging.WARNING, logger=training_capture.__name__):
        for _ in range(2):
            torch.manual_seed(0)
            model.zero_grad(set_to_none=True)
            loss, _, _ = step.train_step(model, sample, Backward)
    said = [r.getMessage() for r in caplog.records if r.name == training_capture.__name__]
    assert said == [f"--capture-training: this batch trains eager: {reason}"]
    torch.testing.assert_close(loss.detach(), expected_loss, rtol=0, atol=0)
    assert_gradients_close(gradients(model), expected_grads, rtol=0)


def test_awesomes_task_trains_segment_by_segment_eager_and_says_why_once(copy_task_dir, caplog):
    args, task, model = build_awesome(copy_task_dir, "--capture-training")
    low = task.dictionary.nspecial
    sample = segment_sample([[[low + 1, low + 2, low + 3], [low + 4, low + 5]]], [[[low + 6], [low + 7, low + 8]]],
                            task.dictionary)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            task.train_step(sample, model, task.build_criterion(args), Backward, update_num=0)
    said = [r.getMessage() for r in caplog.records if "--capture-training" in r.getMessage()]
    assert said == ["--capture-training: AWESOME trains eager, segment by segment: AwesomeEncoder reads the device "
                    "during its pass"]


def test_what_else_keeps_a_batch_from_being_captured_is_named(copy_task_dir):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    assert refusal(model, criterion, sample, "cpu") is None
    assert refusal(model, criterion, sample) == "the batch is not on CUDA"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert refusal(model, criterion, sample, "cpu") is None  # only a CUDA autocast concerns a CUDA capture
    _, _, checkpointed = build_tiny(criterion.task.cfg.data, "--checkpoint-activations")
    assert "--checkpoint-activations" in refusal(checkpointed, criterion, sample, "cpu")
    assert "the criterion" in refusal(model, object(), sample, "cpu")


def test_the_task_trains_eager_on_the_cpu_when_asked_to_capture_and_says_so(copy_task_dir, caplog):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    task = criterion.task
    expected_loss, _, expected_grads = eager_step(model, criterion, sample)
    task.cfg.capture_training = True
    try:
        with caplog.at_level(logging.WARNING, logger=training_capture.__name__):
            torch.manual_seed(0)
            model.zero_grad(set_to_none=True)
            loss, _, _ = task.train_step(sample, model, criterion, Backward, update_num=0)
    finally:
        task.cfg.capture_training = False
    assert "--capture-training: this batch trains eager: the batch is not on CUDA" in caplog.text
    assert torch.equal(loss.detach(), expected_loss)
    assert_gradients_close(gradients(model), expected_grads, rtol=0)
