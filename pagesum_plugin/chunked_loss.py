"""The output projection and label-smoothed NLL of a batch's summary tokens, a chunk of tokens
at a time, so that the (tokens, vocabulary) logits of the whole batch never exist. The plugin's
criterion trains every system with it, and so does ``hf.PageSumForConditionalGeneration`` in
training mode: torch only, no fairseq.

For each chunk of ``chunk_tokens`` token rows, forward projects the features onto the
vocabulary, takes the log-softmax in fp32 and fairseq's label-smoothed NLL
(``label_smoothed_nll_sums``), and, when
a backward pass will follow, the loss's gradient with respect to that chunk's logits in closed
form (``logit_gradient``), which it turns at once into the chunk's share of the gradients of
the features, the projection's weight and its bias. Only one chunk's logits exist at a time;
backward multiplies the gradients kept by the gradient of the loss. A (vocabulary, dim)
gradient of the weight is accumulated in place across chunks.

Why not activation checkpointing per chunk (recomputing each chunk's logits in backward):
autograd then hands every chunk's own (vocabulary, dim) weight gradient to the weight's
accumulator, where it is summed with the chunks' before; while it is, two of them exist. At
``bart.base`` widths (50,265 x 768) that is 154 MB in fp32, more than a 512-token summary's
logits save (103 MB a tensor), and the step's peak rose (BENCHMARKS.md).

Under a bf16 autocast the projections of forward and of the features' gradient run in bf16, as
autocast runs the model's; the weight's gradient is accumulated in the weight's own dtype (fp32),
its products too: autocast leaves an in-place product alone, and a bf16 product would need a
(vocabulary, dim) temporary to add to the fp32 accumulator.
"""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable


def label_smoothed_nll_sums(lprobs: Tensor, target: Tensor, epsilon: float, pad: int) -> Tuple[Tensor, Tensor]:
    """(loss, nll_loss) summed over the rows whose target is not ``pad``: fairseq's
    ``label_smoothed_nll_loss`` (the paper's loss), the smoothing mass epsilon spread over the
    vocabulary's other words. lprobs (tokens, vocab), log-probabilities; target (tokens,)."""
    real = target.ne(pad)  # (tokens,)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1).masked_fill(~real, 0.0).sum()
    smooth = -lprobs.sum(dim=1).masked_fill(~real, 0.0).sum()
    eps_i = epsilon / (lprobs.size(-1) - 1)
    return (1.0 - epsilon - eps_i) * nll + eps_i * smooth, nll


def fp16_logits(weight: Tensor) -> bool:
    """Whether the logits of the output projection ``weight`` would be fp16: fp16 weights or an
    fp16 autocast on CUDA or CPU. The chunked loss takes its gradients before a loss scale is
    known; cast to fp16 unscaled, a probability of 1/50,000 would underflow, so a caller takes
    the whole logits then. bf16, weights or autocast, has fp32's range and takes the chunks."""
    fp16_autocast = any(torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.float16
                        for device in ("cuda", "cpu"))
    return fp16_autocast or weight.dtype == torch.float16


def chunked_label_smoothed_nll_loss(features: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                                    epsilon: float, pad: int, chunk_tokens: int,
                                    count_correct: bool = True) -> Tuple[Tensor, Tensor, Tensor]:
    """(loss, nll_loss, correct predictions), each summed over the non-padding rows of
    ``target``, of the logits ``F.linear(features, weight, bias)``: what fairseq's
    ``label_smoothed_nll_loss(log_softmax(logits.float()), target, epsilon, pad)`` gives.
    Without ``count_correct`` the correct predictions are not counted (0), saving an arg-max
    over the vocabulary per token.

    features (tokens, dim) in the model's dtype; weight (vocab, dim); bias (vocab,) or None;
    target (tokens,). Only the loss carries a gradient."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (features, weight, bias)):
        return ChunkedLabelSmoothedNLL.apply(features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct)
    sums, _ = chunk_sums(features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct, gradients=False)
    return tuple(total.clone() for total in sums.unbind())


class ChunkedLabelSmoothedNLL(torch.autograd.Function):
    """``chunked_label_smoothed_nll_loss`` with its gradients computed in forward."""

    @staticmethod
    def forward(ctx, features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct):
        sums, ctx.gradients = chunk_sums(features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct,
                                         gradients=True)
        # separate tensors, not views of ``sums``: fairseq's trainer zeroes a dummy batch's loss
        # in place (``loss *= 0``), which autograd refuses on a view returned by a Function
        loss, nll_loss, correct = (total.clone() for total in sums.unbind())
        ctx.mark_non_differentiable(nll_loss, correct)
        return loss, nll_loss, correct

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss, _grad_nll, _grad_correct):
        gradients, ctx.gradients = ctx.gradients, None  # released as soon as they are handed on
        scaled = [None if g is None else g.mul_(grad_loss.to(g.dtype)) for g in gradients]
        return (*scaled, None, None, None, None, None)


def chunk_sums(features: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, epsilon: float, pad: int,
               chunk_tokens: int, count_correct: bool, gradients: bool):
    """(sums (3,): loss, nll_loss, correct, in fp32; (features, weight, bias) gradients of the
    loss, or None) over ``chunk_tokens`` rows at a time."""
    sums = features.new_zeros(3, dtype=torch.float32)
    grads = None
    if gradients:
        grads = (torch.empty_like(features), torch.zeros_like(weight), None if bias is None else torch.zeros_like(bias))
    for start in range(0, target.size(0), chunk_tokens):
        rows = slice(start, start + chunk_tokens)
        x, t = features[rows], target[rows]  # (chunk, dim), (chunk,)
        logits = F.linear(x, weight, bias)  # (chunk, vocab)
        lprobs = F.log_softmax(logits.float(), dim=-1)  # (chunk, vocab), as fairseq's get_normalized_probs
        del logits
        loss, nll_loss = label_smoothed_nll_sums(lprobs, t, epsilon, pad)
        sums[:2] += torch.stack([loss, nll_loss])
        if count_correct:
            sums[2] += (lprobs.argmax(dim=-1).eq(t) & t.ne(pad)).sum()
        if grads is not None:
            g = logit_gradient(lprobs, t, epsilon, pad).to(weight.dtype)  # (chunk, vocab); lprobs reused
            grads[0][rows] = g @ weight  # (chunk, dim), in autocast's dtype where it is on
            grads[1].addmm_(g.t(), x.to(weight.dtype))  # (vocab, dim), in the weight's dtype (see above)
            if bias is not None:
                grads[2] += g.sum(dim=0)
    return sums, grads


def logit_gradient(lprobs: Tensor, target: Tensor, epsilon: float, pad: int) -> Tensor:
    """d loss / d logits of ``label_smoothed_nll_sums``, (chunk, vocab), written over ``lprobs``.

    A row's loss is (1 - eps - eps_i)(-lp_t) + eps_i sum_v(-lp_v), with eps_i = eps / (V - 1)
    and lp = log_softmax(z); its gradient is p - (1 - eps - eps_i) onehot(t) - eps_i, since the
    weights of p add up to (1 - eps - eps_i) + V eps_i = 1; a padding row's is 0."""
    eps_i = epsilon / (lprobs.size(-1) - 1)
    g = lprobs.exp_().sub_(eps_i)  # (chunk, vocab)
    g.scatter_add_(1, target.unsqueeze(1), g.new_full((target.size(0), 1), -(1.0 - epsilon - eps_i)))
    return g.masked_fill_(target.eq(pad).unsqueeze(1), 0.0)
