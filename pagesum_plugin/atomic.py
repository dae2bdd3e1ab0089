"""Files that appear whole or not at all.

A file that a later step reads is written under a temporary name beside its place and moved
into place only when complete (``os.replace`` is atomic within a file system): a reader never
sees half of it, and a failed or killed run leaves no half-written file behind.
"""

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def partial_path(path: str | Path) -> Path:
    """Where ``path`` is written before it is complete: beside it, its extension kept for the
    tools that read the format from the name (``fig.partial.png``, ``labels.partial.npy``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.partial{path.suffix}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """The temporary path to write ``path`` to (``partial_path``); it replaces ``path`` when the
    block succeeds and is removed when it fails, so a failure leaves the old file, or none."""
    partial = partial_path(path)
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


@contextmanager
def staged_files(out_dir: str | Path) -> Iterator[Path]:
    """A temporary folder beside ``out_dir`` to write files into; when the block succeeds they
    move into ``out_dir`` (created if needed; its other files stay), when it fails none of them
    appears."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        yield staging
        out_dir.mkdir(exist_ok=True)
        for item in sorted(staging.iterdir()):
            os.replace(item, out_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
