"""A training pass captured as CUDA graphs (``--capture-training``, ``training_capture.py``), as far
as the CPU can show it: given the facts its encoder would read back, taken from the batch's shape
alone, a pass of every capturable system reads nothing back from the device, which a capture
requires, and gives the criterion's loss, logging output and gradients (PageSum running every page
slot and HED every document slot, padding masked out); the step keeps the graphs of its last shapes
and accumulates micro-batches although each replay writes over the same gradient buffers (a stand-in
for the graphs that does to memory what their replays do: ``benchmarks/graph_standin.py``); what
cannot be captured trains eager and says why in one line (AWESOME's segments:
tests/test_awesome_capture.py). tests/test_cuda.py runs the real graphs against eager on CUDA."""

import collections
import logging

import pytest
import torch
import torch.nn.functional as F
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.amp_optimizer import AMPOptimizer

from benchmarks.common import Backward, criterion_and_sample
from benchmarks.graph_standin import capture_options, static_buffers
from builders.models import assert_gradients_close, build_tiny, decoder_input
from builders.systems import SUMMARIES, pages, trained_system
from pagesum_plugin import training_capture
from pagesum_plugin.data.paged_dataset import PagedSummarizationDataset
from pagesum_plugin.training_capture import CapturedTraining, LossOfShape, batch_tensors, refusal
from pagesum_recipes.profiling import HostSyncs

pytestmark = pytest.mark.usefixtures("one_thread")

CAPTURABLE = ["pagesum", "pagesum-global", "bart", "hepos", "hepos-sinkhorn-full", "hed"]
CHUNK_TOKENS = 3  # the loss a few summary tokens at a time, as the recipes take it: several chunks


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


def stand_in(criterion, **options):
    """``CapturedTraining`` on the CPU, the graphs replaced by ``static_buffers``."""
    return CapturedTraining(criterion, **{**capture_options(torch.device("cpu")), **options})


def loss_of_shape(model, criterion, sample):
    return LossOfShape(model, criterion, sample, model.encoder.static_host_facts(sample["net_input"]["src_tokens"]))


@pytest.mark.parametrize("name", CAPTURABLE)
def test_given_the_facts_of_its_shape_a_training_pass_reads_nothing_back_from_the_device(name, copy_task_dir):
    model, criterion, sample = training_batch(name, copy_task_dir)
    with HostSyncs() as eager:
        eager_step(model, criterion, sample)
    assert eager.seen, "the eager pass reads its facts back: the test would show nothing"
    with HostSyncs() as captured:
        loss, _ = loss_of_shape(model, criterion, sample)(*batch_tensors(sample))
        loss.backward()
    assert captured.seen == []


@pytest.mark.parametrize("name", CAPTURABLE)
def test_the_pass_of_a_shape_gives_the_criterions_loss_logging_tensors_and_every_gradient(name, copy_task_dir):
    """PageSum's batch has padding pages (3, 1, 4 and 2 of 4): every slot runs, padding ones masked."""
    model, criterion, sample = training_batch(name, copy_task_dir)
    expected_loss, expected_log, expected_grads = eager_step(model, criterion, sample)
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    loss, measured = loss_of_shape(model, criterion, sample)(*batch_tensors(sample))
    loss.backward()
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=0)
    tensors = {key: value for key, value in expected_log.items() if torch.is_tensor(value)}
    assert measured.keys() == tensors.keys()
    for key, value in tensors.items():
        torch.testing.assert_close(measured[key], value, rtol=1e-5, atol=1e-5, msg=key)
    assert_gradients_close(gradients(model), expected_grads, rtol=1e-5)


def test_every_slot_encoded_a_padding_page_reads_as_an_empty_page(copy_task_dir):
    """Not as a page of nothing but padding, whose attention would mask every key: an empty page
    ``<s> </s>``, whose states are finite on every attention kernel."""
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    model.eval()
    src = sample["net_input"]["src_tokens"]  # (batch, max_pages, page_len)
    padding = src[:, :, 0].eq(criterion.padding_idx).view(-1)  # (batch * max_pages,)
    states = model.encoder(src, host_facts=model.encoder.static_host_facts(src))["encoder_out"][0]
    dictionary = criterion.task.dictionary
    empty = torch.full((1, 1, src.size(2)), dictionary.pad())
    empty[0, 0, :2] = torch.tensor([dictionary.bos(), dictionary.eos()])
    alone = model.encoder(empty, host_facts=model.encoder.static_host_facts(empty))["encoder_out"][0]  # (len, 1, dim)
    for row in padding.nonzero().view(-1).tolist():
        torch.testing.assert_close(states[:, row], alone[:, 0], rtol=1e-5, atol=1e-6)


