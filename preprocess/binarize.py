"""Streaming, parallel binarization of one split into the paged data directory.

The main process reads raw records (cheap) and hands chunks of them to worker
processes, which parse, page, tokenize and map to dictionary ids (costly). At most a
few chunks are in flight, and results are written as they come back, in input order:
memory stays flat however large the corpus is, and the output does not depend on the
number of workers.
"""

import multiprocessing
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from preprocess.errors import InputError
from preprocess.paging import PagingConfig, encode_page_tokens, encode_summary
from preprocess.readers import Record, iter_records, parse_record

CHUNK_SIZE = 16  # records per task: large enough to amortize inter-process traffic
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class JobSettings:
    """Everything a worker needs to rebuild its tokenizer and dictionary."""

    input_format: str
    paging: PagingConfig
    max_summary_tokens: int
    tokenizer_name: str
    tokenizer_files: dict
    dict_path: str
    skip_invalid: bool


@dataclass
class EncodedExample:
    id: str
    reference: str
    pages: list[np.ndarray]  # each (page_len,)
    summary: np.ndarray  # (summary_len,)
    source_tokens: int
    lost_tokens: int
    truncated_pages: int
    dropped_pages: int
    summary_lost_tokens: int


@dataclass
class Skipped:
    reason: str
    message: str


@dataclass
class SplitStats:
    """Corpus statistics of one split, as reported in meta.json and on the console."""

    examples: int = 0
    pages: int = 0
    max_pages_per_example: int = 0
    truncated_pages: int = 0
    dropped_pages: int = 0
    source_tokens: int = 0
    lost_tokens: int = 0
    summaries_truncated: int = 0
    summary_tokens_lost: int = 0
    skipped: Counter = field(default_factory=Counter)

    def add(self, example: EncodedExample) -> None:
        self.examples += 1
        self.pages += len(example.pages)
        self.max_pages_per_example = max(self.max_pages_per_example, len(example.pages))
        self.truncated_pages += example.truncated_pages
        self.dropped_pages += example.dropped_pages
        self.source_tokens += example.source_tokens
        self.lost_tokens += example.lost_tokens
        self.summaries_truncated += example.summary_lost_tokens > 0
        self.summary_tokens_lost += example.summary_lost_tokens

    def as_dict(self) -> dict:
        return {
            "examples": self.examples,
            "pages": self.pages,
            "pages_per_example_mean": round(self.pages / max(self.examples, 1), 4),
            "pages_per_example_max": self.max_pages_per_example,
            "share_pages_truncated": round(self.truncated_pages / max(self.pages, 1), 6),
            "pages_dropped_over_max_pages": self.dropped_pages,
            "source_tokens": self.source_tokens,
            "share_source_tokens_lost": round(self.lost_tokens / max(self.source_tokens, 1), 6),
            "share_summaries_truncated": round(self.summaries_truncated / max(self.examples, 1), 6),
            "summary_tokens_lost": self.summary_tokens_lost,
            "skipped": dict(sorted(self.skipped.items())),
            "skipped_total": sum(self.skipped.values()),
        }

    def report(self, split: str) -> str:
        stats = self.as_dict()
        skipped = ", ".join(f"{reason}: {n}" for reason, n in stats["skipped"].items()) or "none"
        return (
            f"{split}: {stats['examples']} examples, {stats['pages']} pages "
            f"(per example: mean {stats['pages_per_example_mean']:.2f}, max {stats['pages_per_example_max']}); "
            f"pages truncated {100 * stats['share_pages_truncated']:.2f}%, "
            f"source tokens lost {100 * stats['share_source_tokens_lost']:.2f}%, "
            f"summaries truncated {100 * stats['share_summaries_truncated']:.2f}%; skipped: {skipped}"
        )


# --------------------------------------------------------------------------- workers

_WORKER: dict = {}


def init_worker(settings: JobSettings) -> None:
    """Build this process's tokenizer and dictionary once."""
    from fairseq.data import Dictionary

    from preprocess.tokenizers import build_tokenizer

    torch.set_num_threads(1)
    _WORKER["settings"] = settings
    _WORKER["tokenizer"] = build_tokenizer(settings.tokenizer_name, **settings.tokenizer_files)
    _WORKER["dictionary"] = Dictionary.load(settings.dict_path)


