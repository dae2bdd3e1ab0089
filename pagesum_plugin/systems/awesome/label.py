"""Greedy-oracle salient-sentence labels of a stored corpus, once, into the data directory.

    pagesum-awesome-label DATA [--splits train valid test] [--workers N]

Every unit (sentence) is decoded with the corpus's codec; the Oracle of
``pagesum-baseline`` picks the sentences that greedily maximize ROUGE-1 + ROUGE-2 F1
against the reference. Writes ``{split}.salient.oracle.npy`` (see ``cache.py``): the
extractor's training labels, and the salient sentences of ``--salient-sentences oracle``.
"""

import sys
from concurrent.futures import ProcessPoolExecutor
from typing import List, Tuple

import numpy as np

from ...corpus.codec import TextCodec, unit_texts
from ...corpus.format import CorpusFormatError, CorpusMeta
from ...corpus.storage import CorpusSplit
from .arguments import LABEL as PROG, label_parser
from .cache import save_salient
from .oracle import oracle_labels

CHUNK = 32  # examples per worker task

_worker_state: dict = {}


def _init_worker(data_dir: str, split: str) -> None:
    _worker_state["codec"] = TextCodec.from_data_dir(data_dir)
    _worker_state["corpus"] = CorpusSplit(data_dir, split)
    _worker_state["references"] = _worker_state["corpus"].references()


def _label_examples(span: Tuple[int, int]) -> List[np.ndarray]:
    codec, corpus, references = _worker_state["codec"], _worker_state["corpus"], _worker_state["references"]
    return [oracle_labels(unit_texts(codec, corpus.document(i)), references[i]) for i in range(*span)]


def label_split(data_dir: str, split: str, workers: int) -> np.ndarray:
    """(n_units,) uint8 oracle labels of one split."""
    size = len(CorpusSplit(data_dir, split))
    spans = [(first, min(first + CHUNK, size)) for first in range(0, size, CHUNK)]
    if workers <= 1:
        _init_worker(data_dir, split)
        parts = [_label_examples(span) for span in spans]
    else:
        with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(data_dir, split)) as pool:
            parts = list(pool.map(_label_examples, spans))
    labels = [example for part in parts for example in part]
    return np.concatenate(labels).astype(np.uint8) if labels else np.zeros(0, dtype=np.uint8)


def main(argv=None) -> int:
    args = label_parser().parse_args(argv)
    try:
        meta = CorpusMeta.load(args.data)
        for split in args.splits or meta.splits:
            labels = label_split(args.data, split, args.workers)
            path = save_salient(args.data, split, "oracle", labels)
            examples = len(CorpusSplit(args.data, split))
            print(f"{PROG}: {split}: {int(labels.sum())} of {len(labels)} sentences salient "
                  f"({labels.sum() / max(examples, 1):.1f} per example) -> {path}")
    except (CorpusFormatError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
