"""No layer norm's output is kept for backward: whatever saves it keeps a handle that computes it
again from the norm's input, which the norm's own backward keeps. Outputs and every gradient
equal the kept output's bit for bit, in fp32 and bf16, through several consumers and views;
a norm whose input changed in place refuses to compute; a forward never followed by backward
(one that ran out of memory) frees its whole graph; inside another saved-tensors hook, and
without gradients, the output is kept as before; every system's layer norms are replaced and
keep their parameter names, and training with activation checkpointing equals the path of
before (each system's whole training step against it: ``tests/test_fused_attention.py``)."""

import contextlib
import gc
import weakref

import pytest
import torch
from torch import nn

from builders.models import assert_gradients_close, build_tiny, decoder_input, paged_batch, random_pages, vocab
from builders.systems import EVERY_SYSTEM, SUMMARIES, trained_system
from benchmarks.reference.modules import reference_attention
from pagesum_plugin.modules.layer_norm import RecomputedLayerNorm, norm_outputs_recomputed, recompute_layer_norms

pytestmark = pytest.mark.usefixtures("one_thread")


def twin_norms(dtype, seed=0):
    """A plain layer norm and a recomputed one with the same parameters, and three consumers."""
    torch.manual_seed(seed)
    plain = nn.LayerNorm(8).to(dtype)
    with torch.no_grad():
        plain.weight.normal_(), plain.bias.normal_()
    recomputed = RecomputedLayerNorm(8).to(dtype)
    recomputed.load_state_dict(plain.state_dict())
    consumers = [nn.Linear(8, 8).to(dtype) for _ in range(3)]
    return plain, recomputed, consumers


def sublayer(norm, consumers, x):
    """x -> norm -> three projections (q, k, v-like, one through a view) and the residual."""
    y = norm(x * 2)  # (len, rows, 8)
    q, k, v = (linear(y) for linear in consumers)
    flat = consumers[0](y.view(-1, 8)).view_as(y)  # a consumer that saves a view of the output
    return y, (q * k).tanh() + v + flat + y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_recomputed_output_gives_the_kept_outputs_result_and_gradients_bit_for_bit(dtype):
    plain, recomputed, consumers = twin_norms(dtype)
    x = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    params = [x, plain.weight, plain.bias, *(p for linear in consumers for p in linear.parameters())]
    _, expected = sublayer(plain, consumers, x)
    upstream = torch.randn_like(expected)
    expected_grads = torch.autograd.grad(expected, params, upstream)
    with norm_outputs_recomputed():
        _, out = sublayer(recomputed, consumers, x)
    grads = torch.autograd.grad(out, [x, recomputed.weight, recomputed.bias, *params[3:]], upstream)
    assert torch.equal(out, expected)
    for grad, expected_grad in zip(grads, expected_grads):
        assert grad.dtype == expected_grad.dtype
        assert torch.equal(grad, expected_grad)


def output_kept(norm, consumers, context) -> bool:
    """Whether anything keeps the norm's output's memory alive once forward is done."""
    x = torch.randn(5, 3, 8, requires_grad=True)
    with context():
        y, out = sublayer(norm, consumers, x)
    output = weakref.ref(y.untyped_storage())  # alive while any tensor holds the memory
    del y
    kept = output() is not None
    out.sum().backward()  # and backward still runs
    return kept


def test_nothing_keeps_the_output_only_its_input():
    plain, recomputed, consumers = twin_norms(torch.float32)
    assert output_kept(plain, consumers, norm_outputs_recomputed)
    assert not output_kept(recomputed, consumers, norm_outputs_recomputed)


def test_a_forward_never_followed_by_backward_frees_its_whole_graph():
    """tanh saves its own output: kept as the hook got it, that output's grad_fn would hold the
    tanh node that holds it, a cycle the collector cannot see."""
    _, recomputed, consumers = twin_norms(torch.float32)
    x = torch.randn(5, 3, 8, requires_grad=True)
    with norm_outputs_recomputed():
        y, out = sublayer(recomputed, consumers, x)
        squashed = out.tanh()
    graph = [weakref.ref(t) for t in (y, out, squashed)]
    del y, out, squashed
    gc.collect()
    assert [ref() for ref in graph] == [None, None, None]


class OutOfMemory(RuntimeError):
    pass


def is_tensor(obj) -> bool:
    """By its type alone: some objects the collector holds warn when their attributes are read."""
    return issubclass(type(obj), torch.Tensor)


