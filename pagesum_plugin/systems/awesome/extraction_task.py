"""The ``salient_extraction`` task: the sentences of the stored corpus with their
greedy-oracle labels, for training AWESOME's salient-sentence extractor with fairseq-train
(AWESOME, Section 3.2 and Appendix D); and the trained extractor applied to documents: a stored
split (``predict_split``, what ``pagesum-awesome-extract`` writes) or one
encoded document (``SalientExtractor``, what ``summarize()`` reads), with one threshold rule.
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.data import Dictionary, data_utils
from fairseq.tasks import register_task
from omegaconf import II

from .arguments import DEFAULT_THRESHOLD
from .cache import load_salient, salient_path
from ...corpus.format import EncodedDocument
from ...corpus.storage import CorpusSplit, load_dictionary
from .extraction_criterion import sentence_probabilities
from .sentence_dataset import SalientExtractionDataset, sentence_inputs
from ...tasks.one_dictionary import OneDictionaryConfig, OneDictionaryTask

logger = logging.getLogger(__name__)


@dataclass
class SalientExtractionConfig(OneDictionaryConfig):
    data: str = field(default="", metadata={"help": "data directory written by pagesum-preprocess"})
    max_sentence_tokens: int = field(default=64, metadata={"help": "tokens per sentence, <s> and </s> included"})
    # not max_sentences: fairseq's --max-sentences (its --batch-size) would take the flag
    max_document_sentences: Optional[int] = field(
        default=None, metadata={"help": "train on a document's first N sentences only (default: all)"}
    )
    seed: int = II("common.seed")


@register_task("salient_extraction", dataclass=SalientExtractionConfig)
class SalientExtractionTask(OneDictionaryTask):
    """Sentences of the stored corpus with their greedy-oracle labels
    (``pagesum-awesome-label`` writes them)."""

    cfg: SalientExtractionConfig

    def __init__(self, cfg: SalientExtractionConfig, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary

    @classmethod
    def setup_task(cls, cfg: SalientExtractionConfig, **kwargs):
        return cls(cfg, load_dictionary(cfg.data))

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        corpus = CorpusSplit(self.cfg.data, split)
        labels = load_salient(self.cfg.data, split, "oracle", len(corpus.structure.unit_length))
        self.datasets[split] = self.extraction_dataset(corpus, labels, training=True)
        logger.info(f"{split}: {len(corpus)} examples, labels from {salient_path(self.cfg.data, split, 'oracle')}")

    def extraction_dataset(self, corpus: CorpusSplit, labels=None, training: bool = False) -> SalientExtractionDataset:
        return SalientExtractionDataset(
            corpus, self.dictionary, labels, self.cfg.max_sentence_tokens,
            max_sentences=self.cfg.max_document_sentences if training else None,
            shuffle=training and corpus.split == getattr(self.cfg, "train_subset", "train"), seed=self.cfg.seed,
        )

    def get_batch_iterator(self, dataset, required_batch_size_multiple=1, **kwargs):
        # batch rows are documents of varying sentence counts; none may be dropped
        return super().get_batch_iterator(dataset, required_batch_size_multiple=1, **kwargs)

    def max_positions(self):
        return None


# --------------------------------------------------------------------------- a trained extractor


def load_extractor(path: str, data_dir: str):
    """(model, task) of an extractor checkpoint (``fairseq-train --task salient_extraction``),
    its dictionary read from ``data_dir``; the model in eval mode, on the CPU."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data_dir)})
    return models[0].eval(), task


class SalientExtractor:
    """A trained extractor applied to one encoded document at a time (what ``summarize()``
    uses for the salient sentences of a raw document): the sentences whose probability
    exceeds ``threshold`` are salient, exactly as ``predict_split`` marks a stored document's."""

    def __init__(self, model, task, threshold: float = DEFAULT_THRESHOLD):
        self.model, self.task, self.threshold = model.eval(), task, threshold

    @classmethod
    def from_checkpoint(cls, path: str, data_dir: str, threshold: float = DEFAULT_THRESHOLD) -> "SalientExtractor":
        return cls(*load_extractor(path, data_dir), threshold=threshold)

    def to(self, device) -> "SalientExtractor":
        self.model.to(device)
        return self

    @torch.no_grad()
    def predict(self, document: EncodedDocument) -> np.ndarray:
        """(n_sentences,) bool: every sentence (unit) of ``document``, salient or not."""
        dictionary = self.task.dictionary
        sentences = sentence_inputs(document, dictionary.bos(), dictionary.eos(), self.task.cfg.max_sentence_tokens)
        device = next(self.model.parameters()).device
        src_tokens = data_utils.collate_tokens(sentences, dictionary.pad()).to(device)
        logits, padding = self.model(src_tokens, torch.tensor([len(sentences)], device=device))
        return (sentence_probabilities(logits, padding) > self.threshold).cpu().numpy()


@torch.no_grad()
def predict_split(model, task, split: str, threshold: float, device: torch.device, batch_size: int) -> np.ndarray:
    """(n_units,) uint8: 1 where the extractor's probability exceeds ``threshold``."""
    corpus = CorpusSplit(task.cfg.data, split)
    dataset = task.extraction_dataset(corpus)
    picked = []
    for first in range(0, len(dataset), batch_size):
        batch = dataset.collater([dataset[i] for i in range(first, min(first + batch_size, len(dataset)))])
        net_input = {k: v.to(device) for k, v in batch["net_input"].items()}
        logits, padding = model(**net_input)
        picked.append((sentence_probabilities(logits, padding) > threshold).cpu().numpy())
    return np.concatenate(picked).astype(np.uint8) if picked else np.zeros(0, dtype=np.uint8)
