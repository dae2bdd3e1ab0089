"""What AWESOME computes once per corpus, stored next to the corpus in its data directory.

This module owns these files, as ``corpus/format.py`` owns the corpus's (see there why): their
names, how they are written (each whole or not at all, its record last) and how they are
checked against the corpus on loading, with the command to run when they are missing or stale.

Per split and segmentation (``TAG``: the embedding model's tag, or ``length``)::

    {split}.segments.TAG.npy    (n_units,) int32: every unit's segment within its example
    {split}.segments.TAG.json   how they were made (model, min/max tokens, unit count,
                                targets_format)
    {split}.targets.TAG.npz     every segment's target ids (Appendix A.2), each with a
                                leading space (``targets.segment_summary_ids``):
                                  ids (sum,) int32, lengths (n_segments,), example_segments
                                  (n_examples + 1,) offsets; and for inspection every summary
                                  sentence's segment: sentence_segment, example_sentences

Per split and sentence embedding model (``TAG``: its tag), what segmentation reads::

    {split}.embeddings.TAG.npy  (n_units, dim) float16: every unit's sentence embedding,
                                so that segmenting again (other lengths) embeds nothing
    {split}.embeddings.TAG.json the model's name, units and dimension

Per split and source of salient sentences (``oracle`` or ``extractor``)::

    {split}.salient.SOURCE.npy  (n_units,) uint8: 1 for a salient sentence
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np

from ...atomic import atomic_path, write_atomically
from ...corpus.format import CorpusFormatError

SALIENT_SOURCES = ("oracle", "extractor")
# 2: every segment's target reads after another sentence (a leading space), so that the
# segments' summaries concatenate into text joined by single spaces. 1 (no such field):
# targets without it, whose summaries ran together ("agreed.Veterans").
TARGETS_FORMAT = 2


def segments_path(data_dir, split: str, tag: str) -> Path:
    return Path(data_dir) / f"{split}.segments.{tag}.npy"


def targets_path(data_dir, split: str, tag: str) -> Path:
    return Path(data_dir) / f"{split}.targets.{tag}.npz"


def embeddings_path(data_dir, split: str, tag: str) -> Path:
    return Path(data_dir) / f"{split}.embeddings.{tag}.npy"


def salient_path(data_dir, split: str, source: str) -> Path:
    return Path(data_dir) / f"{split}.salient.{source}.npy"


@dataclass
class SegmentTargets:
    ids: np.ndarray  # (sum of lengths,)
    lengths: np.ndarray  # (n_segments,) over the whole split, example after example
    example_segments: np.ndarray  # (n_examples + 1,) offsets into lengths
    sentence_segment: np.ndarray  # (n_sentences,) segment of every summary sentence, within its example
    example_sentences: np.ndarray  # (n_examples + 1,) offsets into sentence_segment

    def __post_init__(self):
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    def of_example(self, index: int) -> List[np.ndarray]:
        """Every segment's target ids (no <s> or </s>) of example ``index``."""
        first, last = self.example_segments[index], self.example_segments[index + 1]
        return [self.ids[self.starts[j]: self.starts[j + 1]].astype(np.int64) for j in range(first, last)]

    @classmethod
    def build(cls, per_example: List[List[np.ndarray]], assignments: List[np.ndarray]) -> "SegmentTargets":
        segments = [ids for example in per_example for ids in example]
        return cls(
            ids=np.concatenate(segments).astype(np.int32) if segments else np.zeros(0, np.int32),
            lengths=np.array([len(s) for s in segments], dtype=np.int64),
            example_segments=_offsets([len(example) for example in per_example]),
            sentence_segment=np.concatenate(assignments).astype(np.int32) if assignments else np.zeros(0, np.int32),
            example_sentences=_offsets([len(a) for a in assignments]),
        )

    def save(self, path: Path) -> None:
        np.savez(path, ids=self.ids.astype(np.int32), lengths=self.lengths, example_segments=self.example_segments,
                 sentence_segment=self.sentence_segment, example_sentences=self.example_sentences)

    @classmethod
    def load(cls, path: Path) -> "SegmentTargets":
        with np.load(path) as arrays:
            return cls(**{name: arrays[name] for name in
                          ("ids", "lengths", "example_segments", "sentence_segment", "example_sentences")})


def _offsets(counts) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


def save_segmentation(data_dir, split: str, tag: str, segment_ids: np.ndarray, targets: SegmentTargets,
                      settings: dict) -> None:
    with atomic_path(segments_path(data_dir, split, tag)) as partial:
        np.save(partial, segment_ids.astype(np.int32))
    with atomic_path(targets_path(data_dir, split, tag)) as partial:
        targets.save(partial)
    info = {**settings, "units": int(len(segment_ids)), "segments": int(len(targets.lengths)),
            "targets_format": TARGETS_FORMAT}  # written last: a split without it is not segmented
    write_atomically(Path(data_dir, f"{split}.segments.{tag}.json"), json.dumps(info, indent=2, sort_keys=True) + "\n")


def segmentation_settings(data_dir, split: str, tag: str) -> dict:
    """How a split's cached segments were made ({} when the record is missing)."""
    path = Path(data_dir, f"{split}.segments.{tag}.json")
    return json.loads(path.read_text()) if path.exists() else {}


def _missing(path: Path, command: str) -> CorpusFormatError:
    return CorpusFormatError(f"{path} not found: run `{command}` first")


def load_segmentation(data_dir, split: str, tag: str, num_units: int):
    """(segment ids (n_units,) int64, SegmentTargets) of a split, checked against the corpus."""
    seg_path, tgt_path = segments_path(data_dir, split, tag), targets_path(data_dir, split, tag)
    command = f"pagesum-awesome-segment {data_dir} --splits {split}"
    for path in (seg_path, tgt_path):
        if not path.exists():
            raise _missing(path, command)
    if segmentation_settings(data_dir, split, tag).get("targets_format") != TARGETS_FORMAT:
        raise CorpusFormatError(f"{tgt_path} was written by an older version (segment targets without their "
                                f"leading space): run `{command}` again")
    segment_ids = np.load(seg_path).astype(np.int64)
    if len(segment_ids) != num_units:
        raise CorpusFormatError(f"{seg_path} holds {len(segment_ids)} units but the corpus has {num_units}: "
                                f"run `{command}` again")
    return segment_ids, SegmentTargets.load(tgt_path)


def save_salient(data_dir, split: str, source: str, labels: np.ndarray) -> Path:
    """Write a split's salient-sentence labels (n_units,) uint8 from ``source``; returns the file."""
    path = salient_path(data_dir, split, source)
    with atomic_path(path) as partial:
        np.save(partial, labels.astype(np.uint8))
    return path


def load_salient(data_dir, split: str, source: str, num_units: int) -> np.ndarray:
    path = salient_path(data_dir, split, source)
    command = (f"pagesum-awesome-label {data_dir} --splits {split}" if source == "oracle" else
               f"pagesum-awesome-extract {data_dir} --splits {split} --path EXTRACTOR.pt")
    if not path.exists():
        raise _missing(path, command)
    labels = np.load(path).astype(bool)
    if len(labels) != num_units:
        raise CorpusFormatError(f"{path} holds {len(labels)} units but the corpus has {num_units}: run `{command}` again")
    return labels
