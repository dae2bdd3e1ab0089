"""Target assignment (Appendix A.2 of the AWESOME paper): every sentence of the reference
summary goes to the document segment that gives it the highest ROUGE-1 + ROUGE-2 F1.

ROUGE is the project's scorer (``evaluation/rouge.py``: rouge-score's tokenizer and
stemmer, clipped n-gram counts); F1 is symmetric, so it does not matter which side is
called the reference. Ties go to the earlier segment. A segment that receives no
sentence has an empty target: the model learns to end its summary at once, and the
document's summary skips it.
"""

from typing import List, Sequence

import numpy as np

from ...corpus.codec import TextCodec, unit_ids
from ...corpus.format import EncodedDocument
from ...corpus.sentences import split_sentences
from ...evaluation.rouge import ngram_counts, overlap_f1, tokenize


def assign_sentences(summary_sentences: Sequence[str], segment_texts: Sequence[str]) -> np.ndarray:
    """(n_sentences,) the segment of every summary sentence."""
    if not segment_texts:
        raise ValueError("a document needs at least one segment")
    segments = [(ngram_counts(tokens, 1), ngram_counts(tokens, 2)) for tokens in map(tokenize, segment_texts)]
    assignment = np.zeros(len(summary_sentences), dtype=np.int64)
    for i, sentence in enumerate(summary_sentences):
        tokens = tokenize(sentence)
        unigrams, bigrams = ngram_counts(tokens, 1), ngram_counts(tokens, 2)
        scores = [overlap_f1(seg_1, unigrams) + overlap_f1(seg_2, bigrams) for seg_1, seg_2 in segments]
        assignment[i] = int(np.argmax(scores))  # the first maximum: ties go to the earlier segment
    return assignment


def segment_summaries(summary_sentences: Sequence[str], assignment: np.ndarray, num_segments: int) -> List[str]:
    """The target text of every segment: its sentences in summary order ('' when none)."""
    texts: List[List[str]] = [[] for _ in range(num_segments)]
    for sentence, segment in zip(summary_sentences, assignment):
        texts[int(segment)].append(sentence)
    return [" ".join(parts) for parts in texts]


# --------------------------------------------------------------------------- stored documents


def segment_summary_ids(codec: TextCodec, text: str) -> np.ndarray:
    """A segment's target ids: its summary as it reads after another sentence, with a leading
    space, as the corpus stores every document sentence (``codec.encode_document``); none
    for an empty summary.

    Every segment's target has that form, the first segment's too: whatever the segments
    before it summarized, a segment's summary starts the same way, and the document's
    summary, the concatenation of the segments' ids, decodes as their texts joined by
    single spaces (the codec drops the leading space of the whole)."""
    text = " ".join(text.split())
    return codec.ids(" " + text) if text else np.zeros(0, dtype=np.int64)


def example_targets(codec: TextCodec, document: EncodedDocument, segment_ids: np.ndarray, reference: str):
    """(every segment's target ids (``segment_summary_ids``), every summary sentence's segment)
    of one example."""
    units = unit_ids(document)
    num_segments = int(segment_ids[-1]) + 1
    texts = [codec.decode(np.concatenate([units[u] for u in np.flatnonzero(segment_ids == j)]))
             for j in range(num_segments)]
    sentences = split_sentences(reference)
    assignment = assign_sentences(sentences, texts)
    targets = [segment_summary_ids(codec, text) for text in segment_summaries(sentences, assignment, num_segments)]
    return targets, assignment
