"""Pages: how an ``Example`` becomes the page tensors that the model encodes one by one.

Localities (section 3 of the PageSum paper):

* ``spatial``: the example's sentences are split into ``num_pages`` contiguous pages
  with (almost) the same number of sentences; each page is truncated.
* ``discourse``: one page per section, the section name prepended; at most
  ``max_pages`` pages, each truncated.
* ``document``: one page per source document of a cluster; at most ``max_pages``.

``encode_pages`` is the single place where pages are made: the binarizer and the
Python ``summarize()`` API both call it, so training and inference see the same pages.
"""

from dataclasses import dataclass

import torch

from preprocess.readers import Example

LOCALITIES = ("spatial", "discourse", "document")


@dataclass(frozen=True)
class PagingConfig:
    locality: str = "spatial"
    num_pages: int = 7  # spatial: pages per example (7 x 1024 tokens on arXiv in the paper)
    max_pages: int = 8  # discourse / document: at most this many pages
    max_page_tokens: int = 1024  # per page, <s> and </s> included

    def __post_init__(self):
        if self.locality not in LOCALITIES:
            raise ValueError(f"unknown locality {self.locality!r}; choose from {LOCALITIES}")
        if self.num_pages < 1 or self.max_pages < 1:
            raise ValueError("num_pages and max_pages must be >= 1")
        if self.max_page_tokens < 3:
            raise ValueError("max_page_tokens must leave room for <s>, one token and </s>")


@dataclass
class PagedTokens:
    """The pages of one example, with what truncation cost."""

    pages: list[torch.LongTensor]  # each (page_len,) = [bos] + content + [eos]
    source_tokens: int = 0  # content tokens before any truncation (dropped pages included)
    lost_tokens: int = 0  # content tokens cut by page truncation or by max_pages
    truncated_pages: int = 0  # written pages that were cut
    dropped_pages: int = 0  # pages beyond max_pages


class Pager:
    """Turns an example into page texts, following the configured locality."""

    def __init__(self, config: PagingConfig):
        self.config = config

    def page_texts(self, example: Example) -> list[str]:
        """All pages in document order, including those beyond ``max_pages``."""
        if self.config.locality == "spatial":
            return self._spatial(example)
        if self.config.locality == "discourse":
            return [f"{unit.name}: {unit.text}" if unit.name else unit.text for unit in example.units]
        return [unit.text for unit in example.units]

    def page_limit(self) -> int:
        return self.config.num_pages if self.config.locality == "spatial" else self.config.max_pages

    def _spatial(self, example: Example) -> list[str]:
        sentences = [s for unit in example.units for s in unit.sentence_list()]
        num_pages = min(self.config.num_pages, len(sentences))
        # Contiguous chunks whose sizes differ by at most one sentence, larger ones first
        # (the rule of numpy.array_split).
        base, extra = divmod(len(sentences), num_pages) if num_pages else (0, 0)
        pages, start = [], 0
        for j in range(num_pages):
            end = start + base + (1 if j < extra else 0)
            pages.append(" ".join(sentences[start:end]))
            start = end
        return pages


def encode_page_tokens(example: Example, config: PagingConfig, tokenizer, dictionary) -> PagedTokens:
    """Pages of ``example`` as dictionary ids, with truncation statistics."""
    pager = Pager(config)
    content_limit = config.max_page_tokens - 2
    result = PagedTokens(pages=[])
    for j, text in enumerate(pager.page_texts(example)):
        ids = [dictionary.index(symbol) for symbol in tokenizer.encode(text)]
        result.source_tokens += len(ids)
        if not ids:
            continue  # a page without tokens is never written (it would give NaN attention)
        if len(result.pages) >= pager.page_limit():
            result.dropped_pages += 1
            result.lost_tokens += len(ids)
            continue
        if len(ids) > content_limit:
            result.truncated_pages += 1
            result.lost_tokens += len(ids) - content_limit
            ids = ids[:content_limit]
        result.pages.append(torch.LongTensor([dictionary.bos()] + ids + [dictionary.eos()]))
    return result


def encode_pages(example: Example, config: PagingConfig, tokenizer, dictionary) -> list[torch.LongTensor]:
    """The page tensors of ``example``, each ``[bos] + page ids + [eos]`` (page_len,),
    exactly as the binarizer writes them."""
    return encode_page_tokens(example, config, tokenizer, dictionary).pages


def encode_summary(summary: str, max_tokens: int, tokenizer, dictionary) -> tuple[torch.LongTensor, int]:
    """``[bos] + summary ids + [eos]`` truncated to ``max_tokens``; also the ids cut."""
    ids = [dictionary.index(symbol) for symbol in tokenizer.encode(summary)]
    kept = ids[: max_tokens - 2]
    return torch.LongTensor([dictionary.bos()] + kept + [dictionary.eos()]), len(ids) - len(kept)
