"""The command lines of the recipes' commands that drive torch or matplotlib:
``pagesum-compare-fit``, ``pagesum-compare-report`` and ``pagesum-make-figures``.

Nothing heavy is imported here (``comparison.systems`` reads YAML only), so that ``--help`` and a
usage error answer before torch, fairseq and matplotlib load (``pagesum_commands``); each
command's module parses its arguments with these too.
"""

import argparse
from pathlib import Path

from pagesum_recipes.comparison.systems import MODEL_SIZES

FIT, REPORT, FIGURES = "pagesum-compare-fit", "pagesum-compare-report", "pagesum-make-figures"
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
