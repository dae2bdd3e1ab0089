"""The ``salient_extraction`` task: the sentences of the stored corpus with their
greedy-oracle labels, for training AWESOME's salient-sentence extractor with fairseq-train
(AWESOME, Section 3.2 and Appendix D)."""

import logging
from dataclasses import dataclass, field
from typing import Optional

from fairseq.data import Dictionary
from fairseq.tasks import register_task
from omegaconf import II

from ..awesome.cache import load_salient, salient_path
from ..awesome.data import SalientExtractionDataset
from ..corpus.format import CorpusSplit, load_dictionary
from .one_dictionary import OneDictionaryConfig, OneDictionaryTask

logger = logging.getLogger(__name__)


@dataclass
class SalientExtractionConfig(OneDictionaryConfig):
    data: str = field(default="", metadata={"help": "data directory written by pagesum-preprocess"})
    max_sentence_tokens: int = field(default=64, metadata={"help": "tokens per sentence, <s> and </s> included"})
    max_sentences: Optional[int] = field(
        default=None, metadata={"help": "train on a document's first N sentences only (default: all)"}
    )
    seed: int = II("common.seed")


@register_task("salient_extraction", dataclass=SalientExtractionConfig)
class SalientExtractionTask(OneDictionaryTask):
    """Sentences of the stored corpus with their greedy-oracle labels
    (``python -m pagesum_plugin.awesome.label`` writes them)."""

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
            max_sentences=self.cfg.max_sentences if training else None,
            shuffle=training and corpus.split == getattr(self.cfg, "train_subset", "train"), seed=self.cfg.seed,
        )

    def get_batch_iterator(self, dataset, required_batch_size_multiple=1, **kwargs):
        # batch rows are documents of varying sentence counts; none may be dropped
        return super().get_batch_iterator(dataset, required_batch_size_multiple=1, **kwargs)

    def max_positions(self):
        return None