def encode_record(record: Record) -> EncodedExample | Skipped:
    settings: JobSettings = _WORKER["settings"]
    tokenizer, dictionary = _WORKER["tokenizer"], _WORKER["dictionary"]
    try:
        example = parse_record(record, settings.input_format)
        paged = encode_page_tokens(example, settings.paging, tokenizer, dictionary)
        if not paged.pages:
            raise InputError(record.path, record.line, None, "empty_document", "the document has no tokens")
    except InputError as error:
        if settings.skip_invalid:
            return Skipped(error.reason, str(error))
        raise
    summary, summary_lost = encode_summary(example.summary, settings.max_summary_tokens, tokenizer, dictionary)
    dtype = np.uint16 if len(dictionary) < 65500 else np.int32  # compact transfer between processes
    return EncodedExample(
        id=example.id,
        reference=_WHITESPACE.sub(" ", example.summary).strip(),
        pages=[page.numpy().astype(dtype) for page in paged.pages],
        summary=summary.numpy().astype(dtype),
        source_tokens=paged.source_tokens,
        lost_tokens=paged.lost_tokens,
        truncated_pages=paged.truncated_pages,
        dropped_pages=paged.dropped_pages,
        summary_lost_tokens=summary_lost,
    )


def encode_chunk(records: list[Record]) -> list[EncodedExample | Skipped]:
    return [encode_record(record) for record in records]


# --------------------------------------------------------------------------- ordered, bounded map


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def ordered_map(function: Callable, chunks: Iterable[list], workers: int, initializer: Callable,
                initargs: tuple) -> Iterator:
    """``map(function, chunks)`` over ``workers`` processes, in order, with a bounded
    number of chunks in flight (``Pool.imap`` would read the whole input ahead)."""
    if workers <= 1:
        initializer(*initargs)
        yield from map(function, chunks)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with context.Pool(workers, initializer=initializer, initargs=initargs) as pool:
        pending: deque = deque()
        for chunk in chunks:
            pending.append(pool.apply_async(function, (chunk,)))
            if len(pending) >= 4 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


# --------------------------------------------------------------------------- one split


def binarize_split(split_path: str | Path, split: str, destdir: str | Path, settings: JobSettings,
                   vocab_size: int, workers: int = 1, progress: bool = True,
                   on_skip: Callable[[Skipped], None] | None = None) -> SplitStats:
    """Write ``destdir/{split}.pages.*``, ``.page_counts.npy``, ``.summary.*``, ``.ids.txt``
    and ``.reference.txt``; return the split's statistics."""
    from fairseq.data import indexed_dataset
    from tqdm import tqdm

    destdir = Path(destdir)
    prefix = destdir / split
    pages_builder = indexed_dataset.make_builder(f"{prefix}.pages.bin", impl="mmap", vocab_size=vocab_size)
    summary_builder = indexed_dataset.make_builder(f"{prefix}.summary.bin", impl="mmap", vocab_size=vocab_size)
    stats, page_counts = SplitStats(), []
    records = iter_records(split_path, settings.input_format)
    results = ordered_map(encode_chunk, _chunks(records, CHUNK_SIZE), workers, init_worker, (settings,))
    with open(f"{prefix}.ids.txt", "w", encoding="utf-8") as ids_file, \
            open(f"{prefix}.reference.txt", "w", encoding="utf-8") as reference_file, \
            tqdm(desc=split, unit=" examples", disable=not progress, dynamic_ncols=True) as bar:
        for chunk in results:
            for result in chunk:
                bar.update(1)
                if isinstance(result, Skipped):
                    stats.skipped[result.reason] += 1
                    if on_skip:
                        on_skip(result)
                    continue
                for page in result.pages:
                    pages_builder.add_item(torch.from_numpy(page.astype(np.int64)))
                summary_builder.add_item(torch.from_numpy(result.summary.astype(np.int64)))
                page_counts.append(len(result.pages))
                ids_file.write(result.id + "\n")
                reference_file.write(result.reference + "\n")
                stats.add(result)
    pages_builder.finalize(f"{prefix}.pages.idx")
    summary_builder.finalize(f"{prefix}.summary.idx")
    np.save(f"{prefix}.page_counts.npy", np.asarray(page_counts, dtype=np.int64))
    return stats


def iter_training_sentences(split_path: str | Path, input_format: str, skip_invalid: bool) -> Iterator[str]:
    """Sentences of the documents and summaries of a split, to train sentencepiece on."""
    from preprocess.sentences import split_sentences

    for record in iter_records(split_path, input_format):
        try:
            example = parse_record(record, input_format)
        except InputError:
            if skip_invalid:
                continue  # counted when the split is binarized
            raise
        for unit in example.units:
            if unit.name:
                yield unit.name
            yield from unit.sentence_list()
        yield from split_sentences(example.summary)