def test_a_padding_page_slot_gets_weight_exactly_0_and_the_real_pages_the_packed_pass_weights(copy_task_dir):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    src, prev = sample["net_input"]["src_tokens"], sample["net_input"]["prev_output_tokens"]
    packed = model(src, None, prev)[1]["page_weights"]  # (batch, max_pages, tgt_len)
    every_slot = model(src, None, prev, host_facts=model.encoder.static_host_facts(src))[1]["page_weights"]
    padding = src[:, :, 0].eq(criterion.padding_idx)  # (batch, max_pages)
    assert padding.any() and torch.equal(every_slot[padding], torch.zeros_like(every_slot[padding]))
    torch.testing.assert_close(every_slot, packed, rtol=1e-5, atol=1e-6)


def test_the_step_gives_fairseqs_logging_output_with_the_hosts_counts(copy_task_dir):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    _, expected_log, expected_grads = eager_step(model, criterion, sample)
    step = stand_in(criterion)
    torch.manual_seed(0)
    model.zero_grad(set_to_none=True)
    _, sample_size, logging_output = step.train_step(model, sample, Backward)
    assert sample_size == sample["ntokens"]
    assert logging_output.keys() == expected_log.keys()
    assert not any(torch.is_tensor(value) and value.requires_grad for value in logging_output.values())
    for key, value in expected_log.items():
        if torch.is_tensor(value):
            torch.testing.assert_close(logging_output[key], value, rtol=1e-5, atol=1e-5, msg=key)
        else:
            assert logging_output[key] == value, key
    assert_gradients_close(gradients(model), expected_grads, rtol=1e-5)


def test_micro_batches_accumulate_each_ones_gradients_though_every_replay_writes_the_same_buffers(copy_task_dir):
    """With --update-freq 2 the second batch of the shape replays the graphs whose gradient buffers
    autograd kept as the first one's gradients: without setting them aside, the update would get
    twice the second's."""
    model, criterion, first = training_batch("pagesum", copy_task_dir)
    _, _, second = training_batch("pagesum", copy_task_dir, [[t + 20 for t in summary] for summary in SUMMARIES])
    _, _, grads_first = eager_step(model, criterion, first)
    _, _, grads_second = eager_step(model, criterion, second)
    step = stand_in(criterion)
    model.zero_grad(set_to_none=True)
    for sample in (first, second):
        torch.manual_seed(0)
        step.train_step(model, sample, Backward)
    expected = {name: grads_first[name] + grads_second[name] for name in grads_first}
    assert_gradients_close(gradients(model), expected, rtol=1e-5)


def test_a_shape_is_captured_once_and_the_last_kept_shapes_are_kept_in_one_memory_pool(copy_task_dir, monkeypatch,
                                                                                      caplog):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    captures, pools = collections.Counter(), set()

    def counted(module, tensors, pool):
        captures[tuple(t.shape for t in tensors)] += 1
        pools.add(pool)
        return static_buffers(module, tensors, pool)

    step = stand_in(criterion, kept=2, capture=counted)
    # the same shape with other pages: one capture serves both
    other_pages = dict(sample, net_input=dict(sample["net_input"], src_tokens=pages(criterion.task, (2, 2, 4, 1))))
    assert other_pages["net_input"]["src_tokens"].shape == sample["net_input"]["src_tokens"].shape
    prev = sample["net_input"]["prev_output_tokens"]
    shorter = dict(sample, target=sample["target"][:, :3],
                   net_input=dict(sample["net_input"], prev_output_tokens=prev[:, :3]))
    src = sample["net_input"]["src_tokens"]
    one_more_slot = dict(sample, net_input=dict(sample["net_input"], src_tokens=F.pad(src, (0, 0, 0, 1), value=1)))
    with caplog.at_level(logging.INFO, logger=training_capture.__name__):
        for batch in (sample, sample, other_pages, sample, other_pages, shorter, sample):
            model.zero_grad(set_to_none=True)
            step.train_step(model, batch, Backward)
        assert sum(captures.values()) == 2
        assert "more than 2 shapes" not in caplog.text
        step.train_step(model, one_more_slot, Backward)  # a third shape: the oldest, `shorter`'s, goes
        step.train_step(model, shorter, Backward)
    assert sum(captures.values()) == 4
    assert pools == {step.pool}, "every shape's graphs in one memory pool"
    assert len(step.shapes) == 2
    assert caplog.text.count("batches of more than 2 shapes") == 1
    assert caplog.text.count("--capture-training: captured the pass of a batch of shape") == 4


