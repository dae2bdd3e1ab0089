"""Pairs per second of each ROUGE path on GovReport-length summaries (about 600 words).

    python benchmarks/rouge_speed.py [--pairs 1000] [--reference-pairs 100]

The pairs are real text: windows of 600 words from the ACL papers that the
``aclsum`` package ships, cut into sentences as ``pagesum-score`` does. The plain
rouge-score loop is timed on the first ``--reference-pairs`` pairs only (it is
slow); every path reports the largest difference from rouge-score on those pairs.
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import aclsum
import numpy as np
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pagesum_plugin.evaluation import rouge  # noqa: E402

PAPER_DIR = Path(aclsum.__file__).parent / "dataset" / "paper_jsons"


def make_pairs(count: int, words: int = 600, seed: int = 0):
    """(reference, hypothesis) windows of ``words`` words, one sentence per line."""
    text = []
    for path in sorted(PAPER_DIR.glob("*.json"))[:80]:
        paper = json.loads(path.read_text(encoding="utf-8"))
        text.extend(w for p in paper["pdf_parse"]["body_text"] for w in p["text"].split())
    rng = random.Random(seed)

    def window():
        start = rng.randrange(len(text) - words)
        return rouge.prepare(" ".join(text[start : start + words]))

    return [(window(), window()) for _ in range(count)]


def time_path(name, fn, pairs):
    start = time.perf_counter()
    scores = fn(pairs)
    seconds = time.perf_counter() - start
    return {"path": name, "pairs": len(pairs), "seconds": seconds, "pairs_per_s": len(pairs) / seconds, "scores": scores}


def rouge_score_loop(pairs):
    scorer = rouge_scorer.RougeScorer(list(rouge.METRICS), use_stemmer=True)
    rows = [scorer.score(ref, hyp) for ref, hyp in pairs]
    return {m: np.array([r[m].fmeasure for r in rows]) for m in rouge.METRICS}


def fast(workers):
    return lambda pairs: rouge.score_examples([h for _, h in pairs], [[r] for r, _ in pairs], workers=workers)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--reference-pairs", type=int, default=100)
    args = parser.parse_args()
    pairs = make_pairs(args.pairs)
    cores = os.cpu_count() or 1
    reference = time_path("rouge-score loop", rouge_score_loop, pairs[: args.reference_pairs])
    results = [
        reference,
        time_path("fast, 1 process", fast(1), pairs),
        time_path(f"fast, {cores} processes", fast(cores), pairs),
    ]
    n_ref = args.reference_pairs
    print(f"{args.pairs} pairs of 600-word summaries, {cores} cores\n")
    print(f"| path | pairs | seconds | pairs/s | time for 1,000 pairs (s) | max abs diff vs rouge-score |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        diff = max(float(np.abs(r["scores"][m][:n_ref] - reference["scores"][m]).max()) for m in rouge.METRICS)
        print(
            f"| {r['path']} | {r['pairs']} | {r['seconds']:.2f} | {r['pairs_per_s']:.1f} "
            f"| {1000 / r['pairs_per_s']:.1f} | {diff:.1e} |"
        )


if __name__ == "__main__":
    main()
