"""The command line of ``pagesum-preprocess``: the splits it reads and every option, with their
defaults from the corpus's own settings (``pagesum_plugin.corpus.options``).

Nothing heavy is imported here, so that ``--help`` and a usage error answer before torch,
fairseq and NLTK load (``pagesum_commands``); ``cli`` parses its arguments with it too.
"""

import argparse

from pagesum_plugin.corpus.options import (INPUT_FORMATS, MAX_SUMMARY_TOKENS, SPATIAL_SPLITS, TOKENIZERS, VIEWS,
                                           ViewConfig)

DESCRIPTION = "``pagesum-preprocess``: a corpus in its native format -> a tokenized corpus of sentence units."
SPLITS = ("train", "valid", "test")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-preprocess", description=DESCRIPTION,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = parser.add_argument_group("data")
    for split in SPLITS:
        data.add_argument(f"--{split}pref", metavar="PATH",
                          help=f"{split} split: a file, or a folder of S2ORC JSON files for aclsum")
    data.add_argument("--input-format", required=True, choices=INPUT_FORMATS)
    data.add_argument("--dataset", metavar="NAME",
                      help="the dataset's name in meta.json, which picks its row of the generation defaults "
                      "(pagesum_plugin/generation/defaults.py), e.g. wcep for WCEP read with --input-format jsonl "
                      "(default: the input format)")
    data.add_argument("--destdir", required=True, help="output data directory")
    data.add_argument("--skip-invalid", action="store_true",
                      help="skip bad examples (counted by reason) instead of stopping at the first one")
    view = parser.add_argument_group("default view (recorded in meta.json; the task's options override it)")
    view.add_argument("--view", "--locality", dest="view", default=ViewConfig.view, choices=VIEWS,
                      help="how pages are made from the stored sentences")
    view.add_argument("--num-pages", type=int, default=ViewConfig.num_pages, help="spatial, token: pages per example")
    view.add_argument("--max-pages", type=int, default=ViewConfig.max_pages,
                      help="discourse, document: most pages per example")
    view.add_argument("--spatial-split", default=ViewConfig.spatial_split, choices=SPATIAL_SPLITS,
                      help="spatial: 'authors' (n // k sentences per page, the rest on the last) or 'even'")
    view.add_argument("--max-page-tokens", type=int, default=ViewConfig.max_page_tokens,
                      help="tokens per page, <s> and </s> included")
    view.add_argument("--max-source-tokens", type=int, default=ViewConfig.max_source_tokens,
                      help="flat, documents: tokens of the whole input, specials included")
    view.add_argument("--max-summary-tokens", type=int, default=MAX_SUMMARY_TOKENS,
                      help="tokens per summary, <s> and </s> included")
    tokenizer = parser.add_argument_group("tokenizer")
    tokenizer.add_argument("--tokenizer", default="gpt2", choices=TOKENIZERS)
    tokenizer.add_argument("--gpt2-encoder-json", metavar="FILE", help="BART's encoder.json")
    tokenizer.add_argument("--gpt2-vocab-bpe", metavar="FILE", help="BART's vocab.bpe")
    tokenizer.add_argument("--gpt2-dict", metavar="FILE", help="BART's dict.txt")
    tokenizer.add_argument("--vocab-size", type=int, default=32000, help="sentencepiece vocabulary size")
    tokenizer.add_argument("--sentencepiece-model", metavar="FILE",
                           help="sentencepiece: reuse this trained model (another data directory's "
                           "sentencepiece.model) instead of training one on --trainpref, so that both data "
                           "directories share one dictionary and a model trained on one reads the other")
    run = parser.add_argument_group("run")
    run.add_argument("--workers", type=int, default=1)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser
