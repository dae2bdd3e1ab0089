"""The token streams of a stored corpus, in fairseq's memory-mapped indexed datasets: the
dictionary, a split written (``SplitWriter``) and read (``CorpusSplit``). The file names and the
layout are ``format.py``'s, which needs neither torch nor fairseq."""

import os
from dataclasses import fields
from pathlib import Path
from typing import List

import numpy as np
import torch
from fairseq.data import Dictionary, indexed_dataset

from .format import (DICT_FILE, STRUCTURE_DTYPES, TOKEN_STREAMS, CorpusFormatError, EncodedDocument, SplitStructure,
                     ids_path, offsets, reference_path, stream_prefix, structure_path)


def load_dictionary(data_dir: str | Path) -> Dictionary:
    path = Path(data_dir) / DICT_FILE
    if not path.exists():
        raise CorpusFormatError(f"{path} not found: {data_dir} is not a pagesum-preprocess data directory")
    return Dictionary.load(str(path))


class SplitWriter:
    """Appends examples to one split of a data directory; ``close()`` finalizes it."""

    def __init__(self, data_dir: str | Path, split: str, vocab_size: int):
        self.data_dir, self.split = Path(data_dir), split
        self.builders = {
            stream: indexed_dataset.make_builder(
                indexed_dataset.data_file_path(stream_prefix(data_dir, split, stream)), impl="mmap", vocab_size=vocab_size
            )
            for stream in TOKEN_STREAMS
        }
        self.columns: dict[str, list] = {
            "unit_length": [], "unit_group": [], "head_spaced": [], "head_plain": [], "name_length": [],
            "units_per_example": [], "groups_per_example": [], "summary_length": [],
        }
        self.ids = open(ids_path(data_dir, split), "w", encoding="utf-8")
        self.references = open(reference_path(data_dir, split), "w", encoding="utf-8")

    def add(self, example_id: str, reference: str, document: EncodedDocument, summary: np.ndarray) -> None:
        for stream, ids in (("units", document.units), ("heads", document.heads), ("names", document.names),
                            ("summary", summary)):
            self.builders[stream].add_item(torch.from_numpy(np.asarray(ids, dtype=np.int64)))
        for column in ("unit_length", "unit_group", "head_spaced", "head_plain", "name_length"):
            self.columns[column].append(np.asarray(getattr(document, column), dtype=np.int64))
        self.columns["units_per_example"].append(len(document.unit_length))
        self.columns["groups_per_example"].append(document.num_groups)
        self.columns["summary_length"].append(len(summary))
        self.ids.write(example_id + "\n")
        self.references.write(reference + "\n")

    def structure(self) -> "SplitStructure":
        """The structure of what was added so far, as ``CorpusSplit`` would read it."""

        def column(name):
            parts = self.columns[name]
            return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

        return SplitStructure(
            example_units=offsets(self.columns["units_per_example"]),
            example_groups=offsets(self.columns["groups_per_example"]),
            **{name: column(name) for name in ("unit_length", "unit_group", "head_spaced", "head_plain", "name_length")},
        )

    def summary_lengths(self) -> np.ndarray:
        return np.asarray(self.columns["summary_length"], dtype=np.int64)  # (n_examples,)

    def close(self) -> None:
        for stream, builder in self.builders.items():
            builder.finalize(indexed_dataset.index_file_path(stream_prefix(self.data_dir, self.split, stream)))
        self.ids.close()
        self.references.close()
        structure = self.structure()
        np.savez(structure_path(self.data_dir, self.split), **{
            name: getattr(structure, name).astype(STRUCTURE_DTYPES[name]) for name in STRUCTURE_DTYPES
        })


class CorpusSplit:
    """Read access to one split of a data directory."""

    def __init__(self, data_dir: str | Path, split: str):
        self.data_dir, self.split = Path(data_dir), split
        missing = [
            f"{stream_prefix(data_dir, split, s)}.bin/.idx" for s in TOKEN_STREAMS
            if not indexed_dataset.dataset_exists(stream_prefix(data_dir, split, s), impl="mmap")
        ]
        missing += [str(p) for p in (structure_path(data_dir, split), ids_path(data_dir, split)) if not p.exists()]
        if missing:
            raise CorpusFormatError(f"split {split!r} of {data_dir} is incomplete: missing {', '.join(missing)} "
                                    f"(run pagesum-preprocess)")
        self.streams = {s: _open_stream(stream_prefix(data_dir, split, s)) for s in TOKEN_STREAMS}
        with np.load(structure_path(data_dir, split)) as arrays:
            self.structure = SplitStructure(**{f.name: arrays[f.name].astype(np.int64) for f in fields(SplitStructure)})
        n = self.structure.num_examples
        if any(len(dataset) != n for dataset in self.streams.values()):
            raise CorpusFormatError(f"split {split!r} of {data_dir}: its files disagree on the number of examples")

    def __len__(self) -> int:
        return self.structure.num_examples

    @property
    def summary_lengths(self) -> np.ndarray:
        return self.streams["summary"].sizes.astype(np.int64)  # (n_examples,)

    def document(self, index: int) -> EncodedDocument:
        s = self.structure
        units = slice(s.example_units[index], s.example_units[index + 1])
        groups = slice(s.example_groups[index], s.example_groups[index + 1])
        return EncodedDocument(
            units=self.streams["units"][index].numpy().astype(np.int64),
            heads=self.streams["heads"][index].numpy().astype(np.int64),
            names=self.streams["names"][index].numpy().astype(np.int64),
            unit_length=s.unit_length[units],
            unit_group=s.unit_group[units],
            head_spaced=s.head_spaced[units],
            head_plain=s.head_plain[units],
            name_length=s.name_length[groups],
        )

    def summary(self, index: int) -> np.ndarray:
        return self.streams["summary"][index].numpy().astype(np.int64)

    def example_ids(self) -> List[str]:
        return ids_path(self.data_dir, self.split).read_text(encoding="utf-8").splitlines()

    def references(self) -> List[str]:
        return reference_path(self.data_dir, self.split).read_text(encoding="utf-8").splitlines()


def _open_stream(prefix: str):
    """A fairseq mmap dataset; one whose items are all empty has an empty .bin file, which
    cannot be memory-mapped, so it is read as what it is."""
    if os.path.getsize(indexed_dataset.data_file_path(prefix)) == 0:
        return _EmptyItems(len(indexed_dataset.MMapIndexedDataset.Index(indexed_dataset.index_file_path(prefix))))
    return indexed_dataset.MMapIndexedDataset(prefix)


class _EmptyItems:
    def __init__(self, length: int):
        self.sizes = np.zeros(length, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.zeros(0, dtype=torch.int64)