@pytest.mark.parametrize("name", ["pagesum", "hepos", "hed", "awesome"])
def test_a_training_forward_stopped_by_an_error_leaves_no_tensor_of_its_graph_alive(name, copy_task_dir):
    """fairseq's trainer skips a batch that ran out of memory and goes on: what that forward
    built must all be freed, or every skipped batch leaks its activations."""
    task, model, src = trained_system(name, copy_task_dir)
    model.train()
    _, prev = decoder_input(SUMMARIES[: len(src)], task.dictionary)

    def stop(module, args):
        raise OutOfMemory("CUDA out of memory (simulated)")

    gc.collect()
    before = {id(t) for t in gc.get_objects() if is_tensor(t)}
    handle = model.decoder.layers[-1].register_forward_pre_hook(stop)
    try:
        with pytest.raises(OutOfMemory):
            model(src, None, prev)
    finally:
        handle.remove()
    gc.collect()
    left = [t for t in gc.get_objects() if is_tensor(t) and id(t) not in before and t.grad_fn is not None]
    assert not left, f"{len(left)} tensors of the stopped forward's graph are still alive"


@contextlib.contextmanager
def inside_another_saved_tensors_hook():
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t), norm_outputs_recomputed():
        yield


def test_without_the_context_or_inside_another_saved_tensors_hook_the_output_is_kept():
    _, recomputed, consumers = twin_norms(torch.float32)
    assert output_kept(recomputed, consumers, torch.enable_grad)  # no norm_outputs_recomputed around it

    assert output_kept(recomputed, consumers, inside_another_saved_tensors_hook)


def test_a_norm_whose_input_changed_in_place_refuses_to_compute_its_output():
    _, recomputed, consumers = twin_norms(torch.float32)
    x = torch.randn(5, 3, 8, requires_grad=True)
    with norm_outputs_recomputed():
        before = x * 2
        y = recomputed(before)
        out = consumers[0](y)
    with torch.no_grad():
        before.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place"):
        out.sum().backward()


def test_without_gradients_nothing_is_recorded():
    _, recomputed, consumers = twin_norms(torch.float32)
    with torch.no_grad(), norm_outputs_recomputed():
        y, out = sublayer(recomputed, consumers, torch.randn(5, 3, 8))
    assert not out.requires_grad and not y.requires_grad


def test_only_plain_layer_norms_are_replaced_under_their_own_names():
    model = nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 8), nn.Sequential(nn.LayerNorm(8, elementwise_affine=False)))
    names = set(model.state_dict())
    assert recompute_layer_norms(model) == 2
    assert isinstance(model[0], RecomputedLayerNorm) and isinstance(model[2][0], RecomputedLayerNorm)
    assert set(model.state_dict()) == names
    assert recompute_layer_norms(model) == 0  # a replaced norm is not replaced again


@pytest.fixture(scope="module", params=sorted(EVERY_SYSTEM))
def system(request, copy_task_dir):
    return request.param, EVERY_SYSTEM[request.param](copy_task_dir)[2]


def test_every_layer_norm_of_every_system_is_recomputed_and_keeps_its_parameter_names(system):
    name, model = system
    norms = [module for module in model.modules() if isinstance(module, nn.LayerNorm)]
    assert norms and all(isinstance(norm, RecomputedLayerNorm) for norm in norms), name
    assert all(key.endswith(("layer_norm.weight", "layer_norm.bias", "layernorm_embedding.weight",
                             "layernorm_embedding.bias", "read_layer_norm.weight", "read_layer_norm.bias"))
               for key in model.state_dict() if "norm" in key), name


def test_training_with_activation_checkpointing_equals_the_path_of_before(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir, "--checkpoint-activations")
    rng = torch.Generator().manual_seed(0)
    low, high = vocab(task.dictionary)
    src = paged_batch([random_pages(rng, n, low, high) for n in (3, 1, 2)], task.dictionary)
    target, prev = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], task.dictionary)

    def loss_and_grads():
        model.zero_grad()
        logits, _ = model(src, None, prev)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target, ignore_index=task.dictionary.pad())
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    model.train()
    loss, grads = loss_and_grads()
    with reference_attention(model):
        expected_loss, expected_grads = loss_and_grads()
    torch.testing.assert_close(loss, expected_loss, atol=1e-6, rtol=1e-6)
    assert_gradients_close(grads, expected_grads, rtol=1e-6)
