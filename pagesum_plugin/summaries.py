"""What ``summarize()`` returns: the summaries in input order, and what it did not read."""

from dataclasses import dataclass
from typing import Dict

from .corpus.errors import EmptyDocument, MalformedDocument  # noqa: F401  (what summarize() raises on a document)


@dataclass(frozen=True)
class Reading:
    """How much of one document the view reads."""

    tokens: int  # content tokens of the whole document
    read: int  # those that reach the pages
    pages_dropped: int  # sections or source documents beyond the page limit

    @property
    def dropped(self) -> int:
        return self.tokens - self.read

    def __str__(self) -> str:
        beyond = f", {self.pages_dropped:,} sections or documents beyond the page limit" if self.pages_dropped else ""
        return f"read {self.read:,} of {self.tokens:,} tokens ({self.dropped:,} not read{beyond})"


class Summaries(list):
    """The summaries, in input order (``None`` in place of a skipped document), with what was
    not read: ``truncated`` maps the index of every document the view cut to its ``Reading``,
    ``skipped`` the index of every skipped document to the reason."""

    def __init__(self, items=()):
        super().__init__(items)
        self.truncated: Dict[int, Reading] = {}
        self.skipped: Dict[int, str] = {}
