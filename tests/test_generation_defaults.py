"""One table of generation defaults per dataset, read by every decoding path."""

import os
import subprocess

from builders.cli import BIN_DIR
from pagesum_plugin.generation.defaults import DATASETS, for_dataset

DECODING_FLAGS = os.path.join(BIN_DIR, "pagesum-decoding-flags")  # what the recipes' generate stage runs


def test_every_dataset_decodes_with_the_papers_beam_length_penalty_and_trigram_blocking():
    assert all((d.beam, d.lenpen, d.no_repeat_ngram_size) == (4, 2.0, 3) for d in DATASETS.values())


def test_summary_lengths_are_each_datasets_own():
    lengths = {name: (d.min_len, d.max_len_b) for name, d in DATASETS.items() if name != "default"}
    assert lengths == {"arxiv": (100, 350), "pubmed": (150, 400), "govreport": (500, 900),
                       "multinews": (150, 400), "aclsum": (60, 160)}


def test_an_unknown_dataset_gets_the_default_row():
    assert for_dataset("jsonl") == DATASETS["default"]


def test_segments_are_decoded_with_the_datasets_search_and_their_own_lengths():
    """AWESOME: a segment that no reference sentence went to has an empty target, so its
    summary may end at once."""
    segment = for_dataset("govreport", per_segment=True)
    assert (segment.beam, segment.lenpen, segment.no_repeat_ngram_size) == (4, 2.0, 3)
    assert (segment.min_len, segment.max_len_b) == (0, 256)


def test_the_recipes_command_prints_fairseq_generate_flags():
    out = subprocess.run([DECODING_FLAGS, "govreport"], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["--beam", "4", "--lenpen", "2.0", "--no-repeat-ngram-size", "3", "--min-len", "500",
                   "--max-len-a", "0", "--max-len-b", "900"]
