"""Training with every encoder and decoder layer compiled (``--compile-layers``), and the loss's
chunk: the loss and every gradient of the eager step, for every system; one set of graphs per
stack whatever its depth; at bart.large's depth, at least 5 times fewer operators launched from
the host, with short summaries and long ones, and 100 times fewer that are not views with the
pass captured (``--capture-training``, at bart.large's depth with short summaries). On
the CPU the layers compile through ``aot_eager``: the same graphs inductor compiles on CUDA,
run without generated code."""

import argparse
import logging
from types import SimpleNamespace

import pytest
import torch
from torch._dynamo.utils import counters

from benchmarks.compiled_training import measure
from builders.models import assert_gradients_close, build_tiny, decoder_input
from builders.systems import SUMMARIES, loss_and_grads, pages, trained_system
from pagesum_plugin.criterions import paged_cross_entropy
from pagesum_plugin.modules.compiled_layers import compile_model_layers
from pagesum_plugin.tasks import paged_summarization

pytestmark = pytest.mark.usefixtures("one_thread")


def compiled_against_eager(model, src, prev, target, pad):
    """(eager loss and gradients, compiled loss and gradients) of one training step."""
    model.train()
    expected = loss_and_grads(model, src, prev, target, pad)
    torch._dynamo.reset()
    compile_model_layers(model, "aot_eager")
    return expected, loss_and_grads(model, src, prev, target, pad)


@pytest.mark.parametrize("name", ["pagesum", "hepos", "bart", "hed", "awesome"])
def test_a_compiled_training_step_gives_the_eager_loss_and_every_gradient(name, copy_task_dir):
    task, model, src = trained_system(name, copy_task_dir)
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    (expected_loss, expected_grads), (loss, grads) = compiled_against_eager(model, src, prev, target,
                                                                            task.dictionary.pad())
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-6)
    assert_gradients_close(grads, expected_grads)


def test_with_every_document_slot_laid_out_heds_layers_compile_once_for_every_batch_of_a_shape(copy_task_dir):
    """What a captured HED pass runs (``EverySlotLayout``, ``--capture-training``): no layout
    worked out from the documents' lengths, whose length groups the packed layout's graphs are
    specialised to, so a batch of the same shape with other documents compiles nothing new; no
    graph break, and the packed eager pass's loss and gradients."""
    task, model, src = trained_system("hed", copy_task_dir)
    pad = task.dictionary.pad()
    other = pages(task, (2, 3, 1, 2), seed=3)  # the same shape, other documents' lengths
    assert other.shape == src.shape and not torch.equal(other.ne(pad).sum(2), src.ne(pad).sum(2))
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    model.train()
    expected_loss, expected_grads = loss_and_grads(model, src, prev, target, pad)
    torch._dynamo.reset()
    counters.clear()
    compile_model_layers(model, "aot_eager")
    facts = model.encoder.static_host_facts(src)
    loss, grads = loss_and_grads(model, src, prev, target, pad, host_facts=facts)
    graphs = counters["stats"]["unique_graphs"]
    loss_and_grads(model, other, prev, target, pad, host_facts=facts)
    assert graphs > 0 and counters["stats"]["unique_graphs"] == graphs and dict(counters["graph_break"]) == {}
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-6)
    assert_gradients_close(grads, expected_grads)


def test_in_bf16_the_compiled_step_is_the_eager_one_within_bf16_precision(copy_task_dir):
    task, model, src = trained_system("pagesum", copy_task_dir)
    model.to(torch.bfloat16)
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    (expected_loss, expected_grads), (loss, grads) = compiled_against_eager(model, src, prev, target,
                                                                            task.dictionary.pad())
    torch.testing.assert_close(loss, expected_loss, atol=0, rtol=2e-2)
    assert_gradients_close({k: g.float() for k, g in grads.items()},
                           {k: g.float() for k, g in expected_grads.items()}, rtol=2e-2)


def test_the_floats_a_layer_reads_are_constants_of_its_graphs_not_inputs_made_at_every_call(copy_task_dir):
    """Attention scalings and dropout probabilities: as graph inputs, torch would wrap each in a new
    0-dim tensor at every call of a layer (on torch 2.11, four host operators each)."""
    _, task, model = build_tiny(copy_task_dir, "--dropout", "0.1", "--attention-dropout", "0.1")
    inputs = []

    def recording(graph, example_inputs):
        inputs.extend(example_inputs)
        return graph

    torch._dynamo.reset()
    compile_model_layers(model, recording)
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    loss_and_grads(model.train(), pages(task, (3, 1)), prev, target, task.dictionary.pad())
    assert inputs, "no graph was compiled"
    scalars = [x for x in inputs if isinstance(x, (float, torch.SymFloat)) or (torch.is_tensor(x) and x.dim() == 0)]
    assert scalars == []


