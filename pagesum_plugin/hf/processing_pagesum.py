"""Batches for PageSumForConditionalGeneration: examples of pages padded to (batch, pages, page_len), the shape its
`forward`, `generate()` and the `Trainer` read (with torch only)."""

from typing import Sequence

import torch

IGNORE_INDEX = -100  # transformers' label for positions without a target


def pad_pages(pages: Sequence[Sequence[Sequence[int]]], pad_token_id: int) -> dict:
    """Pages (token ids, `<s> ... </s>` each) of every example -> `input_ids` and `attention_mask`, both
    (batch, pages, page_len): missing pages and positions are padding, masked out."""
    max_pages = max(len(example) for example in pages)
    page_len = max(len(page) for example in pages for page in example)
    input_ids = torch.full((len(pages), max_pages, page_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, example in enumerate(pages):
        for j, page in enumerate(example):
            input_ids[i, j, : len(page)] = torch.as_tensor(page, dtype=torch.long)
            attention_mask[i, j, : len(page)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class PageSumCollator:
    """A `Trainer` data collator: features `{"pages": [[ids...], ...], "labels": [ids...]}`, the labels
    `<s> summary </s>`, -> `input_ids`, `attention_mask` (batch, pages, page_len) and `labels` (batch, tgt_len),
    padded with -100."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, features: Sequence[dict]) -> dict:
        batch = pad_pages([feature["pages"] for feature in features], self.pad_token_id)
        longest = max(len(feature["labels"]) for feature in features)
        labels = torch.full((len(features), longest), IGNORE_INDEX, dtype=torch.long)
        for i, feature in enumerate(features):
            labels[i, : len(feature["labels"])] = torch.as_tensor(feature["labels"], dtype=torch.long)
        return {**batch, "labels": labels}
