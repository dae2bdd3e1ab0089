"""AWESOME's training step with its segments' passes captured as CUDA graphs (``--capture-training``,
``systems/awesome/captured_segments.py``), as far as the CPU can show it, through the stand-in for
the graphs (``benchmarks/graph_standin.py``). Every segment's pass reads nothing back from the
device. The step gives the eager step's loss, logging output and gradients, with documents that end
at different segments and segments padded wider than they are. Each of the three passes is
captured once per batch shape. What cannot be captured trains eager and says why in one line.
tests/test_cuda.py replays the real graphs against eager."""

import collections
import logging

import pytest
import torch
import torch.nn.functional as F

from benchmarks.common import Backward
from benchmarks.graph_standin import capture_options, static_buffers
from builders.awesome import (MEMORY_OPTIONS, build_awesome, ended_apart, first_segments, randomize_memories,
                              segment_criterion)
from builders.models import assert_gradients_close
from pagesum_plugin import training_capture
from pagesum_plugin.systems.awesome.captured_segments import PASSES, CapturedSegments
from pagesum_recipes.profiling import HostSyncs

pytestmark = pytest.mark.usefixtures("one_thread")


def awesome_training(data_dir, *extra_args):
    """(task, model in training mode, the plugin's criterion, its loss 3 summary tokens at a
    time), the memories' reads given random weights so that what they hold matters."""
    _, task, model = build_awesome(data_dir, *extra_args)
    return task, randomize_memories(model).train(), segment_criterion(task)


def padded(sample, pad: int, source: int, summary: int):
    """The batch with its segments ``source`` and its summaries ``summary`` tokens wider, as the
    task pads training batches to the split's longest segment under --capture-training."""
    wider = {key: F.pad(sample[key], (0, summary), value=pad)
             for key in ("segment_target", "segment_prev_output_tokens")}
    src = F.pad(sample["net_input"]["src_tokens"], (0, source), value=pad)
    return {**sample, **wider, "net_input": {**sample["net_input"], "src_tokens": src}}


def gradients(model):
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def eager_step(task, model, criterion, sample):
    """(loss, sample size, logging output, gradients) of the task's own step, segment by segment."""
    model.zero_grad(set_to_none=True)
    loss, sample_size, logging_output = task.train_segments(sample, model, criterion, Backward, ignore_grad=False)
    return loss, sample_size, logging_output, gradients(model)


def captured_step(step, model, sample):
    model.zero_grad(set_to_none=True)
    loss, sample_size, logging_output = step.train_step(model, sample, Backward)
    return loss, sample_size, logging_output, gradients(model)


def stand_in(task, criterion, capture=static_buffers):
    """``CapturedSegments`` on the CPU, the graphs replaced by ``capture`` (``static_buffers``)."""
    return CapturedSegments(criterion, eager=task.train_segments,
                            **{**capture_options(torch.device("cpu")), "capture": capture})


@pytest.mark.parametrize("memory", list(MEMORY_OPTIONS))
def test_every_segments_pass_reads_nothing_back_from_the_device(memory, copy_task_dir):
    task, model, criterion = awesome_training(copy_task_dir, *MEMORY_OPTIONS[memory])
    sample = ended_apart(task.dictionary)
    with HostSyncs() as eager:
        eager_step(task, model, criterion, sample)
    assert eager.seen, "the eager step reads its segments' facts back: the test would show nothing"
    checked = []

    def check_then_capture(module, tensors, pool):
        with HostSyncs() as syncs:
            loss, *_ = module(*tensors)
            loss.backward()
        checked.append((PASSES[module.position], syncs.seen))
        return static_buffers(module, tensors, pool)

    captured_step(stand_in(task, criterion, check_then_capture), model, sample)
    assert checked == [(name, []) for name in PASSES]


@pytest.mark.parametrize("memory", list(MEMORY_OPTIONS))
@pytest.mark.parametrize("wider", [(0, 0), (3, 2)], ids=["as-collated", "padded-wider"])
def test_the_captured_step_gives_the_eager_steps_loss_logging_output_and_gradients(wider, memory, copy_task_dir):
    """Segments 0 and 1 run three documents, 2 and 3 one: the others run empty segments that add
    nothing. The gradients of four segments accumulate, though the later segments' pass replays
    into the same gradient buffers twice."""
    task, model, criterion = awesome_training(copy_task_dir, *MEMORY_OPTIONS[memory])
    sample = ended_apart(task.dictionary)
    expected_loss, expected_size, expected_log, expected_grads = eager_step(task, model, criterion, sample)
    loss, sample_size, logging_output, grads = captured_step(
        stand_in(task, criterion), model, padded(sample, task.dictionary.pad(), *wider))
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=0)
    assert sample_size == expected_size == sample["ntokens"]
    assert logging_output.keys() == expected_log.keys()
    assert (logging_output["nsegments"], logging_output["ndocuments"]) == (7, 3)
    for key, value in expected_log.items():
        if torch.is_tensor(value):
            assert not logging_output[key].requires_grad
            torch.testing.assert_close(logging_output[key], value, rtol=1e-5, atol=1e-5, msg=key)
        else:
            assert logging_output[key] == value, key
    if memory == "attentive":
        assert any(".memory.initial" in name for name in grads), "the first two segments train M^0"
    else:
        assert any(".memory.compress." in name and g.abs().sum() > 0 for name, g in grads.items()), \
            "states pushed out of the memory and compressed"
    assert_gradients_close(grads, expected_grads, rtol=1e-5)


