"""ROUGE-1, ROUGE-2, sentence-level ROUGE-L and summary-level ROUGE-Lsum, identical to
``rouge-score`` but fast.

``rouge_score.rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
use_stemmer=True)`` spends its time in two places: Porter-stemming the same words
again and again, and filling pure-Python LCS tables for every pair of sentences.
This module keeps rouge-score's exact definitions (tokenizer, n-gram clipping,
union-LCS with ROUGE-1.5.5's double-count guard, and even the tie-breaking of the
LCS backtrace, which decides *which* tokens enter the union) and changes only how
they are computed:

* stems are memoized per word;
* the LCS tables of one reference sentence against all hypothesis sentences are
  filled together with numpy, one reference token at a time;
* examples are spread over a process pool.

``tests/test_evaluation_rouge.py`` pins the numbers to rouge-score to 1e-6.
"""

import collections
import functools
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Sequence

import numpy as np
from nltk.stem import porter
from rouge_score import tokenize as rs_tokenize
from rouge_score.scoring import fmeasure

from pagesum_plugin.corpus.sentences import split_sentences

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")  # rougeL: sentence-level, rougeLsum: summary-level

# Below this many examples a process pool costs more than it saves.
MIN_EXAMPLES_PER_WORKER = 32

_STEMMER = porter.PorterStemmer()


@functools.lru_cache(maxsize=None)
def _stem(word: str) -> str:
    # rouge-score stems only words longer than 3 characters.
    return _STEMMER.stem(word) if len(word) > 3 else word


def tokenize(text: str) -> List[str]:
    """rouge-score's tokenizer with stemming: lowercase, keep ``[a-z0-9]+`` runs, stem."""
    words = rs_tokenize.SPACES_RE.split(rs_tokenize.NON_ALPHANUM_RE.sub(" ", text.lower()))
    stems = (_stem(w) for w in words)
    return [s for s in stems if rs_tokenize.VALID_TOKEN_RE.match(s)]


def sentences_for_lsum(text: str) -> List[str]:
    """The sentences rougeLsum compares: newline-separated, empty lines removed.

    This is rouge-score's own rule; callers decide how newlines got there
    (see ``prepare``).
    """
    return [s for s in text.split("\n") if len(s)]


def prepare(text: str, split: bool = True) -> str:
    """Puts one sentence per line, as rougeLsum expects.

    With ``split`` the text is first joined into one paragraph and cut by
    ``pagesum_plugin.corpus.sentences.split_sentences``; without it the existing newlines are
    kept as sentence boundaries.
    """
    if not split:
        return text
    return "\n".join(split_sentences(" ".join(text.split())))


# --------------------------------------------------------------------------- n-grams


def _ngrams(tokens: Sequence[str], n: int) -> collections.Counter:
    return collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _ngram_f1(ref_tokens: Sequence[str], hyp_tokens: Sequence[str], n: int) -> float:
    ref, hyp = _ngrams(ref_tokens, n), _ngrams(hyp_tokens, n)
    overlap = sum(min(count, hyp[gram]) for gram, count in ref.items())
    precision = overlap / max(sum(hyp.values()), 1)
    recall = overlap / max(sum(ref.values()), 1)
    return fmeasure(precision, recall)


# --------------------------------------------------------------------------- union LCS


def _lcs_tables(ref_ids: np.ndarray, hyp_ids: np.ndarray) -> np.ndarray:
    """LCS tables of one reference sentence against every hypothesis sentence.

    ref_ids: (m,) token ids; hyp_ids: (C, L) token ids padded with -1.
    Returns (m + 1, C, L + 1): table[i, c, j] = LCS(ref[:i], hyp_c[:j]).

    A row of the classic DP is ``max(up, left, diag + 1 if match)``; since rows are
    non-decreasing, it equals the running maximum of ``max(up, diag + 1 if match)``,
    which numpy computes for all sentences at once.
    """
    m = len(ref_ids)
    num_sents, length = hyp_ids.shape
    table = np.zeros((m + 1, num_sents, length + 1), dtype=np.int32)
    for i in range(1, m + 1):
        up = table[i - 1]
        match = hyp_ids == ref_ids[i - 1]  # (C, L)
        candidate = np.maximum(up[:, 1:], np.where(match, up[:, :-1] + 1, 0))
        table[i, :, 1:] = np.maximum.accumulate(candidate, axis=1)
    return table


def _backtrack(table: List[List[int]], ref: Sequence[int], hyp: Sequence[int]) -> List[int]:
    """Reference positions of one LCS, chosen exactly as rouge-score's ``_backtrack_norec``."""
    i, j = len(ref), len(hyp)
    positions = []
    while i > 0 and j > 0:
        if ref[i - 1] == hyp[j - 1]:
            positions.append(i - 1)
            i -= 1
            j -= 1
        elif table[i][j - 1] > table[i - 1][j]:
            j -= 1
        else:
            i -= 1
    return positions


def _union_lcs_positions(ref: List[int], hyp_sents: List[List[int]], hyp_ids: np.ndarray) -> List[int]:
    """Sorted reference positions in the union of the LCSs with every hypothesis sentence."""
    table = _lcs_tables(np.asarray(ref), hyp_ids)
    lengths = table[-1, np.arange(len(hyp_sents)), [len(h) for h in hyp_sents]]
    union = set()
    for c, hyp in enumerate(hyp_sents):
        if lengths[c] == 0:
            continue  # nothing in common: the backtrace would return nothing
        sub = table[:, c, : len(hyp) + 1].tolist()
        union.update(_backtrack(sub, ref, hyp))
    return sorted(union)


