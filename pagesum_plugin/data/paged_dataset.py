"""A dataset of (pages, summary) examples, stored as fairseq indexed datasets.

On disk (written by ``pagesum-preprocess``):
  {split}.pages.{bin,idx}     one item per page, example after example: <s> page </s>
  {split}.page_counts.npy     pages per example, int64 (num_examples,)
  {split}.summary.{bin,idx}   one item per example: <s> summary </s>
"""

import os
from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import FairseqDataset, data_utils, indexed_dataset
from torch import Tensor


def load_paged_split(data_dir: str, split: str):
    """Open the three files of a split; raise a clear error naming what is missing."""
    pages_prefix = os.path.join(data_dir, f"{split}.pages")
    summary_prefix = os.path.join(data_dir, f"{split}.summary")
    counts_path = os.path.join(data_dir, f"{split}.page_counts.npy")
    for prefix in (pages_prefix, summary_prefix):
        if not indexed_dataset.dataset_exists(prefix, impl="mmap"):
            raise FileNotFoundError(f"paged data not found: {prefix}.bin/.idx (run pagesum-preprocess first)")
    if not os.path.exists(counts_path):
        raise FileNotFoundError(f"paged data not found: {counts_path}")
    pages = indexed_dataset.make_dataset(pages_prefix, impl="mmap")
    summaries = indexed_dataset.make_dataset(summary_prefix, impl="mmap")
    page_counts = np.load(counts_path).astype(np.int64)
    if page_counts.sum() != len(pages) or len(page_counts) != len(summaries) or (page_counts < 1).any():
        raise ValueError(
            f"{counts_path}: inconsistent split: {len(page_counts)} examples with {int(page_counts.sum())} pages "
            f"in page_counts, but {len(pages)} page items and {len(summaries)} summaries"
        )
    return pages, page_counts, summaries


def collate_pages(page_lists: List[List[Tensor]], pad_idx: int, pad_to_multiple: int = 1) -> Tensor:
    """List (batch) of lists of 1-D page tensors -> (batch, max_pages, page_len), padded with pad_idx."""
    max_pages = max(len(pages) for pages in page_lists)
    page_len = max(len(page) for pages in page_lists for page in pages)
    if pad_to_multiple > 1:
        page_len = (page_len + pad_to_multiple - 1) // pad_to_multiple * pad_to_multiple
    out = page_lists[0][0].new_full((len(page_lists), max_pages, page_len), pad_idx)
    for i, pages in enumerate(page_lists):
        for j, page in enumerate(pages):
            out[i, j, : len(page)] = page
    return out


def truncate_keeping_eos(tokens: Tensor, max_len: int) -> Tensor:
    """Cut a <s> ... </s> sequence to max_len tokens, keeping its final </s>."""
    if len(tokens) <= max_len:
        return tokens
    return torch.cat([tokens[: max_len - 1], tokens[-1:]])


class PagedSummarizationDataset(FairseqDataset):
    """Examples of 1..max_pages pages and a summary; the collater builds PageSum batches."""

    def __init__(
        self,
        pages,
        page_counts: np.ndarray,
        summaries,
        dictionary,
        max_pages: Optional[int] = None,
        max_page_tokens: int = 1024,
        max_target_tokens: int = 1024,
        shuffle: bool = True,
        seed: int = 1,
    ):
        self.pages = pages
        self.summaries = summaries
        self.dictionary = dictionary
        self.max_page_tokens = max_page_tokens
        self.max_target_tokens = max_target_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 1

        self.first_page = np.cumsum(page_counts) - page_counts  # (num_examples,)
        self.page_counts = page_counts if max_pages is None else np.minimum(page_counts, max_pages)
        page_sizes = np.minimum(pages.sizes, max_page_tokens)
        # source tokens of each example's kept pages
        example_of_page = np.repeat(np.arange(len(page_counts)), page_counts)  # (n_pages,)
        page_in_example = np.arange(len(page_sizes)) - self.first_page[example_of_page]
        kept = page_in_example < self.page_counts[example_of_page]
        self.src_sizes = np.bincount(
            example_of_page[kept], weights=page_sizes[kept], minlength=len(page_counts)
        ).astype(np.int64)
        # each page is encoded on its own, so positions are bounded by the longest page
        self.longest_page = np.zeros(len(page_counts), dtype=np.int64)
        np.maximum.at(self.longest_page, example_of_page[kept], page_sizes[kept])
        self.tgt_sizes = np.minimum(summaries.sizes, max_target_tokens).astype(np.int64)
        # what one example costs: its pages for the encoder, plus the summary once per
        # page for the decoder (it runs on every page)
        self.example_tokens = self.src_sizes + self.page_counts * self.tgt_sizes

    def __len__(self) -> int:
        return len(self.page_counts)

    def __getitem__(self, index: int) -> Dict:
        first = self.first_page[index]
        pages = [
            truncate_keeping_eos(self.pages[int(first + j)].long(), self.max_page_tokens)
            for j in range(self.page_counts[index])
        ]
        target = truncate_keeping_eos(self.summaries[index].long(), self.max_target_tokens)
        return {"id": index, "pages": pages, "target": target}

    def collater(self, samples: List[Dict], pad_to_multiple: int = 1) -> Dict:
        if len(samples) == 0:
            return {}
        pad, eos = self.dictionary.pad(), self.dictionary.eos()
        src_tokens = collate_pages([s["pages"] for s in samples], pad, pad_to_multiple)  # (batch, max_pages, page_len)
        targets = [s["target"] for s in samples]
        target = data_utils.collate_tokens(targets, pad, eos)  # (batch, tgt_len): <s> summary </s>
        # teacher forcing input: </s> <s> summary (the target shifted right)
        prev_output_tokens = data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True)
        return {
            "id": torch.LongTensor([s["id"] for s in samples]),
            "nsentences": len(samples),
            "ntokens": sum(len(t) for t in targets),
            "net_input": {
                "src_tokens": src_tokens,
                "src_lengths": src_tokens.ne(pad).sum(dim=(1, 2)),  # (batch,) source tokens over all pages
                "prev_output_tokens": prev_output_tokens,
            },
            "target": target,
        }

    def num_tokens(self, index: int) -> int:
        return int(self.example_tokens[index])

    def num_tokens_vec(self, indices):
        return self.example_tokens[indices]

    def size(self, index: int):
        """What fairseq compares with the model's max positions: the longest page and the summary."""
        return (int(self.longest_page[index]), int(self.tgt_sizes[index]))

    @property
    def sizes(self):
        return np.vstack((self.longest_page, self.tgt_sizes)).T

    def ordered_indices(self):
        if self.shuffle:
            with data_utils.numpy_seed(self.seed, self.epoch):
                order = [np.random.permutation(len(self))]
        else:
            order = [np.arange(len(self))]
        order.append(self.tgt_sizes)
        order.append(self.example_tokens)
        return np.lexsort(order)

    def set_epoch(self, epoch):
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False

    @property
    def supports_prefetch(self):
        return False
