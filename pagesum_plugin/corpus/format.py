"""The on-disk corpus: the one place that knows its file names, its layout and its metadata.

``pagesum-preprocess`` writes a tokenized corpus once per dataset and tokenizer. It holds
sentence *units* with their structure, never pages: every way of reading a document (a
*view*, see ``views.py``) is computed when the data loads.

Layout of ``DATA/`` (format version 2)::

    meta.json                    CorpusMeta: tokenizer, default view, statistics (versioned)
    dict.txt                     the fairseq dictionary
    encoder.json, vocab.bpe      GPT-2 BPE files          } the tokenizer, so that the
    sentencepiece.model          or a sentencepiece model } directory describes itself
    {split}.units.{bin,idx}      per example: every unit's ids, each with a leading space
    {split}.heads.{bin,idx}      per example: every unit's first word without that space
    {split}.names.{bin,idx}      per example: every group's "Section name:" ids
    {split}.summary.{bin,idx}    per example: the summary's ids (no <s> or </s>)
    {split}.structure.npz        per unit: length, group, head lengths; per group: name length
    {split}.ids.txt              example ids, one per line
    {split}.reference.txt        reference summaries, one per line

A *unit* is a sentence. A *group* is the section or source document it belongs to.
Byte-level BPE encodes " word" and "word" differently, so each unit is stored with a
leading space (how it reads after another sentence) plus the ids of its first word without
it (how it reads at the start of a page). A unit read at the start of a page is
``heads[u] + units[u][head_spaced[u]:]``; for sentencepiece both forms are the same and
the head lengths are 0.

Derived-data stages add files of their own beside these, named ``{split}.<kind>.<tag>.*``,
and each stage's own module owns them (AWESOME's: ``systems/awesome/cache.py``). They are optional,
made after preprocessing by the stage's commands, keyed by a model or a source, and versioned
by the stage, so that a stage can change its files without changing this format: no corpus is
preprocessed again for it, and this module never learns a system's files. Writing the
directory whole is the preprocessing pipeline's (``pagesum_preprocess.binarize.staged_directory``).
"""

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import List, Optional

import numpy as np

from ..atomic import write_atomically
from .options import MAX_SUMMARY_TOKENS, ViewConfig

FORMAT_VERSION = 2
# The directory's own files (the splits' are named {split}.<stream>.*): every module names them from here.
META_FILE = "meta.json"
DICT_FILE = "dict.txt"
GPT2_ENCODER_FILE = "encoder.json"  # GPT-2 BPE: token -> id
GPT2_MERGES_FILE = "vocab.bpe"  # GPT-2 BPE: the merges
GPT2_FILES = (GPT2_ENCODER_FILE, GPT2_MERGES_FILE)
SENTENCEPIECE_FILE = "sentencepiece.model"
DIRECTORY_FILES = (META_FILE, DICT_FILE, *GPT2_FILES, SENTENCEPIECE_FILE)
TOKEN_STREAMS = ("units", "heads", "names", "summary")  # fairseq mmap indexed datasets, one item per example
STRUCTURE_DTYPES = {  # {split}.structure.npz, compact on disk, int64 in memory
    "example_units": np.int64, "example_groups": np.int64, "unit_length": np.int32, "unit_group": np.int32,
    "head_spaced": np.uint16, "head_plain": np.uint16, "name_length": np.int32,
}


class CorpusFormatError(ValueError):
    """A data directory that is missing, incomplete or written in another layout."""


# --------------------------------------------------------------------------- metadata


