"""``pagesum-score``: paper-compatible ROUGE with confidence intervals and significance tests.

    pagesum-score --hyp test.hypo --ref test.reference.txt
    pagesum-score --hyp a.hypo --ref ref.txt --compare b.hypo --json
"""

import json
import sys
from typing import Dict, List, Sequence

import numpy as np

from pagesum_plugin.evaluation import rouge
from pagesum_plugin.evaluation.arguments import score_parser
from pagesum_plugin.evaluation.data import ScoreInputError, read_lines
from pagesum_plugin.evaluation.perl_rouge import perl_rouge
from pagesum_plugin.evaluation.significance import approximate_randomization, bootstrap_ci

LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L (sentence-level)",
          "rougeLsum": "ROUGE-Lsum (summary-level)"}


def check_same_length(named: Dict[str, List[str]]) -> int:
    """All files must have one line per example; refuse to guess which lines pair up."""
    counts = {path: len(lines) for path, lines in named.items()}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{path}: {n} lines" for path, n in counts.items())
        raise ScoreInputError(f"files have different numbers of examples ({detail})")
    return next(iter(counts.values()))


def count_empty(lines: Sequence[str]) -> int:
    return sum(1 for line in lines if not line.strip())


def summarize(per_example: Dict[str, np.ndarray], samples: int, seed: int) -> Dict[str, Dict[str, float]]:
    """Mean F1 x 100 and its bootstrap 95% interval for each metric."""
    result = {}
    for metric, scores in per_example.items():
        low, high = bootstrap_ci(scores, samples=samples, seed=seed)
        result[metric] = {"f": 100.0 * float(scores.mean()), "ci_low": 100.0 * low, "ci_high": 100.0 * high}
    return result


def load_inputs(args) -> Dict[str, List[str]]:
    files = {args.hyp: read_lines(args.hyp)}
    for ref in args.ref:
        files[ref] = read_lines(ref)
    if args.compare:
        files[args.compare] = read_lines(args.compare)
    if check_same_length(files) == 0:
        raise ScoreInputError(f"{args.hyp}: no examples to score")
    return files


def run(args) -> Dict:
    """Computes everything the report shows, as one JSON-ready dict."""
    files = load_inputs(args)
    split = args.sentence_split == "punkt"
    refs_by_file = [[rouge.prepare(r, split) for r in files[path]] for path in args.ref]
    references = [list(refs) for refs in zip(*refs_by_file)]  # (N, num_refs)
    hyps = [rouge.prepare(h, split) for h in files[args.hyp]]
    per_example = rouge.score_examples(hyps, references, workers=args.workers)

    report = {
        "hyp": args.hyp,
        "refs": args.ref,
        "examples": len(hyps),
        "empty_hypotheses": count_empty(files[args.hyp]),
        "empty_references": sum(count_empty(files[path]) for path in args.ref),
        "sentence_split": args.sentence_split,
        "scorer": "rouge-score (stemmed)",
        "scores": summarize(per_example, args.bootstrap, args.seed),
    }
    if args.perl:
        report["scorer"] = "ROUGE-1.5.5 -c 95 -r 1000 -n 2 -m"
        report["scores"] = perl_rouge(hyps, references)
    if args.compare:
        report["compare"] = compare(args, files, references, split, per_example)
    return report


def compare(args, files, references, split, per_example_a) -> Dict:
    """Scores system B and tests each metric's difference with approximate randomization."""
    hyps_b = [rouge.prepare(h, split) for h in files[args.compare]]
    per_example_b = rouge.score_examples(hyps_b, references, workers=args.workers)
    p_values = {
        metric: approximate_randomization(per_example_a[metric], per_example_b[metric], args.trials, args.seed)
        for metric in rouge.METRICS
    }
    return {
        "hyp": args.compare,
        "empty_hypotheses": count_empty(files[args.compare]),
        "scores": summarize(per_example_b, args.bootstrap, args.seed),
        # A - B on the per-example rouge-score numbers that the test compares.
        "difference": {m: 100.0 * float(per_example_a[m].mean() - per_example_b[m].mean()) for m in rouge.METRICS},
        "p_values": p_values,
        "trials": args.trials,
    }


def format_report(report: Dict) -> str:
    lines = [
        f"{report['examples']} examples; empty hypotheses: {report['empty_hypotheses']}; "
        f"empty references: {report['empty_references']}; scorer: {report['scorer']}",
        f"{'metric':<26}{'F1':>8}   95% CI",
    ]
    for metric, label in LABELS.items():
        s = report["scores"].get(metric)
        if s is None:  # ROUGE-1.5.5's ROUGE-L is summary-level only
            lines.append(f"{label:<26}{'-':>8}   not computed by this scorer")
            continue
        lines.append(f"{label:<26}{s['f']:8.2f}   [{s['ci_low']:.2f}, {s['ci_high']:.2f}]")
    if "compare" in report:
        cmp = report["compare"]
        lines.append(
            f"\nA = {report['hyp']}   B = {cmp['hyp']} (empty hypotheses: {cmp['empty_hypotheses']}); "
            f"approximate randomization, {cmp['trials']} trials"
        )
        lines.append(f"{'metric':<26}{'B F1':>8}{'A - B':>9}{'p-value':>10}")
        for metric, label in LABELS.items():
            if metric not in cmp["scores"]:
                continue
            b = cmp["scores"][metric]["f"]
            lines.append(f"{label:<26}{b:8.2f}{cmp['difference'][metric]:9.2f}{cmp['p_values'][metric]:10.4f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = score_parser().parse_args(argv)
    try:
        report = run(args)
    except ScoreInputError as err:
        print(f"pagesum-score: error: {err}", file=sys.stderr)
        return 2
    except RuntimeError as err:  # e.g. the Perl script's dependencies are missing
        print(f"pagesum-score: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
