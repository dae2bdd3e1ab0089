"""A stored document's sentences (its units) as AWESOME reads them: ids, texts, segments and
every segment's target."""

from typing import List, Optional

import numpy as np

from ..corpus.codec import TextCodec
from ..corpus.format import EncodedDocument
from ..corpus.sentences import split_sentences
from .segmentation import segment_sentences
from .targets import assign_sentences, segment_summaries


def unit_ids(document: EncodedDocument) -> List[np.ndarray]:
    """Every unit's ids as it reads after another sentence (with its leading space)."""
    return np.split(document.units, np.cumsum(document.unit_length)[:-1])


def unit_texts(codec: TextCodec, document: EncodedDocument) -> List[str]:
    return [codec.decode(ids) for ids in unit_ids(document)]


def segment_example(document: EncodedDocument, embeddings: Optional[np.ndarray], min_tokens: int,
                    max_tokens: int) -> np.ndarray:
    """Segment ids of one example's units; lengths as the ``segments`` view counts them."""
    lengths = document.unit_length
    opening = lengths + document.head_plain - document.head_spaced  # a segment opens without the space
    return segment_sentences(lengths, embeddings, min_tokens, max_tokens, opening_lengths=opening)


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
