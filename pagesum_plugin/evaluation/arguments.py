"""The command lines of the evaluation commands: ``pagesum-score``, ``pagesum-baseline`` and
``pagesum-plot``.

Only the standard library and the corpus's names (``corpus.options``) are imported here, so that
``--help`` and a usage error answer before NLTK, numpy or matplotlib load (``pagesum_commands``).
Each command's module (``score``, ``baselines``, ``plots``) parses its arguments with these too.
"""

import argparse

from pagesum_plugin.corpus.options import INPUT_FORMATS

BASELINE = "``pagesum-baseline``: Lead-k and greedy-ROUGE Oracle extractive summaries."
PLOT = "``pagesum-plot``: the paper's analysis figures as PNG files."

SCORE = """\
Scores one-line-per-example hypothesis files against reference files.

Default metric: ROUGE-1, ROUGE-2, sentence-level ROUGE-L (rougeL: one LCS over the whole
summary, as HED's paper reports it) and summary-level ROUGE-L (rougeLsum, as PageSum's), F1 x 100,
computed exactly as rouge-score's RougeScorer(use_stemmer=True): text is lowercased,
every character outside [a-z0-9] separates tokens (so punctuation and non-ASCII
letters are dropped, as in ROUGE-1.5.5), words longer than 3 characters are Porter
stemmed. For rougeLsum each line is cut into sentences by the project's offline
Punkt splitter (preprocess.sentences.split_sentences); --sentence-split none
instead treats every line as one sentence. With several --ref files each
hypothesis takes its best-matching reference per metric. The score of a corpus is
the mean F1 over examples, with a bootstrap 95% confidence interval.
"""


def score_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagesum-score", description=SCORE, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hyp", required=True, help="hypotheses, one example per line")
    parser.add_argument("--ref", required=True, action="append", help="references, one per line (repeatable)")
    parser.add_argument("--compare", metavar="HYP_B", help="second system: paired approximate randomization test")
    parser.add_argument("--perl", action="store_true", help="score with ROUGE-1.5.5 (-c 95 -r 1000 -n 2 -m)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--sentence-split", choices=["punkt", "none"], default="punkt", help="sentences for rougeLsum (default: punkt)"
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default: 1000)")
    parser.add_argument("--trials", type=int, default=10000, help="randomization trials (default: 10000)")
    parser.add_argument("--seed", type=int, default=1, help="seed of bootstrap and randomization")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    return parser


def baseline_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-baseline", description=BASELINE)
    parser.add_argument("--input", required=True, help="jsonl file, or a paged data directory (with --split)")
    parser.add_argument("--split", help="split of a paged data directory (train / valid / test)")
    parser.add_argument("--input-format", default="jsonl", choices=INPUT_FORMATS,
                        help="format of a non-paged --input (default: jsonl)")
    parser.add_argument("--method", choices=["lead", "oracle"], required=True)
    parser.add_argument("--k", type=int, default=3, help="sentences of Lead-k (default: 3)")
    parser.add_argument("--max-sentences", type=int, default=None, help="cap on Oracle sentences (default: none)")
    parser.add_argument("--out", required=True, help="output file, one summary per line")
    parser.add_argument("--ref-out", help="also write the references, one per line, in the same order")
    return parser


def plot_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-plot", description=PLOT)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, help_text):  # pagesum_plugin.evaluation.plots runs it by this name
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--out", required=True, help="PNG file to write")
        p.add_argument("--json", action="store_true", help="print the numbers behind the plot as JSON")
        return p

    def data_options(p):
        p.add_argument("--input", help="jsonl file, or a paged data directory (with --split)")
        p.add_argument("--split", help="split of a paged data directory")
        p.add_argument("--input-format", default="jsonl", choices=INPUT_FORMATS,
                       help="format of a non-paged --input (default: jsonl)")
        p.add_argument("--max-docs", type=int, default=None, help="use only the first N documents")

    p = command("page-importance", "heatmap of page weights over decoding steps (Fig. 3)")
    p.add_argument("--weights", required=True, help="page-weights JSON lines from the generator")
    p.add_argument("--id", required=True, help="the example's id in the input (the weights file's \"id\")")

    p = command("locality", "sentence similarity against distance (Fig. 1)")
    data_options(p)
    p.add_argument("--max-distance", type=int, default=50, help="largest sentence distance shown (default: 50)")
    p.add_argument("--max-sentences", type=int, default=None, help="use only the first N sentences of a document")
    p.add_argument("--device", default="cpu")

    p = command("dependencies", "distances of interdependent sentence pairs (Fig. 4)")
    data_options(p)
    p.add_argument("--t1", type=float, default=20.0, help="Eq. 15 threshold (default: 20)")
    p.add_argument("--t2", type=float, default=10.0, help="Eq. 16 threshold (default: 10)")
    p.add_argument("--bins", type=int, default=10)

    p = command("coherence", "semantic coherence by BERT next-sentence prediction (Eq. 11)")
    data_options(p)
    p.add_argument("--hyp", help="summaries to score, one per line (else the references of --input)")
    p.add_argument("--model", required=True, help="local BertForNextSentencePrediction directory")
    p.add_argument("--device", default="cpu")
    return parser