@dataclass
class CorpusMeta:
    """``meta.json``: how the corpus was made, its default view and its statistics."""

    tokenizer: str  # "gpt2" | "sentencepiece" | "none" (ids written directly, as in tests)
    dataset: str = "default"  # the input format, which also names the generation defaults
    view: str = ViewConfig.view  # the default view (ViewConfig's settings); task options override it
    num_pages: int = ViewConfig.num_pages
    max_pages: int = ViewConfig.max_pages
    spatial_split: str = ViewConfig.spatial_split
    max_page_tokens: int = ViewConfig.max_page_tokens
    max_source_tokens: int = ViewConfig.max_source_tokens
    max_summary_tokens: int = MAX_SUMMARY_TOKENS
    dictionary_size: int = 0
    vocab_size: Optional[int] = None  # sentencepiece only
    splits: List[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # per split, from SplitStats.as_dict()
    format_version: int = FORMAT_VERSION

    def save(self, data_dir: str | Path) -> None:
        write_atomically(Path(data_dir) / META_FILE, json.dumps(asdict(self), indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, data_dir: str | Path) -> "CorpusMeta":
        path = Path(data_dir) / META_FILE
        if not path.exists():
            raise CorpusFormatError(f"{path} not found: {data_dir} is not a pagesum-preprocess data directory")
        raw = json.loads(path.read_text(encoding="utf-8"))
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise CorpusFormatError(
                f"{path}: format_version {version}, but this pagesum reads version {FORMAT_VERSION} "
                f"(sentence units, pages made at load time); run pagesum-preprocess again on the raw data"
            )
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


# --------------------------------------------------------------------------- one example, in memory


@dataclass
class EncodedDocument:
    """One example's units as ids: what a worker produces and what a split stores.

    ``units`` is every unit's spaced ids concatenated, split by ``unit_length``;
    ``heads`` the unspaced first words concatenated, split by ``head_plain``;
    ``names`` the groups' name ids concatenated, split by ``name_length``.
    """

    units: np.ndarray  # (sum(unit_length),)
    heads: np.ndarray  # (sum(head_plain),)
    names: np.ndarray  # (sum(name_length),)
    unit_length: np.ndarray  # (n_units,) spaced ids per unit
    unit_group: np.ndarray  # (n_units,) group of every unit, 0-based within the example
    head_spaced: np.ndarray  # (n_units,) ids of the first word with its space
    head_plain: np.ndarray  # (n_units,) ids of the first word without it
    name_length: np.ndarray  # (n_groups,)

    @property
    def num_groups(self) -> int:
        return len(self.name_length)


# --------------------------------------------------------------------------- one split, on disk


def stream_prefix(data_dir: str | Path, split: str, stream: str) -> str:
    """The path of a token stream's files without their ``.bin``/``.idx`` suffix."""
    return os.path.join(str(data_dir), f"{split}.{stream}")


def structure_path(data_dir: str | Path, split: str) -> Path:
    return Path(data_dir) / f"{split}.structure.npz"


def ids_path(data_dir: str | Path, split: str) -> Path:
    return Path(data_dir) / f"{split}.ids.txt"


def reference_path(data_dir: str | Path, split: str) -> Path:
    return Path(data_dir) / f"{split}.reference.txt"


def offsets(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


@dataclass
class SplitStructure:
    """The units and groups of every example of a split, as flat arrays (no token ids)."""

    example_units: np.ndarray  # (n_examples + 1,) offsets into the unit arrays
    example_groups: np.ndarray  # (n_examples + 1,) offsets into name_length
    unit_length: np.ndarray  # (n_units,) spaced ids per unit
    unit_group: np.ndarray  # (n_units,) group within the example
    head_spaced: np.ndarray  # (n_units,)
    head_plain: np.ndarray  # (n_units,)
    name_length: np.ndarray  # (n_groups,)

    @property
    def num_examples(self) -> int:
        return len(self.example_units) - 1

    @classmethod
    def of_document(cls, document: EncodedDocument) -> "SplitStructure":
        """The structure of a single in-memory example."""
        return cls(
            example_units=np.array([0, len(document.unit_length)], dtype=np.int64),
            example_groups=np.array([0, document.num_groups], dtype=np.int64),
            unit_length=np.asarray(document.unit_length, dtype=np.int64),
            unit_group=np.asarray(document.unit_group, dtype=np.int64),
            head_spaced=np.asarray(document.head_spaced, dtype=np.int64),
            head_plain=np.asarray(document.head_plain, dtype=np.int64),
            name_length=np.asarray(document.name_length, dtype=np.int64),
        )
