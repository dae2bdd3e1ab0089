"""Every dropout keeps a one-byte mask for backward, on CPU as torch's fused kernel does on
CUDA: the same draws, the same output and gradients bit for bit as fairseq's dropout, in fp32
and bf16; outside training it changes nothing; every system's dropouts are replaced (each
system's training step with dropout against the path of before: ``tests/test_fused_attention.py``)."""

import pytest
import torch
from fairseq.modules import FairseqDropout

from builders.systems import EVERY_SYSTEM
from pagesum_plugin.modules.dropout import BoolMaskDropout, keep_bool_masks

pytestmark = pytest.mark.usefixtures("one_thread")


def dropped(dropout, x, seed=0):
    torch.manual_seed(seed)
    return dropout(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_same_draws_give_fairseqs_output_and_gradient_bit_for_bit(dtype):
    x = torch.randn(64, 3, 16, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    expected = dropped(FairseqDropout(0.1), x)
    out = dropped(BoolMaskDropout(0.1), x)
    assert torch.equal(out, expected) and 0 < int(out.eq(0).sum()) < out.numel()
    upstream = torch.randn_like(out)
    assert torch.equal(torch.autograd.grad(out, x, upstream)[0], torch.autograd.grad(expected, x, upstream)[0])


def kept_mask(dropout, x: torch.Tensor) -> torch.Tensor:
    """The input-sized tensor that the dropout's backward keeps."""
    kept = []

    def pack(tensor):
        if tensor.shape == x.shape and tensor is not x:
            kept.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        dropped(dropout, x)
    (mask,) = kept
    return mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_keeps_a_bool_mask_not_one_in_the_inputs_dtype(dtype):
    x = torch.randn(8, 16).to(dtype).requires_grad_()
    assert kept_mask(BoolMaskDropout(0.1), x).dtype == torch.bool
    assert kept_mask(FairseqDropout(0.1), x).dtype == dtype  # on CPU, fairseq's keeps its scaled draws


def test_outside_training_or_at_zero_nothing_is_dropped():
    x = torch.randn(8, 16)
    assert dropped(BoolMaskDropout(0.1).eval(), x) is x
    assert dropped(BoolMaskDropout(0.0), x) is x


def test_kept_at_inference_it_still_draws_as_fairseqs():
    x = torch.randn(8, 16)
    dropout, expected = BoolMaskDropout(0.3).eval(), FairseqDropout(0.3).eval()
    dropout.apply_during_inference = expected.apply_during_inference = True
    assert torch.equal(dropped(dropout, x), dropped(expected, x))


def test_only_fairseqs_dropouts_are_replaced_with_their_settings():
    model = torch.nn.Sequential(FairseqDropout(0.2, module_name="a"), torch.nn.Dropout(0.1))
    assert keep_bool_masks(model) == 1
    assert isinstance(model[0], BoolMaskDropout) and (model[0].p, model[0].module_name) == (0.2, "a")
    assert type(model[1]) is torch.nn.Dropout
    assert keep_bool_masks(model) == 0


@pytest.mark.parametrize("name", sorted(EVERY_SYSTEM))
def test_every_dropout_of_every_system_keeps_a_bool_mask(name, copy_task_dir):
    model = EVERY_SYSTEM[name](copy_task_dir)[2]
    dropouts = [module for module in model.modules() if isinstance(module, FairseqDropout)]
    assert dropouts and all(isinstance(dropout, BoolMaskDropout) for dropout in dropouts), name
