"""Documents as sentences, for baselines and plots, from dataset files or a stored corpus; and
one-line-per-example text files (hypotheses, references), for scores and plots.

* a dataset file (any input format): each unit (section, document of a cluster, or the
  plain text) is one part;
* a ``pagesum-preprocess`` directory: each group (section or source document) is one
  part, its sentences decoded from the stored units, so baselines read the document
  itself, not the pages a model reads (no section-name prefixes, no truncation).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import numpy as np

from pagesum_plugin.corpus.format import META_FILE, CorpusFormatError
from pagesum_plugin.corpus.readers import read_examples


class ScoreInputError(ValueError):
    """Bad or mismatched input files; the message names the file and line."""


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 file (one example per line; a final newline ends the last line)."""
    file = Path(path)
    if not file.is_file():
        raise ScoreInputError(f"{path}: no such file")
    data = file.read_bytes()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    texts = []
    for number, line in enumerate(lines, start=1):
        try:
            texts.append(line.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError as err:
            raise ScoreInputError(f"{path}:{number}: not valid UTF-8 ({err.reason} at byte {err.start})") from err
    return texts


@dataclass
class Document:
    id: str
    parts: List[List[str]]  # sentences of each unit / page, in document order
    summary: str

    @property
    def sentences(self) -> List[str]:
        return [s for part in self.parts for s in part]


def iter_documents(path: str, split: Optional[str] = None, input_format: str = "jsonl") -> Iterator[Document]:
    """Documents of ``split`` in a paged data directory, or of a dataset file (``split`` unset).

    ``input_format`` names the format of a dataset file or folder (any of
    ``preprocess.readers.INPUT_FORMATS``; ``aclsum`` reads a folder of S2ORC papers).
    """
    if Path(path).is_dir() and input_format != "aclsum":  # aclsum: the one format that is a folder
        yield from _stored_documents(path, split)
        return
    if split:
        raise ValueError(f"{path} is a file, but --split only applies to data directories")
    for example in read_examples(path, input_format):
        yield Document(example.id, [unit.sentence_list() for unit in example.units], example.summary)


def _stored_documents(data_dir: str, split: Optional[str]) -> Iterator[Document]:
    # Text files are read without torch or fairseq (the text-only commands); a data directory
    # needs them: optional, imported only here, for fairseq's binary format.
    from pagesum_plugin.corpus.codec import TextCodec
    from pagesum_plugin.corpus.storage import CorpusSplit

    if not (Path(data_dir) / META_FILE).exists():
        raise CorpusFormatError(f"{data_dir} is a folder without {META_FILE}: not a data directory")
    if not split:
        raise ValueError(f"{data_dir} is a data directory: give the split to read (--split)")
    codec = TextCodec.from_data_dir(data_dir)
    corpus = CorpusSplit(data_dir, split)
    for index, (example_id, reference) in enumerate(zip(corpus.example_ids(), corpus.references())):
        document = corpus.document(index)
        ends = np.cumsum(document.unit_length)
        parts: List[List[str]] = [[] for _ in range(document.num_groups)]
        for unit, (group, end, length) in enumerate(zip(document.unit_group, ends, document.unit_length)):
            parts[group].append(codec.decode(document.units[end - length: end]))
        yield Document(example_id, parts, reference)
