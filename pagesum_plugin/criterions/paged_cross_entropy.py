"""Label-smoothed cross entropy on PageSum's page-mixed distribution, with page-weight metrics."""


import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)


@register_criterion("paged_label_smoothed_cross_entropy", dataclass=LabelSmoothedCrossEntropyCriterionConfig)
class PagedLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """The paper's loss (label smoothing 0.1 in its recipes) plus how focused the mixing is:

    * page_entropy: mean entropy (in bits) of the page weights of a summary token;
    * top_page_weight: mean weight of the most confident page.
    """

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        loss, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if net_output[1].get("page_weights") is not None:  # models that mix pages
            entropy_sum, top_weight_sum = page_weight_sums(
                net_output[1]["page_weights"], sample["target"].ne(self.padding_idx)
            )
            logging_output.update(page_entropy_sum=entropy_sum, top_page_weight_sum=top_weight_sum)
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = n_correct.data
            logging_output["total"] = total.data
        return loss, sample_size, logging_output

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
