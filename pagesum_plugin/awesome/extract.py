"""Salient sentences predicted by a trained extractor, once, into the data directory.

    python -m pagesum_plugin.awesome.extract DATA --path CHECKPOINT [--splits train valid test]
        [--threshold 0.5] [--cpu]

A sentence is salient when the extractor gives it a probability above ``--threshold``.
Writes ``{split}.salient.extractor.npy`` (see ``cache.py``), read by
``--salient-sentences extractor``; where oracle labels exist, prints the extractor's
precision, recall and F1 against them.
"""

import argparse
import sys

import numpy as np
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils

from ..corpus.format import CorpusFormatError, CorpusMeta, CorpusSplit, EncodedDocument, replaced_when_written
from ..criterions.salient_extraction import sentence_probabilities
from .cache import salient_path
from .data import sentence_inputs

PROG = "python -m pagesum_plugin.awesome.extract"
DEFAULT_THRESHOLD = 0.5


def load_extractor(path: str, data_dir: str):
    """(model, task) of an extractor checkpoint (``fairseq-train --task salient_extraction``),
    its dictionary read from ``data_dir``; the model in eval mode, on the CPU."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides={"data": str(data_dir)})
    return models[0].eval(), task


class SalientExtractor:
    """A trained extractor applied to one encoded document at a time (what ``summarize()``
    uses for the salient sentences of a raw document): the sentences whose probability
    exceeds ``threshold`` are salient, exactly as this command marks a stored document's."""

    def __init__(self, model, task, threshold: float = DEFAULT_THRESHOLD):
        self.model, self.task, self.threshold = model.eval(), task, threshold

    @classmethod
    def from_checkpoint(cls, path: str, data_dir: str, threshold: float = DEFAULT_THRESHOLD) -> "SalientExtractor":
        return cls(*load_extractor(path, data_dir), threshold=threshold)

    def to(self, device) -> "SalientExtractor":
        self.model.to(device)
        return self

    @torch.no_grad()
    def predict(self, document: EncodedDocument) -> np.ndarray:
        """(n_sentences,) bool: every sentence (unit) of ``document``, salient or not."""
        dictionary = self.task.dictionary
        sentences = sentence_inputs(document, dictionary.bos(), dictionary.eos(), self.task.cfg.max_sentence_tokens)
        device = next(self.model.parameters()).device
        src_tokens = data_utils.collate_tokens(sentences, dictionary.pad()).to(device)
        logits, padding = self.model(src_tokens, torch.tensor([len(sentences)], device=device))
        return (sentence_probabilities(logits, padding) > self.threshold).cpu().numpy()


@torch.no_grad()
def predict_split(model, task, split: str, threshold: float, device: torch.device, batch_size: int) -> np.ndarray:
    """(n_units,) uint8: 1 where the extractor's probability exceeds ``threshold``."""
    corpus = CorpusSplit(task.cfg.data, split)
    dataset = task.extraction_dataset(corpus)
    picked = []
    for first in range(0, len(dataset), batch_size):
        batch = dataset.collater([dataset[i] for i in range(first, min(first + batch_size, len(dataset)))])
        net_input = {k: v.to(device) for k, v in batch["net_input"].items()}
        logits, padding = model(**net_input)
        picked.append((sentence_probabilities(logits, padding) > threshold).cpu().numpy())
    return np.concatenate(picked).astype(np.uint8) if picked else np.zeros(0, dtype=np.uint8)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("data", help="data directory written by pagesum-preprocess")
    parser.add_argument("--path", required=True, help="the extractor's checkpoint (fairseq-train --task salient_extraction)")
    parser.add_argument("--splits", nargs="+", help="splits to label (default: every split of the corpus)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="probability above which a sentence is salient")
    parser.add_argument("--batch-size", type=int, default=1, help="documents per batch")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is visible")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu else "cpu")
    try:
        meta = CorpusMeta.load(args.data)
        model, task = load_extractor(args.path, args.data)
        model = model.to(device)
        for split in args.splits or meta.splits:
            labels = predict_split(model, task, split, args.threshold, device, args.batch_size)
            with replaced_when_written(salient_path(args.data, split, "extractor")) as partial:
                np.save(partial, labels)
            line = f"{PROG}: {split}: {int(labels.sum())} of {len(labels)} sentences salient"
            oracle = salient_path(args.data, split, "oracle")
            if oracle.exists():
                gold = np.load(oracle).astype(bool)
                tp = int((gold & labels.astype(bool)).sum())
                p, r = tp / max(int(labels.sum()), 1), tp / max(int(gold.sum()), 1)
                line += f"; against the oracle P {100 * p:.2f} R {100 * r:.2f} F1 {200 * p * r / max(p + r, 1e-12):.2f}"
            print(line + f" -> {salient_path(args.data, split, 'extractor')}")
    except (CorpusFormatError, ValueError, OSError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
