"""The command lines of the recipes' commands that drive torch or matplotlib, or read the aclsum
papers: ``pagesum-compare-fit``, ``pagesum-compare-report``, ``pagesum-make-figures``, and the
demo's ``pagesum-demo-data`` and ``pagesum-demo-report``.

Nothing heavy is imported here (``comparison.systems`` reads YAML only), so that ``--help`` and a
usage error answer before torch, fairseq and matplotlib load (``pagesum_commands``); each
command's module parses its arguments with these too.
"""

import argparse
from pathlib import Path

from pagesum_recipes.comparison.systems import MODEL_SIZES

FIT, REPORT, FIGURES = "pagesum-compare-fit", "pagesum-compare-report", "pagesum-make-figures"
DEMO_DATA, DEMO_REPORT = "pagesum-demo-data", "pagesum-demo-report"
DEMO_SUMMARIES = "extract (the opening of the page most like the abstract), title, or N (the abstract's first N sentences)"
FIT_DESCRIPTION = "The fit stage of the comparison: every system's longest input within a memory budget."
REPORT_DESCRIPTION = ("The report stage of the comparison: one table, two figures and a summary, from the files the "
                      "other stages wrote.")
FIGURES_DESCRIPTION = "Regenerates the README's figures from the ACL papers that the ``aclsum`` package ships."


def fit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=FIT, description=FIT_DESCRIPTION)
    parser.add_argument("data", help="the corpus, written by pagesum-preprocess")
    parser.add_argument("--compare-config", required=True, help="recipes/config/compare.yaml")
    parser.add_argument("--systems", nargs="+", required=True)
    parser.add_argument("--budget-mb", type=float, required=True, help="MB (2^20 bytes) of tensor memory")
    parser.add_argument("--init-checkpoint", required=True, help="the checkpoint training starts from (not loaded)")
    parser.add_argument("--out-dir", required=True, type=Path, help="writes OUT_DIR/<system>/fit.json")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--fp16", action="store_true", help="mixed precision (GPU)")
    parser.add_argument("--model-size", choices=MODEL_SIZES, help="every system's architecture at this size")
    parser.add_argument("--dry-run", action="store_true", help="compare.yaml's toy sizes")
    return parser


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=REPORT, description=REPORT_DESCRIPTION)
    parser.add_argument("out", type=Path, help="the comparison's output folder")
    parser.add_argument("--data", required=True, type=Path, help="the corpus (its meta.json names the dataset)")
    parser.add_argument("--systems", nargs="+", required=True, help="the systems compared, in the table's order")
    parser.add_argument("--reference", required=True, help="the system the others were tested against")
    parser.add_argument("--significance", type=float, default=0.05, help="p-value below which a difference is marked")
    return parser


def figures_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=FIGURES, description=FIGURES_DESCRIPTION)
    parser.add_argument("--out-dir", default="docs/figures")
    parser.add_argument("--papers", type=int, default=20, help="papers for the locality curve (default: 20)")
    parser.add_argument("--page-weights", help="page-weights file of a model run on aclsum papers")
    parser.add_argument("--id", type=int, default=0, help="example shown in the page-importance heatmap")
    parser.add_argument("--nsp-model", help="local BertForNextSentencePrediction directory")
    return parser


def demo_data_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=DEMO_DATA, description="The demo's data: the 250 aclsum papers split by file name, as JSON lines with the "
        "summary to learn and their abstracts beside them, and the copying corpus (recipes/demo_data.py).")
    parser.add_argument("papers", type=Path, help="folder for {train,valid,test}.jsonl and .abstract.txt")
    parser.add_argument("copy", type=Path, help="folder for the copying corpus, {train,valid}.jsonl")
    parser.add_argument("--summary", default="extract", help=DEMO_SUMMARIES)
    parser.add_argument("--max-pages", type=int, default=8, help="the sections kept as pages (default: 8)")
    return parser


def demo_report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=DEMO_REPORT, description="The demo's report: what ran, the scores, and a verdict on whether the model "
        "learned to read its papers (recipes/demo_report.py).")
    parser.add_argument("data", type=Path, help="the papers' data directory (pagesum-preprocess)")
    parser.add_argument("run", type=Path, help="the run's folder: summaries, page weights, scores")
    parser.add_argument("logs", type=Path, help="the stages' logs (train-copy.log, train.log)")
    parser.add_argument("--seconds", type=int, required=True, help="the demo's time so far")
    parser.add_argument("--updates", type=int, required=True, help="the summary stage's --max-update")
    parser.add_argument("--what", required=True, help="what the summary is, in words")
    parser.add_argument("--abstracts", type=Path, required=True, help="the test papers' abstracts, one a line")
    return parser
