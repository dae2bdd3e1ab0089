"""Generation defaults per dataset: every decoding setting of the papers, in one table.

Validation ROUGE (``--eval-rouge``), ``summarize()`` and the recipes' generate stage
(``pagesum-decoding-flags``) all read it; a call or a command line still overrides any value.
Lengths count summary tokens (see ``page_sequence_generator.py``). A task's own settings are
its dataset's row, per segment for a segment-by-segment task (AWESOME), with the task's
``--top-pages`` (``tasks/paged_summarization.py``). A rival system whose authors decoded a
dataset otherwise has a row of its own (``SYSTEMS``, keyed by the registered model name and the
dataset).
"""

import numbers
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict

from ..errors import SettingError


@dataclass(frozen=True)
class GenerationDefaults:
    beam: int = 4
    lenpen: float = 2.0
    no_repeat_ngram_size: int = 3
    min_len: int = 1
    max_len_b: int = 256
    top_pages: int = 0  # decode only the k pages of highest confidence (0: every page)

    def fairseq_flags(self) -> list:
        """The search settings as ``fairseq-generate`` flags (``--top-pages`` is the task's own)."""
        return ["--beam", str(self.beam), "--lenpen", str(self.lenpen),
                "--no-repeat-ngram-size", str(self.no_repeat_ngram_size),
                "--min-len", str(self.min_len), "--max-len-a", "0", "--max-len-b", str(self.max_len_b)]

    def generator_kwargs(self) -> dict:
        """The settings as the arguments of the page generators (``page_sequence_generator.py``)."""
        return dict(beam_size=self.beam, len_penalty=self.lenpen, min_len=self.min_len, max_len_b=self.max_len_b,
                    no_repeat_ngram_size=self.no_repeat_ngram_size, top_pages=self.top_pages)

    def as_kwargs(self) -> dict:
        return asdict(self)


# The least value of each whole-number setting (lenpen may be any number): beam 0 would divide by zero
# in the search, and a negative top_pages would decode every page unsaid
LEAST = {"beam": 1, "no_repeat_ngram_size": 0, "min_len": 0, "max_len_b": 0, "top_pages": 0}


def check_settings(given: Dict[str, object], named: Callable[[str, object], str],
                   least: Dict[str, int] = LEAST) -> None:
    """Refuse, in one line, a setting of ``given`` the search cannot use: one of ``least`` that is
    not a whole number of at least its value, or any other that is not a number. ``named`` writes
    a setting as the user gave it (``--beam 0``, ``beam=0``)."""
    for setting, value in given.items():
        kind, words = (numbers.Integral, "a whole number") if setting in least else (numbers.Real, "a number")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SettingError(f"{named(setting, value)}: must be {words}")
        if setting in least and value < least[setting]:
            raise SettingError(f"{named(setting, value)}: must be at least {least[setting]}")


# Beam 4, length penalty 2.0 and trigram blocking throughout (the PageSum paper, following
# BART); summary lengths in BPE tokens per dataset, the authors' gen_min_len and gen_max_len
# (their generate call allows one token fewer at each end: docs/systems/pagesum.md).
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
    # LongDocSum's longbart_decode.py (its gov_decode.py decodes 0 to 1,024: docs/systems/hepos.md)
    ("hepos", "govreport"): GenerationDefaults(min_len=100, max_len_b=800),
}

# Per segment (AWESOME decodes every segment on its own), in summary tokens, with the dataset's
# search: a segment that no reference sentence went to has an empty target, so its summary may
# end at once; the paper does not state its decoding lengths.
SEGMENT_LENGTHS = dict(min_len=0, max_len_b=256)


def for_dataset(name: str, system: str = "", per_segment: bool = False) -> GenerationDefaults:
    """The defaults of dataset ``name`` (a corpus's ``meta.json`` ``dataset``; unknown:
    ``default``) for model ``system`` (its registered name; any other: the dataset's row), with
    the per-segment lengths when ``per_segment``."""
    defaults = SYSTEMS.get((system, name)) or DATASETS.get(name, DATASETS["default"])
    return replace(defaults, **SEGMENT_LENGTHS) if per_segment else defaults
