"""The output projection and label-smoothed NLL of a batch's summary tokens, a chunk of tokens
at a time, so that the (tokens, vocabulary) logits of the whole batch never exist. The plugin's
criterion trains every system with it, and so does ``hf.PageSumForConditionalGeneration`` in
training mode: torch only, no fairseq.

For each chunk of ``chunk_tokens`` token rows (``chunk_sums``), forward projects the features
onto the vocabulary, takes the log-softmax in fp32 and what fairseq's label-smoothed NLL needs
of each row (``smoothed_sums`` adds it up once, after the last chunk), and, when a backward pass
will follow, the loss's gradient with respect to that chunk's logits in closed form, which it
turns at once into the chunk's share of the gradients of the features, the projection's weight
and its bias (``chunk_step``: one chunk's arithmetic, which a caller may compile, one graph for
every chunk). Only one chunk's logits exist at a time; backward multiplies the gradients kept by
the gradient of the loss. A (vocabulary, dim) gradient of the weight is accumulated in place
across chunks.

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

from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable


def label_smoothed_nll_sums(lprobs: Tensor, target: Tensor, epsilon: float, pad: int) -> Tuple[Tensor, Tensor]:
    """(loss, nll_loss) summed over the rows whose target is not ``pad``: fairseq's
    ``label_smoothed_nll_loss`` (the paper's loss), the smoothing mass epsilon spread over the
    vocabulary's other words. lprobs (tokens, vocab), log-probabilities; target (tokens,)."""
    picked = lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (tokens,) each row's log-probability of its target
    return smoothed_sums(picked, lprobs.sum(dim=1), target.ne(pad), epsilon, lprobs.size(-1))


def smoothed_sums(picked: Tensor, total: Tensor, real: Tensor, epsilon: float, vocab: int) -> Tuple[Tensor, Tensor]:
    """``label_smoothed_nll_sums`` from what it needs of each row: the log-probability of its
    target (``picked``), its log-probabilities summed over the vocabulary (``total``) and whether
    it is a real token (``real``), all (tokens,)."""
    nll = -picked.masked_fill(~real, 0.0).sum()
    smooth = -total.masked_fill(~real, 0.0).sum()
    on_target, eps_i = smoothing_weights(epsilon, vocab)
    return on_target * nll + eps_i * smooth, nll


def smoothing_weights(epsilon: float, vocab: int) -> Tuple[float, float]:
    """(the weight of a row's target word, eps_i: that of every word) in its smoothed loss,
    (1 - eps - eps_i)(-lp_t) + eps_i sum_v(-lp_v), with eps_i = eps / (V - 1)."""
    eps_i = epsilon / (vocab - 1)
    return 1.0 - epsilon - eps_i, eps_i


def fp16_logits(weight: Tensor) -> bool:
    """Whether the logits of the output projection ``weight`` would be fp16: fp16 weights or an
    fp16 autocast on CUDA or CPU. The chunked loss takes its gradients before a loss scale is
    known; cast to fp16 unscaled, a probability of 1/50,000 would underflow, so a caller takes
    the whole logits then. bf16, weights or autocast, has fp32's range and takes the chunks."""
    fp16_autocast = any(torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.float16
                        for device in ("cuda", "cpu"))
    return fp16_autocast or weight.dtype == torch.float16


def chunked_label_smoothed_nll_loss(features: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor,
                                    epsilon: float, pad: int, chunk_tokens: int, count_correct: bool = True,
                                    step: Optional[Callable] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """(loss, nll_loss, correct predictions), each summed over the non-padding rows of
    ``target``, of the logits ``F.linear(features, weight, bias)``: what fairseq's
    ``label_smoothed_nll_loss(log_softmax(logits.float()), target, epsilon, pad)`` gives.
    Without ``count_correct`` the correct predictions are not counted (0), saving an arg-max
    over the vocabulary per token. ``step``: ``chunk_step`` compiled (``torch.compile`` of it
    with static shapes), which then sees every chunk at one shape, the last one padded; None:
    ``chunk_step`` as it is.

    features (tokens, dim) in the model's dtype; weight (vocab, dim); bias (vocab,) or None;
    target (tokens,). Only the loss carries a gradient."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (features, weight, bias)):
        return ChunkedLabelSmoothedNLL.apply(features, weight, bias, target, epsilon, pad, chunk_tokens,
                                             count_correct, step)
    sums, _ = chunk_sums(features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct, False, step)
    return tuple(total.clone() for total in sums.unbind())


class ChunkedLabelSmoothedNLL(torch.autograd.Function):
    """``chunked_label_smoothed_nll_loss`` with its gradients computed in forward."""

    @staticmethod
    def forward(ctx, features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct, step):
        sums, ctx.gradients = chunk_sums(features, weight, bias, target, epsilon, pad, chunk_tokens, count_correct,
                                         True, step)
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
        return (*scaled, None, None, None, None, None, None)


def chunk_sums(features: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, epsilon: float, pad: int,
               chunk_tokens: int, count_correct: bool, gradients: bool, step: Optional[Callable] = None):
    """(sums (3,): loss, nll_loss, correct, in fp32; (features, weight, bias) gradients of the
    loss, or None) over ``chunk_tokens`` rows at a time, each chunk's arithmetic in one call of
    ``step`` (``chunk_step`` where None). A compiled ``step`` sees every chunk at one shape: the
    rows are padded to a whole number of chunks, as padding tokens, which add nothing.

    Outside ``step``, a chunk launches one operator more, or two with a bias: its share of the
    weight's gradient, accumulated in place (``chunk_step`` says why); what the sums need of
    every row is concatenated and summed once, after the last chunk."""
    tokens, vocab = target.size(0), weight.size(0)
    if step is None:
        step = chunk_step
    elif tokens % chunk_tokens:  # the last chunk padded to the others' shape
        padding = chunk_tokens - tokens % chunk_tokens
        features, target = F.pad(features, (0, 0, 0, padding)), F.pad(target, (0, padding), value=pad)
    rows = features.to(weight.dtype) if gradients else features  # (tokens, dim): the weight's gradient's dtype
    outputs = []
    grad_weight = torch.zeros_like(weight) if gradients else None
    grad_bias = torch.zeros_like(bias) if gradients and bias is not None else None
    for x, t in zip(rows.split(chunk_tokens), target.split(chunk_tokens)):
        picked, total, hits, grad_x, grad_logits = step(x, weight, bias, t, epsilon, pad, count_correct, gradients)
        outputs.append((picked, total, hits, grad_x))
        if grad_logits is not None:
            grad_weight.addmm_(grad_logits.t(), x)  # (vocab, dim)
            if grad_bias is not None:
                grad_bias += grad_logits.sum(dim=0)
        del grad_logits  # (chunk, vocab): gone before the next chunk's logits exist
    picked, total, hits, grad_x = (None if column[0] is None else torch.cat(column) for column in zip(*outputs))
    real = target.ne(pad)  # (tokens,)
    loss, nll_loss = smoothed_sums(picked, total, real, epsilon, vocab)
    correct = (hits & real).sum() if hits is not None else loss.new_zeros(())
    grads = None
    if gradients:  # the features' gradient in their own dtype, without the padding rows
        grads = (grad_x[:tokens].to(features.dtype), grad_weight, grad_bias)
    return torch.stack([loss, nll_loss, correct.float()]), grads


def chunk_step(x: Tensor, weight: Tensor, bias: Optional[Tensor], target: Tensor, epsilon: float, pad: int,
               count_correct: bool, gradients: bool):
    """One chunk's arithmetic: (picked, total, hits, grad_x, grad_logits). For each row of x
    (chunk, dim) and target (chunk,): its log-probability of its target (``picked``), its
    log-probabilities summed over the vocabulary (``total``), and whether its arg-max is its
    target (``hits``, or None without ``count_correct``), each (chunk,); with ``gradients``,
    the loss's gradient with respect to the chunk's logits (``grad_logits``, (chunk, vocab) in
    the weight's dtype) and to x (``grad_x``, (chunk, dim)); else None.

    The gradient. A row's loss is (1 - eps - eps_i)(-lp_t) + eps_i sum_v(-lp_v)
    (``smoothing_weights``), with lp = log_softmax(z); its gradient is
    p - (1 - eps - eps_i) onehot(t) - eps_i, since the weights of p add up to
    (1 - eps - eps_i) + V eps_i = 1; a padding row's is 0.

    The weight's gradient, grad_logits^T x, is left to the caller: it is accumulated across
    chunks in place, in the weight's dtype (fp32 under a bf16 autocast: autocast leaves an
    in-place product alone, and a bf16 product would need a (vocabulary, dim) temporary to add
    to the fp32 accumulator), which a compiled step could only do through such a temporary."""
    # (chunk, vocab), as fairseq's get_normalized_probs: the log-softmax in fp32
    lprobs = F.log_softmax(F.linear(x, weight, bias).float(), dim=-1)
    targets = target.unsqueeze(1)  # (chunk, 1)
    picked = lprobs.gather(1, targets).squeeze(1)
    total = lprobs.sum(dim=1)
    hits = lprobs.argmax(dim=1).eq(target) if count_correct else None
    if not gradients:
        return picked, total, hits, None, None
    on_target, eps_i = smoothing_weights(epsilon, weight.size(0))
    target_step = lprobs.new_full(targets.shape, -on_target)  # (chunk, 1)
    g = lprobs.exp_().sub_(eps_i).scatter_add_(1, targets, target_step)  # d loss / d logits, written over lprobs
    g = g.masked_fill_(targets.eq(pad), 0.0).to(weight.dtype)  # (chunk, vocab)
    return picked, total, hits, g @ weight, g  # (chunk, dim) in autocast's dtype where it is on
