"""The report stage of the comparison: one table, two figures and a summary, from the files the
other stages wrote.

    pagesum-compare-report OUT --data DATA --systems pagesum_spatial ...
        --reference pagesum_spatial [--significance 0.05]

Reads, for every system, ``OUT/<system>/fit.json`` (tokens read, peak training memory and
training speed, from the fit stage), and for every system that fits the budget,
``OUT/<system>/generate.log`` (fairseq-generate's own count of summaries per second) and
``OUT/<system>/scores.json`` (pagesum-score: ROUGE with bootstrap intervals, and paired
approximate-randomization p-values against the reference).
A system missing any of them is an error naming the stage to run; a system that does not fit
the budget is a row that says so. Writes ``report.md``, ``report.json``,
``rouge_vs_memory.png``, ``tokens_vs_memory.png`` and ``summary.txt`` (what the recipe prints)
into OUT, each moved into place when complete.
"""

import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

from pagesum_plugin.atomic import write_atomically
from pagesum_plugin.corpus.format import META_FILE

from ..arguments import REPORT as PROG, report_parser
from .figures import METRIC_LABELS, rouge_against_memory, tokens_against_memory

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
FIGURE_METRICS = ("rouge1", "rouge2", "rougeLsum")
# fairseq-generate's closing line: "Translated 2 sentences (28 tokens) in 0.1s (38.63 sentences/s, ...)"
DECODING_SPEED = re.compile(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s")


class ReportError(ValueError):
    """A stage's output is missing or unreadable; the message names the file and the stage."""


def read_json(path: Path, stage: str) -> Dict:
    if not path.is_file():
        raise ReportError(f"{path} not found: run the {stage} stage")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}: not valid JSON ({err}): run the {stage} stage again") from None


def decoding_speed(log: Path) -> Dict[str, float]:
    """Summaries and seconds of fairseq-generate's search, as its log reports them."""
    if not log.is_file():
        raise ReportError(f"{log} not found: run the generate stage")
    found = DECODING_SPEED.findall(log.read_text(encoding="utf-8", errors="replace"))
    if not found:
        raise ReportError(f"{log}: no 'Translated N sentences' line: the generate stage did not finish")
    summaries, _, seconds, per_second = found[-1]
    return {"summaries": int(summaries.replace(",", "")), "seconds": float(seconds), "per_second": float(per_second)}


def mark(compare: Optional[Dict], metric: str, alpha: float) -> str:
    """↑ / ↓: significantly above / below the reference (p < alpha); empty otherwise."""
    if not compare or compare["p_values"][metric] >= alpha:
        return ""
    return "↑" if compare["difference"][metric] > 0 else "↓"


def system_row(out: Path, key: str, fitted: Dict, reference: str, alpha: float) -> Dict:
    row = {"system": key, "name": fitted["name"], "tokens": fitted["tokens"], "peak_mb": fitted["peak_mb"],
           "train_tokens_per_second": fitted["train_tokens_per_second"], "fits": fitted["tokens"] is not None,
           "consistent": fitted.get("consistent", True)}
    if not row["fits"]:
        return row
    scores = read_json(out / key / "scores.json", "score")
    compare = scores.get("compare") if key != reference else None
    if key != reference and compare is None:
        raise ReportError(f"{out / key / 'scores.json'} has no comparison with {reference}: run the score stage")
    row["decoding"] = decoding_speed(out / key / "generate.log")
    row["examples"] = scores["examples"]
    row["empty_hypotheses"] = scores["empty_hypotheses"]
    row["rouge"] = {m: {**scores["scores"][m], "p_value": compare["p_values"][m] if compare else None,
                        "mark": mark(compare, m, alpha)} for m in METRICS}
    return row