@pytest.mark.filterwarnings("ignore:`torch.cuda.amp.GradScaler")  # fairseq's --amp wrapper asks for it by its old name
@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled, but CUDA is not available")
def test_what_else_keeps_a_batch_from_being_captured_is_named(copy_task_dir):
    model, criterion, sample = training_batch("pagesum", copy_task_dir)
    assert refusal(model, criterion, sample, "cpu") is None
    assert refusal(model, criterion, sample) == "the batch is not on CUDA"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert refusal(model, criterion, sample, "cpu") is None  # only a CUDA autocast concerns a CUDA capture
    _, _, checkpointed = build_tiny(criterion.task.cfg.data, "--checkpoint-activations")
    assert "--checkpoint-activations" in refusal(checkpointed, criterion, sample, "cpu")
    assert "the criterion" in refusal(model, object(), sample, "cpu")
    args, _, _ = build_tiny(criterion.task.cfg.data, "--amp")
    amp = AMPOptimizer.build_optimizer(convert_namespace_to_omegaconf(args), list(model.parameters()))
    assert refusal(model, criterion, sample, "cpu", amp).startswith("--amp runs the pass under an autocast")


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


def test_with_capture_training_every_training_batch_is_padded_to_the_splits_one_shape(copy_task_dir):
    """The split's most pages, longest page and longest summary, whatever a batch holds; the
    loss is the unpadded batch's. Validation batches keep their own shapes."""
    args, task, model = build_tiny(copy_task_dir, "--capture-training")
    task.load_dataset("train")
    task.load_dataset("valid")
    train, valid = task.datasets["train"], task.datasets["valid"]
    smallest = [int(i) for i in train.example_tokens.argsort()[:4]]  # batches far below the split's limits
    groups = [smallest[:2], smallest[2:], [0, 1], [2, 3]]
    batches = [train.collater([train[i] for i in indices]) for indices in groups]
    shapes = {(tuple(b["net_input"]["src_tokens"].shape), tuple(b["target"].shape),
               tuple(b["net_input"]["prev_output_tokens"].shape)) for b in batches}
    expected = ((2, int(train.page_counts.max()), int(train.longest_page.max())), (2, int(train.tgt_sizes.max())),
                (2, int(train.tgt_sizes.max())))
    assert shapes == {expected}
    unpadded = PagedSummarizationDataset(train.corpus, train.view, train.dictionary, train.max_summary_tokens)
    criterion = task.build_criterion(args)
    for indices, padded in zip(groups[:2], batches):
        alone = unpadded.collater([unpadded[i] for i in indices])
        assert alone["net_input"]["src_tokens"].shape != padded["net_input"]["src_tokens"].shape
        assert alone["target"].shape != padded["target"].shape
        loss, _, _ = criterion(model, padded)
        expected_loss, _, _ = criterion(model, alone)
        torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    assert len({tuple(valid.collater([valid[i]])["target"].shape) for i in range(len(valid))}) > 1


@pytest.mark.parametrize("max_tokens, warned", [(4000, True), (None, False)])
def test_batching_the_padded_split_by_tokens_is_warned_against(max_tokens, warned, copy_task_dir, caplog):
    """Batches by --max-tokens vary in size, and every size is another shape to capture."""
    _, task, _ = build_tiny(copy_task_dir, "--capture-training")
    task.load_dataset("train")
    with caplog.at_level(logging.WARNING):
        task.get_batch_iterator(task.datasets["train"], max_tokens=max_tokens, max_sentences=4)
    assert ("give --batch-size alone" in caplog.text) == warned
