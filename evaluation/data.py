"""One view of documents for baselines and plots, from ``jsonl`` files or paged data.

* ``jsonl``: the generic format, read by ``preprocess.readers.read_examples``; each
  unit (section, document of a cluster, or the plain text) is one part.
* paged data: a ``pagesum-preprocess`` directory, read by
  ``preprocess.paged_reader.read_paged_split``; each page is one part (its text is
  the tokenizer's detokenization, so truncated page tails are absent).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

from preprocess.sentences import split_sentences


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
    if Path(path).is_dir() and (Path(path) / "meta.json").exists():
        if not split:
            raise ValueError(f"{path} is a paged data directory: give the split to read (--split)")
        from preprocess.paged_reader import read_paged_split

        for example in read_paged_split(path, split):
            yield Document(example.id, [split_sentences(page) for page in example.pages], example.reference)
        return
    if split:
        raise ValueError(f"{path} is a file, but --split only applies to paged data directories")
    from preprocess.readers import read_examples

    for example in read_examples(path, input_format):
        yield Document(example.id, [unit.sentence_list() for unit in example.units], example.summary)
