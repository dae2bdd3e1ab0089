"""Eq. 7-9 of the PageSum paper: mix per-page decoder states by their confidences.

Pages are stored *packed*: the real pages of all examples are concatenated along
the first dimension, example after example, and ``page_counts`` says how many rows
belong to each example. Padding pages are never materialised, so they cost nothing;
only the small confidence matrix is laid out densely, where missing pages get a
weight of exactly 0.
"""

from typing import Tuple

import torch
from torch import Tensor


def real_pages(src_tokens: Tensor, pad: int) -> Tensor:
    """(batch, max_pages, page_len) -> (batch, max_pages) bool: a page is real unless it is
    all padding, which a page that starts with padding is (pages are ``<s> ... </s>``)."""
    return src_tokens[:, :, 0].ne(pad)


def page_padding_mask(page_counts: Tensor, max_pages: int) -> Tensor:
    """(batch,) page counts -> (batch, max_pages) bool mask, True where a page is missing."""
    slots = torch.arange(max_pages, device=page_counts.device)  # (max_pages,)
    return slots.unsqueeze(0) >= page_counts.unsqueeze(1)


def unpack_pages(packed: Tensor, page_counts: Tensor, max_pages: int, fill: float) -> Tensor:
    """Lay packed page rows out densely.

    packed: (n_pages, *rest) with n_pages == page_counts.sum()
    returns (batch, max_pages, *rest), missing pages filled with ``fill``.
    """
    batch = page_counts.size(0)
    dense = packed.new_full((batch, max_pages) + tuple(packed.shape[1:]), fill)
    dense[~page_padding_mask(page_counts, max_pages)] = packed
    return dense


def page_weights(confidences: Tensor, page_counts: Tensor, max_pages: int) -> Tensor:
    """Eq. 8: softmax of the confidences over each example's real pages.

    confidences: (n_pages, tgt_len) packed page scores c_ij
    returns (batch, max_pages, tgt_len) weights; they sum to 1 over the real pages
    and are exactly 0 on missing pages.
    """
    # The softmax runs in fp32 whatever the model's precision, so that the mask value
    # is representable and the weights of a half-precision model still sum to 1.
    scores = confidences.float()
    dense = unpack_pages(scores, page_counts, max_pages, fill=float("-inf"))
    return torch.softmax(dense, dim=1)  # (batch, max_pages, tgt_len)


def mix_pages(
    hidden: Tensor, confidences: Tensor, page_counts: Tensor, max_pages: int
) -> Tuple[Tensor, Tensor]:
    """Eq. 9, before the output projection: sum_j w_ij * h_ij.

    hidden:      (n_pages, tgt_len, dim) last decoder layer states of every page
    confidences: (n_pages, tgt_len)
    returns the mixed states (batch, tgt_len, dim) and the weights (batch, max_pages, tgt_len).
    """
    weights = page_weights(confidences, page_counts, max_pages)  # (batch, max_pages, tgt_len)
    dense_hidden = unpack_pages(hidden, page_counts, max_pages, fill=0.0)  # (batch, max_pages, tgt_len, dim)
    mixed = torch.einsum("bpt,bptd->btd", weights.to(hidden.dtype), dense_hidden)
    return mixed, weights


def rows_of_pages(row_order: Tensor, page_counts: Tensor) -> Tensor:
    """Map an order over examples (or beams) to the order over their packed pages.

    row_order:   (new_rows,) indices into the rows that ``page_counts`` describes
    page_counts: (rows,)
    returns (sum(page_counts[row_order]),) indices into the packed page rows.
    """
    first_page = torch.cumsum(page_counts, 0) - page_counts  # (rows,)
    counts = page_counts.index_select(0, row_order)  # (new_rows,)
    starts = first_page.index_select(0, row_order).repeat_interleave(counts)  # (new_pages,)
    # position of every new page inside its own example: 0, 1, .., count-1
    new_first = torch.cumsum(counts, 0) - counts
    offsets = torch.arange(int(counts.sum()), device=row_order.device) - new_first.repeat_interleave(counts)
    return starts + offsets
