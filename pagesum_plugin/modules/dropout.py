"""Dropout that keeps a one-byte mask for backward on every device.

fairseq's dropout is ``F.dropout``. On CUDA that runs torch's fused kernel, which keeps a bool
mask for backward. On CPU it draws the mask in the input's dtype, scales it by 1 / (1 - p) and
keeps it: a tensor as large as its input (4 bytes an element in fp32) after every attention and
feed-forward of every layer. ``BoolMaskDropout`` does on CPU what ``F.dropout`` does, the same
draws from the same generator and the same arithmetic, so its output and gradient are
fairseq's bit for bit, but keeps the mask as bool (1 byte an element) and scales it again in
backward. On other devices, outside training and at p = 1 it is fairseq's dropout.
"""

import torch
from fairseq.modules import FairseqDropout
from torch import Tensor, nn

from .swap import swap_modules


class BoolMaskDropout(FairseqDropout):
    """fairseq's dropout, keeping a bool mask for backward."""

    def forward(self, x: Tensor, inplace: bool = False) -> Tensor:
        dropping = 0 < self.p < 1 and (self.training or self.apply_during_inference)
        if inplace or not dropping or x.device.type != "cpu" or x.numel() == 0:
            return super().forward(x, inplace)  # CUDA's fused kernel keeps a bool mask already
        return _BoolMaskDropout.apply(x, self.p)


class _BoolMaskDropout(torch.autograd.Function):
    """``F.dropout`` on CPU (its draws and arithmetic), keeping ``noise != 0`` instead of ``noise``."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        noise = torch.empty_like(x).bernoulli_(1 - p)  # as F.dropout draws it
        ctx.p = p
        ctx.save_for_backward(noise.bool())
        return x * noise.div_(1 - p)

    @staticmethod
    def backward(ctx, grad: Tensor):
        (kept,) = ctx.saved_tensors
        return grad * kept.to(grad.dtype).div_(1 - ctx.p), None  # the forward's noise, bit for bit


def keep_bool_masks(model: nn.Module) -> int:
    """Make every ``FairseqDropout`` of ``model`` (exactly that class) a ``BoolMaskDropout`` with
    the same settings. Returns how many were replaced."""
    return swap_modules(model, FairseqDropout, _bool_mask)


def _bool_mask(dropout: FairseqDropout) -> BoolMaskDropout:
    replacement = BoolMaskDropout(dropout.p, module_name=dropout.module_name)
    replacement.apply_during_inference = dropout.apply_during_inference
    return replacement
