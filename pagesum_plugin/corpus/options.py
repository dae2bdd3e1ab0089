"""What a user picks when making or reading a corpus: the input formats, the tokenizers, the
views and a view's settings (``ViewConfig``, the default view that ``meta.json`` records).

The module imports nothing but the standard library, so that a command's argument parser can
offer these names and defaults without importing torch, fairseq or NLTK (``pagesum_commands``).
The modules that do the work import them from here: ``readers`` (formats), ``tokenizers``,
``views`` and ``format`` (``CorpusMeta``'s default view and summary length).
"""

from dataclasses import dataclass

INPUT_FORMATS = ("jsonl", "arxiv", "pubmed", "govreport", "multinews", "aclsum")
TOKENIZERS = ("gpt2", "sentencepiece")
VIEWS = ("spatial", "discourse", "document", "token", "flat", "documents", "segments")
SPATIAL_SPLITS = ("even", "authors")
MAX_SUMMARY_TOKENS = 1024  # per summary, <s> and </s> included


@dataclass(frozen=True)
class ViewConfig:
    view: str = "spatial"
    num_pages: int = 7  # spatial, token: pages per example
    max_pages: int = 8  # discourse, document: at most this many pages
    max_page_tokens: int = 1024  # per page, <s> and </s> included
    max_source_tokens: int = 4096  # flat, documents: the whole input, specials included
    max_segment_tokens: int = 768  # segments: per segment, specials included
    spatial_split: str = "authors"  # spatial: "authors" (n // k, the rest on the last page) or "even"
    placeholder: tuple = ()  # page views: ids of a filler page; when set, every example gets exactly
    #                          its page limit of pages, missing ones filled (the authors' "." pages)

    def __post_init__(self):
        if self.view not in VIEWS:
            raise ValueError(f"unknown view {self.view!r}; choose from {', '.join(VIEWS)}")
        if self.num_pages < 1 or self.max_pages < 1:
            raise ValueError("num_pages and max_pages must be at least 1")
        if min(self.max_page_tokens, self.max_source_tokens, self.max_segment_tokens) < 3:
            raise ValueError("a page must leave room for <s>, one token and </s>")
        if self.spatial_split not in SPATIAL_SPLITS:
            raise ValueError(f"unknown spatial split {self.spatial_split!r}; choose from {', '.join(SPATIAL_SPLITS)}")
        if self.placeholder and self.view not in ("spatial", "discourse", "document"):
            raise ValueError(f"placeholder pages fill a page limit; the {self.view} view has none")

    @property
    def page_limit(self) -> int:
        """Most pages per example (spatial: num_pages; discourse, document: max_pages)."""
        return self.num_pages if self.view == "spatial" else self.max_pages

    @property
    def window(self) -> int:
        """Content ids a page may hold (specials excluded)."""
        if self.view == "flat":
            return self.max_source_tokens - 2
        if self.view == "segments":
            return self.max_segment_tokens - 2
        return self.max_page_tokens - 2
