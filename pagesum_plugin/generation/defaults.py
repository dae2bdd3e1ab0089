"""Generation defaults per dataset: the papers' decoding settings, in one table.

The recipes' generate stage, validation ROUGE (``--eval-rouge``) and ``summarize()`` all read
it; a call or a command line still overrides any value. Lengths count summary tokens (see
``page_sequence_generator.py``). A rival system whose authors decoded a dataset otherwise has
a row of its own (``SYSTEMS``, keyed by the registered model name and the dataset).

    python pagesum_plugin/generation/defaults.py arxiv          # prints the fairseq-generate flags
    python pagesum_plugin/generation/defaults.py govreport hepos

It imports only the standard library, so the recipes run it as a script.
"""

import sys
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GenerationDefaults:
    beam: int = 4
    lenpen: float = 2.0
    no_repeat_ngram_size: int = 3
    min_len: int = 1
    max_len_b: int = 256

    def fairseq_flags(self) -> list:
        return ["--beam", str(self.beam), "--lenpen", str(self.lenpen),
                "--no-repeat-ngram-size", str(self.no_repeat_ngram_size),
                "--min-len", str(self.min_len), "--max-len-a", "0", "--max-len-b", str(self.max_len_b)]

    def as_kwargs(self) -> dict:
        return asdict(self)


# Beam 4, length penalty 2.0 and trigram blocking throughout (the PageSum paper, following
# BART); summary lengths in BPE tokens per dataset, as the authors decoded them.
DATASETS = {
    "arxiv": GenerationDefaults(min_len=100, max_len_b=350),
    "pubmed": GenerationDefaults(min_len=150, max_len_b=400),
    "govreport": GenerationDefaults(min_len=500, max_len_b=900),
    "multinews": GenerationDefaults(min_len=150, max_len_b=400),
    "aclsum": GenerationDefaults(min_len=60, max_len_b=160),  # the CPU demo's abstracts
    # HED's Table 1 datasets, read through the jsonl reader; the paper states no decoding
    # lengths: single-sentence WCEP summaries (28 words on average) as fairseq's BART decodes
    # XSum's, Multi-XScience's related-work paragraphs (105 words) capped at about twice that
    "wcep": GenerationDefaults(beam=6, lenpen=1.0, min_len=10, max_len_b=60),
    "multixscience": GenerationDefaults(min_len=50, max_len_b=256),
    "default": GenerationDefaults(),
}

# (registered model, dataset): where a rival's authors decoded a dataset otherwise
SYSTEMS = {
    ("hepos", "govreport"): GenerationDefaults(min_len=100, max_len_b=800),  # LongDocSum's longbart_decode.py
}


def for_dataset(name: str, system: str = "") -> GenerationDefaults:
    """The defaults of dataset ``name`` (a corpus's ``meta.json`` ``dataset``) for model
    ``system`` (its registered name; any: the dataset's row); unknown: ``default``."""
    return SYSTEMS.get((system, name)) or DATASETS.get(name, DATASETS["default"])


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(f"usage: python defaults.py DATASET [SYSTEM]  ({', '.join(DATASETS)})")
    print(" ".join(for_dataset(*sys.argv[1:]).fairseq_flags()))
