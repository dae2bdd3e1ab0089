"""One table of generation defaults per dataset, read by every decoding path."""

import subprocess
import sys

from pagesum_plugin.generation import defaults
from pagesum_plugin.generation.defaults import DATASETS, for_dataset

DEFAULTS_SCRIPT = defaults.__file__  # runs on its own, without importing fairseq


def test_every_dataset_decodes_with_the_papers_beam_length_penalty_and_trigram_blocking():
    assert all((d.beam, d.lenpen, d.no_repeat_ngram_size) == (4, 2.0, 3) for d in DATASETS.values())


def test_summary_lengths_are_each_datasets_own():
    lengths = {name: (d.min_len, d.max_len_b) for name, d in DATASETS.items() if name != "default"}
    assert lengths == {"arxiv": (100, 350), "pubmed": (150, 400), "govreport": (500, 900),
                       "multinews": (150, 400), "aclsum": (60, 160)}


def test_an_unknown_dataset_gets_the_default_row():
    assert for_dataset("jsonl") == DATASETS["default"]


def test_the_script_prints_fairseq_generate_flags():
    out = subprocess.run([sys.executable, DEFAULTS_SCRIPT, "govreport"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["--beam", "4", "--lenpen", "2.0", "--no-repeat-ngram-size", "3", "--min-len", "500",
                   "--max-len-a", "0", "--max-len-b", "900"]
