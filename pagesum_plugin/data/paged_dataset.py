"""A dataset of (pages, summary) examples: one split of the stored corpus read through a view.

Every example's page sizes come from the view's plan for the whole split, computed once
when the dataset is built (vectorized), so that ``--max-tokens`` batching knows every
example's cost. ``__getitem__`` builds one example's pages with the same view code.
"""

from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from fairseq.data import data_utils
from torch import Tensor

from ..corpus.storage import CorpusSplit
from ..corpus.views import ViewConfig, assemble_pages, plan_pages
from .examples import ExampleDataset

ONE_DECODER_PASS_VIEWS = ("documents", "flat")


def collate_pages(page_lists: List[List[Tensor]], pad_idx: int, pad_to_multiple: int = 1,
                  shape: Optional[Tuple[int, int]] = None) -> Tensor:
    """List (batch) of lists of 1-D page tensors -> (batch, max_pages, page_len), padded with
    pad_idx; ``shape``: (max_pages, page_len) whatever the batch holds (at least what it holds)."""
    max_pages, page_len = shape or (0, 0)
    max_pages = max(max_pages, *(len(pages) for pages in page_lists))
    page_len = max(page_len, *(len(page) for pages in page_lists for page in pages))
    if pad_to_multiple > 1:
        page_len = (page_len + pad_to_multiple - 1) // pad_to_multiple * pad_to_multiple
    out = page_lists[0][0].new_full((len(page_lists), max_pages, page_len), pad_idx)
    for i, pages in enumerate(page_lists):
        for j, page in enumerate(pages):
            out[i, j, : len(page)] = page
    return out


def summary_target(ids: np.ndarray, bos: int, eos: int, max_tokens: int) -> Tensor:
    """``<s> summary </s>`` of at most ``max_tokens`` tokens: the one place summaries are cut."""
    return torch.from_numpy(np.concatenate([[bos], ids[: max_tokens - 2], [eos]]).astype(np.int64))


class PagedSummarizationDataset(ExampleDataset):
    """Examples of one or more pages and a summary; the collater builds PageSum batches."""

    def __init__(self, corpus: CorpusSplit, view: ViewConfig, dictionary, max_summary_tokens: int = 1024,
                 shuffle: bool = True, seed: int = 1, fixed_shapes: bool = False):
        super().__init__(shuffle, seed)
        self.corpus = corpus
        self.view = view
        self.dictionary = dictionary
        self.max_summary_tokens = max_summary_tokens
        self.example_ids = corpus.example_ids()  # the input's own ids, for outputs that join

        plan = plan_pages(corpus.structure, view)
        self.page_counts = plan.page_counts  # (n_examples,)
        page_sizes = plan.page_sizes  # (n_pages,)
        first_page = plan.example_pages[:-1]
        self.src_sizes = np.add.reduceat(page_sizes, first_page) if len(page_sizes) else np.zeros(0, np.int64)
        # each page is encoded on its own, so positions are bounded by the longest page
        self.longest_page = np.maximum.reduceat(page_sizes, first_page) if len(page_sizes) else np.zeros(0, np.int64)
        self.tgt_sizes = np.minimum(corpus.summary_lengths + 2, max_summary_tokens).astype(np.int64)
        # fixed_shapes: every batch padded to the split's most pages, longest page and longest summary,
        # so that batches of one size have one shape (what --capture-training replays)
        self.fixed_source: Optional[Tuple[int, int]] = None
        self.fixed_summary: Optional[int] = None
        if fixed_shapes and len(self.page_counts):
            self.fixed_source = (int(self.page_counts.max()), int(self.longest_page.max()))
            self.fixed_summary = int(self.tgt_sizes.max())
        # what one example costs: its pages for the encoder, plus the summary for the
        # decoder, once per page where it runs on every page (page views, segments) and
        # once where the pages are one sequence's parts (documents with boundaries)
        decoder_passes = 1 if view.view in ONE_DECODER_PASS_VIEWS else self.page_counts
        self.example_tokens = self.src_sizes + decoder_passes * self.tgt_sizes

    def __len__(self) -> int:
        return len(self.page_counts)

    @property
    def fixed_shapes(self) -> bool:
        return self.fixed_source is not None

    def __getitem__(self, index: int) -> Dict:
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        pages = [torch.from_numpy(page) for page in assemble_pages(self.corpus.document(index), self.view, bos, eos)]
        target = summary_target(self.corpus.summary(index), bos, eos, self.max_summary_tokens)
        return {"id": index, "pages": pages, "target": target}

    def collater(self, samples: List[Dict], pad_to_multiple: int = 1) -> Dict:
        if len(samples) == 0:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        # (batch, max_pages, page_len)
        src_tokens = collate_pages([s["pages"] for s in samples], pad, pad_to_multiple, self.fixed_source)
        targets = [s["target"] for s in samples]
        # (batch, tgt_len): <s> summary </s>
        target = data_utils.collate_tokens(targets, pad, eos, pad_to_length=self.fixed_summary)
        # teacher forcing input: </s> <s> summary (the target shifted right)
        prev_output_tokens = data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True,
                                                       pad_to_length=self.fixed_summary)
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "example_ids": [self.example_ids[s["id"]] for s in samples],
            "nsentences": len(samples),
            "ntokens": sum(len(t) for t in targets),
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": src_tokens.ne(pad).sum(dim=(1, 2)),  # (batch,) source tokens over all pages
                "prev_output_tokens": prev_output_tokens,
            },
            "target": target,
        }

    def size(self, index: int):
        """What fairseq compares with the model's max positions: the longest page and the summary."""
        return (int(self.longest_page[index]), int(self.tgt_sizes[index]))

    @property
    def sizes(self):
        return np.vstack((self.longest_page, self.tgt_sizes)).T

    def sort_keys(self):
        return [self.tgt_sizes, self.example_tokens]
