"""Eq. 7-9 of the PageSum paper: mix per-page decoder states by their confidences.

Pages are stored *packed*: the real pages of all examples are concatenated along
the first dimension, example after example, and ``page_counts`` says how many rows
belong to each example. Padding pages are never materialised, so they cost nothing;
only the small confidence matrix is laid out densely, where missing pages get a
weight of exactly 0.

The decoder runs once per page of every hypothesis. ``PageLayout`` says which page
row belongs to which hypothesis, mixes the rows back into one state per hypothesis,
and follows beam search when it reorders hypotheses. Everything it does per decoding
step is indexing with tensors it built beforehand, so no step has to wait for the
device to report a count.
"""

import math
from typing import Optional, Sequence, Tuple

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


class PageLayout:
    """Where the decoder's page rows come from, and how they mix into hypotheses.

    The encoder output holds the packed pages of ``groups``: one group per example, or
    one per (example, beam) when beam search has repeated the encoder output per beam.
    ``beams`` hypotheses read each group, so the decoder has groups x beams hypothesis
    rows, group-major as fairseq orders them, and n_pages x beams *page rows*, ordered
    (group x page x beam). The beam is innermost so that the rows of one page sit next to
    each other: fairseq's multi-head attention, given fewer key rows than query rows,
    lets each key row serve that many consecutive query rows, so every page's encoder
    output and cross-attention keys and values are stored once and read by all beams.

    Built once per forward pass, or once per search and again whenever beam search drops
    finished examples. Building reads the smallest and largest page count back from the
    device, unless given them (``count_range``; after dropping examples, it also reads the
    number of pages left); nothing else does.
    """

    def __init__(self, page_counts: Tensor, beams: int, n_pages: int, max_pages: Optional[int] = None,
                 count_range: Optional[Sequence[int]] = None):
        # page_counts: (groups,); n_pages == page_counts.sum(), known from the encoder
        # output's shape. max_pages: the width of the page weights, at least the most pages.
        # count_range: the fewest and the most of page_counts, where the host knows them.
        self.page_counts = page_counts
        self.beams = beams
        self.n_pages = n_pages
        if count_range is None:
            count_range = torch.stack(torch.aminmax(page_counts)).tolist()
        fewest, most = count_range
        self.max_pages = most if max_pages is None else max_pages
        # Dense: every group has max_pages pages (spatial paging), so the page rows already
        # form a (hypothesis, page) grid and mixing needs no gather and no mask.
        self.dense = fewest == self.max_pages

        groups, device = page_counts.size(0), page_counts.device
        self.first_page = torch.cumsum(page_counts, 0) - page_counts  # (groups,)
        group_ids = torch.arange(groups, device=device)
        self.group_of_page = torch.repeat_interleave(group_ids, page_counts, output_size=n_pages)  # (n_pages,)
        self.page_in_group = torch.arange(n_pages, device=device) - self.first_page[self.group_of_page]  # (n_pages,)
        beam = torch.arange(beams, device=device)  # (beams,)
        # the hypothesis each page row extends, and the page of its group it reads: (n_pages * beams,)
        self.hypothesis_of_row = (self.group_of_page[:, None] * beams + beam).view(-1)
        self.hypothesis_ids = torch.arange(groups * beams, device=device)  # (groups * beams,)
        self.row_ids = torch.arange(n_pages * beams, device=device)  # (n_pages * beams,) the page rows
        self.page_of_row = self.page_in_group.repeat_interleave(beams)
        # the row of each hypothesis's first page: (groups * beams,), hypothesis order
        self.first_row_of_hypothesis = (self.first_page[:, None] * beams + beam).view(-1)
        if not self.dense:
            slots = torch.arange(self.max_pages, device=device)  # (max_pages,)
            missing = slots >= page_counts[:, None]  # (groups, max_pages)
            # a missing slot points at the group's first page: it gets weight exactly 0
            page = self.first_page[:, None] + slots.masked_fill(missing, 0)  # (groups, max_pages)
            # page row of every (hypothesis, slot): (groups * beams, max_pages)
            self.slot_rows = (page[:, None, :] * beams + beam[None, :, None]).view(groups * beams, self.max_pages)
            self.missing = missing.repeat_interleave(beams, dim=0)  # (groups * beams, max_pages)

    @property
    def hypotheses(self) -> int:
        return self.page_counts.size(0) * self.beams

    @property
    def repeats_prefixes(self) -> bool:
        """Whether some hypothesis reads more than one page, so that its page rows repeat its prefix."""
        return self.n_pages != self.page_counts.size(0)

    def expand(self, hypothesis_rows: Tensor) -> Tensor:
        """(hypotheses, *rest) -> (page rows, *rest): each hypothesis's row for every page."""
        return hypothesis_rows.index_select(0, self.hypothesis_of_row)

    def mix(self, hidden: Tensor, confidences: Tensor) -> Tuple[Tensor, Tensor]:
        """Eq. 8 and Eq. 9 before the output projection: softmax over each hypothesis's real
        pages, then sum_j w_ij * h_ij.

        hidden:      (page rows, tgt_len, dim) last decoder layer states of every page row
        confidences: (page rows, tgt_len) page scores c_ij
        returns the mixed states (hypotheses, tgt_len, dim) and the weights
        (hypotheses, max_pages, tgt_len), which sum to 1 over the real pages and are
        exactly 0 on missing ones.
        """
        # The softmax runs in fp32 whatever the model's precision, so that the mask value
        # is representable and the weights of a half-precision model still sum to 1.
        scores = confidences.float()
        if hidden.size(1) == 1:
            return self._mix_step(hidden, scores)
        if self.dense:
            dense_hidden = self._grid(hidden)  # (hypotheses, max_pages, tgt_len, dim)
            dense_scores = self._grid(scores)  # (hypotheses, max_pages, tgt_len)
        else:
            rows = self.slot_rows.view(-1)  # (hypotheses * max_pages,)
            dense_hidden = hidden.index_select(0, rows).view(self.slot_rows.shape + hidden.shape[1:])
            dense_scores = scores.index_select(0, rows).view(self.slot_rows.shape + scores.shape[1:])
            dense_scores = dense_scores.masked_fill(self.missing.unsqueeze(-1), float("-inf"))
        weights = torch.softmax(dense_scores, dim=1)  # (hypotheses, max_pages, tgt_len)
        mixed = torch.einsum("bpt,bptd->btd", weights.to(hidden.dtype), dense_hidden)
        return mixed, weights

    def _mix_step(self, hidden: Tensor, scores: Tensor) -> Tuple[Tensor, Tensor]:
        """``mix`` at one position, a decoding step: the states read where they lie (no grid
        copied), and the weighted sum as one product and one sum over the pages, in fp32.

        hidden: (page rows, 1, dim); scores: (page rows, 1), fp32."""
        hypotheses, dim = self.hypotheses, hidden.size(-1)
        if self.dense:  # the page rows are (groups, max_pages, beams) already
            groups = self.page_counts.size(0)
            weights = torch.softmax(scores.view(groups, self.max_pages, self.beams), dim=1)
            states = hidden.view(groups, self.max_pages, self.beams, dim)
        else:  # gathered: (hypotheses, max_pages), missing slots at weight 0
            rows = self.slot_rows.view(-1)  # (hypotheses * max_pages,)
            slot_scores = scores.index_select(0, rows).view(self.slot_rows.shape).masked_fill(self.missing, -math.inf)
            weights = torch.softmax(slot_scores, dim=1)
            states = hidden.index_select(0, rows).view(hypotheses, self.max_pages, dim)
        # (groups, max_pages, beams, 1) * (groups, max_pages, beams, dim), or the same without beams
        mixed = (weights.unsqueeze(-1) * states).sum(dim=1).view(hypotheses, 1, dim).to(hidden.dtype)
        if self.dense:  # (groups, max_pages, beams) -> (hypotheses, max_pages, 1)
            return mixed, weights.transpose(1, 2).reshape(hypotheses, self.max_pages, 1)
        return mixed, weights.unsqueeze(-1)

    def _grid(self, page_rows: Tensor) -> Tensor:
        """(groups x page x beam, *rest) -> (groups x beam, page, *rest); dense layouts only."""
        groups, rest = self.page_counts.size(0), page_rows.shape[1:]
        grid = page_rows.view((groups, self.max_pages, self.beams) + rest).transpose(1, 2)
        return grid.reshape((groups * self.beams, self.max_pages) + rest)  # a view when beams == 1

    def reorder(self, new_order: Tensor) -> Tuple["PageLayout", Tensor, Optional[Tensor]]:
        """Follow beam search from one step to the next.

        new_order: (new hypotheses,) the hypothesis each new row continues. Beams never leave
        their example; an order shorter than ``hypotheses`` drops the examples that finished.
        Returns the layout of the new rows; the order of the page rows, for states kept per
        page row; and, only when examples were dropped, the order of the packed pages, for
        states kept once per page of a group. While no example is dropped the groups stay
        as they are (the beams of an example only trade places, and all the groups of one
        example hold the same pages), so those states need no reordering at all.
        """
        beams = self.beams
        dropped = new_order.size(0) != self.hypotheses
        if beams > 1 and not dropped:
            # a group is an example, whose beams only trade places: a page row continues the row of
            # its own group and page of the beam it follows, row - new beam + old beam
            moved = (new_order - self.hypothesis_ids).index_select(0, self.hypothesis_of_row)  # (page rows,)
            return self, self.row_ids + moved, None
        layout = self
        if dropped:
            group_order = new_order.view(-1, beams)[:, 0] // beams  # (new groups,)
            counts = self.page_counts.index_select(0, group_order)
            layout = PageLayout(counts, beams, int(counts.sum()), self.max_pages)
        continued = new_order.index_select(0, layout.hypothesis_of_row)  # (new page rows,) old hypothesis
        group = continued // beams
        old_beam = continued - group * beams
        row_order = (self.first_page.index_select(0, group) + layout.page_of_row) * beams + old_beam
        page_order = None
        if dropped:
            page_order = self.first_page.index_select(0, group_order)[layout.group_of_page] + layout.page_in_group
        return layout, row_order, page_order
