"""Binary cross entropy of the salient-sentence extractor against its oracle labels, with
precision, recall and F1 of its decisions (score > 0, i.e. probability > 0.5)."""


import torch
import torch.nn.functional as F
from fairseq import metrics
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass


@register_criterion("salient_extraction", dataclass=FairseqDataclass)  # no options
class SalientExtractionCriterion(FairseqCriterion):
    def forward(self, model, sample, reduce=True):
        logits, padding = model(**sample["net_input"])  # (batch, n), (batch, n)
        scores = logits[~padding]  # (n_sentences,), packed in document order like the labels
        labels = sample["target"].to(scores)
        loss = F.binary_cross_entropy_with_logits(scores.float(), labels.float(), reduction="sum")
        picked, gold = scores > 0, labels > 0.5
        sample_size = int(labels.numel())
        logging_output = {
            "loss": loss.data,
            "ntokens": sample_size,
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "true_positives": int((picked & gold).sum()),
            "picked": int(picked.sum()),
            "gold": int(gold.sum()),
        }
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        total = sum(log.get("sample_size", 0) for log in logging_outputs)
        loss = sum(log.get("loss", 0) for log in logging_outputs)
        metrics.log_scalar("loss", float(loss) / max(total, 1), total, round=4)
        for name in ("true_positives", "picked", "gold"):  # counts, so that F1 is the corpus F1
            metrics.log_scalar_sum(f"_{name}", sum(log.get(name, 0) for log in logging_outputs))
        metrics.log_derived("precision", lambda m: 100 * _ratio(m["_true_positives"].sum, m["_picked"].sum))
        metrics.log_derived("recall", lambda m: 100 * _ratio(m["_true_positives"].sum, m["_gold"].sum))
        metrics.log_derived("f1", lambda m: 100 * _ratio(2 * m["_true_positives"].sum, m["_picked"].sum + m["_gold"].sum))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


def _ratio(numerator, denominator) -> float:
    return round(float(numerator) / float(denominator), 4) if denominator else 0.0


def sentence_probabilities(logits: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """(batch, n) logits -> (n_sentences,) probabilities, packed in document order."""
    return torch.sigmoid(logits[~padding].float())
