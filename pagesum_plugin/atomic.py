"""Files that appear whole or not at all.

A file that a later step reads is written under a temporary name beside its place and moved
into place only when complete (``os.replace`` is atomic within a file system): a reader never
sees half of it, and a failed or killed run leaves no half-written file behind.
"""

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """The temporary path to write ``path`` to (``name.partial.suffix``: a writer that reads the
    format from the suffix still sees it); moved to ``path`` when the block succeeds, removed
    when it fails."""
    path = Path(path)
    partial = path.with_name(f"{path.stem}.partial{path.suffix}")
    try:
        yield partial
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)


def write_atomically(path: str | Path, text: str) -> None:
    """A UTF-8 text file, whole or not at all."""
    with atomic_path(path) as partial:
        partial.write_text(text, encoding="utf-8")
