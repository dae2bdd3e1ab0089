"""Every layer's feed-forward keeps one ffn-wide tensor for backward, not two: its activation
moves into ``fc2`` and is computed again in backward. Outputs and every gradient equal fairseq's
feed-forward, in fp32 and in bf16 bit for bit; every system's layers are folded, with activation
checkpointing too, and keep their parameter names (each system's whole training step against the
path of before: ``tests/test_fused_attention.py``); a layer where folding would not be exact is
left as it is."""

import argparse

import pytest
import torch
from fairseq import utils
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase
from torch import nn

from builders.models import build_tiny
from builders.systems import EVERY_SYSTEM
from pagesum_plugin.modules.feed_forward import ActivationLinear, fold_activation

pytestmark = pytest.mark.usefixtures("one_thread")

BUILDERS = {**EVERY_SYSTEM, "pagesum, checkpointing": lambda d: build_tiny(d, "--checkpoint-activations")}


def stock_feed_forward(fc1: nn.Linear, fc2: nn.Linear, activation: str, x: torch.Tensor) -> torch.Tensor:
    """fairseq's feed-forward without dropout: fc2(act(fc1(x)))."""
    return fc2(utils.get_activation_fn(activation)(fc1(x)))


def twin_linears(dtype, activation="gelu", seed=0):
    torch.manual_seed(seed)
    fc1, fc2 = nn.Linear(8, 32).to(dtype), nn.Linear(32, 8).to(dtype)
    folded = ActivationLinear(32, 8, activation).to(dtype)
    folded.load_state_dict(fc2.state_dict())
    return fc1, fc2, folded


@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 0.0)])
def test_the_folded_activation_gives_fairseqs_output_and_gradients(dtype, tolerance, activation):
    fc1, fc2, folded = twin_linears(dtype, activation)
    x = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    expected = stock_feed_forward(fc1, fc2, activation, x)
    out = folded(fc1(x))
    torch.testing.assert_close(out, expected, atol=tolerance, rtol=tolerance)
    upstream = torch.randn_like(out)
    expected_grads = torch.autograd.grad(expected, [x, fc1.weight, fc2.weight, fc2.bias], upstream)
    grads = torch.autograd.grad(out, [x, fc1.weight, folded.weight, folded.bias], upstream)
    for grad, expected_grad in zip(grads, expected_grads):
        assert grad.dtype == expected_grad.dtype
        torch.testing.assert_close(grad, expected_grad, atol=tolerance, rtol=tolerance)


def kept_ffn_bytes(run) -> int:
    """Bytes of the ffn-wide (32) tensors that autograd keeps for backward while ``run()`` builds
    its graph, each storage counted once."""
    kept = {}

    def pack(tensor):
        if tensor.size(-1) == 32 and not isinstance(tensor, nn.Parameter) and tensor.numel() == 5 * 3 * 32:
            kept[tensor.untyped_storage().data_ptr()] = tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sum(kept.values())


@pytest.mark.parametrize("dtype, saved", [(torch.float32, 2), (torch.bfloat16, 3)])
def test_backward_keeps_one_ffn_wide_tensor_instead_of_two(dtype, saved):
    """fp32: fc1's output and the activation's, against fc1's alone (half the bytes). bf16:
    fairseq's gelu keeps an fp32 copy of its input, so 4 + 2 bytes an element against 2."""
    fc1, fc2, folded = twin_linears(dtype)
    x = torch.randn(5, 3, 8).to(dtype).requires_grad_()
    element = torch.finfo(dtype).bits // 8
    assert kept_ffn_bytes(lambda: folded(fc1(x))) == 5 * 3 * 32 * element
    assert kept_ffn_bytes(lambda: stock_feed_forward(fc1, fc2, "gelu", x)) == saved * 5 * 3 * 32 * element


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 0.0)])
def test_compiled_the_folded_layer_still_keeps_one_ffn_wide_tensor_and_gives_the_eager_gradients(dtype, tolerance):
    """Inside a compiled layer (``--compile-layers``), torch's partitioner would keep the
    activation's output as well, since fc2's weight gradient must materialise it: the fifth GPU
    visit's compiled training step held 30 % more than the eager one. There the folded fc2 is a
    checkpointed region, which keeps only its input."""
    fc1, _, folded = twin_linears(dtype)
    x = torch.randn(5, 3, 8, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    compiled = torch.compile(lambda x: folded(fc1(x)), backend="aot_eager", fullgraph=True)
    compiled(x)  # compiles, outside the counting hooks
    assert kept_ffn_bytes(lambda: compiled(x)) == 5 * 3 * 32 * (torch.finfo(dtype).bits // 8)
    out, expected = compiled(x), folded(fc1(x))
    torch.testing.assert_close(out, expected, atol=tolerance, rtol=tolerance)
    upstream = torch.randn_like(out)
    parameters = [x, fc1.weight, folded.weight, folded.bias]
    for grad, expected_grad in zip(torch.autograd.grad(out, parameters, upstream),
                                   torch.autograd.grad(expected, parameters, upstream)):
        torch.testing.assert_close(grad, expected_grad, atol=tolerance, rtol=tolerance)


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def system(request, copy_task_dir):
    return request.param, BUILDERS[request.param](copy_task_dir)[2]


def test_every_layer_of_every_system_is_folded_and_keeps_its_parameter_names(system):
    name, model = system
    layers = [*model.encoder.layers, *model.decoder.layers]
    assert all(isinstance(layer.fc2, ActivationLinear) for layer in layers), name
    assert all(key.endswith(("fc2.weight", "fc2.bias")) for key in model.state_dict() if ".fc2." in key)


def test_a_layer_with_activation_dropout_is_not_folded():
    cfg = TransformerConfig.from_namespace(argparse_namespace(activation_dropout=0.1))
    layer = TransformerEncoderLayerBase(cfg)
    assert not fold_activation(layer, "gelu")
    assert type(layer.fc2) is nn.Linear


def test_an_unknown_activation_is_not_folded():
    layer = TransformerEncoderLayerBase(TransformerConfig.from_namespace(argparse_namespace()))
    assert not fold_activation(layer, "tanh")  # its gradient would need its output
    assert fold_activation(layer, "gelu") and isinstance(layer.fc2, ActivationLinear)


def argparse_namespace(**overrides):
    values = dict(encoder_embed_dim=8, encoder_ffn_embed_dim=32, encoder_attention_heads=2, dropout=0.0,
                  attention_dropout=0.0, activation_dropout=0.0, activation_fn="gelu")
    values.update(overrides)
    return argparse.Namespace(**values)
