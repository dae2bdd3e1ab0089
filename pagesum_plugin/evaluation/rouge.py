"""ROUGE-1, ROUGE-2, sentence-level ROUGE-L and summary-level ROUGE-Lsum, identical to
``rouge-score`` but fast.

``rouge_score.rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"],
use_stemmer=True)`` spends its time in three places: filling pure-Python LCS tables
cell by cell (one whole-text table for rougeL, one per pair of sentences for
rougeLsum), Porter-stemming the same words again and again, and tokenizing every text
twice. This module keeps rouge-score's exact definitions (tokenizer, n-gram clipping,
union-LCS with ROUGE-1.5.5's double-count guard, and even the tie-breaking of the
LCS backtrace, which decides *which* tokens enter the union) and changes only how
they are computed:

* LCS rows are integers updated with bit-parallel arithmetic, and rouge-score's
  backtrace runs for all hypothesis sentences at once (``lcs``);
* stems are memoized per word, and each sentence is tokenized once: the whole-text
  tokens are the sentences' tokens in order, because the newline between sentences
  is itself a token separator;
* examples are spread over a process pool.

``tests/test_evaluation_rouge.py`` pins the numbers to rouge-score to 1e-6.
"""

import collections
import functools
import itertools
import multiprocessing
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Dict, List, Optional, Sequence

import numpy as np
from nltk.stem import porter
from rouge_score import tokenize as rs_tokenize
from rouge_score.scoring import fmeasure

from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.evaluation.lcs import UnionLcs, lcs_length

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")  # rougeL: sentence-level, rougeLsum: summary-level

# Examples each worker must get for a process pool to save time, by start method. A
# pair of 600-word summaries takes about 2 ms (benchmarks/rouge_speed.py). A pool of
# forked workers costs about 0.1 s, and each worker stems its words again; a spawned
# worker (see ``_pool_context``) imports fairseq and torch again, which takes seconds.
MIN_EXAMPLES_PER_WORKER = {"fork": 128, "spawn": 4096}

_STEMMER = porter.PorterStemmer()

# rouge-score replaces every character outside [a-z0-9] by a space and splits on
# whitespace: its words are exactly the maximal [a-z0-9] runs.
_WORD_RE = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=None)
def _token(word: str) -> str:
    """A word's token, or "" when rouge-score would drop it.

    rouge-score stems only words longer than 3 characters, then keeps a token only if
    it still matches ``VALID_TOKEN_RE``.
    """
    stem = _STEMMER.stem(word) if len(word) > 3 else word
    return stem if rs_tokenize.VALID_TOKEN_RE.match(stem) else ""


def tokenize(text: str) -> List[str]:
    """rouge-score's tokenizer with stemming: lowercase, keep ``[a-z0-9]+`` runs, stem."""
    return [t for t in map(_token, _WORD_RE.findall(text.lower())) if t]


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


def ngram_counts(tokens: Sequence[str], n: int) -> collections.Counter:
    """Counts of the n-grams (tuples of n tokens) of a token sequence."""
    return collections.Counter(zip(*(tokens[k:] for k in range(n))))


def overlap_f1(ref: collections.Counter, hyp: collections.Counter) -> float:
    """F1 of clipped counts: each item matches at most as often as it occurs on both sides."""
    overlap = sum(min(count, hyp[item]) for item, count in ref.items())
    precision = overlap / max(sum(hyp.values()), 1)
    recall = overlap / max(sum(ref.values()), 1)
    return fmeasure(precision, recall)


# --------------------------------------------------------------------------- LCS


def _lcs_f1(ref_tokens: List[str], hyp_tokens: List[str]) -> float:
    """Sentence-level ROUGE-L F1 (rouge-score's rougeL): one LCS over the whole texts."""
    if not ref_tokens or not hyp_tokens:
        return 0.0
    lcs = lcs_length(ref_tokens, hyp_tokens)
    return fmeasure(lcs / len(hyp_tokens), lcs / len(ref_tokens))


def _summary_lcs_f1(ref_sents: List[List[str]], hyp_sents: List[List[str]], hyp_counts: collections.Counter) -> float:
    """Summary-level ROUGE-L F1 (rougeLsum) as in rouge-score / ROUGE-1.5.5.

    hyp_counts: the hypothesis's token counts. ROUGE-1.5.5 lets each union token score
    a hit only while it has occurrences left on both sides. The reference side never
    runs out first (the union's tokens are reference tokens), so a token scores
    ``min(times in the unions, times in the hypothesis)`` hits, in whatever order.
    """
    m = sum(map(len, ref_sents))
    n = sum(map(len, hyp_sents))
    if not ref_sents or not hyp_sents or not m or not n:
        return 0.0
    union = UnionLcs(hyp_sents)
    in_unions = collections.Counter(ref[i] for ref in ref_sents for i in union.positions(ref))
    hits = sum(min(count, hyp_counts[token]) for token, count in in_unions.items())
    return fmeasure(hits / n, hits / m)


# --------------------------------------------------------------------------- scoring


def score_pair(reference: str, hypothesis: str) -> Dict[str, float]:
    """F1 (0..1) of one hypothesis against one reference, sentences given by newlines."""
    ref_sents = [tokenize(s) for s in sentences_for_lsum(reference)]
    hyp_sents = [tokenize(s) for s in sentences_for_lsum(hypothesis)]
    ref_tokens = list(itertools.chain.from_iterable(ref_sents))
    hyp_tokens = list(itertools.chain.from_iterable(hyp_sents))
    hyp_unigrams = collections.Counter(hyp_tokens)
    return {
        "rouge1": overlap_f1(collections.Counter(ref_tokens), hyp_unigrams),
        "rouge2": overlap_f1(ngram_counts(ref_tokens, 2), ngram_counts(hyp_tokens, 2)),
        "rougeL": _lcs_f1(ref_tokens, hyp_tokens),
        "rougeLsum": _summary_lcs_f1(ref_sents, hyp_sents, hyp_unigrams),
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
    context = _pool_context()
    workers = workers or os.cpu_count() or 1
    workers = max(1, min(workers, len(pairs) // MIN_EXAMPLES_PER_WORKER[context.get_start_method()]))
    if workers == 1:
        rows = _score_chunk(pairs)
    else:
        # Contiguous chunks keep each worker's stem cache warm on related text.
        size = -(-len(pairs) // (workers * 4))
        chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
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
