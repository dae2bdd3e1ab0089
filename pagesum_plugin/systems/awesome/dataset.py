"""The dataset of the ``segmented_summarization`` task (AWESOME), read from the stored corpus.

``SegmentedSummarizationDataset``: every example is its segments (the ``segments`` view
with the cached Algorithm 1 segment ids; with salient sentences, each segment's input
carries those of the other segments, see ``salient_content.py``) and every segment's target
(``awesome.cache.SegmentTargets``). A batch::

    net_input.src_tokens      (batch, max_segments, seg_len)  segments in order, then
                              all-padding segments (the page layout of the plugin)
    segment_target            (batch, max_segments, tgt_len)  <s> segment summary </s>
    segment_prev_output_tokens (batch, max_segments, tgt_len) </s> <s> segment summary
    target                    (batch, full_len)               <s> whole summary </s>
"""

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from fairseq.data import data_utils

from .cache import SegmentTargets
from ...corpus.codec import unit_ids
from ...corpus.format import EncodedDocument
from ...corpus.storage import CorpusSplit
from ...corpus.views import ViewConfig, assemble_pages, plan_pages
from ...data.examples import ExampleDataset
from ...data.paged_dataset import collate_pages, summary_target
from .salient_content import SalientHeaders, augmented_input


def segment_inputs(document: EncodedDocument, streams: np.ndarray, view: ViewConfig, bos: int, eos: int,
                   salient: Optional[np.ndarray], headers: Optional[SalientHeaders],
                   max_input_tokens: int) -> List[np.ndarray]:
    """One document's segment inputs ``<s> ... </s>``: the segments view's pages for the
    given per-unit segment ids (``streams``), or, with ``salient`` (per-unit bool), each
    segment introduced by its header and followed by the other segments' salient sentences."""
    if salient is None:
        return assemble_pages(document, view, bos, eos, streams)
    units = unit_ids(document)
    chosen = np.flatnonzero(salient)
    inputs = []
    for j in range(int(streams[-1]) + 1):
        content = np.concatenate([units[u] for u in np.flatnonzero(streams == j)])[: view.window]
        past = [units[u] for u in chosen if streams[u] < j]
        future = [units[u] for u in chosen if streams[u] > j]
        inputs.append(augmented_input(content, past, future, headers, max_input_tokens, bos, eos))
    return inputs


def kept_segments(sizes: np.ndarray, budget: Optional[int]) -> int:
    """How many leading segments fit in ``budget`` content tokens (at least one)."""
    if budget is None:
        return len(sizes)
    return max(1, int(np.searchsorted(np.cumsum(sizes), budget, side="right")))


