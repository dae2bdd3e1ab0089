"""Pairs per second of rouge-score and of ``pagesum-score``'s ROUGE on GovReport-length
summaries (about 600 words), with the speed-up of each path over rouge-score.

    python benchmarks/rouge_speed.py [--pairs 1000] [--reference-pairs 100]

The pairs are real text: windows of 600 words from the ACL papers that the
``aclsum`` package ships, cut into sentences as ``pagesum-score`` does. The plain
rouge-score loop is timed on the first ``--reference-pairs`` pairs only (it is
slow); every path reports the largest difference from rouge-score on those pairs.
All paths are timed in the same run, so the ratios compare like with like. A second
table splits one process's time into the stages of ``rouge.score_pair``.

The third table runs ``pagesum-score`` end to end as a user does, on ``--end-to-end-pairs``
pairs written one summary per line: a fresh process that imports, reads, splits sentences,
scores and bootstraps, best of ``--repeat``, alternating with ``--before REV`` (the command
of that commit), against the rouge-score loop's rate on the same number of pairs.
"""

import argparse
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

import aclsum
import numpy as np
from rouge_score import rouge_scorer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.commands import export, exported, installed, timed  # noqa: E402
from benchmarks.common import markdown_table  # noqa: E402
from pagesum_plugin.evaluation import lcs, rouge  # noqa: E402

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


def cpu_seconds() -> float:
    """CPU time of this process and of its finished workers: unlike wall time, barely
    affected by other processes competing for the cores."""
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def time_path(name, fn, pairs):
    start, start_cpu = time.perf_counter(), cpu_seconds()
    scores = fn(pairs)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
    return {"path": name, "pairs": len(pairs), "seconds": seconds, "cpu_seconds": cpu,
            "pairs_per_s": len(pairs) / seconds, "scores": scores}


def rouge_score_loop(pairs):
    scorer = rouge_scorer.RougeScorer(list(rouge.METRICS), use_stemmer=True)
    rows = [scorer.score(ref, hyp) for ref, hyp in pairs]
    return {m: np.array([r[m].fmeasure for r in rows]) for m in rouge.METRICS}


def pagesum_score(workers):
    def run(pairs):
        # A fresh pagesum-score process starts without stems: so does every timed path.
        rouge._token.cache_clear()
        return rouge.score_examples([h for _, h in pairs], [[r] for r, _ in pairs], workers=workers)

    return run


def stage_times(pairs):
    """CPU milliseconds per pair of each stage of ``rouge.score_pair``, in one process,
    starting with an empty stem cache: where the time goes."""
    rouge._token.cache_clear()
    rows = []

    def stage(name, fn):
        start = time.process_time()
        out = fn()
        rows.append([name, 1000 * (time.process_time() - start) / len(pairs)])
        return out

    def sentence_tokens(text):
        return [rouge.tokenize(sentence) for sentence in rouge.sentences_for_lsum(text)]

    sentences = stage("tokenize and stem, each sentence once", lambda: [
        (sentence_tokens(ref), sentence_tokens(hyp)) for ref, hyp in pairs
    ])
    texts = [([t for s in ref for t in s], [t for s in hyp for t in s]) for ref, hyp in sentences]
    stage("rouge1 and rouge2: clipped n-gram counts", lambda: [
        (rouge.overlap_f1(Counter(ref), Counter(hyp)), rouge.overlap_f1(rouge.ngram_counts(ref, 2), rouge.ngram_counts(hyp, 2)))
        for ref, hyp in texts
    ])
    stage("rougeL: LCS length of the whole texts", lambda: [lcs.lcs_length(ref, hyp) for ref, hyp in texts])
    unions = stage("rougeLsum: bit layout of the hypothesis sentences", lambda: [
        lcs.UnionLcs(hyp) for _, hyp in sentences
    ])
    stage("rougeLsum: LCS rows and backtraces of every reference sentence", lambda: [
        [union.positions(sentence) for sentence in ref] for union, (ref, _) in zip(unions, sentences)
    ])
    total = sum(ms for _, ms in rows)
    return [[name, f"{ms:.3f}", f"{100 * ms / total:.0f}%"] for name, ms in rows]


