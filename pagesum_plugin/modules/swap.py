"""Swapping a model's modules of one class for equivalents, in place, under the same names."""

from typing import Callable

from torch import nn


def swap_modules(model: nn.Module, cls: type, build: Callable[[nn.Module], nn.Module]) -> int:
    """Replace every sub-module of ``model`` whose class is exactly ``cls`` (not a subclass) by
    ``build(module)``, in the module's training mode. Returns how many were replaced."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is cls:
                setattr(parent, name, build(child).train(child.training))
                replaced += 1
    return replaced
