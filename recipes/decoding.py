"""The recipes' decoding flags: a dataset's row of the generation defaults, as ``fairseq-generate``
flags.

    pagesum-decoding-flags DATASET [--system MODEL] [--per-segment] [--dry-run]

The settings are the library's (``pagesum_plugin/generation/defaults.py``, which validation
ROUGE and ``summarize()`` read too); ``--system`` names the registered model, for a rival whose
authors decoded the dataset otherwise; ``--per-segment`` gives AWESOME's per-segment lengths.
``--dry-run`` is the recipes' ``DRY_RUN=1`` search: the same row with a beam of 2 and summaries
of at most 12 tokens and at least 2 (fewer where the row allows fewer), which proves that
decoding runs and chains, nothing more.
"""

import argparse
import sys
from dataclasses import replace
from typing import List

from pagesum_plugin.generation.defaults import DATASETS, GenerationDefaults, for_dataset

DRY_RUN_BEAM, DRY_RUN_MIN_LEN, DRY_RUN_MAX_LEN = 2, 2, 12


def dry_run_search(settings: GenerationDefaults) -> GenerationDefaults:
    """``settings`` at toy size: beam 2, at most 12 tokens, at least 2 unless the row allows fewer."""
    return replace(settings, beam=DRY_RUN_BEAM, min_len=min(settings.min_len, DRY_RUN_MIN_LEN),
                   max_len_b=DRY_RUN_MAX_LEN)


def decoding_flags(dataset: str, system: str = "", per_segment: bool = False, dry_run: bool = False) -> List[str]:
    settings = for_dataset(dataset, system, per_segment)
    return (dry_run_search(settings) if dry_run else settings).fairseq_flags()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-decoding-flags", description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help=f"a corpus's dataset ({', '.join(DATASETS)}; any other: default)")
    parser.add_argument("--system", default="", help="the registered model (hepos, hed, awesome, pagesum)")
    parser.add_argument("--per-segment", action="store_true", help="AWESOME's per-segment lengths")
    parser.add_argument("--dry-run", action="store_true", help="the recipes' DRY_RUN=1 toy search")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    print(" ".join(decoding_flags(args.dataset, args.system, args.per_segment, args.dry_run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