def markdown(record: Dict) -> str:
    header = ["system", "tokens read", "peak train MB", "train tokens/s", "decode summaries/s"]
    header += [METRIC_LABELS[m] for m in METRICS]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for row in record["rows"]:
        if not row["fits"]:
            lines.append(f"| {row['name']} | does not fit: {row['first_probe_tokens']:,} tokens need "
                         f"{row['first_probe_mb']} MB |" + " |" * (len(header) - 2))
            continue
        cells = [row["name"], f"{row['tokens']:,}", f"{row['peak_mb']:.1f}", f"{row['train_tokens_per_second']:,.0f}",
                 f"{row['decoding']['per_second']:.2f}"]
        for m in METRICS:
            r = row["rouge"][m]
            cells.append(f"{r['f']:.2f}{r['mark']} ({r['ci_low']:.2f}–{r['ci_high']:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe(record: Dict) -> List[str]:
    s = record["setup"]
    lines = [
        f"{s['dataset']}: {s['test_examples']} test examples; budget {s['budget_mb']:g} MB of tensor memory per "
        f"training step on {s['device']}; inputs tried in multiples of {s['unit']:,} tokens; batch {s['batch_size']} "
        f"per step.",
        "Tokens read, peak training memory and training speed (input tokens per second of one training step at "
        "the fitted length) come from the fit stage; decoding speed from fairseq-generate's log; ROUGE F1 from "
        "pagesum-score, with 95% bootstrap intervals; R-L is sentence-level, R-Lsum summary-level. "
        f"↑/↓: above/below {s['reference_name']} with p < {s['significance']} (paired approximate randomization).",
    ]
    if s["dry_run"]:
        lines.insert(0, "DRY RUN: toy sizes and two updates; these numbers show that the stages run, not how the "
                        "systems compare.")
    lines += [f"{row['name']}: a longer input needed less memory than a shorter one while fitting (see its fit.json); "
              f"its input may not be the longest that fits." for row in record["rows"] if not row["consistent"]]
    return lines


def build_record(out: Path, data: Path, systems: List[str], reference: str, alpha: float) -> Dict:
    meta = read_json(data / META_FILE, "preprocess")
    if reference not in systems:
        raise ReportError(f"the reference system {reference} is not among the systems: {' '.join(systems)}")
    fits = {key: read_json(out / key / "fit.json", "fit") for key in systems}
    budgets = {(f["budget_mb"], f["device"], f["unit"], f["batch_size"], f["dry_run"]) for f in fits.values()}
    if len(budgets) > 1:
        raise ReportError("the systems were fitted with different budgets, devices or units: run the fit stage again")
    fit = fits[reference]
    rows = []
    for key, fitted in fits.items():
        row = system_row(out, key, fitted, reference, alpha)
        if not row["fits"]:
            first = fitted["probes"][0]
            row["first_probe_tokens"] = first["tokens"]
            row["first_probe_mb"] = f"{first['peak_mb']:.1f}" if first["peak_mb"] is not None else "more than the device has"
        rows.append(row)
    return {
        "setup": {"dataset": meta.get("dataset"), "test_examples": meta.get("stats", {}).get("test", {}).get("examples"),
                  "budget_mb": fit["budget_mb"], "device": fit["device"], "unit": fit["unit"],
                  "batch_size": fit["batch_size"], "model_size": fit["model_size"], "dry_run": fit["dry_run"],
                  "reference": reference, "reference_name": fit["name"],
                  "significance": alpha},
        "rows": rows,
    }


def write_report(out: Path, record: Dict) -> str:
    """Every output of the report; returns the summary for the console."""
    fitting = [row for row in record["rows"] if row["fits"]]
    budget = record["setup"]["budget_mb"]
    rouge_against_memory(fitting, budget, FIGURE_METRICS, out / "rouge_vs_memory.png")
    tokens_against_memory(fitting, budget, out / "tokens_vs_memory.png")
    table = markdown(record)
    text = "\n\n".join(["# Every system side by side", "\n".join(describe(record)), table,
                        "![ROUGE against peak training memory](rouge_vs_memory.png)",
                        "![Tokens read against peak training memory](tokens_vs_memory.png)"]) + "\n"
    write_atomically(out / "report.json", json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    write_atomically(out / "report.md", text)
    outputs = ["report.md", "report.json", "rouge_vs_memory.png", "tokens_vs_memory.png", "commands.sh",
               "fit.*.log", "<system>/{fit.json,train.log,generate.log,test.hyp.txt,scores.json}"]
    summary = "\n".join([*describe(record), "", table, "", f"Outputs in {out}: " + ", ".join(outputs)]) + "\n"
    write_atomically(out / "summary.txt", summary)
    return summary


def main(argv=None) -> int:
    args = report_parser().parse_args(argv)
    try:
        record = build_record(args.out, args.data, args.systems, args.reference, args.significance)
    except ReportError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(write_report(args.out, record), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
