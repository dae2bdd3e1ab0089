"""Extractive summaries: Lead-k and the greedy ROUGE Oracle, on a document's sentences.

``pagesum-baseline`` writes them for a whole corpus (``baselines.py``); AWESOME's
salient-sentence labels are the Oracle's choice (``systems/awesome/oracle.py``). ROUGE is the
project's scorer (``rouge.py``: rouge-score's tokenizer and stemmer, clipped n-gram counts).
"""

import collections
from typing import List, Optional, Sequence

from .rouge import ngram_counts, overlap_f1, tokenize


def lead(sentences: Sequence[str], k: int) -> List[str]:
    """The first ``k`` sentences of the document."""
    return list(sentences[:k])


def oracle(sentences: Sequence[str], summary: str, max_sentences: Optional[int] = None) -> List[str]:
    """Greedy Oracle: add the sentence that most raises ROUGE-1 F1 + ROUGE-2 F1; stop when none does.

    The selected sentences are returned in document order. N-grams never cross
    sentence boundaries, as in the usual extractive-oracle construction.
    """
    reference = [ngram_counts(tokenize(summary), n) for n in (1, 2)]
    candidates = [[ngram_counts(tokenize(s), n) for n in (1, 2)] for s in sentences]
    selected_grams = [collections.Counter(), collections.Counter()]
    chosen: List[int] = []
    best = 0.0
    limit = len(sentences) if max_sentences is None else max_sentences
    while len(chosen) < limit:
        gains = []
        for i, grams in enumerate(candidates):
            if i in chosen:
                continue
            score = sum(overlap_f1(reference[n], selected_grams[n] + grams[n]) for n in (0, 1))
            gains.append((score, -i))
        if not gains:
            break
        score, neg_i = max(gains)  # ties go to the earlier sentence
        if score <= best:
            break
        best = score
        chosen.append(-neg_i)
        for n in (0, 1):
            selected_grams[n] += candidates[-neg_i][n]
    return [sentences[i] for i in sorted(chosen)]
