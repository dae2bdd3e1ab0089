"""Inputs for PageSumForConditionalGeneration, without fairseq:

* ``PageSumProcessor``: raw documents -> pages, read exactly as the plugin reads them (the same
  sentence units, ``corpus/units.py``, and the same views, ``corpus/views.py``) through a
  ``transformers`` GPT-2 BPE tokenizer, such as the ``BartTokenizerFast`` of a
  ``pagesum-convert to-hf`` directory;
* ``pad_pages``: examples of pages padded to (batch, pages, page_len), the shape the model's
  ``forward``, ``generate()`` and the ``Trainer`` read;
* ``PageSumCollator``: the ``Trainer``'s batches of pages and labels.
"""

import itertools
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from transformers import AutoTokenizer

from ..corpus.options import ViewConfig
from ..corpus.readers import example_from_raw
from ..corpus.units import encode_examples
from ..corpus.views import assemble_pages, raw_document_view
from .modeling_pagesum import IGNORE_INDEX


class PageSumProcessor:
    """A document as ``summarize()`` takes it: a string (spatial pages), a list of
    ``(section name, text)`` pairs (discourse pages) or a list of strings (one page per source
    document); pages ``<s> ... </s>`` of the view ``view`` (its page sizes and limits) or of the
    one a call names."""

    def __init__(self, tokenizer, view: ViewConfig = ViewConfig()):
        self.tokenizer = tokenizer
        self.view = view

    @classmethod
    def from_pretrained(cls, path: str, **view) -> "PageSumProcessor":
        """The tokenizer saved in ``path`` (``vocab.json`` and ``merges.txt``), and ``view``'s
        settings (``ViewConfig``'s fields: ``view``, ``num_pages``, ``max_page_tokens``, ...)."""
        return cls(AutoTokenizer.from_pretrained(path), ViewConfig(**view))

    def encode_flat(self, texts: List[str]) -> Tuple[np.ndarray, np.ndarray]:
        """Every text's token ids, concatenated (total,), and each text's length (texts,)."""
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        lengths = np.array([len(text) for text in ids], dtype=np.int64)
        return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths

    def pages(self, document, locality: Optional[str] = None, **view) -> List[np.ndarray]:
        """One document's pages, each (page_len,) ``<s> ... </s>``; ``locality`` names the view."""
        config = raw_document_view(document, self.view, locality, **view)
        (encoded, _), = encode_examples([example_from_raw(document)], self.encode_flat)
        if encoded is None:
            raise ValueError("the document has no sentences")
        return assemble_pages(encoded, config, self.tokenizer.bos_token_id, self.tokenizer.eos_token_id)

    def __call__(self, documents: Sequence, locality: Optional[str] = None, **view) -> dict:
        """``input_ids`` and ``attention_mask`` (batch, pages, page_len) of a list of documents."""
        return pad_pages([self.pages(document, locality, **view) for document in documents],
                         self.tokenizer.pad_token_id)


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
