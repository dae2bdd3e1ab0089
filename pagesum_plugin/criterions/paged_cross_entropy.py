"""Label-smoothed cross entropy on PageSum's page-mixed distribution, with page-weight metrics,
computed a chunk of summary tokens at a time so that the (tokens, vocabulary) logits of the
whole batch never exist at once (``chunked_loss``)."""

from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple, Union

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor, nn

from ..architectures import LOSS_CHUNK_TOKENS
from ..chunked_loss import chunk_step, chunked_label_smoothed_nll_loss, fp16_logits
from ..errors import SettingError
from ..modules.compiled_layers import compiled


@dataclass
class PagedLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    loss_chunk_tokens: int = field(
        default=LOSS_CHUNK_TOKENS,
        metadata={"help": "project the decoder's features onto the vocabulary and take the loss and its gradients "
                          "this many summary tokens at a time, so that only one chunk's logits exist at once (the "
                          "same loss and gradients); 0: the whole batch's logits at once"},
    )


@register_criterion("paged_label_smoothed_cross_entropy", dataclass=PagedLabelSmoothedCrossEntropyConfig)
class PagedLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """The paper's loss (label smoothing 0.1 in its recipes) plus how focused the mixing is:

    * page_entropy: mean entropy (in bits) of the page weights of a summary token;
    * top_page_weight: mean weight of the most confident page.

    With ``loss_chunk_tokens`` N > 0 (the default) and a model whose logits are its decoder's
    output projection of the features it returns with ``features_only`` (``projects_features``:
    every model of the plugin, and fairseq's BART), the model returns its final (page-mixed)
    features and the criterion projects and scores them N tokens at a time, the gradients
    taken chunk by chunk as it goes (``chunked_loss``): no more than one chunk's logits ever
    exist. Otherwise, for an unreduced loss, and in fp16 (``chunked_loss.fp16_logits``: fp16
    weights or an fp16 autocast; bf16 chunks), it is fairseq's criterion on the full logits.

    ``compile_chunks`` compiles a chunk's arithmetic, as ``--compile-layers`` compiles the
    layers: one graph serves every chunk of every batch.
    """

    def __init__(self, task, sentence_avg, label_smoothing, ignore_prefix_size=0, report_accuracy=False,
                 loss_chunk_tokens=LOSS_CHUNK_TOKENS):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if loss_chunk_tokens < 0:
            raise SettingError(f"--loss-chunk-tokens must be 0 (off) or more, got {loss_chunk_tokens}")
        self.loss_chunk_tokens = loss_chunk_tokens
        self.chunk_step: Optional[Callable] = None  # a chunk's arithmetic compiled, or None: eager

    def compile_chunks(self, backend: Union[str, Callable] = "inductor") -> None:
        """Compile a chunk's arithmetic (``chunked_loss.chunk_step``) with static shapes: the
        projection, the log-softmax, the sums' terms and the logits' gradient, one graph for
        every chunk, the last padded to the same shape; a chunk then launches two operators
        from the host, the compiled call and its share of the weight's gradient, against 16 to
        18 eager (docs/benchmarks/compiled_training.md)."""
        if self.chunk_step is None:
            self.chunk_step = compiled_chunk_step(backend)

    def forward(self, model, sample, reduce=True):
        loss, measured = self.losses(model, sample, reduce)
        sample_size, counted = self.counts(sample)
        return loss, sample_size, {**counted, **measured}

    def losses(self, model, sample, reduce=True) -> Tuple[Tensor, Dict[str, Tensor]]:
        """The loss and the logging output's tensors: what the device computes of a batch, all
        of it a function of the batch's tensors (``training_capture.py`` captures it)."""
        chunked = (reduce and self.loss_chunk_tokens > 0 and projects_features(model)
                   and not fp16_logits(model.decoder.output_projection.weight))
        net_output = model(**sample["net_input"], **({"features_only": True} if chunked else {}))
        accuracy: Optional[Tuple[Tensor, Tensor]] = None
        if chunked:
            loss, nll_loss, accuracy = self.chunked_losses(model, net_output, sample)
        else:
            loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
            if self.report_accuracy:
                accuracy = self.compute_accuracy(model, net_output, sample)
        measured = {"loss": loss.data, "nll_loss": nll_loss.data}
        if net_output[1].get("page_weights") is not None:  # models that mix pages
            measured["page_entropy_sum"], measured["top_page_weight_sum"] = page_weight_sums(
                net_output[1]["page_weights"], sample["target"].ne(self.padding_idx))
        if accuracy is not None:
            measured["n_correct"], measured["total"] = (count.data for count in accuracy)
        return loss, measured

    def counts(self, sample, sentences: Optional[int] = None) -> Tuple[int, Dict[str, int]]:
        """The sample size and the logging output's counts: what the host knows of a batch.
        ``sentences``: the rows that hold a summary, where not every row of the target does
        (AWESOME's captured segments, which documents without the segment pass through); given,
        the sample's target is not read."""
        sentences = sample["target"].size(0) if sentences is None else sentences
        sample_size = sentences if self.sentence_avg else sample["ntokens"]
        return sample_size, {"ntokens": sample["ntokens"], "nsentences": sentences, "sample_size": sample_size}

    def chunked_losses(self, model, net_output, sample) -> Tuple[Tensor, Tensor, Optional[Tuple[Tensor, Tensor]]]:
        """(loss, nll_loss, (n_correct, total) or None) summed over the target, from the
        features in ``net_output`` (batch, tgt_len, dim), ``loss_chunk_tokens`` tokens at a time
        (``chunked_loss``): what ``compute_loss`` and ``compute_accuracy`` give on the logits of
        the whole batch."""
        features, target = net_output[0], model.get_targets(sample, net_output)  # (batch, tgt_len, dim), (batch, tgt_len)
        if self.ignore_prefix_size > 0:
            features, target = features[:, self.ignore_prefix_size:], target[:, self.ignore_prefix_size:]
        projection = model.decoder.output_projection  # (vocab, dim) weight, tied with the embeddings in BART
        loss, nll_loss, n_correct = chunked_label_smoothed_nll_loss(
            features.reshape(-1, features.size(-1)), projection.weight, projection.bias, target.reshape(-1),
            self.eps, self.padding_idx, self.loss_chunk_tokens, count_correct=self.report_accuracy, step=self.chunk_step)
        if not self.report_accuracy:
            return loss, nll_loss, None
        return loss, nll_loss, (n_correct.long(), target.ne(self.padding_idx).sum())

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        positions = sum(log.get("ntokens", 0) for log in logging_outputs)  # non-padding summary tokens
        if positions > 0 and any("page_entropy_sum" in log for log in logging_outputs):
            entropy = sum(log.get("page_entropy_sum", 0.0) for log in logging_outputs)
            top = sum(log.get("top_page_weight_sum", 0.0) for log in logging_outputs)
            metrics.log_scalar("page_entropy", entropy / positions, positions, round=3)
            metrics.log_scalar("top_page_weight", top / positions, positions, round=3)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def compiled_chunk_step(backend: Union[str, Callable] = "inductor") -> Callable:
    """``chunked_loss.chunk_step`` compiled with static shapes: one graph (it has no graph break)
    serves every chunk of the same width, vocabulary and settings. Not ``fullgraph``: where torch
    cannot compile at all (under a Python dispatch mode, as a memory or FLOP counter on the CPU),
    it runs eager, as the compiled layers do."""
    return compiled(chunk_step, dynamic=False, backend=backend)


def projects_features(model) -> bool:
    """Whether ``model(..., features_only=True)`` returns the features whose
    ``model.decoder.output_projection``, a linear layer, gives its logits: fairseq's
    Transformer decoders (every model of this plugin, and BART) without an adaptive softmax."""
    decoder = getattr(model, "decoder", None)
    return (isinstance(decoder, TransformerDecoderBase) and decoder.adaptive_softmax is None
            and isinstance(decoder.output_projection, nn.Linear))


@torch.no_grad()
def page_weight_sums(weights: torch.Tensor, target_mask: torch.Tensor):
    """weights: (batch, max_pages, tgt_len), 0 on missing pages; target_mask: (batch, tgt_len).

    Returns the summed entropy (bits) and top weight over non-padding target positions,
    as tensors, so that logging does not wait for the device at every step."""
    weights = weights.float()
    entropy = -(weights * torch.log2(weights.clamp_min(1e-12))).sum(dim=1)  # (batch, tgt_len)
    top = weights.max(dim=1).values  # (batch, tgt_len)
    mask = target_mask.float()
    return (entropy * mask).sum(), (top * mask).sum()
