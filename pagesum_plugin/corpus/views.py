"""Views: every way of reading a stored document, computed when the data loads.

A view turns an example's sentence units (see ``format.py``) into *pages*: the token
sequences ``<s> ... </s>`` that a model's encoder reads. It works in two steps:

1. ``plan_pages(structure, config)`` decides, for every example of a split at once and
   from the unit lengths alone (vectorized, no token ids), which units form which
   *stream* and which window of each stream becomes a page. The dataset gets every
   example's page sizes from it, so ``--max-tokens`` batching knows every cost.
2. ``assemble_pages(document, plan)`` builds one example's page ids from its plan.

A stream is the concatenation of some consecutive units of one example, with a group's
``Section name:`` in front for discourse pages. Its first unit reads without a leading
space unless a name precedes it, exactly as if the stream's text had been tokenized whole.

The views:

* ``spatial``   ``num_pages`` pages of whole sentences, each page truncated: n // num_pages
                sentences a page and the rest on the last (``authors``, the default), or
                spread evenly, the first pages taking one more (``even``);
* ``discourse`` one page per section, its name in front, at most ``max_pages``;
* ``document``  one page per source document of a cluster, at most ``max_pages``;
* ``token``     the document cut to ``num_pages`` x ``max_page_tokens`` tokens, then cut
                into consecutive pages of ``max_page_tokens`` (the paper's Table 5 setup);
* ``flat``      one long sequence of at most ``max_source_tokens`` (HEPOS);
* ``documents`` one page per source document, each cut to an equal share of
                ``max_source_tokens`` (documents with their boundaries, for HED);
* ``segments``  segments of whole sentences of at most ``max_segment_tokens`` (AWESOME's
                length rule).

Every page holds at most ``max_page_tokens`` tokens, ``<s>`` and ``</s>`` included
(``max_source_tokens`` for ``flat``, ``max_segment_tokens`` for ``segments``). Pages
without tokens are never made: they would give NaN attention.
"""

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from .format import EncodedDocument, SplitStructure
from .options import SPATIAL_SPLITS, VIEWS, ViewConfig  # noqa: F401  (the views' names and settings)

PAGE_VIEWS = ("spatial", "discourse", "document", "token")  # what PageSum's localities read
STRUCTURED_VIEWS = ("discourse", "document", "documents")  # views that need sections or documents
PLACEHOLDER = -1  # page_stream of a placeholder page


@dataclass
class PagePlan:
    """The pages of many examples, as index arrays (all indices are within the plan)."""

    unit_stream: np.ndarray  # (n_units,) stream of every unit, local to its example
    example_streams: np.ndarray  # (n_examples + 1,) offsets into the stream arrays
    stream_name: np.ndarray  # (n_streams,) group (local) whose name opens the stream, or -1
    stream_length: np.ndarray  # (n_streams,) content ids of the whole stream
    example_pages: np.ndarray  # (n_examples + 1,) offsets into the page arrays
    page_stream: np.ndarray  # (n_pages,) stream (local to its example) the page reads
    page_start: np.ndarray  # (n_pages,) first content id of the page's window
    page_length: np.ndarray  # (n_pages,) content ids kept (specials excluded)
    page_truncated: np.ndarray  # (n_pages,) bool: the page was cut to the window
    dropped_pages: np.ndarray  # (n_examples,) non-empty streams beyond the page limit

    @property
    def page_sizes(self) -> np.ndarray:
        """(n_pages,) tokens of every page, <s> and </s> included."""
        return self.page_length + 2

    @property
    def page_counts(self) -> np.ndarray:
        return np.diff(self.example_pages)  # (n_examples,)

    @property
    def source_tokens(self) -> np.ndarray:
        """(n_examples,) content ids of every stream, before any truncation."""
        return _sum_by_example(self.stream_length, self.example_streams)

    @property
    def kept_tokens(self) -> np.ndarray:
        """(n_examples,) content ids that reach the pages."""
        return _sum_by_example(self.page_length, self.example_pages)