def _lcs_f1(ref_tokens: List[str], hyp_tokens: List[str]) -> float:
    """Sentence-level ROUGE-L F1 (rouge-score's rougeL): one LCS over the whole texts."""
    if not ref_tokens or not hyp_tokens:
        return 0.0
    vocab: Dict[str, int] = {}
    ref = np.array([vocab.setdefault(t, len(vocab)) for t in ref_tokens])
    hyp = np.array([[vocab.setdefault(t, len(vocab)) for t in hyp_tokens]])  # (1, n): one "sentence"
    lcs = int(_lcs_tables(ref, hyp)[-1, 0, -1])
    return fmeasure(lcs / len(hyp_tokens), lcs / len(ref_tokens))


def _summary_lcs_f1(ref_sents: List[List[str]], hyp_sents: List[List[str]]) -> float:
    """Summary-level ROUGE-L F1 (rougeLsum) as in rouge-score / ROUGE-1.5.5."""
    m = sum(map(len, ref_sents))
    n = sum(map(len, hyp_sents))
    if not ref_sents or not hyp_sents or not m or not n:
        return 0.0
    vocab: Dict[str, int] = {}
    ref_ids = [[vocab.setdefault(t, len(vocab)) for t in s] for s in ref_sents]
    hyp_ids = [[vocab.setdefault(t, len(vocab)) for t in s] for s in hyp_sents]
    width = max(len(h) for h in hyp_ids)
    padded = np.full((len(hyp_ids), width), -1, dtype=np.int64)  # (C, L)
    for c, h in enumerate(hyp_ids):
        padded[c, : len(h)] = h

    # Each token may be counted as a hit at most as often as it occurs on both sides.
    left_ref = collections.Counter(t for s in ref_ids for t in s)
    left_hyp = collections.Counter(t for s in hyp_ids for t in s)
    hits = 0
    for ref in ref_ids:
        if not ref:
            continue
        for pos in _union_lcs_positions(ref, hyp_ids, padded):
            token = ref[pos]
            if left_hyp[token] > 0 and left_ref[token] > 0:
                hits += 1
                left_hyp[token] -= 1
                left_ref[token] -= 1
    return fmeasure(hits / n, hits / m)


# --------------------------------------------------------------------------- scoring


def score_pair(reference: str, hypothesis: str) -> Dict[str, float]:
    """F1 (0..1) of one hypothesis against one reference, sentences given by newlines."""
    ref_tokens, hyp_tokens = tokenize(reference), tokenize(hypothesis)
    ref_sents = [tokenize(s) for s in sentences_for_lsum(reference)]
    hyp_sents = [tokenize(s) for s in sentences_for_lsum(hypothesis)]
    return {
        "rouge1": _ngram_f1(ref_tokens, hyp_tokens, 1),
        "rouge2": _ngram_f1(ref_tokens, hyp_tokens, 2),
        "rougeL": _lcs_f1(ref_tokens, hyp_tokens),
        "rougeLsum": _summary_lcs_f1(ref_sents, hyp_sents),
    }


def score_multi(references: Sequence[str], hypothesis: str) -> Dict[str, float]:
    """Best F1 per metric over several references (rouge-score's ``score_multi``)."""
    scores = [score_pair(r, hypothesis) for r in references]
    return {k: max(s[k] for s in scores) for k in METRICS}


def _pool_context():
    """fork is fastest, but forking a process that holds a CUDA context (validation
    inside fairseq-train) is unsafe: spawn fresh interpreters there instead."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return multiprocessing.get_context("spawn")
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def _score_chunk(chunk):
    return [score_multi(refs, hyp) for hyp, refs in chunk]


def score_examples(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    workers: Optional[int] = None,
) -> Dict[str, np.ndarray]:
    """Per-example F1 (0..1) for each metric.

    hypotheses: N texts with one sentence per line; references: N lists of such texts.
    workers: processes to use (default: all cores; 1 runs in this process).
    Returns {metric: (N,) float64 array}.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    pairs = list(zip(hypotheses, references))
    workers = workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(pairs) // MIN_EXAMPLES_PER_WORKER))
    if workers == 1:
        rows = _score_chunk(pairs)
    else:
        # Contiguous chunks keep each worker's stem cache warm on related text.
        size = -(-len(pairs) // (workers * 4))
        chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        with ProcessPoolExecutor(workers, mp_context=_pool_context()) as pool:
            rows = [row for part in pool.map(_score_chunk, chunks) for row in part]
    return {k: np.array([row[k] for row in rows], dtype=np.float64) for k in METRICS}


def corpus_rouge(
    hypotheses: List[str],
    references: List[str],
    split_sentences: bool = True,
    workers: Optional[int] = None,
) -> Dict[str, float]:
    """Corpus ROUGE as ``pagesum-score`` prints it: mean F1 x 100 for rouge1, rouge2, rougeLsum.

    Texts are cut into sentences with ``preprocess.sentences.split_sentences`` for
    rougeLsum (``split_sentences=False`` keeps their own newlines instead). Used by
    the fairseq task to select checkpoints by ROUGE.
    """
    hyps = [prepare(h, split_sentences) for h in hypotheses]
    refs = [[prepare(r, split_sentences)] for r in references]
    per_example = score_examples(hyps, refs, workers=workers)
    return {k: 100.0 * float(v.mean()) if len(v) else 0.0 for k, v in per_example.items()}