class SegmentedSummarizationDataset(ExampleDataset):
    def __init__(self, corpus: CorpusSplit, view: ViewConfig, dictionary, segment_ids: np.ndarray,
                 targets: SegmentTargets, salient: Optional[np.ndarray], headers: Optional[SalientHeaders],
                 max_input_tokens: int, max_summary_tokens: int, max_document_tokens: Optional[int],
                 shuffle: bool = True, seed: int = 1, fixed_shapes: bool = False):
        if view.view != "segments":
            raise ValueError(f"segmented summarization reads the segments view, not {view.view!r}")
        if salient is not None and headers is None:
            raise ValueError("salient sentences need the headers that introduce them")
        self.corpus, self.view, self.dictionary = corpus, view, dictionary
        self.segment_ids, self.targets = segment_ids, targets
        self.salient, self.headers = salient, headers
        self.max_input_tokens, self.max_summary_tokens = max_input_tokens, max_summary_tokens
        super().__init__(shuffle, seed)
        self.example_ids = corpus.example_ids()

        plan = plan_pages(corpus.structure, view, segment_ids)
        if not np.array_equal(plan.page_counts, np.diff(targets.example_segments)):
            raise ValueError("the cached targets do not match the cached segments: segment the split again")
        sizes = plan.page_length  # (n_segments,) content tokens
        firsts = plan.example_pages[:-1]
        self.segment_counts = np.array([kept_segments(sizes[a:b], max_document_tokens)
                                        for a, b in zip(firsts, plan.example_pages[1:])], dtype=np.int64)
        kept = np.arange(len(sizes)) - np.repeat(firsts, plan.page_counts) < np.repeat(self.segment_counts,
                                                                                      plan.page_counts)
        input_sizes = np.minimum(sizes + 2 + (0 if salient is None else max_input_tokens), max_input_tokens)
        target_sizes = np.minimum(targets.lengths + 2, max_summary_tokens)
        example = np.repeat(np.arange(len(self.segment_counts)), plan.page_counts)
        self.src_sizes = np.bincount(example[kept], weights=input_sizes[kept], minlength=len(self)).astype(np.int64)
        self.tgt_sizes = np.bincount(example[kept], weights=target_sizes[kept], minlength=len(self)).astype(np.int64)
        # each segment is encoded and decoded on its own: positions are bounded by the longest
        self.longest_input = np.zeros(len(self), dtype=np.int64)
        np.maximum.at(self.longest_input, example[kept], input_sizes[kept])
        self.longest_target = np.zeros(len(self), dtype=np.int64)
        np.maximum.at(self.longest_target, example[kept], target_sizes[kept])
        self.example_tokens = self.src_sizes + self.tgt_sizes
        # fixed_shapes: every segment padded to the split's longest input and target, so that the
        # segments of batches of one size have one shape (what --capture-training replays)
        self.fixed_segment: Optional[Tuple[int, int]] = None
        if fixed_shapes and len(self):
            self.fixed_segment = (int(self.longest_input.max()), int(self.longest_target.max()))

    def __len__(self) -> int:
        return len(self.segment_counts)

    @property
    def fixed_shapes(self) -> bool:
        return self.fixed_segment is not None

    # ---- one example ------------------------------------------------------------------

    def segment_inputs(self, index: int) -> List[np.ndarray]:
        """Every kept segment's input ids ``<s> ... </s>``."""
        units = slice(self.corpus.structure.example_units[index], self.corpus.structure.example_units[index + 1])
        return segment_inputs(
            self.corpus.document(index), self.segment_ids[units], self.view, self.dictionary.bos(),
            self.dictionary.eos(), None if self.salient is None else self.salient[units], self.headers,
            self.max_input_tokens,
        )[: int(self.segment_counts[index])]

    def __getitem__(self, index: int) -> Dict:
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        count = int(self.segment_counts[index])
        targets = self.targets.of_example(index)[:count]
        return {
            "id": index,
            "segments": [torch.from_numpy(ids) for ids in self.segment_inputs(index)],
            "segment_targets": [summary_target(ids, bos, eos, self.max_summary_tokens) for ids in targets],
            "target": summary_target(self.corpus.summary(index), bos, eos, self.max_summary_tokens),
        }

    def collater(self, samples: List[Dict], pad_to_multiple: int = 1) -> Dict:
        if len(samples) == 0:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        seg_len, tgt_len = self.fixed_segment or (0, 0)
        src_tokens = collate_pages([s["segments"] for s in samples], pad, pad_to_multiple, (0, seg_len))
        # (batch, max_segments, tgt_len)
        segment_target = collate_pages([s["segment_targets"] for s in samples], pad, shape=(0, tgt_len))
        shifted = [[torch.cat([t[-1:], t[:-1]]) for t in s["segment_targets"]] for s in samples]  # </s> <s> ...
        segment_prev = collate_pages(shifted, pad, shape=(0, tgt_len))
        targets = [s["target"] for s in samples]
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "example_ids": [self.example_ids[s["id"]] for s in samples],
            "nsentences": len(samples),
            "ntokens": int(segment_target.ne(pad).sum()),  # what the loss counts
            "net_input": {
                "src_tokens": src_tokens,  # (batch, max_segments, seg_len)
                "src_lengths": src_tokens.ne(pad).sum(dim=(1, 2)),  # (batch,)
            },
            "segment_target": segment_target,
            "segment_prev_output_tokens": segment_prev,
            "target": data_utils.collate_tokens(targets, pad, eos),  # (batch, full_len)
        }

    # ---- sizes and order ----------------------------------------------------------------

    def size(self, index: int):
        """What fairseq compares with the model's max positions: the longest segment input and target."""
        return (int(self.longest_input[index]), int(self.longest_target[index]))

    @property
    def sizes(self):
        return np.vstack((self.longest_input, self.longest_target)).T