def end_to_end(pairs, reference: dict, before: str | None, repeat: int) -> list:
    """Rows of ``pagesum-score`` run as a command on ``pairs``, against the rouge-score loop."""
    loop_wall = reference["seconds"] / reference["pairs"] * len(pairs)
    loop_cpu = reference["cpu_seconds"] / reference["pairs"] * len(pairs)
    rows = [[f"rouge-score loop (in process, {reference['pairs']} pairs scaled)", len(pairs), f"{loop_wall:.2f}",
             f"{loop_cpu:.2f}", "1.0x", "1.0x"]]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        hyp, ref = tmp / "hyp.txt", tmp / "ref.txt"
        ref.write_text("".join(" ".join(r.split()) + "\n" for r, _ in pairs), encoding="utf-8")
        hyp.write_text("".join(" ".join(h.split()) + "\n" for _, h in pairs), encoding="utf-8")
        commands = {"pagesum-score": installed("pagesum_commands:score")}
        if before:
            commands = {f"pagesum-score at {before}": exported(export(before, tmp / "before"),
                                                              "pagesum_plugin.evaluation.score:main"), **commands}
        best = {name: (float("inf"), float("inf")) for name in commands}
        for _ in range(repeat):
            for name, command in commands.items():
                wall, cpu = timed(command + ["--hyp", str(hyp), "--ref", str(ref)])
                best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
            for name, command in commands.items():
                wall, cpu = timed(command + ["--help"])
                best[f"{name} --help"] = tuple(min(old, new) for old, new in
                                               zip(best.get(f"{name} --help", (float("inf"),) * 2), (wall, cpu)))
    for name, (wall, cpu) in best.items():
        help_row = name.endswith("--help")
        rows.append([name, "" if help_row else len(pairs), f"{wall:.2f}", f"{cpu:.2f}",
                     "" if help_row else f"{loop_wall / wall:.1f}x", "" if help_row else f"{loop_cpu / cpu:.1f}x"])
    return rows


def versions() -> str:
    packages = ", ".join(f"{name} {metadata.version(name)}" for name in ("rouge-score", "nltk", "numpy"))
    return f"Python {platform.python_version()}, {packages}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--reference-pairs", type=int, default=100)
    parser.add_argument("--end-to-end-pairs", type=int, default=973, help="pairs for the command, end to end")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each end-to-end command; the best is kept")
    parser.add_argument("--before", metavar="REV", help="also run this commit's pagesum-score, alternating")
    args = parser.parse_args()
    pairs = make_pairs(args.pairs)
    cores = os.cpu_count() or 1
    # Other processes on the machine slow every path down, the process pool most.
    load_before = os.getloadavg()[0]
    reference = time_path("rouge-score loop", rouge_score_loop, pairs[: args.reference_pairs])
    results = [
        reference,
        time_path("pagesum-score, 1 process", pagesum_score(1), pairs),
        time_path(f"pagesum-score, {cores} processes", pagesum_score(cores), pairs),
    ]
    stages = stage_times(pairs)
    commands = end_to_end(pairs[: args.end_to_end_pairs], reference, args.before, args.repeat)
    load_after = os.getloadavg()[0]

    n_ref = args.reference_pairs
    rows = []
    for r in results:
        diff = max(float(np.abs(r["scores"][m][:n_ref] - reference["scores"][m]).max()) for m in rouge.METRICS)
        rows.append([
            r["path"], r["pairs"], f"{r['seconds']:.2f}", f"{r['cpu_seconds']:.2f}", f"{r['pairs_per_s']:.1f}",
            f"{1000 / r['pairs_per_s']:.1f}", f"{r['pairs_per_s'] / reference['pairs_per_s']:.1f}x", f"{diff:.1e}",
        ])
    print(f"{args.pairs} pairs of 600-word summaries, {cores} cores, "
          f"1-minute load average {load_before:.1f} before and {load_after:.1f} after; {versions()}\n")
    header = ["path", "pairs", "seconds", "CPU seconds", "pairs/s", "time for 1,000 pairs (s)",
              "speed-up vs rouge-score", "max abs diff vs rouge-score"]
    print(markdown_table(header, rows))
    print(f"\nWhere pagesum-score's time goes, in one process ({args.pairs} pairs)\n")
    print(markdown_table(["stage", "CPU ms per pair", "share"], stages))
    print(f"\npagesum-score as a command, end to end (imports, sentence splitting, bootstrap), best of {args.repeat}\n")
    print(markdown_table(["path", "pairs", "seconds", "CPU seconds", "speed-up vs rouge-score (wall)",
                          "speed-up vs rouge-score (CPU)"], commands))


if __name__ == "__main__":
    main()
