"""Uncertainty of corpus scores: bootstrap intervals and paired approximate randomization."""

from typing import Tuple

import numpy as np

# Resample in blocks so that (samples x examples) index arrays stay small.
_BLOCK = 256


def bootstrap_ci(
    scores: np.ndarray, samples: int = 1000, confidence: float = 0.95, seed: int = 1
) -> Tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-example scores.

    scores: (N,) per-example values. Examples are resampled with replacement,
    ``samples`` times; the interval is the central ``confidence`` share of the means.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, samples, _BLOCK):
        rows = min(_BLOCK, samples - start)
        idx = rng.integers(0, len(scores), size=(rows, len(scores)))  # (rows, N)
        means.append(scores[idx].mean(axis=1))
    means = np.concatenate(means)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def approximate_randomization(
    scores_a: np.ndarray, scores_b: np.ndarray, trials: int = 10000, seed: int = 1
) -> float:
    """Two-sided p-value that systems A and B have the same mean score (paired test).

    Under the null hypothesis the two outputs for an example are exchangeable, so
    each trial swaps A's and B's score of every example with probability 1/2 and
    measures the difference of means. p = (1 + #trials at least as extreme) /
    (1 + trials), the usual add-one estimate (Noreen, 1989).
    """
    a, b = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired test needs equal lengths, got {len(a)} and {len(b)}")
    if len(a) == 0:
        return float("nan")
    diff = a - b  # (N,)
    observed = abs(diff.mean())
    rng = np.random.default_rng(seed)
    extreme = 0
    for start in range(0, trials, _BLOCK):
        rows = min(_BLOCK, trials - start)
        signs = rng.choice(np.array([-1.0, 1.0]), size=(rows, len(a)))  # (rows, N)
        shuffled = np.abs((signs * diff).mean(axis=1))
        # A tiny tolerance so that ties in floating point count as "as extreme".
        extreme += int((shuffled >= observed - 1e-12).sum())
    return (extreme + 1) / (trials + 1)
