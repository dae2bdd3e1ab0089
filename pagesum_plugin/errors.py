"""Mistakes a user makes, each reported in one line (``registration.py`` prints them so from
fairseq's own commands): the error classes that say what to change, and the checks that need
nothing above the library's lowest layer."""

import os
import zipfile


class SettingError(ValueError):
    """A command-line setting that cannot be used, named as the user typed it."""


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used, with the reason in words."""


def written_by_torch_save(path: str) -> bool:
    """torch.save writes a zip archive (or, before torch 1.6, a pickle: protocol 2 opens with 0x80)."""
    with open(path, "rb") as file:
        return zipfile.is_zipfile(file) or file.seek(0) == 0 and file.read(1) == b"\x80"


def check_checkpoint_file(path: str) -> None:
    """Refuse, in one line, a checkpoint path that is missing or not a file torch.save wrote."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    if not written_by_torch_save(path):
        raise CheckpointError(f"{path}: not a checkpoint (fairseq-train and pagesum-convert write them with "
                              f"torch.save; this file is something else)")
