"""``pagesum-baseline``: Lead-k and greedy-ROUGE Oracle extractive summaries.

    pagesum-baseline --input test.jsonl --method lead --k 3 --out lead3.hypo
    pagesum-baseline --input DATA --split test --method oracle --out oracle.hypo

Writes one summary per line, in input order, ready for ``pagesum-score``.
"""

import argparse
import collections
import sys
from contextlib import ExitStack
from typing import List, Optional, Sequence

from pagesum_plugin.evaluation.data import iter_documents
from pagesum_plugin.evaluation.rouge import tokenize
from pagesum_plugin.corpus.errors import InputError
from pagesum_plugin.corpus.format import replaced_when_written
from pagesum_plugin.corpus.readers import INPUT_FORMATS
from rouge_score.scoring import fmeasure


def lead(sentences: Sequence[str], k: int) -> List[str]:
    """The first ``k`` sentences of the document."""
    return list(sentences[:k])


def _ngram_counts(tokens: Sequence[str], n: int) -> collections.Counter:
    return collections.Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def _f1(selected: collections.Counter, reference: collections.Counter) -> float:
    overlap = sum((selected & reference).values())
    return fmeasure(overlap / max(sum(selected.values()), 1), overlap / max(sum(reference.values()), 1))


def oracle(sentences: Sequence[str], summary: str, max_sentences: Optional[int] = None) -> List[str]:
    """Greedy Oracle: add the sentence that most raises ROUGE-1 F1 + ROUGE-2 F1; stop when none does.

    The selected sentences are returned in document order. N-grams never cross
    sentence boundaries, as in the usual extractive-oracle construction.
    """
    reference = [_ngram_counts(tokenize(summary), n) for n in (1, 2)]
    candidates = [[_ngram_counts(tokenize(s), n) for n in (1, 2)] for s in sentences]
    selected_grams = [collections.Counter(), collections.Counter()]
    chosen: List[int] = []
    best = 0.0
    limit = len(sentences) if max_sentences is None else max_sentences
    while len(chosen) < limit:
        gains = []
        for i, grams in enumerate(candidates):
            if i in chosen:
                continue
            score = sum(_f1(selected_grams[n] + grams[n], reference[n]) for n in (0, 1))
            gains.append((score, -i))
        if not gains:
            break
        score, neg_i = max(gains)  # ties go to the earlier sentence
        if score <= best:
            break
        best = score
        chosen.append(-neg_i)
        for n in (0, 1):
            selected_grams[n] += candidates[-neg_i][n]
    return [sentences[i] for i in sorted(chosen)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-baseline", description=__doc__.split("\n")[0])
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


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    written = empty = 0
    try:
        documents = iter_documents(args.input, args.split, args.input_format)
        with ExitStack() as files:
            def output(path):  # written under a temporary name, renamed when every document is in
                return files.enter_context(open(files.enter_context(replaced_when_written(path)), "w",
                                                encoding="utf-8"))

            out = output(args.out)
            refs = output(args.ref_out) if args.ref_out else None
            for doc in documents:
                if args.method == "lead":
                    picked = lead(doc.sentences, args.k)
                else:
                    picked = oracle(doc.sentences, doc.summary, args.max_sentences)
                empty += not picked
                out.write(" ".join(" ".join(s.split()) for s in picked) + "\n")
                if refs:
                    refs.write(" ".join(doc.summary.split()) + "\n")
                written += 1
    except (InputError, ValueError, OSError) as err:  # InputError names the file, line and field
        print(f"pagesum-baseline: error: {err}", file=sys.stderr)
        return 2
    # Empty outputs (documents without sentences) are written as empty lines, never dropped.
    print(f"pagesum-baseline: wrote {written} {args.method} summaries to {args.out} ({empty} empty)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
