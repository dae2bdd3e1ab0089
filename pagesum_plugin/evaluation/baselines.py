"""``pagesum-baseline``: Lead-k and greedy-ROUGE Oracle extractive summaries.

    pagesum-baseline --input test.jsonl --method lead --k 3 --out lead3.hypo
    pagesum-baseline --input DATA --split test --method oracle --out oracle.hypo

Writes one summary per line, in input order, ready for ``pagesum-score``.
"""

import sys
from contextlib import ExitStack

from pagesum_plugin.corpus.errors import InputError
from pagesum_plugin.atomic import atomic_path
from pagesum_plugin.evaluation.arguments import baseline_parser
from pagesum_plugin.evaluation.data import iter_documents
from pagesum_plugin.evaluation.extractive import lead, oracle


def main(argv=None) -> int:
    args = baseline_parser().parse_args(argv)
    written = empty = 0
    try:
        documents = iter_documents(args.input, args.split, args.input_format)
        with ExitStack() as files:
            def output(path):  # written under a temporary name, renamed when every document is in
                return files.enter_context(open(files.enter_context(atomic_path(path)), "w",
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
