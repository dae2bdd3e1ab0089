"""The dataset of the ``salient_extraction`` task (AWESOME's salient-sentence extractor), read
from the stored corpus: every example is its sentences, each ``<s> sentence </s>``, and their
greedy-oracle labels (``systems/awesome/cache.py``). A batch packs every sentence of its documents into
rows: ``src_tokens`` (n_sentences, sent_len), ``sentence_counts`` (batch,), ``target``
(n_sentences,).
"""

from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import data_utils

from ...corpus.codec import unit_ids
from ...corpus.format import EncodedDocument
from ...corpus.storage import CorpusSplit
from ...data.examples import ExampleDataset


def sentence_inputs(document: EncodedDocument, bos: int, eos: int, max_sentence_tokens: int) -> List[torch.Tensor]:
    """The extractor's input of every sentence of a document: ``<s> sentence </s>``, each
    sentence as it reads on its own (its first word without the leading space), cut to
    ``max_sentence_tokens`` tokens."""
    heads = np.split(document.heads, np.cumsum(document.head_plain)[:-1])
    sentences = []
    for u, spaced in enumerate(unit_ids(document)):
        ids = np.concatenate([heads[u], spaced[document.head_spaced[u]:]])[: max_sentence_tokens - 2]
        sentences.append(torch.from_numpy(np.concatenate([[bos], ids, [eos]]).astype(np.int64)))
    return sentences


class SalientExtractionDataset(ExampleDataset):
    """Sentences of each example with their labels; the collater packs every sentence of
    the batch into rows: src_tokens (n_sentences, sent_len), sentence_counts (batch,)."""

    def __init__(self, corpus: CorpusSplit, dictionary, labels: Optional[np.ndarray], max_sentence_tokens: int = 64,
                 max_sentences: Optional[int] = None, shuffle: bool = True, seed: int = 1):
        self.corpus, self.dictionary, self.labels = corpus, dictionary, labels
        super().__init__(shuffle, seed)
        self.max_sentence_tokens = max_sentence_tokens
        s = corpus.structure
        counts = np.diff(s.example_units)
        self.sentence_counts = counts if max_sentences is None else np.minimum(counts, max_sentences)
        lengths = np.minimum(s.unit_length + s.head_plain - s.head_spaced + 2, max_sentence_tokens)
        spans = list(zip(s.example_units[:-1], self.sentence_counts))
        self.example_tokens = np.array([lengths[a: a + n].sum() for a, n in spans], dtype=np.int64)  # batching cost
        self.longest_sentence = np.array([lengths[a: a + n].max() for a, n in spans], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.sentence_counts)

    def __getitem__(self, index: int) -> Dict:
        n = int(self.sentence_counts[index])
        sentences = sentence_inputs(self.corpus.document(index), self.dictionary.bos(), self.dictionary.eos(),
                                    self.max_sentence_tokens)[:n]
        first = self.corpus.structure.example_units[index]
        labels = None if self.labels is None else torch.from_numpy(self.labels[first: first + n].astype(np.float32))
        return {"id": index, "sentences": sentences, "labels": labels}

    def collater(self, samples: List[Dict], pad_to_multiple: int = 1) -> Dict:
        if len(samples) == 0:
            return {}
        pad = self.dictionary.pad()
        sentences = [s for sample in samples for s in sample["sentences"]]
        src_tokens = data_utils.collate_tokens(sentences, pad, pad_to_multiple=pad_to_multiple)  # (n_sentences, len)
        batch = {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": len(sentences),  # sentences scored
            "net_input": {
                "src_tokens": src_tokens,
                "sentence_counts": torch.LongTensor([len(s["sentences"]) for s in samples]),  # (batch,)
            },
        }
        if samples[0]["labels"] is not None:
            batch["target"] = torch.cat([s["labels"] for s in samples])  # (n_sentences,)
        return batch

    def size(self, index: int):
        """What fairseq compares with the encoder's max positions: the longest sentence."""
        return int(self.longest_sentence[index])

    @property
    def sizes(self):
        return self.longest_sentence
