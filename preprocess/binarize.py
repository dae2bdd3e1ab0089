"""Streaming, parallel binarization of one split into the data directory, written whole.

The main process reads raw records (cheap) and hands chunks of them to worker
processes, which parse, page, tokenize and map to dictionary ids (costly). At most a
few chunks are in flight, and results are written as they come back, in input order:
memory stays flat however large the corpus is, and the output does not depend on the
number of workers. The whole directory is written into a temporary sibling and moved into
place at the end (``staged_directory``), so a failed run leaves nothing behind.
"""

import multiprocessing
import re
import shutil
import sys
import tempfile
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from fairseq.data import Dictionary
from tqdm import tqdm

from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.corpus.errors import BLANK_LINE, BlankLine, InputError
from pagesum_plugin.corpus.format import META_FILE, CorpusFormatError, EncodedDocument, SplitStructure
from pagesum_plugin.corpus.storage import SplitWriter
from pagesum_plugin.corpus.readers import Example, ExampleIds, Record, iter_records, parse_record
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.corpus.tokenizers import build_tokenizer
from pagesum_plugin.corpus.views import ViewConfig, plan_pages

CHUNK_SIZE = 16  # records per task: large enough to amortize inter-process traffic
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class JobSettings:
    """Everything a worker needs to rebuild its tokenizer and dictionary."""

    input_format: str
    tokenizer_name: str
    tokenizer_files: dict
    dict_path: str
    skip_invalid: bool


@dataclass
class EncodedExample:
    id: str
    reference: str
    document: EncodedDocument
    summary: np.ndarray  # (summary_len,) ids, no specials
    assumed: tuple[str, ...] = ()  # what the reader assumed about this example
    path: str = ""  # where the example was read
    line: int = 0


@dataclass
class Skipped:
    reason: str
    message: str


@dataclass
class SplitStats:
    """Corpus statistics of one split under its default view, as reported in meta.json and
    on the console. They come from the same view code that the dataset pages with."""

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
    assumed: Counter = field(default_factory=Counter)

    @classmethod
    def of_split(cls, structure: SplitStructure, summary_lengths: np.ndarray, view: ViewConfig,
                 max_summary_tokens: int, skipped: Counter, assumed: Counter) -> "SplitStats":
        plan = plan_pages(structure, view)
        summary_lost = np.maximum(summary_lengths - (max_summary_tokens - 2), 0)
        return cls(
            examples=structure.num_examples,
            pages=int(plan.page_counts.sum()),
            max_pages_per_example=int(plan.page_counts.max(initial=0)),
            truncated_pages=int(plan.page_truncated.sum()),
            dropped_pages=int(plan.dropped_pages.sum()),
            source_tokens=int(plan.source_tokens.sum()),
            lost_tokens=int((plan.source_tokens - plan.kept_tokens).sum()),
            summaries_truncated=int((summary_lost > 0).sum()),
            summary_tokens_lost=int(summary_lost.sum()),
            skipped=skipped,
            assumed=assumed,
        )

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
            "assumed": dict(sorted(self.assumed.items())),
        }

    def report(self, split: str) -> str:
        stats = self.as_dict()
        skipped = ", ".join(f"{reason}: {n}" for reason, n in stats["skipped"].items()) or "none"
        assumed = "".join(f"; assumed {reason}: {n}" for reason, n in stats["assumed"].items())
        return (
            f"{split}: {stats['examples']} examples, {stats['pages']} pages "
            f"(per example: mean {stats['pages_per_example_mean']:.2f}, max {stats['pages_per_example_max']}); "
            f"pages truncated {100 * stats['share_pages_truncated']:.2f}%, "
            f"source tokens lost {100 * stats['share_source_tokens_lost']:.2f}%, "
            f"summaries truncated {100 * stats['share_summaries_truncated']:.2f}%; skipped: {skipped}{assumed}"
        )


# --------------------------------------------------------------------------- workers

_WORKER: dict = {}


def init_worker(settings: JobSettings) -> None:
    """Build this process's codec once."""
    torch.set_num_threads(1)
    _WORKER["settings"] = settings
    tokenizer = build_tokenizer(settings.tokenizer_name, **settings.tokenizer_files)
    _WORKER["codec"] = TextCodec(tokenizer, Dictionary.load(settings.dict_path))


def parse(record: Record) -> Example | Skipped | InputError:
    """The record's example, or why it is skipped, or (without --skip-invalid) its error, raised
    by ``encode_chunk`` in input order."""
    settings: JobSettings = _WORKER["settings"]
    try:
        return parse_record(record, settings.input_format)
    except BlankLine as blank:
        return Skipped(blank.reason, str(blank))
    except InputError as error:
        return Skipped(error.reason, str(error)) if settings.skip_invalid else error


