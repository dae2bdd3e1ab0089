"""The command line of ``pagesum-convert``, with nothing but the standard library imported, so
that ``--help`` and a usage error answer before torch, fairseq and ``transformers`` load
(``pagesum_commands``); ``convert`` parses its arguments with it too."""

import argparse

CONVERT = "``pagesum-convert``: checkpoints between Hugging Face ``transformers`` BART and this plugin."
AUTHORS_STATE_DICT_NAME = "pagesum_state_dict.bin"  # to-hf: the PageSum authors' state dict (BART + lin)


def convert_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-convert", description=CONVERT)
    commands = parser.add_subparsers(dest="command", required=True)
    from_hf = commands.add_parser("from-hf", help="transformers BART (+ PageSum lin) -> this plugin")
    from_hf.add_argument("hf_dir", help="directory with config.json, weights, vocab.json and merges.txt")
    from_hf.add_argument("out_dir", help="writes model.pt, dict.txt, encoder.json, vocab.bpe")
    from_hf.add_argument("--state-dict", metavar="FILE",
                         help="weights to use instead of hf_dir's, e.g. a PageSum authors' state dict with lin.*")
    from_hf.add_argument("--gpt2-encoder-json", metavar="FILE",
                         help="GPT-2's encoder.json: dict.txt symbols become GPT-2 ids, as in fairseq's BART dict.txt")
    from_hf.add_argument("--page-decoding", choices=("page", "global"), default="page")
    to_hf = commands.add_parser("to-hf", help="this plugin -> transformers BART + PageSum authors' state dict")
    to_hf.add_argument("checkpoint", help="a PageSum fairseq checkpoint")
    to_hf.add_argument("out_dir", help="writes config.json, model.safetensors, " + AUTHORS_STATE_DICT_NAME)
    to_hf.add_argument("--data", metavar="DIR", help="the checkpoint's data directory (dict.txt, encoder.json, "
                                                     "vocab.bpe): writes vocab.json and merges.txt")
    return parser
