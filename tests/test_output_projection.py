"""A decoding step's projection onto the vocabulary (``modules/output_projection.py``): on the CPU, without
autograd, its few rows go through ``weight @ features.T`` and give the linear layer's logits; a pass with autograd,
or over more rows, goes through ``F.linear``. Every system's beam search projects its steps that way."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from builders.systems import SEARCHED_SYSTEMS, build_system
from pagesum_plugin.modules.output_projection import FEW_ROWS, project_onto_vocabulary

VOCAB, DIM = 1000, 32
PRODUCTS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)


class FirstOperands(TorchDispatchMode):
    """The shape of the left operand of every matrix product dispatched while active."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            self.shapes.append(tuple(args[-2].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("rows", [1, 4, FEW_ROWS, FEW_ROWS + 1, 64])
def test_the_logits_are_the_linear_layers_in_the_features_shape_and_contiguous(rows):
    generator = torch.Generator().manual_seed(rows)
    weight, features = torch.randn(VOCAB, DIM, generator=generator), torch.randn(rows, 1, DIM, generator=generator)
    with torch.no_grad():
        logits = project_onto_vocabulary(features, weight)
    assert logits.shape == (rows, 1, VOCAB) and logits.is_contiguous()
    torch.testing.assert_close(logits, F.linear(features, weight), rtol=1e-5, atol=1e-5)


def test_a_few_rows_without_autograd_take_the_weight_first_and_any_other_projection_the_linear_layer():
    weight = torch.randn(VOCAB, DIM)

    def left_operands(rows, autograd):
        with torch.set_grad_enabled(autograd), FirstOperands() as products:
            project_onto_vocabulary(torch.randn(rows, 1, DIM), weight)
        return products.shapes

    assert left_operands(4, autograd=False) == [(VOCAB, DIM)]
    assert left_operands(FEW_ROWS, autograd=False) == [(VOCAB, DIM)]
    assert left_operands(FEW_ROWS + 1, autograd=False) == [(FEW_ROWS + 1, DIM)]
    assert left_operands(4, autograd=True) == [(4, DIM)]


@pytest.mark.parametrize("name", SEARCHED_SYSTEMS)
def test_every_systems_beam_search_projects_its_steps_with_the_weight_first(name, copy_task_dir):
    system = build_system(name, copy_task_dir)
    weight = system.model.decoder.output_projection.weight  # (vocab, dim)
    with torch.no_grad(), FirstOperands() as products:
        system.generator(beam_size=2, max_len_b=4).generate([system.model], system.make_sample((2, 1), seed=0))
    assert tuple(weight.shape) in products.shapes
