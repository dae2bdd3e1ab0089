"""Decoding outputs that join: one line per example, in input order, keyed by input id.

fairseq-generate hands over batches sorted by length, not by input order. ``InputOrderFile``
holds results until all the examples before them are known, then appends them to a
temporary file beside the output (``NAME.partial.EXT``), opened for each write and closed
again, so nothing stays open between batches. When the last example is in, the file is
renamed to its name; a run that ends before (an error, an interrupt) removes it, so the
output is either complete or, with the file that was there before, untouched.
"""

import atexit
import json
import logging
import os
from pathlib import Path
from typing import Dict, List

from ..atomic import partial_path

logger = logging.getLogger(__name__)


class InputOrderFile:
    """Lines keyed by example index 0..total-1, written in index order as they become
    contiguous; the file takes its name when all ``total`` are written."""

    def __init__(self, path: str, total: int):
        self.path = Path(path)
        self.partial = partial_path(self.path)
        self.total = total
        self.partial.write_text("", encoding="utf-8")
        self.pending: Dict[int, str] = {}
        self.next_index = 0
        atexit.register(self.discard_if_incomplete)
        self._finish_if_complete()  # an empty split is complete at once

    def add(self, index: int, line: str) -> None:
        if index < self.next_index or index in self.pending:
            raise ValueError(f"example {index} was decoded twice")
        self.pending[index] = line
        ready: List[str] = []
        while self.next_index in self.pending:
            ready.append(self.pending.pop(self.next_index))
            self.next_index += 1
        if ready:
            with open(self.partial, "a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in ready)
        self._finish_if_complete()

    @property
    def complete(self) -> bool:
        return self.next_index == self.total

    def _finish_if_complete(self) -> None:
        if self.complete:
            os.replace(self.partial, self.path)
            atexit.unregister(self.discard_if_incomplete)

    def discard_if_incomplete(self) -> None:
        """At exit: a run that did not decode every example leaves no output behind."""
        atexit.unregister(self.discard_if_incomplete)
        if not self.complete:
            self.partial.unlink(missing_ok=True)
            decoded = self.next_index + len(self.pending)
            logger.error(f"{self.path}: not written: the run ended with {decoded} of {self.total} examples decoded")


def page_weights_record(example_id: str, text: str, symbols: List[str], page_weights) -> str:
    """One JSON line: the best hypothesis of an example, its tokens and its page weights
    (steps x pages, or None for a model without them); ``text`` is exactly the hypotheses
    file's line."""
    return json.dumps({
        "id": example_id,
        "hypothesis": text,
        "tokens": symbols,
        "page_weights": None if page_weights is None else [[round(w, 6) for w in row] for row in page_weights.tolist()],
    })