def test_each_segments_pass_is_captured_once_per_batch_shape_all_in_one_memory_pool_and_micro_batches_accumulate(
        copy_task_dir, caplog):
    task, model, criterion = awesome_training(copy_task_dir)
    first, other = ended_apart(task.dictionary), ended_apart(task.dictionary, shift=10)
    two_segments = first_segments(first, 2)
    expected = [eager_step(task, model, criterion, sample)[3] for sample in (first, other)]
    captures, pools = collections.Counter(), set()

    def counted(module, tensors, pool):
        captures[PASSES[module.position]] += 1
        pools.add(pool)
        return static_buffers(module, tensors, pool)

    step = stand_in(task, criterion, counted)
    with caplog.at_level(logging.INFO, logger=training_capture.__name__):
        model.zero_grad(set_to_none=True)
        for sample in (first, other):  # one update of two micro-batches (--update-freq 2)
            step.train_step(model, sample, Backward)
        assert_gradients_close(gradients(model), {name: expected[0][name] + expected[1][name] for name in expected[0]},
                               rtol=1e-5)
        step.train_step(model, two_segments, Backward)
    assert captures == {name: 1 for name in PASSES}
    assert pools == {step.pool}, "the three passes in one memory pool: a step holds one segment's activations"
    assert caplog.text.count("--capture-training: captured the first segment of a batch of shape source (3, 7), "
                             "summary (3, 5)") == 1
    assert "more than" not in caplog.text


@pytest.mark.parametrize("options, reason", [
    (["--memory-grad-segments", "2"], "--memory-grad-segments 2: a segment's window of writes grows"),
    (["--memory-grad-segments", "0"], "--memory-grad-segments 0: a segment's window of writes grows"),
])
def test_a_model_whose_segments_cannot_be_captured_trains_eager_and_says_why_once(options, reason, copy_task_dir,
                                                                                 caplog):
    task, model, criterion = awesome_training(copy_task_dir, *options)
    sample = ended_apart(task.dictionary)
    expected_loss, _, _, expected_grads = eager_step(task, model, criterion, sample)
    step = stand_in(task, criterion, capture=pytest.fail)
    with caplog.at_level(logging.WARNING, logger=training_capture.__name__):
        for _ in range(2):
            loss, _, _, grads = captured_step(step, model, sample)
    said = [r.getMessage() for r in caplog.records if r.name == training_capture.__name__]
    assert len(said) == 1 and said[0].startswith(f"--capture-training: this batch trains eager: {reason}")
    assert torch.equal(loss, expected_loss)
    assert_gradients_close(grads, expected_grads, rtol=0)


@pytest.mark.parametrize("options, captured", [([], True), (["--memory-grad-segments", "0"], False),
                                                (["--memory", "compressive"], True), (["--memory", "none"], True)])
def test_every_memory_with_a_window_of_one_write_is_captured(options, captured, copy_task_dir):
    """The plugin's defaults, and the paper's."""
    _, _, model = build_awesome(copy_task_dir, *options)
    assert (model.training_capture_refusal() is None) == captured


def test_the_task_trains_eager_on_the_cpu_when_asked_to_capture_and_says_so(copy_task_dir, caplog):
    _, task, model = build_awesome(copy_task_dir, "--capture-training")
    criterion = segment_criterion(task)
    sample = ended_apart(task.dictionary)
    model.train()
    expected_loss, _, _, expected_grads = eager_step(task, model, criterion, sample)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            loss, _, _ = task.train_step(sample, model, criterion, Backward, update_num=0)
    said = [r.getMessage() for r in caplog.records if "--capture-training" in r.getMessage()]
    assert said == ["--capture-training: this batch trains eager: the batch is not on CUDA"]
    assert torch.equal(loss, expected_loss)
    assert_gradients_close(gradients(model), expected_grads, rtol=0)
