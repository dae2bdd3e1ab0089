"""Salient sentences predicted by a trained extractor, once, into the data directory.

    pagesum-awesome-extract DATA --path CHECKPOINT [--splits train valid test]
        [--threshold 0.5] [--cpu]

A sentence is salient when the extractor gives it a probability above ``--threshold``.
Writes ``{split}.salient.extractor.npy`` (see ``cache.py``), read by
``--salient-sentences extractor``; where oracle labels exist, prints the extractor's
precision, recall and F1 against them.
"""

import sys

import numpy as np
import torch

from ...corpus.format import CorpusFormatError, CorpusMeta
from .extraction_task import load_extractor, predict_split
from .arguments import EXTRACT as PROG, extract_parser
from .cache import salient_path, save_salient


def main(argv=None) -> int:
    args = extract_parser().parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    try:
        meta = CorpusMeta.load(args.data)
        model, task = load_extractor(args.path, args.data)
        model = model.to(device)
        for split in args.splits or meta.splits:
            labels = predict_split(model, task, split, args.threshold, device, args.batch_size)
            path = save_salient(args.data, split, "extractor", labels)
            line = f"{PROG}: {split}: {int(labels.sum())} of {len(labels)} sentences salient"
            oracle = salient_path(args.data, split, "oracle")
            if oracle.exists():
                gold = np.load(oracle).astype(bool)
                tp = int((gold & labels.astype(bool)).sum())
                p, r = tp / max(int(labels.sum()), 1), tp / max(int(gold.sum()), 1)
                line += f"; against the oracle P {100 * p:.2f} R {100 * r:.2f} F1 {200 * p * r / max(p + r, 1e-12):.2f}"
            print(line + f" -> {path}")
    except (CorpusFormatError, ValueError, OSError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
