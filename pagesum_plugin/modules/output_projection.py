"""The projection onto the vocabulary, for the few rows of a decoding step on the CPU.

A decoding step projects one hidden state per hypothesis onto the vocabulary: a handful of
rows (batch x beam) against BART's (50,264 x d) weight, some 150 MB in fp32 at d = 768, read
whole at every step. ``F.linear`` computes ``x @ W.T``, and MKL's matrix product is two to four
times slower that way for a few rows than ``W @ x.T``, the same product with the operands in the
other order (on a 2-core VM at 4 rows: 24–28 ms against 7–14 ms, one or two threads;
docs/benchmarks/fused_decoding.md). At beam 4 and batch 1, that projection was over a third of a
one-page search on the CPU (4.1 of 11.1 s under the profiler, one thread).

``project_onto_vocabulary`` takes the second order on the CPU, without autograd, for at most
``FEW_ROWS`` rows, and ``F.linear`` everywhere else: on CUDA, in training, and for a full pass
over a summary. The logits are the same but for the summation order of each dot product (a few
ulps). ``FewRowProjection``, put before a fairseq decoder class, routes its output layer
through it.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

FEW_ROWS = 16  # on the 2-core VM the other order was faster up to 256 rows at 2 threads, and up to 16 at 1


def project_onto_vocabulary(features: Tensor, weight: Tensor) -> Tensor:
    """``F.linear(features, weight)``: (..., dim) -> (..., vocab), contiguous."""
    rows = features.numel() // features.size(-1)
    if features.device.type != "cpu" or rows > FEW_ROWS or torch.is_grad_enabled():
        return F.linear(features, weight)
    flat = features.reshape(rows, features.size(-1))  # (rows, dim)
    logits = torch.mm(weight, flat.t()).t().contiguous()  # (rows, vocab)
    return logits.view(*features.shape[:-1], weight.size(0))


class FewRowProjection:
    """Put before a fairseq decoder class: its output layer projects a decoding step's few rows
    through ``project_onto_vocabulary``. A decoder with an adaptive softmax, or whose projection
    has a bias, keeps fairseq's."""

    def output_layer(self, features: Tensor) -> Tensor:
        projection = self.output_projection
        if self.adaptive_softmax is None and type(projection) is nn.Linear and projection.bias is None:
            return project_onto_vocabulary(features, projection.weight)
        return super().output_layer(features)