def _sum_by_example(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    cumulative = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return cumulative[offsets[1:]] - cumulative[offsets[:-1]]


def _repeat_index(offsets: np.ndarray) -> np.ndarray:
    """(n_items,) the example of every item, from (n_examples + 1,) offsets."""
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


# --------------------------------------------------------------------------- streams


def _spatial_streams(s: SplitStructure, unit_example: np.ndarray, position: np.ndarray, num_pages: int,
                     split: str) -> np.ndarray:
    """Sentences on contiguous pages. ``authors`` (the released code's rule): n // num_pages
    sentences on every page and the remainder on the last one, so that fewer sentences than
    pages all share one page (the released code leaves the others empty: see ``placeholder``).
    ``even``: k = min(num_pages, n) pages whose sizes differ by at most one, the larger
    first (numpy.array_split's rule)."""
    n = np.diff(s.example_units)[unit_example]  # (n_units,) sentences of the unit's example
    if split == "authors":
        per_page = n // num_pages  # (n_units,)
        return np.where(per_page > 0, np.minimum(position // np.maximum(per_page, 1), num_pages - 1), 0)
    pages = np.minimum(num_pages, n)
    base, extra = n // pages, n % pages
    boundary = extra * (base + 1)
    return np.where(position < boundary, position // (base + 1),
                    extra + (position - boundary) // np.maximum(base, 1))


def _segment_streams(s: SplitStructure, window: int) -> np.ndarray:
    """Greedy segments of whole sentences: a sentence opens a new segment when it would
    overflow the current one. Sequential by nature, so a loop over units."""
    costs = s.unit_length + (s.head_plain - s.head_spaced)  # a segment may open with any unit
    stream = np.zeros(len(costs), dtype=np.int64)
    for example in range(s.num_examples):
        current, used = 0, 0
        for u in range(s.example_units[example], s.example_units[example + 1]):
            if used > 0 and used + costs[u] > window:
                current, used = current + 1, 0
            stream[u] = current
            used += costs[u] if used == 0 else s.unit_length[u]
    return stream


def _unit_streams(s: SplitStructure, config: ViewConfig, unit_example: np.ndarray, position: np.ndarray) -> np.ndarray:
    if config.view == "spatial":
        return _spatial_streams(s, unit_example, position, config.num_pages, config.spatial_split)
    if config.view in ("discourse", "document", "documents"):
        return s.unit_group.astype(np.int64)
    if config.view == "segments":
        return _segment_streams(s, config.window)
    return np.zeros(len(position), dtype=np.int64)  # token, flat: the whole document is one stream


# --------------------------------------------------------------------------- plan


def plan_pages(s: SplitStructure, config: ViewConfig, unit_streams: Optional[np.ndarray] = None) -> PagePlan:
    """The pages of every example of ``s`` under ``config``, from unit lengths alone.

    ``unit_streams`` (n_units,), optional: precomputed streams (e.g. cached semantic
    segments), numbered 0, 1, ... in unit order within each example; they replace the
    view's own rule, and the view's page limits and windows still apply."""
    unit_example = _repeat_index(s.example_units)  # (n_units,)
    position = np.arange(len(unit_example)) - s.example_units[unit_example]  # (n_units,) within example
    if unit_streams is None:
        local_stream = _unit_streams(s, config, unit_example, position)  # (n_units,)
    elif config.view == "discourse":
        raise ValueError("the discourse view's streams are its sections: it takes no precomputed streams")
    else:
        local_stream = _checked_unit_streams(unit_streams, s)

    # Streams are numbered 0..k-1 in unit order within an example.
    last_unit = s.example_units[1:] - 1  # (n_examples,) every example has a unit
    streams_per_example = local_stream[last_unit] + 1 if len(last_unit) else np.zeros(0, dtype=np.int64)
    example_streams = np.concatenate([[0], np.cumsum(streams_per_example)]).astype(np.int64)
    stream_example = _repeat_index(example_streams)  # (n_streams,)
    global_stream = example_streams[unit_example] + local_stream  # (n_units,)

    # Discourse pages open with their section's name; a name-less stream's first unit
    # reads without its leading space.
    n_streams = int(example_streams[-1])
    stream_name = np.full(n_streams, -1, dtype=np.int64)
    name_length = np.zeros(n_streams, dtype=np.int64)
    if config.view == "discourse":
        group_of_stream = s.example_groups[stream_example] + (np.arange(n_streams) - example_streams[stream_example])
        named = s.name_length[group_of_stream] > 0
        stream_name[named] = (np.arange(n_streams) - example_streams[stream_example])[named]
        name_length[named] = s.name_length[group_of_stream[named]]
    opens_stream = np.ones(len(global_stream), dtype=bool)
    opens_stream[1:] = global_stream[1:] != global_stream[:-1]
    plain_head = opens_stream & (stream_name[global_stream] < 0)
    unit_cost = s.unit_length + np.where(plain_head, s.head_plain - s.head_spaced, 0)  # (n_units,)
    stream_length = np.bincount(global_stream, weights=unit_cost, minlength=n_streams).astype(np.int64) + name_length

    if config.view in ("token", "flat"):
        pages = _token_pages(stream_length, config)
    elif config.view == "documents":
        pages = _equal_share_pages(stream_length, example_streams, stream_example, config)
    else:
        limit = {"spatial": config.num_pages, "discourse": config.max_pages, "document": config.max_pages}.get(
            config.view, np.iinfo(np.int64).max)
        pages = _one_page_per_stream(stream_length, example_streams, stream_example, limit, config.window)
    page_example, page_stream, page_start, page_length, dropped = pages
    if config.placeholder:
        page_example, page_stream, page_start, page_length = _fill_with_placeholders(
            page_example, page_stream, page_start, page_length, s.num_examples, config)

    page_counts = np.bincount(page_example, minlength=s.num_examples)
    return PagePlan(
        unit_stream=local_stream,
        example_streams=example_streams,
        stream_name=stream_name,
        stream_length=stream_length,
        example_pages=np.concatenate([[0], np.cumsum(page_counts)]).astype(np.int64),
        page_stream=np.where(page_stream >= 0, page_stream - example_streams[page_example], PLACEHOLDER),
        page_start=page_start,
        page_length=page_length,
        page_truncated=(page_stream >= 0) & (page_start + page_length < stream_length[np.maximum(page_stream, 0)]),
        dropped_pages=dropped,
    )


def _nonempty_rank(nonempty, example_streams, stream_example):
    """(n_streams,) every stream's rank among the non-empty streams of its example."""
    rank = np.cumsum(nonempty) - 1  # (n_streams,) among non-empty streams of the split
    first_rank = np.concatenate([[0], np.cumsum(nonempty)])[example_streams[:-1]]
    return rank - first_rank[stream_example]


def _one_page_per_stream(stream_length, example_streams, stream_example, limit, window):
    """Page views: every non-empty stream is a page, up to ``limit`` per example."""
    nonempty = stream_length > 0
    rank = _nonempty_rank(nonempty, example_streams, stream_example)
    kept = nonempty & (rank < limit)
    dropped = np.bincount(stream_example[nonempty & ~kept], minlength=len(example_streams) - 1)
    streams = np.flatnonzero(kept)
    return (stream_example[streams], streams, np.zeros(len(streams), dtype=np.int64),
            np.minimum(stream_length[streams], window), dropped)


def _fill_with_placeholders(page_example, page_stream, page_start, page_length, n_examples, config: ViewConfig):
    """The authors' input: exactly ``page_limit`` pages per example, the missing ones filled
    with a placeholder page that takes part in the page softmax like any other."""
    missing = np.maximum(config.page_limit - np.bincount(page_example, minlength=n_examples), 0)
    filler_example = _repeat_index(np.concatenate([[0], np.cumsum(missing)]))
    order = np.argsort(np.concatenate([page_example, filler_example]), kind="stable")  # fillers last
    n = len(filler_example)
    return (
        np.concatenate([page_example, filler_example])[order],
        np.concatenate([page_stream, np.full(n, PLACEHOLDER)])[order],
        np.concatenate([page_start, np.zeros(n, dtype=np.int64)])[order],
        np.concatenate([page_length, np.full(n, len(config.placeholder))])[order],
    )


def _token_pages(stream_length, config: ViewConfig):
    """Token pages: the one stream of each example cut to its budget, then into windows."""
    window = config.window
    budget = window * (config.num_pages if config.view == "token" else 1)
    kept = np.minimum(stream_length, budget)  # (n_examples,)
    count = -(-kept // window)  # ceil
    page_example = _repeat_index(np.concatenate([[0], np.cumsum(count)]))
    first_page = np.concatenate([[0], np.cumsum(count)])[:-1]
    page_index = np.arange(len(page_example)) - first_page[page_example]
    start = page_index * window
    dropped = np.zeros(len(stream_length), dtype=np.int64)
    return page_example, page_example, start, np.minimum(window, kept[page_example] - start), dropped


def _equal_share_pages(stream_length, example_streams, stream_example, config: ViewConfig):
    """Documents with boundaries, <s> doc </s> each, as PRIMERA shares out its input (Xiao
    et al. 2022, whose truncation HED follows): every non-empty document of a cluster keeps
    at most an equal share, ``max_source_tokens // documents`` tokens with its <s> and
    </s>, so the cluster holds at most ``max_source_tokens`` and every document is read. A
    share a short document leaves unused goes to no other, as in PRIMERA. A cluster of more
    documents than ``max_source_tokens // 3`` (one token each) keeps that many, the first."""
    n_examples = len(example_streams) - 1
    nonempty = stream_length > 0
    kept = nonempty & (_nonempty_rank(nonempty, example_streams, stream_example) < config.max_source_tokens // 3)
    documents = np.bincount(stream_example[kept], minlength=n_examples)  # (n_examples,)
    share = config.max_source_tokens // np.maximum(documents, 1)  # (n_examples,) tokens per document
    length = np.where(kept, np.minimum(stream_length, share[stream_example] - 2), 0)  # (n_streams,) content kept
    dropped = np.bincount(stream_example[nonempty & ~kept], minlength=n_examples)
    streams = np.flatnonzero(kept)
    return stream_example[streams], streams, np.zeros(len(streams), dtype=np.int64), length[streams], dropped


# --------------------------------------------------------------------------- one example's ids


def _checked_unit_streams(unit_streams: np.ndarray, s: SplitStructure) -> np.ndarray:
    """Precomputed streams as int64, after checking that each example's streams start at 0
    and never decrease or skip a number."""
    streams = np.asarray(unit_streams, dtype=np.int64)
    if streams.shape != s.unit_length.shape:
        raise ValueError(f"unit_streams holds {streams.size} entries for {len(s.unit_length)} units")
    first = s.example_units[:-1][np.diff(s.example_units) > 0]  # every example's first unit
    step = np.diff(streams, prepend=0)
    step[first] = 0
    if np.any(streams[first] != 0) or np.any((step < 0) | (step > 1)):
        raise ValueError("unit_streams must number each example's streams 0, 1, ... in unit order")
    return streams


def plan_document(document: EncodedDocument, config: ViewConfig, unit_streams: Optional[np.ndarray] = None) -> PagePlan:
    return plan_pages(SplitStructure.of_document(document), config, unit_streams)


def stream_ids(document: EncodedDocument, plan: PagePlan) -> list:
    """The content ids of every stream of one example (``plan`` made for it alone)."""
    unit_end = np.cumsum(document.unit_length)
    head_end = np.cumsum(document.head_plain)
    name_end = np.cumsum(document.name_length)
    streams: list = [[] for _ in range(len(plan.stream_length))]
    for j, name in enumerate(plan.stream_name):
        if name >= 0:
            streams[j].append(document.names[name_end[name] - document.name_length[name]: name_end[name]])
    for u, j in enumerate(plan.unit_stream):
        spaced = document.units[unit_end[u] - document.unit_length[u]: unit_end[u]]
        if not streams[j] and plan.stream_name[j] < 0:  # first unit of a name-less stream
            head = document.heads[head_end[u] - document.head_plain[u]: head_end[u]]
            spaced = np.concatenate([head, spaced[document.head_spaced[u]:]])
        streams[j].append(spaced)
    return [np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64) for parts in streams]


def assemble_pages(document: EncodedDocument, config: ViewConfig, bos: int, eos: int,
                   unit_streams: Optional[np.ndarray] = None, plan: Optional[PagePlan] = None) -> list:
    """One example's pages under ``config``: a list of (page_len,) int64 arrays ``<s> ... </s>``
    (``unit_streams``: this example's precomputed streams, see ``plan_pages``; ``plan``: its
    plan under ``config``, when the caller has made it already)."""
    plan = plan_document(document, config, unit_streams) if plan is None else plan
    streams = stream_ids(document, plan)
    placeholder = np.asarray(config.placeholder, dtype=np.int64)
    return [
        np.concatenate([[bos], streams[j][start: start + length] if j != PLACEHOLDER else placeholder, [eos]])
        .astype(np.int64)
        for j, start, length in zip(plan.page_stream, plan.page_start, plan.page_length)
    ]


def raw_document_view(document, config: ViewConfig, locality: Optional[str] = None, **settings) -> ViewConfig:
    """The view a raw document (``readers.example_from_raw``'s input) is read with: ``config`` with
    the view ``locality`` and the ``settings`` given (None: ``config``'s). A plain string has no
    sections or source documents, so a structured view it was not given explicitly becomes
    ``spatial``."""
    config = replace(config, **{k: v for k, v in {"view": locality, **settings}.items() if v is not None})
    if isinstance(document, str) and locality is None and config.view in STRUCTURED_VIEWS:
        return replace(config, view="spatial")
    return config
