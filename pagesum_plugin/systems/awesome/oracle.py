"""Oracle extractive labels for the salient-sentence extractor (Appendix D): the document
sentences that a greedy search picks to maximize ROUGE-1 + ROUGE-2 F1 against the
reference. The search is ``pagesum-baseline``'s Oracle; this module only turns its
choice into per-sentence labels."""

from typing import List, Sequence

import numpy as np

from ...evaluation.extractive import oracle


class _Sentence(str):
    """A sentence that remembers its position: ``oracle`` returns the very objects it is
    given, so equal sentences at different positions stay apart."""

    position: int


def oracle_positions(sentences: Sequence[str], summary: str) -> List[int]:
    """Positions (in document order) of the sentences the greedy Oracle selects."""
    tagged = []
    for position, text in enumerate(sentences):
        sentence = _Sentence(text)
        sentence.position = position
        tagged.append(sentence)
    return [sentence.position for sentence in oracle(tagged, summary)]


def oracle_labels(sentences: Sequence[str], summary: str) -> np.ndarray:
    """(n,) uint8: 1 for the sentences the greedy Oracle selects."""
    labels = np.zeros(len(sentences), dtype=np.uint8)
    labels[oracle_positions(sentences, summary)] = 1
    return labels