def settings(layers, tgt_len=6):
    return argparse.Namespace(system="pagesum", seed=0, batch=2, pages=3, page_len=16, tgt_len=tgt_len, repeats=1,
                              layers=layers)


@pytest.mark.slow  # three steps compiled (about 25 s)
def test_every_stack_shares_one_set_of_graphs_and_at_bart_large_depth_the_host_launches_5x_fewer_operators():
    """With a summary of one loss chunk, and with summaries of 512 tokens (16 chunks of
    ``LOSS_CHUNK_TOKENS``), whose chunks all run one compiled graph; compiled, a layer keeps for
    backward what the eager one keeps."""
    cpu = torch.device("cpu")
    shallow, deep, long = (measure(settings(n, tgt_len), n, cpu, torch.float32, captured=n == 12 and tgt_len == 6)
                           for n, tgt_len in ((2, 6), (12, 6), (12, 512)))
    # forward and backward of an encoder and a decoder layer, and the loss's chunk
    assert shallow["graphs"] == deep["graphs"] == long["graphs"] == 5
    for step in (deep, long):
        assert step["eager ops"] >= 5 * step["compiled ops"]
        assert step["loss error"] < 1e-6 and step["grad error"] < 1e-5
    # captured as CUDA graphs (their stand-in here), outside them only views launch per weight: none a kernel
    assert deep["captured kernels"] < deep["compiled kernels"]
    assert deep["eager ops"] >= 100 * deep["captured kernels"]
    assert deep["captured loss error"] < 1e-6 and deep["captured grad error"] < 1e-5
    for step in (shallow, deep, long):  # the folded feed-forward keeps one ffn-wide tensor, compiled too
        assert step["eager kept"] == step["compiled kept"] == pytest.approx(1.0)


@pytest.mark.parametrize("setting, compiled", [("on", True), ("off", False), ("auto", False)])
def test_compile_layers_compiles_before_the_first_update_where_it_says_so(setting, compiled, copy_task_dir, caplog):
    """auto: on CUDA only; this model is on the CPU."""
    args, task, model = build_tiny(copy_task_dir, "--compile-layers", setting)
    with caplog.at_level(logging.INFO, logger="pagesum_plugin.tasks.paged_summarization"):
        task.begin_epoch(1, model)
    layers = [*model.encoder.layers, *model.decoder.layers]
    assert all((getattr(layer, "_compiled_call_impl", None) is not None) == compiled for layer in layers)
    assert ("layers compiled by torch.compile" in caplog.text) == compiled


@pytest.mark.filterwarnings("ignore:`torch.cuda.amp.autocast")  # fairseq's train_step asks for it by its old name
def test_the_first_compiled_update_compiles_the_loss_chunk_too_and_updates_as_eager(copy_task_dir, monkeypatch):
    """fairseq-train's update, through the task, with ``--compile-layers on``: the criterion's
    chunks compile in the first update (here through ``aot_eager``), with the eager loss."""
    compile_layers, compile_chunk = compile_model_layers, paged_cross_entropy.compiled_chunk_step
    monkeypatch.setattr(paged_summarization, "compile_model_layers", lambda model: compile_layers(model, "aot_eager"))
    monkeypatch.setattr(paged_cross_entropy, "compiled_chunk_step", lambda backend: compile_chunk("aot_eager"))
    args, task, model = build_tiny(copy_task_dir, "--compile-layers", "on", "--loss-chunk-tokens", "3")
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    src = pages(task, (3, 1, 4, 2))
    sample = {"net_input": {"src_tokens": src, "src_lengths": None, "prev_output_tokens": prev}, "target": target,
              "ntokens": int(target.ne(task.dictionary.pad()).sum())}
    optimizer = SimpleNamespace(backward=lambda loss: loss.backward())
    eager = task.build_criterion(args)
    expected, _, _ = task.train_step(sample, model, eager, optimizer, 0)
    torch._dynamo.reset()
    task.begin_epoch(1, model)
    criterion = task.build_criterion(args)
    loss, _, _ = task.train_step(sample, model, criterion, optimizer, 0)
    assert criterion.chunk_step is not None and eager.chunk_step is None
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-6)


def test_compiled_layers_train_as_eager_ones_with_activation_checkpointing_too(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir, "--checkpoint-activations")
    src = pages(task, (3, 1, 4, 2))
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    (expected_loss, expected_grads), (loss, grads) = compiled_against_eager(model, src, prev, target,
                                                                            task.dictionary.pad())
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-6)
    assert_gradients_close(grads, expected_grads)
