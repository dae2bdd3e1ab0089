"""Decoding outputs that join: one line per example, in input order, keyed by input id.

fairseq-generate hands over batches sorted by length, not by input order. ``InputOrderFile``
holds results until all the examples before them are known, then appends them; the file is
opened for each write and closed again, so nothing stays open between batches.
"""

import json
from pathlib import Path
from typing import Dict, List


class InputOrderFile:
    """Lines keyed by example index, written in index order as they become contiguous."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.path.write_text("", encoding="utf-8")
        self.pending: Dict[int, str] = {}
        self.next_index = 0

    def add(self, index: int, line: str) -> None:
        if index < self.next_index or index in self.pending:
            raise ValueError(f"example {index} was decoded twice")
        self.pending[index] = line
        ready: List[str] = []
        while self.next_index in self.pending:
            ready.append(self.pending.pop(self.next_index))
            self.next_index += 1
        if ready:
            with open(self.path, "a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in ready)


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