def encode_chunk(records: list[Record]) -> list[EncodedExample | Skipped]:
    """Parse every record of the chunk, then encode all of its examples in one batch. The first
    bad record, in input order, stops the run, as when records were encoded one at a time."""
    parsed = [parse(record) for record in records]
    examples = [example for example in parsed if isinstance(example, Example)]
    encoded = iter(_WORKER["codec"].encode_examples(examples))
    results = []
    for record, item in zip(records, parsed):
        if isinstance(item, InputError):
            raise item
        results.append(_encoded(record, item, *next(encoded)) if isinstance(item, Example) else item)
    return results


def _encoded(record: Record, example: Example, document: EncodedDocument | None,
             summary: np.ndarray) -> EncodedExample | Skipped:
    if document is None:
        error = InputError(record.path, record.line, None, "empty_document", "the document has no tokens")
        if _WORKER["settings"].skip_invalid:
            return Skipped(error.reason, str(error))
        raise error
    return EncodedExample(
        id=example.id,
        reference=_WHITESPACE.sub(" ", example.summary).strip(),
        document=document,
        summary=summary,
        assumed=example.assumed,
        path=record.path,
        line=record.line,
    )


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


# --------------------------------------------------------------------------- the data directory, whole


@contextmanager
def staged_directory(destdir: str | Path) -> Iterator[Path]:
    """Write a data directory into a temporary sibling and move it into place only when
    the block succeeds: a failed run leaves no half-written output behind."""
    destdir = Path(destdir)
    if destdir.exists() and any(destdir.iterdir()) and not (destdir / META_FILE).exists():
        raise CorpusFormatError(f"{destdir} exists and is not a data directory: choose a new --destdir")
    destdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destdir.name}.", dir=destdir.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if destdir.exists():
        shutil.rmtree(destdir)
    staging.rename(destdir)


# --------------------------------------------------------------------------- one split


def binarize_split(split_path: str | Path, split: str, destdir: str | Path, settings: JobSettings,
                   vocab_size: int, view: ViewConfig, max_summary_tokens: int, workers: int = 1,
                   progress: bool = True, on_skip: Callable[[Skipped], None] | None = None) -> SplitStats:
    """Write one split of the corpus into ``destdir`` (layout: ``pagesum_plugin.corpus.format``)
    and return its statistics under the default ``view``."""
    writer = SplitWriter(destdir, split, vocab_size)
    skipped, assumed, ids = Counter(), Counter(), ExampleIds(settings.input_format)
    records = iter_records(split_path, settings.input_format)
    results = ordered_map(encode_chunk, _chunks(records, CHUNK_SIZE), workers, init_worker, (settings,))
    with tqdm(desc=split, unit=" examples", disable=not progress, dynamic_ncols=True,
              mininterval=0.1 if sys.stderr.isatty() else 60) as bar:  # in a log file: a redraw a minute at most
        for chunk in results:
            for result in chunk:
                bar.update(1)
                if isinstance(result, EncodedExample):
                    result = _unique(result, ids, settings.skip_invalid)
                if isinstance(result, Skipped):
                    skipped[result.reason] += 1
                    if on_skip and result.reason != BLANK_LINE:
                        on_skip(result)
                    continue
                assumed.update(result.assumed)
                writer.add(result.id, result.reference, result.document, result.summary)
    writer.close()
    structure, summary_lengths = writer.structure(), writer.summary_lengths()
    return SplitStats.of_split(structure, summary_lengths, view, max_summary_tokens, skipped, assumed)


def _unique(example: EncodedExample, ids: ExampleIds, skip_invalid: bool) -> EncodedExample | Skipped:
    """The example, if no earlier one of the split has its id (checked here, in input order)."""
    try:
        ids.add(example.id, example.path, example.line)
    except InputError as error:
        if skip_invalid:
            return Skipped(error.reason, str(error))
        raise
    return example


def iter_training_sentences(split_path: str | Path, input_format: str, skip_invalid: bool) -> Iterator[str]:
    """Sentences of the documents and summaries of a split, to train sentencepiece on."""
    for record in iter_records(split_path, input_format):
        try:
            example = parse_record(record, input_format)
        except BlankLine:
            continue
        except InputError:
            if skip_invalid:
                continue  # counted when the split is binarized
            raise
        for unit in example.units:
            if unit.name:
                yield unit.name
            yield from unit.sentence_list()
        yield from split_sentences(example.summary)
