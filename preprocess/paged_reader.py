"""Reads a paged data directory back as text: pages, ids and references per example."""

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np


@dataclass
class PagedExample:
    id: str
    pages: list[str]  # detokenized page text, without <s> / </s>
    reference: str


def read_paged_split(data_dir: str | Path, split: str) -> Iterator[PagedExample]:
    """Yield the examples of ``split`` in order, decoding pages with the data's tokenizer."""
    from fairseq.data import Dictionary, indexed_dataset

    from preprocess.tokenizers import load_tokenizer

    data_dir = Path(data_dir)
    dictionary = Dictionary.load(str(data_dir / "dict.txt"))
    tokenizer = load_tokenizer(data_dir)
    pages = indexed_dataset.MMapIndexedDataset(str(data_dir / f"{split}.pages"))
    page_counts = np.load(data_dir / f"{split}.page_counts.npy")
    ids = (data_dir / f"{split}.ids.txt").read_text(encoding="utf-8").splitlines()
    references = (data_dir / f"{split}.reference.txt").read_text(encoding="utf-8").splitlines()
    if not (len(ids) == len(references) == len(page_counts)) or int(page_counts.sum()) != len(pages):
        raise ValueError(f"{data_dir}: the files of split {split!r} do not agree in size")
    offsets = np.concatenate([[0], np.cumsum(page_counts)])
    special = {dictionary.bos(), dictionary.eos(), dictionary.pad()}
    for i, example_id in enumerate(ids):
        texts = []
        for j in range(offsets[i], offsets[i + 1]):
            symbols = [dictionary[t] for t in pages[int(j)].tolist() if t not in special]
            texts.append(tokenizer.decode(symbols))
        yield PagedExample(example_id, texts, references[i])
